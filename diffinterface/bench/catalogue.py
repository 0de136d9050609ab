"""The catalogue table: ``benchmark_differentiation`` over the scenario catalogue."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._engines import config


def catalogue(engines: list[str], full: bool, progress: Callable[..., Any]) -> list[dict[str, Any]]:
    """``benchmark_differentiation`` over the catalogue (numpy float64 inputs); quick: one scenario
    per operator."""
    from ..testing import benchmark_differentiation, default_scenarios

    scenarios = default_scenarios("numpy", np.float64)
    if not full:
        scenarios = list({s.operator: s for s in reversed(scenarios)}.values())
    backends = [config(name) for name in engines]
    total = len(backends) * len(scenarios)
    return benchmark_differentiation(
        backends,
        scenarios,
        repeat=5 if full else 2,
        progress=lambda i, n, row: progress(i, total, f"catalogue {row['backend']} {row['scenario']}"),
    )
