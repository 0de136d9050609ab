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
"""

from __future__ import annotations

import importlib.util
import math
import warnings
from typing import Any

import numpy as np

from .._adapter import Adapter, Runners
from .._arrays import JAX, NUMPY, TORCH, families, family, to_family
from .._backends import adapter_for
from .._errors import BackendNotAvailableError
from ._coloring import conflict_size, csr_pattern, decompression
from ._detectors import Problem

CONFLICT_LIMIT = 20_000_000  # entries of a conflict graph (p.T @ p) worth building for a coloring


class SparsePlan:
    """What preparation decided (public through ``prep.sparsity``, ``prep.colors``, ``prep.sparse_mode``)."""

    __slots__ = ("sparsity", "colors", "mode", "index", "seeds", "runners", "value_runners", "build")

    def __init__(self, sparsity: Any, colors: np.ndarray, mode: str) -> None:
        self.sparsity, self.colors, self.mode = sparsity, colors, mode
        self.index: Any = None
        self.seeds: tuple[Any, ...] = ()
        self.runners: Any = None
        self.value_runners: Any = None
        self.build: Any = None

    @property
    def n_colors(self) -> int:
        return int(self.colors.max()) + 1 if self.colors.size else 0


class SparseAdapter(Adapter):
    """See the module docstring."""

    def __init__(self, backend: Any) -> None:
        super().__init__(backend)
        if importlib.util.find_spec("scipy") is None:
            raise BackendNotAvailableError(
                f"{backend!r} needs scipy for its sparse matrices, which is not installed; install it with: "
                f'pip install "diffinterface[sparse]"'
            )
        self.dense = adapter_for(backend.dense, repr(backend))
        self.traced = getattr(self.dense, "traced", None)
        self.engine_name = getattr(self.dense, "engine_name", None)

    def output_info(self, target: Any, x: Any, contexts: Any, oneshot: Any) -> Any:
        return self.dense.output_info(target, x, contexts, oneshot)

    def evaluate(self, target: Any, x: Any, contexts: tuple[Any, ...]) -> Any:
        return self.dense.evaluate(target, x, contexts)

    def prepare(
        self, operator: str, target: Any, x: Any, tangents: tuple[Any, ...], contexts: tuple[Any, ...], info: Any
    ) -> Any:
        if operator == "jacobian":
            return self._jacobian(target, x, contexts, info)
        if operator == "hessian":
            return self._hessian(target, x, contexts, info)
        return self.dense.prepare(operator, target, x, tangents, contexts, info)

    # -- preparation ------------------------------------------------------------------------------

    def _problem(self, target: Any, info: Any) -> Problem:
        return Problem(target.f, target.y, math.prod(info.y_shape), target.instance())

    def _jacobian(self, target: Any, x: Any, contexts: tuple[Any, ...], info: Any) -> Runners:
        backend = self.backend
        m, n = math.prod(info.y_shape), math.prod(info.x_shape)
        pattern = csr_pattern(
            backend.sparsity_detector.jacobian_sparsity(self._problem(target, info), x, contexts, backend.dense),
            (m, n),
        )
        plan = self._jacobian_plan(pattern)
        forward = plan.mode == "columns"
        length = m if forward else n
        plan.index = decompression(pattern, plan.colors, plan.mode)
        plan.seeds = _seeds(plan.colors, plan.n_colors, info.x_shape if forward else info.y_shape, x)
        operator = "pushforward" if forward else "pullback"
        runners = self.dense.prepare(operator, target, x, plan.seeds, contexts, info) if plan.seeds else None
        build = _builder(pattern, x)

        def plain(x: Any, tangents: Any, cs: Any) -> Any:
            parts = runners.plain(x, plan.seeds, cs) if runners is not None else ()
            return build(_gather(parts, plan.index, length, x))

        def value(x: Any, tangents: Any, cs: Any) -> Any:
            if runners is None:
                return self.dense.evaluate(target, x, cs), build(_gather((), plan.index, length, x))
            y, parts = runners.value(x, plan.seeds, cs)
            return y, build(_gather(parts, plan.index, length, x))

        return Runners(plain, value, plan)

    def _jacobian_plan(self, pattern: Any) -> SparsePlan:
        coloring = self.backend.coloring
        mode = getattr(self.backend.dense, "mode", None)
        if mode == "forward" or (mode is None and pattern.shape[0] == 0):
            return SparsePlan(pattern, coloring.columns(pattern), "columns")
        if mode == "reverse":
            return SparsePlan(pattern, coloring.rows(pattern), "rows")
        col_cost, row_cost = conflict_size(pattern), conflict_size(csr_pattern(pattern.T))
        plans = []
        if col_cost <= CONFLICT_LIMIT or col_cost <= row_cost:
            plans.append(SparsePlan(pattern, coloring.columns(pattern), "columns"))
        if row_cost <= CONFLICT_LIMIT or row_cost < col_cost:
            plans.append(SparsePlan(pattern, coloring.rows(pattern), "rows"))
        return min(plans, key=lambda p: p.n_colors)  # columns first: kept on a tie

    def _hessian(self, target: Any, x: Any, contexts: tuple[Any, ...], info: Any) -> Runners:
        backend = self.backend
        n = math.prod(info.x_shape)
        detected = backend.sparsity_detector.hessian_sparsity(self._problem(target, info), x, contexts, backend.dense)
        pattern = csr_pattern(detected, (n, n))
        pattern = csr_pattern(pattern + pattern.T)  # symmetric, whatever the detector gave
        plan = SparsePlan(pattern, backend.coloring.symmetric(pattern), "star")
        plan.index = decompression(pattern, plan.colors, "star")
        plan.seeds = _seeds(plan.colors, plan.n_colors, info.x_shape, x)
        hvps = self.dense.prepare("hvp", target, x, plan.seeds, contexts, info) if plan.seeds else None
        grads = self.dense.prepare("gradient", target, x, (), contexts, info)
        build = _builder(pattern, x)

        def hessian(x: Any, cs: Any) -> Any:
            parts = hvps.plain(x, plan.seeds, cs) if hvps is not None else ()
            return build(_gather(parts, plan.index, n, x))

        def plain(x: Any, tangents: Any, cs: Any) -> Any:
            return hessian(x, cs)

        def value(x: Any, tangents: Any, cs: Any) -> Any:
            y, grad = grads.value(x, (), cs)
            return y, grad, hessian(x, cs)

        return Runners(plain, value, plan)


# -- seeds and decompression -------------------------------------------------------------------------


def _seeds(colors: np.ndarray, n_colors: int, shape: tuple[int, ...], x: Any) -> tuple[Any, ...]:
    """One seed per color: the sum of the basis vectors of that color, shaped ``shape``, in ``x``'s
    family, dtype and device."""
    dtype = np.dtype(str(x.dtype).rpartition(".")[2])
    fam = family(x)
    if fam == NUMPY or fam is None:
        return tuple((colors == c).astype(dtype).reshape(shape) for c in range(n_colors))
    with families()[fam].computing(dtype):  # JAX keeps float64 seeds float64 without global x64
        return tuple(to_family((colors == c).astype(dtype).reshape(shape), fam, like=x) for c in range(n_colors))


def _gather(parts: tuple[Any, ...], index: np.ndarray, length: int, x: Any) -> Any:
    """The nonzeros (CSR order) from the compressed results ``parts`` (each ``length`` elements)."""
    fam = family(x)
    parts = tuple(to_family(p, fam, like=x) for p in parts)
    if fam == NUMPY or fam is None:
        if not parts:
            return np.zeros(0, dtype=np.asarray(x).dtype)
        stacked = np.stack([np.reshape(p, (-1,)) for p in parts])
        return stacked.reshape(-1)[index]
    if fam == TORCH:
        import torch

        if not parts:
            return torch.zeros(0, dtype=x.dtype, device=x.device)
        flat = torch.stack([p.reshape(-1) for p in parts]).reshape(-1)
        return flat[torch.as_tensor(index, device=flat.device)]
    if fam == JAX:
        import jax.numpy as jnp

        with families()[JAX].computing(np.dtype(str(x.dtype))):
            if not parts:
                return jnp.zeros(0, dtype=x.dtype)
            joined = jnp.stack([jnp.reshape(p, (-1,)) for p in parts]).reshape(-1)
            return joined[jnp.asarray(index)]
    raise TypeError(f"sparse results for arrays of the {fam!r} family are not supported (numpy, jax, torch are)")


def _builder(pattern: Any, x: Any) -> Any:
    """``data -> sparse matrix`` with ``pattern``'s structure, in ``x``'s family."""
    fam = family(x)
    shape = pattern.shape
    indptr, indices = pattern.indptr.astype(np.int64), pattern.indices.astype(np.int64)
    if fam == NUMPY or fam is None:
        import scipy.sparse as sp

        def build(data: Any) -> Any:
            return sp.csr_array((data, indices.copy(), indptr.copy()), shape=shape)

        return build
    if fam == TORCH:
        import torch

        crow = torch.as_tensor(indptr, device=x.device)
        col = torch.as_tensor(indices, device=x.device)

        def build_torch(data: Any) -> Any:
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

        def build_jax(data: Any) -> Any:
            with families()[JAX].computing(np.dtype(str(data.dtype))):
                return jsparse.BCOO((data, coo), shape=shape, indices_sorted=True, unique_indices=True)

        return build_jax
    raise TypeError(f"sparse results for arrays of the {fam!r} family are not supported (numpy, jax, torch are)")
