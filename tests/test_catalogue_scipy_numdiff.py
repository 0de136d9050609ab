"""SciPy's own finite-difference test functions (``scipy/optimize/tests/test__numdiff.py``, shipped in
SciPy's wheel) through the library, against their analytic Jacobians at SciPy's points and tolerances.

The functions build their outputs with ``np.array([...])``: under ``AutoAutograd`` each case is either
right or a ``LostDerivativeError`` (autograd returned zeros before), never a wrong number.
"""

from __future__ import annotations

import numpy as np
import pytest

import diffinterface as di
from conftest import installed

numdiff = pytest.importorskip("scipy.optimize.tests.test__numdiff", reason="this SciPy ships without its tests")

pytestmark = pytest.mark.catalogue

DENSE = numdiff.TestApproxDerivativesDense()
LINEAR = numdiff.TestApproxDerivativeLinearOperator()

# (name, x0) as SciPy's TestApproxDerivativeLinearOperator and TestApproxDerivativesDense use them
CASES = [
    ("scalar_scalar", np.array(1.0)),
    ("scalar_scalar", np.array(0.5)),
    ("scalar_vector", np.array([0.5])),
    ("scalar_vector", np.array([1.0])),
    ("vector_scalar", np.array([100.0, -0.5])),
    ("vector_scalar", np.array([0.5, 1.5])),
    ("vector_vector", np.array([-100.0, 0.2])),
    ("vector_vector", np.array([1.0, 2.0])),
    ("zero_jacobian", np.array([0.0, 0.0])),
    ("zero_jacobian", np.array([1.0, 1.0])),
]
# SciPy's rtol for these functions: 2-point 1e-5 (forward, backward), 3-point 5e-6 (central), cs 1e-7
RTOL = {"forward": 1e-5, "backward": 1e-5, "central": 5e-6, "complex": 1e-7}


def _pair(name):
    owner = LINEAR if hasattr(LINEAR, f"fun_{name}") else DENSE
    return getattr(owner, f"fun_{name}"), getattr(owner, f"jac_{name}")


def _jac(name, x):
    """The analytic Jacobian, shaped f(x).shape + x.shape."""
    fun, jac = _pair(name)
    return np.reshape(jac(x), np.shape(fun(x)) + np.shape(x))


@pytest.mark.parametrize("method", list(RTOL))
@pytest.mark.parametrize("name, x0", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_scipy_numdiff_functions_with_finite_differences(name, x0, method):
    fun, _ = _pair(name)
    backend = di.AutoFiniteDiff(method=method)
    want = _jac(name, x0)
    rtol = RTOL[method]
    got = di.jacobian(backend, fun, x0)
    assert np.allclose(got, want, rtol=rtol, atol=1e-9), (got, want)
    rng = np.random.default_rng(11290049580398)  # SciPy's seed for its directions
    for _ in range(10):
        p = rng.uniform(-10, 10, size=x0.shape)
        jp = np.tensordot(want, p, axes=x0.ndim)
        got = di.pushforward(backend, fun, x0, p)
        assert np.allclose(got, jp, rtol=rtol, atol=rtol * max(1.0, float(np.abs(jp).max()))), (p, got, jp)


@pytest.mark.parametrize("name, x0", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_x0_is_unchanged(name, x0):
    fun, _ = _pair(name)
    before = x0.copy()
    di.jacobian(di.AutoFiniteDiff(), fun, x0)
    assert np.array_equal(x0, before)


@pytest.mark.skipif(
    not installed("autograd"), reason='autograd is not installed: pip install "diffinterface[autograd]"'
)
@pytest.mark.parametrize("mode", ["forward", "reverse"])
@pytest.mark.parametrize("name, x0", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_scipy_numdiff_functions_under_autograd_are_right_or_an_error(name, x0, mode):
    fun, _ = _pair(name)
    try:
        got = di.jacobian(di.AutoAutograd(mode=mode), fun, x0)
    except di.LostDerivativeError as error:
        assert "np.array" in str(error)
        return
    assert np.allclose(got, _jac(name, x0), rtol=1e-12, atol=1e-12)
