"""Complex x against the engines' own complex derivatives, in one convention on every backend:
the gradient of a real f is df/da + i df/db (what torch's ``backward`` gives; JAX's ``grad`` and
autograd's are its conjugate), a pullback is J^H ty, ``holomorphic=True`` Jacobians are dy/dz as
``jax.jacfwd(holomorphic=True)``. The catalogue's complex scenarios (closed forms) run in test_catalogue.py."""

from __future__ import annotations

import re

import numpy as np
import pytest

import diffinterface as di
from conftest import ad_configs
from diffinterface import PreparationMismatchError

jax = pytest.importorskip("jax")
jnp = jax.numpy
torch = pytest.importorskip("torch")

BACKENDS = [config for _, config in ad_configs((None, "forward"))] + [di.AutoFiniteDiff()]
Z = np.array([0.7 - 0.2j, -1.1 + 0.4j, 0.3 + 0.9j])


# Engines without complex128 (MLX has none): a complex128 x is the call's clear error, and the convention
# is checked in complex64 at the engine's float32 tolerance (against the complex128 references).
COMPLEX64_ONLY = {di.AutoMLX: "MLX has no complex128"}
# Engines without complex support: every complex call is the call's clear error (PyTensor's derivatives of
# complex operations do not follow the convention).
NO_COMPLEX = {di.AutoPyTensor: "f computes with complex numbers .* not supported on AutoPyTensor"}


def _z(backend, call: str, run):
    """``Z`` for ``backend``: in complex64 where the engine has no complex128, after checking that
    ``run(Z)`` (the ``call`` in complex128) raises the call's error naming it; None where the engine
    has no complex support, after checking the same."""
    unsupported = NO_COMPLEX.get(type(backend))
    if unsupported is not None:
        with pytest.raises(TypeError, match=rf"^{call}\({re.escape(repr(backend))}, f, x.*: {unsupported}"):
            run(Z)
        return None
    reason = COMPLEX64_ONLY.get(type(backend))
    if reason is None:
        return Z
    with pytest.raises(TypeError, match=rf"^{call}\({re.escape(repr(backend))}, f, x.*: {reason}"):
        run(Z)
    return Z.astype(np.complex64)


def _tol(backend):
    if isinstance(backend, di.AutoFiniteDiff):
        return 1e-6
    return backend.tolerance(np.float32, False) if type(backend) in COMPLEX64_ONLY else 1e-12


def _xp(z):
    from array_api_compat import array_namespace

    return array_namespace(z)


def loss(z):  # a real f of a complex z, not holomorphic
    xp = _xp(z)
    return xp.sum(xp.real(z * z * xp.conj(z)) * xp.cos(xp.imag(z)))


def holo(z):  # holomorphic
    xp = _xp(z)
    return xp.exp(z) * z + xp.sin(z)


@pytest.fixture(autouse=True)
def _x64():
    with di._core.arrays.jax_enable_x64()(True):
        yield


@pytest.mark.parametrize("backend", BACKENDS, ids=repr)
def test_the_gradient_of_a_real_f_is_torchs_and_conjugate_to_jaxs(backend):
    z = _z(backend, "gradient", lambda z: di.gradient(backend, loss, z))
    if z is None:
        return
    got = di.gradient(backend, loss, z)
    zt = torch.tensor(Z, requires_grad=True)
    loss(zt).backward()
    np.testing.assert_allclose(got, zt.grad.numpy(), rtol=_tol(backend), atol=_tol(backend))
    np.testing.assert_allclose(got, np.conj(jax.grad(loss)(jnp.asarray(Z))), rtol=_tol(backend), atol=_tol(backend))
    value, again = di.value_and_gradient(backend, loss, z, prep=di.prepare_gradient(backend, loss, z + 0.5j))
    assert np.isclose(value, loss(Z)) and np.iscomplexobj(again)


@pytest.mark.parametrize("backend", BACKENDS, ids=repr)
def test_holomorphic_jacobian_pushforward_pullback_against_jax(backend):
    tol = _tol(backend)
    zj = jnp.asarray(Z)
    z = _z(backend, "jacobian", lambda z: di.jacobian(backend, holo, z, holomorphic=True))
    if z is None:
        return
    jac = di.jacobian(backend, holo, z, holomorphic=True)
    np.testing.assert_allclose(jac, jax.jacfwd(holo, holomorphic=True)(zj), rtol=tol, atol=tol)
    t = np.array([1.0 + 0.5j, -0.3j, 2.0])
    np.testing.assert_allclose(
        di.pushforward(backend, holo, z, t.astype(z.dtype)),
        jax.jvp(holo, (zj,), (jnp.asarray(t),))[1],
        rtol=tol,
        atol=tol,
    )
    ct = np.array([0.4 - 1.0j, 1.0, 0.5j])
    (jax_vjp,) = jax.vjp(holo, zj)[1](jnp.asarray(np.conj(ct)))  # J^T ct in JAX's convention
    np.testing.assert_allclose(di.pullback(backend, holo, z, ct.astype(z.dtype)), np.conj(jax_vjp), rtol=tol, atol=tol)
    # the same against torch's backward: J^H ct
    zt = torch.tensor(Z, requires_grad=True)
    (torch_vjp,) = torch.autograd.grad(holo(zt), zt, torch.tensor(ct))
    np.testing.assert_allclose(di.pullback(backend, holo, z, ct.astype(z.dtype)), torch_vjp.numpy(), rtol=tol, atol=tol)

    # a complex scalar: the derivative of a holomorphic f, prepared at another point
    def cube(w):
        return w**3 * 2

    scalar = z.dtype.type  # complex: a Python complex is complex128
    prep = di.prepare_derivative(backend, cube, scalar(0.5 + 0.1j), holomorphic=True)
    der = di.derivative(backend, cube, scalar(0.5 + 1.0j), prep=prep)
    assert der == pytest.approx(6 * (0.5 + 1.0j) ** 2, rel=tol)


@pytest.mark.parametrize("backend", BACKENDS, ids=repr)
def test_the_hvp_of_a_real_f_is_the_derivative_of_its_gradient(backend):
    t = np.array([0.2 + 1.0j, -0.5, 0.3 - 0.3j])
    z = _z(backend, "hvp", lambda z: di.hvp(backend, loss, z, t))
    if z is None:
        return
    got = di.hvp(backend, loss, z, t.astype(z.dtype))
    h = 1e-6  # central differences of the gradient along t, computed by torch: an independent reference

    def torch_grad(z):
        zt = torch.tensor(z, requires_grad=True)
        loss(zt).backward()
        return zt.grad.numpy()

    want = (torch_grad(Z + h * t) - torch_grad(Z - h * t)) / (2 * h)
    tol = max(1e-6, _tol(backend))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_structures_mix_complex_and_real_leaves():
    def f(p):
        xp = _xp(p["r"])
        return xp.sum(xp.real(p["z"] * xp.conj(p["z"])) * p["r"])

    for backend in BACKENDS:
        z = _z(backend, "gradient", lambda z, b=backend: di.gradient(b, f, {"z": z[:2], "r": np.array([1.5, -0.5])}))
        if z is None:
            continue
        p = {"z": z[:2], "r": np.array([1.5, -0.5], dtype=z.real.dtype)}
        g = di.gradient(backend, f, p)
        tol = max(1e-6, _tol(backend))
        np.testing.assert_allclose(g["z"], 2 * p["z"] * p["r"], rtol=tol)
        np.testing.assert_allclose(g["r"], np.abs(p["z"]) ** 2, rtol=tol)
        assert np.iscomplexobj(g["z"]) and not np.iscomplexobj(g["r"])


def test_complex_tensors_and_jax_arrays_keep_their_family_and_precision():
    zt = torch.tensor(Z, dtype=torch.complex128)
    g = di.gradient(di.AutoTorch(), loss, zt)
    assert isinstance(g, torch.Tensor) and g.dtype == torch.complex128
    z64 = jnp.asarray(Z.astype(np.complex64))
    with di._core.arrays.jax_enable_x64()(False):
        g = di.gradient(di.AutoJAX(), loss, z64)
    assert isinstance(g, jax.Array) and g.dtype == jnp.complex64


def test_what_a_complex_x_refuses():
    with pytest.raises(TypeError, match=r"jacobian\(AutoJAX\(\), f, x\): x is complex; .*pass holomorphic=True"):
        di.jacobian(di.AutoJAX(), holo, Z)
    with pytest.raises(TypeError, match=r"derivative.*holomorphic=True"):
        di.derivative(di.AutoTorch(), lambda w: w**2, 1.0 + 1.0j)
    with pytest.raises(TypeError, match=r"Hessian of a real f of a complex x .* hvp"):
        di.hessian(di.AutoJAX(), loss, Z)
    with pytest.raises(ValueError, match=r"second_derivative takes a real x; for a complex x"):
        di.second_derivative(di.AutoJAX(), lambda w: w**2, 1.0 + 1.0j)
    with pytest.raises(TypeError, match=r"method='complex' .* needs a real x .* use method='central'"):
        di.gradient(di.AutoFiniteDiff(method="complex"), loss, Z)
    with pytest.raises(ValueError, match=r"tx is complex \(numpy complex128 \(3,\)\) and x is real"):
        di.pushforward(di.AutoTorch(), lambda v: v * 2, np.ones(3), Z)  # torch cast it to its real part
    with pytest.raises(ValueError, match=r"tx\['a'\]: expected a real tangent \(x there is real\)"):
        di.pushforward(di.AutoTorch(), lambda p: p["a"] * 2, {"a": np.ones(3)}, {"a": Z})
    prep = di.prepare_jacobian(di.AutoJAX(), holo, np.ones(3))
    with pytest.raises(PreparationMismatchError, match="holomorphic=True, but prep was made without it"):
        di.jacobian(di.AutoJAX(), holo, np.ones(3), prep=prep, holomorphic=True)
    prep = di.prepare_gradient(di.AutoFiniteDiff(), loss, Z)
    with pytest.raises(
        PreparationMismatchError, match=r"x: prepared for numpy complex128 \(3,\); got numpy float64 \(3,\)"
    ):
        di.gradient(di.AutoFiniteDiff(), loss, Z.real.copy(), prep=prep)
