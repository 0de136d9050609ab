"""``python -m diffinterface bench --table sparse`` (issue 16): AutoSparse on the test problems.

Per problem (``diffinterface.testing._sparse_problems``, the bench sizes) and engine:

- colors: ours (the tracer's pattern, :class:`GreedyColoring`), SciPy's ``group_columns`` (the
  greedy of ``approx_derivative(sparsity=...)``), asdex's and sparsejac's own colorings of the same
  function or pattern (where installed);
- the detection and coloring times (the tracer and the coloring alone);
- the prepared sparse call against the prepared dense one of the same engine (a few single calls:
  the dense Jacobian at N = 64 takes seconds), and, under JAX, interleaved against
  ``jax.jit(asdex.jacobian_from_coloring(...))`` and ``jax.jit(sparsejac.jacfwd(...))`` (the same
  problem, their own detection and coloring);
- for finite differences, the evaluations of f per prepared call against
  ``scipy.optimize.approx_derivative(f, x, method="3-point", sparsity=pattern)``;
- the largest relative error against the closed form.

Detection and coloring of banded patterns alone at n = 1e3, 1e4 and 1e5 come first.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from typing import Any

import numpy as np

FD_HESSIAN_SIZE = 1_000  # finite-difference Hessians are timed at this size (4n evaluations per color)

COLUMNS = [
    "problem",
    "n",
    "backend",
    "inputs",
    "mode",
    "colors",
    "scipy_colors",
    "asdex_colors",
    "sparsejac_colors",
    "detect_s",
    "jaxpr_detect_s",
    "color_s",
    "sparse_s",
    "dense_s",
    "dense_over_sparse",
    "over_asdex",
    "over_sparsejac",
    "f_calls",
    "scipy_f_calls",
    "max_rel_error",
]

NOTES = (
    "Detection: the engine-free tracer (`TracerSparsityDetector`; `jaxpr_detect_s`: `JaxprSparsityDetector`, "
    "the trace included); coloring: `GreedyColoring()` (largest first). "
    "`sparse_s`/`dense_s`: medians of single prepared calls (`jacobian`/`hessian` with `AutoSparse(dense)` and with "
    "`dense`, on the engine's own arrays); dense Hessians at n = 1e4 are not computed (800 MB); finite-difference Hessians run at n = 1e3 "
    "(an hvp of finite-difference gradients costs 4n evaluations of f per color). `over_asdex`/`over_sparsejac`: interleaved ratios of our prepared call over "
    "`jax.jit(asdex.jacobian_from_coloring(f, asdex.jacobian_coloring(f, x)))` and "
    "`jax.jit(sparsejac.jacfwd(f, sparsity))` (Hessians: `asdex.hessian_from_coloring`), both returning BCOO. "
    "`scipy_colors`: `scipy.optimize._numdiff.group_columns` of the pattern (of the Hessian's pattern, for a "
    "column coloring of it); `sparsejac_colors`: sparsejac's own largest-first coloring of the pattern. "
    "`f_calls`: evaluations of f in one prepared call, `scipy_f_calls` in `approx_derivative(method='3-point', "
    "sparsity=pattern)`. Goals (issue 16): colors no more than the others; JAX within 1.2x of asdex and sparsejac "
    "and >= 20x faster than dense at N = 64; torch and autograd >= 20x faster than dense at N = 64; finite "
    "differences no more f calls than SciPy; detection + coloring below 1 s at n = 1e5 for banded patterns."
)


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _dense(result: Any) -> np.ndarray:
    from .._core.arrays import NUMPY, to_family
    from .._frontend.sparse_results import densify, is_sparse

    return np.asarray(to_family(densify(result) if is_sparse(result) else result, NUMPY))


def _ready(eng: Any, result: Any) -> Any:
    """Wait for a sparse result: its stored values (JAX's BCOO, a torch sparse tensor) or itself."""
    data = getattr(result, "data", None)
    if data is not None and not isinstance(data, np.ndarray) and hasattr(data, "block_until_ready"):
        return data.block_until_ready()
    return result


def _rel_error(got: Any, reference: Any) -> float:
    ref = reference.toarray()
    return float(np.abs(_dense(got) - ref).max() / max(np.abs(ref).max(), 1e-300))


def detection_rows(sizes: tuple[int, ...], progress: Callable[..., Any]) -> list[dict[str, Any]]:
    """Tracer detection and coloring of the banded diffusion Jacobian alone."""
    from ..sparse._coloring import GreedyColoring
    from ..sparse._detectors import Problem, TracerSparsityDetector
    from ..testing._sparse_problems import diffusion

    rows = []
    for i, n in enumerate(sizes):
        progress(i, len(sizes), f"sparse detection n={n}")
        x = np.linspace(-1, 1, n)
        problem = Problem(diffusion, None, n, diffusion)
        start = time.perf_counter()
        pattern = TracerSparsityDetector().jacobian_sparsity(problem, x)
        detect = time.perf_counter() - start
        start = time.perf_counter()
        colors = GreedyColoring().columns(pattern)
        color = time.perf_counter() - start
        row: dict[str, Any] = {
            "problem": "diffusion (detection and coloring only)",
            "n": n,
            "backend": "-",
            "colors": int(colors.max()) + 1,
            "detect_s": detect,
            "color_s": color,
        }
        if _installed("scipy"):
            from scipy.optimize._numdiff import group_columns

            row["scipy_colors"] = int(group_columns(pattern).max()) + 1
        if _installed("jax"):  # the jaxpr detector on the same function
            from .._adapters.target import Target
            from ..sparse._jaxpr import JaxprSparsityDetector

            target = Target(diffusion, None, "duplicated")
            start = time.perf_counter()
            JaxprSparsityDetector().jacobian_sparsity(Problem(diffusion, None, n, diffusion, target), x)
            row["jaxpr_detect_s"] = time.perf_counter() - start
        rows.append(row)
    return rows


def sparse(
    engines: list[str], full: bool, timing: Any, progress: Callable[..., Any], bench: Any
) -> list[dict[str, Any]]:
    """The sparse table (see the module docstring); ``bench`` is ``diffinterface.bench`` (its engine
    records, configs, ``ratio`` and SciPy's ``approx_derivative``), passed in by its ``run``."""
    config, engine, ratio = bench.config, bench.engine, bench.ratio
    from ..first_order import jacobian, prepare_jacobian
    from ..second_order import hessian, prepare_hessian
    from ..sparse._config import AutoSparse
    from ..sparse._detectors import Problem, TracerSparsityDetector
    from ..testing._sparse_problems import sparse_problems

    rows = detection_rows((1_000, 10_000, 100_000) if full else (1_000, 100_000), progress)
    problems = sparse_problems("bench" if full else "test")
    for k, problem in enumerate(problems):
        n = problem.x.size
        reference = problem.reference(problem.x)
        is_jac = problem.operator == "jacobian"
        detect_problem = Problem(problem.f, None, reference.shape[0], problem.f)
        start = time.perf_counter()
        det = TracerSparsityDetector()
        pattern = (
            det.jacobian_sparsity(detect_problem, problem.x)
            if is_jac
            else det.hessian_sparsity(detect_problem, problem.x)
        )
        detect_s = time.perf_counter() - start
        common = {"problem": problem.name, "n": n, "detect_s": detect_s}
        if _installed("scipy"):
            from scipy.optimize._numdiff import group_columns

            common["scipy_colors"] = int(group_columns(pattern).max()) + 1
        if _installed("sparsejac") and is_jac:
            from sparsejac import sparsejac as sj  # its own largest-first coloring (private helpers)

            connectivity = sj._input_connectivity_from_sparsity(pattern.astype(np.float64))
            common["sparsejac_colors"] = int(sj._greedy_color(connectivity, "largest_first")[1])
        for j, name in enumerate(engines):
            progress(k * len(engines) + j, len(problems) * len(engines), f"sparse {problem.name} {name}")
            eng, dense_backend = engine(name), config(name)
            backend = AutoSparse(dense_backend)
            x_np, ref = problem.x, reference
            if name == "finitediff" and not is_jac and x_np.size > FD_HESSIAN_SIZE:
                x_np = x_np[:FD_HESSIAN_SIZE]  # 4n evaluations of f per color: n = 1e3 is enough to count
                ref = problem.reference(x_np)
            x = eng.array(x_np)
            op, prep_op = (jacobian, prepare_jacobian) if is_jac else (hessian, prepare_hessian)
            start = time.perf_counter()
            prep = prep_op(backend, problem.f, x)
            row = dict(common, n=x_np.size, backend=repr(backend), inputs=eng.inputs, mode=prep.sparse_mode)
            row["colors"] = int(prep.colors.max()) + 1
            row["prepare_s"] = time.perf_counter() - start
            from ..sparse._coloring import GreedyColoring

            start = time.perf_counter()
            coloring = GreedyColoring()
            if is_jac:
                coloring.columns(pattern) if prep.sparse_mode == "columns" else coloring.rows(pattern)
            else:
                coloring.symmetric(pattern)
            row["color_s"] = time.perf_counter() - start
            result = op(backend, problem.f, x, prep=prep)
            row["max_rel_error"] = _rel_error(result, ref)
            # one call where the first takes over a second (finite-difference Hessians: 4n evaluations per color)
            row["sparse_s"] = bench.once(lambda: _ready(eng, op(backend, problem.f, x, prep=prep)), 7, single_over=1.0)
            if is_jac or x_np.size <= 2_000:
                dense_prep = prep_op(dense_backend, problem.f, x)
                row["dense_s"] = bench.once(lambda: eng.ready(op(dense_backend, problem.f, x, prep=dense_prep)), 3)
                row["dense_over_sparse"] = row["dense_s"] / row["sparse_s"]
            if name == "finitediff":
                from ..testing._benchmark import _counted, _Counter

                count = _Counter()
                counted = _counted(problem.f, count)
                cprep = prep_op(backend, counted, x)
                count.calls = 0
                op(backend, counted, x, prep=cprep)
                row["f_calls"] = count.calls
                if is_jac and _installed("scipy"):
                    count.calls = 0
                    bench.approx_derivative()(counted, x_np, method="3-point", sparsity=pattern)
                    row["scipy_f_calls"] = count.calls
            if name == "jax":
                _against_jax_packages(row, problem, x, backend, op, prep, pattern, is_jac, timing, eng, ratio)
            rows.append(row)
    return rows


def _against_jax_packages(
    row: dict[str, Any],
    problem: Any,
    x: Any,
    backend: Any,
    op: Any,
    prep: Any,
    pattern: Any,
    is_jac: bool,
    timing: Any,
    eng: Any,
    ratio: Any,
) -> None:
    import jax

    from .._core.arrays import JAX, families

    ours = lambda: _ready(eng, op(backend, problem.f, x, prep=prep))  # noqa: E731
    with families()[JAX].computing(np.dtype(str(x.dtype))):
        if _installed("asdex"):
            import asdex

            if is_jac:
                colored = asdex.jacobian_coloring(problem.f, x)
                fa = jax.jit(asdex.jacobian_from_coloring(problem.f, colored))
            else:
                colored = asdex.hessian_coloring(problem.f, x)
                fa = jax.jit(asdex.hessian_from_coloring(problem.f, colored))
            row["asdex_colors"] = int(colored.num_colors)
            fa(x).data.block_until_ready()
            row["over_asdex"] = ratio(ours, lambda: fa(x).data.block_until_ready(), timing)["ratio"]
        if _installed("sparsejac") and is_jac:
            import sparsejac
            from jax.experimental import sparse as jsparse

            coo = pattern.tocoo()
            pairs = np.stack([coo.row, coo.col], 1)
            bcoo = jsparse.BCOO((jax.numpy.ones(coo.nnz), jax.numpy.asarray(pairs)), shape=pattern.shape)
            fs = jax.jit(sparsejac.jacfwd(problem.f, sparsity=bcoo))
            fs(x).data.block_until_ready()
            row["over_sparsejac"] = ratio(ours, lambda: fs(x).data.block_until_ready(), timing)["ratio"]
