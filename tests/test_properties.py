"""Property tests (hypothesis, bounded example counts): random shapes (0 to 3 dimensions) and random
smooth compositions, written once with the array API, on every installed backend.

For each drawn function and point: the AD backends agree with each other to 1e-10 and finite
differences to 1e-5 (relative, float64); prepared equals unprepared; a second call gives the same
numbers; ``x`` and the ``Constant`` context are unchanged; pushforward and pullback agree with the
Jacobian (``J @ t`` and ``c @ J``); the gradient of ``sum(f)`` is the column sums of the Jacobian.
"""

from __future__ import annotations

import numpy as np
import pytest
from array_api_compat import array_namespace

import diffinterface as di
from conftest import AD_ENGINES, installed

hypothesis = pytest.importorskip("hypothesis", reason='hypothesis is not installed: pip install -e ".[test]"')
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

OPS = ("sin", "cos", "tanh", "square", "exp", "mix", "scale")
AD = [(module, getattr(di, name)) for name, module, _ in AD_ENGINES if installed(module)]
BACKENDS = [(f"{name}-{mode}", cls(mode=mode)) for name, cls in AD for mode in ("forward", "reverse")]
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


def build(ops: tuple, reduce: bool):
    """A smooth f(x, c) of the drawn operations (``mix`` couples every entry: a dense Jacobian)."""

    def f(x, c):
        xp = array_namespace(x)
        y = x
        for op in ops:
            if op == "sin":
                y = xp.sin(y)
            elif op == "cos":
                y = xp.cos(y)
            elif op == "tanh":
                y = xp.tanh(y)
            elif op == "square":
                y = 0.5 * y * y
            elif op == "exp":
                y = xp.exp(0.3 * y)
            elif op == "mix":
                y = y + c * xp.sum(y)
            else:
                y = c * y
        if reduce and y.ndim:
            y = xp.sum(y, axis=-1)
        return y

    return f


shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=3)
points = shapes.flatmap(lambda s: hnp.arrays(np.float64, s, elements=st.floats(-2.0, 2.0, allow_subnormal=False)))
functions = st.tuples(st.lists(st.sampled_from(OPS), min_size=1, max_size=4).map(tuple), st.booleans())


def _close(a, b, rtol: float) -> bool:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    scale = max(1.0, float(np.max(np.abs(b)))) if b.size else 1.0
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=rtol * scale))


def _tol(backend, tol: float) -> float:
    """``tol``, or the engine's documented float64 accuracy where it is coarser (AutoMLX's float32 sin, exp)."""
    own = getattr(backend, "tolerance", None)
    return tol if own is None else max(tol, own(np.float64, False))


def _np(a) -> np.ndarray:
    return np.asarray(a.detach() if hasattr(a, "detach") else a, dtype=np.float64)


@pytest.mark.skipif(not BACKENDS, reason='no AD engine installed: pip install -e ".[all]"')
@SETTINGS
@given(x=points, spec=functions)
def test_backends_agree_and_each_is_consistent(x, spec):
    f = build(*spec)
    c = np.array(0.7)
    c_before, x_before = c.copy(), x.copy()
    reference = None
    for name, backend in BACKENDS:
        jac = _np(di.jacobian(backend, f, x, di.Constant(c)))
        if reference is None:
            reference = jac
        assert _close(jac, reference, _tol(backend, 1e-10)), (name, spec)
        prep = di.prepare_jacobian(backend, f, x, di.Constant(c))
        first = _np(di.jacobian(backend, f, x, di.Constant(c), prep=prep))
        again = _np(di.jacobian(backend, f, x, di.Constant(c), prep=prep))
        assert np.array_equal(first, again), name
        assert _close(first, jac, _tol(backend, 1e-12)), name
        y_shape = jac.shape[: jac.ndim - x.ndim]
        t = np.linspace(-1.0, 1.0, x.size).reshape(x.shape) if x.size else np.zeros(x.shape)
        ct = np.linspace(0.5, -0.5, int(np.prod(y_shape))).reshape(y_shape)
        jt = np.tensordot(jac, t, axes=x.ndim)
        ctj = np.tensordot(ct, jac, axes=len(y_shape))
        assert _close(di.pushforward(backend, f, x, t, di.Constant(c)), jt, _tol(backend, 1e-10)), name
        assert _close(di.pullback(backend, f, x, ct, di.Constant(c)), ctj, _tol(backend, 1e-10)), name
        assert np.array_equal(x, x_before) and np.array_equal(c, c_before), name
    fd = _np(di.jacobian(di.AutoFiniteDiff(), f, x, di.Constant(c)))
    assert _close(fd, reference, 1e-5), spec
    assert np.array_equal(x, x_before) and np.array_equal(c, c_before)


@pytest.mark.skipif(not BACKENDS, reason='no AD engine installed: pip install -e ".[all]"')
@SETTINGS
@given(x=points, spec=functions)
def test_gradient_of_the_sum_is_the_column_sums_of_the_jacobian(x, spec):
    f = build(*spec)

    def total(z, c):
        xp = array_namespace(z)
        return xp.sum(f(z, c))

    for name, backend in BACKENDS:
        jac = _np(di.jacobian(backend, f, x, di.Constant(0.7)))
        want = jac.reshape((-1,) + x.shape).sum(axis=0)
        assert _close(di.gradient(backend, total, x, di.Constant(0.7)), want, _tol(backend, 1e-10)), name
