"""benchmark_differentiation: timings and f-call counts per scenario."""

from __future__ import annotations

import dataclasses

import diffinterface as di
from diffinterface.testing import benchmark_differentiation, default_scenarios


def test_rows_have_timings_and_evaluation_counts():
    scenarios = [
        s for s in default_scenarios() if s.name in ("jacobian/vec_to_vec", "gradient/vec_to_num", "hvp/quadratic_form")
    ]
    rows = benchmark_differentiation([di.AutoFiniteDiff(), di.AutoFiniteDiff(method="forward")], scenarios, repeat=3)
    assert len(rows) == 6 and all(r["error"] == "" for r in rows)
    by = {(r["backend"], r["scenario"]): r for r in rows}
    n = 6  # the vector scenarios have x.size == 6
    central = by[("AutoFiniteDiff()", "jacobian/vec_to_vec")]
    assert (
        central["prepared_calls"] == 2 * n
        and central["unprepared_calls"] == 2 * n + 1
        and central["prepare_calls"] == 1
    )
    forward = by[("AutoFiniteDiff(method='forward')", "gradient/vec_to_num")]
    assert forward["prepared_calls"] == n + 1 and forward["unprepared_calls"] == n + 1
    assert by[("AutoFiniteDiff()", "hvp/quadratic_form")]["prepared_calls"] == 4 * n
    for r in rows:
        for kind in ("prepared", "unprepared", "prepare"):
            assert 0 < r[f"{kind}_s"] < 1 and r[f"{kind}_spread_s"] >= 0


def test_a_failing_scenario_is_a_row_with_its_error():
    s = next(s for s in default_scenarios() if s.name == "gradient/vec_to_num")
    rows = benchmark_differentiation(di.AutoFiniteDiff(), [dataclasses.replace(s, f=lambda x: x)], repeat=1)
    assert rows[0]["error"].startswith(
        "ValueError: gradient(AutoFiniteDiff(), f, x): gradient needs f(x) to be a scalar"
    )
