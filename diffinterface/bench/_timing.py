"""The timing loop, the machine record and the table writer that every benchmark table uses."""

from __future__ import annotations

import csv
import datetime
import math
import os
import platform
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
    the expensive ``f`` of the distributed table takes per evaluation."""

    rounds: int = 21
    seconds: float = 0.03
    warmup: float = 0.5
    prep_repeat: int = 3
    slow_f: float = 0.05


QUICK = Timing(rounds=9, seconds=0.01, warmup=0.2, prep_repeat=1)
FULL = Timing()


def batch_size(fn: Callable[[], Any], seconds: float) -> int:
    """How many calls make a timed batch of about ``seconds``."""
    fn()
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    return max(1, int(seconds / max(once, 1e-7)))


def ratio(ours: Callable[[], Any], native: Callable[[], Any], timing: Timing = FULL) -> dict[Any, Any]:
    """Time ``ours`` and ``native`` in alternating batches; per-round ratios, their median and spread.

    Interleaving makes both see the same machine state (frequency, cache, other load), so the ratio
    is steadier than either time alone. Each call has its own batch size (a slow unprepared call
    is not repeated as often as a fast native one)."""
    n_ours, n_native = batch_size(ours, timing.seconds), batch_size(native, timing.seconds)
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
    return {
        "ours_s": statistics.median(times_ours),
        "native_s": statistics.median(times_native),
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
    }


def columns(r: dict[Any, Any], ours: str, native: str, ratio_name: str = "ratio") -> dict[str, Any]:
    """One :func:`ratio` as a table's columns: the two times under the table's names for them, the
    ratio, and its spread over the rounds (``min``, ``max``)."""
    return {
        ours: r["ours_s"],
        native: r["native_s"],
        ratio_name: r["ratio"],
        "min": r["ratio_min"],
        "max": r["ratio_max"],
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
    packages: tuple[Any, ...] = ("numpy", "scipy", "jax", "jaxlib", "torch", "autograd", "numdifftools", "distributed"),
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
        lines.append("| " + " | ".join(_cell(c, row.get(c, "")) for c in columns) + " |")
    with open(path + ".md", "w") as fh:
        fh.write("\n".join(lines) + "\n")
