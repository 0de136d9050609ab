"""``python -m diffinterface bench``: the tables, their titles, columns and notes, and :func:`run`."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from ._engines import installed_engines
from ._timing import FULL, MAX_SPREAD, QUICK, Timing, machine, write_table
from .catalogue import catalogue
from .cheap_gradient import cheap_gradient
from .closures import closures
from .finite_differences import finite_differences
from .mode_choice import mode_choice
from .overhead import overhead, plot_overhead
from .rules import rules

# -- the command ----------------------------------------------------------------------------------

TABLES = (
    "overhead",
    "cheap_gradient",
    "mode_choice",
    "finite_differences",
    "closures",
    "rules",
    "sparse",
    "structured",
    "distributed",
    "catalogue",
)

_PACKAGE = __name__.rpartition(".")[0]  # diffinterface.bench, the package whose modules hold the tables

_COLUMNS = {
    "overhead": [
        "backend",
        "operator",
        "shape",
        "inputs",
        "prepared_s",
        "native_s",
        "prepared_ratio",
        "prepared_min",
        "prepared_max",
        "first_ratio",
        "unprepared_ratio",
        "repeated_unprepared_ratio",
        "repeated_over_prepared",
        "fresh_over_unprepared",
        "prepare_s",
        "native_first_s",
        "native_new_code_s",
        "prepare_ratio",
        "first_call_ratio",
        "within_budget",
        "steady",
        "frontend_us",
        "adapter_us",
        "reason",
    ],
    "cheap_gradient": ["backend", "size", "inputs", "gradient_s", "f_s", "gradient_over_f", "min", "max", "steady"],
    "mode_choice": [
        "backend",
        "shape",
        "auto_s",
        "better",
        "better_s",
        "forward_over_reverse",
        "auto_over_better",
        "min",
        "max",
        "steady",
        "within_1.1",
    ],
    "finite_differences": ["function", "method", "f_evaluations", "max_rel_error", "error"],
    "closures": ["backend", "function", "operator", "size", "duplicated_s", "const_s", "ratio", "min", "max", "steady"],
    "rules": [
        "backend",
        "rule",
        "inputs",
        "size",
        "rule_s",
        "by_hand_s",
        "ratio",
        "min",
        "max",
        "steady",
        "within_1.1",
    ],
    "sparse": [],  # diffinterface.sparse._bench.COLUMNS, filled below
    "structured": [],  # diffinterface._bench_structured.COLUMNS, filled below
    "distributed": [],  # diffinterface._bench_distributed.COLUMNS, filled below
    "catalogue": [
        "backend",
        "scenario",
        "prepared_s",
        "unprepared_s",
        "prepare_s",
        "prepared_calls",
        "unprepared_calls",
        "prepare_calls",
        "error",
    ],
}

_TITLES = {
    "overhead": "Overhead: diffinterface against each engine's own best call",
    "cheap_gradient": "Cheap gradient: prepared gradient / f",
    "mode_choice": "Mode choice: jacobian with mode=None / the better of forward and reverse",
    "finite_differences": "Finite differences: f evaluations and errors against the analytic derivative",
    "closures": "Closures: closure='duplicated' / closure='const'",
    "rules": "Rules: a prepared gradient through a custom_rule / through the engine's registration written by hand",
    "sparse": "Sparse Jacobians and Hessians: AutoSparse on the issue 16 problems",
    "structured": "Structured x: a prepared gradient of a dict of arrays / of one flat array, and the flattening",
    "distributed": "Distributed finite differences: a Jacobian of an expensive f, serial and on executors",
    "catalogue": "The scenario catalogue, through benchmark_differentiation",
}


def _notes(table: str, timing: Timing) -> str:
    how = (
        f"Interleaved timing: {timing.rounds} rounds of batches of about {timing.seconds * 1e3:.0f} ms of each "
        f"call, after {timing.warmup} s of warm-up; the times are the medians of the rounds and a ratio is the "
        f"ratio of the two medians (so a row's times and ratio agree), min and max the smallest and largest "
        f"per-round ratio. A measurement whose rounds are more than {MAX_SPREAD}x apart (max / min) is taken "
        f"again, up to {timing.remeasure} more times; a row still that far apart is marked `unsteady` in place "
        f"of its times and ratios (steady: NO; the CSV keeps the numbers) and is not a result."
    )
    return {
        "overhead": how + " Natives: JAX `jax.jit` of `grad`, `jvp(grad)`, `hessian`, `jvp`, `vjp`, `jacfwd` (tall) "
        "and `jacrev` (wide); torch eager autograd (`autograd.grad`, double backward, forward-mode dual tensors, "
        "`autograd.functional.jacobian/hessian(vectorize=True)`); autograd `grad`, `make_jvp(grad)`, `hessian`, "
        "`make_jvp`, `make_vjp`, one `make_jvp` per column (tall) and `jacobian` (wide); finite differences "
        "`scipy.optimize.approx_derivative('3-point')` and a central difference along t; TensorFlow a `tf.function` "
        "(fixed input signature) of `GradientTape` / `ForwardAccumulator`; MLX `mx.compile` of `mx.grad`, `mx.jvp`, "
        "`mx.vjp` and `mx.vmap` over them; PyTensor a `pytensor.function` of `grad`, `pushforward`, `pullback` and "
        "`jacobian(vectorize=True)`. Columns: `unprepared_ratio`, a call without `prep=` that reuses nothing "
        "(`prep_cache` off); `repeated_unprepared_ratio`, the same f called without `prep=` in a loop (the kept "
        "preparation), both over the native; `repeated_over_prepared`, that loop over the prepared call; "
        "`fresh_over_unprepared`, a new lambda at every call over the unprepared call (a stateless one's code shares "
        "its preparation from its fourth call on); `prepare_ratio` and "
        "`first_call_ratio`, the preparation and the first call of a new code (a function of a code never seen; "
        "fresh lambdas before 2026-11-27) over the native's first call: the native "
        "built and called (a fresh `jax.jit`, `mx.compile`, `tf.function` or `pytensor.function`, traced and "
        "compiled; torch's and autograd's are eager), for `first_call_ratio` on a function of new code made the "
        "same way (`native_new_code_s`; since 2026-11-28, f itself before; a compiling engine's is its "
        "`native_first_s`, which compiles a new function whatever its code). A native first call under 5 ms (an "
        "eager engine's) is timed with the preparation and the new code's first call in the same interleaved rounds (their medians: "
        "the ratios agree with the times); a slower one (a compilation) as the median of single calls. Budget "
        "(contract section 11): the prepared "
        "ratio at most 1.05 at sizes >= 1e4, 1.25 below. f: `sum(sin(x)**2)` (gradient, hvp, hessian), "
        "`sin(x) * sum(x)` (pushforward, pullback), `sin(A @ x)` with A captured (jacobians); JAX and torch also on "
        "numpy inputs (float32 for JAX, its default precision), against their own call on the numpy arrays with "
        "the result read back by `np.asarray`. A row over budget is measured a second time and keeps the lower "
        "median (load from other tenants only adds time); `first_ratio` is the first measurement. For a row "
        "still over budget, two more interleaved measurements split the difference: `frontend_us`, the public call over the adapter's "
        "runner called directly (the prep check, dispatch, result conversion), and `adapter_us`, the runner over the "
        "native call; `reason` is the work the backend's bench record documents for that operator.",
        "cheap_gradient": how + " f: `sum(sin(x)**2)`; JAX's f is `jax.jit(f)`.",
        "mode_choice": how + " f: `sin(A @ x)`; forward_over_reverse < 1 means forward mode is faster.",
        "finite_differences": "x: 20 points in [0.3, 1.7]; error: max |derivative - analytic| / max |analytic|.",
        "closures": how + " 'ratio' is the price of the duplicates: duplicated / const.",
        "rules": how + " f: `sum(rule(x))`, `rule` an opaque NumPy `cumsum(x * b**2)` with b captured: a rule of x "
        "alone whose bodies close over b (like for like), and `diffinterface.testing`'s two-argument "
        "`cumsum_weighted(x, b)`, b a `Const` argument; by hand: the same NumPy primal and VJP of x alone (b closed "
        "over) as a `jax.custom_vjp` over "
        "`jax.pure_callback`, a `torch.autograd.Function`, an autograd `primitive` with `defvjp`, a PyTensor "
        "`Op` whose `pullback` is an `Op` running the VJP. Both are "
        "`prepare_gradient` calls of the engine's backend with closure='const' (the closures table prices the "
        "duplicates); both results are checked before timing. Budget "
        "(issue 15): at most 1.1 at n = 1e4.",
        "sparse": how + " " + _sparse_bench().NOTES,
        "structured": how + " " + _structured_bench().NOTES,
        "distributed": _distributed_bench().NOTES,
        "catalogue": "Median of the timed batches (`time_call`); `*_calls`: evaluations of f by each call.",
    }[table]


def _sparse_bench() -> Any:
    from . import sparse

    return sparse


def _structured_bench() -> Any:
    from . import structured

    return structured


def _distributed_bench() -> Any:
    from . import distributed

    return distributed


def run(
    engines: list[str] | None = None,
    full: bool = False,
    out: str = "diffinterface-bench",
    tables: list[str] | None = None,
    progress: Callable[..., Any] | None = None,
    plots: bool = True,
    timing: Timing | None = None,
) -> dict[Any, Any]:
    """Run the benchmarks and write their tables into ``out`` (created if missing; the repository's
    recorded tables are ``benchmarks/results``, written only when asked for); returns ``{"results": {table: rows}, "written":
    paths, "machine": record}``. ``timing`` overrides the rounds of ``QUICK`` or ``FULL``."""
    engines = installed_engines(engines)
    timing = timing or (FULL if full else QUICK)
    kind = "full" if full else "quick"
    progress = progress or (lambda i, n, label: None)
    os.makedirs(out, exist_ok=True)
    info = machine()
    results: dict[Any, Any] = {}
    written: list[str] = []
    for table in tables or TABLES:
        if table == "overhead":
            path, partial = os.path.join(out, table), _TITLES[table] + " (partial: the run was stopped)"
            rows = overhead(
                engines,
                kind,
                timing,
                progress,
                keep=lambda so_far: write_table(path, partial, info, so_far, _COLUMNS[table], _notes(table, timing)),
            )
        elif table == "cheap_gradient":
            rows = cheap_gradient(
                engines, (10, 1_000, 100_000, 1_000_000) if full else (1_000, 100_000), timing, progress
            )
        elif table == "mode_choice":
            rows = mode_choice(engines, (100, 10_000) if full else (1_000,), timing, progress)
        elif table == "finite_differences":
            rows = finite_differences(progress) if "finitediff" in engines else []
        elif table == "closures":
            rows = closures(engines, (100, 10_000, 1_000_000) if full else (10_000,), timing, progress)
        elif table == "rules":
            rows = rules(engines, (100, 10_000, 1_000_000) if full else (10_000,), timing, progress)
        elif table == "sparse":
            rows = _sparse_bench().sparse(engines, full, timing, progress, sys.modules[_PACKAGE])
            _COLUMNS["sparse"] = _sparse_bench().COLUMNS
        elif table == "structured":
            rows = _structured_bench().structured(engines, full, timing, progress, sys.modules[_PACKAGE])
            _COLUMNS["structured"] = _structured_bench().COLUMNS
        elif table == "distributed":  # finite differences on numpy: no engine needed
            rows = _distributed_bench().distributed(full, timing, progress) if "finitediff" in engines else []
            _COLUMNS["distributed"] = _distributed_bench().COLUMNS
        elif table == "catalogue":
            rows = catalogue(engines, full, progress)
        else:
            raise ValueError(f"unknown table {table!r}; choose from {', '.join(TABLES)}")
        results[table] = rows
        path = os.path.join(out, table)
        title = _TITLES[table] + (" (quick)" if not full else "")
        write_table(path, title, info, rows, _COLUMNS[table], _notes(table, timing))
        if rows:
            written += [path + ".csv", path + ".md"]
        if table == "overhead" and plots and rows:
            written += plot_overhead(rows, out)
    return {"results": results, "written": written, "machine": info}
