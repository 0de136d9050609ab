"""The timing loop, the machine record and the table writer that every benchmark table uses."""

from __future__ import annotations

import csv
import datetime
import math
import os
import platform
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

# -- timing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """How long to time: ``rounds`` interleaved rounds of batches of about ``seconds``, after
    ``warmup`` seconds of both calls; the preparation ``prep_repeat`` times; ``slow_f``: how long
    the expensive ``f`` of the distributed table takes per evaluation; ``remeasure``: how many more
    times a measurement whose rounds disagree by more than :data:`MAX_SPREAD` is taken."""

    rounds: int = 21
    seconds: float = 0.03
    warmup: float = 0.5
    prep_repeat: int = 3
    slow_f: float = 0.05
    remeasure: int = 2


QUICK = Timing(rounds=9, seconds=0.01, warmup=0.2, prep_repeat=1)
FULL = Timing()
# What the quick default takes on a 2-core x86_64 VM with the seven engines (2026-11-25): its first six
# tables (overhead to rules) 4 min 35 s on a quiet machine, the other four (sparse, structured,
# distributed, catalogue) 3 min with other work running beside them: about 7 minutes. With four
# engines (2026-11-24) it was 2 min 41 s quiet and 13 min under other tenants' load (load average 10).
QUICK_MINUTES = 7
# What --full's overhead table alone takes with the seven engines: 60 minutes (2026-11-25, the
# benchmark at nice -15 beside other work at nice 19; 251 rows); the other tables add their time.
FULL_OVERHEAD_MINUTES = 60

# A measurement is steady when its per-round ratios lie within this factor of each other (largest
# round over smallest); one that is not after ``remeasure`` more tries is flagged, not reported.
# On a quiet 2-core VM the slowest round is often 1.5x the fastest; under other tenants' load
# (load average 10, 2026-11-24) 76 of 94 rows stayed more than 2x apart after three measurements.
MAX_SPREAD = 2.0


def batch_size(fn: Callable[[], Any], seconds: float) -> int:
    """How many calls make a timed batch of about ``seconds``."""
    fn()
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    return max(1, int(seconds / max(once, 1e-7)))


def ratio(ours: Callable[[], Any], native: Callable[[], Any], timing: Timing = FULL) -> dict[Any, Any]:
    """Time ``ours`` and ``native`` in alternating batches: both times and their ratio from the same rounds.

    ``ours_s`` and ``native_s`` are the medians of the per-round times and ``ratio`` is
    ``ours_s / native_s``, so a row's times and ratio cannot contradict each other; ``ratio_min`` and
    ``ratio_max`` are the smallest and largest per-round ratio (the spread). Interleaving makes both
    see the same machine state (frequency, cache, other load). Each call has its own batch size (a
    slow unprepared call is not repeated as often as a fast native one). A measurement whose rounds
    disagree by more than :data:`MAX_SPREAD` is taken again, up to ``timing.remeasure`` times; the
    steadiest is kept, and ``steady`` says whether it is within the factor."""
    n_ours, n_native = batch_size(ours, timing.seconds), batch_size(native, timing.seconds)
    best: dict[Any, Any] | None = None
    for _ in range(1 + timing.remeasure):
        r = _interleaved(ours, native, n_ours, n_native, timing)
        if best is None or r["ratio_max"] / r["ratio_min"] < best["ratio_max"] / best["ratio_min"]:
            best = r
        if best["steady"]:
            break
    assert best is not None
    return best


def _interleaved(
    ours: Callable[[], Any], native: Callable[[], Any], n_ours: int, n_native: int, timing: Timing
) -> dict[Any, Any]:
    warm_until = time.perf_counter() + timing.warmup
    while time.perf_counter() < warm_until:
        for _ in range(n_ours):
            ours()
        for _ in range(n_native):
            native()
    times_ours, times_native, ratios = [], [], []

    def batch(fn: Callable[[], Any], number: int) -> float:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        return (time.perf_counter() - start) / number

    for i in range(timing.rounds):
        if i % 2:  # which goes first alternates: neither always runs on the other's leftovers
            t_native, t_ours = batch(native, n_native), batch(ours, n_ours)
        else:
            t_ours, t_native = batch(ours, n_ours), batch(native, n_native)
        times_ours.append(t_ours)
        times_native.append(t_native)
        ratios.append(t_ours / t_native)
    ours_s, native_s = statistics.median(times_ours), statistics.median(times_native)
    return {
        "ours_s": ours_s,
        "native_s": native_s,
        "ratio": ours_s / native_s,
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "steady": max(ratios) <= MAX_SPREAD * min(ratios),
    }


def medians(calls: dict[str, Callable[[], Any]], timing: Timing = FULL) -> dict[str, float]:
    """The median time of each call over ``timing.rounds`` rounds of one batch of each (about
    ``timing.seconds`` a batch, each call its own batch size), after ``timing.warmup`` seconds of
    them all; the order within a round is shuffled (seeded), so that no call always runs on another's
    leftovers (rotating one order, as before 2026-11-27, kept each call after the same one).
    :func:`ratio` for more than two calls whose times are compared with one of them (a first call and
    a preparation with the engine's own first call): their ratios come from the same rounds."""
    sizes = {name: batch_size(fn, timing.seconds) for name, fn in calls.items()}
    names = list(calls)
    warm_until = time.perf_counter() + timing.warmup
    while time.perf_counter() < warm_until:
        for name in names:
            for _ in range(sizes[name]):
                calls[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    shuffle = random.Random(0).shuffle
    for _ in range(timing.rounds):
        shuffle(names)
        for name in names:
            fn, number = calls[name], sizes[name]
            start = time.perf_counter()
            for _ in range(number):
                fn()
            samples[name].append((time.perf_counter() - start) / number)
    return {name: statistics.median(times) for name, times in samples.items()}


def columns(r: dict[Any, Any], ours: str, native: str, ratio_name: str = "ratio") -> dict[str, Any]:
    """One :func:`ratio` as a table's columns: the two times under the table's names for them, the
    ratio, its spread over the rounds (``min``, ``max``) and whether it is ``steady``."""
    return {
        ours: r["ours_s"],
        native: r["native_s"],
        ratio_name: r["ratio"],
        "min": r["ratio_min"],
        "max": r["ratio_max"],
        "steady": "yes" if r["steady"] else "NO",
    }


def once(fn: Callable[[], Any], repeat: int, single_over: float | None = None) -> float:
    """The median time of ``repeat`` single calls (a preparation, a first call); with
    ``single_over``, one call where the first takes longer than that many seconds."""
    samples: list[float] = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
        if single_over is not None and samples[0] > single_over:
            break
    return statistics.median(samples)


def machine(
    packages: tuple[Any, ...] = (
        "numpy",
        "scipy",
        "jax",
        "jaxlib",
        "torch",
        "autograd",
        "tensorflow",
        "tensorflow-cpu",
        "mlx",
        "pytensor",
        "numdifftools",
        "distributed",
    ),
) -> dict[Any, Any]:
    """The machine, Python, library versions and date a table was measured with."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    versions = {}
    for name in ("diffinterface",) + packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.system()} {platform.machine()}, {cpu}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "versions": ", ".join(f"{k} {v}" for k, v in versions.items()),
    }


def _cell(column: str, value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if column.endswith("_s"):
            return f"{value * 1e3:.2f} ms" if value >= 1e-3 else f"{value * 1e6:.1f} us"
        if column.endswith("_us"):
            return f"{value:+.1f} us"
        return f"{value:.3g}" if column.endswith("error") else f"{value:.3f}"
    return str(value)


def _measured(column: str, value: Any) -> bool:
    """A time or a ratio of a timed row (not its spread, size or labels)."""
    return isinstance(value, float) and column not in ("min", "max") and not column.endswith(("_min", "_max", "error"))


def write_table(
    path: str, title: str, info: dict[Any, Any], rows: list[dict[str, Any]], columns: list[str], notes: str = ""
) -> None:
    """``path.csv`` (every field of ``rows``) and ``path.md`` (``columns``, with the machine record)."""
    if not rows:
        return
    fields = list(dict.fromkeys(k for row in rows for k in row))
    with open(path + ".csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        f"# {title}",
        "",
        f"- date: {info['date']}",
        f"- machine: {info['machine']}",
        f"- python {info['python']}; {info['versions']}",
        "",
    ]
    if notes:
        lines += [notes, ""]
    lines.append("| " + " | ".join(columns) + " |")
    lines.append("|" + "---|" * len(columns))
    for row in rows:
        # an unsteady row's times and ratios are not results: its spread (min, max) says why
        unsteady = row.get("steady") == "NO"
        lines.append(
            "| "
            + " | ".join(
                "unsteady" if unsteady and _measured(c, row.get(c)) else _cell(c, row.get(c, "")) for c in columns
            )
            + " |"
        )
    with open(path + ".md", "w") as fh:
        fh.write("\n".join(lines) + "\n")
