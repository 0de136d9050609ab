"""The errors of contract section 9: each names the call, shows what was found and says how to fix it."""

from __future__ import annotations

import numpy as np
import pytest

import diffinterface as di

FD = di.AutoFiniteDiff()


def vec(x):
    return np.concatenate([np.sin(x), x[:1]])


def scalar(x):
    return np.sum(x**2)


def test_gradient_of_a_vector_output_points_to_jacobian():
    with pytest.raises(
        ValueError,
        match=r"^gradient\(AutoFiniteDiff\(\), f, x\): gradient needs f\(x\) to be a scalar, but f\(x\) has shape \(4,\); for a vector output use jacobian",
    ):
        di.gradient(FD, vec, np.ones(3))
    with pytest.raises(ValueError, match=r"hessian needs f\(x\) to be a scalar, but f\(x\) has shape \(4,\)"):
        di.hessian(FD, vec, np.ones(3))
    with pytest.raises(ValueError, match=r"hvp needs f\(x\) to be a scalar"):
        di.hvp(FD, vec, np.ones(3), np.ones(3))


def test_derivative_needs_a_scalar_x():
    with pytest.raises(
        ValueError,
        match=r"derivative\(AutoFiniteDiff\(\), f, x\): derivative needs a scalar x .* got x of shape \(3,\); for array inputs use jacobian or pushforward",
    ):
        di.derivative(FD, np.sin, np.ones(3))
    with pytest.raises(ValueError, match=r"second_derivative needs a scalar x .*use hessian or hvp"):
        di.second_derivative(FD, np.sin, np.ones(3))


@pytest.mark.parametrize("x", [np.arange(3), 1, np.array([True, False]), np.array(["1.0", "2.0"])])
def test_non_floating_x_is_a_type_error_saying_to_pass_floats(x):
    with pytest.raises(TypeError, match=r"gradient\(AutoFiniteDiff\(\), f, x\): x has dtype .*pass floats"):
        di.gradient(FD, scalar, x)


def test_x_of_an_unknown_type():
    with pytest.raises(TypeError, match=r"x must be a float, a numpy array, a jax array or a torch tensor, got str"):
        di.gradient(FD, scalar, "1.0")
    with pytest.raises(TypeError, match=r"x\[1\] is a str, which is neither an array nor a container"):
        di.gradient(FD, scalar, [1.0, "2.0"])  # a list is a structure (issue 17); its leaves must be arrays


def test_f_not_callable():
    with pytest.raises(TypeError, match=r"^jacobian\(AutoFiniteDiff\(\), f, x\): f must be callable, got ndarray"):
        di.jacobian(FD, np.ones(3), np.ones(3))


@pytest.mark.parametrize("family", ["torch", "jax.numpy"])
def test_a_tangent_of_xs_own_array_type_is_checked_as_any(family):
    """One tangent of x's own array type takes the frontend's short path (as a loop passes it): a wrong
    shape or a complex tangent of a real x is still the call's error naming the argument, and a right one
    gives the derivative (J t = cos(x) t, closed form)."""
    xp = pytest.importorskip(family, reason=f"{family} is not installed")
    x = xp.asarray(np.array([0.1, 0.2, 0.3]))
    with pytest.raises(
        ValueError, match=r"^pushforward\(AutoFiniteDiff\(\), f, x, tx\): tx has shape \(2,\), expected x shape \(3,\)"
    ):
        di.pushforward(FD, xp.sin, x, xp.asarray(np.ones(2)))
    with pytest.raises(ValueError, match=r"^pushforward\(AutoFiniteDiff\(\), f, x, tx\): tx is complex"):
        di.pushforward(FD, xp.sin, x, xp.asarray(np.ones(3) + 1j))
    t = np.array([1.0, -2.0, 0.5])
    got = di.pushforward(FD, xp.sin, x, xp.asarray(t))
    np.testing.assert_allclose(np.asarray(got), np.cos([0.1, 0.2, 0.3]) * t, rtol=1e-4)  # (jnp.asarray: float32)


def test_tangent_of_the_wrong_shape_names_the_argument():
    with pytest.raises(
        ValueError, match=r"^pushforward\(AutoFiniteDiff\(\), f, x, tx\): tx has shape \(2,\), expected x shape \(3,\)"
    ):
        di.pushforward(FD, np.sin, np.ones(3), np.ones(2))
    with pytest.raises(
        ValueError,
        match=r"^pullback\(AutoFiniteDiff\(\), f, x, ty\): ty\[1\] has shape \(3,\), expected f\(x\) shape \(4,\)",
    ):
        di.pullback(FD, vec, np.ones(3), (np.ones(4), np.ones(3)))
    with pytest.raises(
        ValueError, match=r"^hvp\(AutoFiniteDiff\(\), f, x, tx\): tx has shape \(\), expected x shape \(3,\)"
    ):
        di.hvp(FD, scalar, np.ones(3), 1.0)
    with pytest.raises(
        TypeError, match=r"tx must be an array shaped like x \(3,\) \(or a tuple of such arrays for a batch\), got list"
    ):
        di.pushforward(FD, np.sin, np.ones(3), [1.0, 1.0, 1.0])


def test_out_of_the_wrong_shape_or_kind():
    with pytest.raises(
        ValueError, match=r"^gradient\(AutoFiniteDiff\(\), f, x\): out= has shape \(2,\), expected \(3,\)"
    ):
        di.gradient(FD, scalar, np.ones(3), out=np.zeros(2))
    with pytest.raises(
        TypeError, match=r"out= must be a numpy\.ndarray, a torch\.Tensor(, [a-z. ]+)* or a [a-z.]+, got list"
    ):
        di.jacobian(FD, np.sin, np.ones(3), out=[0.0])


def test_out_of_a_jax_array_is_a_type_error():
    jnp = pytest.importorskip("jax.numpy", reason='jax is not installed: pip install "diffinterface[jax]"')
    with pytest.raises(
        TypeError, match=r"out= is a jax array, and jax arrays are immutable; drop out= and use the returned array"
    ):
        di.gradient(FD, lambda x: (x**2).sum(), jnp.ones(3), out=jnp.zeros(3))


def test_contexts_must_be_wrapped():
    with pytest.raises(
        TypeError, match=r"extra argument 0 after x is a ndarray; wrap it as Constant\(value\) .* or Cache\(value\)"
    ):
        di.gradient(FD, lambda x, a: np.sum(a * x), np.ones(3), np.ones(3))


def test_backend_must_be_a_config():
    with pytest.raises(
        TypeError,
        match=r"expected a backend config such as AutoFiniteDiff\(\) or AutoJAX\(\) as first argument, got str",
    ):
        di.gradient("jax", scalar, np.ones(3))
    with pytest.raises(
        TypeError, match=r"SecondOrder backends serve the second-order operators .* for gradient pass one engine config"
    ):
        di.gradient(di.SecondOrder(FD, FD), scalar, np.ones(3))


def test_complex_step_needs_complex_arithmetic():
    def discards_imaginary(x):
        return np.sum(np.real(x) ** 2)

    with pytest.raises(
        TypeError, match=r"method='complex' needs f to compute in complex arithmetic.*use method='central'"
    ):
        di.gradient(di.AutoFiniteDiff(method="complex"), discards_imaginary, np.ones(3))


def test_nan_and_inf_propagate():
    with np.errstate(invalid="ignore"):
        g = di.gradient(FD, lambda x: np.sum(x**2), np.array([np.nan, 1.0, 2.0]))
        j = di.jacobian(FD, np.sin, np.array([np.nan, 1.0, np.inf]))
    assert np.isnan(g).all()  # f is NaN at every evaluated point
    # outputs that are NaN stay NaN; the others keep exact derivatives: a NaN or inf in x_0 does
    # not poison the derivatives of f_1 with respect to x_0 or x_2
    assert np.isnan(j[0]).all() and np.isnan(j[2]).all()
    assert j[1, 0] == 0.0 and j[1, 2] == 0.0 and j[1, 1] == pytest.approx(np.cos(1.0))
