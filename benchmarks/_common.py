"""Shared by the engine-specific benchmark scripts (``*_overhead.py``): the run loop over cases.

The timing, the machine record and the table writer are those of ``python -m diffinterface bench``
(``diffinterface/bench/``)."""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable
from typing import Any

import diffinterface as di
from diffinterface import bench as _bench


def ratio(
    ours: Callable[[], Any], native: Callable[[], Any], rounds: int = 21, seconds: float = 0.03, warmup: float = 0.5
) -> dict:
    """:func:`diffinterface.bench.ratio` (interleaved batches), with its rounds as arguments."""
    return _bench.ratio(ours, native, _bench.Timing(rounds=rounds, seconds=seconds, warmup=warmup))


def prepared_jacobians(
    config: Callable[..., Any], f: Callable[..., Any], x: Any
) -> list[tuple[str, Callable[[], Any]]]:
    """``(label, ours)`` for each closure setting: ``ours`` a prepared ``jacobian`` of ``f`` at ``x``
    under ``config(closure=...)``, ``label`` the suffix of its row ("" for the default duplicated
    closure, ", closure=const")."""
    out = []
    for closure in ("duplicated", "const"):
        backend = config(closure=closure)
        prep = di.prepare_jacobian(backend, f, x)
        label = "" if closure == "duplicated" else ", closure=const"
        out.append((label, lambda x=x, p=prep, b=backend, f=f: di.jacobian(b, f, x, prep=p)))
    return out


machine = _bench.machine
write_table = _bench.write_table


def measure(cases: list, runs: int) -> list[dict]:
    """Each case ``(operator, size, inputs, ours, native)`` measured ``runs`` times (whole interleaved
    measurements): this VM's timings drift between runs at the microsecond scale, so a row gives the
    median over runs and the smallest and largest run."""
    measured: dict = {}
    for run in range(runs):
        for operator, size, inputs, ours, native in cases:
            r = ratio(ours, native)
            measured.setdefault((operator, size, inputs), []).append(r)
            print(
                f"run {run + 1}: {operator:>16} {size!s:>9} {inputs:>24}: ours {r['ours_s'] * 1e6:9.1f} us  "
                f"native {r['native_s'] * 1e6:9.1f} us  ratio {r['ratio']:.3f}",
                flush=True,
            )
    rows = []
    for (operator, size, inputs), rs in measured.items():
        ratios = [r["ratio"] for r in rs]
        rows.append(
            {
                "operator": operator,
                "size": size,
                "inputs": inputs,
                "ours_s": statistics.median(r["ours_s"] for r in rs),
                "native_s": statistics.median(r["native_s"] for r in rs),
                "ratio": statistics.median(ratios),
                "runs_min": min(ratios),
                "runs_max": max(ratios),
                "runs": runs,
            }
        )
    return rows


COLUMNS = ["operator", "size", "inputs", "ours_s", "native_s", "ratio", "runs_min", "runs_max"]


def notes(runs: int) -> str:
    return (
        f"Each run: median of 21 interleaved rounds after 0.5 s of warm-up; ratio = ours / native. "
        f"The table: median over {runs} runs, and the smallest and largest run. "
        "Budget (contract section 11): 1.05 at sizes >= 1e4, 1.25 at 10."
    )


def run_and_write(name: str, title: str, cases: list, runs: int) -> list[dict]:
    """Measure ``cases`` (see :func:`measure`) and write ``benchmarks/results/<name>.{md,csv}``."""
    rows = measure(cases, runs)
    results = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    os.makedirs(results, exist_ok=True)
    write_table(os.path.join(results, name), title, machine(), rows, COLUMNS, notes=notes(runs))
    return rows


def arguments(doc: str, quick: str) -> argparse.Namespace:
    """The command line of a script that times rows for about ``--seconds`` each (``--quick``: the
    fewer rows that ``quick`` names); ``doc``: the script's docstring, whose first line describes it."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--seconds", type=float, default=1.5, help="time per row (default 1.5 s)")
    return parser.parse_args()


def save(name: str, title: str, rows: list[dict[str, Any]], columns: list[str], notes: str) -> None:
    """``benchmarks/results/<name>.{md,csv}``, with this machine's record."""
    results = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    os.makedirs(results, exist_ok=True)
    write_table(os.path.join(results, name), title, machine(), rows, columns, notes=notes)
