"""The rules table: a prepared gradient through a rule against the engine's registration written by hand."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from array_api_compat import array_namespace

from ._engines import config, engine
from ._timing import Timing, columns, ratio

if TYPE_CHECKING:
    from .._core.types import Array
    from ..rules import Active, Const


def _one_argument_rule(b: np.ndarray) -> Any:
    """``cumsum(x * b**2)`` as a rule of x alone, its bodies closing over ``b``, as a hand-written
    registration does (a rule made here holds a closure: it pickles by value, not by reference). Its
    reverse pass needs no tape, as the hand-written VJP needs only its input: no augmented primal."""
    from ..rules import custom_rule

    @custom_rule(opaque=True)
    def cumsum_scaled(a: np.ndarray) -> Any:
        return np.cumsum(a * b**2)

    @cumsum_scaled.def_reverse
    def _reverse(tape: None, dy: np.ndarray, a: Const | Active) -> Any:
        return np.cumsum(np.asarray(dy)[::-1])[::-1] * b**2

    return cumsum_scaled


def rules(
    engines: list[str], sizes: tuple[Any, ...], timing: Timing, progress: Callable[..., Any]
) -> list[dict[str, Any]]:
    """A prepared gradient through a ``custom_rule`` against the same through the engine's own
    registration written by hand (``rule_by_hand``), both through the engine's backend: the price of
    writing the rule once. The function is opaque NumPy code, ``cumsum(x * b**2)`` with ``b``
    captured, as a rule of x alone whose bodies close over b (like for like with the hand-written
    registration) and as ``diffinterface.testing``'s two-argument ``cumsum_weighted(x, b)``, its b a
    ``Const`` that the engine's registration passes along (through JAX's host callbacks)."""
    from .. import gradient, prepare_gradient
    from ..testing._rule_scenarios import cumsum_weighted

    records = {name: engine(name) for name in engines}
    plan = [
        (name, n, kind)
        for name in engines
        if records[name].rule_by_hand(np.cumsum, np.cumsum) is not None
        for n in sizes
        for kind in ("x alone, b closed over", "x and b, b a Const")
    ]
    rows = []
    for i, (name, n, kind) in enumerate(plan):
        progress(i, len(plan), f"rules {name} {n} {kind}")
        eng, backend = records[name], config(name, closure="const")  # the closures table prices duplicates
        b = np.linspace(0.5, 1.5, n)

        def primal(a: np.ndarray) -> Any:  # the rule's arithmetic, written for x alone
            return np.cumsum(a * b**2)

        def vjp(a: np.ndarray, dy: np.ndarray) -> Any:
            return np.cumsum(np.asarray(dy)[::-1])[::-1] * b**2

        by_hand: Any = eng.rule_by_hand(primal, vjp)
        one = _one_argument_rule(b)

        def with_rule(x: Array) -> Any:
            if kind.startswith("x alone"):
                return array_namespace(x).sum(one(x))
            return array_namespace(x).sum(cumsum_weighted(x, b))

        def with_hand(x: Array) -> Any:
            return array_namespace(x).sum(by_hand(x))

        # the engine's own inputs (JAX: float32, its default; a float64 host callback of a large input
        # fails under JAX's thread-local x64 context, which a hand-written registration cannot help)
        x = eng.array(np.linspace(-1.0, 1.0, n))
        expected = np.cumsum(np.ones(n)[::-1])[::-1] * b**2
        rtol = 1e-12 if np.asarray(x).dtype == np.float64 else 1e-5
        p_rule, p_hand = prepare_gradient(backend, with_rule, x), prepare_gradient(backend, with_hand, x)
        for f, p in ((with_rule, p_rule), (with_hand, p_hand)):  # both right before both are timed
            np.testing.assert_allclose(np.asarray(gradient(backend, f, x, prep=p)), expected, rtol=rtol)
        r = ratio(
            lambda: eng.ready(gradient(backend, with_rule, x, prep=p_rule)),
            lambda: eng.ready(gradient(backend, with_hand, x, prep=p_hand)),
            timing,
        )
        rows.append(
            {
                "backend": repr(backend),
                "rule": kind,
                "inputs": eng.inputs,
                "size": n,
                **columns(r, "rule_s", "by_hand_s"),
                "within_1.1": r["ratio"] <= 1.1,
            }
        )
    progress(len(plan), len(plan), "rules")
    return rows
