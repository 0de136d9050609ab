"""``benchmark_differentiation``: timings and ``f``-call counts of the catalogue on each backend."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

from .._closures.namespaces import declare_modules
from ._harness import OPERATORS
from ._scenarios import Scenario, default_scenarios

declare_modules(__name__, walk=True)  # the counting wrapper below is walked like user code


class _Counter:
    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls = 0


def _counted(f: Callable[..., Any], counter: _Counter) -> Callable[..., Any]:
    def counted(*args: Any) -> Any:
        counter.calls += 1
        return f(*args)

    return counted


def time_call(fn: Callable[[], Any], repeat: int = 5, min_seconds: float = 0.02) -> tuple[float, float]:
    """Median and spread (max - min) of the per-call time of ``fn``, over ``repeat`` timed batches."""
    fn()
    number, start = 1, time.perf_counter()
    fn()
    once = time.perf_counter() - start
    if once < min_seconds:
        number = max(1, int(min_seconds / max(once, 1e-7)))
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples), max(samples) - min(samples)


def benchmark_differentiation(
    backends: Iterable[Any] | Any,
    scenarios: Iterable[Scenario] | None = None,
    *,
    repeat: int = 5,
    progress: Callable[[int, int, dict], None] | None = None,
) -> list[dict[str, Any]]:
    """One row per (backend, scenario): the prepared call, the unprepared call and the preparation
    (median seconds and spread), and how many times each evaluated ``f``."""
    if not isinstance(backends, (list, tuple)):
        backends = [backends]
    scenarios = list(default_scenarios() if scenarios is None else scenarios)
    rows: list[dict[str, Any]] = []
    total = len(backends) * len(scenarios)
    for backend in backends:
        for s in scenarios:
            plain, _, prepare, _, takes_tangent = OPERATORS[s.operator]
            counter = _Counter()
            f = _counted(s.f, counter)
            lead = (s.tangent,) if takes_tangent else ()
            kwargs = {"y": s.y} if s.y is not None else {}
            row: dict[Any, Any] = {"backend": repr(backend), "scenario": s.name, "operator": s.operator}
            try:
                counter.calls = 0
                prep = prepare(backend, f, s.x, *lead, *s.contexts, **kwargs)
                row["prepare_calls"] = counter.calls
                counter.calls = 0
                plain(backend, f, s.x, *lead, *s.contexts, prep=prep, **kwargs)
                row["prepared_calls"] = counter.calls
                counter.calls = 0
                plain(backend, f, s.x, *lead, *s.contexts, **kwargs)
                row["unprepared_calls"] = counter.calls
                row["prepared_s"], row["prepared_spread_s"] = time_call(
                    lambda: plain(backend, f, s.x, *lead, *s.contexts, prep=prep, **kwargs), repeat
                )
                row["unprepared_s"], row["unprepared_spread_s"] = time_call(
                    lambda: plain(backend, f, s.x, *lead, *s.contexts, **kwargs), repeat
                )
                row["prepare_s"], row["prepare_spread_s"] = time_call(
                    lambda: prepare(backend, f, s.x, *lead, *s.contexts, **kwargs), repeat
                )
                row["error"] = ""
            except Exception as e:  # a failing scenario is a row of the table, not the end of the run
                row["error"] = f"{type(e).__name__}: {e}"
            rows.append(row)
            if progress is not None:
                progress(len(rows), total, row)
    return rows
