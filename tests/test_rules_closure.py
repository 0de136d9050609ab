"""The closure contract (contract section 7) through ``DifferentiateWith`` (issue 38, item 1).

``DifferentiateWith(f, inner)`` inside an outer backend: ``f`` writes into a captured work buffer
(``buf[:] *= x; return buf * 1.0``). Every evaluation must run over a duplicate of the buffer, so the
Jacobian is ``diag(buf)`` (the analytic answer) and the user's buffer is the same after the call.
Before the fix the primal ran on the user's own buffer: the buffer drifted from one finite-difference
step to the next and the Jacobian came out wrong without an error.
"""

from __future__ import annotations

import numpy as np
import pytest

import diffinterface as di
from conftest import AD_ENGINES, installed

BUF = [2.0, 3.0]
X = [1.5, 0.5]
ENGINES = {"AutoFiniteDiff": None, **{name: module for name, module, _ in AD_ENGINES}}

# Pairs that raise an error today (never a wrong number: the test below checks the number wherever
# the call returns). None today: issue 38 item 11 mended the last two (torch forward mode nested in
# torch forward mode, JAX probing an opaque output shape inside a JAX trace).
KNOWN_ERRORS: dict[tuple[str, str], str] = {}


def _outers() -> list:
    out = [("AutoFiniteDiff", di.AutoFiniteDiff())]
    for name, _, _ in AD_ENGINES:
        for mode in (None, "forward", "reverse"):
            out.append((f"{name}-{mode}", getattr(di, name)(mode=mode)))
    return out


def _pairs() -> list:
    params = []
    for inner in ENGINES:
        for outer_id, outer in _outers():
            engines = {ENGINES[inner], ENGINES[outer_id.split("-")[0]]} - {None}
            marks = [
                pytest.mark.skip(reason=f'{e} is not installed: pip install "diffinterface[{e}]"')
                for e in engines
                if not installed(e)
            ]
            reason = KNOWN_ERRORS.get((inner, outer_id)) or KNOWN_ERRORS.get((inner, outer_id.split("-")[0]))
            if reason is not None:
                # an error, never an AssertionError: a wrong number is a failure even in these pairs
                marks.append(
                    pytest.mark.xfail(strict=True, reason=reason, raises=(TypeError, ValueError, RuntimeError))
                )
            params.append(pytest.param(inner, outer_id, outer, marks=marks, id=f"{inner}-in-{outer_id}"))
    return params


def _buffer(inner: str):
    """The work buffer in the inner engine's arrays: torch writes torch tensors; the other engines'
    bodies receive NumPy arrays (JAX and autograd through their rule registrations)."""
    if inner == "AutoTorch":
        import torch

        return torch.tensor(BUF, dtype=torch.float64)
    return np.array(BUF)


def _x(outer_id: str):
    name = outer_id.split("-")[0]
    if name == "AutoTorch":
        import torch

        return torch.tensor(X, dtype=torch.float64)
    if name == "AutoJAX":
        import jax.numpy as jnp

        return jnp.asarray(X)  # float32: JAX's default
    return np.array(X)


@pytest.mark.parametrize(("inner", "outer_id", "outer"), _pairs())
@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
def test_item1_differentiate_with_writes_into_a_duplicate_of_the_captured_buffer(inner, outer_id, outer, prepared):
    buf = _buffer(inner)

    def f1(x):
        buf[:] *= x
        return buf * 1.0

    w = di.DifferentiateWith(f1, getattr(di, inner)())
    x = _x(outer_id)
    x_before = np.array(np.asarray(x))

    def g(z):
        return w(z)

    prep = di.prepare_jacobian(outer, g, x) if prepared else None
    for _ in range(2):  # twice: a buffer that drifted would show at the second call
        y, jac = di.value_and_jacobian(outer, g, x, prep=prep)
        float32 = outer_id.startswith("AutoJAX")
        tol = 1e-5 if float32 or outer_id == "AutoFiniteDiff" else 1e-9
        np.testing.assert_allclose(np.asarray(jac, dtype=float), np.diag(BUF), rtol=tol, atol=tol)
        np.testing.assert_allclose(np.asarray(y, dtype=float), np.multiply(BUF, X), rtol=tol)
        np.testing.assert_array_equal(np.asarray(buf), BUF)  # the user's buffer is unchanged
        np.testing.assert_array_equal(np.asarray(x), x_before)


def test_item1_differentiate_with_primal_called_directly_keeps_the_user_buffer():
    """The issue's own example: finite differences around ``DifferentiateWith(F1, AutoFiniteDiff())``
    gave entries of -4e6 and left ``buf`` at [32, 243]; ``jacobian(AutoFiniteDiff(), F1, x)`` alone is right."""
    buf = np.array([2.0, 3.0])

    def f1(x):
        buf[:] *= x
        return buf * 1.0

    w = di.DifferentiateWith(f1, di.AutoFiniteDiff())
    x = np.array([1.0, 1.0])
    alone = di.jacobian(di.AutoFiniteDiff(), f1, x)
    wrapped = di.jacobian(di.AutoFiniteDiff(), lambda z: w(z), x)
    np.testing.assert_allclose(alone, np.diag([2.0, 3.0]), rtol=1e-6)
    np.testing.assert_allclose(wrapped, np.diag([2.0, 3.0]), rtol=1e-6)
    np.testing.assert_array_equal(buf, [2.0, 3.0])


# -- issue 38 item 11: nested engines -------------------------------------------------------------


def test_item11_torch_rule_inside_torch_forward_mode_runs_in_reverse():
    """torch cannot nest forward mode: DifferentiateWith(f, AutoTorch()) inside AutoTorch's forward
    mode computes its own derivatives in reverse mode (mode=None), right each time."""
    torch = pytest.importorskip("torch")
    w = di.DifferentiateWith(lambda z: torch.sin(z) * 2, di.AutoTorch())
    x = torch.tensor([1.0, 2.0], dtype=torch.float64)
    for mode in (None, "forward"):
        for _ in range(3):  # the third call is prepared (prep_cache)
            jac = di.jacobian(di.AutoTorch(mode=mode), lambda z: w(z), x)
            np.testing.assert_allclose(jac.numpy(), np.diag(2 * np.cos([1.0, 2.0])), rtol=1e-12)


def test_item11_torch_rule_in_explicit_forward_mode_names_the_fix():
    torch = pytest.importorskip("torch")
    w = di.DifferentiateWith(lambda z: torch.sin(z) * 2, di.AutoTorch(mode="forward"))
    x = torch.tensor([1.0, 2.0], dtype=torch.float64)
    with pytest.raises(NotImplementedError, match=r"torch cannot nest forward-mode AD.*mode='reverse' or mode=None"):
        di.jacobian(di.AutoTorch(mode="forward"), lambda z: w(z), x)


def test_item11_jax_rule_inside_jax_probes_its_shape_eagerly():
    """The opaque primal's output shape is probed outside the surrounding JAX trace
    (jax.ensure_compile_time_eval), so DifferentiateWith(f, AutoJAX()) works inside AutoJAX."""
    jnp = pytest.importorskip("jax.numpy")
    w = di.DifferentiateWith(lambda z: jnp.sin(z) * 2, di.AutoJAX())
    x = np.array([1.0, 2.0])
    for mode in (None, "forward", "reverse"):
        jac = di.jacobian(di.AutoJAX(mode=mode), lambda z: w(z), x)
        np.testing.assert_allclose(np.asarray(jac), np.diag(2 * np.cos(x)), rtol=1e-12)


def test_item11_unprobeable_shape_names_differentiate_with_out_shape():
    pytest.importorskip("jax")

    def positive_only(z):
        if np.any(np.asarray(z) < 0):  # random probes are negative somewhere
            raise ValueError("f needs positive inputs")
        return np.sqrt(np.asarray(z))

    w = di.DifferentiateWith(positive_only, di.AutoFiniteDiff())
    with pytest.raises(TypeError, match=r"Pass DifferentiateWith\(f, backend, out_shape=fn\)"):
        di.jacobian(di.AutoJAX(), lambda z: w(z), np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))
    shaped = di.DifferentiateWith(positive_only, di.AutoFiniteDiff(), out_shape=lambda z: (z.shape, z.dtype))
    jac = di.jacobian(di.AutoJAX(), lambda z: shaped(z), np.array([1.0, 4.0]))
    np.testing.assert_allclose(np.asarray(jac), np.diag([0.5, 0.25]), rtol=1e-6)
