"""The types that signatures across the package share.

:class:`Array` is an array of any family (numpy, torch, JAX, an engine's own) as the code that
serves every family reads one; ``DType`` a dtype of the built-in families (what numpy takes as a
dtype, JAX's included, or torch's and MLX's own dtype objects); ``Contexts`` (in ``_core.contexts``)
the extra arguments after ``x``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from typing import TypeAlias

    import mlx.core
    import torch
    from numpy.typing import DTypeLike

DType: TypeAlias = "DTypeLike | torch.dtype | mlx.core.Dtype"


class Array(Protocol):
    """An array of any registered family, as code that serves every family reads one: its shape,
    dtype and number of dimensions. Anything else goes through its namespace (``array_namespace``)
    or its family (``_core.arrays``). numpy's, torch's and JAX's arrays (and numpy scalars) are
    ``Array``s; a Python float is not (the frontend turns it into a 0-d numpy array first)."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> Any: ...  # the family's own dtype object (numpy.dtype, torch.dtype)

    @property
    def ndim(self) -> int: ...


class NumericArray(Array, Protocol):
    """An :class:`Array` with its family's arithmetic, as code written once for every family computes
    with one (``x ** 2 + 3 * x``, ``A @ x``, ``x[i]``): the reference functions of the test catalogue,
    finite differences' steps. The operands are whatever the family takes (its arrays, Python numbers),
    hence ``Any``; numpy's, torch's and JAX's arrays are ``NumericArray``s (numpy's scalars are not:
    they have no ``@`` and no indexing)."""

    def __add__(self, other: Any, /) -> Any: ...
    def __radd__(self, other: Any, /) -> Any: ...
    def __sub__(self, other: Any, /) -> Any: ...
    def __rsub__(self, other: Any, /) -> Any: ...
    def __mul__(self, other: Any, /) -> Any: ...
    def __rmul__(self, other: Any, /) -> Any: ...
    def __truediv__(self, other: Any, /) -> Any: ...
    def __rtruediv__(self, other: Any, /) -> Any: ...
    def __pow__(self, other: Any, /) -> Any: ...
    def __matmul__(self, other: Any, /) -> Any: ...
    def __neg__(self) -> Any: ...
    def __getitem__(self, key: Any, /) -> Any: ...
