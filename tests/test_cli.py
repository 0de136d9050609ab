"""``python -m diffinterface check``: a table, a progress display, and an exit status that tells."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import diffinterface.testing as testing
from diffinterface.__main__ import main


def test_check_runs_the_catalogue_and_prints_a_table():
    run = subprocess.run(
        [sys.executable, "-m", "diffinterface", "check", "--backend", "finitediff", "--family", "numpy"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    lines = run.stdout.splitlines()
    header = next(line for line in lines if line.startswith("scenario"))
    assert "AutoFiniteDiff() [numpy]" in header
    assert re.search(r"^gradient/quadratic_form/closure\s+pass\s*$", run.stdout, re.M)
    n = len(testing.default_scenarios())
    assert lines[-1] == f"{n} passed, 0 failed"
    assert f"{n}/{n} (100%)" in run.stderr  # progress goes to stderr


def test_check_reports_a_failure_with_its_error_and_exit_status(monkeypatch, capsys):
    good = testing.default_scenarios()[0]
    wrong = dataclasses.replace(good, first=good.first + 1.0, name="pushforward/deliberately_wrong")
    monkeypatch.setattr(testing, "default_scenarios", lambda family="numpy": [good, wrong])
    assert main(["check", "--backend", "finitediff", "--family", "numpy"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^pushforward/deliberately_wrong\s+FAIL", out, re.M)
    assert "FAIL pushforward/deliberately_wrong on AutoFiniteDiff() [numpy]:" in out
    assert "max error" in out and out.rstrip().endswith("1 passed, 1 failed")


def test_check_rejects_an_unknown_backend():
    run = subprocess.run(
        [sys.executable, "-m", "diffinterface", "check", "--backend", "tensorflow"], capture_output=True, text=True
    )
    assert (
        run.returncode != 0
        and "unknown backend 'tensorflow'; choose from finitediff, jax, torch, autograd" in run.stderr
    )


def test_readme_test_command_is_what_ci_runs():
    root = Path(__file__).resolve().parents[1]
    readme, ci = (root / "README.md").read_text(), (root / ".ci" / "run").read_text()
    blocks = re.findall(r"```(?:bash|sh)\n(.*?)```", readme, re.S)
    test_block = next(b for b in blocks if "pytest" in b)
    for line in test_block.strip().splitlines():
        assert line.strip() in ci, f"README test command line not in .ci/run: {line}"
