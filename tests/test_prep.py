"""Preparation (contract section 5): prepared calls at new points, strict checks, per-argument reports."""

from __future__ import annotations

import numpy as np
import pytest

import diffinterface as di

FD = di.AutoFiniteDiff()


def f(x, c):
    return c[0] * np.sum(np.sin(x)) + c[1]


def test_a_prep_runs_at_new_points_and_new_constant_values():
    prep = di.prepare_gradient(FD, f, np.zeros(3), di.Constant((1.0, 0.0)))
    for k in range(3):
        x = np.linspace(0, 1, 3) + k
        g = di.gradient(FD, f, x, di.Constant((2.0 + k, 5.0)), prep=prep)
        assert np.allclose(g, (2.0 + k) * np.cos(x), rtol=1e-9)
        y, g2 = di.value_and_gradient(FD, f, x, di.Constant((2.0 + k, 5.0)), prep=prep)
        assert y == pytest.approx((2.0 + k) * np.sum(np.sin(x)) + 5.0) and np.allclose(g2, g)


def test_mismatch_reports_every_argument():
    prep = di.prepare_pushforward(FD, f, np.zeros(3), np.ones(3), di.Constant((1.0, 0.0)))
    with pytest.raises(di.PreparationMismatchError) as info:
        di.pushforward(FD, f, np.zeros(4, dtype=np.float32), np.ones(3), di.Constant((1.0, 0.0)), prep=prep)
    message = str(info.value)
    assert message.startswith(
        "pushforward(AutoFiniteDiff(), f, x, tx): the arguments differ from the ones the prep was made for:"
    )
    assert "  x: prepared for numpy float64 (3,); got numpy float32 (4,)   <- differs" in message
    assert "  tx: prepared for numpy float64 (3,); got numpy float64 (3,)\n" in message
    assert (
        "  contexts[0]: prepared for Constant((Python float, Python float)); got Constant((Python float, Python float))"
        in message
    )
    assert "Prepare again with these arguments (prepare_pushforward), or pass strict=False" in message
    assert isinstance(info.value, ValueError)


def test_mismatch_in_contexts_and_batches():
    prep = di.prepare_pushforward(FD, f, np.zeros(3), (np.ones(3), np.ones(3)), di.Constant((1.0, 0.0)))
    with pytest.raises(
        di.PreparationMismatchError,
        match=r"tx: prepared for \(numpy float64 \(3,\), numpy float64 \(3,\)\); got numpy float64 \(3,\)   <- differs",
    ):
        di.pushforward(FD, f, np.zeros(3), np.ones(3), di.Constant((1.0, 0.0)), prep=prep)
    with pytest.raises(
        di.PreparationMismatchError,
        match=r"contexts\[0\]: prepared for Constant\(\(Python float, Python float\)\); got Cache\(numpy float64 \(2,\)\)   <- differs",
    ):
        di.pushforward(FD, f, np.zeros(3), (np.ones(3), np.ones(3)), di.Cache(np.zeros(2)), prep=prep)
    with pytest.raises(di.PreparationMismatchError, match=r"contexts\[0\]: prepared for Constant.*; got \(nothing\)"):
        di.pushforward(FD, f, np.zeros(3), (np.ones(3), np.ones(3)), prep=prep)


def test_prep_is_for_one_operator_backend_and_function():
    prep = di.prepare_gradient(FD, np.sum, np.zeros(3))
    with pytest.raises(
        di.PreparationMismatchError,
        match=r"^jacobian\(AutoFiniteDiff\(\), f, x\): prep was made by prepare_gradient; use prepare_jacobian for jacobian",
    ):
        di.jacobian(FD, np.sum, np.zeros(3), prep=prep)
    with pytest.raises(
        di.PreparationMismatchError,
        match=r"prep was made for backend AutoFiniteDiff\(\), got AutoFiniteDiff\(method='forward'\)",
    ):
        di.gradient(di.AutoFiniteDiff(method="forward"), np.sum, np.zeros(3), prep=prep)
    with pytest.raises(
        di.PreparationMismatchError,
        match=r"prep was made for function sum at 0x[0-9a-f]+, got prod at 0x[0-9a-f]+; a prep serves the function object it was made for",
    ):
        di.gradient(FD, np.prod, np.zeros(3), prep=prep)
    with pytest.raises(TypeError, match=r"prep must come from prepare_gradient, got dict"):
        di.gradient(FD, np.sum, np.zeros(3), prep={})


def test_value_forms_share_the_prep_of_their_operator():
    x = np.array([0.3, 0.4])
    prep = di.prepare_hessian(FD, lambda x: np.sum(x**3), x)
    y, g, h = di.value_gradient_and_hessian(FD, prep.f, x, prep=prep)
    assert y == pytest.approx(np.sum(x**3)) and np.allclose(g, 3 * x**2) and np.allclose(h, np.diag(6 * x), atol=1e-6)


def test_bound_methods_reuse_their_prep():
    class Model:
        def __init__(self):
            self.scale = 2.0

        def loss(self, x):
            return self.scale * np.sum(x**2)

    m = Model()
    prep = di.prepare_gradient(FD, m.loss, np.zeros(2))  # m.loss is a new object at every access
    assert np.allclose(di.gradient(FD, m.loss, np.ones(2), prep=prep), [4.0, 4.0])


def test_strict_false_skips_the_argument_check():
    prep = di.prepare_derivative(FD, np.sin, np.asarray(0.0), strict=False)
    assert di.derivative(FD, np.sin, 0.5, prep=prep) == pytest.approx(np.cos(0.5))
    strict = di.prepare_derivative(FD, np.sin, np.asarray(0.0))
    with pytest.raises(di.PreparationMismatchError, match=r"x: prepared for numpy float64 \(\); got Python float"):
        di.derivative(FD, np.sin, 0.5, prep=strict)


def test_prep_repr_says_what_it_was_made_for():
    prep = di.prepare_pullback(FD, np.sin, np.zeros(3), np.ones(3))
    assert repr(prep) == "Prep(pullback, AutoFiniteDiff(), made for x: numpy float64 (3,), ty: numpy float64 (3,))"


@pytest.mark.parametrize("engine", ["jax", "torch"])
def test_numpy_inputs_get_numpy_results_at_every_prepared_call(engine):
    """An engine that computes in its own arrays converts a numpy x's results back to numpy; the
    prepared path remembers that conversion at its first call (one call instead of the family
    lookups). Closed forms: d/dx sum(sin(x)^2) = sin(2x), along t: sin(2x) . t; AutoSparse's
    Jacobian of sin(x) stays a scipy sparse matrix (the conversion is not remembered for it)."""
    pytest.importorskip(engine)
    from array_api_compat import array_namespace
    from scipy import sparse

    from diffinterface.bench._engines import sum_sin2

    backend = di.AutoJAX() if engine == "jax" else di.AutoTorch()
    x, t = np.linspace(0.1, 1.0, 5), np.linspace(-1.0, 1.0, 5)
    grad = di.prepare_gradient(backend, sum_sin2, x)
    push = di.prepare_pushforward(backend, sum_sin2, x, t)
    sparse_backend = di.AutoSparse(backend)

    def sine(z):
        return array_namespace(z).sin(z)

    jac = di.prepare_jacobian(sparse_backend, sine, x)
    for k in range(3):
        z = x + k
        g = di.gradient(backend, sum_sin2, z, prep=grad)
        assert type(g) is np.ndarray and g.dtype == np.float64 and np.allclose(g, np.sin(2 * z), rtol=1e-12)
        p = di.pushforward(backend, sum_sin2, z, t, prep=push)
        assert type(p) is np.ndarray and p.dtype == np.float64 and np.allclose(p, np.sin(2 * z) @ t, rtol=1e-12)
        J = di.jacobian(sparse_backend, sine, z, prep=jac)
        assert sparse.issparse(J) and np.allclose(J.toarray(), np.diag(np.cos(z)), rtol=1e-12)


def test_a_preps_descriptions_come_from_its_signatures_as_the_arguments_would_describe_themselves():
    """A prep keeps each argument's signature (type, shape, dtype), not the argument: the descriptions
    its messages show (``prep.args``) are made from the signatures when a message needs them, and read
    exactly as the arguments themselves would be described."""
    from collections import namedtuple

    from conftest import installed
    from diffinterface._frontend.prep import describe_arg, describe_signature, signature

    Pair = namedtuple("Pair", "a b")
    values = [
        np.zeros(3),
        np.zeros((2, 0), dtype=np.float32),
        np.float64(1.5),
        1.5,
        3,
        True,
        2j,
        "label",
        None,
        di.Constant((1.0, np.ones(2))),
        di.Cache([np.zeros(2), 4]),
        di.Constant({"w": np.ones((2, 2)), "n": 3}),
        di.Constant(Pair(np.ones(1), 2.0)),
        di.Constant((np.ones(1),)),
    ]
    if installed("torch"):
        import torch

        values += [torch.ones(2, dtype=torch.float64), di.Constant([torch.zeros(1)])]
    if installed("jax"):
        import jax.numpy as jnp

        values.append(jnp.ones(3))
    for value in values:
        assert describe_signature(signature(value)) == describe_arg(value), value
    prep = di.prepare_pushforward(FD, f, np.zeros(3), np.ones(3), di.Constant((1.0, 0.0)))
    assert prep.args == ("numpy float64 (3,)", "numpy float64 (3,)", "Constant((Python float, Python float))")
