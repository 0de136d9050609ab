"""has_aux=True (issue 41): ``f(x) -> (y, aux)`` on every operator and engine, in JAX's order.

Results are checked against analytic derivatives and ``aux`` against its own closed form at ``x``;
JAX's ``grad``/``value_and_grad``/``jacfwd`` with ``has_aux=True`` are the outside reference.
"""

from __future__ import annotations

import numpy as np
import pytest
from array_api_compat import array_namespace

import diffinterface as di
from conftest import backend_params, installed

BACKENDS = backend_params(finite_diff=True)
X = np.array([0.3, -0.7, 1.1])
T = np.array([1.0, 0.5, -2.0])


def _tol(backend, second_order: bool = False) -> float:
    """Finite differences' own accuracy; an engine's documented tolerance where it has one (MLX)."""
    if isinstance(backend, di.AutoFiniteDiff):
        return 1e-4 if second_order else 1e-5
    own = getattr(backend, "tolerance", None)
    return own(np.float64, second_order) if own is not None else 1e-10


def loss(x):
    """sum(sin(x)^2) with its metrics: an array, a Python value, a nested list."""
    xp = array_namespace(x)
    y = xp.sum(xp.sin(x) ** 2)
    return y, {"norm": xp.sqrt(xp.sum(x**2)), "tag": "loss", "parts": [x[0] * 2.0]}


def vector(x):
    return x**2, {"total": float(np.asarray(x).sum()) if isinstance(x, np.ndarray) else x[1] * 1.0}


def _check_aux(aux, x):
    assert aux["tag"] == "loss"
    np.testing.assert_allclose(np.asarray(aux["norm"]), np.linalg.norm(x), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(aux["parts"][0]), 2 * x[0], rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_first_order_operators_return_aux_in_jaxs_order(backend):
    tol = _tol(backend)
    grad = np.sin(2 * X)  # d/dx sin(x)^2
    g, aux = di.gradient(backend, loss, X, has_aux=True)
    np.testing.assert_allclose(np.asarray(g), grad, rtol=tol, atol=tol)
    _check_aux(aux, X)
    (y, aux), g = di.value_and_gradient(backend, loss, X, has_aux=True)
    np.testing.assert_allclose(np.asarray(y), np.sum(np.sin(X) ** 2), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(g), grad, rtol=tol, atol=tol)
    _check_aux(aux, X)

    def squares(x):
        return x**2, {"first": x[0] * 1.0}

    jac, aux = di.jacobian(backend, squares, X, has_aux=True)
    np.testing.assert_allclose(np.asarray(jac), np.diag(2 * X), rtol=tol, atol=tol)
    np.testing.assert_allclose(np.asarray(aux["first"]), X[0])
    (y, aux), jac = di.value_and_jacobian(backend, squares, X, has_aux=True)
    np.testing.assert_allclose(np.asarray(y), X**2)
    # a batch of tangents: one aux for the call, results a tuple
    jvps, aux = di.pushforward(backend, squares, X, (T, 2 * T), has_aux=True)
    np.testing.assert_allclose(np.asarray(jvps[1]), 4 * X * T, rtol=tol, atol=tol)
    np.testing.assert_allclose(np.asarray(aux["first"]), X[0])
    (y, aux), vjp = di.value_and_pullback(backend, squares, X, T, has_aux=True)
    np.testing.assert_allclose(np.asarray(vjp), 2 * X * T, rtol=tol, atol=tol)
    der, aux = di.derivative(backend, lambda s: (s**3, s * 2.0), 1.5, has_aux=True)
    np.testing.assert_allclose(float(der), 3 * 1.5**2, rtol=tol)
    np.testing.assert_allclose(float(np.asarray(aux)), 3.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_second_order_operators_return_aux(backend):
    tol = _tol(backend, True)
    hess = np.diag(2 * np.cos(2 * X))
    h, aux = di.hessian(backend, loss, X, has_aux=True)
    np.testing.assert_allclose(np.asarray(h), hess, rtol=tol, atol=tol)
    _check_aux(aux, X)
    hv, aux = di.hvp(backend, loss, X, T, has_aux=True)
    np.testing.assert_allclose(np.asarray(hv), hess @ T, rtol=tol, atol=tol)
    (y, aux), g, h = di.value_gradient_and_hessian(backend, loss, X, has_aux=True)
    np.testing.assert_allclose(np.asarray(g), np.sin(2 * X), rtol=tol, atol=tol)
    _check_aux(aux, X)
    d2, aux = di.second_derivative(backend, lambda s: (s**3, "cubic"), 1.5, has_aux=True)
    np.testing.assert_allclose(float(d2), 6 * 1.5, rtol=tol)
    assert aux == "cubic"


@pytest.mark.parametrize("backend", BACKENDS)
def test_prepared_and_repeated_calls_compute_aux_at_each_x(backend):
    prep = di.prepare_gradient(backend, loss, np.zeros(3), has_aux=True)
    for x in (X, 2 * X):  # aux follows x: computed per call, not kept from the preparation
        g, aux = di.gradient(backend, loss, x, prep=prep, has_aux=True)
        np.testing.assert_allclose(np.asarray(g), np.sin(2 * x), rtol=_tol(backend), atol=_tol(backend))
        _check_aux(aux, x)
    for k in range(4):  # unprepared in a loop: the third call prepares and keeps (prep_cache)
        g, aux = di.gradient(backend, loss, X + k, has_aux=True)
        _check_aux(aux, X + k)
    with pytest.raises(di.PreparationMismatchError, match=r"has_aux=False, but prep was made with has_aux=True"):
        di.gradient(backend, loss, X, prep=prep)

    def plain_loss(x):
        return array_namespace(x).sum(x**2)

    plain = di.prepare_gradient(backend, plain_loss, X)
    with pytest.raises(di.PreparationMismatchError, match=r"has_aux=True, but prep was made with has_aux=False"):
        di.gradient(backend, plain_loss, X, prep=plain, has_aux=True)


def test_a_strict_prep_checks_auxs_structure():
    def changing(x):
        return (x**2).sum(), ({"a": x} if x[0] > 0 else [x])

    prep = di.prepare_gradient(di.AutoFiniteDiff(), changing, X, has_aux=True)
    di.gradient(di.AutoFiniteDiff(), changing, X, prep=prep, has_aux=True)
    with pytest.raises(di.PreparationMismatchError, match=r"f's aux differs from the one the prep was made with"):
        di.gradient(di.AutoFiniteDiff(), changing, -X, prep=prep, has_aux=True)


def test_errors_name_the_call():
    with pytest.raises(TypeError, match=r"gradient\(AutoFiniteDiff\(\), f, x\): has_aux=True: f must return a pair"):
        di.gradient(di.AutoFiniteDiff(), lambda x: (x**2).sum(), X, has_aux=True)
    with pytest.raises(TypeError, match=r"has_aux=True takes f\(x\) -> \(y, aux\)"):
        di.jacobian(di.AutoFiniteDiff(), lambda y, x: None, X, y=np.zeros(3), has_aux=True)


@pytest.mark.skipif(not installed("jax"), reason='pip install "diffinterface[jax]"')
def test_against_jaxs_own_has_aux():
    import jax
    import jax.numpy as jnp

    def f(x):
        return jnp.sum(jnp.tanh(x) ** 3), {"max": jnp.max(x), "n": 3}

    x = jnp.asarray([0.2, -0.4, 0.9])  # float32: JAX's default, kept
    g_jax, aux_jax = jax.grad(f, has_aux=True)(x)
    g, aux = di.gradient(di.AutoJAX(), f, x, has_aux=True)
    assert isinstance(g, jax.Array) and isinstance(aux["max"], jax.Array) and aux["n"] == 3
    np.testing.assert_allclose(g, g_jax, rtol=1e-6)
    (y_jax, _), _ = jax.value_and_grad(f, has_aux=True)(x)
    (y, aux), _ = di.value_and_gradient(di.AutoJAX(), f, x, has_aux=True)
    np.testing.assert_allclose(y, y_jax, rtol=1e-6)
    np.testing.assert_allclose(aux["max"], aux_jax["max"])
    jac_jax, _ = jax.jacfwd(lambda z: (jnp.sin(z) * z, z[0]), has_aux=True)(x)
    jac, aux = di.jacobian(di.AutoJAX(mode="forward"), lambda z: (jnp.sin(z) * z, z[0]), x, has_aux=True)
    np.testing.assert_allclose(jac, jac_jax, rtol=1e-6)
    np.testing.assert_allclose(aux, x[0])


@pytest.mark.skipif(not installed("torch"), reason='pip install "diffinterface[torch]"')
def test_aux_keeps_its_engine_type_under_torch():
    import torch

    def f(x):
        return (torch.sin(x) ** 2).sum(), {"mean": x.mean()}

    x = torch.tensor(X)
    g, aux = di.gradient(di.AutoTorch(), f, x, has_aux=True)
    assert isinstance(g, torch.Tensor) and isinstance(aux["mean"], torch.Tensor)
    assert not aux["mean"].requires_grad
    np.testing.assert_allclose(g.numpy(), np.sin(2 * X), rtol=1e-12)
    np.testing.assert_allclose(aux["mean"].item(), X.mean())


# -- out= on every operator with an array result (issue 41) --------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_on_the_tangent_operators_and_derivatives(backend):
    tol = _tol(backend)

    def square(x):
        return x**2

    out = np.zeros(3)
    assert di.pushforward(backend, square, X, T, out=out) is out
    np.testing.assert_allclose(out, 2 * X * T, rtol=tol, atol=tol)
    outs = (np.zeros(3), np.zeros(3))
    res = di.pushforward(backend, square, X, (T, 2 * T), out=outs)
    assert res[0] is outs[0] and res[1] is outs[1]
    np.testing.assert_allclose(outs[1], 4 * X * T, rtol=tol, atol=tol)
    out = np.zeros(3)
    y, vjp = di.value_and_pullback(backend, square, X, T, out=out)
    assert vjp is out
    np.testing.assert_allclose(out, 2 * X * T, rtol=tol, atol=tol)
    out = np.zeros(())
    assert di.derivative(backend, lambda s: s**3, np.asarray(1.5), out=out) is out
    np.testing.assert_allclose(out, 3 * 1.5**2, rtol=tol)
    tol2 = _tol(backend, True)
    out = np.zeros(())
    assert di.second_derivative(backend, lambda s: s**3, np.asarray(1.5), out=out) is out
    np.testing.assert_allclose(out, 9.0, rtol=tol2)
    out = np.zeros(3)
    assert di.hvp(backend, lambda x: array_namespace(x).sum(x**3), X, T, out=out) is out
    np.testing.assert_allclose(out, 6 * X * T, rtol=tol2, atol=tol2)
    with pytest.raises(TypeError, match=r"out= must be a tuple of as many arrays"):
        di.pushforward(backend, square, X, (T, T), out=np.zeros(3))


def _metric_loss(x):
    return float(np.sum(x**2)), {"n": x.size}


def test_aux_on_an_executor():
    """The finite-difference points run on a process pool (pickled target): each worker's f still
    returns (y, aux) and differentiates y."""
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(2) as pool:
        g, aux = di.gradient(di.AutoFiniteDiff(executor=pool), _metric_loss, X, has_aux=True)
    np.testing.assert_allclose(g, 2 * X, rtol=1e-6)
    assert aux == {"n": 3}


def test_out_on_repeated_unprepared_tangent_calls():
    """The third unprepared call runs a kept prep (prep_cache): out= is written there too."""
    f = lambda x: x**2  # noqa: E731
    for k in range(4):
        out = np.zeros(3)
        assert di.pushforward(di.AutoFiniteDiff(), f, X + k, T, out=out) is out
        np.testing.assert_allclose(out, 2 * (X + k) * T, rtol=1e-6)
