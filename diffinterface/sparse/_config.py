"""``AutoSparse``: a dense backend, a sparsity detector and a coloring (issue 16)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from .._core.configs import AbstractBackend, hash_once
from ._coloring import GreedyColoring
from ._detectors import TracerSparsityDetector


@hash_once
@dataclasses.dataclass(frozen=True, repr=False)
class AutoSparse(AbstractBackend):
    """Sparse Jacobians and Hessians through ``dense``, at the cost of one derivative per color.

    Detect the pattern (once, at preparation), color it, and evaluate one compressed derivative
    with as many pushforwards, pullbacks or Hessian-vector products as there are colors.

    - ``dense``: any backend config (``AutoFiniteDiff()``, ``AutoJAX()``, ``AutoTorch()``,
      ``AutoAutograd()``); its ``mode`` fixes the direction of a Jacobian (columns for "forward",
      rows for "reverse"); ``mode=None`` (an engine with both products) takes whichever of columns,
      rows and a bicoloring (pushforwards for some columns and pullbacks for some rows) needs the
      fewest products.
    - ``sparsity_detector``: :class:`TracerSparsityDetector` (default), :class:`KnownSparsity` or
      :class:`LocalSparsityDetector`.
    - ``coloring``: :class:`GreedyColoring` (its ``order`` and, for Hessians, ``symmetric``:
      star or acyclic coloring).

    ``prep.sparsity`` (the pattern), ``prep.ncolors`` (the products one call makes) and
    ``prep.sparse_mode`` tell what a prepared call costs.

    ``jacobian``, ``hessian`` and their ``value_`` and ``prepare_`` forms return a sparse matrix in
    the family of ``x`` (a ``scipy.sparse.csr_array`` for NumPy, a ``jax.experimental.sparse.BCOO``
    for JAX, a sparse CSR tensor for torch, a ``tf.sparse.SparseTensor`` for TensorFlow; a
    ``scipy.sparse.csr_array`` for MLX, which has no sparse arrays) of shape ``(f(x).size, x.size)`` (elements in row-major
    order); the other operators are the dense backend's.

    Example:

        >>> J = di.jacobian(di.AutoSparse(di.AutoFiniteDiff()), lambda x: x[1:] * x[:-1], np.array([1.0, 2.0, 3.0]))
        >>> print(type(J).__name__, J.shape, J.nnz)
        csr_array (2, 3) 4
        >>> print(J.toarray().round(6))
        [[2. 1. 0.]
         [0. 3. 2.]]
    """

    dense: AbstractBackend
    sparsity_detector: Any = TracerSparsityDetector()
    coloring: Any = GreedyColoring()
    name: ClassVar[str] = "sparse"
    adapter: ClassVar[str] = "diffinterface.sparse._adapter:SparseAdapter"
    install: ClassVar[str] = 'pip install "diffinterface[sparse]"'

    def __post_init__(self) -> None:
        if not isinstance(self.dense, AbstractBackend) or isinstance(self.dense, AutoSparse):
            raise TypeError(
                f"AutoSparse(dense={self.dense!r}): dense must be a backend config such as AutoJAX() or "
                f"AutoFiniteDiff()"
            )
        for field, methods in (
            ("sparsity_detector", ("jacobian_sparsity", "hessian_sparsity")),
            ("coloring", ("columns", "rows", "hessian")),
        ):
            value = getattr(self, field)
            missing = [m for m in methods if not callable(getattr(value, m, None))]
            if missing:
                shown = f"<{type(value).__name__} of shape {value.shape}>" if hasattr(value, "shape") else repr(value)
                hint = "; a pattern goes in KnownSparsity(pattern)" if hasattr(value, "shape") else ""
                raise TypeError(
                    f"AutoSparse({field}={shown}): expected an object with {', '.join(methods)} "
                    f"(e.g. {'TracerSparsityDetector()' if field == 'sparsity_detector' else 'GreedyColoring()'}); "
                    f"it has no {', '.join(missing)}{hint}"
                )

    @property  # the dense backend's engine is the one to install
    def engine(self) -> str | None:  # type: ignore[override]
        return self.dense.engine

    @property
    def closure(self) -> str:  # type: ignore[override]
        return self.dense.closure

    @property
    def mode(self) -> str | None:
        return getattr(self.dense, "mode", None)
