"""Second-order operators as one first-order operator of ``outer`` applied to one of ``inner``.

This is the generic fallback of every adapter (``outer`` and ``inner`` the same backend: the engine
differentiates its own derivative, e.g. forward over reverse) and the implementation of
``SecondOrder(outer, inner)``. Adapters override it with their engine's native second order.

- hvp: pushforward (outer) of the gradient (inner): forward over reverse when outer is forward;
- hessian: jacobian (outer) of the gradient (inner);
- second_derivative: derivative (outer) of the derivative (inner).

It works at the adapter level only (the two adapters' own ``prepare_*`` and runners, over a
:class:`Target` of the inner derivative), never through the public operators: the frontend sits
above the adapters, and nothing below it calls back up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._core.arrays import dtype_name, output_like, private_copy
from .._core.configs import adapter_for
from .._core.operators import PUSHFORWARD, Operator
from .target import Target

if TYPE_CHECKING:
    from .._core.types import Array
    from .target import Target


class Nested:
    """The preparation of ``outer``'s first-order operator over ``inner``'s first-order operator."""

    __slots__ = ("operator", "target", "inner_adapter", "outer", "tangent")

    def __init__(
        self,
        operator: Operator,
        outer: Any,
        inner: Any,
        target: Target,
        x: Array,
        tangents: tuple[Any, ...],
        contexts: tuple[Any, ...],
    ) -> None:
        assert operator.nesting is not None, operator
        inner_operator, outer_operator = operator.nesting
        self.operator, self.target, self.tangent = operator, target, outer_operator is PUSHFORWARD
        call = target.call
        self.inner_adapter = inner_adapter = adapter_for(inner, call)
        outer_adapter = adapter_for(outer, call)
        accuracy = inner_adapter.accuracy(dtype_name(x)) if outer_adapter.evaluates_only else None
        if accuracy is not None and hasattr(outer_adapter, "for_accuracy"):
            outer_adapter = outer_adapter.for_accuracy(accuracy)  # steps for inner's coarser results
        inner_info = inner_adapter.output_info(target, private_copy(x), contexts, False)
        run_inner = inner_adapter.prepare(inner_operator, target, x, (), contexts, inner_info).plain
        kinds = tuple(type(c) for c in contexts)

        def first(x_: Any, *values: Any) -> Any:
            """The inner derivative at ``x_`` (in the outer engine's arrays), context values rewrapped."""
            return output_like(run_inner(x_, (), tuple(k(v) for k, v in zip(kinds, values))), x_)

        first_target = Target(first, None, getattr(outer, "closure", "duplicated"), call)
        outer_info = outer_adapter.output_info(first_target, private_copy(x), contexts, False)
        self.outer = outer_adapter.prepare(
            outer_operator, first_target, x, tangents if self.tangent else (), contexts, outer_info
        )

    def run_second(self, x: Array, tangents: tuple[Any, ...], contexts: tuple[Any, ...]) -> Any:
        """The second-order result: hvps (a tuple), the Hessian or the second derivative."""
        return self.outer.plain(x, tangents, contexts)

    def run_gradient_and_hvp(self, x: Array, tangents: tuple[Any, ...], contexts: tuple[Any, ...]) -> tuple[Any, ...]:
        return self.outer.value(x, tangents, contexts)

    def run_value_gradient_and_hessian(self, x: Array, contexts: tuple[Any, ...]) -> tuple[Any, ...]:
        grad, hess = self.outer.value(x, (), contexts)
        return self.inner_adapter.evaluate(self.target, x, contexts), grad, hess

    def run_value_derivative_and_second_derivative(self, x: Array, contexts: tuple[Any, ...]) -> tuple[Any, ...]:
        der, der2 = self.outer.value(x, (), contexts)
        return self.inner_adapter.evaluate(self.target, x, contexts), der, der2
