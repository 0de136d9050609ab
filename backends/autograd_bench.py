"""HIPS autograd's own best calls (``make_vjp``, ``make_jvp``), what ``AutoAutograd`` is benchmarked against.

The record is a leaf of its own: the adapter does not import it, and ``python -m diffinterface bench`` loads
it through the config's ``bench`` path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import autograd
import autograd.numpy
import numpy as np

from diffinterface.extend import BenchEngine

if TYPE_CHECKING:
    from collections.abc import Callable


# autograd makes its numpy wrappers and its operators' signatures at import time: a type checker sees neither
ag: Any = autograd
anp: Any = autograd.numpy


class Bench(BenchEngine):
    """autograd's ``grad``, ``hessian``, ``jacobian`` (reverse) and ``make_jvp``/``make_vjp``."""

    costs = {
        "jacobian tall": "one forward pass per column, each running f over read-only aliases of its captured state "
        "(the closure policy: a writing f would be rerun over copies) and checking its output, where the "
        "hand-written loop calls f's arithmetic directly",
    }

    def rule_by_hand(self, primal: Callable[..., Any], vjp: Callable[..., Any]) -> Any:
        """An autograd ``primitive`` with ``defvjp``."""
        from autograd.extend import defvjp, primitive

        by_hand = primitive(lambda a: primal(a))
        defvjp(by_hand, lambda ans, a: lambda g: vjp(a, g))
        return by_hand

    def native(self, operator: str, f: Callable[..., Any], x: np.ndarray, t: np.ndarray, A: np.ndarray) -> Any:
        if operator == "gradient":
            g = ag.grad(f)
            return lambda: g(x)
        if operator == "hvp":
            g = ag.grad(f)
            return lambda: ag.make_jvp(g)(x)(t)[1]
        if operator == "hessian":
            h = ag.hessian(f)
            return lambda: h(x)
        if operator == "pushforward":
            return lambda: ag.make_jvp(f)(x)(t)[1]
        if operator == "pullback":
            return lambda: ag.make_vjp(f)(x)[0](t)
        if operator == "jacobian tall":  # autograd.jacobian is reverse only: one jvp per column
            eye = np.eye(x.size)

            def columns() -> Any:
                push = ag.make_jvp(lambda z: anp.sin(A @ z))(x)
                return np.stack([push(e)[1] for e in eye], axis=1)

            return columns
        if operator == "jacobian wide":
            j = ag.jacobian(lambda z: anp.sin(A @ z))
            return lambda: j(x)
        return None
