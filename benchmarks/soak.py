"""Soak: many calls of one prepared gradient per backend, memory recorded as it goes.

``python benchmarks/soak.py`` runs 20,000 prepared calls per installed backend (a closure over a
captured array, a ``Constant`` context, a fresh ``x`` each call) followed by 500 unprepared calls
(a new closure each call, as a loop that forgets to prepare makes), and writes
``benchmarks/results/soak.{md,csv}``: at each checkpoint the process's resident memory (RSS), the
Python allocations traced by ``tracemalloc`` and the number of entries of the library's own
process-wide caches. ``tests/test_soak.py`` runs a shorter soak and fails on growth.
"""

from __future__ import annotations

import gc
import os
import sys
import time
import tracemalloc

import numpy as np

import diffinterface as di
from diffinterface import bench as _bench
from diffinterface import rules
from diffinterface._core import arrays as _arrays
from diffinterface._core import configs as _backends

BACKENDS = {
    "finitediff": lambda: di.AutoFiniteDiff(),
    "jax": lambda: di.AutoJAX(),
    "torch": lambda: di.AutoTorch(),
    "autograd": lambda: di.AutoAutograd(),
}


def rss_bytes() -> int:
    """The resident memory of this process (``/proc/self/statm``; 0 where there is none)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def library_cache_entries() -> int:
    """Entries of the caches the library keeps for the whole process: the array family of each type
    met, the adapter of each backend config, the rules registrar modules and the registrar of each type met."""
    return len(_arrays._FAMILY_OF_TYPE) + len(_backends._adapters) + len(rules._MODULES) + len(rules._REGISTRAR_OF_TYPE)


def _function(n: int):
    weights = np.linspace(0.5, 1.5, n)  # captured: duplicated per call (the default closure policy)

    def f(x, scale):
        return (scale * weights * x**2).sum() + (x[:-1] * x[1:]).sum()

    return f


def soak(
    engine: str, prepared_calls: int, unprepared_calls: int, every: int, every_unprepared: int, n: int = 10
) -> list[dict]:
    """Checkpoint rows ``{engine, phase, calls, rss_bytes, traced_bytes, cache_entries, seconds}``,
    each gradient checked against its closed form (a soak that drifts into wrong numbers fails)."""
    backend = BACKENDS[engine]()
    scale = np.array(2.0)
    x0 = np.linspace(-1.0, 1.0, n)
    weights = np.linspace(0.5, 1.5, n)

    def want(x):
        g = 2 * 2.0 * weights * x
        g[:-1] += x[1:]
        g[1:] += x[:-1]
        return g

    f = _function(n)
    prep = di.prepare_gradient(backend, f, x0, di.Constant(scale))
    rows: list[dict] = []
    started = time.perf_counter()
    tracemalloc.start()

    def checkpoint(phase: str, calls: int) -> None:
        gc.collect()
        rows.append(
            {
                "engine": engine,
                "phase": phase,
                "calls": calls,
                "rss_bytes": rss_bytes(),
                "traced_bytes": tracemalloc.get_traced_memory()[0],
                "cache_entries": library_cache_entries(),
                "seconds": time.perf_counter() - started,
            }
        )

    try:
        checkpoint("prepared", 0)
        for i in range(1, prepared_calls + 1):
            x = x0 + 1e-3 * (i % 7)
            g = di.gradient(backend, f, x, di.Constant(scale), prep=prep)
            if i % every == 0:
                assert np.allclose(np.asarray(g), want(x), rtol=1e-6), (engine, i)
                checkpoint("prepared", i)
        for i in range(1, unprepared_calls + 1):
            x = x0 + 1e-3 * (i % 7)
            g = di.gradient(backend, _function(n), x, di.Constant(scale))  # a new closure each call
            if i % every_unprepared == 0:
                assert np.allclose(np.asarray(g), want(x), rtol=1e-6), (engine, i)
                checkpoint("unprepared", i)
    finally:
        tracemalloc.stop()
    return rows


def main(argv: list[str]) -> None:
    engines = _bench.installed_engines(argv or None)
    rows = []
    for engine in engines:
        measured = soak(engine, prepared_calls=20_000, unprepared_calls=500, every=2_000, every_unprepared=50)
        rows += measured
        for phase in ("prepared", "unprepared"):
            points = [r for r in measured if r["phase"] == phase]
            first, last = points[0], points[-1]
            print(
                f"{engine} {phase}: traced {first['traced_bytes']} -> {last['traced_bytes']} bytes, "
                f"rss {first['rss_bytes'] >> 20} -> {last['rss_bytes'] >> 20} MiB, "
                f"{last['seconds']:.1f} s",
                flush=True,
            )
    results = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    os.makedirs(results, exist_ok=True)
    _bench.write_table(
        os.path.join(results, "soak"),
        "Soak: 20,000 prepared and 500 unprepared gradient calls per backend",
        _bench.machine(),
        rows,
        ["engine", "phase", "calls", "rss_bytes", "traced_bytes", "cache_entries", "seconds"],
        notes=(
            "f(x) = sum(2 w x^2) + sum(x[:-1] x[1:]) at n = 10, a closure over w, a Constant scale; a fresh x "
            "each call; every checkpoint's gradient checked against the closed form. traced_bytes: Python "
            "allocations alive (tracemalloc, after gc.collect()), counted from the start of the soak; "
            "rss_bytes: the whole process. Unprepared calls build a new closure each time."
        ),
    )


if __name__ == "__main__":
    main(sys.argv[1:])
