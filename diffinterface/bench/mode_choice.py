"""The mode_choice table: ``mode=None``'s Jacobian against the better of forward and reverse."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from array_api_compat import array_namespace

from ._engines import config, engine, has_modes
from ._timing import Timing, ratio


def mode_choice(
    engines: list[str], sizes: tuple[Any, ...], timing: Timing, progress: Callable[..., Any]
) -> list[dict[str, Any]]:
    """Jacobians of ``sin(A @ x)``, tall (size x 10) and wide (10 x size): ``mode=None`` against the
    better of forward and reverse."""
    from .. import jacobian, prepare_jacobian

    rows = []
    plan = [(name, kind, n) for name in engines if has_modes(name) for kind in ("tall", "wide") for n in sizes]
    for i, (name, kind, n) in enumerate(plan):
        progress(i, len(plan), f"mode choice {name} {kind} {n}")
        eng = engine(name)
        rng = np.random.default_rng(n)
        shape = (n, 10) if kind == "tall" else (10, n)
        A = eng.array(rng.normal(size=shape) / np.sqrt(shape[1]))
        x = eng.array(rng.normal(size=shape[1]))

        def f(z, A=A):
            return array_namespace(z).sin(A @ z)

        calls = {}
        for mode in (None, "forward", "reverse"):
            backend = config(name, mode=mode)
            prep = prepare_jacobian(backend, f, x)
            calls[mode] = lambda b=backend, p=prep: eng.ready(jacobian(b, f, x, prep=p))
        fwd = ratio(calls["forward"], calls["reverse"], timing)
        better = "forward" if fwd["ratio"] <= 1 else "reverse"
        r = ratio(calls[None], calls[better], timing)
        rows.append(
            {
                "backend": repr(config(name)),
                "shape": f"{shape[0]}x{shape[1]}",
                "kind": kind,
                "auto_s": r["ours_s"],
                "better": better,
                "better_s": r["native_s"],
                "forward_over_reverse": fwd["ratio"],
                "auto_over_better": r["ratio"],
                "min": r["ratio_min"],
                "max": r["ratio_max"],
                "steady": "yes" if r["steady"] and fwd["steady"] else "NO",
                "within_1.1": "yes" if r["ratio"] <= 1.1 else "NO",
            }
        )
    progress(len(plan), len(plan), "mode choice")
    return rows
