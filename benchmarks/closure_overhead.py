"""What ``closure="duplicated"`` costs against ``closure="const"``, per backend and size.

    python benchmarks/closure_overhead.py        # writes benchmarks/results/closure_overhead.{md,csv}

A prepared pushforward (one tangent; finite differences evaluate ``f`` twice) of three functions:

- ``captures a float``: ``scale * sum(sin(x)**2)`` with ``scale`` a captured Python float;
- ``captures an array``: ``sum(sin(a * x)**2)`` with ``a`` a captured numpy array of x's size,
  only read;
- ``writes a buffer``: ``buf[...] = 2 x; sum(buf * x)`` with ``buf`` a captured numpy buffer, which
  needs the duplicate; its "native" is the same arithmetic without the buffer under ``"const"``.

In the table "ours" is ``"duplicated"`` and "native" is ``"const"``: the ratio is the price of the
duplicates. The budget of the closure issue: at most 1.05 at n >= 1e4 for a function that captures
nothing writable.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
from array_api_compat import array_namespace

sys.path.insert(0, os.path.dirname(__file__))
from _common import run_and_write  # noqa: E402

import diffinterface as di  # noqa: E402


def functions(n: int) -> list:
    """(name, duplicated f, const f) for one size; each binds its state as a closure."""
    scale = 3.0
    a = np.linspace(0.5, 1.5, n)
    buf = np.zeros(n)

    def captures_float(x):
        xp = array_namespace(x)
        return scale * xp.sum(xp.sin(x) ** 2)

    def captures_array(x):
        xp = array_namespace(x)
        return xp.sum(xp.sin(xp.asarray(a) * x) ** 2)

    def writes_buffer(x):
        xp = array_namespace(x)
        buf[...] = 2 * x
        return xp.sum(xp.asarray(buf) * x)

    def without_buffer(x):
        xp = array_namespace(x)
        return xp.sum((2 * x) * x)

    return [("captures a float", captures_float, captures_float),
            ("captures an array", captures_array, captures_array),
            ("writes a buffer", writes_buffer, without_buffer)]


def backends() -> list:
    out = [di.AutoFiniteDiff]
    for config, engine in [(di.AutoJAX, "jax"), (di.AutoTorch, "torch"), (di.AutoAutograd, "autograd")]:
        if importlib.util.find_spec(engine) is not None:
            out.append(config)
    return out


def cases(quick: bool) -> list:
    out = []
    sizes = (100, 10_000) if quick else (100, 10_000, 1_000_000)
    for config in backends():
        duplicated, const = config(), config(closure="const")
        for n in sizes:
            x, t = np.linspace(-1.0, 1.0, n), np.linspace(0.5, 1.5, n)
            for name, f_dup, f_const in functions(n):
                prep_d = di.prepare_pushforward(duplicated, f_dup, x, t)
                prep_c = di.prepare_pushforward(const, f_const, x, t)
                out.append((f"{config.__name__}: {name}", n, "duplicated vs const",
                            lambda x=x, t=t, f=f_dup, p=prep_d, b=duplicated: di.pushforward(b, f, x, t, prep=p),
                            lambda x=x, t=t, f=f_const, p=prep_c, b=const: di.pushforward(b, f, x, t, prep=p)))
    return out


def main(quick: bool = False, runs: int = 1) -> list[dict]:
    return run_and_write("closure_overhead", "closure='duplicated' / closure='const', prepared pushforward",
                         cases(quick), runs)


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
