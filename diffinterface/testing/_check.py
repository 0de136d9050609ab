"""``python -m diffinterface check``'s run of one backend on one array family, in the process that
runs the check (``--in-process``) or, by default with more than one, in a fresh process of its own:
the engines keep what they compiled for as long as the process lives (PyTensor's numba code, XLA's
executables): the seven engines' check in one process was stopped at 80% after 40 minutes and 13.9 GB
on a 2-core machine, and takes 27 minutes and 5.2 GB at most for all its processes a column at a
time (docs/testing.md).
"""

from __future__ import annotations

import contextlib
import fnmatch
import importlib
import multiprocessing
import os
import shutil
import tempfile
import traceback
import warnings
from collections import Counter
from collections.abc import Iterator
from typing import Any

from .._core.configs import adapter_for

# Warnings that say nothing about the derivatives being checked, left out of the report, each with
# why: array-api-compat notes that a caller (SciPy) asked for an older version of the array API
# standard than the namespace it returns implements; the newer one is a superset for what is used.
# torch's forward mode, at its first use in a process, loads its JVP decompositions with its own
# ``torch.jit.script``, which torch 2.13 deprecates (torch/_decomp/decompositions_for_jvp.py): each
# check process running torch's pushforwards got it 18 times.
KNOWN_WARNINGS = (
    "version of the array API specification was requested but the returned namespace is actually",
    "`torch.jit.script` is deprecated. Please switch to `torch.compile` or `torch.export`.",
)


def _known_warning(message: warnings.WarningMessage) -> bool:
    return any(text in str(message.message) for text in KNOWN_WARNINGS)


@contextlib.contextmanager
def jax_compilation_cache(directory: str | None) -> Iterator[None]:
    """JAX's persistent compilation cache for the length of a check, in ``directory`` (kept: a later
    check reuses it) or a temporary one (removed after).

    Nearly all of check's JAX time is XLA compiling: the scenarios' unprepared calls run eagerly (a
    small program per primitive and shape) and each preparation compiles its value and plain forms.
    The same programs come back for the numpy and torch families (both float64) and in every later
    check; JAX's cache, keyed by the program, the compile options and the versions, gives back the
    executable XLA built for it the first time, so nothing that is tested changes. The settings are
    put back afterwards (a check run inside another program leaves JAX as it found it)."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    folder = directory or tempfile.mkdtemp(prefix="diffinterface-check-jax-")
    settings: dict[str, Any] = {
        "jax_compilation_cache_dir": folder,
        "jax_persistent_cache_min_compile_time_secs": 0.0,  # the eager programs compile in ~10 ms each
        "jax_persistent_cache_min_entry_size_bytes": -1,
    }
    before = {name: getattr(jax.config, name) for name in settings}
    for name, value in settings.items():
        jax.config.update(name, value)
    compilation_cache.reset_cache()  # a process that compiled before has already decided not to cache
    try:
        yield
    finally:
        for name, value in before.items():
            jax.config.update(name, value)
        compilation_cache.reset_cache()
        if directory is None:
            shutil.rmtree(folder, ignore_errors=True)


def chosen_scenarios(family: str, patterns: list[str] | None) -> list:
    """The catalogue's scenarios of ``family``, only those whose name matches one of ``patterns``."""
    from . import default_scenarios

    scenarios = default_scenarios(family)
    return [s for s in scenarios if any(fnmatch.fnmatchcase(s.name, p) for p in patterns)] if patterns else scenarios


def row(backend: Any, family: str, outcome: Any) -> dict[str, Any]:
    """One scenario's result as ``check`` reports it (its JSON record)."""
    return _row(backend, family, outcome.scenario.name, outcome.error, outcome.refused, outcome.seconds)


def _row(backend: Any, family: str, scenario: str, error: str | None, refused: str | None, seconds: float) -> dict:
    return {
        "scenario": scenario,
        "backend": repr(backend),
        "family": family,
        "passed": error is None,
        "refused": refused,
        "error": error,
        "seconds": seconds,
    }


def count_warnings(counts: Counter[tuple[str, str, str]], caught: list[warnings.WarningMessage]) -> None:
    """Add the warnings caught to ``counts``, each distinct one (category, first line, where) once."""
    counts.update(
        (w.category.__name__, str(w.message).splitlines()[0], f"{w.filename}:{w.lineno}")
        for w in caught
        if not _known_warning(w)
    )


def _column_process(send: Any, backend: Any, family: str, patterns: list[str] | None, jax_cache: str | None) -> None:
    """One backend on one family, in a process of its own (``check`` without ``--in-process``).

    Sends ("row", row) after each scenario, then ("done", warning counts) or ("error", traceback).
    What the engine and the family's library print as they load was shown once by the parent (which
    imports them before its progress starts), so here it goes to the null device."""
    try:
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
            with _fd_to(null, 1), _fd_to(null, 2):
                adapter_for(backend, "diffinterface check")
                if family != "numpy":
                    importlib.import_module(family)
        counts: Counter[tuple[str, str, str]] = Counter()
        with contextlib.ExitStack() as stack:
            caught = stack.enter_context(warnings.catch_warnings(record=True))
            warnings.simplefilter("always")
            if jax_cache is not None:
                stack.enter_context(jax_compilation_cache(jax_cache))
            from . import test_differentiation

            test_differentiation(
                [backend],
                chosen_scenarios(family, patterns),
                raise_on_failure=False,
                progress=lambda i, n, o: send.send(("row", row(backend, family, o))),
            )
            count_warnings(counts, caught)
        send.send(("done", counts))
    except BaseException:  # noqa: BLE001 - whatever stopped the column is reported by the parent
        send.send(("error", traceback.format_exc()))
    finally:
        send.close()


@contextlib.contextmanager
def _fd_to(target: Any, fd: int) -> Iterator[None]:
    """File descriptor ``fd`` (1 or 2) pointed at ``target`` meanwhile: what C++ code writes there too."""
    saved = os.dup(fd)
    try:
        os.dup2(target.fileno(), fd)
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def run_apart(
    backend: Any, family: str, scenarios: list, patterns: list[str] | None, jax_cache: str | None, show: Any
) -> tuple[list[dict[str, Any]], Counter[tuple[str, str, str]]]:
    """Run :func:`_column_process` in a fresh (spawned) process; its rows and warning counts. A
    process that ends without finishing (an engine that crashed, memory) is a failure of the scenario
    it was running, with its exit code, never a column that silently passed or a check that hangs."""
    context = multiprocessing.get_context("spawn")  # fork is unsafe with the engines' threads
    receive, send = context.Pipe(duplex=False)
    process = context.Process(
        target=_column_process, args=(send, backend, family, patterns, jax_cache), name=f"check {backend!r} [{family}]"
    )
    process.start()
    send.close()  # the child holds the only sending end: its end is the parent's EOFError
    rows: list[dict[str, Any]] = []
    counts: Counter[tuple[str, str, str]] | None = None
    failure = None
    try:
        while counts is None and failure is None:
            try:
                kind, payload = receive.recv()
            except EOFError:
                break
            if kind == "row":
                rows.append(payload)
                show(len(rows), payload["scenario"])
            elif kind == "done":
                counts = payload
            else:
                failure = payload
        process.join()
    finally:
        if process.is_alive():  # the parent was interrupted
            process.terminate()
            process.join()
        receive.close()
    if counts is None:
        at = scenarios[len(rows)].name if len(rows) < len(scenarios) else "(after the last scenario)"
        error = (
            f"the process running this column ended (exit code {process.exitcode}) during this scenario, after "
            f"{len(rows)} of {len(scenarios)}"
            + (f":\n{failure}" if failure else "; run this column alone with --in-process to see more")
        )
        rows.append(_row(backend, family, at, error, None, 0.0))
    return rows, counts or Counter()
