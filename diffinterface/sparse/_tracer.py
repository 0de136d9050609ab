"""A sparsity tracer: an array that implements the array API and carries, for each of its elements,
the set of input elements it depends on (issue 16's engine-free detector).

``Tracer.deps`` is a boolean ``scipy.sparse.csr_array`` with one row per element (row-major order)
and one column per element of ``x``: the pattern of the Jacobian of this array in ``x``. Every
operation maps rows: elementwise operations take the union of their operands' rows (broadcast),
indexing, reshaping and joining select and reorder rows, reductions and products with constant
matrices multiply the rows by a constant boolean matrix. All of it is scipy.sparse arithmetic, so
a banded function of 1e5 inputs traces in well under a second.

For Hessians the trace also accumulates a global second-order pattern ``trace.hessian``: every
operation that is nonlinear in its operands adds the outer products of their first-order rows
(``D.T @ D`` for a unary nonlinearity, ``A.T @ B + B.T @ A`` for a product of two traced arrays).
By the chain rule each entry of the Hessian of a scalar output comes from one such product, so the
union is a superset of the true pattern (global: valid for every x; conservative where a
nonlinearity's value is zero at all points, as for ``x * 0``).

The patterns are *global*: both branches of ``where`` count, comparisons carry no dependence, and
Python control flow on a traced value (``if x[0] > 0``) raises, naming the other detectors. Code
that leaves the array API for NumPy (``np.asarray(x)``, a SciPy call, a write into a NumPy buffer)
raises too: such code is opaque to a tracer. Constants are followed: ``xp.asarray(A)`` of a
concrete ``A`` keeps ``A``'s value (its nonzeros count in a product, its values serve as indices),
and a constant computed from constants, whose value is not kept, counts as nonzero everywhere in a
product (a denser pattern than need be, never one that misses an entry).

Size: over 400 lines in one module, because one array type and its array-API operations: each operation's
rule for index sets is a method of the tracer.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .._core.arrays import NUMPY, family, to_family

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence
    from types import EllipsisType
    from typing import TypeAlias

    from numpy.typing import ArrayLike, DTypeLike
    from scipy.sparse import csr_array, sparray, spmatrix

    from .._core.types import Array

    # boolean (csr once computed), one row per element of an array, one column per element of x
    Rows: TypeAlias = csr_array
    # what an operation takes: a tracer, or a constant: an array of any family (torch's and JAX's
    # convert through ``__array__``), a Python number, a list of them (or a SciPy sparse matrix, a ``matmul`` operand)
    Operand: TypeAlias = "Tracer | ArrayLike"
    Axis: TypeAlias = "int | tuple[int, ...] | None"
    ShapeLike: TypeAlias = "int | Sequence[int]"
    Key: TypeAlias = "int | slice | EllipsisType | None | Tracer | ArrayLike | tuple[Key, ...]"


def _sp() -> Any:
    import scipy.sparse as sp

    return sp


class TracerError(TypeError):
    """An operation the sparsity tracer cannot follow (opaque code, value-dependent control flow)."""


class Trace:
    """What one detection shares: the number of inputs and the accumulated Hessian pattern."""

    def __init__(self, n: int, hessian: bool) -> None:
        self.n = n
        self.track_hessian = hessian
        self.hessian = _sp().csr_array((n, n), dtype=bool)
        self.namespace = Namespace(self)  # one per trace: array_namespace() of two tracers is one namespace

    def nonlinear(self, a: Rows | None, b: Rows | None = None) -> None:
        """Record the second-order pattern of a nonlinear operation on rows ``a`` (and ``b``):
        ``a.T @ a`` (one operand), ``a.T @ b + b.T @ a`` (a product)."""
        if not self.track_hessian or a is None:
            return
        if b is None:
            outer = _bool_product(a.T, a)
        else:
            cross = _bool_product(a.T, b)
            outer = cross + cross.T
        if outer.nnz:
            self.hessian = _as_bool(self.hessian + outer)


def _as_bool(m: sparray | spmatrix) -> Rows:
    return _sp().csr_array(m, dtype=bool)


def _bool_product(a: Rows, b: Rows) -> Rows:
    sp = _sp()
    ai = sp.csr_array(a, dtype=np.int32)
    bi = sp.csr_array(b, dtype=np.int32)
    return _as_bool(ai @ bi)


class Tracer:
    """An array of ``shape`` whose elements carry their input dependencies (see the module docstring)."""

    __slots__ = ("deps", "shape", "trace", "dtype", "value")
    __array_priority__ = 1000  # NumPy arrays defer to the tracer's reflected operators

    def __init__(
        self,
        deps: Rows | None,
        shape: tuple[int, ...],
        trace: Trace,
        dtype: DTypeLike = np.float64,
        value: np.ndarray | None = None,
    ) -> None:
        self.deps = deps  # csr (size x n) or None (a constant: no dependence)
        self.shape = tuple(int(s) for s in shape)
        self.trace = trace
        self.dtype = np.dtype(dtype)
        # a constant whose value is known (``xp.asarray(A)`` of a concrete A, and selections of it):
        # it converts to NumPy like A itself (``xp.asarray(A) @ z``, ``x[xp.asarray(idx)]``)
        self.value = value

    # -- the array API's attributes -----------------------------------------------------------------

    def __array_namespace__(self, api_version: str | None = None) -> Namespace:
        return self.trace.namespace

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def device(self) -> str:
        return "cpu"

    @property
    def T(self) -> Tracer:  # noqa: N802 - the array API's name
        return self.trace.namespace.permute_dims(self, tuple(reversed(range(self.ndim))))

    @property
    def mT(self) -> Tracer:  # noqa: N802 - the array API's name
        axes = tuple(range(self.ndim - 2)) + (self.ndim - 1, self.ndim - 2)
        return self.trace.namespace.permute_dims(self, axes)

    def rows(self) -> Rows:
        """The dependency rows, a zero matrix for a constant."""
        if self.deps is None:
            return _sp().csr_array((self.size, self.trace.n), dtype=bool)
        return self.deps

    def __repr__(self) -> str:
        nnz = 0 if self.deps is None else self.deps.nnz
        return f"<sparsity Tracer shape={self.shape} nonzeros={nnz}>"

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    # -- what a tracer cannot do --------------------------------------------------------------------

    def _opaque(self, what: str) -> TracerError:
        return TracerError(
            f"the sparsity tracer cannot follow {what}: f uses a traced value where a concrete number or "
            f"a NumPy array is needed (value-dependent control flow, or code outside the array API). "
            f"Use sparsity_detector=LocalSparsityDetector() (the pattern of dense derivatives at a few "
            f"points) or KnownSparsity(pattern) in AutoSparse"
        )

    def __bool__(self) -> bool:
        raise self._opaque("bool() of a traced value (an if or while on it)")

    def __float__(self) -> float:
        raise self._opaque("float() of a traced value")

    def __int__(self) -> int:
        raise self._opaque("int() of a traced value")

    def __index__(self) -> int:
        raise self._opaque("a traced value used as an index")

    def __array__(self, dtype: DTypeLike | None = None, copy: bool | None = None) -> np.ndarray:
        if self.deps is None and self.value is not None:
            return np.asarray(self.value, dtype=dtype)
        raise self._opaque("its conversion to a NumPy array (np.asarray, a SciPy call or a write into a NumPy buffer)")

    # NumPy functions and ufuncs on a tracer run the namespace's (np.sin(x), A @ x with A a NumPy array)
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        ufunc_name: str = ufunc.__name__
        name = _UFUNC_NAMES.get(ufunc_name, ufunc_name)
        fn = getattr(self.trace.namespace, name, None)
        if method != "__call__" or fn is None or kwargs.get("out") is not None:
            raise self._opaque(f"numpy.{ufunc.__name__}.{method}")
        return fn(*inputs)

    def __array_function__(
        self, func: Callable[..., Any], types: Collection[type], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if func.__name__ in ("ndim", "shape", "size") and len(args) == 1 and not kwargs:  # np.shape(x), ...
            return getattr(args[0], func.__name__)
        name = _FUNCTION_NAMES.get(func.__name__, func.__name__)
        fn = getattr(self.trace.namespace, name, None)
        if fn is None:
            raise self._opaque(f"numpy.{func.__name__}")
        return fn(*args, **kwargs)

    # -- operators ----------------------------------------------------------------------------------

    def __getitem__(self, key: Key) -> Tracer:
        index = _positions(self.shape)[_key(key)]
        return _select(self, index)

    def __setitem__(self, key: Key, value: Operand) -> None:
        index = _positions(self.shape)[_key(key)]
        value = _lift(value, self.trace)
        rows = np.broadcast_to(_positions(value.shape), index.shape).ravel()
        target = index.ravel()
        keep = np.ones(self.size, dtype=bool)
        keep[target] = False
        # the new rows: self's where not written, value's where written (last write wins, as NumPy)
        source = np.arange(self.size)
        from_value = np.full(self.size, -1)
        from_value[target] = rows
        stacked = _sp().vstack([self.rows(), value.rows()], format="csr")
        order = np.where(keep, source, self.size + from_value)
        self.deps = _or_none(stacked[order])
        self.value = None  # written into: its value is no longer known

    def __neg__(self) -> Tracer:
        return Tracer(self.deps, self.shape, self.trace, self.dtype)

    __pos__ = __neg__

    def __abs__(self) -> Tracer:
        return self.trace.namespace.abs(self)


def _binary_method(name: str, reflected: bool = False) -> Callable[[Tracer, Operand], Tracer]:
    def method(self: Tracer, other: Operand) -> Tracer:
        fn = getattr(self.trace.namespace, name)
        other = _numpy_constant(other)  # a captured torch or JAX constant
        return fn(other, self) if reflected else fn(self, other)

    return method


for _op, _name in [
    ("add", "add"),
    ("sub", "subtract"),
    ("mul", "multiply"),
    ("truediv", "divide"),
    ("pow", "pow"),
    ("matmul", "matmul"),
    ("floordiv", "floor_divide"),
    ("mod", "remainder"),
]:
    setattr(Tracer, f"__{_op}__", _binary_method(_name))
    setattr(Tracer, f"__r{_op}__", _binary_method(_name, reflected=True))
for _op, _name in [("lt", "less"), ("le", "less_equal"), ("gt", "greater"), ("ge", "greater_equal")]:
    setattr(Tracer, f"__{_op}__", _binary_method(_name))
Tracer.__eq__ = _binary_method("equal")  # type: ignore[method-assign,assignment]
Tracer.__ne__ = _binary_method("not_equal")  # type: ignore[method-assign,assignment]
Tracer.__hash__ = None  # type: ignore[assignment]


_UFUNC_NAMES = {
    "true_divide": "divide",
    "power": "pow",
    "absolute": "abs",
    "arccos": "acos",
    "arcsin": "asin",
    "arctan": "atan",
    "arccosh": "acosh",
    "arcsinh": "asinh",
    "arctanh": "atanh",
    "arctan2": "atan2",
    "conjugate": "conj",
}
_FUNCTION_NAMES = {"concatenate": "concat", "transpose": "permute_dims", "amax": "max", "amin": "min"}


# -- helpers: rows of positions ----------------------------------------------------------------------


def _positions(shape: tuple[int, ...]) -> np.ndarray:
    return np.arange(math.prod(shape)).reshape(shape)


def _key(key: Key) -> Any:  # an index NumPy takes
    if isinstance(key, Tracer) and key.deps is None and key.value is not None:
        return key.value  # indices given as xp.asarray(idx): a known constant
    if isinstance(key, Tracer):
        raise key._opaque("a traced array used as an index (a mask or indices computed from x)")
    if isinstance(key, tuple):
        return tuple(_key(k) for k in key)
    return key


def _or_none(deps: Rows) -> Rows | None:
    return deps if deps.nnz else None


def _select(t: Tracer, index: np.ndarray) -> Tracer:
    """The tracer of shape ``index.shape`` whose element k is ``t``'s element ``index.flat[k]``."""
    index = np.asarray(index)
    if t.deps is None:
        value = None if t.value is None else np.asarray(t.value).ravel()[index]
        return Tracer(None, index.shape, t.trace, t.dtype, value)
    return Tracer(_or_none(t.deps[index.ravel()]), index.shape, t.trace, t.dtype)


def _numpy_constant(value: Operand) -> Operand:
    """A constant of another array family (a captured torch or JAX matrix) as NumPy; others as they are."""
    if isinstance(value, (np.ndarray, np.generic, int, float, bool, complex, list, tuple)):
        return value
    fam = family(value)
    return value if fam is None or fam == NUMPY else to_family(value, NUMPY)


def _lift(value: Operand, trace: Trace) -> Tracer:
    """A tracer for ``value``: itself, or a constant (no dependence) of its shape."""
    if isinstance(value, Tracer):
        return value
    value = _numpy_constant(value)
    shape = np.shape(value)
    dtype = np.result_type(value) if not isinstance(value, (int, float, bool)) else np.float64
    return Tracer(None, shape, trace, dtype)


def _broadcast(*ts: Tracer) -> tuple[tuple[int, ...], list[Rows | None]]:
    """The broadcast shape and each operand's rows broadcast to it (None for constants)."""
    shape = np.broadcast_shapes(*(t.shape for t in ts))
    out: list[Rows | None] = []
    for t in ts:
        if t.deps is None:
            out.append(None)
        elif t.shape == shape:
            out.append(t.deps)
        else:
            idx = np.broadcast_to(_positions(t.shape), shape).ravel()
            out.append(t.deps[idx])
    return shape, out


def _union(rows: list[Rows | None]) -> Rows | None:
    live = [r for r in rows if r is not None]
    if not live:
        return None
    total = live[0]
    for r in live[1:]:
        total = total + r
    return _or_none(_as_bool(total))


def _dtype(*values: Operand) -> DTypeLike:
    dts = [
        v.dtype if isinstance(v, Tracer) else np.result_type(_numpy_constant(v))
        for v in values
        if not isinstance(v, (int, float))
    ]
    return np.result_type(*dts) if dts else np.float64


# -- the namespace -------------------------------------------------------------------------------------

# unary functions by their second derivative: zero (piecewise linear or constant), or not
_LINEAR_UNARY = ("negative", "positive", "real", "conj")
_PIECEWISE_UNARY = ("abs",)  # first-order dependence, no curvature (almost everywhere)
_CONSTANT_UNARY = ("sign", "floor", "ceil", "round", "trunc", "isnan", "isinf", "isfinite", "signbit", "logical_not")
_NONLINEAR_UNARY = (
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "cos",
    "cosh",
    "exp",
    "expm1",
    "log",
    "log1p",
    "log2",
    "log10",
    "sin",
    "sinh",
    "sqrt",
    "square",
    "tan",
    "tanh",
    "reciprocal",
)
_NONLINEAR_BINARY = ("atan2", "hypot", "logaddexp", "pow", "divide", "floor_divide", "remainder")
_PIECEWISE_BINARY = ("maximum", "minimum", "copysign")
_COMPARISONS = (
    "less",
    "less_equal",
    "greater",
    "greater_equal",
    "equal",
    "not_equal",
    "logical_and",
    "logical_or",
    "logical_xor",
)


class Namespace:
    """The array API namespace of :class:`Tracer` (the functions this detector follows)."""

    __name__ = "diffinterface.sparse.tracer"

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.float64, self.float32, self.bool = np.float64, np.float32, np.bool_
        self.pi, self.e, self.inf, self.nan = math.pi, math.e, math.inf, math.nan
        self.newaxis = None

    # creation: constants
    def asarray(
        self, obj: Operand, dtype: DTypeLike | None = None, device: str | None = None, copy: bool | None = None
    ) -> Tracer:
        if isinstance(obj, Tracer):
            return obj if dtype is None else Tracer(obj.deps, obj.shape, obj.trace, dtype)
        if isinstance(obj, (list, tuple)) and any(isinstance(o, Tracer) for o in obj):
            return self.stack([self.asarray(o) for o in obj])
        value = np.asarray(_numpy_constant(obj), dtype=dtype)
        return Tracer(None, value.shape, self.trace, value.dtype, value)

    def _const(self, shape: ShapeLike, dtype: DTypeLike | None = None) -> Tracer:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        return Tracer(None, shape, self.trace, dtype or np.float64)

    def zeros(self, shape: ShapeLike, dtype: DTypeLike | None = None, device: str | None = None) -> Tracer:
        return self._const(shape, dtype)

    ones = empty = zeros

    def full(
        self, shape: ShapeLike, fill_value: complex, dtype: DTypeLike | None = None, device: str | None = None
    ) -> Tracer:
        return self._const(shape, dtype)

    def zeros_like(self, x: Array, dtype: DTypeLike | None = None, device: str | None = None) -> Tracer:
        return self._const(x.shape, dtype or x.dtype)

    ones_like = empty_like = zeros_like

    def full_like(
        self, x: Array, fill_value: complex, dtype: DTypeLike | None = None, device: str | None = None
    ) -> Tracer:
        return self._const(x.shape, dtype or x.dtype)

    def arange(self, *args: float, **kwargs: Any) -> Tracer:
        return self._const(np.arange(*args).shape, kwargs.get("dtype"))

    def linspace(self, start: float, stop: float, num: int, **kwargs: Any) -> Tracer:
        return self._const((num,), kwargs.get("dtype"))

    def eye(self, n_rows: int, n_cols: int | None = None, **kwargs: Any) -> Tracer:
        return self._const((n_rows, n_cols if n_cols is not None else n_rows), kwargs.get("dtype"))

    def astype(self, x: Operand, dtype: DTypeLike, copy: bool = True, device: str | None = None) -> Tracer:
        x = _lift(x, self.trace)
        return Tracer(x.deps, x.shape, self.trace, dtype)

    # elementwise
    def _unary(self, x: Operand, kind: str) -> Tracer:
        x = _lift(x, self.trace)
        if kind == "constant":
            return Tracer(None, x.shape, self.trace, x.dtype)
        if kind == "nonlinear":
            self.trace.nonlinear(x.deps)
        return Tracer(x.deps, x.shape, self.trace, x.dtype)

    def _binary(self, a: Operand, b: Operand, kind: str) -> Tracer:
        ta, tb = _lift(a, self.trace), _lift(b, self.trace)
        shape, (ra, rb) = _broadcast(ta, tb)
        dtype = _dtype(a, b)
        if kind == "constant":
            return Tracer(None, shape, self.trace, np.bool_)
        deps = _union([ra, rb])
        if kind == "product" and ra is not None and rb is not None:
            self.trace.nonlinear(ra, rb)
        elif kind == "nonlinear" and deps is not None:
            self.trace.nonlinear(deps)
        return Tracer(deps, shape, self.trace, dtype)

    def add(self, a: Operand, b: Operand) -> Tracer:
        return self._binary(a, b, "linear")

    subtract = add

    def multiply(self, a: Operand, b: Operand) -> Tracer:
        return self._binary(a, b, "product")

    def divide(self, a: Operand, b: Operand) -> Tracer:
        if not isinstance(b, Tracer) or b.deps is None:  # by a constant: linear in a
            return self._binary(a, b, "linear")
        return self._binary(a, b, "nonlinear")

    def pow(self, a: Operand, b: Operand) -> Tracer:
        if not isinstance(b, Tracer):  # a constant exponent: linear for 1, constant for 0
            exponent = np.asarray(b)
            if np.all(exponent == 1):
                return self._binary(a, b, "linear")
            if np.all(exponent == 0):
                ta = _lift(a, self.trace)
                return Tracer(None, np.broadcast_shapes(ta.shape, exponent.shape), self.trace, _dtype(a, b))
        return self._binary(a, b, "nonlinear")

    def where(self, condition: Operand, a: Operand, b: Operand) -> Tracer:
        """Both branches count (a global pattern); the condition carries no dependence."""
        cond, ta, tb = _lift(condition, self.trace), _lift(a, self.trace), _lift(b, self.trace)
        shape, (_, ra, rb) = _broadcast(cond, ta, tb)
        return Tracer(_union([ra, rb]), shape, self.trace, _dtype(a, b))

    def clip(self, x: Operand, min: Operand | None = None, max: Operand | None = None) -> Tracer:  # noqa: A002 - the array API's names
        return self._unary(x, "piecewise")

    # reductions
    def _reduce(self, x: Operand, axis: Axis, keepdims: bool, nonlinear: bool) -> Tracer:
        x = _lift(x, self.trace)
        axes = tuple(range(x.ndim)) if axis is None else (axis,) if isinstance(axis, int) else tuple(axis)
        axes = tuple(a % x.ndim for a in axes) if x.ndim else ()
        kept = [d for d in range(x.ndim) if d not in axes]
        out_shape = tuple(x.shape[d] for d in kept)
        # each input element's output position
        grid = np.indices(x.shape).reshape(x.ndim, -1) if x.ndim else np.zeros((0, 1), dtype=np.int64)
        out_pos = np.ravel_multi_index(tuple(grid[d] for d in kept), out_shape) if kept else np.zeros(x.size, np.int64)
        final_shape = tuple(1 if d in axes else x.shape[d] for d in range(x.ndim)) if keepdims else out_shape
        if x.deps is None:
            return Tracer(None, final_shape, self.trace, x.dtype)
        sp = _sp()
        agg = sp.csr_array(
            (np.ones(x.size, np.int32), (out_pos, np.arange(x.size))), shape=(math.prod(out_shape), x.size)
        )
        deps = _bool_product(agg, x.deps)
        if nonlinear:
            self.trace.nonlinear(deps)
        return Tracer(_or_none(deps), final_shape, self.trace, x.dtype)

    def sum(self, x: Operand, axis: Axis = None, dtype: DTypeLike | None = None, keepdims: bool = False) -> Tracer:
        return self._reduce(x, axis, keepdims, nonlinear=False)

    def mean(self, x: Operand, axis: Axis = None, keepdims: bool = False) -> Tracer:
        return self._reduce(x, axis, keepdims, nonlinear=False)

    def prod(self, x: Operand, axis: Axis = None, dtype: DTypeLike | None = None, keepdims: bool = False) -> Tracer:
        return self._reduce(x, axis, keepdims, nonlinear=True)

    def max(self, x: Operand, axis: Axis = None, keepdims: bool = False) -> Tracer:
        return self._reduce(x, axis, keepdims, nonlinear=False)

    min = max

    def std(self, x: Operand, axis: Axis = None, correction: float = 0.0, keepdims: bool = False) -> Tracer:
        return self._reduce(x, axis, keepdims, nonlinear=True)

    var = std

    def cumulative_sum(
        self, x: Operand, axis: int | None = None, dtype: DTypeLike | None = None, include_initial: bool = False
    ) -> Tracer:
        x = _lift(x, self.trace)
        if include_initial:
            raise TracerError("the sparsity tracer does not follow cumulative_sum(include_initial=True)")
        axis = 0 if axis is None and x.ndim == 1 else axis
        if axis is None:
            raise TracerError("cumulative_sum of an array of more than one dimension needs an axis")
        pos = _positions(x.shape)
        moved = np.moveaxis(pos, axis, -1)
        length = x.shape[axis]
        rows, cols = [], []
        for k in range(length):  # element k of the axis gathers elements 0..k
            rows.append(np.repeat(moved[..., k : k + 1], k + 1, axis=-1).ravel())
            cols.append(moved[..., : k + 1].ravel())
        if x.deps is None:
            return Tracer(None, x.shape, self.trace, x.dtype)
        agg = _sp().csr_array(
            (np.ones(sum(r.size for r in rows), np.int32), (np.concatenate(rows), np.concatenate(cols))),
            shape=(x.size, x.size),
        )
        return Tracer(_or_none(_bool_product(agg, x.deps)), x.shape, self.trace, x.dtype)

    cumsum = cumulative_sum

    # linear algebra
    def matmul(self, a: Operand, b: Operand) -> Tracer:
        a, b = _numpy_constant(a), _numpy_constant(b)
        ta, tb = _lift(a, self.trace), _lift(b, self.trace)
        if ta.deps is not None and tb.deps is not None:
            if ta.ndim == 1 and tb.ndim == 1:  # a dot product of two traced vectors: sum of products
                return self.sum(self.multiply(ta, tb))
            raise TracerError(
                "the sparsity tracer follows matmul with at most one traced operand (or two traced vectors); "
                "use LocalSparsityDetector() or KnownSparsity(pattern)"
            )
        va, vb = ta.ndim == 1, tb.ndim == 1
        sa, sb = ((1,) + ta.shape) if va else ta.shape, (tb.shape + (1,)) if vb else tb.shape
        nb = len(sb)  # not len(sb) in the test below: a type checker would narrow sb to one dimension
        if sa[-1] != sb[-2 if nb > 1 else 0]:
            raise ValueError(f"matmul: shapes {ta.shape} and {tb.shape} do not align")
        out_shape = np.broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1])
        final = out_shape[:-2] + (() if va else (sa[-2],)) + (() if vb else (sb[-1],))
        if ta.deps is None and tb.deps is None:
            return Tracer(None, final, self.trace, _dtype(a, b))
        traced, const, left = (tb, a, True) if tb.deps is not None else (ta, b, False)
        if traced.ndim > 2 or np.ndim(const) > 2:
            raise TracerError("the sparsity tracer follows matmul of arrays of at most two dimensions")
        if isinstance(const, Tracer) and const.value is None:
            # a constant whose values are not known (computed from other constants): every entry may be
            # nonzero, a pattern that holds at every value (denser than need be, never missing one)
            pattern = _sp().csr_array(np.ones(const.shape or (1,), dtype=bool))
        elif _sp().issparse(const):
            pattern = _as_bool(cast("sparray | spmatrix", const))
        else:
            pattern = _sp().csr_array(np.asarray(const) != 0)
        k, m2 = sa[-1], sb[-1]
        d = traced.rows()
        if left:  # const (p x k) @ traced (k x m2): out[i, j] depends on traced[l, j] for const[i, l] != 0
            p_rows = sa[-2]
            const2 = pattern.reshape((p_rows, k)) if pattern.ndim == 2 else pattern.reshape((1, k))
            agg = _sp().kron(const2, _sp().eye_array(m2, dtype=bool), format="csr")  # (p*m2) x (k*m2)
        else:  # traced (p x k) @ const (k x m2): out[i, j] depends on traced[i, l] for const[l, j] != 0
            p_rows = sa[-2]
            const2 = pattern.reshape((k, m2)) if pattern.ndim == 2 else pattern.reshape((k, 1))
            agg = _sp().kron(_sp().eye_array(p_rows, dtype=bool), const2.T, format="csr")  # (p*m2) x (p*k)
        return Tracer(_or_none(_bool_product(agg, d)), final, self.trace, _dtype(a, b))

    def vecdot(self, a: Operand, b: Operand, axis: int = -1) -> Tracer:
        return self.sum(self.multiply(a, b), axis=axis)

    def tensordot(self, a: Operand, b: Operand, axes: int | tuple[Sequence[int], Sequence[int]] = 2) -> Tracer:
        if isinstance(axes, int) and axes == 1 and np.ndim(a) <= 2 and np.ndim(b) <= 2:
            return self.matmul(a, b)
        raise TracerError("the sparsity tracer follows tensordot as a matrix product only (axes=1)")

    # shapes and joins
    def reshape(self, x: Operand, shape: ShapeLike, copy: bool | None = None) -> Tracer:
        x = _lift(x, self.trace)
        return _select(x, _positions(x.shape).reshape(shape))

    def permute_dims(self, x: Operand, axes: Sequence[int]) -> Tracer:
        x = _lift(x, self.trace)
        return _select(x, np.transpose(_positions(x.shape), axes))

    def matrix_transpose(self, x: Operand) -> Tracer:
        return _lift(x, self.trace).mT

    def expand_dims(self, x: Operand, axis: int = 0) -> Tracer:
        x = _lift(x, self.trace)
        return _select(x, np.expand_dims(_positions(x.shape), axis))

    def squeeze(self, x: Operand, axis: int | tuple[int, ...]) -> Tracer:
        x = _lift(x, self.trace)
        return _select(x, np.squeeze(_positions(x.shape), axis))

    def flip(self, x: Operand, axis: Axis = None) -> Tracer:
        x = _lift(x, self.trace)
        return _select(x, np.flip(_positions(x.shape), axis))

    def roll(self, x: Operand, shift: int | tuple[int, ...], axis: Axis = None) -> Tracer:
        x = _lift(x, self.trace)
        return _select(x, np.roll(_positions(x.shape), shift, axis))

    def moveaxis(self, x: Operand, source: int | Sequence[int], destination: int | Sequence[int]) -> Tracer:
        x = _lift(x, self.trace)
        return _select(x, np.moveaxis(_positions(x.shape), source, destination))

    def broadcast_to(self, x: Operand, shape: ShapeLike) -> Tracer:
        x = _lift(x, self.trace)
        return _select(x, np.broadcast_to(_positions(x.shape), shape))

    def take(self, x: Operand, indices: Key, axis: int | None = None) -> Tracer:
        x = _lift(x, self.trace)
        return _select(x, np.take(_positions(x.shape), np.asarray(_key(indices)), axis=axis))

    def concat(self, arrays: Sequence[Operand], axis: int | None = 0) -> Tracer:
        ts = [_lift(a, self.trace) for a in arrays]
        offsets = np.cumsum([0] + [t.size for t in ts])
        joined = np.concatenate([_positions(t.shape) + o for t, o in zip(ts, offsets)], axis=axis)
        return self._gather(ts, joined)

    def stack(self, arrays: Sequence[Operand], axis: int = 0) -> Tracer:
        ts = [_lift(a, self.trace) for a in arrays]
        offsets = np.cumsum([0] + [t.size for t in ts])
        joined = np.stack([_positions(t.shape) + o for t, o in zip(ts, offsets)], axis=axis)
        return self._gather(ts, joined)

    def _gather(self, ts: list[Tracer], joined: np.ndarray) -> Tracer:
        dtype = np.result_type(*(t.dtype for t in ts))
        if all(t.deps is None for t in ts):
            return Tracer(None, joined.shape, self.trace, dtype)
        stacked = _sp().vstack([t.rows() for t in ts], format="csr")
        return Tracer(_or_none(stacked[joined.ravel()]), joined.shape, self.trace, dtype)

    def __getattr__(self, name: str) -> Any:
        if name in _NONLINEAR_UNARY:
            return lambda x: self._unary(x, "nonlinear")
        if name in _LINEAR_UNARY:
            return lambda x: self._unary(x, "linear")
        if name in _PIECEWISE_UNARY:
            return lambda x: self._unary(x, "piecewise")
        if name in _CONSTANT_UNARY:
            return lambda x: self._unary(x, "constant")
        if name in _NONLINEAR_BINARY:
            return lambda a, b: self._binary(a, b, "nonlinear")
        if name in _PIECEWISE_BINARY:
            return lambda a, b: self._binary(a, b, "linear")
        if name in _COMPARISONS:
            return lambda a, b: self._binary(a, b, "constant")
        raise AttributeError(
            f"the sparsity tracer's array namespace has no {name!r}: use sparsity_detector="
            f"LocalSparsityDetector() or KnownSparsity(pattern) in AutoSparse for this f"
        )
