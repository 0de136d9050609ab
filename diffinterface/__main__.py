"""``python -m diffinterface check``: the scenario catalogue on every installed backend.
``python -m diffinterface bench``: the benchmarks (see ``diffinterface/bench/``).

``check`` prints a table (scenario x backend and array family: pass, or FAIL with the error listed
below) and exits with status 1 if anything failed. ``bench`` writes its tables (CSV, markdown) and
plots (PNG) into ``--out`` and prints where; a quick subset by default, ``--full`` for all.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from ._core.configs import check_available, has_adapter, registered_backends


def _progress(stream: Any) -> Any:
    """A progress line: rewritten in place on a terminal, every 10% otherwise."""
    start = time.perf_counter()
    tty = stream.isatty()
    state = {"shown": -1}

    def show(done: int, total: int, label: str) -> None:
        pct = 100 * done // max(total, 1)
        if tty:
            bar = "#" * (pct // 4)
            stream.write(f"\r[{bar:<25}] {done}/{total} {time.perf_counter() - start:5.1f}s {label[:60]:<60}")
            if done == total:
                stream.write("\n")
            stream.flush()
        elif pct // 10 != state["shown"] or done == total:
            state["shown"] = pct // 10
            stream.write(f"  {done}/{total} ({pct}%) {time.perf_counter() - start:.1f}s {label}\n")
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


def check(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m diffinterface check", description=__doc__)
    parser.add_argument(
        "--backend",
        action="append",
        help="backend to check (finitediff, jax, torch, autograd, or one a package registers); repeatable; default: all installed",
    )
    parser.add_argument(
        "--family",
        action="append",
        help="array family of the inputs (numpy, jax, torch); repeatable; default: all installed",
    )
    parser.add_argument("--failures-only", action="store_true", help="print only the rows with a failure")
    args = parser.parse_args(argv)

    from .testing import available_families, default_scenarios, test_differentiation

    backends, skipped = _select(args.backend)
    families = args.family or available_families()
    for line in skipped:
        print(f"skipped {line}")
    if not backends:
        print("no backend to check")
        return 1
    columns, results = [], {}
    plan = [(b, fam, default_scenarios(fam)) for b in backends for fam in families]
    total = sum(len(s) for _, _, s in plan)
    show, done = _progress(sys.stderr), 0
    for backend, fam, scenarios in plan:
        column = f"{backend!r} [{fam}]"
        columns.append(column)

        def progress(i: int, n: int, outcome: Any, column: str = column, offset: int = done) -> None:
            show(offset + i, total, f"{column} {outcome.scenario.name}")

        for o in test_differentiation([backend], scenarios, raise_on_failure=False, progress=progress):
            results[(o.scenario.name, column)] = o.error
        done += len(scenarios)
    names = list(dict.fromkeys(name for name, _ in results))
    failures = [(name, col, err) for (name, col), err in results.items() if err is not None]
    width = max(len(n) for n in names)
    print(f"{'scenario':<{width}}  " + "  ".join(columns))
    for name in names:
        cells = [results.get((name, c), "") for c in columns]
        if args.failures_only and all(c is None for c in cells):
            continue
        marks = ["pass" if c is None else ("-" if c == "" else "FAIL") for c in cells]
        print(f"{name:<{width}}  " + "  ".join(f"{m:<{len(c)}}" for m, c in zip(marks, columns)))
    for name, col, err in failures:
        print(f"\nFAIL {name} on {col}:\n  " + err.replace("\n", "\n  "))
    print(f"\n{len(results) - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


def bench(argv: list[str]) -> int:
    from . import bench as _bench

    parser = argparse.ArgumentParser(
        prog="python -m diffinterface bench",
        description=_bench.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="every size, 21 rounds a ratio (minutes); default: a quick subset (under two minutes)",
    )
    parser.add_argument(
        "--backend", action="append", choices=_bench.engine_names(), help="repeatable; default: all installed"
    )
    parser.add_argument("--table", action="append", choices=_bench.TABLES, help="repeatable; default: all")
    parser.add_argument(
        "--out",
        default=os.path.join("benchmarks", "results"),
        help="where the tables and plots go (default: %(default)s)",
    )
    parser.add_argument("--no-plots", action="store_true", help="tables only")
    args = parser.parse_args(argv)
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
    misses = [r for r in overhead if r["within_budget"] != "yes"]
    print(
        f"benchmarked {', '.join(engines)} in {time.perf_counter() - start:.0f} s ({'full' if args.full else 'quick'}); "
        f"{done['machine']['machine']}"
    )
    for path in done["written"]:
        print(f"  wrote {path}")
    if overhead:
        print(
            f"overhead: {len(overhead) - len(misses)} of {len(overhead)} prepared calls within the budget of contract section 11"
        )
        for r in misses:
            print(
                f"  over budget: {r['backend']} {r['operator']} {r['shape']}: {r['prepared_ratio']:.3f} (budget {r['budget']})"
            )
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    commands = {"check": check, "bench": bench}
    if not argv or argv[0] not in commands:
        print(
            "usage: python -m diffinterface check [--backend NAME] [--family NAME] [--failures-only]\n"
            "       python -m diffinterface bench [--full] [--backend NAME] [--table NAME] [--out DIR] [--no-plots]",
            file=sys.stderr,
        )
        return 2
    return commands[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
