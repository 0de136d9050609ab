"""The cheap_gradient table: a prepared gradient over one evaluation of ``f``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._engines import config, engine, sum_sin2
from ._timing import Timing, columns, ratio


def cheap_gradient(
    engines: list[str], sizes: tuple[Any, ...], timing: Timing, progress: Callable[..., Any]
) -> list[dict[str, Any]]:
    """The prepared gradient over ``f`` itself (JAX: ``jax.jit(f)``), per backend and size."""
    from .. import gradient, prepare_gradient

    rows = []
    records = {name: engine(name) for name in engines}
    plan = [(name, n) for name in engines for n in sizes if records[name].allows("gradient", n)]
    for i, (name, n) in enumerate(plan):
        progress(i, len(plan), f"cheap gradient {name} {n}")
        eng, backend = records[name], config(name)
        x = eng.array(np.random.default_rng(n).normal(size=n))
        f = eng.compiled(sum_sin2)
        prep = prepare_gradient(backend, sum_sin2, x)
        r = ratio(lambda: eng.ready(gradient(backend, sum_sin2, x, prep=prep)), lambda: eng.ready(f(x)), timing)
        rows.append(
            {
                "backend": repr(backend),
                "size": n,
                "inputs": eng.inputs,
                **columns(r, "gradient_s", "f_s", "gradient_over_f"),
            }
        )
    progress(len(plan), len(plan), "cheap gradient")
    return rows
