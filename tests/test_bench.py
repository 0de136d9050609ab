"""``python -m diffinterface bench``: the tables, the plots, and natives that compute what ours do."""

from __future__ import annotations

import collections
import csv
import importlib
import math
import os
import subprocess
import time

import numpy as np
import pytest

import diffinterface as di
from conftest import installed
from diffinterface import bench
from diffinterface.__main__ import main
from diffinterface.bench import finite_differences as finite_differences_table
from diffinterface.bench import overhead as overhead_table

TINY = bench.Timing(rounds=2, seconds=0.001, warmup=0.0, prep_repeat=1, slow_f=0.005)


def _numpy(value):
    if hasattr(value, "detach"):
        return value.detach().numpy()
    return np.asarray(value)


BUILT_IN = [e for e in bench.installed_engines() if bench.config_class(e).__module__ == "diffinterface._core.configs"]


@pytest.mark.parametrize("engine", BUILT_IN)
def test_each_native_computes_what_ours_computes(engine):
    """The overhead table compares like with like: for every operator the engine's native call
    returns the same derivative as our prepared call (float32 for JAX)."""
    eng = bench.engine(engine)
    tol = 1e-4 if engine == "jax" else 1e-6
    checked = 0
    for numpy_inputs in (False, True) if eng.numpy_dtype else (False,):
        for operator in overhead_table.OPERATORS:
            for size in (10, 200):
                if not eng.allows(operator, size):
                    continue
                case = overhead_table._case(engine, eng, operator, size, numpy_inputs)
                if case is None:
                    continue
                ours, native = case["prepared"](), case["native"]()
                if numpy_inputs:  # numpy in, numpy out, of the engine's numpy dtype: ours and the native
                    assert type(ours) is np.ndarray and type(native) is np.ndarray, (operator, size)
                    assert ours.dtype == native.dtype == np.dtype(eng.numpy_dtype), (operator, size)
                ours, native = _numpy(ours), _numpy(native)
                assert ours.shape == native.shape, (operator, size)
                assert np.allclose(ours, native, rtol=tol, atol=tol), (operator, size)
                for call in ("unprepared", "repeated", "repeated", "fresh"):  # the second repeat reuses a prep
                    assert np.allclose(_numpy(case[call]()), native, rtol=tol, atol=tol), (operator, call)
                case["prepare"]()
                case["native_first"]()
                checked += 1
    assert checked >= (4 if engine == "finitediff" else 28 if eng.numpy_dtype else 14)


def test_bench_writes_every_table_and_the_plots(tmp_path, capsys):
    engines = [e for e in ("finitediff", "torch") if e in bench.installed_engines()]
    done = bench.run(engines, out=str(tmp_path), timing=TINY)
    for table in bench.TABLES:
        if table == "mode_choice" and engines == ["finitediff"]:
            continue  # finite differences have no modes
        assert os.path.exists(tmp_path / f"{table}.csv") and os.path.exists(tmp_path / f"{table}.md"), table
        text = (tmp_path / f"{table}.md").read_text()
        assert "- machine: " in text and "- date: " in text and "numpy " in text
    assert any(p.endswith(".png") for p in done["written"]) and os.path.exists(tmp_path / "overhead_gradient.png")
    with open(tmp_path / "overhead.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["backend"] for r in rows} == {repr(bench.config(e)) for e in engines}
    for r in rows:
        for key in (
            "prepared_ratio",
            "unprepared_ratio",
            "repeated_unprepared_ratio",
            "repeated_over_prepared",
            "fresh_over_unprepared",
            "prepare_ratio",
            "first_call_ratio",
        ):
            assert 0 < float(r[key]) < math.inf
        assert r["within_budget"] in ("yes", "NO")


def test_finite_differences_table_counts_evaluations_and_errors():
    rows = finite_differences_table.finite_differences(lambda *a: None)
    by = {(r["function"], r["method"]): r for r in rows}
    n = 20
    for function in ("gradient of sum(sin(x)^2)", "jacobian of sin(x)*sum(x)"):
        central = by[(function, "AutoFiniteDiff(method='central')")]
        scipy3 = by[(function, "scipy approx_derivative('3-point')")]
        assert central["f_evaluations"] in (2 * n, 2 * n + 1) and scipy3["f_evaluations"] == 2 * n + 1
        assert central["max_rel_error"] < 1e-8 and scipy3["max_rel_error"] < 1e-8
        assert by[(function, "AutoFiniteDiff(method='complex')")]["max_rel_error"] < 1e-13
        assert by[(function, "AutoFiniteDiff(method='forward')")]["max_rel_error"] < 1e-6


def test_the_command_line(tmp_path, capsys):
    """The command writes the tables it is asked for and says where."""
    assert main(["bench", "--backend", "finitediff", "--table", "finite_differences", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "benchmarked finitediff" in out and str(tmp_path / "finite_differences.md") in out
    with pytest.raises(SystemExit):  # argparse: a table that does not exist
        main(["bench", "--table", "nonsense"])


@pytest.mark.parametrize("engine", ["jax", "torch", "autograd"])
def test_each_engine_script_times_two_calls_that_agree(engine, monkeypatch):
    """``benchmarks/<engine>_overhead.py``: each case's two calls (ours, the engine's own) return the
    same type and the same derivative, so its ratio compares like with like (float32 cases at float32
    precision)."""
    if not installed(engine):
        pytest.skip(f'needs {engine}: pip install -e ".[all]"')
    monkeypatch.syspath_prepend(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    script = importlib.import_module(f"{engine}_overhead")
    cases = script.cases(quick=True)
    assert len(cases) >= 6
    for operator, size, inputs, ours, native in cases:
        mine, theirs = ours(), native()
        assert type(mine) is type(theirs), (operator, size, inputs)
        np.testing.assert_allclose(_numpy(mine), _numpy(theirs), rtol=1e-5, atol=1e-6, err_msg=f"{operator} {inputs}")


@pytest.mark.parametrize("engine", ["finitediff", "torch"])
def test_the_first_call_floor_script_times_calls_that_agree(engine, monkeypatch):
    """``benchmarks/first_call_floor.py``: a row's calls (ours on a new function of a seen code, with
    prep_cache and without, and of a new code, the engine's own, torch's under an empty function mode
    and over a copy of x; on numpy inputs too, where torch's own calls convert in and out) give the
    same derivative, and its columns are the ratios of the times it measured."""
    if engine == "torch" and not installed("torch"):
        pytest.skip('needs torch: pip install -e ".[all]"')
    monkeypatch.syspath_prepend(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    script = importlib.import_module("first_call_floor")
    for numpy_inputs in (False, True) if engine == "torch" else (False,):
        labels, calls = script.calls(engine, "pushforward", 10, numpy_inputs)
        inputs = "torch float64" if engine == "torch" and not numpy_inputs else "numpy float64"
        assert labels == {"shape": "10", "inputs": inputs, "shares": True}  # a stateless f: its summary is kept
        results = {name: call() for name, call in calls.items() if not name.startswith("walk") and name != "harness"}
        expected = {"native", "ours", "unshared", "new_code", "native_new"}
        assert set(results) == expected | ({"mode", "mode_new", "copy"} if engine == "torch" else set())
        for name, result in results.items():
            if numpy_inputs:  # what a NumPy user gets from each: numpy arrays
                assert type(result) is np.ndarray, name
            np.testing.assert_allclose(_numpy(result), _numpy(results["native"]), rtol=1e-5, atol=1e-6, err_msg=name)
    made = calls["harness"](), calls["harness"]()
    assert made[0].__code__ != made[1].__code__  # a code never seen at each call (code objects compare by content)
    for walk in ("walk", "walk_new"):
        plan = calls[walk]()
        assert plan.leaves == [] and plan.summary is not None, walk  # no state: a summary, checked or made
    r = script.row(engine, "pushforward", 10, False, seconds=0.01)
    native = r["native_us"]
    assert r["first_call_ratio"] == pytest.approx(r["ours_us"] / native)
    native_new = r["native_new_us"]  # new code is measured against the engine's call of new code
    assert r["new_code_ratio"] == pytest.approx(r["new_code_us"] / native_new)
    copy = r["copy_us"] - native if engine == "torch" else 0.0  # torch's pushforward: the copy of x, in both floors
    floor = (r["mode_new_us"] if engine == "torch" else native_new) + r["walk_new_us"] + copy
    assert r["floor_ratio"] == pytest.approx(floor / native_new)
    assert r["new_code_rest_ratio"] == pytest.approx((r["new_code_us"] - floor) / native_new)
    assert r["unshared_ratio"] == pytest.approx(r["unshared_us"] / native)
    # no mode: the verdict is shared
    assert r["rest_us"] == pytest.approx(r["unshared_us"] - native - r["walk_us"] - copy)
    assert r["rest_ratio"] == pytest.approx(r["rest_us"] / native)


@pytest.mark.parametrize("engine", ["finitediff", "torch"])
def test_the_fresh_lambda_script_times_calls_that_agree(engine, monkeypatch):
    """``benchmarks/fresh_lambda.py``: a row's calls (the engine's own, warm and on a new lambda, ours
    prepared, on a new lambda and without reuse) give the same derivative, a new lambda is served by
    its code's shared preparation, and the columns are the ratios of the times measured."""
    if engine == "torch" and not installed("torch"):
        pytest.skip('needs torch: pip install -e ".[all]"')
    monkeypatch.syspath_prepend(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    script = importlib.import_module("fresh_lambda")
    calls = script.calls(engine, "gradient", 10)
    expected = {"native", "native_new", "prepared", "fresh", "unshared", "fresh_state", "unshared_state"}
    assert calls is not None and set(calls) == expected
    di.prep_cache.clear()
    results = {name: call() for name, call in calls.items()}
    for _ in range(4):
        calls["fresh"]()
    assert di.prep_cache.shared_hits >= 1
    hits = di.prep_cache.shared_hits
    native = _numpy(results["native"])
    for _ in range(4):  # a new lambda over a new number: its code's preparation over state, from the third
        scaled = _numpy(calls["fresh_state"]())
        scale = scaled[0] / native[0]  # (scale * f)' = scale * f', each call's own scale
        assert min(abs(scale - s) for s in np.linspace(0.5, 1.5, 7)) < 1e-6
        np.testing.assert_allclose(scaled, scale * native, rtol=1e-5, atol=1e-6)
    assert di.prep_cache.shared_hits > hits
    for name, result in results.items():
        if name.endswith("state"):
            continue
        np.testing.assert_allclose(_numpy(result), native, rtol=1e-5, atol=1e-6, err_msg=name)
    r = script.row(engine, "gradient", 10, seconds=0.01)
    assert r["fresh_over_prepared"] == pytest.approx(r["fresh_us"] / r["prepared_us"])
    assert r["fresh_over_native"] == pytest.approx(r["fresh_us"] / r["native_us"])
    assert r["unshared_over_fresh"] == pytest.approx(r["unshared_us"] / r["fresh_us"])


def test_the_overhead_grids_read_the_recorded_table(monkeypatch):
    """``benchmarks/overhead_grids.py``: a row's ratio lands in its backend's pair and size, bold where
    over budget in the prepared grid; an unsteady row and a pair's missing second operator show as
    such; the repeated and first-call grids keep the engines' own arrays."""
    monkeypatch.syspath_prepend(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    script = importlib.import_module("overhead_grids")

    def row(backend, operator, size, inputs, ratio, within="yes", steady="yes"):
        return {
            "backend": backend,
            "operator": operator,
            "size": str(float(size)),
            "inputs": inputs,
            "prepared_ratio": str(ratio),
            "first_call_ratio": str(ratio * 2),
            "within_budget": within,
            "steady": steady,
        }

    rows = [
        row("AutoTorch()", "gradient", 10, "torch float64", 1.1),
        row("AutoTorch()", "hvp", 10, "torch float64", 1.3, within="NO"),
        row("AutoTorch()", "gradient", 1000, "torch float64", 1.0, steady="NO"),
        row("AutoTorch()", "gradient", 10, "numpy float64", 1.02),
    ]
    prepared = script.grid(rows, "prepared_ratio", "prepared / native", own_arrays_only=False, bold=True)
    assert prepared.splitlines()[2:] == [
        "| AutoTorch gradient / hvp (torch float64) | 1.10 / **1.30** | unsteady / - |  |  |",
        "| AutoTorch gradient / hvp (numpy float64) | 1.02 / - |  |  |  |",
    ]
    first = script.grid(rows, "first_call_ratio", "first call", own_arrays_only=True, bold=False)
    assert first.splitlines()[2:] == ["| AutoTorch gradient / hvp (torch float64) | 2.20 / 2.60 | unsteady / - |  |  |"]


@pytest.mark.skipif(not installed("jax"), reason="the XLA rows are JAX's")
def test_the_structured_table_prices_jax_outputs_against_one(tmp_path):
    """The structured table's JAX rows: the gradient rows and XLA's own price of k outputs (k = 2, 8,
    10 arrays of n/k elements, over one of n), each row a positive ratio of two timed calls."""
    done = bench.run(["jax"], out=str(tmp_path), tables=["structured"], plots=False, timing=TINY)
    rows = done["results"]["structured"]
    xla = {r["leaves"]: r for r in rows if r["case"].startswith("XLA")}
    assert sorted(xla) == [2, 8, 10]
    for k, r in xla.items():
        assert r["case"] == f"XLA, {k} outputs" and r["baseline"] == "XLA, 1 output" and r["backend"] == "jax.jit"
        assert 0 < r["ratio"] < math.inf and r["ours_s"] > 0 and r["baseline_s"] > 0
    assert any(r["case"] == "gradient" and r["baseline"] == "flat array" for r in rows)


def test_a_rows_times_and_ratio_come_from_the_same_rounds():
    """The ratio is the ratio of the two median times, so a row's times and ratio cannot
    contradict each other, and it lies within the per-round spread (min, max)."""
    timing = bench.Timing(rounds=5, seconds=0.004, warmup=0.0, remeasure=0)
    r = bench.ratio(lambda: time.sleep(0.002), lambda: time.sleep(0.001), timing)
    assert r["ratio"] == r["ours_s"] / r["native_s"]
    assert r["ratio_min"] <= r["ratio"] <= r["ratio_max"]
    assert 1.2 < r["ratio"] < 3.0 and r["ours_s"] >= 0.002 and r["native_s"] >= 0.001


def test_a_measurement_whose_rounds_disagree_is_remeasured_then_flagged(monkeypatch, tmp_path):
    """ours takes 1 ms in one round and 6 ms in the next: rounds 6x apart, over MAX_SPREAD; it is
    measured 1 + remeasure times, then flagged (steady False), and the markdown table prints
    'unsteady' in place of its times and ratio while the CSV keeps the numbers."""
    from diffinterface.bench import _timing

    calls = {"ours": 0, "measurements": 0}
    measure = _timing._interleaved

    def counted(*args, **kwargs):
        calls["measurements"] += 1
        return measure(*args, **kwargs)

    monkeypatch.setattr(_timing, "_interleaved", counted)

    def ours():  # batches of one call (seconds below one call): each round alternates its cost
        calls["ours"] += 1
        time.sleep(0.006 if calls["ours"] % 2 else 0.001)

    timing = bench.Timing(rounds=4, seconds=0.0001, warmup=0.0, remeasure=2)
    r = bench.ratio(ours, lambda: time.sleep(0.001), timing)
    assert calls["measurements"] == 3 and r["steady"] is False
    assert r["ratio_max"] > bench.MAX_SPREAD * r["ratio_min"]
    row = {"case": "jittery", **_timing.columns(r, "ours_s", "native_s")}
    steady_row = {
        "case": "steady",
        **_timing.columns({**r, "ratio_min": 1.0, "ratio_max": 1.1, "steady": True}, "ours_s", "native_s"),
    }
    cols = ["case", "ours_s", "native_s", "ratio", "min", "max", "steady"]
    bench.write_table(str(tmp_path / "t"), "t", bench.machine(), [row, steady_row], cols)
    md = (tmp_path / "t.md").read_text().splitlines()
    jittery = next(line for line in md if line.startswith("| jittery"))
    assert jittery.count("unsteady") == 3 and f"{r['ratio_max']:.3f}" in jittery and jittery.endswith("| NO |")
    assert "unsteady" not in next(line for line in md if line.startswith("| steady"))
    with open(tmp_path / "t.csv") as fh:
        saved = next(csv.DictReader(fh))
    assert float(saved["ratio"]) == r["ratio"] and saved["steady"] == "NO"


def test_bench_writes_into_a_folder_of_the_users_by_default(tmp_path, monkeypatch, capsys):
    """Not into the repository's recorded benchmarks/results: a diffinterface-bench/ folder in the
    current directory, which git ignores should it be made inside a clone."""
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--backend", "finitediff", "--table", "finite_differences"]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "diffinterface-bench" / "finite_differences.md").exists()
    assert os.path.join("diffinterface-bench", "finite_differences.md") in out
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ignored = subprocess.run(["git", "check-ignore", "-q", "diffinterface-bench/overhead.csv"], cwd=root)
    assert ignored.returncode == 0, "diffinterface-bench/ is not in .gitignore"


def test_the_overhead_table_is_written_as_it_grows(tmp_path):
    """A run stopped part way keeps what it measured: the overhead table's file holds every finished
    row after each row (a --full run killed by the system after an hour had written nothing)."""
    seen = []

    def keep(rows):
        seen.append(len(rows))

    rows = overhead_table.overhead(["finitediff"], "quick", TINY, lambda *a: None, keep=keep)
    assert seen == list(range(1, len(rows) + 1)) and len(rows) >= 3
    # through the command: the table written after the first row already, the final one complete
    written = []
    original = bench._command.write_table

    def recording(path, title, info, so_far, columns, notes=""):
        written.append((title, len(so_far)))
        return original(path, title, info, so_far, columns, notes)

    import unittest.mock

    with unittest.mock.patch.object(bench._command, "write_table", recording):
        bench.run(["finitediff"], out=str(tmp_path), tables=["overhead"], timing=TINY, plots=False)
    partial = [n for title, n in written if "partial" in title]
    assert partial == list(range(1, len(rows) + 1)) and written[-1][1] == len(rows)
    assert "partial" not in written[-1][0] and "partial" not in (tmp_path / "overhead.md").read_text()


def test_medians_times_each_call_in_every_round_and_each_follows_the_others():
    """``medians``: one batch of each call per round, in an order shuffled at each round, so that a
    call does not always run right after the same one (rotating one order kept that: the call after
    torch's native Jacobian ran 20 us slower), and a positive median per call (the first-call columns
    of the overhead table use it)."""
    from diffinterface.bench._timing import Timing, medians

    log: list[str] = []
    calls = {name: (lambda name=name: log.append(name)) for name in ("a", "b", "c")}
    timing = Timing(rounds=30, seconds=1e-12, warmup=0.0)  # batches of one call, no warm-up
    times = medians(calls, timing)
    assert sorted(times) == ["a", "b", "c"] and all(t > 0 for t in times.values())
    rounds = [log[i : i + 3] for i in range(6, len(log), 3)]  # after batch_size's two calls of each
    assert len(rounds) == 30 and all(sorted(r) == ["a", "b", "c"] for r in rounds)
    after = collections.Counter((r[i - 1], r[i]) for r in rounds for i in (1, 2))
    assert set(after) == {(p, q) for p in "abc" for q in "abc" if p != q}  # each after each other
