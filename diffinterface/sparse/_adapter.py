"""The adapter of :class:`AutoSparse`: detection and coloring at preparation; at each call one batched
pushforward, pullback or Hessian-vector product of the dense backend over the color seeds, and the
decompression into a sparse matrix in the family of ``x``.

Prepared once (``prep.sparsity``, ``prep.colors``, ``prep.sparse_mode``):

- the pattern (the detector), as a canonical boolean CSR matrix;
- the coloring: columns (forward: pushforwards), rows (reverse: pullbacks) or star (Hessians: hvps).
  With the dense backend's ``mode=None`` both Jacobian colorings are tried and the one with fewer
  colors is used (columns on a tie); a direction whose conflict graph would exceed
  ``CONFLICT_LIMIT`` entries is skipped where the other one is affordable;
- the seeds, one array per color in ``x``'s family, and the dense backend's runners for them;
- the index of each nonzero in the stacked compressed results (:func:`._coloring.decompression`,
  which raises for an invalid coloring).

Each call: the runners over the seeds (one vectorised call where the engine batches tangents), the
results stacked and gathered at those indices, and the sparse matrix built around them.

Size: over 400 lines in one module, because AutoSparse's preparation (detection, the choice of coloring) and its compressed evaluations (columns,
rows, bicolored, star and acyclic Hessians) are one adapter.
"""

from __future__ import annotations

import importlib.util
import math
import threading
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from .._adapters.contract import Adapter, Runners
from .._closures.plan import StatePlan
from .._core.arrays import JAX, NUMPY, TENSORFLOW, TORCH, dtype_name, families, family, to_family
from .._core.configs import adapter_for
from .._core.contexts import Constant
from .._core.errors import BackendNotAvailableError
from .._core.operators import GRADIENT, HESSIAN, HVP, JACOBIAN, PULLBACK, PUSHFORWARD, Operator
from .._core.snapshots import snapshot, unchanged
from .._frontend.sparse_results import SparsePlan
from ._coloring import (
    Substitution,
    bidirectional_decompression,
    conflict_size,
    csr_pattern,
    decompression,
    substitution,
)
from ._detectors import KnownSparsity, Problem

if TYPE_CHECKING:
    from collections.abc import Callable

    import jax
    import torch
    from scipy.sparse import csr_array

    from .._adapters.contract import Info
    from .._adapters.target import Target
    from .._core.contexts import Contexts
    from .._core.types import Array
    from ._config import AutoSparse

CONFLICT_LIMIT = 20_000_000  # entries of a conflict graph (p.T @ p) worth building for a coloring
# a bicoloring (a star coloring of the bipartite graph, in Python) is tried where the pattern has at
# most this many nonzeros, or where the one-sided colorings need more than BICOLOR_ABOVE products
BICOLOR_LIMIT = 1_000_000
BICOLOR_ABOVE = 64
# the families whose sparse results are their own sparse type (JAX's BCOO, torch's sparse CSR tensor,
# tf.sparse.SparseTensor); every other family's (NumPy's, MLX's: MLX has no sparse arrays) are a
# scipy.sparse.csr_array
SPARSE_TYPES = (JAX, TORCH, TENSORFLOW)


class Plan(SparsePlan):
    """A :class:`SparsePlan` that also knows the row colors of a bicoloring (mode ``"bidirectional"``:
    ``colors`` is then ``(column_colors, row_colors)``, -1 for a column or row in no seed) and the
    substitution of an acyclic coloring (mode ``"acyclic"``)."""

    __slots__ = ("substitution",)

    def __init__(self, sparsity: csr_array, colors: Any, mode: str) -> None:  # colors: see the class docstring
        super().__init__(sparsity, colors, mode)
        self.substitution: Substitution | None = None

    @property
    def n_colors(self) -> int:
        """The products one call makes: forward plus reverse for a bicoloring."""
        if self.mode == "bidirectional":
            return sum(int(c.max()) + 1 if c.size else 0 for c in self.colors)
        return super().n_colors


class SparseAdapter(Adapter):
    """See the module docstring."""

    takes_structures = False  # its results are one sparse matrix

    def __init__(self, backend: AutoSparse) -> None:
        super().__init__(backend)
        if importlib.util.find_spec("scipy") is None:
            raise BackendNotAvailableError(
                f"{backend!r} needs scipy for its sparse matrices, which is not installed; install it with: "
                f'pip install "diffinterface[sparse]"'
            )
        self.dense = adapter_for(backend.dense, repr(backend))
        self.traced = getattr(self.dense, "traced", None)
        self.rebinding_operand = getattr(self.dense, "rebinding_operand", self.traced)
        self.engine_name = getattr(self.dense, "engine_name", None)
        self.complex_dtypes = self.dense.complex_dtypes

    def output_info(self, target: Target, x: Array, contexts: Contexts, oneshot: bool) -> Info:
        return self.dense.output_info(target, x, contexts, oneshot)

    def evaluate(self, target: Target, x: Array, contexts: Contexts) -> Any:
        return self.dense.evaluate(target, x, contexts)

    def aux(self, target: Target, x: Any, contexts: tuple[Any, ...]) -> Any:
        return self.dense.aux(target, x, contexts)

    def prepare(
        self,
        operator: Operator,
        target: Target,
        x: Array,
        tangents: tuple[Array, ...],
        contexts: Contexts,
        info: Info,
    ) -> Any:
        if operator is JACOBIAN or operator is HESSIAN:
            build = self._jacobian if operator is JACOBIAN else self._hessian
            runners = build(target, x, contexts, info)
            if isinstance(self.backend.sparsity_detector, KnownSparsity):
                return runners  # the user's pattern: nothing of f's state in it
            plan = target.plan if target.plan is not None else StatePlan(target.f)  # closure="const" too
            if plan.empty and not any(type(c) is Constant for c in contexts):
                return runners
            return _Redetected(build, target, info, plan, contexts, runners).runners
        return self.dense.prepare(operator, target, x, tangents, contexts, info)

    # -- preparation ------------------------------------------------------------------------------

    def _problem(self, target: Target, info: Info) -> Problem:
        return Problem(target.f, target.y, math.prod(info.y_shape), target.instance(), target)

    def _jacobian(self, target: Target, x: Array, contexts: Contexts, info: Info) -> Runners:
        backend = self.backend
        m, n = math.prod(info.y_shape), math.prod(info.x_shape)
        pattern = csr_pattern(
            backend.sparsity_detector.jacobian_sparsity(self._problem(target, info), x, contexts, backend.dense),
            (m, n),
        )
        plan = self._jacobian_plan(pattern)
        if plan.mode == "bidirectional":
            return self._bidirectional(plan, target, x, contexts, info)
        forward = plan.mode == "columns"
        plan.index = decompression(pattern, plan.colors, plan.mode)
        plan.seeds = _seeds(plan.colors, plan.n_colors, info.x_shape if forward else info.y_shape, x)
        return self._runners(plan, PUSHFORWARD if forward else PULLBACK, target, x, contexts, info)

    def _hessian(self, target: Target, x: Array, contexts: Contexts, info: Info) -> Runners:
        backend = self.backend
        n = math.prod(info.x_shape)
        detected = backend.sparsity_detector.hessian_sparsity(self._problem(target, info), x, contexts, backend.dense)
        pattern = csr_pattern(detected, (n, n))
        pattern = csr_pattern(pattern + pattern.T)  # symmetric, whatever the detector gave
        kind, colors = backend.coloring.hessian(pattern)
        if kind == "acyclic" and getattr(backend.coloring, "symmetric", None) == "auto" and _single(x):
            # substitution sums along two-colored trees: in float32 its rounding grows with a tree's
            # size (2e-5 relative on a band of n = 1e4), so "auto" keeps direct recovery there
            kind, colors = "star", backend.coloring.star(pattern)
        plan = Plan(pattern, colors, kind)
        if kind == "acyclic":  # the products to gather, then the substitution (_solver)
            plan.substitution = substitution(pattern, colors)
            plan.index = plan.substitution.gather
        else:
            plan.index = decompression(pattern, colors, kind)
        plan.seeds = _seeds(plan.colors, plan.n_colors, info.x_shape, x)
        return self._runners(plan, HVP, target, x, contexts, info)

    def _runners(
        self, plan: Plan, operator: Operator, target: Target, x: Array, contexts: Contexts, info: Info
    ) -> Runners:
        """The runners of one sparse derivative: the dense adapter's compressed program where it has
        one (``prepare_compressed``: JAX compiles products, gather and all into one program), else
        its batched ``operator`` over the seeds and the gather here."""
        fam = family(x)
        star = plan.mode in ("star", "acyclic")
        # data -> sparse matrix: the substitution first for an acyclic coloring
        build = _builder(plan.sparsity, x)
        if plan.mode == "acyclic":
            assert plan.substitution is not None  # made with an acyclic coloring's plan
            solve, make = _solver(plan.substitution, x), build

            def build(data: Any) -> Any:
                return make(solve(data))

        compressed = getattr(self.dense, "prepare_compressed", None)
        if compressed is not None and plan.seeds:
            stacked = np.stack([np.asarray(to_family(s, NUMPY)) for s in plan.seeds])
            # x in the engine's family: its sparse type, built in the compiled program (direct recovery)
            own = fam == getattr(self.backend.dense, "engine", None) and plan.mode != "acyclic"
            inner = compressed(
                "star" if star else plan.mode,
                target,
                x,
                stacked,
                plan.index.astype(np.int32),
                contexts,
                info,
                plan.sparsity if own else None,
            )
            if own:
                return Runners(inner.plain, inner.value, plan)

            def plain_whole(x: Array, tangents: tuple[Array, ...], cs: Contexts) -> Any:
                return build(to_family(inner.plain(x, (), cs), fam, like=x))

            def value_whole(x: Array, tangents: tuple[Array, ...], cs: Contexts) -> Any:
                *front, data = inner.value(x, (), cs)
                return (*front, build(to_family(data, fam, like=x)))

            return Runners(plain_whole, value_whole, plan)

        gather = _gatherer(plan.index, x)
        inner = self.dense.prepare(operator, target, x, plan.seeds, contexts, info) if plan.seeds else None
        grads = self.dense.prepare(GRADIENT, target, x, (), contexts, info) if star else None

        def plain(x: Array, tangents: tuple[Array, ...], cs: Contexts) -> Any:
            return build(gather(inner.plain(x, plan.seeds, cs) if inner is not None else ()))

        def value(x: Array, tangents: tuple[Array, ...], cs: Contexts) -> Any:
            if grads is not None:  # a Hessian: the value and gradient from the dense gradient
                y, grad = grads.value(x, (), cs)
                return y, grad, plain(x, tangents, cs)
            if inner is None:
                return self.dense.evaluate(target, x, cs), build(gather(()))
            y, parts = inner.value(x, plan.seeds, cs)
            return y, build(gather(parts))

        return Runners(plain, value, plan)

    def _jacobian_plan(self, pattern: Any) -> Plan:  # a csr_array (scipy's shape reads as optional)
        coloring = self.backend.coloring
        mode = getattr(self.backend.dense, "mode", None)
        if mode == "forward" or (mode is None and pattern.shape[0] == 0):
            return Plan(pattern, coloring.columns(pattern), "columns")
        if mode == "reverse":
            return Plan(pattern, coloring.rows(pattern), "rows")
        col_cost, row_cost = conflict_size(pattern), conflict_size(csr_pattern(pattern.T))
        plans = []
        if col_cost <= CONFLICT_LIMIT:
            plans.append(Plan(pattern, coloring.columns(pattern), "columns"))
        if row_cost <= CONFLICT_LIMIT:
            plans.append(Plan(pattern, coloring.rows(pattern), "rows"))
        fewest = min((p.n_colors for p in plans), default=None)
        # both directions at once (mode=None: the engine has both products), where it may pay; an
        # arrowhead's conflict graphs are n x n and full, its bicoloring 3 products
        bicolor = getattr(coloring, "bidirectional", None)
        if bicolor is not None and fewest is not None and fewest > 2:
            if pattern.nnz <= BICOLOR_LIMIT or fewest > BICOLOR_ABOVE:
                plans.append(Plan(pattern, bicolor(pattern), "bidirectional"))
        if plans:
            return min(plans, key=lambda p: p.n_colors)  # columns, then rows, first: kept on a tie
        # both conflict graphs past the limit: the smaller one, unless a bicoloring beats the fewest
        # colors it could take (the most nonzeros in one row for columns, in one column for rows)
        side = "columns" if col_cost <= row_cost else "rows"
        line = pattern if side == "columns" else csr_pattern(pattern.T)
        bound = int(np.diff(line.indptr).max(initial=0))
        if bicolor is not None and bound > BICOLOR_ABOVE:
            bicolored = Plan(pattern, bicolor(pattern), "bidirectional")
            if bicolored.n_colors < bound:
                return bicolored
        return Plan(pattern, getattr(coloring, side)(pattern), side)

    def _bidirectional(self, plan: Plan, target: Target, x: Array, contexts: Contexts, info: Info) -> Runners:
        """A bicoloring's runners: the dense backend's batched pushforward along the column seeds and
        pullback along the row seeds, the results gathered from both."""
        column_colors, row_colors = plan.colors
        plan.index = bidirectional_decompression(plan.sparsity, column_colors, row_colors)
        kf, kr = int(column_colors.max(initial=-1)) + 1, int(row_colors.max(initial=-1)) + 1
        forward_seeds = _seeds(column_colors, kf, info.x_shape, x)
        reverse_seeds = _seeds(row_colors, kr, info.y_shape, x)
        plan.seeds = forward_seeds + reverse_seeds
        build, gather = _builder(plan.sparsity, x), _gatherer(plan.index, x)
        forward = self.dense.prepare(PUSHFORWARD, target, x, forward_seeds, contexts, info) if kf else None
        reverse = self.dense.prepare(PULLBACK, target, x, reverse_seeds, contexts, info) if kr else None

        def products(x: Array, cs: Contexts, value: bool) -> tuple[Any, tuple[Any, ...]]:
            y, parts = None, ()
            if forward is not None:
                y, parts = forward.value(x, forward_seeds, cs) if value else (None, forward.plain(x, forward_seeds, cs))
            if reverse is not None:
                if value and y is None:
                    y, back = reverse.value(x, reverse_seeds, cs)
                else:
                    back = reverse.plain(x, reverse_seeds, cs)
                parts = (*parts, *back)
            if value and y is None:
                y = self.dense.evaluate(target, x, cs)
            return y, parts

        def plain(x: Array, tangents: tuple[Array, ...], cs: Contexts) -> Any:
            return build(gather(products(x, cs, False)[1]))

        def value(x: Array, tangents: tuple[Array, ...], cs: Contexts) -> Any:
            y, parts = products(x, cs, True)
            return y, build(gather(parts))

        return Runners(plain, value, plan)


# -- seeds and decompression -------------------------------------------------------------------------


class _Redetected:
    """A sparse derivative whose pattern is detected again where what it was detected over changed: the
    values ``f`` captures (its ``StatePlan``'s leaves: arrays, numbers, tuples, an object's attributes)
    and its ``Constant`` contexts. A detector reads them as ``f`` does (the tracer follows a captured
    index array, a constant matrix's zeros, a branch on a captured number), so a pattern detected over
    other values would drop nonzeros: a loop that rebinds ``idx`` in ``lambda x: x[idx] ** 2`` got the
    first ``idx``'s Jacobian from the prep kept at its third call, without an error. Each call compares
    them with a copy kept at detection (their values, not their identities: a write into the user's
    array changes the pattern as a rebinding does); where one differs, detection, coloring and runners
    are made again for this call's values and ``x`` (``prep.sparsity`` then tells the new pattern). A
    ``KnownSparsity`` pattern, an ``f`` without state or ``Constant``: none of this (the runners as made)."""

    def __init__(
        self, build: Any, target: Target, info: Info, plan: StatePlan, contexts: Contexts, runners: Runners
    ) -> None:
        self.build, self.target, self.info, self.plan = build, target, info, plan
        self.inner = runners
        self.seen = _kept(self._over(contexts))
        self.lock = threading.Lock()
        self.runners = Runners(self.plain, self.value, runners.data)

    def _over(self, contexts: Contexts) -> list[Any]:
        return [*self.plan.read(), *(c.value for c in contexts if type(c) is Constant)]

    def _current(self, x: Array, contexts: Contexts) -> Runners:
        now = self._over(contexts)
        if _same(self.seen, now):
            return self.inner
        with self.lock:
            inner = self.build(self.target, x, contexts, self.info)
            self.inner, self.seen, self.runners.data = inner, _kept(now), inner.data
        return inner

    def plain(self, x: Array, tangents: tuple[Array, ...], contexts: Contexts) -> Any:
        return self._current(x, contexts).plain(x, tangents, contexts)

    def value(self, x: Array, tangents: tuple[Array, ...], contexts: Contexts) -> Any:
        return self._current(x, contexts).value(x, tangents, contexts)


def _kept(values: list[Any]) -> tuple[Any, ...] | None:
    """A :func:`snapshot` of ``values``; None where one has no copy (compared as changed at every call)."""
    try:
        return snapshot(values)
    except Exception:  # noqa: BLE001 - an object that does not deep-copy
        return None


def _same(kept: tuple[Any, ...] | None, values: list[Any]) -> bool:
    """Whether ``values`` are what :func:`_kept` kept (arrays by shape, dtype and values, NaN equal to
    NaN); an ``==`` without one answer (an array inside an object) counts as changed."""
    try:
        return kept is not None and unchanged(kept, values)
    except Exception:  # noqa: BLE001
        return False


def _single(x: Array) -> bool:
    """Whether ``x`` holds floats of at most single precision (float32, complex64 and smaller)."""
    dtype = np.dtype(dtype_name(x))
    return dtype.itemsize < (16 if dtype.kind == "c" else 8)


def _seeds(colors: np.ndarray, n_colors: int, shape: tuple[int, ...], x: Array) -> tuple[Any, ...]:
    """One seed per color: the sum of the basis vectors of that color, shaped ``shape``, in ``x``'s
    family, dtype and device."""
    dtype = np.dtype(dtype_name(x))
    fam = family(x)
    if fam == NUMPY or fam is None:
        return tuple((colors == c).astype(dtype).reshape(shape) for c in range(n_colors))
    with families()[fam].computing(dtype):  # JAX keeps float64 seeds float64 without global x64
        return tuple(to_family((colors == c).astype(dtype).reshape(shape), fam, like=x) for c in range(n_colors))


def _gatherer(index: np.ndarray, x: Any) -> Callable[[tuple[Any, ...]], Any]:
    """``parts -> nonzeros``: the compressed results (in any family) concatenated flat
    and gathered at ``index`` in ``x``'s family (the index made once, on x's device)."""
    fam = family(x)
    if fam == TORCH:
        import torch

        where = torch.as_tensor(index, device=x.device)

        def gather_torch(parts: tuple[Any, ...]) -> Any:
            if not parts:
                return torch.zeros(0, dtype=x.dtype, device=x.device)
            parts = tuple(to_family(p, fam, like=x) for p in parts)
            return torch.cat([p.reshape(-1) for p in parts])[where]

        return gather_torch
    if fam == JAX:
        import jax
        import jax.numpy as jnp

        dtype = np.dtype(str(x.dtype))
        take = jax.jit(lambda parts: jnp.concatenate([jnp.reshape(p, (-1,)) for p in parts])[index])

        def gather_jax(parts: tuple[Any, ...]) -> Any:
            with families()[JAX].computing(dtype):
                if not parts:
                    return jnp.zeros(0, dtype=dtype)
                return take(tuple(to_family(p, fam, like=x) for p in parts))

        return gather_jax
    if fam == TENSORFLOW:
        import tensorflow as tf

        tf_dtype = x.dtype

        def gather_tf(parts: tuple[Any, ...]) -> Any:
            if not parts:
                return tf.zeros(0, dtype=tf_dtype)
            flat = np.concatenate([np.reshape(np.asarray(to_family(p, NUMPY)), (-1,)) for p in parts])
            return tf.convert_to_tensor(flat[index], dtype=tf_dtype)

        return gather_tf
    # NumPy, and every family without a sparse type of its own (MLX): gathered in NumPy, for scipy.sparse
    dtype = np.dtype(dtype_name(x))

    def gather_numpy(parts: tuple[Any, ...]) -> Any:
        if not parts:
            return np.zeros(0, dtype=dtype)
        return np.concatenate([np.reshape(to_family(p, NUMPY), (-1,)) for p in parts])[index]

    return gather_numpy


def _solver(sub: Substitution, x: Any) -> Callable[[Any], Any]:
    """``gathered -> nonzeros`` for an acyclic coloring (:class:`._coloring.Substitution`), in ``x``'s
    family: signs, one cumulative sum and the differences at each entry's range."""
    fam = family(x)
    if fam == TORCH:
        import torch

        dev = x.device
        signs, entry = (torch.as_tensor(a, dtype=x.dtype, device=dev) for a in (sub.signs, sub.entry_signs))
        lo, hi = (torch.as_tensor(a, device=dev) for a in (sub.lo, sub.hi))  # int64: torch's index type

        def solve_torch(data: torch.Tensor) -> torch.Tensor:
            s = torch.nn.functional.pad(torch.cumsum(signs * data, 0), (1, 0))
            return entry * (s[hi] - s[lo])

        return solve_torch
    if fam == JAX:
        import jax
        import jax.numpy as jnp

        dtype = np.dtype(str(x.dtype))
        lo32, hi32 = sub.lo.astype(np.int32), sub.hi.astype(np.int32)

        @jax.jit
        def run(data: jax.Array) -> jax.Array:
            t = jnp.asarray(sub.signs, dtype) * data
            s = jnp.concatenate([jnp.zeros(1, dtype), jnp.cumsum(t)])
            return jnp.asarray(sub.entry_signs, dtype) * (s[hi32] - s[lo32])

        def solve_jax(data: jax.Array) -> jax.Array:
            with families()[JAX].computing(dtype):
                return run(data)

        return solve_jax

    def solve_numpy(data: np.ndarray) -> np.ndarray:
        return sub.solve(sub.signs * np.asarray(data))

    return solve_numpy


def _builder(pattern: Any, x: Any) -> Any:  # pattern: a csr_array; returns data -> sparse matrix
    """``data -> sparse matrix`` with ``pattern``'s structure, in ``x``'s family."""
    fam = family(x)
    shape = pattern.shape
    indptr, indices = pattern.indptr.astype(np.int64), pattern.indices.astype(np.int64)
    if fam not in SPARSE_TYPES:  # NumPy, and the families with no sparse type of their own (MLX)
        import scipy.sparse as sp

        def build(data: np.ndarray) -> csr_array:
            return sp.csr_array((data, indices.copy(), indptr.copy()), shape=shape)

        return build
    if fam == TORCH:
        import torch

        crow = torch.as_tensor(indptr, device=x.device)
        col = torch.as_tensor(indices, device=x.device)

        def build_torch(data: torch.Tensor) -> torch.Tensor:
            with warnings.catch_warnings():  # torch's one-time notice that sparse CSR tensors are in beta
                warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)
                return torch.sparse_csr_tensor(
                    crow, col, data, size=shape, dtype=data.dtype, device=data.device, check_invariants=False
                )

        return build_torch
    if fam == JAX:
        import jax.numpy as jnp
        from jax.experimental import sparse as jsparse

        rows = np.repeat(np.arange(shape[0]), np.diff(indptr))
        coo = jnp.asarray(np.stack([rows, indices], axis=1).astype(np.int32))

        def build_jax(data: jax.Array) -> Any:
            with families()[JAX].computing(np.dtype(str(data.dtype))):
                return jsparse.BCOO((data, coo), shape=shape, indices_sorted=True, unique_indices=True)

        return build_jax
    if fam == TENSORFLOW:
        import tensorflow as tf

        rows = np.repeat(np.arange(shape[0]), np.diff(indptr))
        coo = tf.constant(np.stack([rows, indices], axis=1).astype(np.int64))

        def build_tf(data: Any) -> Any:
            return tf.sparse.SparseTensor(coo, data, dense_shape=shape)

        return build_tf
    raise AssertionError(f"no builder for the {fam!r} family")  # SPARSE_TYPES lists the families above
