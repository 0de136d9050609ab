"""Second-order operators as one first-order operator of ``outer`` applied to one of ``inner``.

This is the generic fallback of every adapter (``outer`` and ``inner`` the same backend: the engine
differentiates its own derivative, e.g. forward over reverse) and the implementation of
``SecondOrder(outer, inner)``. Adapters override it with their engine's native second order.

- hvp: pushforward (outer) of the gradient (inner): forward over reverse when outer is forward;
- hessian: jacobian (outer) of the gradient (inner);
- second_derivative: derivative (outer) of the derivative (inner).
"""

from __future__ import annotations

from typing import Any

from ._backends import adapter_for


class Nested:
    __slots__ = ("operator", "outer", "inner", "target", "inner_prep", "outer_prep", "first", "inner_adapter")

    def __init__(self, operator, outer, inner, target, x, tangents, contexts) -> None:
        from . import first_order as fo

        self.operator, self.outer, self.inner, self.target = operator, outer, inner, target
        self.inner_adapter = adapter_for(inner, f"{operator}({inner!r}, f, x)")
        f, kinds = target.f, tuple(type(c) for c in contexts)
        inner_op = fo.gradient if operator != "second_derivative" else fo.derivative
        prepare_inner = fo.prepare_gradient if operator != "second_derivative" else fo.prepare_derivative
        self.inner_prep = inner_prep = prepare_inner(inner, f, x, *contexts, strict=False)

        def first(x_: Any, *values: Any) -> Any:
            return inner_op(inner, f, x_, *(k(v) for k, v in zip(kinds, values)), prep=inner_prep)

        self.first = first
        if operator == "hvp":
            self.outer_prep = fo.prepare_pushforward(outer, first, x, tangents, *contexts, strict=False)
        elif operator == "hessian":
            self.outer_prep = fo.prepare_jacobian(outer, first, x, *contexts, strict=False)
        else:
            self.outer_prep = fo.prepare_derivative(outer, first, x, *contexts, strict=False)

    def run_second(self, x, tangents, contexts):
        from . import first_order as fo

        if self.operator == "hvp":
            return fo.pushforward(self.outer, self.first, x, tangents, *contexts, prep=self.outer_prep)
        if self.operator == "hessian":
            return fo.jacobian(self.outer, self.first, x, *contexts, prep=self.outer_prep)
        return fo.derivative(self.outer, self.first, x, *contexts, prep=self.outer_prep)

    def run_gradient_and_hvp(self, x, tangents, contexts):
        from . import first_order as fo

        return fo.value_and_pushforward(self.outer, self.first, x, tangents, *contexts, prep=self.outer_prep)

    def run_value_gradient_and_hessian(self, x, contexts):
        from . import first_order as fo

        grad, hess = fo.value_and_jacobian(self.outer, self.first, x, *contexts, prep=self.outer_prep)
        return self.inner_adapter.evaluate(self.target, x, contexts), grad, hess

    def run_value_derivative_and_second_derivative(self, x, contexts):
        from . import first_order as fo

        der, der2 = fo.value_and_derivative(self.outer, self.first, x, *contexts, prep=self.outer_prep)
        return self.inner_adapter.evaluate(self.target, x, contexts), der, der2
