"""``python -m diffinterface bench --table distributed`` (issue 18): finite differences of an expensive
black box on an executor.

A central-difference Jacobian of ``f(x) = sin(x) * sum(x)`` with 64 columns (16 in the quick run):
128 evaluations of ``f`` (32), each made expensive in one of two ways: ``sleeps`` (``time.sleep``:
a simulator waiting for an external solver, or I/O) and ``computes`` (a pure-Python loop calibrated
to the same time: a simulator holding one core and the GIL). Each is timed serially
(``AutoFiniteDiff()``), on a ``ThreadPoolExecutor(2)``, a ``ProcessPoolExecutor(2)`` (spawned
processes) and a Dask ``LocalCluster`` (2 worker processes of one thread, on this machine), with
``batch_size`` 1 and 8; every result is compared with the serial one to the bit. The per-task
overhead is measured with an ``f`` that costs nothing: the wall time of the whole Jacobian over
its number of tasks.
"""

from __future__ import annotations

import importlib.util
import math
import multiprocessing
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ._timing import Timing

COLUMNS = [
    "f",
    "executor",
    "workers",
    "batch_size",
    "points",
    "tasks",
    "seconds",
    "min_s",
    "max_s",
    "speedup",
    "per_task_ms",
    "equal_to_serial",
]

NOTES = (
    "f(x) = sin(x) * sum(x) made expensive: 'sleeps' calls time.sleep, 'computes' runs a pure-Python loop "
    "calibrated to the same time (one core, the GIL held), 'free' costs nothing (it measures the per-task "
    "overhead: per_task_ms = the Jacobian's wall time / its tasks). A central-difference Jacobian: 2 points per "
    "column. seconds: the median of the rounds (min_s, max_s their spread); speedup: the median over the "
    "rounds of the serial time over this one (each round times the serial call and every executor in turn). "
    "Executors: ThreadPoolExecutor(2), ProcessPoolExecutor(2) with spawned processes, Dask "
    "LocalCluster(n_workers=2, threads_per_worker=1), all started and warmed up before timing (the start is "
    "not timed). equal_to_serial: every result equal to the serial call's to the bit. Budget (issue 18): Dask's "
    "speed-up at least 1.8 for the sleeping f at batch_size 1."
)


def _value(x: np.ndarray) -> Any:
    return np.sin(x) * np.sum(x)


class _Sleeps:
    """``f`` that waits ``seconds`` before it returns (picklable: a module-level class)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, x: np.ndarray) -> Any:
        if self.seconds:
            time.sleep(self.seconds)
        return _value(x)


def _spin(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


class _Computes:
    """``f`` that runs ``n`` iterations of a pure-Python loop before it returns."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, x: np.ndarray) -> Any:
        _spin(self.n)
        return _value(x)


def _calibrate(seconds: float) -> int:
    """The loop count that takes ``seconds`` on this machine (the best of three measurements)."""
    n = 100_000
    best = min(_timed(lambda: _spin(n)) for _ in range(3))
    return max(1, int(n * seconds / best))


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))


def distributed(full: bool, timing: Timing, progress: Callable[..., Any]) -> list[dict[str, Any]]:
    """The rows of the table; ``timing.slow_f`` is how long the expensive ``f`` takes. The executors
    are started and warmed up first; then each round times the serial call and every executor in
    turn (the machine's speed drifts: a speed-up is the median of the per-round ratios)."""
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

    from .. import AutoFiniteDiff, jacobian

    columns, rounds = (64, 3) if full else (16, 1)
    cost = timing.slow_f
    x = np.linspace(0.1, 1.0, columns)
    fs: dict[str, Any] = {"sleeps": _Sleeps(cost), "computes": _Computes(_calibrate(cost)), "free": _Sleeps(0.0)}
    points = 2 * columns
    serial = {name: jacobian(AutoFiniteDiff(), f, x) for name, f in fs.items()}
    expected = np.diag(np.cos(x)) * np.sum(x) + np.sin(x)[:, None]
    for name in fs:
        np.testing.assert_allclose(serial[name], expected, rtol=1e-6, atol=1e-8)

    resources: list[Any] = []
    try:
        executors: list[tuple[str, Any]] = []
        threads = ThreadPoolExecutor(2)
        resources.append(threads)
        executors.append(("ThreadPoolExecutor(2)", threads))
        pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))
        resources.append(pool)
        executors.append(("ProcessPoolExecutor(2)", pool))
        if importlib.util.find_spec("distributed") is not None:
            cluster = _dask_cluster()
            resources.append(cluster)
            executors.append(("Dask LocalCluster(2 workers)", cluster[1].get_executor()))
        configs = [("serial", AutoFiniteDiff())] + [
            (label, AutoFiniteDiff(executor=e, batch_size=b)) for label, e in executors for b in (1, 8)
        ]
        for _, backend in configs[1:]:  # workers started, f's module imported there
            jacobian(backend, fs["free"], x)
        samples: dict[tuple[str, int], list[float]] = {}
        equal: dict[tuple[str, int], bool] = {}
        plan, done = len(fs) * rounds * len(configs), 0
        for name, f in fs.items():
            for _ in range(rounds):
                for k, (label, backend) in enumerate(configs):
                    progress(done, plan, f"distributed {name} {label} batch {backend.batch_size}")
                    start = time.perf_counter()
                    result = jacobian(backend, f, x)
                    samples.setdefault((name, k), []).append(time.perf_counter() - start)
                    equal[(name, k)] = equal.get((name, k), True) and _same(result, serial[name])
                    done += 1
    finally:
        for resource in reversed(resources):
            _close(resource)
    progress(plan, plan, "distributed")
    rows = []
    for name in fs:
        for k, (label, backend) in enumerate(configs):
            times = samples[(name, k)]
            tasks = math.ceil(points / (backend.batch_size or 1)) if backend.executor is not None else 0
            rows.append(
                {
                    "f": f"{name} ({cost * 1e3:.0f} ms)" if name != "free" else "free",
                    "executor": label,
                    "workers": 2 if tasks else 1,
                    "batch_size": (backend.batch_size or 1) if tasks else "",
                    "points": points,
                    "tasks": tasks or "",
                    "seconds": statistics.median(times),
                    "min_s": min(times),
                    "max_s": max(times),
                    "speedup": statistics.median(s / t for s, t in zip(samples[(name, 0)], times)),
                    "per_task_ms": statistics.median(times) / tasks * 1e3 if tasks and name == "free" else "",
                    "equal_to_serial": "yes" if equal[(name, k)] else "NO",
                }
            )
    return rows


def _dask_cluster() -> tuple[Any, Any]:
    import distributed

    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
    return cluster, distributed.Client(cluster)


def _close(resource: Any) -> None:
    if isinstance(resource, tuple):  # Dask: the client, then the cluster
        resource[1].close()
        resource[0].close()
    else:
        resource.shutdown()
