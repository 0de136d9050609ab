"""The adapter contract: an adapter with only a pushforward, or only a pullback, gets every operator.

Both toy adapters below compute their one core operator with finite differences (so the catalogue's
finite-difference tolerances apply); everything else comes from diffinterface._adapters.contract's fallbacks,
second order included (the engine nested over itself), and SecondOrder(outer, inner) nests two.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import diffinterface as di
from diffinterface._core import configs as _backends
from diffinterface.backends.finitediff import Adapter as FiniteDiffAdapter
from diffinterface.extend import Adapter
from diffinterface.testing import check_scenario, default_scenarios


@dataclasses.dataclass(frozen=True, repr=False)
class PushforwardOnly(di.AutoFiniteDiff):
    pass


@dataclasses.dataclass(frozen=True, repr=False)
class PullbackOnly(di.AutoFiniteDiff):
    pass


class _PushforwardOnlyAdapter(Adapter):
    def __init__(self, backend):
        super().__init__(backend)
        self._fd = FiniteDiffAdapter(di.AutoFiniteDiff())

    def value_and_pushforward(self, data, target, x, tangents, contexts):
        return self._fd.value_and_pushforward(data, target, x, tangents, contexts)


class _PullbackOnlyAdapter(Adapter):
    def __init__(self, backend):
        super().__init__(backend)
        self._fd = FiniteDiffAdapter(di.AutoFiniteDiff())

    def value_and_pullback(self, data, target, x, tangents, contexts):
        y, jac = self._fd.value_and_jacobian(data, target, x, contexts)
        y_ndim = jac.ndim - np.ndim(x)
        return y, tuple(np.tensordot(t, jac, axes=(list(range(y_ndim)), list(range(y_ndim)))) for t in tangents)


@pytest.fixture(scope="module", autouse=True)
def registered():
    _backends._adapters[PushforwardOnly()] = _PushforwardOnlyAdapter(PushforwardOnly())
    _backends._adapters[PullbackOnly()] = _PullbackOnlyAdapter(PullbackOnly())
    yield
    del _backends._adapters[PushforwardOnly()], _backends._adapters[PullbackOnly()]


SCENARIOS = default_scenarios()


@pytest.mark.parametrize("backend", [PushforwardOnly(), PullbackOnly()], ids=["pushforward-only", "pullback-only"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_every_operator_from_one_core_operator(backend, scenario):
    # nested finite differences lose about eps**(1/3) in the second order: looser tolerance there
    second = scenario.operator in ("second_derivative", "hvp", "hessian")
    check_scenario(backend, scenario, tol=2e-4 if second else None)


def test_jacobian_direction_follows_the_core_and_the_shapes():
    both = FiniteDiffAdapter(di.AutoFiniteDiff())
    assert _PushforwardOnlyAdapter(PushforwardOnly()).jacobian_forward(10, 2) is True
    assert _PullbackOnlyAdapter(PullbackOnly()).jacobian_forward(2, 10) is False
    assert both.jacobian_forward(2, 10) is True  # AutoFiniteDiff is a forward-mode backend


def test_an_adapter_without_a_core_operator_says_so():
    class Empty(Adapter):
        pass

    with pytest.raises(TypeError, match=r"Empty implements neither value_and_pushforward nor value_and_pullback"):
        Empty(di.AutoFiniteDiff()).value_and_pushforward(None, None, np.ones(2), (), ())


@pytest.mark.parametrize("inner", [di.AutoFiniteDiff(), PullbackOnly()], ids=["fd", "pullback-only"])
def test_second_order_nests_outer_over_inner(inner):
    backend = di.SecondOrder(di.AutoFiniteDiff(), inner)
    x = np.array([0.6, 1.1, -0.4])

    def f(x):
        return np.sum(x**4) * np.sum(x**6)

    s4, s6 = np.sum(x**4), np.sum(x**6)
    grad = 4 * x**3 * s6 + 6 * x**5 * s4
    hess = np.diag(12 * x**2 * s6 + 30 * x**4 * s4) + 24 * np.outer(x**3, x**5) + 24 * np.outer(x**5, x**3)
    t = np.array([1.0, -0.5, 2.0])
    assert np.allclose(di.hessian(backend, f, x), hess, rtol=1e-4, atol=1e-4)
    y, g, h = di.value_gradient_and_hessian(backend, f, x)
    assert (
        y == pytest.approx(s4 * s6) and np.allclose(g, grad, rtol=1e-7) and np.allclose(h, hess, rtol=1e-4, atol=1e-4)
    )
    g, hv = di.gradient_and_hvp(backend, f, x, (t, 2 * t))
    assert np.allclose(g, grad, rtol=1e-7) and np.allclose(hv[1], 2 * hess @ t, rtol=1e-4, atol=1e-4)
    y, d, d2 = di.value_derivative_and_second_derivative(backend, np.sin, 0.7)
    assert np.isclose(d, np.cos(0.7), rtol=1e-8) and np.isclose(d2, -np.sin(0.7), rtol=1e-4)
