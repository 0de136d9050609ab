"""``AutoAutograd``: every operator on HIPS autograd (``make_vjp``, ``make_jvp``), numpy in, numpy out.

- reverse (gradient, pullback): one trace with ``make_vjp``, then one backward pass per cotangent
  (a batch of cotangents, and the rows of a reverse Jacobian, share the trace).
- forward (pushforward, derivative): ``make_jvp``, one trace per tangent (autograd has no ``vmap``;
  a forward Jacobian is ``x.size`` traces over a basis built at preparation).
- jacobian: ``mode=None`` picks forward when ``x.size <= f(x).size``, else reverse.
- hvp: forward over reverse (``make_jvp`` of the gradient) for one tangent; for a batch, reverse
  over reverse (one trace of the gradient, one backward pass per tangent), which is cheaper than a
  trace per tangent. Where a primitive has no JVP (autograd defines VJPs for more functions than
  JVPs), forward over reverse raises ``NotImplementedError`` and the prep switches to reverse over
  reverse for good. hessian: reverse over reverse (one trace, ``x.size`` backward passes);
  second derivative: forward over forward, or reverse over reverse (2 ``f(x).size`` backward
  passes) once a primitive without a JVP was met, as for hvp.
- ``mode="forward"``/``"reverse"`` forces every first-order operator; a pushforward in reverse mode
  or a pullback in forward mode goes through the Jacobian.

Arrays: ``f`` receives numpy arrays, boxed by autograd while it traces. Inside a trace
``array_namespace(x)`` gives autograd's numpy under the array API's names (``concat``, ``pow``,
``permute_dims``, ``asarray``...), so array-API code runs unchanged: while the adapter's traces run,
autograd's registry boxes numpy's arrays and scalars in a subclass of its ``ArrayBox`` with
``__array_namespace__`` and ``device`` (:class:`_Box`), whose ``float(t)``, ``int(t)`` and
``complex(t)`` are the call's error naming the read. torch and jax inputs are
converted to numpy and the results back. float32 stays float32.

Captured arrays, caches and output buffers reach ``f`` as :class:`WritableArray` stand-ins over a
read-only view of the user's array (nothing is copied until ``f`` writes): writing a traced value into a numpy array would drop its derivative (or
fail: "setting an array element with a sequence"), so item assignment is a functional update, a
primitive with its own VJP and JVP.

Size: over 400 lines in one module, because an adapter is the registry's unit (``AutoAutograd.adapter``
names one module, imported at first use).
"""

from __future__ import annotations

import functools
import math
import sys
import threading
import typing
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import autograd.core
import autograd.numpy
import numpy as np
from autograd.extend import defjvp, defvjp, primitive, vspace
from autograd.numpy.numpy_boxes import ArrayBox
from autograd.numpy.numpy_vjps import unbroadcast_f
from autograd.tracer import Box, getval, new_box

from diffinterface.extend import (
    DERIVATIVE,
    GRADIENT,
    HESSIAN,
    HVP,
    NUMPY,
    PULLBACK,
    PUSHFORWARD,
    SECOND_DERIVATIVE,
    Info,
    LostDerivativeError,
    Operator,
    Runner,
    Runners,
    StandInConversionError,
    basis,
    const_write_error,
    context_values,
    contract_all,
    copy_leaf,
    duplicate,
    family,
    family_of_type,
    innermost_frame,
    is_array,
    operand_error,
    raised_by,
    read_only_alias,
    shape_size,
    standin_error,
    structured_output,
    to_family,
    unwrap,
    value_form,
)
from diffinterface.extend import (
    Adapter as _Base,
)
from diffinterface.extend import (
    WritableArray as _Writable,
)

if TYPE_CHECKING:
    from typing import TypeAlias

    from numpy.typing import ArrayLike, DTypeLike

    from diffinterface.extend import Array, Contexts, Target

    # an array as autograd traces it: numpy's, or a box of the trace (an ArrayBox over numpy)
    Traced: TypeAlias = "np.ndarray | Box"

# autograd ships no type information, and a type checker reading its source sees neither the
# functions that ``autograd.numpy`` creates at import (``wrap_namespace``: ``reshape``, ``_astype``...)
# nor what ``make_vjp``/``make_jvp`` return (their decorator hides it): both are declared here.
anp: Any = autograd.numpy
# make_vjp(fun, x) -> (vjp: cotangent -> gradient, f(x)); make_jvp(fun, x)(t) -> (f(x), J t)
make_vjp: Callable[[Callable[[Any], Any], Any], tuple[Callable[[Any], Any], Any]] = autograd.core.make_vjp
make_jvp: Callable[[Callable[[Any], Any], Any], Callable[[Any], tuple[Any, Any]]] = autograd.core.make_jvp

# -- the functional update and the stand-in ---------------------------------------------------


def _unwrapped(value: object) -> Any:
    """``value`` with the stand-ins in its lists, tuples and dicts replaced by their values."""
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrapped(v) for v in value)
    if isinstance(value, dict):
        return {k: _unwrapped(v) for k, v in value.items()}
    return unwrap(value)


def _holds_box(value: object) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_holds_box(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_box(v) for v in value.values())
    return isinstance(value, Box)


@primitive
def set_item(value: Any, index: Any, item: Any) -> Any:
    """``value`` with ``value[index] = item``, as a new array (a primitive: derivatives flow through)."""
    out = np.array(value, copy=True)
    out[index] = item
    return out


defvjp(
    set_item,
    lambda ans, value, index, item: lambda g: set_item(g, index, 0.0),
    lambda ans, value, index, item: unbroadcast_f(item, lambda g: g[index]),
    argnums=(0, 2),
)
defjvp(
    set_item,
    lambda g, ans, value, index, item: set_item(g, index, 0.0),
    lambda g, ans, value, index, item: set_item(np.zeros(np.shape(ans), dtype=ans.dtype), index, g),
    argnums=(0, 2),
)


class _Namespace:
    """autograd's numpy under the array API's names: what ``array_namespace`` gives inside a trace."""

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
    }

    def __getattr__(self, name: str) -> Any:  # looked up once: later reads find the instance attribute
        value = getattr(anp, self._RENAMED.get(name, name))
        setattr(self, name, value)
        return value

    @staticmethod
    def asarray(obj: Any, dtype: DTypeLike | None = None, device: str | None = None, copy: bool | None = None) -> Any:
        obj = unwrap(obj)
        if isinstance(obj, Box):
            return obj if dtype is None or getval(obj).dtype == dtype else anp._astype(obj, dtype)
        return np.array(obj, dtype=dtype, copy=True) if copy else np.asarray(obj, dtype=dtype)

    @staticmethod
    def astype(x: Traced, dtype: DTypeLike, copy: bool = True) -> Traced:
        return anp._astype(unwrap(x), dtype)

    @staticmethod
    def reshape(x: Traced, shape: tuple[int, ...], copy: bool | None = None) -> Traced:
        return anp.reshape(unwrap(x), shape)

    @staticmethod
    def matrix_transpose(x: Traced) -> Traced:
        return anp.swapaxes(unwrap(x), -1, -2)

    @staticmethod
    def flip(x: Traced, axis: int | tuple[int, ...] | None = None) -> Traced:
        """The array API's ``flip`` as a reversed slice, which autograd differentiates: autograd defines
        no derivative of numpy's ``flip`` (its JVP and VJP are missing, both modes fail)."""
        value: Any = unwrap(x)  # an ArrayBox indexes as its array (autograd's getitem)
        ndim = anp.ndim(value)
        axes = range(ndim) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
        reversed_axes = {a % ndim for a in axes} if ndim else set()
        return value[tuple(slice(None, None, -1) if i in reversed_axes else slice(None) for i in range(ndim))]

    def __repr__(self) -> str:
        return "<the array API over autograd.numpy (diffinterface)>"


namespace: _Namespace = _Namespace()


class WritableArray(_Writable):
    """What ``f`` gets for a captured array, a cache or an output buffer under ``AutoAutograd``.

    Its slices are views, as numpy's (the kit's, see ``diffinterface.extend.WritableArray``): Python
    runs ``buf[0:2] += x`` as ``t = buf[0:2]; t += x; buf[0:2] = t``, where ``t += x`` writes into
    ``buf`` and the store is the same write again (skipped); ``part = buf[1:3]; part *= x`` writes
    into ``buf`` the same way. numpy's functions take it through numpy's own dispatch
    (``__array_ufunc__``, ``__array_function__``): ``np.sin(buf)``, ``anp.sin(buf[0:2])`` (autograd
    hands numpy a stand-in, not being one of its boxes) and ``A @ buf`` with a numpy ``A`` compute
    with autograd's function of the same name on the current value, so a value that depends on ``x``
    keeps its derivative."""

    __slots__ = ()
    _namespace = namespace
    _copies = True  # buf[[0, 2]]: a stand-in over the copy (c *= x, c[0] = v are functional updates of it)

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: object, **kwargs: object) -> Any:
        out = kwargs.get("out")
        targets = out if isinstance(out, tuple) else (out,)
        if out is not None and any(isinstance(t, _Writable) for t in targets):
            # out= a stand-in (np.multiply(buf[1:3], x, out=buf[1:3])): the result, then the stand-in's item
            # assignment, a functional update that keeps the derivative (numpy would call this hook again
            # for the stand-in in out=, without end)
            result = self.__array_ufunc__(ufunc, method, *inputs, **{k: v for k, v in kwargs.items() if k != "out"})
            for target, value in zip(targets, result if isinstance(result, tuple) else (result,)):
                typing.cast("Any", target)[...] = value  # a stand-in, or numpy's own array
            return out
        own = getattr(anp, ufunc.__name__, None) if method == "__call__" and "out" not in kwargs else None
        values = [unwrap(v) for v in inputs]
        if own is not None:
            return own(*values, **kwargs)
        if any(isinstance(v, Box) for v in values):  # np.add.reduce(buf), out=: no autograd function for it
            raise StandInConversionError(
                f"numpy's {ufunc.__name__}.{method}{' with out=' if 'out' in kwargs else ''} was given a "
                f"stand-in holding a value that depends on x, which autograd cannot differentiate"
            )
        return getattr(ufunc, method)(*values, **kwargs)

    def __array_function__(
        self, func: Callable[..., Any], types: object, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if func is np.copyto and len(args) == 2 and not kwargs and isinstance(args[0], _Writable):
            args[0][...] = args[1]  # np.copyto(buf[1:3], x): the stand-in's item assignment (the derivative kept)
            return None
        module = {"numpy": anp, "numpy.linalg": anp.linalg, "numpy.fft": anp.fft}.get(func.__module__)
        own = getattr(module, func.__name__, None) if module is not None else None
        args, kwargs = _unwrapped(args), _unwrapped(kwargs)
        if own is not None:
            return own(*args, **kwargs)
        if _holds_box((args, kwargs)):
            raise StandInConversionError(
                f"{func.__module__}.{func.__name__} was given a stand-in holding a value that depends on x, "
                f"and autograd has no version of it that carries the derivative"
            )
        return func(*args, **kwargs)

    @staticmethod
    def _wrap(value: Any) -> Any:
        """A read-only view of the user's array (no copy: every write is a functional update, and an
        in-place method such as ``a.fill(0)`` raises instead of changing the user's array)."""
        if isinstance(value, Box):
            return value
        view = np.asarray(to_family(value, NUMPY)).view()
        view.flags.writeable = False
        return view

    _update = staticmethod(set_item)

    def __array__(self, dtype: DTypeLike | None = None, copy: bool | None = None) -> np.ndarray:
        if isinstance(self.value, Box):  # anp.sin(buf) would compute on the value and drop the derivative
            raise StandInConversionError(
                "a stand-in holding a value that depends on x was converted to a numpy "
                "array, which would drop its derivative"
            )
        return np.asarray(self.value, dtype=dtype)


# -- f as the adapter calls it -----------------------------------------------------------------


class _Function:
    """``fn(x, contexts) -> y``: ``f`` over stand-ins for its captured state, caches and output buffer."""

    __slots__ = ("target", "simple")

    def __init__(self, target: Target, contexts: Contexts) -> None:
        self.target = target
        self.simple = not contexts and target.plain

    def __call__(self, x: Traced, contexts: Contexts) -> Any:
        if self.simple:
            return _output(unwrap(self.target.f(x)), x, self.target)
        target = self.target

        def run(aliased: bool) -> Any:
            values = (
                context_values(
                    contexts,
                    _writable,
                    _aliased_constant if aliased else _copied_constant,
                )
                if contexts
                else ()
            )
            leaf = _copied_stand_in if target.copy_state else WritableArray
            fn = target.f if target.plain else target.instance(leaf, guard=_read_only if aliased else None)
            return unwrap(fn(x, *values))

        # f reads its captured arrays and constants as read-only numpy views (built once, see
        # StatePlan.aliased) until it writes into one; from then on it gets writable stand-ins and copies
        return _output(target.guarded_with(run, bool(contexts), Adapter.refused_write), x, target)

    def bound(self, contexts: Contexts) -> Callable[[Traced], Any]:
        """``z -> self(z, contexts)`` for the evaluations of one call (a forward Jacobian's columns).
        Where ``f``'s state is arrays and numbers it cannot rebind (``StatePlan.cacheable``) and no
        contexts, ``f`` over read-only views of it is looked up once for them all instead of at each
        evaluation (the state stays what it was: nothing else runs in between); the first write into
        a view goes through :meth:`__call__`, which reruns over stand-ins and copies from then on."""
        target, plan = self.target, self.target.plan
        if self.simple or contexts or target.y is not None or plan is None or not (plan.cacheable and plan.aliases):
            return lambda z: self(z, contexts)
        aliased = target.instance(WritableArray, guard=_read_only)

        def call(z: Traced) -> Any:
            if plan.aliases:
                try:
                    return _output(unwrap(aliased(z)), z, target)
                except Exception as error:
                    if not raised_by(error, Adapter.refused_write):
                        raise  # f's own error, after one run of f
            return self(z, contexts)  # over copies (a write into a view: learnt there, for this prep)

        return call


def _writable(value: Any) -> Any:
    """A Cache value's duplicate: writable stand-ins for its arrays."""
    return duplicate(value, WritableArray)


def _aliased_constant(value: Any) -> Any:
    return duplicate(value, _constant_alias)


def _copied_constant(value: Any) -> Any:
    return duplicate(value, _constant_copy)


def _output(y: Any, x: Traced, target: Target) -> Any:
    """``f``'s output, checked: one array (not a tuple), and, in a trace, a box of the trace unless ``f``
    is constant. A numpy array of boxes (``np.array([z[0], z[1]])``, ``np.asarray(z)``) is what numpy
    makes of traced values: autograd would return zero derivatives (it only warns "Output seems
    independent of input"), so it is an error."""
    if isinstance(y, (tuple, list, dict)):
        raise structured_output(y, target.call)
    expected = target.y_shape  # f(x) of the shape the runner's bases were made for (autograd would broadcast)
    if expected is not None:
        value = y
        while isinstance(value, Box):  # a box's own .shape is a traced np.shape: 0.9 us, per column of a Jacobian
            value = value._value
        if getattr(value, "shape", None) != expected:
            target.checked(value)  # raises where it is not (a number: its shape read there)
    if isinstance(y, Box) or not isinstance(x, Box):
        return y
    if isinstance(y, np.ndarray) and y.dtype == object and any(isinstance(v, Box) for v in y.flat):
        raise LostDerivativeError(
            f"{target.call}: f(x) is a numpy array of autograd's traced values (np.array([...]) or np.asarray of "
            f"values computed from x), and numpy drops their derivatives, so every derivative would come out zero; "
            f"build the output with autograd.numpy (anp.stack, anp.array, anp.concatenate) or, in array-API "
            f"code, xp.stack"
        )
    return y


def _box_refused(error: BaseException) -> bool:
    """numpy refusing an autograd box where it needs a number (a box written into a numpy array:
    ``a[0] = x[0]``, ``np.zeros(n)[...] = z``): numpy tries ``float(box)``, which raises a
    ``TypeError`` (:class:`_ValueRead` for the adapter's boxes), and raises its ``ValueError`` from it.
    Recognised by those types and by autograd's own: a frame of the traceback holds a ``Box``, the
    value numpy could not convert."""
    if type(error) is not ValueError or not isinstance(error.__cause__, TypeError):
        return False
    tb = error.__traceback__
    while tb is not None:
        if any(isinstance(v, Box) for v in tb.tb_frame.f_locals.values()):
            return True
        tb = tb.tb_next
    return False


def _box_write(error: BaseException) -> bool:
    """Whether ``error`` is, or was raised from, numpy refusing a box written into a numpy array."""
    return raised_by(error, _box_refused)


def _foreign_output(error: BaseException) -> bool:
    """autograd cannot differentiate an output of another library (``vspace`` has no entry for
    ``torch.Tensor``: a ``KeyError`` of that type): ``f`` returned what it wrote into a torch buffer."""
    return raised_by(
        error,
        lambda e: (
            isinstance(e, KeyError)
            and bool(e.args)
            and isinstance(e.args[0], type)
            and e.args[0] not in Box.type_mappings
            and family_of_type(e.args[0]) is not None
        ),
    )


_NO_VALUE = object()


def _unboxable(error: BaseException) -> Any:
    """The value autograd refused to carry a derivative through (``new_box`` raising in the innermost
    frame: ``f`` computed from x a value of a type autograd has no vector space for, an integer array
    from ``x.astype(int)``), or ``_NO_VALUE``. Recognised from the frame, never from the message."""
    frame = innermost_frame(error) if isinstance(error, TypeError) else None
    if frame is None or frame.f_code is not new_box.__code__:
        return _NO_VALUE
    return frame.f_locals.get("value", _NO_VALUE)


def _leaked(error: BaseException) -> bool:
    """The recogniser of ``const_write_error``: a box written into a numpy array, or into a torch
    tensor (an operator error in ``f`` between a box and a foreign array), or a foreign output."""
    return _box_write(error) or operand_error(error, lambda v: isinstance(v, Box)) or _foreign_output(error)


_read_only = WritableArray._wrap  # a captured array as a read-only numpy view: a write raises


def _copied_stand_in(value: Any) -> WritableArray:
    """A stand-in over a copy of a captured array, for a call whose ``x`` or contexts are of a family
    that writes through numpy's read-only flag (``Target.copy_state``: torch's ``asarray`` of a stand-in
    shares the memory of the array it holds)."""
    return WritableArray(copy_leaf(value))


def _numpy_leaf(value: Array) -> Array:
    """A ``Constant`` array as numpy (torch and jax arrays converted without copying where possible)."""
    return value if isinstance(value, (np.ndarray, np.generic)) else to_family(value, NUMPY)


def _constant_alias(value: Array) -> Array:
    """A ``Constant`` array as a read-only numpy view: a write into it raises, and ``f`` runs again
    over copies (the caller's constants are never modified)."""
    value = _numpy_leaf(value)
    alias = read_only_alias(value)
    return value if alias is None else alias


def _constant_copy(value: Any) -> Any:
    return np.array(_numpy_leaf(value), copy=True) if is_array(value) and not isinstance(value, np.generic) else value


def _numpy(value: Array | ArrayLike, dtype: DTypeLike | None) -> np.ndarray:
    out = to_family(value, NUMPY) if family(value) != NUMPY else np.asarray(value)
    return out if dtype is None or out.dtype == dtype else out.astype(dtype)


class _ValueRead(TypeError):
    """``float(t)``, ``int(t)`` or ``complex(t)`` of a traced array (:class:`_Box`): a Python number
    read out of an array computed from ``x``, which autograd's boxes do not give (the builtins'
    own ``TypeError`` before, which named only the box's type). A ``TypeError``, as that was: code
    that catches one behaves as it did; :func:`_explained` makes it the call's error."""

    def __init__(self, read: str) -> None:
        super().__init__(f"{read} of an autograd traced array: it holds no Python number")
        self.read = read


class _Box(ArrayBox):
    """autograd's ``ArrayBox`` with what array-API code in ``f`` needs: ``__array_namespace__``
    giving :data:`namespace` (autograd's own gives autograd.numpy, which lacks ``astype``,
    ``matrix_transpose`` and stand-in-aware ``asarray``) and ``device``; and a Python number read
    out of it (``float(t)``) raises :class:`_ValueRead`. The adapter's traces box numpy's arrays
    and scalars in it (:class:`_Traces`); a subclass, so autograd's tests of a box
    (``isinstance(v, ArrayBox)``, and ``Box.types``, where it is registered) and its methods hold."""

    __slots__ = ()

    def __array_namespace__(  # pyright: ignore[reportIncompatibleMethodOverride] - our namespace, not autograd.numpy
        self, *, api_version: str | None = None
    ) -> _Namespace:
        return namespace

    @property
    def device(self) -> str:
        return "cpu"

    def __float__(self) -> float:
        raise _ValueRead("float()")

    def __int__(self) -> int:
        raise _ValueRead("int()")

    def __complex__(self) -> complex:
        raise _ValueRead("complex()")


_Box.register(_Box)  # autograd's own registration: its box test (type(v) in Box.types) and the boxing of a box
# named as autograd's: the messages that name a box's type read as they did ("'ArrayBox' object does not
# support item assignment", autograd's own refusal of a write into a traced array)
_Box.__name__ = _Box.__qualname__ = "ArrayBox"


# autograd numbers its traces with one process-wide counter (autograd.tracer.trace_stack): traces
# running at once in two threads could take each other's numbers, which a nested (second-order)
# trace relies on. The adapter's traces run one at a time.
class _Traces:
    """The lock the adapter's traces run under, which also maps the types autograd boxes in its
    ``ArrayBox`` (numpy's arrays and scalars, Python's floats) to :class:`_Box` while they run, in
    autograd's own registry (``Box.type_mappings``, what ``new_box`` reads). Put back when the outermost trace
    ends: importing the adapter, or using autograd outside its calls, boxes in autograd's own
    ``ArrayBox``. Before 2026-12-07 the adapter lent ``__array_namespace__`` and ``device`` to
    ``ArrayBox`` itself for the duration: a class attribute set and deleted at every call invalidates
    Python's attribute cache of the class, which cost a traced call 2-3 us (a pushforward of
    ``sin(x) * sum(x)`` at n = 10: 37.4 us lent, 35.3 with the registry's mapping, 34.5 without
    either; measured 2026-12-07 on a 2-core AMD EPYC VM)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0
        self._swapped: list[type] = []
        self._boxed: tuple[type, ...] = ()  # the types ArrayBox boxes, as last read
        self._known = -1  # the registry's size when they were read (a registration since: read again)

    def __enter__(self) -> None:
        self._lock.acquire()
        self._depth += 1
        if self._depth == 1:
            mappings = Box.type_mappings
            if len(mappings) != self._known:
                self._boxed = tuple(t for t, box in mappings.items() if box is ArrayBox and t is not ArrayBox)
                self._known = len(mappings)
            swapped = self._swapped = []
            for kind in self._boxed:
                if mappings.get(kind) is ArrayBox:
                    mappings[kind] = _Box
                    swapped.append(kind)

    def __exit__(self, *exc: Any) -> None:
        try:
            self._depth -= 1
            if self._depth == 0:
                mappings = Box.type_mappings
                for kind in self._swapped:
                    if mappings.get(kind) is _Box:
                        mappings[kind] = ArrayBox
                self._swapped = []
        finally:
            self._lock.release()


_TRACES = _Traces()


# -- a NaN from autograd's own rules --------------------------------------------------------------

# autograd's rules known to give NaN where the derivative is finite (docs/reliability.md, "Known
# engine defects"), as the warning names them
_NAN_RULES = (
    "np.prod (its VJP and JVP divide by x: NaN where an entry of x is 0; the derivative there is "
    "the product of the other entries)"
)


def _has_nan(value: ArrayLike) -> bool:
    if type(value) is tuple:
        if len(value) == 1:  # one tangent's result (a prepared call's common case): no generator
            value = value[0]
        else:
            return any(_has_nan(v) for v in value)
    if type(value) is not np.ndarray:
        value = np.asarray(value)
    kind = value.dtype.kind
    if kind == "f":
        # a sum of squares is NaN exactly where an entry is (no term is negative, and inf * inf is
        # inf): one BLAS call, 0.41 us at n = 10 where np.isnan(value).any() took 0.83, measured alone.
        # (np.maximum.reduce, which propagates NaN without a temporary, measured slower: a prepared
        # 10x10 Jacobian 1.24 -> 1.32 of autograd's own)
        flat = value.reshape(-1)
        return math.isnan(np.dot(flat, flat))
    return kind == "c" and bool(np.isnan(value).any())


def _finite(value: ArrayLike) -> bool:
    if isinstance(value, tuple):
        return all(_finite(v) for v in value)
    value = np.asarray(value)
    return value.dtype.kind not in "fc" or bool(np.isfinite(value).all())


def _user_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside diffinterface: the user's call."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("diffinterface"):
        level, frame = level + 1, frame.f_back  # type: ignore[assignment]
    return level


def _warn_nan(call: str, x: np.ndarray, ts: tuple[np.ndarray, ...], y: ArrayLike, result: ArrayLike) -> None:
    """A warning where the derivative has NaN entries at a finite ``x`` (finite tangents) where f(x) is
    finite: the mark of an autograd rule dividing by zero (``np.prod`` at a zero), which other engines
    do not share. A NaN is also the honest answer where f is not differentiable (``sqrt(x**2)`` at 0),
    so this warns rather than raises."""
    if not _has_nan(result) or not (_finite(x) and _finite(ts) and _finite(y)):
        return
    warnings.warn(
        f"{call}: the derivative has NaN entries at a finite x where f(x) is finite. Where f is "
        f"differentiable there, one of autograd's own rules divided by zero; known: {_NAN_RULES}. "
        f"Use another backend for this f (AutoJAX(), AutoTorch() or AutoFiniteDiff() give the finite "
        f"value), or give that part of f a custom rule (diffinterface.rules)",
        RuntimeWarning,
        stacklevel=_user_stacklevel(),
    )


def _value_read(error: BaseException) -> str | None:
    """What ``f`` read out of an autograd box where ``error`` is that read failing: ``.item()`` or
    ``.tolist()``, an ``AttributeError`` whose object is a box (Python's own record of the lookup);
    ``float()``, ``int()`` or ``complex()`` of one of the adapter's boxes (:class:`_ValueRead`); else None."""
    if isinstance(error, _ValueRead):
        return error.read
    if isinstance(error, AttributeError) and isinstance(getattr(error, "obj", None), Box):
        return f".{error.name}()" if error.name in ("item", "tolist") else None
    return None


def _explained(target: Target, error: TypeError | ValueError | AttributeError) -> BaseException | None:
    """The message of an error autograd raised while tracing ``f`` (a value it cannot carry a
    derivative through, a write into a numpy array f made, a const-closure write), or None for f's
    own error. A :class:`LostDerivativeError` is the call's own error already (:func:`_output`'s):
    None, whatever a stand-in's conversion mark says (JAX's hook leaves the mark on the thread after
    a conversion that succeeded, and a later autograd error read it as a stand-in's)."""
    if isinstance(error, LostDerivativeError):
        return None
    call = target.call
    read = _value_read(error)
    if read is not None:
        first = str(error).strip().split("\n", 1)[0]
        raised = "TypeError" if isinstance(error, _ValueRead) else type(error).__name__
        return TypeError(
            f"{call}: autograd could not run f on its traced values ({raised}: {first}): f reads a "
            f"number out of an array computed from x ({read}), which autograd's traced arrays do not give. A branch "
            f"on x's values can compare arrays instead (if xp.sum(y) > 0:, which autograd answers); where the value "
            f"reaches f(x), its derivative would be lost: differentiate f with AutoFiniteDiff(), or pass the value "
            f"as a Constant context"
        )
    const = const_write_error(target, error, "autograd", _leaked) or standin_error(target, error, "autograd")
    if const is not None:
        return const
    refused = _unboxable(error)
    if refused is not _NO_VALUE:
        kind = type(refused)
        return TypeError(
            f"{call}: f computes from x a value autograd cannot carry a derivative through "
            f"({kind.__module__}.{kind.__qualname__}: an integer or boolean array, from x.astype(int), "
            f"int(x) or the like); torch and JAX give such a value a zero derivative, autograd refuses "
            f"it. Compute that value from a Constant context instead of x (it then carries no "
            f"derivative), write a custom rule for that part of f (diffinterface.rules), or use AutoTorch "
            f"or AutoJAX"
        )
    if not _box_write(error):
        return None
    return type(error)(
        f"{call}: autograd could not trace f: {str(error).rstrip('.')}. The usual cause is a numpy array that f "
        f"creates and then writes a value depending on x into (a = np.zeros(n); a[0] = x[0]): "
        f"autograd cannot record writes into numpy arrays. Build the array from x instead "
        f"(np.stack, np.concatenate, expressions of x), or keep it outside f, captured or passed "
        f"as Cache(a): captured arrays and caches are writable under AutoAutograd."
    )


class _Recorded:
    """``make_vjp``'s ``(pull, y)``, or ``make_jvp``'s ``(y, dy)`` along a one-shot pushforward's one
    tangent (``pull`` None), from a one-shot ``output_info`` (see ``Adapter._record``), left in
    ``Info.value`` for the runner's first call: a one-shot gradient or pushforward traces ``f`` once."""

    __slots__ = ("pull", "y", "dy")

    def __init__(self, pull: Callable[[Any], Any] | None, y: Any, dy: Any = None) -> None:
        self.pull, self.y, self.dy = pull, y, dy


def _cast(v: ArrayLike, dtype: np.dtype[Any]) -> np.ndarray:
    """A result as a numpy array of x's dtype."""
    v = np.asarray(v)
    return v if v.dtype == dtype else v.astype(dtype)


def _pulled(pull: Callable[[Any], Any], y: Any, ts: tuple[np.ndarray, ...] | None, dtype: np.dtype[Any]) -> Any:
    """What reverse mode gives from ``make_vjp``'s ``(pull, y)``: the gradient of a scalar ``y``
    (``ts`` None), else the pullbacks along ``ts`` (a tuple), as numpy arrays of x's dtype. The
    runners' bodies write the same inline: a call less on the prepared path, whose calls into
    diffinterface are counted (tests/test_prepared_work.py)."""
    if ts is None:
        return _cast(pull(vspace(y).ones()), dtype)
    return tuple(_cast(pull(t), dtype) for t in ts)


def _build(
    operator: Operator, fn: _Function, forward: bool, info: Info, x_user: Array, target: Target
) -> tuple[Runner, Runner]:
    """The ``(plain, value)`` runners of ``operator``, ``(x, tangents, contexts) -> result`` with x in
    the user's family; the bodies below work on numpy arrays and return ``(primal, result)``
    (:data:`diffinterface.extend.Body`).

    ``target.call`` (``gradient(AutoAutograd(), f, x)``) starts the message of an error autograd raises."""
    call = target.call
    x_shape, y_shape = info.x_shape, info.y_shape
    if type(x_user) is np.ndarray:  # (the common case: no family lookups)
        like, convert = x_user, False
    else:
        like, convert = _numpy(x_user, None), family(x_user) != NUMPY
    dtype = like.dtype
    whole = operator.through_jacobian(forward)
    n = m = 0  # the sizes of x and f(x), and the bases below: for the operators that take them (Jacobians, Hessians)
    if whole or operator is HESSIAN or operator is SECOND_DERIVATIVE:
        n, m = shape_size(x_shape), shape_size(y_shape)
    x_basis = basis(like, x_shape, dtype) if (whole and forward) or operator is HESSIAN else ()
    y_basis = basis(like, y_shape, dtype) if whole and not forward else ()
    one: Any = np.ones((), dtype=dtype) if operator in (DERIVATIVE, SECOND_DERIVATIVE) else None  # their tangent
    reverse_inner: list[bool] = []  # set at the first primitive without a JVP: second order reverse over reverse

    def jvp(x: np.ndarray, t: np.ndarray, contexts: Contexts) -> tuple[Any, Any]:
        return make_jvp(lambda z: fn(z, contexts), x)(t)

    def vjp(x: np.ndarray, contexts: Contexts) -> tuple[Callable[[Any], Any], Any]:
        return make_vjp(lambda z: fn(z, contexts), x)  # (vjp, y)

    recorded = info.oneshot and type(info.value) is _Recorded
    if recorded:  # a one-shot call: f recorded by output_info
        if info.value.pull is None:  # a pushforward along its one tangent
            push = jvp

            def jvp(x: np.ndarray, t: np.ndarray, contexts: Contexts) -> tuple[Any, Any]:
                taken = info.take_value()
                if type(taken) is _Recorded:
                    return taken.y, taken.dy
                with _TRACES:  # reentrant: the run may be inside already
                    return push(x, t, contexts)
        else:
            trace = vjp

            def vjp(x: np.ndarray, contexts: Contexts) -> tuple[Callable[[Any], Any], Any]:
                taken = info.take_value()
                if type(taken) is _Recorded and taken.pull is not None:
                    return taken.pull, taken.y
                with _TRACES:
                    return trace(x, contexts)

    cast = functools.partial(_cast, dtype=dtype)  # one Python call per result, as a closure was

    def jacobian(x: np.ndarray, contexts: Contexts) -> tuple[Any, np.ndarray]:  # (y, J shaped y_shape + x_shape)
        if forward and n:
            call = fn.bound(contexts)  # f over the same views of its state for every column
            cols = [make_jvp(call, x)(e) for e in x_basis]
            y = cols[0][0]
            # each column has f(x)'s shape (autograd's vspace): stacked last, y_shape + (n,), reshaped once
            # below, not once per column (np.reshape's Python layers: 0.5 us a column)
            flat = np.stack([c[1] for c in cols], axis=-1)
        elif forward:  # an empty x: no basis to push forward, f(x) from one evaluation
            y, flat = fn(x, contexts), np.zeros((m, 0), dtype=dtype)
        else:
            pull, y = vjp(x, contexts)
            flat = np.stack([pull(e) for e in y_basis]) if m else np.zeros((0, n), dtype)  # (m,) + x_shape
        return y, cast(flat.reshape(y_shape + x_shape))

    def gradient_of(contexts: Contexts, record: list[np.ndarray] | None = None) -> Callable[[Traced], Any]:
        def grad(z: Traced) -> Any:
            pull, y = make_vjp(lambda w: fn(w, contexts), z)
            if record is not None:
                record.append(getval(y))
            return pull(vspace(y).ones())

        return grad

    if operator is PUSHFORWARD and forward:

        def body(x: np.ndarray, ts: tuple[np.ndarray, ...], contexts: Contexts) -> Any:
            results = [jvp(x, t, contexts) for t in ts]
            return results[0][0], tuple(cast(r[1]) for r in results)
    elif operator is PULLBACK and not forward:

        def body(x: np.ndarray, ts: tuple[np.ndarray, ...], contexts: Contexts) -> Any:  # _pulled, inline
            pull, y = vjp(x, contexts)
            return y, tuple(cast(pull(t)) for t in ts)
    elif operator.tangent is not None and operator.order == 1:  # against the mode's direction: through the Jacobian

        def body(x: np.ndarray, ts: tuple[np.ndarray, ...], contexts: Contexts) -> Any:
            y, jac = jacobian(x, contexts)
            return y, tuple(cast(r) for r in contract_all(jac, ts, x, operator is PUSHFORWARD))
    elif operator is DERIVATIVE and forward:

        def body(x: np.ndarray, ts: tuple[np.ndarray, ...], contexts: Contexts) -> Any:
            y, der = jvp(x, one, contexts)
            return y, cast(der)
    elif operator is GRADIENT and not forward:

        def body(x: np.ndarray, ts: tuple[np.ndarray, ...], contexts: Contexts) -> Any:  # _pulled, inline
            pull, y = vjp(x, contexts)
            return y, cast(pull(vspace(y).ones()))
    elif operator.order == 1:  # derivative, gradient against their direction, and the jacobian

        def body(x: np.ndarray, ts: tuple[np.ndarray, ...], contexts: Contexts) -> Any:
            return jacobian(x, contexts)
    elif operator is SECOND_DERIVATIVE:  # forward over forward; reverse over reverse without JVPs
        rows = basis(like, y_shape, dtype)

        def forward_body(x: np.ndarray, contexts: Contexts) -> Any:
            record: list[np.ndarray] = []

            def der(z: Traced) -> Any:
                y, d = make_jvp(lambda w: fn(w, contexts), z)(vspace(z).ones())
                record.append(getval(y))
                return d

            d, d2 = make_jvp(der, x)(one)
            return (record[0], cast(d)), cast(d2)

        def reverse_body(x: np.ndarray, contexts: Contexts) -> Any:  # 2 f(x).size backward passes
            record: list[np.ndarray] = []

            def der(z: Traced) -> Any:
                pull, y = make_vjp(lambda w: fn(w, contexts), z)
                record.append(getval(y))
                return anp.reshape(anp.stack([pull(e) for e in rows]), y_shape)

            pull, d = make_vjp(der, x)
            return (record[0], cast(d)), cast(np.reshape(np.stack([pull(e) for e in rows]), y_shape))

        def body(x: np.ndarray, ts: tuple[np.ndarray, ...], contexts: Contexts) -> Any:
            if not reverse_inner:
                try:
                    return forward_body(x, contexts)
                except NotImplementedError:  # a primitive without a JVP: reverse over reverse from now on
                    reverse_inner.append(True)
            return reverse_body(x, contexts)
    elif operator is HVP:

        def body(x: np.ndarray, ts: tuple[np.ndarray, ...], contexts: Contexts) -> Any:
            record: list[np.ndarray] = []
            grad = gradient_of(contexts, record)
            if len(ts) == 1 and not reverse_inner:
                try:  # forward over reverse
                    g, hv = make_jvp(grad, x)(ts[0])
                    return (record[0], cast(g)), (cast(hv),)
                except NotImplementedError:  # a primitive without a JVP: reverse over reverse from now on
                    reverse_inner.append(True)
                    record.clear()
            pull, g = make_vjp(grad, x)
            return (record[0], cast(g)), tuple(cast(pull(t)) for t in ts)
    elif operator is HESSIAN:  # reverse over reverse

        def body(x: np.ndarray, ts: tuple[np.ndarray, ...], contexts: Contexts) -> Any:
            record: list[np.ndarray] = []
            pull, g = make_vjp(gradient_of(contexts, record), x)
            hess = np.stack([np.reshape(pull(e), (n,)) for e in x_basis], axis=0) if n else np.zeros((0, 0), dtype)
            return (record[0], cast(g)), cast(hess.reshape(x_shape + x_shape))
    else:  # pragma: no cover - the frontend only passes the operators above
        raise ValueError(operator)

    def inputs(x: Array, ts: tuple[Array, ...]) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        if convert or type(x) is not np.ndarray:
            x = _numpy(x, dtype)
        if not ts:
            return x, ()
        if len(ts) == 1 and not convert:  # one tangent (the common case): no generator
            t = ts[0]
            if type(t) is not np.ndarray or t.dtype != dtype:
                ts = (_numpy(t, dtype),)
        elif convert or any(type(t) is not np.ndarray or t.dtype != dtype for t in ts):
            ts = tuple(_numpy(t, dtype) for t in ts)
        return x, typing.cast("tuple[np.ndarray, ...]", ts)  # numpy arrays of x's dtype by now

    def traced(x: np.ndarray, ts: tuple[np.ndarray, ...], contexts: Contexts) -> Any:
        try:
            return body(x, ts, contexts)
        except (TypeError, ValueError, AttributeError) as error:
            known = _explained(target, error)
            if known is not None:
                raise known from error
            raise

    # A one-shot call's first run takes output_info's recording (made under _TRACES): a backward pass
    # over plain arrays, or the pushforward itself, with nothing traced; it runs outside _TRACES (its lock
    # and its swap of autograd's box registry). The recorded vjp and
    # jvp above enter _TRACES themselves where they trace after all.
    def plain(x: Array, ts: tuple[Array, ...], contexts: Contexts) -> Any:
        x, ts = inputs(x, ts)
        if recorded and type(info.value) is _Recorded:
            primal, result = traced(x, ts, contexts)
        else:
            with _TRACES:
                primal, result = traced(x, ts, contexts)
        _warn_nan(call, x, ts, primal[0] if operator.order == 2 else primal, result)
        return result

    def value(x: Array, ts: tuple[Array, ...], contexts: Contexts) -> Any:
        x, ts = inputs(x, ts)
        if recorded and type(info.value) is _Recorded:
            primal, result = traced(x, ts, contexts)
        else:
            with _TRACES:
                primal, result = traced(x, ts, contexts)
        _warn_nan(call, x, ts, primal[0] if operator.order == 2 else primal, result)
        return value_form(operator, primal, result, np.asarray)

    return plain, value


class Adapter(_Base):
    """HIPS autograd; see the module docstring."""

    @staticmethod
    def refused_write(error: BaseException) -> bool:
        """Over read-only views, what makes ``f`` run again over copies: numpy refusing the write (the
        kit's default), or a box written into a copy of a view (``copy.copy(buf)[0] = x``; over a
        stand-in the copy is one)."""
        return _Base.refused_write(error) or _box_refused(error)

    engine_name = "autograd"
    array_family = NUMPY

    @staticmethod
    def traced(value: Any) -> bool:
        """A box: under closure='const' the frontend checks that none is left in captured lists."""
        return isinstance(value, Box)

    # x reaches output_info uncopied: a recording or a const-closure trace gives f a box of x (autograd
    # refuses a write into a box, as the runners' traces do), and only the plain evaluation for
    # f(x)'s shape gets a copy
    copies_x = True

    def output_info(self, target: Target, x: Array, contexts: Contexts, oneshot: bool) -> Info:
        xn = _numpy(x, None) if family(x) != NUMPY else np.asarray(x)
        fn = _Function(target, contexts)
        recorded = self._record(target, xn, contexts, fn) if oneshot else None
        try:
            if recorded is not None:
                y = np.asarray(recorded.y)
            elif target.closure == "const":  # traced: what f writes into captured lists is then a box
                with _TRACES:
                    y = np.asarray(make_vjp(lambda z: fn(z, contexts), xn)[1])
            else:  # f gets a plain array: a copy (see copies_x)
                y = np.asarray(fn(xn.copy(), contexts))
        except (TypeError, ValueError) as error:
            known = standin_error(target, error, "autograd") or const_write_error(target, error, "autograd", _leaked)
            if known is not None:
                raise known from error
            raise
        if y.dtype.kind == "c" and xn.dtype.kind != "c":  # np.iscomplexobj of two arrays, without its calls
            raise TypeError(
                f"{target.call}: f(x) is complex ({y.dtype}) for a real x, and autograd keeps only the real "
                f"part of such derivatives; complex outputs are not supported on AutoAutograd: use "
                f"AutoJAX(mode='forward'), AutoTorch(mode='forward') or AutoFiniteDiff(), or return the real "
                f"and imaginary parts as one real array (xp.stack([xp.real(z), xp.imag(z)]))"
            )
        return Info(tuple(y.shape), y.dtype, recorded, tuple(xn.shape), oneshot)

    def oneshot_result(
        self, operator: Operator, target: Target, x: Array, tangents: tuple[Array, ...], contexts: Contexts, info: Info
    ) -> Any:
        """A one-shot call's result from ``output_info``'s recording (:class:`_Recorded`), as the plain
        runner would give it: a gradient or pullback from the ``make_vjp`` trace, a pushforward along
        one tangent from the ``make_jvp`` one (each made only for the runners' direction); the NaN
        warning and the explained errors as the runner has them. None for any other call."""
        value = info.value
        if type(value) is not _Recorded:
            return None
        pull = value.pull
        if pull is None:  # make_jvp's, along a pushforward's one tangent
            if operator is not PUSHFORWARD:
                return None
        elif operator is not GRADIENT and operator is not PULLBACK:
            return None
        info.take_value()
        xn = x if type(x) is np.ndarray else _numpy(x, None)
        dtype = xn.dtype
        ts = tuple(_numpy(t, dtype) for t in tangents) if pull is not None else ()  # a pushforward's: below
        try:
            if pull is None:
                result: Any = (_cast(value.dy, dtype),)
            else:
                result = _pulled(pull, value.y, ts if operator is PULLBACK else None, dtype)
        except (TypeError, ValueError, AttributeError) as error:
            known = _explained(target, error)
            if known is not None:
                raise known from error
            raise
        if pull is None:
            if not _has_nan(result):
                return result  # the NaN warning's common exit, before the tangent's conversion
            ts = tuple(_numpy(t, dtype) for t in tangents)
        _warn_nan(target.call, xn, ts, value.y, result)
        return result

    def _record(self, target: Target, x: np.ndarray, contexts: Contexts, fn: _Function) -> _Recorded | None:
        """A one-shot call traced here as its runner would trace it, for the runner's first call
        (:class:`_Recorded`), its errors explained as the runner explains them: ``make_vjp`` for a
        reverse-mode gradient or pullback, ``make_jvp`` along the one tangent of a forward-mode
        pushforward (``target.one_tangent``). None where a primitive has no VJP or no JVP (autograd
        raises as it traces: the runner's direction fallback decides, as it does for a prepared call),
        for the other operators, a structured x or f(x), and an ``f`` with
        captured state or contexts."""
        operator = target.operator
        if target.layout is not None or not fn.simple:
            # f with state or contexts: its first run over guarded aliases learns whether it writes into
            # them, and a write with a box in the operator (buf[:] *= x) is numpy's ufunc dispatch
            # failing with a TypeError the guard cannot tell from f's own: that run stays untraced
            return None
        mode = getattr(self.backend, "mode", None)
        tangent = target.one_tangent if mode != "reverse" else None  # a pushforward along one tangent
        if tangent is None and (operator not in (GRADIENT, PULLBACK) or mode == "forward"):
            return None
        try:
            with _TRACES:
                if tangent is not None:
                    t = _numpy(tangent, x.dtype)
                    try:
                        y, dy = make_jvp(lambda z: fn(z, contexts), x)(t)
                    except NotImplementedError:
                        return None
                    return _Recorded(None, y, dy)
                try:
                    pull, y = make_vjp(lambda z: fn(z, contexts), x)
                except NotImplementedError:  # a primitive without a VJP (autograd refuses it as it traces)
                    return None
        except (TypeError, ValueError, AttributeError) as error:  # explained as the runner explains it: f ran once
            known = _explained(target, error)
            if known is not None:
                raise known from error
            raise
        return _Recorded(pull, y)

    def prepare(
        self,
        operator: Operator,
        target: Target,
        x: Array,
        tangents: tuple[Array, ...],
        contexts: Contexts,
        info: Info,
    ) -> Runners:
        fn = _Function(target, contexts)
        forward = self.forward(operator, info)

        def build(fwd: bool) -> tuple[Runner, Runner]:
            return _build(operator, fn, fwd, info, x, target)

        # a primitive without a JVP ("JVP of psi ... not defined"): reverse mode (mode=None)
        fallback = self.direction_fallback(operator, forward, target, build)
        if fallback is not None:
            return Runners(fallback.plain, fallback.value)
        return Runners(*build(forward))


# -- the bench record: autograd's own calls ---------------------------------------------------------
