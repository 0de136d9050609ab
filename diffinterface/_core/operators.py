"""What each operator is, written once: one frozen :class:`Operator` record per operator.

The frontend (validation, conversion of results), the adapter contract (value forms, directions,
fallbacks), structured results (the kind of each result), the second order (which first-order
operators nest) and the engines' adapters read these records instead of keeping tables of their
own. Records are singletons compared by identity (``op is GRADIENT``); ``str(op)`` is the operator's
public name (``"gradient"``), which messages, ``prepare_<name>`` and the method-style adapters'
method names use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Direction = Literal["forward", "reverse"]
# How a result of an operator comes back to the user (_frontend.pipeline): "value" and "result" in
# x's family, "out" also written into out= when given, "tangents" a tuple for a tuple of tangents
# (else the one result).
Conversion = Literal["value", "result", "out", "tangents"]


@dataclass(frozen=True, eq=False, repr=False)
class Operator:
    """One operator: its arguments, its results and how it is computed.

    ``results`` are the kinds of the value form's results in order, the plain form's being the last
    (see ``_core.structure``): ``"s"`` an array as it is (a scalar f(x)), ``"x"``/``"y"`` shaped like
    x/f(x), ``"J"`` the Jacobian (the structure of f(x) holding structures of x), ``"H"`` the Hessian
    (x's holding x's), ``"*x"``/``"*y"`` one per tangent. ``conversions`` says how each of them comes
    back to the user (:data:`Conversion`).
    """

    name: str
    order: int  # 1 or 2
    tangent: Literal["tx", "ty"] | None  # the name of its tangent argument: shaped like x (tx) or f(x) (ty)
    scalar_input: bool  # x must be a scalar (derivative, second_derivative)
    scalar_output: bool  # f(x) must be a scalar (gradient, hvp, hessian)
    value_method: str  # the name of its value form (value_and_gradient, gradient_and_hvp, ...)
    results: tuple[str, ...]  # the kind of each result of the value form; the plain form's is the last
    conversions: tuple[Conversion, ...]  # how each result of the value form comes back to the user
    # the direction it runs in natively, which mode=None chooses for it (pushforward and derivative
    # forward, pullback and gradient reverse); None: chosen by sizes (jacobian) or fixed (second order)
    direction: Direction | None = None
    # second order: (inner, outer), the outer first-order operator applied to the inner one
    nesting: tuple[Operator, Operator] | None = None

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return self.name.upper()

    @property
    def tangent_of(self) -> Literal["x", "y"] | None:
        """What the tangent is shaped like: ``"x"`` (pushforward, hvp), ``"y"`` (pullback), or None."""
        return None if self.tangent is None else "x" if self.tangent == "tx" else "y"

    @property
    def plain_result(self) -> str:
        """The kind of the plain form's result."""
        return self.results[-1]

    @property
    def plain_conversion(self) -> Conversion:
        return self.conversions[-1]

    def through_jacobian(self, forward: bool) -> bool:
        """Whether this first-order operator is computed from the whole Jacobian in direction
        ``forward``: a jacobian, or an operator run against its native direction (a pushforward or
        derivative in reverse mode, a pullback or gradient in forward mode)."""
        if self.order != 1:
            return False
        if self.direction is None:
            return True  # the jacobian
        return forward != (self.direction == "forward")


PUSHFORWARD = Operator(
    name="pushforward",
    order=1,
    tangent="tx",
    scalar_input=False,
    scalar_output=False,
    value_method="value_and_pushforward",
    results=("y", "*y"),
    conversions=("value", "tangents"),
    direction="forward",
)
PULLBACK = Operator(
    name="pullback",
    order=1,
    tangent="ty",
    scalar_input=False,
    scalar_output=False,
    value_method="value_and_pullback",
    results=("y", "*x"),
    conversions=("value", "tangents"),
    direction="reverse",
)
DERIVATIVE = Operator(
    name="derivative",
    order=1,
    tangent=None,
    scalar_input=True,
    scalar_output=False,
    value_method="value_and_derivative",
    results=("y", "y"),
    conversions=("value", "result"),
    direction="forward",
)
GRADIENT = Operator(
    name="gradient",
    order=1,
    tangent=None,
    scalar_input=False,
    scalar_output=True,
    value_method="value_and_gradient",
    results=("s", "x"),
    conversions=("value", "out"),
    direction="reverse",
)
JACOBIAN = Operator(
    name="jacobian",
    order=1,
    tangent=None,
    scalar_input=False,
    scalar_output=False,
    value_method="value_and_jacobian",
    results=("y", "J"),
    conversions=("value", "out"),
)
HVP = Operator(
    name="hvp",
    order=2,
    tangent="tx",
    scalar_input=False,
    scalar_output=True,
    value_method="gradient_and_hvp",
    results=("x", "*x"),
    conversions=("result", "tangents"),
    nesting=(GRADIENT, PUSHFORWARD),  # forward over reverse when the outer backend is forward
)
HESSIAN = Operator(
    name="hessian",
    order=2,
    tangent=None,
    scalar_input=False,
    scalar_output=True,
    value_method="value_gradient_and_hessian",
    results=("s", "x", "H"),
    conversions=("value", "result", "out"),
    nesting=(GRADIENT, JACOBIAN),
)
SECOND_DERIVATIVE = Operator(
    name="second_derivative",
    order=2,
    tangent=None,
    scalar_input=True,
    scalar_output=False,
    value_method="value_derivative_and_second_derivative",
    results=("y", "y", "y"),
    conversions=("value", "result", "result"),
    nesting=(DERIVATIVE, DERIVATIVE),
)

OPERATORS: dict[str, Operator] = {
    op.name: op for op in (PUSHFORWARD, PULLBACK, DERIVATIVE, GRADIENT, JACOBIAN, HVP, HESSIAN, SECOND_DERIVATIVE)
}
