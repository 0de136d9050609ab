"""``AutoTensorFlow``: every operator on TensorFlow's tapes, one ``tf.function`` per prepared operator.

- reverse (gradient, pullback): ``tf.GradientTape``; a batch of cotangents shares one recorded pass
  (a persistent tape, one backward pass per cotangent). forward (pushforward, derivative):
  ``tf.autodiff.ForwardAccumulator``, one pass per tangent.
- jacobian: reverse, ``tape.jacobian`` (TensorFlow's own, vectorised by ``pfor`` inside a
  ``tf.function``); forward, one accumulator pass per basis vector. ``mode=None`` picks forward when
  ``x.size <= f(x).size``; ``mode="forward"``/``"reverse"`` forces every first-order operator (a
  pushforward in reverse mode or a pullback in forward mode goes through the Jacobian).
- hvp and hessian: reverse over reverse (nested tapes; the Hessian is the outer tape's ``jacobian``
  of the gradient); second derivative: nested forward accumulators.
- preparation (``function=True``, the default): the operator's body is traced once into a
  ``tf.function`` with a fixed input signature of flat tensors (x, each tangent, each array of the
  contexts and of the captured state: read at every call, never baked in, and never a retrace), XLA-compiled with
  ``jit_compile=True``. An ``f`` that cannot be traced into a graph (it reads a value into Python:
  ``.numpy()``, ``float(t)``) runs eagerly for that prep. Unprepared calls run eagerly.

Arrays: ``f`` receives ``x`` as a ``tf.Tensor`` of its dtype (float64 stays float64); numpy in, numpy
out, tensors in, tensors out. Inside a call ``array_namespace(t)`` of a tensor gives TensorFlow under
the array API's names (``tf.experimental.numpy`` with the renames), and ``@`` takes 1-d operands as the
array API does; both are set on TensorFlow's tensor class for the duration of a call only.

Captured arrays (numpy, tensors, ``tf.Variable``), ``Cache`` and ``Constant`` contexts and output
buffers reach ``f`` as writable stand-ins (:class:`WritableArray`) over tensors: ``buf[i] = v`` is a
functional update (``tf.tensor_scatter_nd_update``), ``var.assign(v)`` too, so derivatives flow through
writes and the user's objects are never touched.

A derivative lost on the way (``.numpy()``, ``float(t)``, ``np.asarray`` of a tensor that carries
one, ``tf.stop_gradient``) is the call's :class:`LostDerivativeError`, never a zero: TensorFlow tells
which tensors a tape or accumulator follows, and the adapter records where such a tensor's value
is read into Python.

Size: over 400 lines in one module, because an adapter is the registry's unit.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import tensorflow as tf
import tensorflow.experimental.numpy as tnp  # pyright: ignore[reportMissingImports] - a lazily loaded API module (tensorflow/_api/v2), absent from the stubs
from tensorflow.python.eager import record as _record
from tensorflow.python.framework import op_callbacks as _op_callbacks
from tensorflow.python.framework import ops as _ops
from tensorflow.python.ops.numpy_ops.np_array_ops import _getitem as _np_getitem

from diffinterface.extend import (
    DERIVATIVE,
    GRADIENT,
    HESSIAN,
    HVP,
    LOST_CAUSES,
    NUMPY,
    PULLBACK,
    PUSHFORWARD,
    SECOND_DERIVATIVE,
    Array,
    Contexts,
    Info,
    LostDerivativeError,
    Operator,
    Runner,
    Runners,
    StandInConversionError,
    Target,
    any_leaf,
    contract_all,
    duplicate,
    escaped_error,
    family,
    floating_value,
    host_error,
    is_array,
    shape_size,
    standin_error,
    structured_output,
    to_family,
    value_form,
)
from diffinterface.extend import (
    Adapter as _Base,
)
from diffinterface.extend import (
    WritableArray as _Writable,
)
from diffinterface.extend import (
    unwrap as _unwrap,
)

TF = "tensorflow"
_Tensor = tf.Tensor  # eager and symbolic tensors (tensorflow.python.framework.tensor.Tensor, typed by the stubs)
_Eager = _ops._EagerTensorBase  # noqa: SLF001 - the class whose value reads are recorded (see _Scope)
_EagerTensor = _ops.EagerTensor


# -- the array API over TensorFlow ------------------------------------------------------------------


def _as_tensor(value: Any, dtype: Any = None) -> tf.Tensor:
    value = _unwrap(value)
    if isinstance(value, _Tensor):
        return value if dtype is None or value.dtype == dtype else tf.cast(value, dtype)
    if isinstance(value, tf.Variable):
        value = value.read_value()
        return value if dtype is None or value.dtype == dtype else tf.cast(value, dtype)
    if family(value) not in (None, NUMPY, TF):
        value = np.asarray(to_family(value, NUMPY))
    return tf.convert_to_tensor(value, dtype=dtype)


def _matmul(a: Array | float, b: Array | float) -> Any:
    """``a @ b`` with the array API's 1-d rules (TensorFlow's ``matmul`` wants rank 2)."""
    ua, ub = _unwrap(a), _unwrap(b)
    if isinstance(ua, _Tensor) and isinstance(ub, _Tensor) and ua.shape.rank is not None and ua.shape.rank >= 2:
        if ub.shape.rank is not None and ub.shape.rank >= 2 and ua.dtype == ub.dtype:
            return tf.linalg.matmul(ua, ub)
    like: Any = ua if isinstance(ua, _Tensor) else ub  # one operand is a tensor: this is its method
    return tnp.matmul(_as_tensor(ua, like.dtype), _as_tensor(ub, like.dtype))


class _Namespace:
    """TensorFlow under the array API's names: what ``array_namespace(tensor)`` gives inside a call."""

    _RENAMED = {
        "concat": "concatenate",
        "pow": "power",
        "permute_dims": "transpose",
        "acos": "arccos",
        "asin": "arcsin",
        "atan": "arctan",
        "atan2": "arctan2",
        "acosh": "arccosh",
        "asinh": "arcsinh",
        "atanh": "arctanh",
        "bitwise_invert": "invert",
    }

    def __getattr__(self, name: str) -> Any:  # looked up once: later reads find the instance attribute
        function = getattr(tnp, self._RENAMED.get(name, name))

        def call(*args: Any, device: object = None, **kwargs: Any) -> Any:
            # the array API's device= (arange, zeros, ... in array-API code such as AutoFiniteDiff's):
            # tf.experimental.numpy has none; TensorFlow places a tensor by its device scope
            return function(*[_unwrap_all(a) for a in args], **{k: _unwrap_all(v) for k, v in kwargs.items()})

        value = call if callable(function) and not isinstance(function, type) else function
        setattr(self, name, value)
        return value

    @staticmethod
    def asarray(obj: Any, dtype: Any = None, device: object = None, copy: bool | None = None) -> Any:
        return _as_tensor(obj, None if dtype is None else tf.as_dtype(dtype))

    @staticmethod
    def astype(x: Array, dtype: Any, copy: bool = True, device: object = None) -> Any:
        value, dtype = _unwrap(x), tf.as_dtype(dtype)
        if dtype.is_complex and value.dtype.is_floating:  # tf.complex: its gradient takes the real part quietly
            real = tf.cast(value, dtype.real_dtype)
            return tf.complex(real, tf.zeros_like(real))
        return tf.cast(value, dtype)

    @staticmethod
    def reshape(x: Array, shape: tuple[Any, ...], copy: bool | None = None) -> Any:
        return tf.reshape(_unwrap(x), shape)

    @staticmethod
    def matrix_transpose(x: Array) -> Any:
        return tf.linalg.matrix_transpose(_unwrap(x))

    @staticmethod
    def matmul(a: Any, b: Any) -> Any:
        return _matmul(a, b)

    @staticmethod
    def zeros(shape: Any, dtype: Any = None, device: object = None) -> Any:
        return tf.zeros(shape, dtype=tf.float64 if dtype is None else tf.as_dtype(dtype))

    @staticmethod
    def ones(shape: Any, dtype: Any = None, device: object = None) -> Any:
        return tf.ones(shape, dtype=tf.float64 if dtype is None else tf.as_dtype(dtype))

    @staticmethod
    def eye(n: int, m: Any = None, k: int = 0, dtype: Any = None, device: object = None) -> Any:
        return tnp.eye(n, m, k, dtype=tf.float64 if dtype is None else tf.as_dtype(dtype))

    @staticmethod
    def stack(arrays: Any, axis: int = 0) -> Any:
        return tf.stack([_unwrap(a) for a in arrays], axis=axis)

    def __repr__(self) -> str:
        return "<the array API over TensorFlow (diffinterface)>"


def _unwrap_all(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v) for v in value)
    return _unwrap(value)


namespace: _Namespace = _Namespace()


# -- the call's scope: the array API on tensors, and value reads recorded ----------------------------

_ESCAPES = {
    "numpy": ".numpy()",
    "__array__": "a conversion to numpy (np.asarray, np.array([...]))",
    "__float__": "float(t)",
    "__int__": "int(t)",
    "__index__": "an index taken from x",
}


class _Recorder(threading.local):
    """Per thread: whether a call is recording, the forward accumulators it runs, what escaped."""

    def __init__(self) -> None:
        self.active = 0
        self.accumulators: list[Any] = []
        self.escapes: list[str] = []


_RECORDER = _Recorder()


def _carries(value: Any) -> bool:
    """Whether a tensor carries a derivative: a tape records it, or an accumulator has its tangent."""
    if not value.dtype.is_floating and not value.dtype.is_complex:
        return False
    if _record.should_record_backprop([value]):
        return True
    return any(acc.jvp(value) is not None for acc in _RECORDER.accumulators)


# numpy's ufuncs that are Python's operators: with ``__array_ufunc__`` set on tensors (below), numpy no
# longer defers ``A * t`` to the tensor's reflected operator, so the hook calls it (the same TensorFlow op)
_BINARY = {
    "add": ("__add__", "__radd__"),
    "subtract": ("__sub__", "__rsub__"),
    "multiply": ("__mul__", "__rmul__"),
    "divide": ("__truediv__", "__rtruediv__"),
    "true_divide": ("__truediv__", "__rtruediv__"),
    "floor_divide": ("__floordiv__", "__rfloordiv__"),
    "remainder": ("__mod__", "__rmod__"),
    "power": ("__pow__", "__rpow__"),
    "matmul": ("__matmul__", "__rmatmul__"),
    "less": ("__lt__", "__gt__"),
    "less_equal": ("__le__", "__ge__"),
    "greater": ("__gt__", "__lt__"),
    "greater_equal": ("__ge__", "__le__"),
}
_UNARY = {"negative": "__neg__", "positive": "__pos__", "absolute": "__abs__"}
_NDARRAY = np.empty(0)  # the receiver of numpy's own __array_function__ (numpy's implementation, no dispatch)


def _read_by_numpy(value: object) -> object:
    """``value`` with its tensors as numpy arrays, as numpy reads them (through the buffer protocol,
    which TensorFlow does not see: their derivative is dropped)."""
    if isinstance(value, _Tensor):
        return np.asarray(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_read_by_numpy(v) for v in value)
    return value


def _escape_if_read(result: object, arguments: object, what: str) -> object:
    """``result``, numpy's from ``arguments``, after recording an escape (``what``, checked after the
    call by :func:`_check_escapes`) where it is a floating value of numpy's made from a tensor that
    carries a derivative."""
    if (
        _RECORDER.active
        and floating_value(result)
        and not any_leaf(result, _is_tensor)
        and any_leaf(arguments, lambda v: isinstance(v, _Tensor) and _carries(v))
    ):
        _RECORDER.escapes.append(what)
    return result


def _array_ufunc(self: tf.Tensor, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: object) -> Any:
    """numpy's ufunc on a tensor, during a call: Python's operators as the tensor's own (``A * t``, as
    numpy's deferral ran them: the derivative kept); any other (``np.sin(t)``, ``np.hypot(t, 1)``,
    ``out=``) on the values, as numpy computed it, where a floating result from a tensor that carries
    a derivative is an escape, checked after the call: the derivative through it was lost without an
    error before."""
    name = ufunc.__name__
    if method == "__call__" and not kwargs:
        if len(inputs) == 2 and name in _BINARY:
            a, b = inputs
            result = getattr(a, _BINARY[name][0])(b) if isinstance(a, _Tensor) else getattr(b, _BINARY[name][1])(a)
            if result is not NotImplemented:
                return result
        if len(inputs) == 1 and name in _UNARY:
            return getattr(inputs[0], _UNARY[name])()
    values = tuple(_read_by_numpy(v) for v in inputs)
    result = getattr(ufunc, method)(*values, **{k: _read_by_numpy(v) for k, v in kwargs.items()})
    return _escape_if_read(result, inputs, f"numpy's {name} of a tensor")


def _is_tensor(value: object) -> bool:
    return isinstance(value, _Tensor)


def _array_function(
    self: tf.Tensor, func: Callable[..., Any], types: object, args: tuple[object, ...], kwargs: dict[str, object]
) -> object:
    """numpy's function on a tensor, during a call: numpy's own implementation (``np.sum(t)`` calls
    the tensor's ``sum``, a TensorFlow op; ``np.dot(t, t)`` reads the values), where a floating
    result with no tensor in it, from arguments that carry a derivative, is an escape, checked after
    the call (``np.shape(t)``, ``np.argmax(t)``: none)."""
    result = np.ndarray.__array_function__(_NDARRAY, func, (np.ndarray,), args, kwargs)
    return _escape_if_read(result, (args, kwargs), f"np.{func.__name__} of a tensor")


def _recording(name: str, original: Any) -> Any:
    def read(self, *args: Any, **kwargs: Any) -> Any:
        if _RECORDER.active and _carries(self):
            _RECORDER.escapes.append(_ESCAPES[name])
        return original(self, *args, **kwargs)

    read.__name__ = name
    return read


class _Scope:
    """Entered around every call: sets ``__array_namespace__`` and the array API's ``@`` on TensorFlow's
    tensor class and records value reads of tensors that carry a derivative; restored on the way out.
    Re-entrant and process-wide (one lock): nothing stays set on TensorFlow's classes after a call."""

    _lock = threading.RLock()
    _depth = 0
    _saved: dict[Any, Any] = {}

    def __enter__(self) -> None:
        self._lock.acquire()
        _RECORDER.active += 1
        type(self)._depth += 1
        if self._depth == 1:
            saved = {}
            for cls, name, value in self._patches():
                saved[(cls, name)] = cls.__dict__.get(name, _MISSING)
                setattr(cls, name, value)
            type(self)._saved = saved

    def __exit__(self, *exc: Any) -> None:
        try:
            _RECORDER.active -= 1
            type(self)._depth -= 1
            if self._depth == 0:
                for (cls, name), value in self._saved.items():
                    if value is _MISSING:
                        delattr(cls, name)
                    else:
                        setattr(cls, name, value)
        finally:
            self._lock.release()

    @staticmethod
    def _patches() -> list[tuple[Any, str, Any]]:
        out: list[tuple[Any, str, Any]] = [
            (_Tensor, "__array_namespace__", _tensor_namespace),
            (_Tensor, "__matmul__", _matmul),
            (_Tensor, "__rmatmul__", lambda a, b: _matmul(b, a)),
            (_Tensor, "__array_ufunc__", _array_ufunc),
            (_Tensor, "__array_function__", _array_function),
        ]
        out += [(_Tensor, name, value) for name, value in _METHODS.items()]
        out.append((_Tensor, "__getitem__", _getitem))
        out += [(_Eager, name, _recording(name, _ORIGINAL[name])) for name in _ESCAPES]
        return out


def computing(dtype: Any = None) -> _Scope:
    """The adapter's call scope, where diffinterface runs ``f`` on TensorFlow tensors outside AutoTensorFlow
    (finite differences, ``DifferentiateWith``'s primal): the array API on TensorFlow's tensors."""
    return _Scope()


def _reduction(name: str) -> Any:
    function = getattr(tnp, name)

    def method(self, axis: Any = None, keepdims: bool = False, **kwargs: Any) -> Any:
        # numpy's np.prod(t) / np.max(t) call the method with out=None (and dtype=None), which
        # TensorFlow's functions do not take: a tensor cannot be written, and None is the default
        if kwargs.get("out", None) is not None:
            raise TypeError(f"{name}(out=...): a tensor cannot be written in place; use the result")
        kwargs.pop("out", None)
        if kwargs.get("dtype", 0) is None:
            del kwargs["dtype"]
        return function(self, axis=axis, keepdims=keepdims, **kwargs)

    method.__name__ = name
    return method


def _size(self) -> Any:
    dims = self.shape.as_list() if self.shape.rank is not None else None
    return None if dims is None or None in dims else shape_size(tuple(dims))


# numpy's array methods that code written for numpy, torch and JAX arrays calls on them (``(b * b).sum()``,
# ``x.T``, ``x.reshape(...)``, ``x.astype(...)``, ``x.size``), set on TensorFlow's tensors during a call
# as ``tf.experimental.numpy.experimental_enable_numpy_behavior`` would set them for good
_METHODS: dict[str, Any] = {name: _reduction(name) for name in ("sum", "mean", "max", "min", "prod")}
_METHODS.update(
    reshape=lambda self, *shape, **kw: tf.reshape(self, shape[0] if len(shape) == 1 else shape),
    astype=lambda self, dtype, copy=True: tf.cast(self, tf.as_dtype(dtype)),
    ravel=lambda self: tf.reshape(self, (-1,)),
    flatten=lambda self: tf.reshape(self, (-1,)),
    transpose=lambda self, *axes: tnp.transpose(self, axes or None),
    dot=lambda self, other: _matmul(self, other),
    T=property(lambda self: tnp.transpose(self)),
    mT=property(lambda self: tf.linalg.matrix_transpose(self)),
    size=property(_size),
)

_SLICE = tf.Tensor.__getitem__  # TensorFlow's own: ints, slices, ..., None, scalar int tensors


def _advanced(part: Any) -> bool:
    return isinstance(part, (list, np.ndarray)) or (isinstance(part, (_Tensor, tf.Variable)) and bool(part.shape.rank))


def _getitem(self, index: Any) -> Any:
    """Indexing with numpy's (and the array API's) integer and boolean arrays as well (``x[idx]``), by
    TensorFlow's own numpy-style indexing (``tf.experimental.numpy``'s); the rest as TensorFlow has it."""
    parts = index if isinstance(index, tuple) else (index,)
    if any(_advanced(_unwrap(p)) for p in parts):
        return _np_getitem(self, tuple(_unwrap(p) for p in parts) if isinstance(index, tuple) else _unwrap(index))
    return _SLICE(self, index)


_MISSING = object()
_ORIGINAL = {name: _Eager.__dict__[name] for name in _ESCAPES}
_SCOPE = _Scope()


def _tensor_namespace(self, api_version: str | None = None) -> Any:
    return namespace


# -- the functional update and the stand-in ----------------------------------------------------------


def _static_index(index: Any) -> Any:
    """An index with tensors read as numpy (eager), for the positions of :func:`set_item`."""
    if isinstance(index, tuple):
        return tuple(_static_index(i) for i in index)
    if isinstance(index, (_Tensor, tf.Variable)):
        value = tf.get_static_value(index)
        if value is None:
            raise TypeError("f writes into a captured array at an index computed inside a graph; index with numbers")
        return value
    return _unwrap(index)


def set_item(value: Any, index: Any, item: Any) -> Any:
    """``value`` with ``value[index] = item``, as a new tensor (derivatives flow to both)."""
    shape = tuple(value.shape)
    positions = np.arange(shape_size(shape), dtype=np.int64).reshape(shape)[_static_index(index)]
    item = _as_tensor(item, value.dtype)
    item = tf.reshape(tf.broadcast_to(item, positions.shape), (-1,))
    flat = tf.tensor_scatter_nd_update(tf.reshape(value, (-1,)), positions.reshape(-1, 1), item)
    return tf.reshape(flat, shape)


class WritableArray(_Writable):
    """What ``f`` gets for a captured array, a ``Cache``, a ``Constant`` or an output buffer under
    ``AutoTensorFlow``: a tensor whose item assignment (and, for a captured ``tf.Variable``, ``assign``)
    is a functional update. TensorFlow's functions take it as a tensor."""

    __slots__ = ()
    _namespace = namespace

    @staticmethod
    def _wrap(value: Any) -> Any:
        return _as_tensor(value)

    _update = staticmethod(set_item)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> Any:
        if isinstance(self.value, _Tensor) and not isinstance(self.value, _Eager):
            raise StandInConversionError("a captured array was converted to numpy inside a traced function")
        return np.asarray(self.value, dtype=dtype)

    # tf.Variable's writes, for a captured variable
    def assign(
        self, value: Any, use_locking: bool | None = None, name: str | None = None, read_value: bool = True
    ) -> Any:
        self.value = _as_tensor(value, self.value.dtype) + tf.zeros_like(self.value)
        return self

    def assign_add(
        self, delta: Any, use_locking: bool | None = None, name: str | None = None, read_value: bool = True
    ) -> Any:
        self.value = self.value + _as_tensor(delta, self.value.dtype)
        return self

    def assign_sub(
        self, delta: Any, use_locking: bool | None = None, name: str | None = None, read_value: bool = True
    ) -> Any:
        self.value = self.value - _as_tensor(delta, self.value.dtype)
        return self

    def read_value(self) -> Any:
        return self.value

    def numpy(self) -> Any:
        return self.value.numpy()


def _standin_to_tensor(value: Any, dtype: Any = None, name: str | None = None, as_ref: bool = False) -> Any:
    return tf.convert_to_tensor(value.value, dtype=dtype, name=name)


tf.register_tensor_conversion_function(WritableArray, _standin_to_tensor)  # our own classes (and their views) only


# -- f as the adapter calls it ----------------------------------------------------------------------


def _output(y: Any, like: tf.Tensor, target: Target) -> Any:
    y = _unwrap(y)
    if isinstance(y, _Tensor):
        return y
    if isinstance(y, (tuple, list, dict)):
        raise structured_output(y, target.call)
    if isinstance(y, tf.Variable):
        return y.read_value()
    return _as_tensor(np.asarray(to_family(y, NUMPY)) if family(y) not in (None, NUMPY) else y, like.dtype)


class _Skeleton:
    """The contexts and captured state of one call with their arrays taken out: ``leaves`` (tensors, the
    ``tf.function``'s arguments) and the rest (compared by value with the prep's)."""

    _LEAF = object()

    def __init__(self, values: Any, dtype: Any) -> None:
        self.leaves: list[Any] = []
        self.dtype = dtype
        self.shape = self._cut(values)

    def _cut(self, value: Any) -> Any:
        if is_array(value) or isinstance(value, tf.Variable):
            self.leaves.append(_in_precision(value, self.dtype))
            return self._LEAF
        if isinstance(value, (list, tuple)):
            return (type(value), tuple(self._cut(v) for v in value))
        if isinstance(value, dict):
            return (dict, tuple((k, self._cut(v)) for k, v in value.items()))
        return value

    def same(self, other: _Skeleton) -> bool:
        return _equal(self.shape, other.shape) and all(
            a.dtype == b.dtype and a.shape == b.shape for a, b in zip(self.leaves, other.leaves)
        )

    def build(self, leaves: list[Any]) -> Any:
        it = iter(leaves)

        def fill(shape: Any) -> Any:
            if shape is self._LEAF:
                return next(it)
            if isinstance(shape, tuple) and len(shape) == 2 and isinstance(shape[0], type):
                kind, parts = shape
                if kind is dict:
                    return {k: fill(v) for k, v in parts}
                items = [fill(v) for v in parts]
                return kind(*items) if hasattr(kind, "_fields") else kind(items)
            return shape

        return fill(self.shape)


def _equal(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return type(a) is type(b) and bool(a == b)
    except (TypeError, ValueError):
        return False


def _in_precision(value: Any, dtype: Any) -> Any:
    """A captured array or context as a tensor: a real floating array of another library (numpy's
    float64 beside a float32 x) in x's precision, as the engines that promote give it (TensorFlow
    refuses float32 * float64); the user's own tensors and variables keep their dtype."""
    tensor = _as_tensor(value)
    if family(value) not in (TF, None) and tensor.dtype.is_floating and dtype.is_floating and tensor.dtype != dtype:
        return tf.cast(tensor, dtype)
    return tensor


def _standin_for(dtype: Any) -> Any:
    def leaf(value: Any) -> WritableArray:
        return WritableArray(_in_precision(value, dtype))

    return leaf


class _Function:
    """``fn(x, contexts, state=None) -> tensor``: ``f`` over stand-ins for its captured state and its
    contexts; ``state`` (the captured values, tensors inside a ``tf.function``) replaces the user's."""

    __slots__ = ("target", "simple")

    def __init__(self, target: Target, contexts: tuple[Any, ...]) -> None:
        self.target = target
        self.simple = not contexts and target.plain

    def __call__(self, x: tf.Tensor, contexts: tuple[Any, ...], state: Any = None, values: Any = None) -> Any:
        target = self.target
        if self.simple and state is None:
            return _output(target.f(x), x, target)
        if values is None:
            values = [c.value for c in contexts]
        leaf = _standin_for(x.dtype)
        ctx = [duplicate(v, leaf) for v in values]
        fn = target.instance(leaf, values=state)
        return _output(fn(x, *ctx), x, target)

    def state(self) -> list[Any]:
        plan = self.target.plan
        return plan.read() if plan is not None and self.target.has_state else []


# -- a lost derivative ------------------------------------------------------------------------------


# operations that cut the derivative of a floating value on purpose (registered without a gradient)
_CUTS = {"StopGradient": "tf.stop_gradient", "PreventGradient": "tf.raw_ops.PreventGradient"}


class _Provenance:
    """An op callback (TensorFlow's ``op_callbacks``): follows which eager tensors are computed from
    ``x`` and records the operations that cut their derivative (:data:`_CUTS`)."""

    def __init__(self, root: Any) -> None:
        self.derived = {id(root): root}  # strong references: ids are not reused while this runs

    def __call__(
        self, op_type: Any, inputs: Any, attrs: Any, outputs: Any, op_name: Any = None, graph: Any = None
    ) -> Any:
        if graph is not None or not any(id(i) in self.derived for i in inputs or ()):
            return None
        name = op_type.decode() if isinstance(op_type, bytes) else str(op_type)
        if name in _CUTS:
            _RECORDER.escapes.append(_CUTS[name])
            return None
        for out in outputs or ():
            self.derived[id(out)] = out
        return None


def _lost(fn: _Function, call: Callable[[Any], Any], x: tf.Tensor) -> None:
    """Where TensorFlow says ``f(x)`` does not depend on ``x``: runs ``f`` once more under a tape and
    raises :class:`LostDerivativeError` where a value that carried x's derivative was read into Python
    or cut (``tf.stop_gradient``) on the way; returns where ``f`` is constant in ``x`` (the derivatives
    are zeros)."""

    def run() -> None:
        watcher = _Provenance(x)
        _op_callbacks.add_op_callback(watcher)
        try:
            _tape_value(call, x)
        finally:
            _op_callbacks.remove_op_callback(watcher)

    escapes = _run_recorded(run)
    if not escapes and _moves(call, x):
        # numpy reads an eager tensor through the buffer protocol (np.asarray(t), np.sin(t)), which
        # TensorFlow does not see: f(x) then changes with x while no derivative reaches it
        escapes = ["a conversion to numpy that TensorFlow does not see (np.asarray(t), a numpy function of t)"]
    if escapes:
        where = ", ".join(dict.fromkeys(escapes))
        raise LostDerivativeError(
            f"{fn.target.call}: f(x) is computed from x, but its derivative was lost on the way ({where}), so "
            f"every derivative would come out zero. {LOST_CAUSES}."
        )


def _moves(call: Callable[[Any], Any], x: tf.Tensor) -> bool:
    """Whether f's value changes along a small step of x (random direction, seeded): f is not constant."""
    if not (x.dtype.is_floating or x.dtype.is_complex) or shape_size(tuple(x.shape)) == 0:
        return False
    v = np.random.default_rng(0).standard_normal(_dims(x))
    real = x.dtype.real_dtype if x.dtype.is_complex else x.dtype
    eps = float(np.finfo(cast("type[np.floating[Any]]", real.as_numpy_dtype)).eps)  # the stubs: any number type
    h = eps**0.5 * max(1.0, float(tf.reduce_max(tf.abs(x))))
    with _SCOPE:
        try:
            y0, y1 = call(x), call(x + tf.cast(h * v, x.dtype))
        except Exception:  # noqa: BLE001 - f fails off x: no answer, taken as constant
            return False
    return bool(tf.reduce_any(tf.not_equal(y0, y1)))


def _dims(x: tf.Tensor) -> tuple[int, ...]:
    """An eager tensor's shape: every dimension is known (the stubs allow None)."""
    return cast("tuple[int, ...]", tuple(x.shape))


def _tape_value(call: Callable[[Any], Any], x: tf.Tensor) -> Any:
    with tf.GradientTape() as tape:
        tape.watch(x)
        return call(x)


def _run_recorded(run: Any) -> list[str]:
    saved = _RECORDER.escapes
    _RECORDER.escapes = []
    try:
        with _SCOPE:
            try:
                run()
            except Exception:  # noqa: BLE001 - f failing on the way: what escaped before is the answer
                pass
        return _RECORDER.escapes
    finally:
        _RECORDER.escapes = saved


def _check_escapes(fn: _Function, call: Callable[[Any], Any], x: tf.Tensor, escapes: list[str], ad: Any) -> None:
    """Where a value that carried x's derivative was read into Python and the derivative is not None:
    the directional derivative ``<w, J v>`` against a central difference of f along ``v`` (two steps),
    as torch's adapter does; :class:`LostDerivativeError` where they disagree."""
    if not x.dtype.is_floating or shape_size(tuple(x.shape)) == 0:
        return
    gen = np.random.default_rng(0)
    v = gen.standard_normal(_dims(x))
    v = tf.constant(v / max(float(np.linalg.norm(v)), 1e-300), dtype=x.dtype)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = call(x)
    if not y.dtype.is_floating:
        return
    w = tf.constant(gen.standard_normal(tuple(y.shape)), dtype=y.dtype)
    g = tape.gradient(y, x, output_gradients=[w])  # a list of one: as TensorFlow flattens w itself
    derivative = 0.0 if g is None else float(tf.reduce_sum(tf.convert_to_tensor(g) * v))  # g: a tensor or IndexedSlices
    eps = float(np.finfo(cast("type[np.floating[Any]]", x.dtype.as_numpy_dtype)).eps)  # the stubs: any number type
    h = eps ** (1 / 3) * max(1.0, float(tf.reduce_max(tf.abs(x))))

    def central(step: float) -> float:
        return float(tf.reduce_sum(w * (call(x + step * v) - call(x - step * v)))) / (2 * step)

    fd, fd2 = central(h), central(2 * h)
    noise = eps * float(tf.reduce_sum(tf.abs(w) * tf.abs(y))) / h
    error = escaped_error(fn.target.call, "TensorFlow", escapes, derivative, fd, fd2, noise, eps, "a tensor")
    if error is not None:
        raise error


# -- the operators' bodies ----------------------------------------------------------------------------


class _Missing:
    """Marks a derivative TensorFlow returned as None (f(x) not connected to x), per body run."""

    def __init__(self) -> None:
        self.seen = False

    def __call__(self, value: Any, like: tf.Tensor) -> Any:
        if value is None:
            self.seen = True
            return tf.zeros_like(like)
        if isinstance(value, tf.IndexedSlices):
            return tf.convert_to_tensor(value)
        return value


def _jvp(call: Callable[[Any], Any], x: tf.Tensor, t: Any, missing: _Missing) -> tuple[Any, Any]:
    y, (out,) = _jvps(call, x, (t,), missing)
    return y, out


def _jvps(
    call: Callable[[Any], Any], x: tf.Tensor, ts: tuple[Any, ...], missing: _Missing
) -> tuple[Any, tuple[Any, ...]]:
    """``(f(x), (J t for t in ts))``. Inside a graph: one ``ForwardAccumulator`` pass per tangent.
    Eagerly: TensorFlow's own transpose trick (``J t`` is the derivative of ``J^T u`` in ``u`` along
    ``t``, which is how ``ForwardAccumulator`` computes the JVP of most operations), once for all the
    tangents: one recorded pass and two backward passes per tangent, where the accumulator would trace
    a function per operation (measured: 9 ms per operation eagerly)."""
    if tf.executing_eagerly():
        try:
            return _transposed(call, x, ts, missing)
        except NotImplementedError:  # a custom rule without a reverse pass: the accumulator runs its forward rule
            pass
    if not ts:  # an empty batch of tangents: f(x) alone
        return call(x), ()
    results = []
    for t in ts:
        acc = tf.autodiff.ForwardAccumulator(x, t)
        _RECORDER.accumulators.append(acc)
        try:
            with acc:
                y = call(x)
        finally:
            _RECORDER.accumulators.remove(acc)
        results.append(missing(acc.jvp(y), y))
    return y, tuple(results)  # pyright: ignore[reportPossiblyUnboundVariable] - ts is not empty (above): the loop ran


def _transposed(
    call: Callable[[Any], Any], x: tf.Tensor, ts: tuple[Any, ...], missing: _Missing
) -> tuple[Any, tuple[Any, ...]]:
    with tf.GradientTape() as inner:
        inner.watch(x)
        y = call(x)
    u = tf.zeros_like(y)
    with tf.GradientTape(persistent=len(ts) > 1) as outer:
        outer.watch(u)
        g = inner.gradient(y, x, output_gradients=u)
    if g is None:
        missing.seen = True
        return y, tuple(tf.zeros_like(y) for _ in ts)
    target = cast("tf.Tensor", g)  # the stubs' result type adds IndexedSlices, their target type lacks it
    return y, tuple(missing(outer.gradient(target, u, output_gradients=t), y) for t in ts)


def _cast(t: Any, like: tf.Tensor) -> Any:
    return _as_tensor(t, like.dtype)


def _basis(shape: tuple[Any, ...], dtype: Any) -> Any:
    n = shape_size(shape)
    return tf.reshape(tf.eye(n, dtype=dtype), (n,) + tuple(shape))


# eagerly, from this many rows a Jacobian is vectorised by pfor (one trace of the backward pass, about
# 50 ms) rather than looped (one backward pass a row: 0.1-2 ms each)
EAGER_PFOR_FROM = 64


def _tape_jacobian(tape: tf.GradientTape, y: tf.Tensor, x: tf.Tensor) -> Any:
    """``tape.jacobian(y, x)``: vectorised by ``pfor`` in a graph, and eagerly where ``y`` has at least
    ``EAGER_PFOR_FROM`` elements: a one-shot Hessian at n = 1e3 is then one vectorised backward pass
    (77 ms, TensorFlow's own traced first call 79 ms) instead of 1e3 of them in a loop (1.6 s), while
    a small one keeps the loop (pfor's trace alone costs about 50 ms). Where ``pfor`` cannot convert
    an operation it raises, and the Jacobian is TensorFlow's loop (``experimental_use_pfor=False``,
    its documented way out; the tape is persistent eagerly for it)."""
    if not tf.executing_eagerly():
        return tape.jacobian(y, x, experimental_use_pfor=True)
    if int(tf.size(y)) < EAGER_PFOR_FROM:
        return tape.jacobian(y, x, experimental_use_pfor=False)
    try:
        return tape.jacobian(y, x, experimental_use_pfor=True)
    except (ValueError, TypeError, NotImplementedError, tf.errors.OpError):
        return tape.jacobian(y, x, experimental_use_pfor=False)


def _bodies(operator: Operator, forward: bool, info: Info) -> Any:
    """``body(call, x, ts, missing) -> (primal, result)`` on tensors for ``operator``."""
    x_shape, y_shape = info.x_shape, info.y_shape
    n, m = shape_size(x_shape), shape_size(y_shape)

    def jacobian(call: Callable[[Any], Any], x: tf.Tensor, missing: _Missing) -> Any:
        if forward:
            if n == 0:
                y = call(x)
                return y, tf.zeros(tuple(y_shape) + tuple(x_shape), dtype=y.dtype)
            basis = _basis(x_shape, x.dtype)
            y, cols = _jvps(call, x, tuple(basis[i] for i in range(n)), missing)
            flat = tf.stack([tf.reshape(c, (m,)) for c in cols], axis=1)
            return y, tf.reshape(flat, tuple(y_shape) + tuple(x_shape))
        with tf.GradientTape(persistent=tf.executing_eagerly()) as tape:
            tape.watch(x)
            y = call(x)
        jac = _tape_jacobian(tape, y, x)
        return y, missing(jac, tf.zeros(tuple(y_shape) + tuple(x_shape), dtype=x.dtype))

    def pullbacks(call: Callable[[Any], Any], x: tf.Tensor, ts: tuple[Any, ...], missing: _Missing) -> Any:
        with tf.GradientTape(persistent=len(ts) > 1) as tape:
            tape.watch(x)
            y = call(x)
        return y, tuple(missing(tape.gradient(y, x, output_gradients=_cast(t, y)), x) for t in ts)

    if operator is PUSHFORWARD and forward:

        def body(call: Callable[[Any], Any], x: tf.Tensor, ts: tuple[Any, ...], missing: _Missing) -> Any:
            return _jvps(call, x, tuple(_cast(t, x) for t in ts), missing)

    elif operator is PULLBACK and not forward:
        body = pullbacks
    elif operator.tangent is not None and operator.order == 1:  # against the direction: through the Jacobian

        def body(call: Callable[[Any], Any], x: tf.Tensor, ts: tuple[Any, ...], missing: _Missing) -> Any:
            y, jac = jacobian(call, x, missing)
            like = x if operator is PUSHFORWARD else y
            # a tensor is an Array at runtime (its shape and ndim); the stubs give a TensorShape and no ndim
            return y, contract_all(jac, tuple(_cast(t, like) for t in ts), cast("Array", x), operator is PUSHFORWARD)

    elif operator is DERIVATIVE and forward:

        def body(call: Callable[[Any], Any], x: tf.Tensor, ts: tuple[Any, ...], missing: _Missing) -> Any:
            return _jvp(call, x, tf.ones_like(x), missing)

    elif operator is GRADIENT and not forward:

        def body(call: Callable[[Any], Any], x: tf.Tensor, ts: tuple[Any, ...], missing: _Missing) -> Any:
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = call(x)
            return y, missing(tape.gradient(y, x), x)

    elif operator.order == 1:  # derivative, gradient against their direction, and the jacobian

        def body(call: Callable[[Any], Any], x: tf.Tensor, ts: tuple[Any, ...], missing: _Missing) -> Any:
            return jacobian(call, x, missing)

    elif operator is SECOND_DERIVATIVE:  # forward over forward

        def body(call: Callable[[Any], Any], x: tf.Tensor, ts: tuple[Any, ...], missing: _Missing) -> Any:
            one = tf.ones_like(x)
            if tf.executing_eagerly():  # the transpose trick twice (see _jvps)
                with tf.GradientTape() as second:
                    second.watch(x)
                    y, der = _jvp(call, x, one, missing)
                u = tf.zeros_like(der)
                with tf.GradientTape() as outer_u:
                    outer_u.watch(u)
                    g = second.gradient(der, x, output_gradients=u)
                if g is None:
                    return (y, der), missing(None, der)
                # the stubs' result type adds IndexedSlices, which their target type lacks
                target = cast("tf.Tensor", g)
                return (y, der), missing(outer_u.gradient(target, u, output_gradients=[one]), der)
            outer = tf.autodiff.ForwardAccumulator(x, one)
            _RECORDER.accumulators.append(outer)
            try:
                with outer:
                    y, der = _jvp(call, x, one, missing)
            finally:
                _RECORDER.accumulators.remove(outer)
            return (y, der), missing(outer.jvp(der), der)

    elif operator in (HVP, HESSIAN):  # reverse over reverse

        def body(call: Callable[[Any], Any], x: tf.Tensor, ts: tuple[Any, ...], missing: _Missing) -> Any:
            with tf.GradientTape(persistent=len(ts) > 1 or tf.executing_eagerly()) as outer:
                outer.watch(x)
                with tf.GradientTape() as inner:
                    inner.watch(x)
                    y = call(x)
                g = missing(inner.gradient(y, x), x)
            if operator is HESSIAN:
                hess = _tape_jacobian(outer, g, x)
                return (y, g), missing(hess, tf.zeros(tuple(x_shape) * 2, dtype=x.dtype))
            return (y, g), tuple(
                missing(outer.gradient(g, x, output_gradients=_cast(t, x)), x) if not missing.seen else tf.zeros_like(x)
                for t in ts
            )

    else:  # pragma: no cover - the frontend only passes the operators above
        raise ValueError(operator)
    return body


# -- the runners --------------------------------------------------------------------------------------


def _detached(value: Any) -> Any:
    return value


class _Hashed:
    """A skeleton's static part in a cache key: equal as :func:`_equal` compares (by value, same types)."""

    __slots__ = ("value", "_hash")

    def __init__(self, value: Any) -> None:
        self.value, self._hash = value, hash(value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, _Hashed) and _equal(self.value, other.value)


class _Traced:
    """A traced ``tf.function`` of one function's prep (and the skeleton and slots it was traced
    with), which the function's other preps share while one holds it (``_Prepared.traced``)."""

    __slots__ = ("function", "skeleton", "slots", "__weakref__")

    def __init__(self, function: Any, skeleton: _Skeleton, slots: Any) -> None:
        self.function, self.skeleton, self.slots = function, skeleton, slots


# traced graphs by the user's function, shared by its preps, weakly at both ends: the function is a weak
# key and its graphs are held by the preps that use them (a graph's tf.function and slots hold the
# function: a table that held them kept every function prepared with TensorFlow, and its graphs, alive)
_GRAPHS: weakref.WeakKeyDictionary[Any, weakref.WeakValueDictionary[Any, _Traced]] = weakref.WeakKeyDictionary()


class _Taped:
    """A one-shot reverse-mode gradient recorded by ``output_info`` as the eager runner records it
    (:func:`_taped`): the tape, ``x`` and ``f(x)``, and what escaped on the way, left in
    ``Info.value`` for the runner's first call: one evaluation of ``f`` where it took two."""

    __slots__ = ("tape", "x", "y", "escapes")

    def __init__(self, tape: Any, x: tf.Tensor, y: Any, escapes: list[str]) -> None:
        self.tape, self.x, self.y, self.escapes = tape, x, y, escapes


def _taped(fn: _Function, x: tf.Tensor, contexts: Contexts) -> _Taped:
    """``f`` at ``x`` under a gradient tape that watches ``x`` (the gradient body's recording), the
    escapes it recorded kept apart from the caller's."""
    saved = _RECORDER.escapes
    _RECORDER.escapes = []
    try:
        with _SCOPE, tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x, contexts)
        return _Taped(tape, x, y, _RECORDER.escapes)
    finally:
        _RECORDER.escapes = saved


class _Prepared:
    """One operator for one function: its eager runners, and its ``tf.function`` ones when traced."""

    def __init__(
        self,
        adapter: Adapter,
        operator: Operator,
        target: Target,
        x: Array,
        tangents: tuple[Any, ...],
        contexts: tuple[Any, ...],
        info: Info,
        forward: bool,
    ) -> None:
        self.operator, self.target, self.info = operator, target, info
        self.fn = _Function(target, contexts)
        self.body = _bodies(operator, forward, info)
        self.dtype = _as_tensor(x).dtype
        self.graph: Any = None
        self.skeleton: _Skeleton | None = None
        self.traced: _Traced | None = None  # what holds the graph for the function's other preps
        self.use_graph = adapter.backend.function and not info.oneshot
        self.taped = info.oneshot and type(info.value) is _Taped  # a gradient recorded by output_info
        if self.use_graph:
            self._trace(x, tangents, contexts, adapter.backend.jit_compile, (adapter.backend, forward))

    # eager: f at every call, what escaped checked
    def eager(self, x: Array, ts: tuple[Any, ...], contexts: Contexts, value: bool) -> Any:
        fn, missing = self.fn, _Missing()

        def call(z: Any) -> Any:
            return fn(z, contexts)

        recorded = None
        if self.taped:  # the first call of a one-shot gradient: f was recorded by output_info (_Taped)
            self.taped = False
            recorded = self.info.take_value()
        if type(recorded) is _Taped:
            tensor, escapes = recorded.x, recorded.escapes
            with _SCOPE:
                primal, result = recorded.y, missing(recorded.tape.gradient(recorded.y, tensor), tensor)
        else:
            tensor = _as_tensor(x, self.dtype)
            saved = _RECORDER.escapes
            _RECORDER.escapes = []
            try:
                with _SCOPE:
                    try:
                        primal, result = self.body(call, tensor, ts, missing)
                    except (TypeError, ValueError) as error:
                        known = standin_error(self.target, error, "TensorFlow")
                        if known is not None:
                            raise known from error
                        raise
                escapes = _RECORDER.escapes
            finally:
                _RECORDER.escapes = saved
        if missing.seen:
            _lost(fn, call, tensor)
        elif escapes:
            with _SCOPE:
                _check_escapes(fn, call, tensor, escapes, result)
        return value_form(self.operator, primal, result, _detached) if value else result

    # the tf.function: traced once, with x, the tangents and the arrays of contexts and state as
    # arguments; it returns the body's (primal, result), from which both runners take their part
    def _trace(self, x: Array, tangents: Any, contexts: Contexts, jit: bool, config: Any) -> None:
        skeleton = _Skeleton(([c.value for c in contexts], self.fn.state()), self.dtype)
        key = self._key(x, tangents, contexts, skeleton, config)
        graphs = _GRAPHS.get(self.target.user_f) if key is not None else None
        shared = graphs.get(key) if graphs is not None else None
        # traced by another prep of the same function (the prep cache's, a user's) that is alive, while
        # what its slots hold besides state is what they held then (a helper or a flag rebound since: traced again)
        if shared is not None and (shared.slots is None or shared.slots.holds()):
            self.graph, self.skeleton, self.traced = shared.function, shared.skeleton, shared
            return
        slots = self.target.slots() if key is not None else None  # f's slots as the trace below reads them
        fn, body = self.fn, self.body
        # flat positional tensors, x, the tangents, then the leaves: TensorFlow binds and flattens a
        # call's arguments in Python at every call, and nested lists cost it more than flat ones
        specs = [
            tf.TensorSpec(tuple(np.shape(x)), self.dtype),
            *(tf.TensorSpec(tuple(np.shape(t)), self.dtype) for t in tangents),
            *(tf.TensorSpec(leaf.shape, leaf.dtype) for leaf in skeleton.leaves),
        ]
        has_state = self.target.has_state
        lost: list[bool] = []
        n_tangents = len(tangents)

        def graph(x: tf.Tensor, *flat: Any) -> Any:
            ts, leaves = flat[:n_tangents], flat[n_tangents:]
            values, state = skeleton.build(list(leaves))
            missing = _Missing()

            def call(z: Any) -> Any:
                return fn(z, contexts, state if has_state else None, values)

            out = body(call, x, tuple(ts), missing)
            if missing.seen:
                lost.append(True)
            return out

        # autograph off: f is traced as the Python it is (as jax.jit does), and TensorFlow prints nothing
        function = tf.function(graph, input_signature=specs, jit_compile=jit or None, autograph=False)
        try:
            with _SCOPE:
                function.get_concrete_function()
        except Exception:  # noqa: BLE001 - f cannot be traced into a graph: eager for this prep
            self.use_graph = False
            return
        if lost:  # a derivative TensorFlow cannot follow: the eager path checks, and raises or gives zeros
            self.use_graph = False
            return
        self.graph, self.skeleton = function, skeleton
        self.traced = _Traced(function, skeleton, slots)
        if key is not None:
            try:
                graphs = _GRAPHS.setdefault(self.target.user_f, weakref.WeakValueDictionary())
            except TypeError:  # a callable that takes no weak reference
                return
            if len(graphs) < 8 or key in graphs:
                graphs[key] = self.traced

    def _key(self, x: Array, tangents: Any, contexts: Contexts, skeleton: _Skeleton, config: Any) -> Any:
        """What a traced graph depends on beyond its arguments, for sharing it between preps of one
        function: None (not shared) for an output buffer or a structured x, whose templates the trace
        holds, and for a static part that does not hash."""
        target = self.target
        if target.y is not None or target.layout is not None:
            return None
        key = (
            self.operator.name,
            config,
            target.closure,
            (tuple(np.shape(x)), self.dtype),
            tuple(tuple(np.shape(t)) for t in tangents),
            tuple(type(c) for c in contexts),
            tuple((tuple(leaf.shape), leaf.dtype) for leaf in skeleton.leaves),
        )
        try:
            hash(skeleton.shape)
        except TypeError:
            return None
        return key + (_Hashed(skeleton.shape),)

    def run(self, x: Array, ts: tuple[Any, ...], contexts: Contexts, value: bool) -> Any:
        if self.use_graph:
            assert self.skeleton is not None
            if contexts or self.target.has_state:
                skeleton = _Skeleton(([c.value for c in contexts], self.fn.state()), self.dtype)
                if not skeleton.same(self.skeleton):
                    return self.eager(x, ts, contexts, value)
                leaves = skeleton.leaves
            else:
                leaves = []
            dtype = self.dtype
            tensor = x if type(x) is _EagerTensor and x.dtype == dtype else _as_tensor(x, dtype)
            # the graph was traced at preparation for this input signature: a call runs it, f is not
            # called, and the call's scope (the array API on tensors) is not needed
            try:
                primal, result = self.graph(tensor, *(_as_tensor(t, dtype) for t in ts), *leaves)
            except tf.errors.OpError as error:  # an opaque rule's body failed: its own error (host_error)
                kept = host_error(error)
                if kept is None:
                    raise
                raise kept from None
            return value_form(self.operator, primal, result, _detached) if value else result
        return self.eager(x, ts, contexts, value)


class Adapter(_Base):
    """TensorFlow; see the module docstring."""

    engine_name = "TensorFlow"
    local_sparsity_fallback = True  # AutoSparse's default detector on tf.* code: the pattern at and around x

    @staticmethod
    def traced(value: Any) -> bool:
        """A symbolic tensor: under closure='const' the frontend checks that none is left in captured lists."""
        return isinstance(value, _Tensor) and not isinstance(value, _Eager)

    @staticmethod
    def rebinding_operand(value: Any) -> bool:
        """Any tensor, eager or symbolic: under closure='const', a write of one into a captured numpy
        array is the call's error (``part = buf[1:3]; part *= x``: numpy hands it to the tensor's own
        operator, which rebinds ``part`` and leaves ``buf`` as it was; ``buf[1:3] = x``, ``out=``,
        ``np.copyto``: numpy writes the values alone). TensorFlow differentiates eager tensors, and
        gives no public way to tell one computed from ``x`` from a constant, so either is refused."""
        return isinstance(value, _Tensor)

    def output_info(self, target: Target, x: Array, contexts: Contexts, oneshot: Any) -> Any:
        fn = _Function(target, contexts)
        recorded = None
        try:
            if oneshot and self._tapes(target):
                recorded = _taped(fn, _as_tensor(x), contexts)
                y = recorded.y
            else:
                with _SCOPE:
                    y = fn(_as_tensor(x), contexts)
        except (TypeError, ValueError) as error:
            known = standin_error(target, error, "TensorFlow")
            if known is not None:
                raise known from error
            raise
        return Info(tuple(y.shape), y.dtype.as_numpy_dtype, recorded, tuple(np.shape(x)), oneshot)

    def _tapes(self, target: Target) -> bool:
        """Whether a one-shot ``output_info`` records the gradient's tape (:class:`_Taped`): a
        reverse-mode gradient of a flat x."""
        mode = getattr(self.backend, "mode", None)
        return target.operator is GRADIENT and target.layout is None and mode != "forward"

    def prepare(
        self, operator: Operator, target: Target, x: Array, tangents: Any, contexts: Contexts, info: Info
    ) -> Runners:
        forward = self.forward(operator, info)
        prepared = _Prepared(self, operator, target, x, tangents, contexts, info, forward)

        def plain(x: Array, ts: tuple[Any, ...], contexts: Contexts) -> Any:
            return prepared.run(x, ts, contexts, False)

        def value(x: Array, ts: tuple[Any, ...], contexts: Contexts) -> Any:
            return prepared.run(x, ts, contexts, True)

        runners: tuple[Runner, Runner] = (plain, value)
        return Runners(*runners, prepared)
