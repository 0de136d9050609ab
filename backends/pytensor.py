"""``AutoPyTensor``: every operator on PyTensor's symbolic derivatives, compiled with ``pytensor.function``.

``f`` is written with ``pytensor.tensor`` (or array-API code: ``array_namespace(x)`` gives
:data:`namespace`, PyTensor under the array API's names, while the adapter builds a graph); it
receives a symbolic tensor of ``x``'s shape and dtype and returns one. Numpy in, numpy out (torch and
jax inputs are converted to numpy and the results back); float32 stays float32.

- The derivative graph of each operator is built once per preparation and compiled into a
  ``pytensor.function`` returning the result alone (the plain runner's, compiled by ``prepare_*``),
  and, at the first call of a value form, one returning the value and the result (asking PyTensor
  for ``f(x)`` beside a gradient costs 60% more at n = 1e6: the fused elementwise pass gains an
  output and the sum is computed):
  pushforward ``pytensor.gradient.pushforward``, pullback ``pullback``, gradient ``grad``,
  jacobian ``jacobian(vectorize=True)`` in reverse mode and a ``vectorize_graph`` of the
  pushforward over the basis of x in forward mode (``mode=None``: forward when
  ``x.size <= f(x).size``), derivative a pushforward along 1; ``mode="forward"``/``"reverse"``
  forces the direction of every first-order operator (a pushforward in reverse mode contracts the
  reverse Jacobian, and so on).
- hvp: the pushforward of the gradient (forward over reverse); hessian: the reverse Jacobian of the
  gradient; second derivative: the pushforward of the pushforward along 1.
- Compiling: a user's ``prepare_*`` (and the prep cache's) compiles with ``compile_mode`` (default
  None: PyTensor's configured mode, its C or Numba linker after the full rewrites: the fastest
  calls, a compile of tens of milliseconds); a one-shot call compiles with the Python linker and no
  rewrites (a few milliseconds: compiling fully for one call costs more than it saves).
- A compiled function is kept per signature: the shapes and dtypes of x, the tangents, the
  contexts and the captured arrays, and the values of the captured non-array leaves (numbers,
  strings, shared variables by identity); a new signature builds and compiles once more.
- Constant values, caches and the arrays ``f`` captures are inputs of the compiled function, read
  at every call (a new value never recompiles); a Python float of a Constant is a scalar input of
  x's dtype (as numpy keeps a Python number's dtype weak). Caches and captured arrays reach ``f``
  as :class:`WritableArray` stand-ins whose item assignment is ``set_subtensor`` (derivatives flow
  through writes; the user's arrays are never written). PyTensor shared variables that ``f``
  captures stay in the graph as they are: the compiled function reads their current value at every
  call, and ``f`` cannot write into them.
- Custom rules (``diffinterface.rules``) in ``f`` are Ops with the rule's derivatives
  (``pytensor_rules``); while ``f``'s graph is built, :data:`WRT` holds x, so that a
  rule's arguments that depend on x are its active ones. A second-order operator through an opaque
  rule raises its ``SecondOrderError`` (PyTensor's null gradient, found as the rule's Op on the path).

Size: over 400 lines in one module, because an adapter is the registry's unit (``AutoPyTensor.adapter``
names one module, imported at first use).
"""

from __future__ import annotations

import contextvars
import sys
import threading
import warnings
from typing import Any, cast

import numpy as np
import pytensor.tensor as pt
from pytensor import gradient as ptg
from pytensor.compile.maker import function as pytensor_function
from pytensor.compile.mode import Mode, get_mode
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Variable
from pytensor.graph.replace import vectorize_graph
from pytensor.graph.traversal import ancestors
from pytensor.tensor import _as_tensor_variable
from pytensor.tensor.shape import reshape as pt_reshape
from pytensor.tensor.variable import TensorVariable, _tensor_py_operators

from diffinterface.extend import (
    DERIVATIVE,
    GRADIENT,
    HESSIAN,
    HVP,
    JACOBIAN,
    NUMPY,
    PULLBACK,
    PUSHFORWARD,
    RUNS_ON_VALUES,
    SECOND_DERIVATIVE,
    Cache,
    Contexts,
    Info,
    LostDerivativeError,
    Operator,
    Runners,
    StandInConversionError,
    Target,
    family,
    is_array,
    shape_size,
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

# -- the array API over pytensor.tensor ------------------------------------------------------------


class _Namespace:
    """``pytensor.tensor`` under the array API's names: what ``array_namespace`` gives for a symbolic
    tensor while the adapter builds a graph, and for the stand-ins."""

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
        "cumulative_sum": "cumsum",
        "cumulative_prod": "cumprod",
    }

    def __getattr__(self, name: str) -> Any:  # looked up once: later reads find the instance attribute
        value = getattr(pt, self._RENAMED.get(name, name))
        setattr(self, name, value)
        return value

    @staticmethod
    def asarray(obj: Any, dtype: Any = None, device: Any = None, copy: Any = None) -> Any:
        obj = unwrap(obj)
        if isinstance(obj, Variable):
            kind = getattr(obj.type, "dtype", None)
            return obj if dtype is None or kind == np.dtype(dtype).name else pt.cast(obj, np.dtype(dtype).name)
        if isinstance(obj, (list, tuple)) and any(isinstance(unwrap(v), Variable) for v in obj):
            out = pt.stack([pt.as_tensor_variable(unwrap(v)) for v in obj])
            return out if dtype is None else pt.cast(out, np.dtype(dtype).name)
        value = np.asarray(to_family(obj, NUMPY) if family(obj) not in (None, NUMPY) else obj, dtype=dtype)
        return pt.as_tensor_variable(value)

    @staticmethod
    def astype(x: Any, dtype: Any, copy: bool = True) -> Any:
        return pt.cast(unwrap(x), np.dtype(dtype).name)

    @staticmethod
    def reshape(x: Any, shape: tuple[Any, ...], copy: Any = None) -> Any:
        return pt_reshape(unwrap(x), shape)

    @staticmethod
    def stack(arrays: Any, axis: int = 0) -> Any:
        return pt.stack([unwrap(a) for a in arrays], axis=axis)

    @staticmethod
    def concatenate(arrays: Any, axis: int = 0) -> Any:
        return pt.concatenate([unwrap(a) for a in arrays], axis=axis)

    concat = concatenate

    @staticmethod
    def zeros(shape: Any, dtype: Any = None, device: Any = None) -> Any:
        return pt.zeros(shape, dtype=np.dtype(dtype or "float64").name)

    @staticmethod
    def ones(shape: Any, dtype: Any = None, device: Any = None) -> Any:
        return pt.ones(shape, dtype=np.dtype(dtype or "float64").name)

    def __repr__(self) -> str:
        return "<the array API over pytensor.tensor (diffinterface)>"


namespace: _Namespace = _Namespace()


class WritableArray(_Writable):
    """What ``f`` gets for a captured array or a cache under ``AutoPyTensor``: its value is a symbolic
    tensor (an input of the compiled function), and ``a[i] = v``, ``a[i] += v`` are ``set_subtensor``
    (a new tensor in the graph: derivatives flow through writes). PyTensor's functions take it as the
    tensor it holds; converting it to a numpy array is an error (the compiled function would not see
    the value of the next call)."""

    __slots__ = ()
    _namespace = namespace

    @staticmethod
    def _update(value: Any, index: Any, item: Any) -> Any:
        return pt.set_subtensor(value[index], item)

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        raise StandInConversionError(
            "a captured array or cache was converted to a numpy array inside f, which would freeze its value "
            "(or drop the derivative of what f wrote into it)"
        )


@_as_tensor_variable.register(WritableArray)
def _standin_as_tensor(x: Any, name: Any = None, ndim: Any = None, **kwargs: Any) -> Any:
    return pt.as_tensor_variable(x.value, name=name, ndim=ndim, **kwargs)


class _Traces:
    """The lock the adapter's graph builds run under, which also lends ``TensorVariable`` what
    array-API code in ``f`` needs while they run (``__array_namespace__`` giving :data:`namespace`,
    and ``device``). Put back when the outermost build ends: PyTensor outside the adapter's calls
    sees its own ``TensorVariable``."""

    _MISSING = object()

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> None:
        self._lock.acquire()
        self._depth += 1
        if self._depth == 1:
            self._saved = {name: TensorVariable.__dict__.get(name, self._MISSING) for name in _LENT}
            for name, value in _LENT.items():
                setattr(TensorVariable, name, value)

    def __exit__(self, *exc: Any) -> None:
        try:
            self._depth -= 1
            if self._depth == 0:
                for name, value in self._saved.items():
                    if value is self._MISSING:
                        delattr(TensorVariable, name)
                    else:
                        setattr(TensorVariable, name, value)
        finally:
            self._lock.release()


def _tensor_namespace(self: Any, api_version: Any = None) -> Any:
    return namespace


def _static_shape(self: Any) -> Any:
    """The array API's ``shape``: a tuple of ints where PyTensor knows them statically (x's are, as
    the adapter builds it), else PyTensor's symbolic shape."""
    shape = self.type.shape
    return shape if None not in shape else _SYMBOLIC_SHAPE.__get__(self)


def _static_size(self: Any) -> Any:
    shape = self.type.shape
    return int(np.prod(shape, dtype=np.int64)) if None not in shape else _SYMBOLIC_SIZE.__get__(self)


_SYMBOLIC_SHAPE: Any = TensorVariable.shape
_SYMBOLIC_SIZE: Any = TensorVariable.size
_LENT = {
    "__array_namespace__": _tensor_namespace,
    "device": property(lambda self: "cpu"),
    "shape": property(_static_shape),
    "size": property(_static_size),
}
_TRACES = _Traces()
# The symbolic x of the graph build in progress (None outside one): the arguments of a custom rule
# (pytensor_rules) that depend on it are its active ones.
WRT: contextvars.ContextVar[Any] = contextvars.ContextVar("diffinterface_pytensor_wrt", default=None)
building = _TRACES  # the context in which array-API code builds a PyTensor graph (the bench record's too)

# -- the inputs of a compiled function: x, tangents, contexts, captured state ------------------------


def _numpy(value: Any, dtype: Any = None) -> Any:
    out = np.asarray(to_family(value, NUMPY) if family(value) not in (None, NUMPY) else value)
    return out if dtype is None or out.dtype == dtype else out.astype(dtype)


def _static_key(value: Any) -> Any:
    """A captured non-array leaf as part of a signature: by value where it hashes, else by identity."""
    try:
        hash(value)
    except TypeError:
        return ("id", id(value))
    return (type(value), value)


class _Leaves:
    """One walk over contexts and captured state: the symbolic inputs (at a build) or the values to
    feed them (at a call), and the signature that says whether a compiled function fits."""

    __slots__ = ("values", "signature", "symbols", "building", "scalar_dtype")

    def __init__(self, building: bool, scalar_dtype: str) -> None:
        self.values: list[Any] = []
        self.signature: list[Any] = []
        self.symbols: list[Any] = []
        self.building, self.scalar_dtype = building, scalar_dtype

    def walk(self, value: Any, numbers: bool, wrap: bool) -> Any:
        """``value`` with its arrays (and, where ``numbers``, its Python floats) as inputs: symbolic
        ones at a build (stand-ins where ``wrap``), recorded values at a call."""
        if isinstance(value, SharedVariable):  # read by the compiled function at every call
            self.signature.append(("shared", id(value)))
            return WritableArray(value) if self.building and wrap else value
        if isinstance(value, Variable):  # a symbolic tensor f captured: part of the graph as it is
            self.signature.append(("variable", id(value)))
            return value
        if is_array(value) or (numbers and isinstance(value, float)):
            if isinstance(value, float):
                array = np.asarray(value, dtype=self.scalar_dtype)
            else:
                array = _numpy(value)
            self.values.append(array)
            self.signature.append((array.shape, array.dtype.str))
            if not self.building:
                return None
            symbol = pt.tensor(dtype=array.dtype.name, shape=array.shape)
            self.symbols.append(symbol)
            return WritableArray(symbol) if wrap else symbol
        if isinstance(value, list):
            self.signature.append(("list", len(value)))
            return [self.walk(v, numbers, wrap) for v in value]
        if isinstance(value, tuple):
            self.signature.append(("tuple", len(value)))
            items = [self.walk(v, numbers, wrap) for v in value]
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
        if isinstance(value, dict):
            self.signature.append(("dict", tuple(value)))
            out = dict(value) if type(value) is dict else value.copy()
            for k, v in value.items():
                out[k] = self.walk(v, numbers, wrap)
            return out
        self.signature.append(_static_key(value))
        return value


def _scalar_dtype(x: Any) -> str:
    kind = np.dtype(x.dtype)
    return kind.name if kind.kind in "fc" else "float64"


def _walk(target: Target, x: Any, contexts: tuple[Any, ...], building: bool) -> tuple[_Leaves, Any, list[Any]]:
    """The leaves of the captured state and of the contexts: ``(leaves, state, context values)``,
    the latter two symbolic at a build."""
    leaves = _Leaves(building, _scalar_dtype(x))
    state = None
    if target.has_state and target.plan is not None:
        state = [leaves.walk(v, False, True) for v in target.plan.read()]
    values = [leaves.walk(c.value, True, isinstance(c, Cache)) for c in contexts]
    return leaves, state, values


def _inputs(target: Target, x: Any, contexts: tuple[Any, ...]) -> tuple[tuple[Any, ...], list[Any]]:
    """The signature of the captured state and contexts (part of a compiled function's key) and the
    values fed to it, as :func:`_walk` finds them at a call. State that is numpy arrays alone (a
    captured matrix, the common case) is read directly: its signature is each array's shape and dtype,
    as the walk records them, and its values the arrays themselves (the walk's ``_Leaves`` cost 3 us
    of an 11 us prepared Jacobian of ``sin(A @ x)`` at 10x10, 2-core Xeon VM)."""
    if not (contexts or target.has_state):
        return (), []
    if not contexts and target.plan is not None:
        values = target.plan.read()
        if all(type(v) is np.ndarray for v in values):
            return tuple((v.shape, v.dtype.str) for v in values), values
    leaves = _walk(target, x, contexts, False)[0]
    return tuple(leaves.signature), leaves.values


# -- the graph of f -------------------------------------------------------------------------------


def _output(y: Any, target: Target) -> Any:
    y = unwrap(y)
    if isinstance(y, (tuple, list, dict)):
        raise structured_output(y, target.call)
    if isinstance(y, np.ndarray) and y.dtype == object:
        raise LostDerivativeError(
            f"{target.call}: f(x) is a numpy array of PyTensor variables (np.array([...]) or np.asarray of "
            f"tensors computed from x); build the output with pytensor.tensor (pt.stack, pt.concatenate) "
            f"or, in array-API code, xp.stack"
        )
    return pt.as_tensor_variable(y)


def _graph(target: Target, x: Any, contexts: tuple[Any, ...]) -> tuple[Any, Any, list[Any]]:
    """``(x symbol, f(x) symbol, input symbols of contexts and state)`` for ``x`` (numpy)."""
    xs = pt.tensor(dtype=x.dtype.name, shape=x.shape)
    leaves, state, values = _walk(target, x, contexts, True)
    if target.stateless and not contexts:
        fn = target.f
    else:
        fn = target.instance(_template, values=state) if state is not None else target.instance(_template)
    token = WRT.set(xs)  # custom rules: their arguments that depend on x are active
    try:
        with _TRACES:
            y = fn(xs, *values)
    except StandInConversionError as error:
        raise TypeError(
            f"{target.call}: {error}. Compute with pytensor.tensor (or the array API) on captured arrays and "
            f"caches, not numpy: under AutoPyTensor they are inputs of the compiled function"
        ) from error
    except (TypeError, AttributeError) as error:
        mended = _value_error(target, error)
        if mended is None:
            raise
        raise mended from error
    finally:
        WRT.reset(token)
    return xs, _output(y, target), leaves.symbols


# PyTensor's refusals to give a symbolic tensor's value to Python (``if x[0] > 0:``, ``float(x)``, ``int``,
# ``range(n)`` of one, iterating over one): their code objects, to recognise the frame an error is raised in
_VALUE_REFUSALS = {
    getattr(_tensor_py_operators, name).__code__
    for name in ("__bool__", "__float__", "__int__", "__complex__", "__index__", "__iter__")
}


def _value_error(target: Target, error: BaseException) -> TypeError | None:
    """The call's error where ``f`` needs a value PyTensor does not have while it builds the graph (a
    Python ``if``, ``float()``, ``.item()`` on a symbolic tensor: by the frame or the object of the error),
    or hands a symbolic tensor to numpy (a numpy frame on the traceback); None for any other error."""
    frames = []
    tb = error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    first = str(error).strip().split("\n", 1)[0]
    refused = bool(frames) and frames[-1].f_code in _VALUE_REFUSALS
    if refused or (isinstance(error, AttributeError) and isinstance(unwrap(getattr(error, "obj", None)), Variable)):
        return TypeError(
            f"{target.call}: f needs a value of x (or of an array computed from it), which PyTensor does not have "
            f"while it builds f's graph ({type(error).__name__}: {first}): a Python `if` on x's values, float(), "
            f"int(), .item(), a loop over an array computed from x. Write that part with pytensor.tensor "
            f"(pt.switch or pt.where for a branch), or differentiate f with {RUNS_ON_VALUES}"
        )
    if any(str(frame.f_globals.get("__name__", "")).split(".")[0] == "numpy" for frame in frames):
        return TypeError(
            f"{target.call}: f calls numpy on PyTensor's symbolic tensors ({type(error).__name__}: {first}); "
            f"AutoPyTensor builds f's graph: write f with pytensor.tensor (or array_namespace(x)), or "
            f"differentiate it with AutoTorch(), AutoAutograd() or AutoFiniteDiff(), which run numpy code"
        )
    return None


def _template(value: Any) -> Any:
    """An output buffer ``y`` (``f(y, x)``): a stand-in over its values as constants (a template)."""
    if isinstance(value, WritableArray):
        return value
    if is_array(value):
        return WritableArray(pt.as_tensor_variable(np.array(_numpy(value))))
    return value


# -- the derivative graphs -------------------------------------------------------------------------


def _refuse_complex(xs: Any, y: Any, call: str) -> None:
    """A complex value between x and f(x) (a complex x reaches f as real pairs made complex, or f
    computes in complex numbers): PyTensor's gradients of complex operations do not follow the
    documented convention (several refuse, ``Abs`` of a complex among them), so it is the call's error."""
    for var in ancestors([y], blockers=[xs]):
        dtype = getattr(var.type, "dtype", None)
        if dtype is not None and np.dtype(dtype).kind == "c":
            raise TypeError(
                f"{call}: f computes with complex numbers ({var} is {dtype}), and PyTensor's derivatives of "
                f"complex operations do not follow diffinterface's convention (docs/complex.md); complex x and "
                f"f(x) are not supported on AutoPyTensor: use AutoJAX(), AutoTorch() or AutoAutograd(), or write "
                f"f over the real and imaginary parts as real arrays"
            )


def _check_connected(error: Exception, y: Any, xs: Any, call: str) -> None:
    """A derivative PyTensor refused as disconnected: where f(x) does not depend on x at all, the
    derivative is zero (the caller builds it again ignoring the disconnection); where it does but
    only through ``disconnected_grad``, the derivative was cut: the call's error."""
    if xs in set(ancestors([y])):
        raise LostDerivativeError(
            f"{call}: f(x) depends on x only through pytensor.gradient.disconnected_grad (or another op "
            f"without a derivative), so PyTensor has no derivative to give; remove it from the path from x "
            f"to f(x), or give that part of f a custom rule (diffinterface.rules)"
        ) from error


class _Derivatives:
    """PyTensor's derivative operators on one graph, ``disconnected`` what to do with an output that
    does not depend on x ("raise" first, "ignore" where x is not in f's graph at all)."""

    def __init__(self, xs: Any, y: Any, disconnected: Any) -> None:
        self.xs, self.y, self.disconnected = xs, y, disconnected

    def push(self, y: Any, t: Any) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return ptg.pushforward(y, self.xs, t, disconnected_outputs=self.disconnected)

    def pull(self, y: Any, t: Any) -> Any:
        return ptg.pullback(y, self.xs, t, disconnected_inputs=self.disconnected)

    def grad(self, y: Any) -> Any:
        return ptg.grad(y, self.xs, disconnected_inputs=self.disconnected)

    def jacobian(self, y: Any, forward: bool) -> Any:
        """``y_shape + x_shape``: pushforwards of the basis of x vectorised, or PyTensor's vectorised
        reverse Jacobian."""
        xs = self.xs
        x_shape, y_shape = tuple(xs.type.shape), tuple(y.type.shape)
        n = int(np.prod(x_shape, dtype=np.int64))
        if not forward:
            if y.ndim == 0:
                return self.grad(y)
            if n == 0 or 0 in y_shape:
                return pt.zeros(y_shape + x_shape, dtype=y.dtype)
            return ptg.jacobian(y, xs, disconnected_inputs=self.disconnected, vectorize=True)
        if n == 0:
            return pt.zeros(y_shape + x_shape, dtype=y.dtype)
        t = pt.tensor(dtype=xs.dtype, shape=x_shape)
        cols = vectorize_graph(
            self.push(y, t), replace={t: pt.as_tensor(np.eye(n, dtype=xs.dtype).reshape((n, *x_shape)))}
        )
        # (n, *y_shape) -> (*y_shape, *x_shape)
        moved = pt.moveaxis(cols, 0, -1) if y.ndim else cols
        return pt_reshape(moved, y_shape + x_shape) if len(x_shape) != 1 else moved


def _contract(jac: Any, t: Any, x_ndim: int, forward: bool) -> Any:
    y_ndim = jac.ndim - x_ndim
    if forward:
        return pt.tensordot(jac, t, axes=(list(range(y_ndim, jac.ndim)), list(range(x_ndim))))
    return pt.tensordot(t, jac, axes=(list(range(y_ndim)), list(range(y_ndim))))


def _outputs(operator: Operator, forward: bool, d: _Derivatives, ts: list[Any], value: bool) -> tuple[list[Any], int]:
    """The outputs of the compiled function: with ``value``, the primal part(s) then the result(s),
    and how many primal parts lead (1 for the first order, 2 for the second); without, the result(s)
    alone (0 lead: PyTensor leaves out what only the primal needs)."""
    outs, lead = _all_outputs(operator, forward, d, ts)
    return (outs, lead) if value else (outs[lead:], 0)


def _all_outputs(operator: Operator, forward: bool, d: _Derivatives, ts: list[Any]) -> tuple[list[Any], int]:
    xs, y = d.xs, d.y
    one = pt.ones((), dtype=xs.dtype)
    if operator is PUSHFORWARD:
        if forward:
            return [y] + [d.push(y, t) for t in ts], 1
        jac = d.jacobian(y, False)
        return [y] + [_contract(jac, t, xs.ndim, True) for t in ts], 1
    if operator is PULLBACK:
        if not forward:
            return [y] + [d.pull(y, t) for t in ts], 1
        jac = d.jacobian(y, True)
        return [y] + [_contract(jac, t, xs.ndim, False) for t in ts], 1
    if operator is DERIVATIVE:
        return [y, d.push(y, one) if forward else d.jacobian(y, False)], 1
    if operator is GRADIENT:
        return [y, d.jacobian(y, True) if forward else d.grad(y)], 1
    if operator is JACOBIAN:
        return [y, d.jacobian(y, forward)], 1
    if operator is HVP:  # forward over reverse
        g = d.grad(y)
        return [y, g] + [d.push(g, t) for t in ts], 2
    if operator is HESSIAN:  # the reverse Jacobian of the gradient
        g = d.grad(y)
        return [y, g, d.jacobian(g, False)], 2
    if operator is SECOND_DERIVATIVE:  # forward over forward
        der = d.push(y, one)
        return [y, der, d.push(der, one)], 2
    raise ValueError(operator)  # pragma: no cover - the frontend passes only these


_ONESHOT_MODE = Mode(linker="py", optimizer=cast(Any, None))  # a few milliseconds to compile: for one call
# from this many elements of x or f(x), a one-shot call compiles fully too: the Python linker runs each
# operation of the unfused graph in numpy, which at n = 1e6 costs more than the compile (a gradient
# 115 ms against PyTensor's own first call, compile included, of 38 ms); at n = 1e5 it still wins
ONESHOT_COMPILED_FROM = 500_000


def _aligned(value: Any) -> Any:
    """``value``, or an aligned copy of an unaligned numpy array (PyTensor refuses those)."""
    return np.require(value, requirements="A") if isinstance(value, np.ndarray) and not value.flags.aligned else value


class _Compiled:
    """One compiled function: its inputs' order and how many primal outputs lead, called one call at a
    time. A PyTensor ``Function`` keeps its inputs and outputs in storage cells of its own, set by
    a call and read back after its run: two threads calling it at once get each other's inputs
    (a derivative at another thread's x, with no error) or an output cleared by the other call.

    A call whose inputs are what the function's input types hold as they are (numpy arrays of
    exactly their dtypes, native byte order, aligned: what the prepared calls pass) sets PyTensor's
    ``trust_input``, which skips its check and conversion of each input (2.5 of a 4.8 us call of a
    10x10 Jacobian with a captured matrix, 2-core Xeon VM). Their shapes need no check: a compiled
    function is found by its inputs' shapes and dtypes (``_Prepared.fetch``), and its input types
    have those static shapes. Any other input goes through PyTensor's own check, which converts it
    (another byte order); an unaligned array, which that check refuses, is copied first."""

    __slots__ = ("fn", "lead", "_lock", "_dtypes")

    def __init__(self, fn: Any, lead: int, inputs: list[Any]) -> None:
        self.fn, self.lead = fn, lead
        self._lock = threading.Lock()
        self._dtypes = tuple(np.dtype(v.type.dtype) for v in inputs)  # numpy's own dtype objects

    def __call__(self, *inputs: Any) -> list[Any]:
        """The outputs at ``inputs`` (a new list: the function's storage is not shared with the caller)."""
        trusted = len(inputs) == len(self._dtypes)
        if trusted:
            for value, dtype in zip(inputs, self._dtypes):
                if type(value) is not np.ndarray or value.dtype is not dtype or not value.flags.aligned:
                    trusted = False
                    break
        if not trusted:
            inputs = tuple(_aligned(v) for v in inputs)
        with self._lock:
            fn = self.fn
            fn.trust_input = trusted
            return fn(*inputs)


class _Prepared:
    """One operator for one function: compiled functions by signature (see the module docstring),
    and the ``plain`` and ``value`` runners."""

    def __init__(self, adapter: Adapter, operator: Operator, forward: bool, target: Target, info: Info) -> None:
        self.operator, self.forward, self.target, self.y_dtype = operator, forward, target, np.dtype(info.y_dtype)
        oneshot = info.oneshot
        backend = adapter.backend
        large = max(shape_size(info.x_shape), shape_size(info.y_shape)) >= ONESHOT_COMPILED_FROM
        self.mode = _ONESHOT_MODE if oneshot and not large else get_mode(backend.compile_mode)
        self.compiled: dict[Any, _Compiled] = {}
        self.lock = threading.Lock()
        self.plain, self.value = self._runner(False), self._runner(True)

    def _build(self, x: Any, ts: tuple[Any, ...], contexts: tuple[Any, ...], value: bool) -> _Compiled:
        target, operator = self.target, self.operator
        xs, y, symbols = _graph(target, x, contexts)
        t_syms = [pt.tensor(dtype=t.dtype.name, shape=t.shape) for t in ts]
        try:
            outs, lead = _outputs(operator, self.forward, _Derivatives(xs, y, "raise"), t_syms, value)
        except ptg.DisconnectedInputError as error:
            _check_connected(error, y, xs, target.call)
            outs, lead = _outputs(operator, self.forward, _Derivatives(xs, y, "ignore"), t_syms, value)
        except ptg.NullTypeGradError as error:
            rules = sys.modules.get(f"{__name__}_rules")  # loaded wherever a rule's Op is in a graph
            rule = rules.opaque_rule_between(xs, y) if rules is not None and operator.order == 2 else None
            if rule is not None:  # its derivatives are first order (pytensor_rules)
                refusal = rule.second_order("under PyTensor", "AutoPyTensor()")
                raise type(refusal)(f"{target.call}: {refusal}") from error
            raise NotImplementedError(
                f"{target.call}: PyTensor has no derivative for an operation of f: {error}"
            ) from error
        inputs = [xs, *t_syms, *symbols]
        fn = pytensor_function(inputs, outs, mode=self.mode, on_unused_input="ignore", accept_inplace=True)
        return _Compiled(fn, lead, inputs)

    def tangents(self, x: Any, ts: tuple[Any, ...]) -> tuple[Any, ...]:
        """The tangents as numpy arrays of the dtype of x (of f(x) for a pullback)."""
        dtype = self.y_dtype if self.operator is PULLBACK else x.dtype
        return tuple(_numpy(t, dtype) for t in ts)

    def fetch(self, x: Any, ts: tuple[Any, ...], contexts: tuple[Any, ...], value: bool) -> tuple[_Compiled, Any]:
        """The compiled function for these arguments and form (built at the first of its signature:
        ``value``, the one returning the primal too), and the values of the contexts and captured
        state to feed it."""
        signature, values = _inputs(self.target, x, contexts)
        key = (value, x.shape, x.dtype.str, tuple((t.shape, t.dtype.str) for t in ts), signature)
        compiled = self.compiled.get(key)
        if compiled is None:
            with self.lock:
                compiled = self.compiled.get(key)
                if compiled is None:
                    compiled = self.compiled[key] = self._build(x, ts, contexts, value)
        return compiled, values

    def _runner(self, value: bool) -> Any:
        operator = self.operator
        tangents_op = operator.tangent is not None

        stateless = self.target.stateless
        simple = not tangents_op and not value and stateless
        # a plain tangent operator of a stateless f on numpy arrays (hvp, pullback, pushforward): its
        # key built from x and the one tangent and one call, where the general path below converts
        # each argument and walks the contexts first (2 us of a 7 us hvp at n = 10)
        one_tangent = tangents_op and not value and stateless
        tangent_dtype = self.y_dtype if operator is PULLBACK else None  # else x's dtype

        def run(x: Any, ts: tuple[Any, ...], contexts: tuple[Any, ...]) -> Any:
            if simple and not contexts and type(x) is np.ndarray:  # the common case: one dict lookup, one call
                compiled = self.compiled.get((False, x.shape, x.dtype.str, (), ()))
                if compiled is not None:
                    return compiled(x)[0]
            elif one_tangent and not contexts and len(ts) == 1 and type(x) is np.ndarray:
                t = ts[0]
                if type(t) is np.ndarray and t.dtype == (tangent_dtype or x.dtype):
                    compiled = self.compiled.get((False, x.shape, x.dtype.str, ((t.shape, t.dtype.str),), ()))
                    if compiled is not None:
                        return tuple(compiled(x, t)[compiled.lead :])
            xn = _numpy(x)
            ts = self.tangents(xn, ts) if tangents_op else ()
            compiled, values = self.fetch(xn, ts, contexts, value)
            outs = compiled(xn, *ts, *values)
            lead = compiled.lead
            result: Any = tuple(outs[lead:]) if tangents_op else outs[lead]
            if not value:
                return result
            primal = outs[0] if lead == 1 else (outs[0], outs[1])
            return value_form(operator, primal, result, _same)

        return run


def _same(value: Any) -> Any:
    return value


def _evaluated(value: Any) -> Any:
    """``value`` with each PyTensor variable in it (a list, tuple or dict of them) evaluated to numpy."""
    if isinstance(value, Variable):
        return np.asarray(value.eval())
    if isinstance(value, (list, tuple)):
        return type(value)(_evaluated(v) for v in value)
    if isinstance(value, dict):
        return {k: _evaluated(v) for k, v in value.items()}
    return value


class Adapter(_Base):
    """PyTensor; see the module docstring."""

    engine_name = "PyTensor"
    array_family = NUMPY  # has_aux's aux: f at numpy x, its PyTensor variables evaluated (see aux)

    def aux(self, target: Target, x: Any, contexts: Contexts) -> Any:
        """has_aux's aux: ``f`` at ``x`` as numpy (what ``pytensor.tensor`` functions take), the
        PyTensor variables it returns evaluated, so that aux is numpy as the results are."""
        return _evaluated(super().aux(target, x, contexts))

    builds_graph = True  # DifferentiateWith(f, AutoPyTensor())'s primal runs f through evaluate
    local_sparsity_fallback = True  # AutoSparse's default detector on pytensor.tensor code: the pattern at and around x
    complex_dtypes = ()  # PyTensor's complex derivatives do not follow docs/complex.md (_refuse_complex)

    @staticmethod
    def traced(value: Any) -> bool:
        """A symbolic variable: under closure='const' the frontend checks that none is left in captured lists."""
        return isinstance(value, (Variable, WritableArray))

    def evaluate(self, target: Target, x: Any, contexts: Contexts) -> Any:
        """``f(x)`` once: its graph compiled for one call and run."""
        xn = _numpy(x)
        xs, y, symbols = _graph(target, xn, contexts)
        leaves = _walk(target, xn, contexts, False)[0]
        fn = pytensor_function([xs, *symbols], y, mode=_ONESHOT_MODE, on_unused_input="ignore")
        return fn(xn, *leaves.values)

    def output_info(self, target: Target, x: Any, contexts: Contexts, oneshot: Any) -> Any:
        xn = _numpy(x)
        xs, y, symbols = _graph(target, xn, contexts)
        shape = tuple(y.type.shape)
        if None in shape:  # not known statically: computed
            leaves = _walk(target, xn, contexts, False)[0]
            fn = pytensor_function([xs, *symbols], y.shape, mode=_ONESHOT_MODE, on_unused_input="ignore")
            dims = cast("np.ndarray", fn(xn, *leaves.values))  # one output: its value (None only without outputs)
            shape = tuple(int(s) for s in dims)
        _refuse_complex(xs, y, target.call)
        return Info(shape, np.dtype(y.dtype), None, tuple(np.shape(x)), oneshot)

    def prepare(
        self, operator: Operator, target: Target, x: Any, tangents: Any, contexts: Contexts, info: Info
    ) -> Runners:
        prepared = _Prepared(self, operator, self.forward(operator, info), target, info)
        if not info.oneshot:  # a user's prepare_*: the plain form compiled here, not at the first call
            xn = _numpy(x)
            ts = prepared.tangents(xn, tangents) if operator.tangent is not None else ()
            prepared.fetch(xn, ts, contexts, False)
        return Runners(prepared.plain, prepared.value, prepared)
