"""Shared by the benchmark scripts: interleaved ratio timing and the machine record."""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import time
from collections.abc import Callable
from importlib import metadata
from typing import Any


def batch_size(fn: Callable[[], Any], seconds: float = 0.02) -> int:
    """How many calls make a timed batch of about ``seconds``."""
    fn()
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    return max(1, int(seconds / max(once, 1e-7)))


def ratio(ours: Callable[[], Any], native: Callable[[], Any], rounds: int = 21, seconds: float = 0.03, warmup: float = 0.5) -> dict:
    """Time ``ours`` and ``native`` in alternating batches; per-round ratios, their median and spread.

    Interleaving makes both see the same machine state (frequency, cache, other load), so the ratio
    is steadier than either time alone; ``warmup`` seconds of both first.
    """
    number = max(batch_size(ours, seconds), batch_size(native, seconds))
    warm_until = time.perf_counter() + warmup  # caches, branch predictors, clock frequency, XLA threads
    while time.perf_counter() < warm_until:
        for _ in range(number):
            ours()
        for _ in range(number):
            native()
    times_ours, times_native, ratios = [], [], []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(number):
            ours()
        t_ours = (time.perf_counter() - start) / number
        start = time.perf_counter()
        for _ in range(number):
            native()
        t_native = (time.perf_counter() - start) / number
        times_ours.append(t_ours)
        times_native.append(t_native)
        ratios.append(t_ours / t_native)
    return {
        "ours_s": statistics.median(times_ours),
        "native_s": statistics.median(times_native),
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "calls_per_batch": number,
        "rounds": rounds,
    }


def machine(packages: tuple = ("numpy", "jax", "jaxlib", "torch", "autograd", "scipy")) -> dict:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    versions = {}
    for name in packages:
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


def write_table(path: str, title: str, info: dict, rows: list[dict], columns: list[str], notes: str = "") -> None:
    import csv

    with open(path + ".csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)
    lines = [f"# {title}", "", f"- date: {info['date']}", f"- machine: {info['machine']}",
             f"- python {info['python']}; {info['versions']}", ""]
    if notes:
        lines += [notes, ""]
    lines.append("| " + " | ".join(columns) + " |")
    lines.append("|" + "---|" * len(columns))
    for row in rows:
        cells = []
        for c in columns:
            v = row[c]
            if isinstance(v, float):
                v = f"{v * 1e6:.1f} us" if c.endswith("_s") else f"{v:.3f}"
            cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    with open(path + ".md", "w") as fh:
        fh.write("\n".join(lines) + "\n")


def measure(cases: list, runs: int) -> list[dict]:
    """Each case ``(operator, size, inputs, ours, native)`` measured ``runs`` times (whole interleaved
    measurements): this VM's timings drift between runs at the microsecond scale, so a row gives the
    median over runs and the smallest and largest run."""
    measured: dict = {}
    for run in range(runs):
        for operator, size, inputs, ours, native in cases:
            r = ratio(ours, native)
            measured.setdefault((operator, size, inputs), []).append(r)
            print(f"run {run + 1}: {operator:>16} {size!s:>9} {inputs:>24}: ours {r['ours_s'] * 1e6:9.1f} us  "
                  f"native {r['native_s'] * 1e6:9.1f} us  ratio {r['ratio']:.3f}", flush=True)
    rows = []
    for (operator, size, inputs), rs in measured.items():
        ratios = [r["ratio"] for r in rs]
        rows.append({
            "operator": operator, "size": size, "inputs": inputs,
            "ours_s": statistics.median(r["ours_s"] for r in rs), "native_s": statistics.median(r["native_s"] for r in rs),
            "ratio": statistics.median(ratios), "runs_min": min(ratios), "runs_max": max(ratios), "runs": runs,
        })
    return rows


COLUMNS = ["operator", "size", "inputs", "ours_s", "native_s", "ratio", "runs_min", "runs_max"]


def notes(runs: int) -> str:
    return (f"Each run: median of 21 interleaved rounds after 0.5 s of warm-up; ratio = ours / native. "
            f"The table: median over {runs} runs, and the smallest and largest run. "
            "Budget (SPEC section 11): 1.05 at sizes >= 1e4, 1.25 at 10.")


def run_and_write(name: str, title: str, cases: list, runs: int) -> list[dict]:
    """Measure ``cases`` (see :func:`measure`) and write ``benchmarks/results/<name>.{md,csv}``."""
    rows = measure(cases, runs)
    results = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    os.makedirs(results, exist_ok=True)
    write_table(os.path.join(results, name), title, machine(), rows, COLUMNS, notes=notes(runs))
    return rows
