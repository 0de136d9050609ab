"""``python -m diffinterface check``: the scenario catalogue on every installed backend.
``python -m diffinterface bench``: the benchmarks (see ``diffinterface/bench/``).

``check`` shows a progress bar on a terminal (plain lines otherwise), then a summary per backend and
array family (passed, refused, failed, time: "refused" is a complex x the backend declares it does not
differentiate, checked to be the call's TypeError), each failure in full and the warnings raised, once each; it
exits with status 1 if anything failed. ``--verbose`` adds the table of every scenario,
``--json FILE`` writes every result, ``--scenario GLOB`` picks scenarios by name. With more than one
backend or family, each (backend, family) runs in a fresh process of its own (``testing/_check.py``
says why), ``--in-process`` runs them all here. ``bench`` writes its tables (CSV, markdown) and plots (PNG)
into ``--out`` (default ``diffinterface-bench/``) and prints where; a quick subset by default,
``--full`` for all.

Size: over 400 lines in one module, because the command line is one reader's page: the parser, the
progress display and the summary of ``check`` share the terminal's width and the run's results.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import shutil
import sys
import tempfile
import time
import warnings
from collections import Counter
from typing import Any

from ._core.configs import adapter_for, check_available, has_adapter, registered_backends
from ._frontend.reuse import prep_cache
from .testing._check import (
    chosen_scenarios,
    count_warnings,
    jax_compilation_cache,
    row,
    run_apart,
)


def _clock(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    return f"{seconds // 60}:{seconds % 60:02d}"


def _progress(stream: Any, tty: bool | None = None, every: float = 10.0) -> Any:
    """``show(done, total, label)``: on a terminal a bar rewritten in place (elapsed, an estimate of
    what remains, the current label); otherwise a plain line at each new label's column, every 10%
    and at least every ``every`` seconds, so that a log never goes quiet for long. A new count
    (bench counts each table on its own) starts a new estimate; the elapsed time runs on."""
    start = time.perf_counter()
    tty = stream.isatty() if tty is None else tty
    state: dict[str, Any] = {"decile": -1, "at": start, "head": None, "count": (0, 0), "since": start, "last": start}

    def show(done: int, total: int, label: str) -> None:
        now = time.perf_counter()
        elapsed = now - start
        if total != state["count"][1] or done < state["count"][0]:  # a new count: it began at the last call
            state["since"] = now if done == 0 else state["last"]
        state["count"], state["last"] = (done, total), now
        pct = 100 * done // max(total, 1)
        rate = (now - state["since"]) / done if done else None
        left = f"~{_clock(rate * (total - done))} left" if rate else "~?:?? left"
        if tty:
            width = shutil.get_terminal_size((100, 24)).columns
            bar = "#" * (pct * 20 // 100)
            line = f"[{bar:<20}] {done}/{total} {pct:3d}% {_clock(elapsed)} {left}  {label}"
            stream.write("\r" + line[: width - 1].ljust(width - 1))
            if done == total:
                stream.write("\n")
            stream.flush()
            return
        head = label.split("  ")[0]
        if pct // 10 != state["decile"] or head != state["head"] or now - state["at"] >= every or done == total:
            state.update(decile=pct // 10, at=now, head=head)
            stream.write(f"  {done}/{total} ({pct}%) {elapsed:.1f}s {left}: {label}\n")
            stream.flush()

    return show


def _select(names: list[str] | None) -> tuple[list, list[str]]:
    chosen, skipped = [], []
    backends = registered_backends()  # the built-in configs and those packages add (entry points)
    for name in names or list(backends):
        if name not in backends:
            raise SystemExit(f"diffinterface check: unknown backend {name!r}; choose from {', '.join(backends)}")
        backend = backends[name]()
        if not check_available(backend):
            skipped.append(
                f"{backend!r}: {backend.engine} is not installed ({backend.install or 'pip install ' + str(backend.engine)})"
            )
        elif not has_adapter(backend):
            skipped.append(f"{backend!r}: no adapter in this version of diffinterface")
        else:
            chosen.append(backend)
    return chosen, skipped


SUMMARY_WIDTH = 100  # the summary table's lines fit this many columns


def _summary(columns: list[tuple[str, str]], rows: list[dict[str, Any]]) -> list[str]:
    """Per backend and array family: passed, refused, failed, time; lines of at most SUMMARY_WIDTH
    columns. "refused": scenarios whose complex x the backend declares it does not differentiate
    (``Adapter.complex_dtypes``), checked to be the call's TypeError; they are not failures."""
    family_width = 6
    rest = 2 + family_width + len("  passed  refused  failed      time")  # after the backend's column
    backend_width = min(max([len("backend")] + [len(b) for b, _ in columns]), SUMMARY_WIDTH - rest)
    lines = [f"{'backend':<{backend_width}}  {'family':<{family_width}}  passed  refused  failed      time"]
    for backend, fam in columns:
        mine = [r for r in rows if r["backend"] == backend and r["family"] == fam]
        failed = sum(not r["passed"] for r in mine)
        refused = sum(r["passed"] and r["refused"] is not None for r in mine)
        seconds = sum(r["seconds"] for r in mine)
        name = backend if len(backend) <= backend_width else backend[: backend_width - 3] + "..."
        lines.append(
            f"{name:<{backend_width}}  {fam:<{family_width}}  {len(mine) - failed - refused:>6}  {refused:>7}  "
            f"{failed:>6}  {seconds:>7.1f}s"
        )
    return lines


def _add_check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        action="append",
        metavar="NAME",
        help=f"backend to check ({', '.join(registered_backends())}, or one a package registers); repeatable; "
        "default: all installed",
    )
    parser.add_argument(
        "--family",
        action="append",
        metavar="NAME",
        help="array family of the inputs (numpy, jax, torch: those whose library is installed); repeatable; "
        "default: all installed",
    )
    parser.add_argument(
        "--scenario",
        action="append",
        metavar="GLOB",
        help="only the scenarios whose name matches GLOB (e.g. 'gradient/*'); repeatable; default: all",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run every backend and family in this process; by default, with more than one, each runs in a "
        "fresh process of its own, so that what an engine keeps (its compiled code) goes when its run ends",
    )
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument(
        "--failures-only", action="store_true", help="the table of scenarios, only its rows with a failure"
    )
    shown.add_argument(
        "-v", "--verbose", action="store_true", help="the full table: every scenario on every backend and family"
    )
    parser.add_argument("--json", metavar="FILE", help="also write every result (and the warnings) to FILE as JSON")
    parser.add_argument(
        "--jax-cache",
        metavar="DIR",
        help="keep JAX's compilation cache in DIR, so that a later check compiles less (default: a temporary "
        "folder, removed after); only when JAX is checked",
    )


def _check_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m diffinterface check", description=CHECK_HELP)
    _add_check_arguments(parser)
    return parser


CHECK_HELP = (
    "Run the scenario catalogue (analytic derivatives) on every installed backend, prepared and "
    "unprepared, on every array family. Prints a summary per backend and family, then each failure "
    "in full; exits with status 1 if anything failed."
)


def check(argv: list[str] | argparse.Namespace) -> int:
    args = argv if isinstance(argv, argparse.Namespace) else _check_parser().parse_args(argv)

    from .testing import available_families, test_differentiation

    backends, skipped = _select(args.backend)
    families = args.family or available_families()
    for line in skipped:
        print(f"skipped {line}")
    if not backends:
        print("no backend to check")
        return 1
    for backend in backends:  # each engine imported before the progress starts: what an engine prints
        adapter_for(backend, "diffinterface check")  # as it loads (TensorFlow's log lines) comes first
    columns: list[tuple[str, str]] = []
    rows: list[dict[str, Any]] = []
    counts: Counter[tuple[str, str, str]] = Counter()
    start = time.perf_counter()
    uses_jax = any(b.engine == "jax" for b in backends) or (
        "jax" in families and importlib.util.find_spec("jax") is not None
    )
    with contextlib.ExitStack() as stack:
        caught = stack.enter_context(warnings.catch_warnings(record=True))
        warnings.simplefilter("always")  # each is counted here and reported once, after the results
        plan = [(b, fam, chosen_scenarios(fam, args.scenario)) for b in backends for fam in families]
        apart = len(plan) > 1 and not args.in_process
        jax_cache = None
        if uses_jax and apart:  # each process sets JAX's cache to the folder: what one compiled, the next finds
            jax_cache = args.jax_cache or stack.enter_context(
                tempfile.TemporaryDirectory(prefix="diffinterface-check-jax-")
            )
        elif uses_jax:
            stack.enter_context(jax_compilation_cache(args.jax_cache))
        total = sum(len(s) for _, _, s in plan)
        if not total:
            print(f"no scenario of the catalogue matches --scenario {' or '.join(args.scenario)}")
            return 1
        show, done = _progress(sys.stderr), 0
        for backend, fam, scenarios in plan:
            columns.append((repr(backend), fam))
            column = f"{backend!r} [{fam}]"
            if apart:
                got, theirs = run_apart(
                    backend,
                    fam,
                    scenarios,
                    args.scenario,
                    jax_cache if backend.engine == "jax" or fam == "jax" else None,
                    lambda i, name, column=column, offset=done: show(offset + i, total, f"{column}  {name}"),
                )
                rows.extend(got)
                counts.update(theirs)
            else:

                def progress(i: int, n: int, outcome: Any, column: str = column, offset: int = done) -> None:
                    show(offset + i, total, f"{column}  {outcome.scenario.name}")

                for o in test_differentiation([backend], scenarios, raise_on_failure=False, progress=progress):
                    rows.append(row(backend, fam, o))
                # the scenarios live to the end of the check, and so would every preparation the unprepared
                # calls kept for them (prep_cache, each holding its compiled programs: JAX's numpy column
                # peaks at 3.46 GB with them, 2.24 without): none serves another column, so they go with it
                prep_cache.clear()
            done += len(scenarios)
        count_warnings(counts, caught)
    seconds = time.perf_counter() - start
    failures = [r for r in rows if not r["passed"]]
    refused = [r for r in rows if r["passed"] and r["refused"] is not None]
    if args.verbose or args.failures_only:
        _table(columns, rows, failures_only=args.failures_only)
        print()
    for line in _summary(columns, rows):
        print(line)
    for r in failures:
        print(f"\nFAIL {r['scenario']} on {r['backend']} [{r['family']}]:\n  " + r["error"].replace("\n", "\n  "))
    reported = [{"category": c, "message": m, "where": w, "count": n} for (c, m, w), n in counts.items()]
    if reported:
        print(f"\n{len(reported)} warning{'s' * (len(reported) > 1)} raised during the check (each once):")
        for w in reported:
            print(f"  {w['count']}x {w['category']} at {w['where']}: {w['message']}")
    if args.json:
        from .bench import machine

        record = {
            "command": "check",
            "machine": machine(),
            "seconds": seconds,
            "passed": len(rows) - len(failures) - len(refused),
            "refused": len(refused),
            "failed": len(failures),
            "skipped": skipped,
            "results": rows,
            "warnings": reported,
        }
        with open(args.json, "w") as fh:
            json.dump(record, fh, indent=1)
        print(f"\nwrote {args.json}")
    refusals = (
        f"{len(refused)} refused (a complex x the backend declares it does not differentiate: its TypeError checked), "
        if refused
        else ""
    )
    print(f"\n{len(rows) - len(failures) - len(refused)} passed, {refusals}{len(failures)} failed in {_clock(seconds)}")
    return 1 if failures else 0


def _table(columns: list[tuple[str, str]], rows: list[dict[str, Any]], failures_only: bool) -> None:
    """Scenario x backend and family: pass, refused (the declared TypeError, checked), FAIL, or - where
    the scenario is not in that family."""
    labels = [f"{b} [{fam}]" for b, fam in columns]
    cell = {(r["scenario"], f"{r['backend']} [{r['family']}]"): r for r in rows}
    names = list(dict.fromkeys(r["scenario"] for r in rows))
    width = max(len(n) for n in names)
    print(f"{'scenario':<{width}}  " + "  ".join(labels))
    for name in names:
        found = [cell.get((name, label)) for label in labels]
        if failures_only and all(r is None or r["passed"] for r in found):
            continue
        marks = [
            "-" if r is None else "FAIL" if not r["passed"] else "refused" if r["refused"] else "pass" for r in found
        ]
        print(f"{name:<{width}}  " + "  ".join(f"{m:<{len(c)}}" for m, c in zip(marks, labels)).rstrip())


BENCH_OUT = "diffinterface-bench"  # the default --out: a folder of the user's, never the recorded results


def _add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    from . import bench as _bench

    parser.add_argument(
        "--full",
        action="store_true",
        help=f"every size, 21 rounds a ratio (the overhead table alone about {_bench.FULL_OVERHEAD_MINUTES} minutes "
        f"on 2 cores with seven engines); default: a quick subset (about {_bench.QUICK_MINUTES} minutes on a 2-core "
        "machine with seven engines, several times that under load)",
    )
    parser.add_argument(
        "--backend", action="append", choices=_bench.engine_names(), help="repeatable; default: all installed"
    )
    parser.add_argument("--table", action="append", choices=_bench.TABLES, help="repeatable; default: all")
    parser.add_argument(
        "--out",
        default=BENCH_OUT,
        metavar="DIR",
        help="where the tables and plots go, created if missing (default: %(default)s/ in the current "
        "directory; the repository's recorded tables are benchmarks/results)",
    )
    parser.add_argument("--no-plots", action="store_true", help="tables only")


def _bench_parser() -> argparse.ArgumentParser:
    from . import bench as _bench

    parser = argparse.ArgumentParser(
        prog="python -m diffinterface bench",
        description=_bench.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_bench_arguments(parser)
    return parser


def bench(argv: list[str] | argparse.Namespace) -> int:
    from . import bench as _bench

    args = argv if isinstance(argv, argparse.Namespace) else _bench_parser().parse_args(argv)
    engines = _bench.installed_engines(args.backend)
    missing = sorted(set(args.backend or _bench.engine_names()) - set(engines))
    for name in missing:
        print(f"skipped {name}: not installed ({_bench.config_class(name).install})")
    if not engines:
        print("no backend to benchmark")
        return 1
    start = time.perf_counter()
    show = _progress(sys.stderr)
    done = _bench.run(engines, full=args.full, out=args.out, tables=args.table, progress=show, plots=not args.no_plots)
    overhead = done["results"].get("overhead", [])
    unsteady = [(t, r) for t, rows in done["results"].items() for r in rows if r.get("steady") == "NO"]
    overhead = [r for r in overhead if r.get("steady") != "NO"]  # an unsteady row is not a result
    misses = [r for r in overhead if r["within_budget"] != "yes"]
    print(
        f"benchmarked {', '.join(engines)} in {time.perf_counter() - start:.0f} s ({'full' if args.full else 'quick'}); "
        f"{done['machine']['machine']}"
    )
    for path in done["written"]:
        print(f"  wrote {path}")
    if done["results"].get("overhead"):
        print(
            f"overhead: {len(overhead) - len(misses)} of {len(overhead)} steady rows' prepared calls within the budget "
            "of contract section 11"
        )
        for r in misses:
            print(
                f"  over budget: {r['backend']} {r['operator']} {r['shape']}: {r['prepared_ratio']:.3f} (budget {r['budget']})"
            )
    if unsteady:
        print(
            f"{len(unsteady)} of {sum('steady' in r for rows in done['results'].values() for r in rows)} timed rows "
            "flagged unsteady "
            f"(rounds more than {_bench.MAX_SPREAD:g}x apart after {_bench.QUICK.remeasure + 1} measurements: "
            "a loaded machine): marked 'unsteady' in the tables, not results"
        )
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m diffinterface",
        description="diffinterface's command line: check the backends against the scenario catalogue, "
        "or benchmark them against each engine's own calls.",
        epilog="'python -m diffinterface COMMAND --help' describes each command's options.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    check_parser = commands.add_parser(
        "check", help="run the scenario catalogue on every installed backend", description=CHECK_HELP
    )
    _add_check_arguments(check_parser)
    check_parser.set_defaults(run=check)
    from . import bench as _bench

    bench_parser = commands.add_parser(
        "bench",
        help="time diffinterface against each engine's own best calls",
        description=_bench.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_bench_arguments(bench_parser)
    bench_parser.set_defaults(run=bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.command is None:
        parser.print_help()
        return 2
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
