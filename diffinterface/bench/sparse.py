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

Size: over 400 lines in one module, because the sparse table's rows (the anchors, the orders, the arrowhead,
star against acyclic, the 1e6-unknown problems) share their problems, records and timing.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import types
    from collections.abc import Callable

    from .._adapters.bench_engine import BenchEngine
    from .._core.configs import Backend
    from .._core.types import Array
    from .._frontend.prep import Prep
    from ..testing._sparse_problems import SparseProblem
    from ._timing import Timing

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


def _ready(eng: BenchEngine, result: Any) -> Any:
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
    engines: list[str], full: bool, timing: Timing, progress: Callable[..., Any], bench: types.ModuleType
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
            # its own largest-first coloring (private helpers)
            from sparsejac import sparsejac as sj  # pyright: ignore[reportMissingImports]  # optional (the bench extra): absent where lint runs

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
            row: dict[str, object] = dict(
                common, n=x_np.size, backend=repr(backend), inputs=eng.inputs, mode=prep.sparse_mode
            )
            row["colors"] = int(prep.colors.max()) + 1
            row["prepare_s"] = time.perf_counter() - start
            from ..sparse._coloring import GreedyColoring

            start = time.perf_counter()
            coloring = GreedyColoring()
            if is_jac:
                coloring.columns(pattern) if prep.sparse_mode == "columns" else coloring.rows(pattern)
            else:
                coloring.hessian(pattern)
            row["color_s"] = time.perf_counter() - start
            result = op(backend, problem.f, x, prep=prep)
            row["max_rel_error"] = _rel_error(result, ref)
            # one call where the first takes over a second (finite-difference Hessians: 4n evaluations per color)
            sparse_s = bench.once(lambda: _ready(eng, op(backend, problem.f, x, prep=prep)), 7, single_over=1.0)
            row["sparse_s"] = sparse_s
            if is_jac or x_np.size <= 2_000:
                dense_prep = prep_op(dense_backend, problem.f, x)
                dense_s = bench.once(lambda: eng.ready(op(dense_backend, problem.f, x, prep=dense_prep)), 3)
                row["dense_s"], row["dense_over_sparse"] = dense_s, dense_s / sparse_s
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
    problem: SparseProblem,
    x: Array,
    backend: Backend,
    op: Callable[..., Any],
    prep: Prep,
    pattern: Any,
    is_jac: bool,
    timing: Timing,
    eng: BenchEngine,
    ratio: Callable[..., dict[Any, Any]],
) -> None:
    import jax

    from .._core.arrays import JAX, families

    ours = lambda: _ready(eng, op(backend, problem.f, x, prep=prep))  # noqa: E731
    with families()[JAX].computing(np.dtype(str(x.dtype))):
        if _installed("asdex"):
            import asdex  # pyright: ignore[reportMissingImports]  # optional (the bench extra): absent where lint runs

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
            import sparsejac  # pyright: ignore[reportMissingImports]  # optional (the bench extra): absent where lint runs
            from jax.experimental import sparse as jsparse

            coo = pattern.tocoo()
            pairs = np.stack([coo.row, coo.col], 1)
            bcoo = jsparse.BCOO((jax.numpy.ones(coo.nnz), jax.numpy.asarray(pairs)), shape=pattern.shape)
            fs = jax.jit(sparsejac.jacfwd(problem.f, sparsity=bcoo))
            fs(x).data.block_until_ready()
            row["over_sparsejac"] = ratio(ours, lambda: fs(x).data.block_until_ready(), timing)["ratio"]


# -- issue 42: bicoloring, acyclic Hessians, orders, 1e6 unknowns -------------------------------------

BEYOND_COLUMNS = [
    "problem",
    "n",
    "backend",
    "coloring",
    "mode",
    "colors",
    "asdex_colors",
    "detect_s",
    "color_s",
    "asdex_detect_color_s",
    "prepare_s",
    "sparse_s",
    "over_asdex",
    "peak_mb",
    "asdex_peak_mb",
    "max_rel_error",
]

BEYOND_NOTES = (
    "Issue 42. `colors`: `prep.ncolors`, the products one prepared call makes (pushforwards plus pullbacks for "
    "`bidirectional`; Hessian-vector products for `star`/`acyclic`). Orders rows: `GreedyColoring(order)` on the "
    "Brusselator's pattern alone (`color_s` includes the conflict graph and the recoloring passes). `detect_s`: "
    "`TracerSparsityDetector`; `color_s`: the coloring alone; `asdex_detect_color_s`: `asdex.jacobian_coloring` "
    "(its detection and coloring). `prepare_s`: ours, detection, coloring, the index and JAX's compilation. `sparse_s`: median of single prepared calls on float32 JAX arrays (float64 numpy "
    "for autograd, torch's own float64 tensors); `over_asdex`: interleaved ratio of our prepared call over "
    "`jax.jit(asdex.jacobian_from_coloring(f, coloring))` (Hessians: `hessian_from_coloring`). 1e6-unknown rows: "
    "detection, coloring, preparation and the call in a fresh process; `peak_mb`: that process's peak "
    "resident memory (VmHWM, Python, JAX and XLA's compilation included), `asdex_peak_mb` the same for asdex's "
    "coloring and call. Goals (issue 42): the arrowhead in <= 4 products on every AD engine; the Brusselator "
    "N = 64 in <= 10 colors and within 1.1x of asdex; 1e6 unknowns detected and colored in < 10 s and within "
    "1.2x of asdex."
)


def beyond(full: bool, timing: Timing, progress: Callable[..., Any]) -> list[dict[str, Any]]:
    """The issue-42 rows (see ``BEYOND_NOTES``); the 1e6-unknown rows only with ``full``."""
    rows = _order_rows(progress) + _mode_rows(timing, progress)
    if full:
        for k, (name, size) in enumerate((("brusselator", 512), ("diffusion3d", 100))):
            progress(k, 2, f"sparse 1e6 {name}")
            rows.append(_scale_row(name, size, timing))
    return rows


def _order_rows(progress: Callable[..., Any]) -> list[dict[str, Any]]:
    from ..sparse._coloring import ORDERS, GreedyColoring, csr_pattern
    from ..testing._sparse_problems import brusselator_jacobian, brusselator_x0

    pattern = csr_pattern(brusselator_jacobian(brusselator_x0(64)))
    rows = []
    for k, order in enumerate(ORDERS):
        progress(k, len(ORDERS), f"sparse order {order}")
        for recolor in (0, 12):
            start = time.perf_counter()
            colors = GreedyColoring(order, recolor=recolor).columns(pattern)
            rows.append(
                {
                    "problem": "brusselator_64 (coloring only)",
                    "n": pattern.shape[1],
                    "backend": "-",
                    "coloring": f"order={order!r}, recolor={recolor}",
                    "mode": "columns",
                    "colors": int(colors.max()) + 1,
                    "color_s": time.perf_counter() - start,
                }
            )
    return rows


def _mode_rows(timing: Timing, progress: Callable[..., Any]) -> list[dict[str, Any]]:
    """The arrowhead Jacobian (n = 1e4) on every AD engine; the band Hessian, star against acyclic; the
    Brusselator N = 64 by default; JAX against asdex."""
    from .. import AutoAutograd, AutoJAX, AutoTorch
    from ..first_order import jacobian, prepare_jacobian
    from ..second_order import hessian, prepare_hessian
    from ..sparse._coloring import GreedyColoring
    from ..sparse._config import AutoSparse
    from ..testing import _sparse_problems as problems

    rng = np.random.default_rng(42)
    cases: list[tuple[Any, ...]] = []
    x = rng.uniform(-1, 1, 10_000)
    for dense in (AutoJAX(), AutoTorch(), AutoAutograd()):
        cases.append(("arrowhead_map", problems.arrowhead_map, problems.arrowhead_map_jacobian, x, dense, None))
    for kind in ("star", "acyclic"):
        case = ("banded", problems.banded, problems.banded_hessian, x, AutoJAX(), GreedyColoring(symmetric=kind))
        cases.append(case)
    x = problems.brusselator_x0(64) + 0.1 * rng.standard_normal(2 * 64 * 64)
    cases.append(("brusselator_64", problems.brusselator, problems.brusselator_jacobian, x, AutoJAX(), None))
    rows = []
    for k, (name, f, reference, x_np, dense, coloring) in enumerate(cases):
        engine = dense.engine
        if engine is None or not _installed(engine):
            continue
        progress(k, len(cases), f"sparse {name} {dense!r}")
        is_jac = reference is not problems.banded_hessian
        backend = AutoSparse(dense, coloring=coloring) if coloring is not None else AutoSparse(dense)
        x = _engine_array(engine, x_np)
        op, prep_op = (jacobian, prepare_jacobian) if is_jac else (hessian, prepare_hessian)
        start = time.perf_counter()
        prep = prep_op(backend, f, x)
        row: dict[str, Any] = {
            "problem": name,
            "n": x_np.size,
            "backend": repr(dense),
            "coloring": repr(coloring) if coloring is not None else "GreedyColoring()",
            "mode": prep.sparse_mode,
            "colors": prep.ncolors,
            "prepare_s": time.perf_counter() - start,
        }
        result = op(backend, f, x, prep=prep)
        row["max_rel_error"] = _rel_error(result, reference(x_np))
        call = lambda: _block(op(backend, f, x, prep=prep))  # noqa: E731
        from ._timing import once

        row["sparse_s"] = once(call, 7)
        if engine == "jax" and _installed("asdex"):
            _asdex_row(row, f, x, is_jac, call, timing)
        rows.append(row)
    return rows


def _engine_array(engine: str, x_np: np.ndarray) -> Any:
    if engine == "jax":
        import jax.numpy as jnp

        return jnp.asarray(x_np, dtype=jnp.float32)
    if engine == "torch":
        import torch

        return torch.tensor(x_np)
    return x_np


def _block(result: Any) -> Any:
    data = getattr(result, "data", None)
    if data is not None and hasattr(data, "block_until_ready"):
        return data.block_until_ready()
    return result


def _asdex_row(
    row: dict[str, Any], f: Callable[..., Any], x: Array, is_jac: bool, ours: Callable[[], Any], timing: Timing
) -> None:
    import asdex  # pyright: ignore[reportMissingImports]  # optional (the bench extra): absent where lint runs
    import jax

    from ._timing import ratio

    start = time.perf_counter()
    colored = asdex.jacobian_coloring(f, x) if is_jac else asdex.hessian_coloring(f, x)
    row["asdex_detect_color_s"] = time.perf_counter() - start
    fa = jax.jit(asdex.jacobian_from_coloring(f, colored) if is_jac else asdex.hessian_from_coloring(f, colored))
    fa(x).data.block_until_ready()
    row["asdex_colors"] = int(colored.num_colors)
    row["over_asdex"] = ratio(ours, lambda: fa(x).data.block_until_ready(), timing)["ratio"]


_SCALE_SCRIPT = """
import json, sys
from diffinterface.bench.sparse import _scale_measure
print(json.dumps(_scale_measure(sys.argv[1], int(sys.argv[2]), sys.argv[3])))
"""


def _scale_row(name: str, size: int, timing: Timing) -> dict[str, Any]:
    """One 1e6-unknown problem: ours and asdex each in a fresh process (peak memory apart), then the
    interleaved ratio of the prepared calls here."""
    import json
    import subprocess
    import sys

    row: dict[str, Any] = {}
    for who in ("ours",) + (("asdex",) if _installed("asdex") else ()):
        out = subprocess.run(
            [sys.executable, "-c", _SCALE_SCRIPT, name, str(size), who], capture_output=True, text=True, check=True
        )
        row.update(json.loads(out.stdout.strip().splitlines()[-1]))
    if _installed("asdex"):  # the ratio of the prepared calls, interleaved in one process
        ours, theirs, _ = _scale_calls(name, size)
        from ._timing import ratio

        row["over_asdex"] = ratio(ours, theirs, timing)["ratio"]
    return row


def _scale_problem(name: str, size: int) -> tuple[Any, Any, np.ndarray]:
    from ..testing import _sparse_problems as problems

    if name == "brusselator":
        x = problems.brusselator_x0(size) + 0.1 * np.random.default_rng(0).standard_normal(2 * size * size)
        return problems.brusselator, problems.brusselator_jacobian, x
    x = np.random.default_rng(0).uniform(-1, 1, size**3)
    return problems.diffusion3d, problems.diffusion3d_jacobian, x


def _scale_measure(name: str, size: int, who: str) -> dict[str, Any]:
    """Run in a fresh process: detection, coloring, preparation and one call (ours) or asdex's
    coloring and compiled call, with the peak resident memory of the process."""
    import jax.numpy as jnp

    from ._timing import once

    f, reference, x_np = _scale_problem(name, size)
    x = jnp.asarray(x_np, dtype=jnp.float32)
    row: dict[str, Any] = {"problem": f"{name} (1e6 scale)", "n": x_np.size, "backend": "AutoJAX()"}
    if who == "ours":
        from .. import AutoJAX
        from ..first_order import jacobian, prepare_jacobian
        from ..sparse._coloring import GreedyColoring, csr_pattern
        from ..sparse._config import AutoSparse
        from ..sparse._detectors import Problem, TracerSparsityDetector

        start = time.perf_counter()
        pattern = csr_pattern(TracerSparsityDetector().jacobian_sparsity(Problem(f, None, x_np.size, f), x_np))
        row["detect_s"] = time.perf_counter() - start
        start = time.perf_counter()
        GreedyColoring().columns(pattern)
        row["color_s"] = time.perf_counter() - start
        backend = AutoSparse(AutoJAX())
        start = time.perf_counter()
        prep = prepare_jacobian(backend, f, x)
        row["prepare_s"] = time.perf_counter() - start
        row.update(coloring="GreedyColoring()", mode=prep.sparse_mode, colors=prep.ncolors)
        row["sparse_s"] = once(lambda: _block(jacobian(backend, f, x, prep=prep)), 5)
        row["max_rel_error"] = _rel_error_sparse(jacobian(backend, f, x, prep=prep), reference(x_np))
        row["peak_mb"] = _peak_mb()
    else:
        import asdex  # pyright: ignore[reportMissingImports]  # optional (the bench extra): absent where lint runs
        import jax

        start = time.perf_counter()
        colored = asdex.jacobian_coloring(f, x)
        row["asdex_detect_color_s"] = time.perf_counter() - start
        row["asdex_colors"] = int(colored.num_colors)
        fa = jax.jit(asdex.jacobian_from_coloring(f, colored))
        fa(x).data.block_until_ready()
        row["asdex_peak_mb"] = _peak_mb()
    return row


def _peak_mb() -> float:
    """This process's peak resident memory in MB: ``VmHWM`` (``ru_maxrss`` keeps the parent's peak
    across fork and exec on Linux)."""
    with open("/proc/self/status") as fh:
        kb = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    return kb / 1024


def _scale_calls(name: str, size: int) -> tuple[Any, Any, Any]:
    import asdex  # pyright: ignore[reportMissingImports]  # optional (the bench extra): absent where lint runs
    import jax
    import jax.numpy as jnp

    from .. import AutoJAX
    from ..first_order import jacobian, prepare_jacobian
    from ..sparse._config import AutoSparse

    f, _, x_np = _scale_problem(name, size)
    x = jnp.asarray(x_np, dtype=jnp.float32)
    backend = AutoSparse(AutoJAX())
    prep = prepare_jacobian(backend, f, x)
    fa = jax.jit(asdex.jacobian_from_coloring(f, asdex.jacobian_coloring(f, x)))
    fa(x).data.block_until_ready()
    return (lambda: _block(jacobian(backend, f, x, prep=prep))), (lambda: fa(x).data.block_until_ready()), prep


def _rel_error_sparse(got: Any, reference: Any) -> float:
    """The largest relative error of a BCOO result against a scipy.sparse reference, nothing dense."""
    import scipy.sparse as sp

    data, idx = np.asarray(got.data, dtype=np.float64), np.asarray(got.indices)
    ours = sp.csr_array((data, (idx[:, 0], idx[:, 1])), shape=reference.shape)
    return float(abs(ours - reference).max() / max(np.abs(reference.data).max(), 1e-300))


def write_beyond(out: str, full: bool = True) -> str:
    """Measure the issue-42 rows and write ``out/sparse_beyond.md`` and ``.csv``; returns the .md path."""
    import os

    from ._timing import FULL, machine, write_table

    info = machine(("numpy", "scipy", "jax", "jaxlib", "torch", "autograd", "asdex"))
    rows = beyond(full, FULL, lambda *a: None)
    path = os.path.join(out, "sparse_beyond")
    write_table(
        path, "Sparse Jacobians and Hessians beyond the anchors (issue 42)", info, rows, BEYOND_COLUMNS, BEYOND_NOTES
    )
    return path + ".md"
