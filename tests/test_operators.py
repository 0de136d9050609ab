"""The operator records (``diffinterface.extend.Operator``) against what they describe: the public
functions' signatures, the results of the operators themselves, and the derivatives they nest."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import diffinterface as di
from diffinterface import extend

RECORDS = list(extend.OPERATORS.values())


def test_one_record_per_public_operator() -> None:
    assert sorted(extend.OPERATORS) == sorted(
        ["pushforward", "pullback", "derivative", "gradient", "jacobian", "hvp", "hessian", "second_derivative"]
    )
    for name, op in extend.OPERATORS.items():
        assert op.name == name and str(op) == name
        assert getattr(extend, name.upper()) is op
    # the contract's facts (docs/contract.md, sections 2 and 3), stated independently of the records
    assert {n for n, op in extend.OPERATORS.items() if op.scalar_output} == {"gradient", "hvp", "hessian"}
    assert {n for n, op in extend.OPERATORS.items() if op.scalar_input} == {"derivative", "second_derivative"}
    assert {n for n, op in extend.OPERATORS.items() if op.order == 2} == {"hvp", "hessian", "second_derivative"}
    assert {n: op.direction for n, op in extend.OPERATORS.items() if op.direction} == {
        "pushforward": "forward",
        "derivative": "forward",
        "pullback": "reverse",
        "gradient": "reverse",
    }


@pytest.mark.parametrize("op", RECORDS, ids=str)
def test_record_matches_the_public_signatures(op: extend.Operator) -> None:
    """Tangent name, value form, ``out=`` (every operator: its result is an array) and ``has_aux=`` as
    the public functions declare them."""
    for fn in (getattr(di, op.name), getattr(di, op.value_method), getattr(di, f"prepare_{op.name}")):
        params = list(inspect.signature(fn).parameters)
        assert params[:3] == ["backend", "f", "x"], fn.__name__
        third = params[3] if params[3] != "contexts" else None
        assert third == op.tangent, (fn.__name__, third)
        assert "has_aux" in params, fn.__name__
    assert "out" in inspect.signature(getattr(di, op.name)).parameters
    assert "out" in inspect.signature(getattr(di, op.value_method)).parameters
    assert len(op.conversions) == len(op.results)
    assert (op.order == 2) == (op.nesting is not None)


def _call(op: extend.Operator, f, x):
    ty = np.ones(np.shape(f(x)))
    args = (x, np.ones_like(x)) if op.tangent == "tx" else (x, ty) if op.tangent == "ty" else (x,)
    return getattr(di, op.name)(di.AutoFiniteDiff(), f, *args)


@pytest.mark.parametrize("op", RECORDS, ids=str)
def test_scalar_input_and_output_are_what_the_operators_refuse(op: extend.Operator) -> None:
    """``scalar_output``: a vector f(x) is refused, and only then; ``scalar_input``: a vector x is
    refused, and only then."""
    x = np.array(0.5) if op.scalar_input else np.ones(3)
    vector_out = lambda x: np.stack([np.sum(x**2), np.sum(x)])  # noqa: E731
    if op.scalar_output:
        with pytest.raises(ValueError, match=rf"{op.name}\(AutoFiniteDiff\(\), f, x.*needs f\(x\) to be a scalar"):
            _call(op, vector_out, x)
    else:
        _call(op, vector_out, x)
    scalar_out = lambda x: np.sum(x**2)  # noqa: E731
    if op.scalar_input:
        with pytest.raises(ValueError, match=rf"{op.name}\(AutoFiniteDiff\(\), f, x\): .*needs a scalar x"):
            _call(op, scalar_out, np.ones(3))
    else:
        _call(op, scalar_out, np.ones(3))


def test_value_forms_and_nesting_against_analytic_derivatives() -> None:
    """f(x) = sum(x^3) at x = (1, 2): the value forms' parts in the order the records and
    ``value_form`` give them (f(x), the first derivative, the result)."""
    f = lambda x: np.sum(x**3)  # noqa: E731
    x = np.array([1.0, 2.0])
    grad, hess = 3 * x**2, np.diag(6 * x)
    backend = di.AutoFiniteDiff()
    y, g, h = di.value_gradient_and_hessian(backend, f, x)
    np.testing.assert_allclose([y], [9.0])
    np.testing.assert_allclose(g, grad, rtol=1e-6)
    np.testing.assert_allclose(h, hess, rtol=1e-4)
    g2, hv = di.gradient_and_hvp(backend, f, x, np.array([1.0, 0.0]))
    np.testing.assert_allclose(g2, grad, rtol=1e-6)
    np.testing.assert_allclose(hv, hess[:, 0], rtol=1e-4)
    assert extend.value_form(extend.HVP, ("y", "g"), "r", str.upper) == ("G", "r")
    assert extend.value_form(extend.HESSIAN, ("y", "g"), "r", str.upper) == ("Y", "G", "r")
    assert extend.value_form(extend.GRADIENT, "y", "r", str.upper) == ("Y", "r")
    # the second order nests (inner, outer) first-order operators, forward over reverse for hvp
    assert extend.HVP.nesting == (extend.GRADIENT, extend.PUSHFORWARD)
    assert extend.HESSIAN.nesting == (extend.GRADIENT, extend.JACOBIAN)
    assert extend.SECOND_DERIVATIVE.nesting == (extend.DERIVATIVE, extend.DERIVATIVE)


# (operator, computed through the whole Jacobian in forward mode, in reverse mode): contract section 2
THROUGH_JACOBIAN = [
    (extend.PUSHFORWARD, False, True),
    (extend.DERIVATIVE, False, True),
    (extend.PULLBACK, True, False),
    (extend.GRADIENT, True, False),
    (extend.JACOBIAN, True, True),
    (extend.HVP, False, False),
    (extend.HESSIAN, False, False),
    (extend.SECOND_DERIVATIVE, False, False),
]


@pytest.mark.parametrize(("op", "forward", "reverse"), THROUGH_JACOBIAN, ids=lambda v: str(v))
def test_through_jacobian_against_the_contract(op: extend.Operator, forward: bool, reverse: bool) -> None:
    assert (op.through_jacobian(True), op.through_jacobian(False)) == (forward, reverse)
