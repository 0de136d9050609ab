"""``python -m diffinterface``: help at every level, ``check``'s summary, progress, failures, JSON and warnings."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest

import diffinterface as di
import diffinterface.__main__ as cli
import diffinterface.testing as testing
import diffinterface.testing._check as column_run
from conftest import installed
from diffinterface.__main__ import main


def test_check_runs_the_catalogue_and_prints_a_summary():
    run = subprocess.run(
        [sys.executable, "-m", "diffinterface", "check", "--backend", "finitediff", "--family", "numpy"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    n = len(testing.default_scenarios())
    assert re.search(rf"^AutoFiniteDiff\(\)\s+numpy\s+{n}\s+0\s+0\s+\d+\.\d+s$", run.stdout, re.M), run.stdout
    assert re.fullmatch(rf"{n} passed, 0 failed in \d+:\d\d", run.stdout.splitlines()[-1])
    assert "gradient/quadratic_form/closure" not in run.stdout  # the full table only with --verbose
    # piped, the progress is plain lines on stderr (no carriage returns), the last at 100%
    assert "\r" not in run.stderr and f"{n}/{n} (100%)" in run.stderr.splitlines()[-1]


def test_check_verbose_prints_the_full_table(capsys):
    assert main(["check", "--backend", "finitediff", "--family", "numpy", "--verbose"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("scenario"))
    assert "AutoFiniteDiff() [numpy]" in header
    assert re.search(r"^gradient/quadratic_form/closure\s+pass$", out, re.M)


def _one_wrong(monkeypatch):
    good = testing.default_scenarios()[0]
    wrong = dataclasses.replace(good, first=good.first + 1.0, name="pushforward/deliberately_wrong")
    monkeypatch.setattr(testing, "default_scenarios", lambda family="numpy": [good, wrong])


def test_check_reports_a_failure_with_its_error_and_exit_status(monkeypatch, capsys):
    _one_wrong(monkeypatch)
    assert main(["check", "--backend", "finitediff", "--family", "numpy"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^AutoFiniteDiff\(\)\s+numpy\s+1\s+0\s+1\s", out, re.M)
    assert "FAIL pushforward/deliberately_wrong on AutoFiniteDiff() [numpy]:" in out
    assert "max error 1 exceeds" in out
    assert re.fullmatch(r"1 passed, 1 failed in \d+:\d\d", out.rstrip().splitlines()[-1])
    # --failures-only (for scripts and CI): the table's failing rows, and the failure in full
    assert main(["check", "--backend", "finitediff", "--family", "numpy", "--failures-only"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^pushforward/deliberately_wrong\s+FAIL$", out, re.M)
    assert testing.default_scenarios()[0].name + " " not in out


def test_check_json_writes_every_result(monkeypatch, tmp_path, capsys):
    _one_wrong(monkeypatch)
    path = tmp_path / "check.json"
    assert main(["check", "--backend", "finitediff", "--family", "numpy", "--json", str(path)]) == 1
    record = json.loads(path.read_text())
    assert record["passed"] == 1 and record["failed"] == 1 and record["machine"]["machine"]
    by_name = {r["scenario"]: r for r in record["results"]}
    assert by_name["pushforward/deliberately_wrong"]["passed"] is False
    assert "max error 1 exceeds" in by_name["pushforward/deliberately_wrong"]["error"]
    good = by_name[testing.default_scenarios()[0].name]
    assert good["passed"] is True and good["error"] is None and good["seconds"] > 0
    assert good["backend"] == "AutoFiniteDiff()" and good["family"] == "numpy"
    assert f"wrote {path}" in capsys.readouterr().out


def _complex_step_check(monkeypatch):
    """check over a real scenario and two complex-x ones, with ``finitediff`` a complex-step AutoFiniteDiff
    (which declares no complex dtype: ``Adapter.complex_dtypes``, its calls' TypeError)."""
    import diffinterface as di

    scenarios = testing.default_scenarios()
    picked = [scenarios[0]] + [s for s in scenarios if s.name.startswith("complex/")][:2]
    monkeypatch.setattr(testing, "default_scenarios", lambda family="numpy": picked)
    monkeypatch.setattr(cli, "registered_backends", lambda: {"finitediff": lambda: di.AutoFiniteDiff(method="complex")})
    return picked


def test_check_counts_a_declared_refusal_apart_from_passed_and_failed(monkeypatch, tmp_path, capsys):
    picked = _complex_step_check(monkeypatch)
    path = tmp_path / "check.json"
    assert main(["check", "--backend", "finitediff", "--family", "numpy", "--json", str(path), "--verbose"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^AutoFiniteDiff\(method='complex'\)\s+numpy\s+1\s+2\s+0\s", out, re.M), out
    assert re.search(rf"^{re.escape(picked[1].name)}\s+refused$", out, re.M)
    assert re.search(rf"^{re.escape(picked[0].name)}\s+pass$", out, re.M)
    assert re.fullmatch(
        r"1 passed, 2 refused \(a complex x the backend declares it does not differentiate: its TypeError checked\), "
        r"0 failed in \d+:\d\d",
        out.rstrip().splitlines()[-1],
    )
    record = json.loads(path.read_text())
    assert (record["passed"], record["refused"], record["failed"]) == (1, 2, 0)
    assert [r["refused"] for r in record["results"]] == [None, "complex128", "complex128"]


def test_a_declared_refusal_that_the_backend_does_not_raise_is_a_failure(monkeypatch, capsys):
    """A backend that declares a complex dtype refused but differentiates it is reported, not counted."""
    import diffinterface as di
    import diffinterface.backends.finitediff as fd

    picked = _complex_step_check(monkeypatch)
    monkeypatch.setattr(cli, "registered_backends", lambda: {"finitediff": di.AutoFiniteDiff})
    monkeypatch.setattr(fd.Adapter, "complex_dtypes", ("complex64",))  # central differences take complex128
    assert main(["check", "--backend", "finitediff", "--family", "numpy"]) == 1
    out = capsys.readouterr().out
    assert f"FAIL {picked[1].name} on AutoFiniteDiff() [numpy]:" in out
    assert "accepted a complex x of complex128, which it declares refused" in out


def test_check_reports_a_warning_once_after_the_results(monkeypatch, capsys):
    """A warning raised during the check does not land in the middle of the output: it is counted
    and reported once, after the summary; known-harmless ones (KNOWN_WARNINGS) are left out."""
    good = testing.default_scenarios()[0]

    def f(x):
        warnings.warn("a warning from the user's f", RuntimeWarning, stacklevel=1)
        warnings.warn(f"The 2023.12 {column_run.KNOWN_WARNINGS[0]} version 2025.12", UserWarning, stacklevel=1)
        return good.f(x)

    noisy = dataclasses.replace(good, f=f, name="pushforward/noisy")
    monkeypatch.setattr(testing, "default_scenarios", lambda family="numpy": [noisy])
    assert main(["check", "--backend", "finitediff", "--family", "numpy"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "Warning" not in captured.err
    assert re.search(r"^1 warning raised during the check \(each once\):$", out, re.M)
    assert re.search(r"^  \d+x RuntimeWarning at .*test_cli\.py:\d+: a warning from the user's f$", out, re.M)
    assert "array API specification" not in out
    assert out.index("warning raised") > out.index("passed  refused  failed")


@pytest.mark.skipif(
    not installed("autograd"), reason='autograd is not installed: pip install "diffinterface[autograd]"'
)
def test_check_drops_each_columns_kept_preparations_before_the_next(monkeypatch, capsys):
    """The catalogue's scenarios live to the end of a check, and the unprepared calls of each (up to
    six per scenario, the third prepares) keep a preparation in ``prep_cache``: each holds its
    compiled programs (JAX's numpy column: 3.46 GB at most with them, 2.24 without), none serves
    another column, so each column's are dropped when it ends."""
    import diffinterface as di

    scenarios = [s for s in testing.default_scenarios() if s.operator == "gradient"][:3]
    monkeypatch.setattr(testing, "default_scenarios", lambda family="numpy": scenarios)
    real = testing.test_differentiation
    held: list[tuple[int, int]] = []  # (preparations held, built) as each column's calls end

    def counted(*args, **kwargs):
        yield from real(*args, **kwargs)
        held.append((len(di.prep_cache), di.prep_cache.builds))

    monkeypatch.setattr(testing, "test_differentiation", counted)
    di.prep_cache.clear()
    argv = ["check", "--backend", "finitediff", "--backend", "autograd", "--family", "numpy", "--in-process"]
    assert main(argv) == 0
    capsys.readouterr()
    assert held == [(3, 3), (3, 3)]  # one kept per scenario in each column, the first's gone before the second
    assert len(di.prep_cache) == 0


@pytest.mark.skipif(
    not installed("autograd"), reason='autograd is not installed: pip install "diffinterface[autograd]"'
)
def test_check_runs_each_column_in_a_process_of_its_own_with_the_same_results(monkeypatch, tmp_path, capsys):
    """With more than one backend or family, each (backend, family) runs in a fresh process: what an
    engine keeps of one column (its compiled code) goes when that process ends. Nothing runs in the
    check's own process, and the results are those of the same check run there (``--in-process``)."""
    argv = ["check", "--backend", "finitediff", "--backend", "autograd", "--family", "numpy"]
    argv += ["--scenario", "gradient/*", "--scenario", "jacobian/vec_to_vec*"]
    real, ran_here = testing.test_differentiation, []
    monkeypatch.setattr(testing, "test_differentiation", lambda *a, **k: ran_here.append(1) or real(*a, **k))
    records = {}
    for how in ("apart", "in-process"):
        path = tmp_path / f"{how}.json"
        assert main(argv + ["--json", str(path)] + ["--in-process"] * (how == "in-process")) == 0
        records[how] = json.loads(path.read_text())
        assert len(ran_here) == (0 if how == "apart" else 2), how  # the columns ran in this process
    capsys.readouterr()
    apart, here = ({(r["backend"], r["scenario"]): r["passed"] for r in records[h]["results"]} for h in records)
    assert apart == here
    names = {name for _, name in apart}
    assert all(n.startswith("gradient/") or n.startswith("jacobian/vec_to_vec") for n in names)
    assert any(n.startswith("jacobian/") for n in names) and len(names) > 20
    assert all(apart.values()) and records["apart"]["passed"] == len(apart) == 2 * len(names)


def _exit_3() -> None:
    import os

    os._exit(3)  # as an engine that crashes its process does


@dataclasses.dataclass(frozen=True, repr=False)
class _DiesInItsProcess(di.AutoFiniteDiff):
    def __repr__(self):
        return "_DiesInItsProcess()"

    def __reduce__(self):
        return (_exit_3, ())  # the column's process dies as it receives the backend


def test_a_column_whose_process_dies_is_a_failure_and_the_next_column_runs(monkeypatch, capsys):
    monkeypatch.setattr(
        cli, "registered_backends", lambda: {"dies": _DiesInItsProcess, "finitediff": di.AutoFiniteDiff}
    )
    argv = ["check", "--backend", "dies", "--backend", "finitediff", "--family", "numpy", "--scenario", "gradient/*"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    first = next(s.name for s in testing.default_scenarios() if s.name.startswith("gradient/"))
    assert re.search(rf"^FAIL {re.escape(first)} on _DiesInItsProcess\(\) \[numpy\]:$", out, re.M)
    assert "the process running this column ended (exit code 3) during this scenario, after 0 of" in out
    assert re.search(r"^_DiesInItsProcess\(\)\s+numpy\s+0\s+0\s+1\s", out, re.M)
    assert re.search(r"^AutoFiniteDiff\(\)\s+numpy\s+\d+\s+0\s+0\s", out, re.M)  # the next column ran


def test_help_at_every_level_exits_0():
    for argv in ([], ["check"], ["bench"]):
        run = subprocess.run([sys.executable, "-m", "diffinterface", *argv, "--help"], capture_output=True, text=True)
        assert run.returncode == 0 and run.stderr == "", (argv, run.stderr)
        assert run.stdout.startswith(f"usage: python -m diffinterface {argv[0] if argv else ''}".rstrip())
    top = subprocess.run([sys.executable, "-m", "diffinterface", "--help"], capture_output=True, text=True).stdout
    assert re.search(r"^    check\s+run the scenario catalogue", top, re.M)
    assert re.search(r"^    bench\s+time diffinterface", top, re.M)
    check = subprocess.run(
        [sys.executable, "-m", "diffinterface", "check", "--help"], capture_output=True, text=True
    ).stdout
    for option in ("--backend NAME", "--family NAME", "--failures-only", "--verbose", "--json FILE"):
        assert option in check, option
    # no command: the help, and the status of a usage error
    bare = subprocess.run([sys.executable, "-m", "diffinterface"], capture_output=True, text=True)
    assert bare.returncode == 2 and "COMMAND" in bare.stdout


def test_summary_fits_100_columns():
    """Per backend and family one line, under 100 columns even for a long backend repr."""
    rows = [
        {"scenario": "s", "backend": "AutoJAX()", "family": "numpy", "passed": True, "refused": None, "seconds": 1.5},
        {"scenario": "t", "backend": "AutoJAX()", "family": "numpy", "passed": False, "refused": None, "seconds": 2.0},
        {
            "scenario": "s",
            "backend": "SecondOrder(" + "x" * 150 + ")",
            "family": "torch",
            "passed": True,
            "refused": None,
            "seconds": 1,
        },
    ]
    lines = cli._summary([("AutoJAX()", "numpy"), (rows[2]["backend"], "torch")], rows)
    assert all(len(line) <= cli.SUMMARY_WIDTH == 100 for line in lines)
    assert re.fullmatch(r"AutoJAX\(\)\s+numpy\s+1\s+0\s+1\s+3\.5s", lines[1])
    assert lines[2].startswith("SecondOrder(xxx") and "...  torch" in lines[2]


def test_progress_bar_on_a_terminal_and_plain_lines_otherwise():
    terminal, plain = io.StringIO(), io.StringIO()
    bar, lines = cli._progress(terminal, tty=True), cli._progress(plain, tty=False)
    for i in range(1, 5):
        bar(i, 4, f"AutoJAX() [numpy]  gradient/s{i}")
        lines(i, 4, f"AutoJAX() [numpy]  gradient/s{i}")
    shown = terminal.getvalue()
    assert shown.count("\r") == 4 and shown.endswith("\n")
    last = shown.split("\r")[-1]
    assert re.match(r"\[#{20}\] 4/4 100% 0:00 ~0:00 left  AutoJAX\(\) \[numpy\]  gradient/s4", last)
    assert "\r" not in plain.getvalue() and plain.getvalue().splitlines()[-1].startswith("  4/4 (100%)")


def test_check_says_when_no_scenario_matches(capsys):
    assert main(["check", "--backend", "finitediff", "--family", "numpy", "--scenario", "gradiant/*"]) == 1
    assert capsys.readouterr().out == "no scenario of the catalogue matches --scenario gradiant/*\n"


def test_check_rejects_an_unknown_backend():
    run = subprocess.run(
        [sys.executable, "-m", "diffinterface", "check", "--backend", "enzyme"], capture_output=True, text=True
    )
    assert run.returncode != 0 and (
        "unknown backend 'enzyme'; choose from finitediff, jax, torch, autograd, mlx, pytensor, tensorflow"
        in run.stderr
    ), run.stderr


def test_readme_test_command_is_what_ci_runs():
    root = Path(__file__).resolve().parents[1]
    readme, ci = (root / "README.md").read_text(), (root / ".ci" / "run").read_text()
    blocks = re.findall(r"```(?:bash|sh)\n(.*?)```", readme, re.S)
    test_block = next(b for b in blocks if "pytest" in b)
    for line in test_block.strip().splitlines():
        assert line.strip() in ci, f"README test command line not in .ci/run: {line}"


@pytest.mark.skipif(not installed("jax"), reason='needs jax: pip install -e ".[jax]"')
def test_check_keeps_jax_compilations_in_its_cache_and_restores_the_settings(monkeypatch, tmp_path, capsys):
    """check --jax-cache DIR: JAX's compilations land in DIR (a second check finds them there), the
    scenarios pass as before, and JAX's settings are what they were."""
    import jax

    scenarios = [s for s in testing.default_scenarios() if s.name.startswith("gradient/")][:2]
    monkeypatch.setattr(testing, "default_scenarios", lambda family="numpy": scenarios)
    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")
    before = {name: getattr(jax.config, name) for name in names}
    cache = tmp_path / "jax-cache"
    argv = ["check", "--backend", "jax", "--family", "numpy", "--jax-cache", str(cache)]
    assert main(argv) == 0
    entries = sorted(p.name for p in cache.iterdir())
    assert entries, "nothing was cached"
    assert {name: getattr(jax.config, name) for name in names} == before
    assert main(argv) == 0  # the same programs under the same keys: a later check finds them
    assert sorted(p.name for p in cache.iterdir()) == entries
    assert re.search(r"^AutoJAX\(\)\s+numpy\s+2\s+0\s", capsys.readouterr().out, re.M)


def test_each_count_gets_its_own_estimate_of_what_remains(monkeypatch):
    """bench counts each table on its own: a table of slow steps after one of fast ones is
    estimated from its own steps (2 left of 4 at 60 s a step: 2:00), the elapsed time runs on."""
    now = [0.0]
    monkeypatch.setattr(cli, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    plain = io.StringIO()
    show = cli._progress(plain, tty=False, every=0.0)
    for i in range(11):  # a first table: 10 steps of 1 s
        now[0] = float(i)
        show(i, 10, "fast")
    for i in range(3):  # a second: 60 s a step
        now[0] = 10.0 + 60 * i
        show(i, 4, "slow")
    assert plain.getvalue().splitlines()[-1] == "  2/4 (50%) 130.0s ~2:00 left: slow"
