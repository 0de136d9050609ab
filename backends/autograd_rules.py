"""A :class:`diffinterface.rules.Rule` under HIPS autograd: one primitive with a VJP (the reverse
pass on the tape of the augmented primal) and a JVP (the forward rule), registered with
``defvjp_argnums`` / ``defjvp_argnums`` so that the rules see which arguments are differentiated.

autograd's arrays are NumPy arrays, so opaque and non-opaque bodies alike get NumPy arrays. The
primal runs the augmented primal where an argument is boxed by a reverse trace (its tape is kept,
for this call only, by a holder passed as the primitive's first argument); forward traces and
plain calls run the primal.

Second derivatives through a rule raise ``SecondOrderError``: the tape is computed on raw arrays,
so differentiating the reverse pass or the forward rule again (the values, the cotangent or the
tangents arrive boxed by an outer trace) would miss the rule's own curvature.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autograd.core import VJPNode
from autograd.extend import defjvp_argnums, defvjp_argnums, primitive
from autograd.tracer import Box

from diffinterface.extend import (
    Active,
    Rule,
    annotate,
    cotangent_like,
    cotangents,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np


class _Holder:
    """One call's activity (boxed by a reverse trace) and the tape of its augmented primal."""

    __slots__ = ("active", "tape")

    def __init__(self, active: tuple[Any, ...]) -> None:
        self.active, self.tape = active, None


def call(rule: Rule, args: tuple[Any, ...], kwargs: dict[Any, Any]) -> Any:
    key = ("autograd", tuple(sorted(kwargs.items()))) if kwargs else _KEY
    prim = rule.native(key, lambda: _register(rule, kwargs))
    active = tuple([isinstance(a, Box) and isinstance(a._node, VJPNode) for a in args])
    return prim(_Holder(active), *args)


_KEY = ("autograd", ())  # the registration's key without keywords


def _register(rule: Rule, kwargs: dict[Any, Any]) -> Any:
    def impl(holder: _Holder, *args: Any) -> Any:
        if True in holder.active and rule.augmented_primal is not None and rule.reverse is not None:
            y, holder.tape = rule.augmented_primal(*annotate(args, holder.active, Active), **kwargs)
            return y
        return rule.primal(*args, **kwargs)  # no tape (None) where the rule has no augmented primal

    impl.__name__ = rule.__name__
    prim = primitive(impl)

    def vjpmaker(
        argnums: tuple[int, ...], ans: np.ndarray, args: tuple[Any, ...], kw: dict[str, Any]
    ) -> Callable[[Any], tuple[Any, ...]]:
        holder, values = args[0], args[1:]

        def vjp(g: Any) -> Any:
            if rule.reverse is None:
                raise rule.missing("reverse", "under autograd")
            if isinstance(g, Box) or True in [isinstance(v, Box) for v in values]:
                raise rule.second_order("under autograd", "AutoAutograd()")
            active = holder.active
            cts = cotangents(rule.reverse(holder.tape, g, *annotate(values, active, Active), **kwargs), len(values))
            return tuple([cotangent_like(cts[i - 1] if active[i - 1] else None, values[i - 1]) for i in argnums])

        return vjp

    def jvpmaker(
        argnums: tuple[int, ...], gs: tuple[Any, ...], ans: np.ndarray, args: tuple[Any, ...], kw: dict[str, Any]
    ) -> Any:
        if not rule.has_forward:
            raise rule.missing("forward", "under autograd")
        values = args[1:]
        if any(isinstance(v, Box) for v in values) or any(isinstance(g, Box) for g in gs):
            raise rule.second_order("under autograd", "AutoAutograd()")
        active = tuple(i + 1 in argnums for i in range(len(values)))
        tangents = dict(zip(argnums, gs))
        _, dy = rule.forward(
            *annotate(values, active, Active, tuple(tangents.get(i + 1) for i in range(len(values)))), **kwargs
        )
        return cotangent_like(dy, ans)

    defvjp_argnums(prim, vjpmaker)
    defjvp_argnums(prim, jvpmaker)
    return prim
