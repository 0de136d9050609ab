"""The overhead table's grids as docs/performance.md shows them, printed from the recorded CSV.

    python benchmarks/overhead_grids.py                  # benchmarks/results/overhead.csv
    python benchmarks/overhead_grids.py path/to/overhead.csv

Three grids, one row per backend, input kind and pair of operators, one column per size: the
prepared call over the engine's own (``prepared_ratio``, bold where over the budget of contract
section 11), the call without ``prep=`` in a loop over the prepared call (``repeated_over_prepared``)
and a new function's first call over the engine's own first call (``first_call_ratio``); the last two
on the engines' own arrays. ``unsteady``: the row's rounds were too far apart to be a result; ``-``:
the pair's second operator has no row at that size. Paste them over the grids in the docs after a
re-run, so that the docs say what the table measured.
"""

from __future__ import annotations

import csv
import os
import sys
from typing import Any

SIZES = {10: "n = 10", 1000: "n = 1e3", 100000: "n = 1e5", 1000000: "n = 1e6"}
PAIRS = [("gradient", "hvp"), ("pushforward", "pullback"), ("jacobian tall", "jacobian wide"), ("hessian",)]


def _cell(row: dict[str, Any] | None, column: str, bold_over_budget: bool) -> str | None:
    if row is None:
        return None
    if row["steady"] != "yes":
        return "unsteady"
    text = f"{float(row[column]):.2f}"
    return f"**{text}**" if bold_over_budget and row["within_budget"] != "yes" else text


def grid(rows: list[dict[str, Any]], column: str, title: str, own_arrays_only: bool, bold: bool) -> str:
    """One grid: ``column`` of every row, by backend, inputs, operator pair and size."""
    found: dict[tuple[str, str, str, int], dict[str, Any]] = {}
    kinds: list[tuple[str, str]] = []
    for row in rows:
        backend = row["backend"].removesuffix("()")
        size = int(float(row["size"]))
        found[(backend, row["inputs"], row["operator"], size)] = row
        if (backend, row["inputs"]) not in kinds:
            kinds.append((backend, row["inputs"]))
    lines = [f"| {title} | " + " | ".join(SIZES.values()) + " |", "|---" * (len(SIZES) + 1) + "|"]
    own = {backend: inputs for backend, inputs in reversed(kinds)}  # each backend's first kind: its own arrays
    for backend, inputs in kinds:
        if own_arrays_only and own[backend] != inputs:
            continue
        for pair in PAIRS:
            cells = []
            for size in SIZES:
                parts = [_cell(found.get((backend, inputs, op, size)), column, bold) for op in pair]
                if all(p is None for p in parts):
                    cells.append("")
                else:
                    cells.append(" / ".join("-" if p is None else p for p in parts))
            if any(cells):
                lines.append(f"| {backend} {' / '.join(pair)} ({inputs}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    default = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "overhead.csv")
    with open(sys.argv[1] if len(sys.argv) > 1 else default, newline="") as handle:
        rows = list(csv.DictReader(handle))
    print(grid(rows, "prepared_ratio", "prepared / native", own_arrays_only=False, bold=True))
    print()
    print(grid(rows, "repeated_over_prepared", "repeated without prep= / prepared", own_arrays_only=True, bold=False))
    print()
    print(grid(rows, "first_call_ratio", "first call / native first call", own_arrays_only=True, bold=False))


if __name__ == "__main__":
    main()
