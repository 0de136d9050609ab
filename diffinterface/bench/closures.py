"""The closures table: ``closure="duplicated"`` against ``closure="const"``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from array_api_compat import array_namespace

from ._engines import config, engine
from ._timing import Timing, columns, ratio


def closures(
    engines: list[str], sizes: tuple[Any, ...], timing: Timing, progress: Callable[..., Any]
) -> list[dict[str, Any]]:
    """``closure="duplicated"`` against ``"const"``: a prepared gradient (reverse mode; the
    pushforward too: forward mode) of a function capturing a float, one reading a captured
    array, one writing a captured buffer (against the same arithmetic without the buffer), and one
    cutting x into parts by a captured list of 10 keys and a part size (state that is not arrays)."""
    from .. import gradient, prepare_gradient, prepare_pushforward, pushforward

    plan = [(name, n) for name in engines for n in sizes]
    rows = []
    for i, (name, n) in enumerate(plan):
        progress(i, len(plan), f"closures {name} {n}")
        eng = engine(name)
        scale, a, buf = 3.0, np.linspace(0.5, 1.5, n), np.zeros(n)

        def captures_float(x):
            xp = array_namespace(x)
            return scale * xp.sum(xp.sin(x) ** 2)

        def reads_array(x):
            xp = array_namespace(x)
            return xp.sum(xp.sin(xp.asarray(a) * x) ** 2)

        def writes_buffer(x):
            xp = array_namespace(x)
            buf[...] = 2 * x
            return xp.sum(xp.asarray(buf) * x)

        def without_buffer(x):
            return array_namespace(x).sum((2 * x) * x)

        keys, part = [f"part{j}" for j in range(10)], max(n // 10, 1)

        def cuts_by_keys(x):
            xp = array_namespace(x)
            parts = {k: x[j * part : (j + 1) * part] for j, k in enumerate(keys)}
            return sum(xp.sum(xp.sin(v) ** 2) for v in parts.values())

        x, t = np.linspace(-1.0, 1.0, n), np.linspace(0.5, 1.5, n)
        duplicated, const = config(name), config(name, closure="const")
        for label, f_dup, f_const in [
            ("captures a float", captures_float, captures_float),
            ("reads a captured array", reads_array, reads_array),
            ("writes a captured buffer", writes_buffer, without_buffer),
            ("cuts x by captured keys and a size", cuts_by_keys, cuts_by_keys),
        ]:
            for operator in ("gradient", "pushforward"):
                if not eng.allows(operator, n):
                    continue
                if operator == "gradient":
                    pd, pc = prepare_gradient(duplicated, f_dup, x), prepare_gradient(const, f_const, x)
                    ours = lambda f=f_dup, p=pd: eng.ready(gradient(duplicated, f, x, prep=p))  # noqa: E731
                    native = lambda f=f_const, p=pc: eng.ready(gradient(const, f, x, prep=p))  # noqa: E731
                else:
                    pd, pc = prepare_pushforward(duplicated, f_dup, x, t), prepare_pushforward(const, f_const, x, t)
                    ours = lambda f=f_dup, p=pd: eng.ready(pushforward(duplicated, f, x, t, prep=p))  # noqa: E731
                    native = lambda f=f_const, p=pc: eng.ready(pushforward(const, f, x, t, prep=p))  # noqa: E731
                r = ratio(ours, native, timing)
                rows.append(
                    {
                        "backend": repr(duplicated),
                        "function": label,
                        "operator": operator,
                        "size": n,
                        **columns(r, "duplicated_s", "const_s"),
                    }
                )
    progress(len(plan), len(plan), "closures")
    return rows
