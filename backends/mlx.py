"""``AutoMLX``: every operator on Apple's MLX (``mx.jvp``, ``mx.vjp``, ``mx.value_and_grad``, ``mx.vmap``).

- pushforward: ``mx.jvp`` (a batch: ``mx.vmap`` of the JVP over the stacked tangents); pullback:
  ``mx.vjp`` (a batch: ``vmap`` of the VJP); gradient: ``mx.value_and_grad``; derivative: ``jvp``
  along 1; jacobian: the JVPs of the basis of x or the VJPs of the basis of f(x), each ``vmap``-ped
  (``mode=None``: forward when ``x.size <= f(x).size``). ``mode="forward"``/``"reverse"`` forces
  every first-order operator; a pushforward in reverse mode or a pullback in forward mode goes
  through the Jacobian.
- hvp, hessian: forward over reverse (``jvp`` of ``value_and_grad``; the Hessian ``vmap``-s it over
  the basis of x); second derivative: forward over forward.
- Batches loop where ``f`` writes a slice (``y[1:2] = ...``, ``mx.slice_update``): MLX's ``vmap`` of
  a slice update whose source is batched and whose update is not (MLX 0.32, the primitives
  ``SliceUpdate`` and ``DynamicSliceUpdate``) leaves the update out, and both directions' derivatives
  of a slice write make one (the JVP of ``y[1:2] = 5.0`` on an ``x``-dependent ``y``, the VJP of any
  write): a vmapped Jacobian was silently wrong. :func:`_slice_updates` reads ``f``'s graph at ``x``
  with MLX's own export (``mx.export_to_dot``, the only view of a graph MLX's Python API gives) at
  preparation; an ``f`` without a slice update keeps ``vmap``, one whose ``f(x)`` shows no graph (an
  inner derivative under ``SecondOrder(AutoMLX(), AutoMLX())``, evaluated) loops.
- ``compile=True``: a user's ``prepare_*`` compiles the operator with ``mx.compile`` (one program
  per form, built at its first call); the captured arrays and the contexts are arguments of the
  compiled function, read at every call (never baked in). An ``f`` that reads a traced value into
  Python (``if x.max() > 1:``, ``.item()``), which MLX refuses inside ``mx.compile`` and ``mx.vmap``,
  runs eagerly from then on, and batches loop instead of ``vmap``. A one-shot call runs eagerly.
- Arrays: ``f`` receives ``mlx.core.array`` (numpy, torch and jax inputs converted, dtype kept);
  results come back as MLX arrays, which the frontend turns into the family of ``x``. float64
  (MLX computes it on the CPU only) runs inside ``mx.stream(mx.cpu)``; the user's default device
  and stream are never changed.
- Array-API code: ``array_namespace(x)`` gives, while a call runs, ``mlx.core`` under the array API's
  signatures (``asarray(..., device=)``, ``eye(..., device=)``), and MLX arrays get a ``device``
  attribute (MLX has none, which ``array_api_compat.device`` needs); both are restored afterwards.
- Closures (contract section 7): MLX arrays are written in place by item assignment, and MLX
  differentiates through the write (the written array's node is replaced). So the captured arrays
  (numpy, torch, jax or MLX), caches and output buffers reach ``f`` as fresh MLX arrays, one set per
  evaluation of ``f``: writes carry derivatives, nothing leaks between calls, the user's objects are
  untouched. (A captured numpy array cannot be given to ``f`` as it is: ``np.float64(3) * a`` with an
  MLX ``a`` gives a numpy array, dropping the derivative.)
- A lost derivative (``mx.stop_gradient`` on the whole path, a round trip through numpy): checked at
  preparation, where MLX's reverse pass carries a NaN cotangent back to ``x`` only along a path it
  differentiates; where none reaches ``x`` but ``f(x)`` changes with ``x``, the call raises
  :class:`LostDerivativeError` (a constant ``f`` has zero derivatives).

Size: over 400 lines in one module, because an adapter is the registry's unit (``AutoMLX.adapter``
names one module, imported at first use).
"""

from __future__ import annotations

import contextlib
import io
import math
import re
import threading
from typing import Any, cast

import mlx.core as mx
import numpy as np
from numpy.typing import DTypeLike

from diffinterface.extend import (
    DERIVATIVE,
    GRADIENT,
    HESSIAN,
    HVP,
    JACOBIAN,
    LOST_CAUSES,
    NUMPY,
    PULLBACK,
    PUSHFORWARD,
    SECOND_DERIVATIVE,
    Cache,
    Contexts,
    Info,
    LostDerivativeError,
    Operator,
    Runners,
    Target,
    any_leaf,
    contract_all,
    duplicate,
    escaped_error,
    family,
    floating_value,
    innermost_frame,
    is_array,
    positive_strides,
    prefer,
    raised_by,
    shape_size,
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

from .mlx_rules import SECOND_ORDER

# -- dtypes and conversions ------------------------------------------------------------------------


# numpy dtype -> MLX dtype and back, as found (numpy's ``dtype.name`` is a Python property: 3 us, several
# times per call, where a dict lookup is 0.1 us)
_MX_DTYPES: dict[Any, Any] = {}
_NP_DTYPES: dict[Any, Any] = {}


def _mx_dtype(dtype: Any) -> Any:
    """MLX's dtype for ``dtype`` (an MLX dtype, numpy's, or a name)."""
    if isinstance(dtype, mx.Dtype):
        return dtype
    found = _MX_DTYPES.get(dtype)
    if found is None:
        name = np.dtype(dtype).name
        found = _MX_DTYPES[dtype] = getattr(mx, "bool_" if name == "bool" else name)
    return found


def _np_dtype(dtype: Any) -> Any:
    """numpy's dtype for an MLX dtype (``mlx.core.float64`` -> ``float64``)."""
    found = _NP_DTYPES.get(dtype)
    if found is None:
        found = _NP_DTYPES[dtype] = np.dtype(str(dtype).rpartition(".")[2])
    return found


def _to_mx(value: Any, dtype: Any = None) -> Any:
    """``value`` (an array of any family, or a number) as an MLX array, its dtype kept (or ``dtype``)."""
    value = _unwrap(value)
    if isinstance(value, mx.array):
        return value if dtype is None or value.dtype == dtype else value.astype(dtype)
    if family(value) not in (None, NUMPY):
        value = to_family(value, NUMPY)
    value = positive_strides(np.asarray(value))  # MLX refuses a negative stride (x[::-1]): copied
    return mx.array(value, dtype=_mx_dtype(value.dtype) if dtype is None else dtype)


def _fresh(value: Any) -> Any:
    """A captured array, a cache or an output buffer as ``f`` gets it: a new MLX array (a write into it
    replaces its own node only; the user's array is never written)."""
    if isinstance(value, mx.array):
        return mx.array(value)
    return _to_mx(value)


def _mx_tree(value: Any) -> Any:
    """The arrays in ``value`` (a context's value, captured state) as MLX arrays, containers kept."""
    return duplicate(value, lambda v: _to_mx(v) if not isinstance(v, mx.array) else v)


def _compilable(value: Any) -> bool:
    """Whether ``value`` can be an argument of ``mx.compile``-d code: arrays and numbers in lists,
    tuples and dicts (an object, a string: the prep runs eagerly). A dict's subclass is an object:
    ``mx.compile`` passes a plain dict of its items (an ``mlx.nn.Module`` would reach ``f`` uncallable)."""
    if isinstance(value, (mx.array, bool, int, float)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_compilable(v) for v in value)
    if type(value) is dict:
        return all(isinstance(k, str) and _compilable(v) for k, v in value.items())
    return False


def _float64(dtype: Any) -> bool:
    return dtype == mx.float64


# -- the array API over mlx.core -------------------------------------------------------------------


class _Namespace:
    """``mlx.core`` under the array API's signatures: what ``array_namespace`` gives for an MLX array
    while a call runs. MLX's own functions take no ``device=`` (they take ``stream=``); creation
    functions here accept and drop it (the call's stream context places them)."""

    def __getattr__(self, name: str) -> Any:
        value = getattr(mx, name)
        setattr(self, name, value)
        return value

    @staticmethod
    def asarray(obj: Any, dtype: Any = None, device: Any = None, copy: Any = None) -> Any:
        dtype = None if dtype is None else _mx_dtype(dtype)
        obj = _unwrap(obj)  # a stand-in (WritableArray): its current value
        if isinstance(obj, mx.array):
            out = obj if dtype is None or obj.dtype == dtype else obj.astype(dtype)
            return mx.array(out) if copy and out is obj else out
        if dtype is None and isinstance(obj, (bool, int, float, complex, list, tuple)):
            return mx.array(obj)
        return _to_mx(obj, dtype)

    @staticmethod
    def astype(x: Any, dtype: Any, copy: bool = True, device: Any = None) -> Any:
        return x.astype(_mx_dtype(dtype))

    @staticmethod
    def reshape(x: Any, shape: tuple[Any, ...], copy: Any = None) -> Any:
        return mx.reshape(x, shape)

    def __repr__(self) -> str:
        return "<the array API over mlx.core (diffinterface)>"


def _creation(name: str) -> Any:
    fn = getattr(mx, name)

    def create(*args: Any, dtype: Any = None, device: Any = None, **kwargs: Any) -> Any:
        if dtype is not None:
            kwargs["dtype"] = _mx_dtype(dtype)
        return fn(*args, **kwargs)

    create.__name__ = name
    return staticmethod(create)


for _name in ("zeros", "ones", "empty", "full", "eye", "arange", "linspace", "zeros_like", "ones_like", "full_like"):
    setattr(_Namespace, _name, _creation(_name))

namespace: _Namespace = _Namespace()


class _Escapes(threading.local):
    """Per thread: while a runner differentiates ``f``, the reads of an MLX array's values into
    Python or numpy that ``f`` made (``found``: a list; None outside). MLX tells no array that
    carries a derivative from a constant, so each is recorded, and the call checks its derivative
    where any was (:func:`_check_escapes`): a value read out of MLX that reaches f(x) drops its part
    of the derivative without an error (``x[0].item() * x[1]``, ``np.linalg.norm(x)``)."""

    found: list[str] | None = None


_ESCAPES = _Escapes()


def _escaped(what: str) -> None:
    found = _ESCAPES.found
    if found is not None:
        found.append(what)


# MLX's methods that read an array's values into Python, recorded while a call runs (_ArrayAPI)
_READS = {"item": "a.item()", "tolist": "a.tolist()", "__float__": "float(a)"}


_ORIGINAL_READS = {name: mx.array.__dict__[name] for name in _READS}
_FLOATING = (mx.float16, mx.bfloat16, mx.float32, mx.float64, mx.complex64)


def _reader(name: str) -> Any:
    original = _ORIGINAL_READS[name]

    def read(self: mx.array, *args: object, **kwargs: object) -> Any:
        if self.dtype in _FLOATING:  # an index or a flag carries no derivative
            _escaped(_READS[name])
        return original(self, *args, **kwargs)

    read.__name__ = name
    return read


_READERS = {name: _reader(name) for name in _READS}


class _ReadsSeen:
    """Around a runner's eager run of ``f`` (``mx.compile``'s trace refuses such reads itself, and a
    compiled call runs no Python): :data:`_READS` set on MLX's array type to record where ``f`` reads
    a value (``_escaped``), MLX's own restored by the last one out (a count under a lock, as
    :class:`_ArrayAPI`). Set per eager run, not per call: set and restored at every call, the three
    attributes cost a prepared compiled gradient at n = 10 2-3 us of its 95 (measured)."""

    _lock = threading.Lock()
    _depth = 0

    def __enter__(self) -> None:
        with self._lock:
            if _ReadsSeen._depth == 0:
                for name, read in _READERS.items():
                    setattr(mx.array, name, read)
            _ReadsSeen._depth += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            _ReadsSeen._depth -= 1
            if _ReadsSeen._depth == 0:
                for name, original in _ORIGINAL_READS.items():
                    setattr(mx.array, name, original)


_READS_SEEN = _ReadsSeen()


class _ArrayAPI:
    """While a call runs: ``__array_namespace__`` of MLX arrays gives :data:`namespace`, MLX arrays
    have a ``device`` (``array_api_compat.device(x)`` reads it), and numpy's ufuncs on them compute
    with MLX's function of the same name (``__array_ufunc__``, :func:`_ufunc`): MLX arrays have no
    ``__array_ufunc__`` or ``__array_priority__`` of their own, so ``np.float64(3) * mx.sin(x)`` or
    ``np.sin(y)`` inside ``f`` would convert the array to numpy and drop that term's derivative
    without an error (the rest of the path kept, so no check saw it). Nested and concurrent calls
    share one patch (a count under a lock); the last one out restores MLX's own attributes."""

    _lock = threading.Lock()
    _depth = 0
    _saved: dict[str, Any] = {}
    _PATCHED = ("__array_namespace__", "device", "__array_ufunc__", "__array_function__")

    def __enter__(self) -> None:
        with self._lock:
            if _ArrayAPI._depth == 0:
                _ArrayAPI._saved = {name: mx.array.__dict__.get(name) for name in self._PATCHED}
                setattr(mx.array, "__array_namespace__", _array_namespace)  # noqa: B010 - MLX's type, patched for the call
                setattr(mx.array, "device", _device)  # noqa: B010
                setattr(mx.array, "__array_ufunc__", _array_ufunc)  # noqa: B010
                setattr(mx.array, "__array_function__", _array_function)  # noqa: B010
            _ArrayAPI._depth += 1

    def __exit__(self, *exc: Any) -> None:
        with self._lock:
            _ArrayAPI._depth -= 1
            if _ArrayAPI._depth == 0:
                for name, saved in _ArrayAPI._saved.items():
                    if saved is not None:
                        setattr(mx.array, name, saved)
                    else:
                        delattr(mx.array, name)


# numpy's ufuncs whose MLX function has another name (np.abs is numpy's "absolute")
_MX_NAMES = {"absolute": "abs", "fabs": "abs", "rint": "round", "deg2rad": "radians", "rad2deg": "degrees"}


def _ufunc(ufunc: np.ufunc, method: str, inputs: tuple[object, ...], kwargs: dict[str, object]) -> Any:
    """numpy's ``ufunc`` over MLX arrays (or stand-ins): MLX's function of the same name where MLX has
    one (an MLX array, the derivative kept), else numpy's on the current values, as numpy would.
    ``out=`` an MLX array or a stand-in: see :func:`_into`."""
    out = kwargs.get("out")
    if out is not None:
        targets = out if isinstance(out, tuple) else (out,)
        if any(isinstance(t, (mx.array, _Writable)) for t in targets):
            rest = {k: v for k, v in kwargs.items() if k != "out"}
            result = _ufunc(ufunc, method, inputs, rest)
            results = result if isinstance(result, tuple) else (result,)
            for target, value in zip(targets, results):
                _into(target, value, f"np.{ufunc.__name__}(..., out=...)")
            return out
    values = [_unwrap(v) for v in inputs]
    name = str(ufunc.__name__)  # numpy's stubs type a ufunc's name as str | None
    name = _MX_NAMES.get(name, name)
    own = getattr(mx, name, None) if method == "__call__" and not kwargs else None
    if own is not None:
        return own(*values)
    result = getattr(ufunc, method)(*(_read_only(v) if isinstance(v, mx.array) else v for v in values), **kwargs)
    if floating_value(result) and any(isinstance(v, mx.array) for v in values):
        _escaped(f"numpy's {name} of an MLX array")
    return result


def _read_only(value: object) -> np.ndarray:
    """An MLX array's values as numpy reads them, read-only: ``np.asarray`` of an MLX array is a
    writable view of MLX's own memory (of a temporary, for a slice), so a numpy function that writes
    into it (``np.copyto(buf[1:3], x)``, ``np.put``) changed a value without a graph, or wrote into
    a copy and lost the write, silently. numpy refuses a write into a read-only array: where the
    array is a captured one's guarded alias, ``f`` runs again over stand-ins (the adapter's
    ``refused_write``); over a stand-in, the call's error (:func:`_array_function`)."""
    array = np.asarray(value)
    if array.flags.writeable:
        array = array.view()
        array.flags.writeable = False
    return array


class NumpyWriteError(TypeError):
    """A numpy function wrote into an MLX array or an MLX stand-in, which it cannot: the write would
    have been lost (or would have changed an array's memory without a graph)."""


def _into(target: object, value: object, what: str) -> None:
    """``value`` written into ``target`` where a numpy function writes (``out=``, ``np.copyto``'s
    destination): a stand-in takes it as its item assignment does (a functional update: the derivative
    flows through it); a guarded alias refuses it (``f`` runs again over stand-ins); an MLX array of
    ``f``'s own cannot be written by numpy: :class:`NumpyWriteError`; a numpy array, numpy's own write."""
    if isinstance(target, _Writable):
        target[...] = value
    elif isinstance(target, _Guarded):
        _refused(target, value)
    elif isinstance(target, mx.array):
        raise NumpyWriteError(
            f"passes an MLX array to {what}, which would write into it: numpy cannot write MLX arrays "
            f"(it would write into a copy of the values, and the write would be lost); assign instead (a[...] = v)"
        )
    else:
        np.copyto(cast("np.ndarray", target), _read_only(value) if isinstance(value, mx.array) else cast("Any", value))


def _array_ufunc(self: Any, ufunc: np.ufunc, method: str, *inputs: object, **kwargs: object) -> Any:
    return _ufunc(ufunc, method, inputs, kwargs)


def _numpy_values(value: object) -> object:
    """``value`` with its MLX arrays (and stand-ins) as numpy arrays, inside lists and tuples too:
    read-only (:func:`_read_only`)."""
    value = _unwrap(value)
    if isinstance(value, mx.array):
        return _read_only(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_numpy_values(v) for v in value)
    return value


def _array_function(self: Any, func: Any, types: object, args: tuple[object, ...], kwargs: dict[str, object]) -> Any:
    """numpy's array functions over MLX arrays (``np.sum``, ``np.stack``, ``np.concatenate``): MLX's
    function of the same name where MLX has one and takes the arguments (an MLX array, the
    derivative kept), else numpy's on the current values, as numpy itself would convert them, read
    only: ``np.copyto`` into a stand-in is its item assignment (:func:`_into`), and a function that
    writes into an MLX array or a stand-in (``np.put``, ``np.place``, ``out=``) is the call's
    error, not a write into a copy that is lost (into a guarded alias: ``f`` runs again over stand-ins)."""
    if func is np.copyto and len(args) == 2 and not kwargs:
        _into(args[0], _unwrap(args[1]), "np.copyto")
        return None
    own = getattr(mx, func.__name__, None) if func.__module__ == "numpy" else None
    if own is not None and "out" not in kwargs:
        try:
            return own(
                *(_unwrap(a) if not isinstance(a, (list, tuple)) else [_unwrap(v) for v in a] for a in args), **kwargs
            )
        except TypeError:  # MLX's signature differs (an argument numpy has and MLX lacks)
            pass
    out = kwargs.get("out")
    if out is not None and isinstance(out, (mx.array, _Writable)):
        result = _array_function(self, func, types, args, {k: v for k, v in kwargs.items() if k != "out"})
        _into(out, result, f"np.{func.__name__}(..., out=...)")
        return out
    try:
        result = func(*(_numpy_values(a) for a in args), **{k: _numpy_values(v) for k, v in kwargs.items()})
    except ValueError as error:
        if not _Base.refused_write(error):  # numpy's own refusal of a write into a read-only array
            raise
        written = [a for a in (*args, *kwargs.values()) if isinstance(a, (mx.array, _Writable))]
        if any(isinstance(a, _Guarded) for a in written):
            raise  # a captured array's guarded alias: f runs again over stand-ins (refused_write)
        raise NumpyWriteError(
            f"passes an MLX array (or a captured array, which f gets as one) to np.{func.__name__}, which would "
            f"write into it: numpy cannot write MLX arrays (it would write into a copy of the values, and the write "
            f"would be lost); assign instead (a[idx] = v)"
        ) from error
    if floating_value(result) and any_leaf((args, kwargs), lambda v: isinstance(v, (mx.array, _Writable))):
        _escaped(f"np.{func.__name__} of an MLX array")
    return result


def _array_namespace(self: Any, api_version: Any = None) -> Any:
    return namespace


_device = property(lambda self: mx.default_device())
_API = _ArrayAPI()


def _context(dtype: Any) -> Any:
    """The call's context: the array API patch, and MLX's CPU stream for float64."""
    if not _float64(_mx_dtype(dtype)):
        return _API
    stack = contextlib.ExitStack()
    stack.enter_context(_API)
    stack.enter_context(mx.stream(mx.cpu))
    return stack


computing = _context  # the MLX family's ``computing`` (diffinterface/_core/arrays.py): dtype an MLX or numpy dtype


# -- MLX's refusal to evaluate inside mx.compile and mx.vmap ---------------------------------------

_REFUSAL: list[str] = []


def _eval_refusal() -> str:
    """MLX's error for an array evaluated inside ``mx.compile`` or ``mx.vmap`` (``.item()``,
    ``np.asarray``, ``if x > 0:`` on a traced value), learnt once by provoking it: it is a plain
    ValueError raised from C++, with no type or attribute of its own to tell it apart."""
    if not _REFUSAL:
        try:
            mx.compile(lambda z: z * z.sum().item())(mx.zeros(1))
            _REFUSAL.append("")
        except ValueError as error:
            _REFUSAL.append(str(error))
    return _REFUSAL[0]


def _refused_eval(error: BaseException) -> bool:
    refusal = _eval_refusal()
    return bool(refusal) and raised_by(error, lambda e: isinstance(e, ValueError) and str(e) == refusal)


# -- f as MLX differentiates it --------------------------------------------------------------------


class WritableArray(_Writable):
    """What ``f`` gets for a captured array, a cache or an output buffer under ``AutoMLX``: a fresh MLX
    array (the user's object is never written) whose item assignment and in-place operators replace
    its value by a new array (a copy written in place, which MLX differentiates through), and whose
    slices are views that write it (``part = buf[1:3]; part *= x``), as numpy's; an MLX slice is a
    new array, so without the stand-in that write would be lost. MLX's functions take it through
    ``__mlx_array__``; numpy's ufuncs through numpy's own dispatch (``__array_ufunc__``), computed
    by MLX's function of the same name where MLX has one (``np.float64(3) * buf``, ``np.sin(buf)``:
    an MLX array, the derivative kept), else by numpy on the current value, as for an MLX array."""

    __slots__ = ()
    _namespace = namespace

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: object, **kwargs: object) -> Any:
        return _ufunc(ufunc, method, inputs, kwargs)

    _wrap = staticmethod(_fresh)  # type: ignore[assignment]

    @staticmethod
    def _update(value: Any, index: object, item: Any) -> Any:
        new = mx.array(value)  # a new array over the same graph: writing it leaves value as it was
        new[_mx_index(index)] = item
        return new

    def __getitem__(self, index: Any) -> Any:
        return super().__getitem__(_mx_index(_unwrap(index)))

    def __mlx_array__(self) -> Any:
        return self.value

    def __array__(self, dtype: DTypeLike | None = None, copy: bool | None = None) -> Any:
        # as an MLX array's own conversion (a derivative lost through it is checked as for one)
        return np.asarray(self.value, dtype=dtype)

    @property
    def device(self) -> Any:
        return mx.default_device()


def _mx_index(index: object) -> Any:
    """An index MLX takes: numpy integer arrays (an advanced index) as MLX arrays, the rest as it is (a
    boolean mask too, which MLX refuses with its own error: it has no boolean indexing)."""
    if isinstance(index, tuple):
        return tuple(_mx_index(i) for i in index)
    if isinstance(index, np.ndarray) and index.dtype.kind in "iub":  # a mask: MLX's own error (no boolean indexing)
        return mx.array(index)
    return index


def _standin(value: object) -> Any:
    """A captured array, a cache or an output buffer as ``f`` gets it: a stand-in over a fresh MLX array."""
    return WritableArray(value)


class _WriteRefused(TypeError):
    """A write of ``f`` into a guarded alias (:class:`_Guarded`): ``f`` runs again over stand-ins."""


def _refused(self: Any, other: Any) -> Any:
    """An in-place operator of a guarded alias."""
    raise _WriteRefused(
        "a write into a captured array's guarded alias (diffinterface runs f again over writable stand-ins)"
    )


def _refused_item(self: Any, index: Any, value: Any) -> None:
    """Item assignment into a guarded alias."""
    _refused(self, value)


class _Guarded(mx.array):
    """A captured array as ``f`` reads it first: a fresh MLX array (the user's is never written), of
    MLX's own array type, which every MLX function takes: ``mx.matmul``, ``mx.addmm`` (an ``mlx.nn.Linear``),
    ``mx.concatenate``, ``mx.where``, ``mx.take`` and ``mx.einsum`` refuse a :class:`WritableArray`,
    whose ``__mlx_array__`` they do not read. A write into it (item assignment, an in-place operator,
    also into one of its slices, which are guarded aliases in turn: numpy's views would write it)
    raises :class:`_WriteRefused`, and ``f`` runs again over stand-ins, from then on for the prep
    (``Target.guarded_with``, ``Adapter.refused_write``)."""

    def __getitem__(self, index: Any) -> Any:
        return _Guarded(super().__getitem__(_mx_index(_unwrap(index))))

    __setitem__ = _refused_item
    __iadd__ = __isub__ = __imul__ = __itruediv__ = __ifloordiv__ = __imod__ = __ipow__ = _refused
    __imatmul__ = __iand__ = __ior__ = __ixor__ = __ilshift__ = __irshift__ = _refused


def _guarded(value: object) -> Any:
    """A captured array as ``f`` reads it first: :class:`_Guarded` over a fresh MLX array."""
    return _Guarded(_to_mx(value))


def _output(y: Any, call: str) -> Any:
    """``f``'s output as one MLX array: a numpy value (a constant, or computed through numpy: the
    check at preparation tells) converted, a structure refused."""
    y = _unwrap(y)
    if isinstance(y, mx.array):
        return y
    if isinstance(y, (tuple, list, dict)):
        raise structured_output(y, call)
    if is_array(y) or isinstance(y, (float, int, complex)):
        return _to_mx(y)
    raise TypeError(f"{call}: f returned a {type(y).__name__}; expected an array")


class _Function:
    """``f`` over fresh MLX duplicates of its captured state, caches and output buffer, one set per
    evaluation: ``function(ctx, state)`` gives ``z -> f(z)``. ``ctx`` and ``state`` are the contexts'
    values and the captured state as MLX arrays (:meth:`arguments`: read at every call).

    ``f`` gets its own copy of ``z`` (``mx.array(z)``, a copy MLX differentiates through): an in-place
    operator or an item assignment of ``f`` on its input replaces that array's node, which every other
    holder of the array object sees. MLX's transforms pass ``f`` copies of their own, but the runners
    also call ``f`` plainly for ``f(x)`` beside them, on the ``x`` the transforms then differentiate at
    (and on the user's own array for an MLX ``x``): before 2026-12-08 an ``f`` that wrote into its input
    (``z *= 2``) had its Jacobian taken at the written ``x`` (silently wrong) and the user's ``x``
    written. Measured: no cost on a prepared (compiled) gradient at n = 10 and 1e6; a few us of a
    170 us one-shot call at n = 10."""

    __slots__ = ("target", "kinds", "simple", "compilable")

    def __init__(self, target: Target, contexts: tuple[Any, ...]) -> None:
        self.target = target
        self.kinds = tuple(type(c) for c in contexts)
        # captured state f only reads (a number rebound between calls) is an argument too: mx.compile would
        # bake it into the program
        self.simple = not contexts and target.stateless
        self.compilable = True

    def arguments(self, contexts: tuple[Any, ...]) -> tuple[list[Any], list[Any]]:
        if self.simple:
            return [], []
        ctx = [_mx_tree(c.value) for c in contexts]
        plan = self.target.plan
        state = [_mx_tree(v) for v in plan.read()] if plan is not None and self.target.has_state else []
        return ctx, state

    def __call__(self, ctx: list[Any], state: list[Any]) -> Any:
        target, call = self.target, self.target.call
        if self.simple:
            f = target.f

            def plain(z: Any) -> Any:
                try:
                    y = f(mx.array(z))
                except NumpyWriteError as error:
                    raise NumpyWriteError(f"{call}: f {error}") from None
                return target.checked(_output(y, call))

            return plain
        kinds = self.kinds
        guarded = target.y is None  # an output buffer is written by every call: stand-ins from the start

        def fn(z: Any) -> Any:
            # a Cache's arrays as stand-ins, a Constant's as fresh MLX arrays: f's writes reach neither
            # the user's arrays (an MLX array is written in place) nor the next evaluation
            values = [duplicate(v, _standin if kind is Cache else _fresh) for kind, v in zip(kinds, ctx)]

            def run(aliased: bool) -> Any:
                leaf = _guarded if aliased else _standin
                instance = target.instance(leaf, values=state if target.has_state else None)
                try:
                    y = instance(mx.array(z), *values)
                except NumpyWriteError as error:
                    raise NumpyWriteError(f"{call}: f {error}") from None
                return target.checked(_output(y, call))

            # f reads its captured arrays as guarded aliases (MLX arrays) until it writes into one
            return target.guarded_with(run, False, Adapter.refused_write) if guarded else run(False)

        return fn


# -- the operators ---------------------------------------------------------------------------------


def _jvp(fn: Any, x: Any, t: Any) -> tuple[Any, Any]:
    (y,), (out,) = mx.jvp(fn, [x], [t])
    return y, out


def _batched(one: Any, ts: tuple[Any, ...], vectorize: bool) -> tuple[Any, ...]:
    """``one(t)`` for each of ``ts``: one ``mx.vmap`` over the stacked batch where ``vectorize``,
    else a loop."""
    if len(ts) == 1 or not vectorize:
        return tuple(one(t) for t in ts)
    out = mx.vmap(one)(mx.stack(list(ts)))
    return tuple(out[i] for i in range(len(ts)))


def _jvps(fn: Any, x: Any, ts: tuple[Any, ...], vectorize: bool) -> tuple[Any, tuple[Any, ...]]:
    """``(f(x), (J t for t in ts))``."""
    if len(ts) == 1 or not vectorize:
        results = [_jvp(fn, x, t) for t in ts]
        return (results[0][0] if results else fn(x)), tuple(r[1] for r in results)
    return fn(x), _batched(lambda t: _jvp(fn, x, t)[1], ts, True)


def _vjps(fn: Any, x: Any, cts: tuple[Any, ...], vectorize: bool) -> tuple[Any, tuple[Any, ...]]:
    """``(f(x), (ct J for ct in cts))``."""
    if len(cts) == 1 or not vectorize:
        results = [mx.vjp(fn, [x], [ct]) for ct in cts]
        y = results[0][0][0] if results else fn(x)
        return y, tuple(r[1][0] for r in results)
    y = fn(x)
    return y, _batched(lambda ct: mx.vjp(fn, [x], [ct])[1][0], cts, True)


# a node of mx.export_to_dot's graph: its primitive's name (MLX's Primitive::name) as the node's label
_DOT_PRIMITIVE = re.compile(r'label ="(\w+)"')
# the primitives whose vmap drops an unbatched update into a batched source (module docstring)
_SLICE_UPDATES = frozenset({"SliceUpdate", "DynamicSliceUpdate"})


def _slice_updates(y: Any) -> bool:
    """Whether the lazy graph of ``y`` (``f(x)``, not evaluated) writes a slice, or shows no operation at
    all: its batches loop instead of ``vmap`` (module docstring). A ``y`` already evaluated has no graph
    left to read: an inner derivative's result, which ``SecondOrder(AutoMLX(), AutoMLX())``'s outer
    operator differentiates (its ``vmap`` went through the inner program's slice updates: a Hessian off
    by 1), or an ``f`` that returns ``x`` or a constant (nothing to batch). About 1 us a node of the
    graph, paid where a batch may vmap."""
    dot = io.StringIO()
    mx.export_to_dot(dot, y)
    primitives = set(_DOT_PRIMITIVE.findall(dot.getvalue()))
    return not primitives or not _SLICE_UPDATES.isdisjoint(primitives)


class _Info(Info):
    """MLX's :class:`Info`: with whether ``f`` writes a slice (:func:`_slice_updates`), where a batch of
    the call may ``vmap``; None where it cannot (the operator never batches, or ``x`` is one number)."""

    __slots__ = ("slice_updates",)

    def __init__(self, *args: Any, slice_updates: bool | None) -> None:
        super().__init__(*args)
        self.slice_updates = slice_updates


def _basis(shape: tuple[int, ...], dtype: Any) -> tuple[Any, ...]:
    n = math.prod(shape)
    eye = mx.eye(n, dtype=dtype)
    return tuple(mx.reshape(eye[i], shape) for i in range(n))


def _over_basis(one: Any, shape: tuple[int, ...], dtype: Any, width: int, vectorize: bool) -> Any:
    """``one(e)`` for each basis array ``e`` of ``shape``, flattened to ``width`` and stacked: an
    ``(n, width)`` array. Vectorised, one ``mx.vmap`` over the identity reshaped to ``(n, *shape)``
    (as a hand-written MLX Hessian is): no slice of it, no split of the result, so the compiled
    graph does not grow with n (splitting into n arrays and stacking them again cost 19x MLX's own
    Hessian at n = 1000)."""
    n = math.prod(shape)
    if n == 0:
        return mx.zeros((0, width), dtype=dtype)
    if vectorize and n > 1:
        out = mx.vmap(one)(mx.reshape(mx.eye(n, dtype=dtype), (n, *shape)))
        return mx.reshape(out, (n, width))
    return mx.stack([mx.reshape(one(e), (width,)) for e in _basis(shape, dtype)], axis=0)


def _jacobian(fn: Any, x: Any, info: Info, forward: bool, vectorize: bool) -> tuple[Any, Any]:
    """``(f(x), J)`` with ``J`` shaped ``f(x).shape + x.shape``: columns by JVPs of the basis of x, or
    rows by VJPs of the basis of f(x)."""
    x_shape, y_shape = info.x_shape, info.y_shape
    n, m = math.prod(x_shape), math.prod(y_shape)
    y = fn(x)
    if forward:
        cols = _over_basis(lambda t: _jvp(fn, x, t)[1], x_shape, x.dtype, m, vectorize)
        flat = mx.transpose(cols) if n else mx.zeros((m, 0), dtype=x.dtype)
    else:
        flat = _over_basis(lambda ct: mx.vjp(fn, [x], [ct])[1][0], y_shape, y.dtype, n, vectorize)
    return y, mx.reshape(flat, y_shape + x_shape)


def _body(operator: Operator, forward: bool, info: Info, vectorize: bool) -> Any:
    """The operator at one point, ``(fn, x, ts) -> (primal, result)`` (the kit's ``Body`` over ``fn``).
    For hvp and hessian ``forward`` is the inner direction: True forward over reverse, False reverse
    over reverse (where MLX lacks a JVP inside the gradient: ``[scatter] JVP not yet implemented``)."""
    if operator is PUSHFORWARD:
        if forward:
            return lambda fn, x, ts: _jvps(fn, x, ts, vectorize)

        def pushforward(fn: Any, x: Any, ts: Any) -> Any:
            y, jac = _jacobian(fn, x, info, False, vectorize)
            return y, contract_all(jac, ts, x, True)

        return pushforward
    if operator is PULLBACK:
        if not forward:
            return lambda fn, x, ts: _vjps(fn, x, ts, vectorize)

        def pullback(fn: Any, x: Any, ts: Any) -> Any:
            y, jac = _jacobian(fn, x, info, True, vectorize)
            return y, contract_all(jac, ts, x, False)

        return pullback
    if operator is DERIVATIVE:
        if forward:
            return lambda fn, x, ts: _jvp(fn, x, mx.ones_like(x))
        return lambda fn, x, ts: _jacobian(fn, x, info, False, vectorize)
    if operator is GRADIENT:
        if not forward:
            return lambda fn, x, ts: tuple(mx.value_and_grad(fn)(x))

        def gradient(fn: Any, x: Any, ts: Any) -> Any:
            y, jac = _jacobian(fn, x, info, True, vectorize)
            return y, mx.reshape(jac, info.x_shape)

        return gradient
    if operator is JACOBIAN:
        return lambda fn, x, ts: _jacobian(fn, x, info, forward, vectorize)
    if operator in (HVP, HESSIAN) and not forward:  # reverse over reverse: the VJPs of value_and_grad

        def reverse_over_reverse(fn: Any, x: Any, ts: Any) -> Any:
            both = lambda z: list(mx.value_and_grad(fn)(z))  # noqa: E731
            y, g = both(x)
            zero = mx.zeros_like(y)
            one = lambda t: mx.vjp(both, [x], [zero, t])[1][0]  # noqa: E731
            if operator is HVP:
                return (y, g), _batched(one, tuple(ts), vectorize)
            n = math.prod(info.x_shape)
            flat = _over_basis(one, info.x_shape, x.dtype, n, vectorize)
            return (y, g), mx.reshape(flat, info.x_shape + info.x_shape)

        return reverse_over_reverse
    if operator is HVP:  # forward over reverse: the JVP of value_and_grad

        def hvp(fn: Any, x: Any, ts: Any) -> Any:
            both = lambda z: list(mx.value_and_grad(fn)(z))  # noqa: E731
            if len(ts) == 1 or not vectorize:
                results = [mx.jvp(both, [x], [t]) for t in ts]
                return (results[0][0][0], results[0][0][1]), tuple(r[1][1] for r in results)
            y, g = both(x)
            return (y, g), _batched(lambda t: mx.jvp(both, [x], [t])[1][1], ts, True)

        return hvp
    if operator is HESSIAN:

        def hessian(fn: Any, x: Any, ts: Any) -> Any:
            both = lambda z: list(mx.value_and_grad(fn)(z))  # noqa: E731
            y, g = both(x)
            n = math.prod(info.x_shape)
            flat = _over_basis(lambda t: mx.jvp(both, [x], [t])[1][1], info.x_shape, x.dtype, n, vectorize)
            return (y, g), mx.reshape(flat, info.x_shape + info.x_shape)

        return hessian
    if operator is SECOND_DERIVATIVE:

        def second_derivative(fn: Any, x: Any, ts: Any) -> Any:
            first = lambda z: list(_jvp(fn, z, mx.ones_like(z)))  # noqa: E731
            (y, der), (_, der2) = mx.jvp(first, [x], [mx.ones_like(x)])
            return (y, der), der2

        return second_derivative
    raise ValueError(operator)  # pragma: no cover - the frontend passes the operators above


# -- the runners -----------------------------------------------------------------------------------


# from this many elements of x or f(x), a one-shot call compiles (see Adapter.prepare)
ONESHOT_COMPILED_FROM = 100_000


class _Prepared:
    """One operator for one function: its ``plain`` and ``value`` runners (:meth:`runners`: they hold
    this object and it does not hold them, so a one-shot call's preparation, its function and its
    captured arrays are freed when the call returns, with no cycle for the garbage collector). Compiled
    (``mx.compile``) when prepared with ``compile=True`` and ``f``'s arguments allow it; at MLX's
    first refusal to evaluate inside the compiled trace, eager from then on (batches looped)."""

    __slots__ = (
        "operator",
        "function",
        "forward",
        "switchable",
        "info",
        "x_dtype",
        "y_dtype",
        "compiled",
        "vectorize",
    )

    def __init__(
        self,
        operator: Operator,
        function: _Function,
        forward: bool,
        switchable: bool,
        info: Info,
        x_dtype: Any,
        jit: bool,
        vectorize: bool,
    ) -> None:
        self.operator, self.function, self.forward, self.info = operator, function, forward, info
        self.vectorize = vectorize  # batches vmap (else loop: f writes a slice, see _slice_updates)
        self.switchable = switchable and forward  # mode=None in forward mode, or the second order's forward inner
        self.x_dtype = x_dtype
        self.y_dtype = _mx_dtype(info.y_dtype) if not isinstance(info.y_dtype, mx.Dtype) else info.y_dtype
        self.compiled: dict[bool, Any] | None = None
        if jit:
            self.compiled = {flag: mx.compile(self._program(flag, vectorize)) for flag in (False, True)}

    def runners(self) -> Runners:
        """The plain and value runners (:meth:`_runner`), this object as their data."""
        return Runners(self._runner(False), self._runner(True), self)

    def _program(self, value: bool, vectorize: bool) -> Any:
        body = _body(self.operator, self.forward, self.info, vectorize)
        if self.operator.order == 1:  # custom rules with both directions use this operator's (see mlx_rules)
            inner, mode = body, ("forward" if self.forward else "reverse")

            def body(fn: Any, x: Any, ts: Any) -> Any:
                with prefer(mode):
                    return inner(fn, x, ts)

        function = self.function

        def program(x: Any, ts: list[Any], ctx: list[Any], state: list[Any]) -> Any:
            primal, result = body(function(ctx, state), x, tuple(ts))
            return (primal, result) if value else result

        return program

    def _inputs(self, x: Any, tangents: tuple[Any, ...]) -> tuple[Any, list[Any]]:
        x = _to_mx(x, self.x_dtype)
        tdtype = self.y_dtype if self.operator is PULLBACK else self.x_dtype
        return x, [_to_mx(t, tdtype) for t in tangents]

    def _runner(self, value: bool) -> Any:
        operator = self.operator

        second = operator.order == 2
        oneshot = self.info.oneshot  # its results checked for a lost derivative (see checked)

        def run(x: Any, tangents: tuple[Any, ...], contexts: tuple[Any, ...]) -> Any:
            token = SECOND_ORDER.set(True) if second else None  # an opaque custom rule refuses it (mlx_rules)
            try:
                with _context(self.x_dtype):
                    xm, ts = self._inputs(x, tangents)
                    ctx, state = self.function.arguments(contexts)
                    out, escapes = self._recorded(value, xm, ts, ctx, state)
                    if escapes:  # f read a value out of MLX: does its derivative still hold?
                        _check_escapes(self.function, (ctx, state), xm, escapes)
            finally:
                if token is not None:
                    SECOND_ORDER.reset(token)
            if oneshot:
                self.checked(out[1] if value else out, xm, ctx, state)
            if value:
                primal, result = out
                return value_form(operator, primal, result, _same)
            return out

        return run

    def _recorded(self, value: bool, x: Any, ts: list[Any], ctx: list[Any], state: list[Any]) -> tuple[Any, list[str]]:
        """:meth:`_call`'s result and the reads out of MLX it made (``_ESCAPES``)."""
        saved = _ESCAPES.found
        found: list[str] = []
        _ESCAPES.found = found
        try:
            return self._call(value, x, ts, ctx, state), found
        finally:
            _ESCAPES.found = saved

    def checked(self, result: Any, x: Any, ctx: list[Any], state: list[Any]) -> None:
        """A one-shot call's :func:`_check_lost`, after the call and only where every result is zero:
        a derivative lost on every path gives exact zeros (no path from f(x) back to x), so a nonzero
        result, or a NaN, means the check would pass. The check itself (f again and a vector-Jacobian
        product) then runs only for a zero derivative, which a prepared call pays once at preparation
        (``output_info``): a one-shot gradient at n = 1e6 evaluated f three times for it."""
        parts = result if isinstance(result, tuple) else (result,)
        if any(p.size and mx.any(p != 0).item() for p in parts):
            return
        function = self.function
        with _context(self.x_dtype):
            _check_lost(function, (ctx, state), x, function(ctx, state)(x), function.target.call)

    def _call(self, value: bool, x: Any, ts: list[Any], ctx: list[Any], state: list[Any]) -> Any:
        try:
            return self._direct(value, x, ts, ctx, state)
        except Exception as error:
            if not self.switchable:
                if self.forward and _transform_refused(error):
                    raise NotImplementedError(
                        f"{self.function.target.call}: MLX has no forward-mode derivative (JVP) of an operation it "
                        f"differentiates here ({_first_line(error)}); use reverse mode (mode='reverse', or "
                        f"mode=None, which turns to reverse mode where forward mode fails)"
                    ) from error
                raise
            # forward mode failed where reverse mode may not (MLX lacks some JVPs): the other direction, and
            # for good if it succeeds; if it fails too, f's own error is raised as the first run raised it
            self.switchable = False
            self.forward = not self.forward
            jit = self.compiled is not None
            self.compiled = None
            try:
                out = self._direct(value, x, ts, ctx, state)
            except Exception:
                self.forward = not self.forward
                raise error from None
            if jit:
                self.compiled = {flag: mx.compile(self._program(flag, self.vectorize)) for flag in (False, True)}
            return out

    def _direct(self, value: bool, x: Any, ts: list[Any], ctx: list[Any], state: list[Any]) -> Any:
        compiled = self.compiled
        if compiled is not None and self.function.compilable and _compilable(ctx) and _compilable(state):
            try:
                return compiled[value](x, ts, ctx, state)
            except ValueError as error:
                if not _refused_eval(error):
                    raise
                self.function.compilable = False  # f reads a traced value: eager from now on
        with _READS_SEEN:
            try:
                return self._program(value, self.vectorize)(x, ts, ctx, state)
            except ValueError as error:
                if not _refused_eval(error):
                    raise
                return self._program(value, False)(x, ts, ctx, state)  # mx.vmap refused it too: a loop


def _same(value: Any) -> Any:
    return value


def _transform_refused(error: BaseException) -> bool:
    """Whether MLX's transformation itself raised ``error`` (a primitive without the derivative asked for,
    ``[scatter] JVP not yet implemented``): a RuntimeError from MLX's C++ code, whose innermost Python frame
    is this module's call of ``mx.jvp``/``mx.vjp``, not ``f``'s own code."""
    frame = innermost_frame(error)
    return isinstance(error, RuntimeError) and frame is not None and frame.f_globals.get("__name__") == __name__


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# -- the adapter -----------------------------------------------------------------------------------


class Adapter(_Base):
    """MLX; see the module docstring."""

    engine_name = "MLX"

    @staticmethod
    def rebinding_operand(value: Any) -> bool:
        """An MLX array or a stand-in: under closure='const', a write of one into a captured numpy array
        (an in-place operator, item assignment, ``out=``, ``np.copyto``) is the call's error: numpy
        writes its values alone (or hands an in-place operator to MLX's, which rebinds the name), and
        MLX gives no way to tell an array computed from ``x`` from a constant."""
        return isinstance(value, (mx.array, _Writable))

    @staticmethod
    def refused_write(error: BaseException) -> bool:
        """A write into a guarded alias of a captured array (:class:`_Guarded`), or numpy refusing one
        (the kit's default): ``f`` runs again over stand-ins."""
        return isinstance(error, _WriteRefused) or _Base.refused_write(error)

    # array_family's record declares the accuracy (float64 results are float32-accurate where f uses
    # exp, sin, cos, erf): the base's accuracy() reads it, so that SecondOrder(AutoFiniteDiff(), AutoMLX())
    # and AutoFiniteDiff() on an MLX x take the same float32-sized steps
    array_family = "mlx"
    traceable_results = True  # MLX's transforms nest: an outer mx.grad differentiates the runners' results
    local_sparsity_fallback = True  # AutoSparse's default detector on mx.* code: the pattern at and around x
    complex_dtypes = ("complex64",)  # MLX has no complex128 (output_info's TypeError)

    def evaluate(self, target: Target, x: Any, contexts: Contexts) -> Any:
        """``f(x)`` once, over fresh MLX duplicates of its state, caches and buffer."""
        function = _Function(target, contexts)
        xm = _to_mx(x)
        with _context(xm.dtype):
            return function(*function.arguments(contexts))(xm)

    def output_info(self, target: Target, x: Any, contexts: Contexts, oneshot: Any) -> Any:
        function = _Function(target, contexts)
        xm = _to_mx(x)
        with _context(xm.dtype):
            args = function.arguments(contexts)
            fn = function(*args)
            y = fn(xm)  # lazy: its shape and dtype, nothing computed
            if not oneshot:  # a one-shot call checks its results instead (_Prepared.checked)
                _check_lost(function, args, xm, y, target.call)
        layout = target.layout
        complex_x = layout is not None and layout.xs.has_complex
        if (complex_x or y.dtype == mx.complex64) and xm.dtype == mx.float64:
            raise TypeError(
                f"{target.call}: MLX has no complex128, so a complex {'x' if complex_x else 'f(x)'} of float64 "
                f"precision would be computed in complex64 (float32 precision); use AutoJAX() or AutoTorch() for "
                f"complex128, or pass float32 / complex64 arrays to AutoMLX()"
            )
        batches = target.operator is not SECOND_DERIVATIVE and (
            target.operator is not GRADIENT or self.backend.mode == "forward"  # a gradient: value_and_grad
        )
        return _Info(
            tuple(y.shape),
            _np_dtype(y.dtype),
            None,
            tuple(np.shape(x)),
            oneshot,
            slice_updates=_slice_updates(y) if batches else None,
        )

    def prepare(
        self, operator: Operator, target: Target, x: Any, tangents: Any, contexts: Contexts, info: Info
    ) -> Runners:
        if operator.order == 1:
            forward, switchable = self.forward(operator, info), self.backend.mode is None
        else:  # hvp and hessian: forward over reverse first; the second derivative: forward over forward
            forward, switchable = True, operator is not SECOND_DERIVATIVE
        function = _Function(target, contexts)
        # a one-shot call runs eagerly (mx.compile's trace costs more than it saves once), but on
        # ONESHOT_COMPILED_FROM elements or more, where the compiled program's fused passes win
        large = max(shape_size(info.x_shape), shape_size(info.y_shape)) >= ONESHOT_COMPILED_FROM
        jit = bool(self.backend.compile) and (not info.oneshot or large)
        xm = _to_mx(x)
        if isinstance(info, _Info):
            slices = info.slice_updates
        else:  # an Info made elsewhere: f's graph read here (_slice_updates)
            with _context(xm.dtype):
                slices = _slice_updates(function(*function.arguments(contexts))(xm))
        prepared = _Prepared(operator, function, forward, switchable, info, xm.dtype, jit, not slices)
        return prepared.runners()


def _check_escapes(function: _Function, args: tuple[Any, Any], x: Any, escapes: list[str]) -> None:
    """Raises :class:`LostDerivativeError` where ``f`` read an MLX array's values into Python or numpy
    (``escapes``) and MLX's derivative of f along a random direction (seeded) disagrees with a central
    difference of f (two steps: their difference bounds the truncation error, so a kink or a branch
    switch inside the step widens the tolerance instead of raising), as torch's and TensorFlow's
    adapters check; real floating x and f(x) only. A read that only steers control flow passes."""
    floating = (mx.float16, mx.bfloat16, mx.float32, mx.float64)
    if x.dtype not in floating or x.size == 0:
        return
    fn = function(*args)
    rng = np.random.default_rng(0)
    v = rng.standard_normal(x.shape)
    v = mx.array(v / max(float(np.linalg.norm(v)), 1e-300), dtype=x.dtype)
    y = fn(x)
    if y.dtype not in floating or y.size == 0:
        return
    w = mx.array(rng.standard_normal(y.shape), dtype=y.dtype)
    try:
        _, (g,) = mx.vjp(fn, [x], [w])
    except Exception:  # noqa: BLE001 - a function MLX cannot reverse: the call's own result stands
        return
    ad = float(mx.sum(g * v))
    eps = max(float(np.finfo(_np_dtype(x.dtype)).eps), float(np.finfo(_np_dtype(y.dtype)).eps))
    h = eps ** (1 / 3) * max(1.0, float(mx.max(mx.abs(x))))

    def central(step: float) -> float:
        return float(mx.sum(w * (fn(x + step * v) - fn(x - step * v)))) / (2 * step)

    fd, fd2 = central(h), central(2 * h)
    noise = eps * float(mx.sum(mx.abs(w) * mx.abs(y))) / h
    error = escaped_error(
        function.target.call, "MLX", escapes, ad, fd, fd2, noise, eps, "an MLX array (mlx.core, or array_namespace(x))"
    )
    if error is not None:
        raise error


def _check_lost(function: _Function, args: tuple[Any, Any], x: Any, y: Any, call: str) -> None:
    """Raises :class:`LostDerivativeError` where ``f(x)`` changes with ``x`` but no path MLX
    differentiates leads from ``f(x)`` back to ``x`` (``mx.stop_gradient`` on the whole way, a round
    trip through numpy or ``.item()``): a NaN cotangent reaches ``x`` along every path MLX follows
    (``0 * NaN`` is NaN), so a gradient without a NaN means none; a constant ``f`` is fine (its
    derivatives are zeros). A step of ``sqrt(eps)`` along a fixed direction tells them apart (an ``f``
    constant over a step, ``floor`` away from its jumps, counts as constant)."""
    floating = (mx.float16, mx.bfloat16, mx.float32, mx.float64)
    if y.dtype not in floating or x.dtype not in floating or x.size == 0 or y.size == 0:
        return
    try:
        _, (g,) = mx.vjp(function(*args), [x], [mx.full(y.shape, float("nan"), dtype=y.dtype)])
        if mx.any(mx.isnan(g)).item():
            return
    except Exception:  # noqa: BLE001 - a function MLX cannot reverse: the operator's own call reports it
        return
    # the coarser precision of x and f(x): f may compute in float32 from a float64 x (mx.array of a numpy
    # float64 array is float32), where a float64-sized step would vanish
    eps = max(float(np.finfo(_np_dtype(x.dtype)).eps), float(np.finfo(_np_dtype(y.dtype)).eps))
    step = math.sqrt(eps) * max(1.0, float(np.asarray(mx.max(mx.abs(x)))))
    direction = mx.reshape(mx.linspace(0.5, 1.5, x.size, dtype=x.dtype), x.shape)
    moved = function(*args)(x + step * direction)
    if mx.array_equal(moved, y, equal_nan=True).item():
        return
    raise LostDerivativeError(
        f"{call}: f(x) changes with x, but no derivative reaches x through MLX's graph (mx.stop_gradient on "
        f"the way, or a value read out of MLX: np.asarray(a), np.sin(a), a.item(), a.tolist(), float(a), or a "
        f"write into a numpy array), so every derivative would come out zero. Compute f(x) with mlx.core "
        f"operations (or array_namespace(x)) throughout; with closure='const', captured numpy buffers are "
        f"written as numpy: use the default closure='duplicated'. {LOST_CAUSES}."
    )
