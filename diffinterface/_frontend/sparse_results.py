"""Sparse results at the frontend: what AutoSparse prepared (:class:`SparsePlan`, read by ``Prep``),
its results recognised without importing anything, densified, and ``out=`` filled in place."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np


class SparsePlan:
    """What AutoSparse's preparation decided (public through ``prep.sparsity``, ``prep.colors``,
    ``prep.sparse_mode``; ``diffinterface.sparse._adapter`` fills it)."""

    __slots__ = ("sparsity", "colors", "mode", "index", "seeds")

    def __init__(self, sparsity: Any, colors: np.ndarray, mode: str) -> None:
        self.sparsity, self.colors, self.mode = sparsity, colors, mode
        self.index: Any = None  # each nonzero's place in the stacked compressed results
        self.seeds: tuple[Any, ...] = ()  # one per color, in x's family

    @property
    def n_colors(self) -> int:
        return int(self.colors.max()) + 1 if self.colors.size else 0


def is_sparse(value: Any) -> bool:
    """Whether ``value`` is a sparse matrix this package returns (SciPy, JAX's BCOO, a sparse torch tensor)."""
    scipy_sparse = sys.modules.get("scipy.sparse")
    if scipy_sparse is not None and scipy_sparse.issparse(value):
        return True
    jsparse = sys.modules.get("jax.experimental.sparse")
    if jsparse is not None and isinstance(value, jsparse.JAXSparse):
        return True
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(value, tf.sparse.SparseTensor):
        return True
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor) and value.layout != torch.strided


def densify(result: Any) -> Any:
    """A sparse result as a dense array of its own family (a JAX one inside the context that keeps
    its dtype: BCOO's ``todense`` outside it makes float64 float32)."""
    if hasattr(result, "toarray"):  # scipy.sparse
        return result.toarray()
    if hasattr(result, "to_dense"):  # torch
        return result.to_dense()
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(result, tf.sparse.SparseTensor):
        return tf.sparse.to_dense(result)
    from .._core.arrays import JAX, families

    with families()[JAX].computing(np.dtype(str(result.dtype))):  # BCOO
        return result.todense()


def fill_out(out: Any, result: Any, call: str) -> Any:
    """Write the nonzeros of ``result`` into ``out``, a sparse matrix with the same pattern, in place
    (the repeated Newton-solve case: the matrix keeps its structure, its values change)."""
    scipy_sparse = sys.modules.get("scipy.sparse")
    if scipy_sparse is not None and scipy_sparse.issparse(result):
        if not (scipy_sparse.issparse(out) and out.format == "csr"):
            raise TypeError(
                f"{call}: out= must be a scipy.sparse CSR matrix with the pattern of prep.sparsity "
                f"(e.g. prep.sparsity.astype(float)), got {type(out).__name__}"
                + (f" in {out.format!r} format" if scipy_sparse.issparse(out) else "")
            )
        _same_pattern(call, out.shape, result.shape, (out.indptr, out.indices), (result.indptr, result.indices))
        out.data[...] = result.data
        return out
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(result, torch.Tensor):
        if not (isinstance(out, torch.Tensor) and out.layout == torch.sparse_csr):
            raise TypeError(
                f"{call}: out= must be a sparse CSR tensor with the pattern of prep.sparsity, got {type(out).__name__}"
                + (f" with layout {out.layout}" if isinstance(out, torch.Tensor) else "")
            )
        _same_pattern(
            call,
            tuple(out.shape),
            tuple(result.shape),
            (out.crow_indices().cpu().numpy(), out.col_indices().cpu().numpy()),
            (result.crow_indices().cpu().numpy(), result.col_indices().cpu().numpy()),
        )
        with torch.no_grad():
            out.values().copy_(result.values())
        return out
    raise TypeError(
        f"{call}: out= is given, and JAX's and TensorFlow's sparse matrices are immutable; drop out= and use the "
        f"returned matrix"
    )


def _same_pattern(call: str, out_shape: Any, shape: Any, out_idx: Any, idx: Any) -> None:
    if tuple(out_shape) != tuple(shape):
        raise ValueError(f"{call}: out= has shape {tuple(out_shape)}, expected {tuple(shape)}")
    if not all(np.array_equal(a, b) for a, b in zip(out_idx, idx)):
        raise ValueError(
            f"{call}: out= has another sparsity pattern than the result ({len(out_idx[1])} stored entries, "
            f"expected {len(idx[1])} in the CSR order of prep.sparsity); make it with prep.sparsity.astype(float)"
        )
