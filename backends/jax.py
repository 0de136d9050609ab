"""``AutoJAX``: every operator on JAX's own transformations, compiled once at preparation.

- pushforward: ``jax.jvp`` (a batch: ``jax.linearize`` then ``vmap`` over the tangents); pullback:
  ``jax.vjp`` (a batch: ``vmap`` of the VJP); jacobian: ``jacfwd``/``jacrev`` (``mode=None``:
  forward when ``x.size <= f(x).size``); gradient: ``value_and_grad``; derivative: ``jvp`` along 1.
  ``mode="forward"``/``"reverse"`` forces the direction of every first-order operator
  (a reverse pushforward contracts ``jacrev``, a forward pullback or gradient ``jacfwd``).
- hessian, hvp, second derivative: forward over reverse in every mode (``jacfwd(grad)``,
  ``jvp(grad)``, ``jvp`` of the ``jvp``).
- ``jit=True``: preparation traces and compiles the operator once (its value form, ``value_and_*``,
  at its first call, as ``jax.jit`` compiles); a prepared call passes the arrays to the compiled
  function and nothing else. A one-shot call runs eagerly (compiling for one call costs more than it
  saves); the third call without ``prep=`` with the same function and shapes prepares
  (``diffinterface.prep_cache``), and later ones take the compiled path.
- float64 inputs are computed in float64 inside ``jax.enable_x64(True)`` (a thread-local context),
  entered only when the input is float64 and x64 is not already on; the user's global setting is
  never changed. float32 stays float32.
- Constant values, caches and the state ``f`` captures are arguments of the compiled function, read
  at every call: a new value never recompiles (their Python ints, strings and other non-array
  leaves are static: a new one compiles once more). Caches and captured arrays are given to ``f``
  as writable stand-ins (:class:`WritableArray`) whose item assignment is a functional update.
- numpy inputs are passed to the compiled function as they are (JAX converts them on the way in);
  results come back as jax arrays, which the frontend turns into numpy without copying (read-only
  arrays, as ``np.asarray`` of a jax array gives).

Size: over 400 lines in one module, because an adapter is the registry's unit (``AutoJAX.adapter`` names
one module, imported at first use).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

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
    TORCH,
    Cache,
    Info,
    Operator,
    Runners,
    Unserved,
    const_write_error,
    contract_all,
    duplicate,
    families,
    family,
    host_callbacks,
    host_error,
    innermost_frame,
    jax_enable_x64,
    note_conversion,
    operand_error,
    prefer,
    raised_by,
    read_only_alias,
    standin_error,
    structured_output,
    take_conversion,
    to_family,
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

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from jax.typing import ArrayLike

    from diffinterface.extend import Array, Contexts, Info, Layout, Target

enable_x64: Any = jax_enable_x64()  # float64 inside a thread-local context


def _x64_where(float64: bool) -> AbstractContextManager[Any]:
    """JAX's x64 context where a float64 value meets x64 off (float64 stays float64, the global
    setting untouched), else nothing: what a preparation, a trace, ``aux`` and ``evaluate`` run in.
    The prepared runners test the setting inline instead (see ``_Prepared._runner``)."""
    if float64 and not jax.config.jax_enable_x64:  # type: ignore[attr-defined]
        return enable_x64(True)
    return contextlib.nullcontext()


class WritableArray(_Writable):
    """A writable stand-in for an immutable jax array: ``a[i] = v`` and ``a[i] += v`` are updates.

    What ``f`` receives for a captured array or a cache under ``AutoJAX``. Indexing, arithmetic and
    ``@`` give jax arrays; ``jnp.asarray(a)`` (or ``xp.asarray``) gives the current value.
    """

    __slots__ = ()
    _namespace = jnp
    _wrap = staticmethod(jnp.asarray)  # type: ignore[assignment]  # narrower than the base's (value) -> Any

    @staticmethod
    def _update(value: Any, index: Any, item: Any) -> Any:
        return value.at[index].set(item)

    @property
    def __jax_array__(self) -> Any:
        """The conversion hook, looked up on the instance: older JAX calls it (the current value), newer
        JAX refuses it with a generic error, which the lookup's mark lets the adapter recognise."""
        note_conversion("JAX")
        return lambda: self.value


# JAX's errors for a tracer that meets code which needs a concrete value (numpy's setitem, float())
_TRACER_ERRORS = tuple(
    getattr(jax.errors, name)
    for name in (
        "ConcretizationTypeError",
        "TracerArrayConversionError",
        "TracerIntegerConversionError",
        "TracerBoolConversionError",
        "UnexpectedTracerError",
    )
    if hasattr(jax.errors, name)
)


def _leaked(error: BaseException) -> bool:
    """The recogniser of ``const_write_error``: one of JAX's tracer errors in the chain (a tracer
    written into a numpy array), or an operator error in ``f`` between a tracer and a foreign array."""
    return raised_by(error, lambda e: isinstance(e, _TRACER_ERRORS)) or operand_error(
        error, lambda v: isinstance(v, Tracer)
    )


def _setitem_refusal() -> Any:
    """The code that raises JAX's refusal of item assignment (``a[0] = v``, ``a[0:2] += v`` on a jax
    array or tracer), learnt once by provoking it: the refusal is a plain TypeError, told apart from
    f's own TypeErrors by the frame of JAX that raised it, not by its message."""
    try:
        jnp.zeros(1).__setitem__(0, 1.0)
    except TypeError as error:
        frame = innermost_frame(error)
        return frame.f_code if frame is not None else None
    return None


_SETITEM_REFUSAL: list[Any] = []


def _jax_write_refused(error: BaseException) -> bool:
    if not isinstance(error, TypeError):
        return False
    if not _SETITEM_REFUSAL:
        _SETITEM_REFUSAL.append(_setitem_refusal())
    frame = innermost_frame(error)
    return frame is not None and _SETITEM_REFUSAL[0] is not None and frame.f_code is _SETITEM_REFUSAL[0]


def _write_refused(error: BaseException) -> bool:
    """Whether ``error`` is a write into a captured array that ``f`` got as a plain array (a jax array
    or tracer, or a read-only view of a numpy array): ``f`` then gets writable stand-ins."""
    return raised_by(error, Adapter.refused_write)


def _plain(value: Any) -> Any:
    """A captured array as ``f`` reads it until it writes: a numpy array as a read-only view (a write
    raises), a jax array or tracer as it is (immutable)."""
    alias = read_only_alias(value)
    if alias is not None:
        return alias
    if isinstance(value, jax.Array) or not hasattr(value, "shape"):
        return value  # immutable, or not an array (a number)
    return WritableArray(value)  # another engine's array (a torch buffer y): JAX cannot write into it


def _writable(value: Any) -> Any:
    """A captured array once ``f`` writes into its state: a writable stand-in (writes are functional
    updates), except a static integer or boolean array (``_Constant``: a fresh numpy copy at this
    trace, JAX's constant), which stays the numpy array JAX's functions need (lax.select's mask)."""
    return value if type(value) is np.ndarray and value.dtype.kind in "biu" else WritableArray(value)


_DYNAMIC_TYPES: set[type] = set()  # the types _is_dynamic has answered True for (the answer is the type's)


# Captured integer and boolean numpy arrays up to this size are static, as JAX's own jit makes a
# closure's numpy arrays constants: JAX needs some as values (lax.split's sizes, a reshape's shape),
# and they carry no derivative. Compared by value at each prepared call (a new value compiles again).
_STATIC_SIZE = 4096


class _Constant:
    """A captured integer or boolean numpy array as a static leaf: hashed and compared by value; ``f``
    gets a fresh copy of it at each trace."""

    __slots__ = ("array", "_key")

    def __init__(self, array: np.ndarray) -> None:
        self.array = np.array(array)  # the value at this call: later writes by the user are not it
        self._key = (self.array.dtype.str, self.array.shape, self.array.tobytes())

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other: object) -> bool:
        return type(other) is _Constant and self._key == other._key

    def same(self, value: Any) -> bool:
        return (
            type(value) is np.ndarray
            and value.dtype == self.array.dtype
            and value.shape == self.array.shape
            and bool(np.array_equal(value, self.array))
        )


def _static_leaf(leaf: Any) -> Any:
    return _Constant(leaf) if type(leaf) is np.ndarray else leaf


def _is_dynamic(leaf: Any) -> bool:
    """Leaves passed to the compiled function as arguments; everything else is static (small integer
    and boolean numpy arrays among them: see ``_STATIC_SIZE``)."""
    kind = type(leaf)
    if kind is np.ndarray:
        return leaf.dtype.kind not in "biu" or leaf.size > _STATIC_SIZE
    if kind in _DYNAMIC_TYPES:  # on the prepared path: a set lookup instead of jax.Array's isinstance
        return True
    if isinstance(leaf, (jax.Array, np.ndarray, np.generic, float, complex)) and not isinstance(leaf, bool):
        _DYNAMIC_TYPES.add(kind)
        return True
    return False


class _Static:
    """The static part of the arguments (a jit static argument): hashed by value where possible."""

    __slots__ = ("treedef", "leaves", "_hash")

    def __init__(self, treedef: Any, leaves: tuple[Any, ...]) -> None:  # treedef: JAX's PyTreeDef
        self.treedef, self.leaves = treedef, leaves
        try:
            self._hash = hash((treedef, leaves))
        except TypeError:  # an unhashable captured object: identity it is
            self._hash = hash((treedef, tuple(id(v) for v in leaves)))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:  # object: object.__eq__'s own parameter
        if not isinstance(other, _Static) or self._hash != other._hash or self.treedef != other.treedef:
            return False
        return all(a is b or (type(a) is type(b) and a == b) for a, b in zip(self.leaves, other.leaves))


_DYNAMIC = object()


def _equal(value: Any, seen: Any) -> bool:
    """Whether a static leaf equals the one seen at preparation, as JAX's cache of static arguments
    compares them; an object whose ``==`` has no plain answer is not equal (it takes the static path)."""
    if value is seen:
        return True
    if type(seen) is _Constant:
        return seen.same(value)
    try:
        return type(value) is type(seen) and bool(value == seen)
    except (TypeError, ValueError):
        return False


class _Function:
    """``f`` as JAX sees it: ``pure(x, dyn, static) -> y``, its contexts and captured state as arguments.

    ``common`` is the static part seen at preparation (the structure, and the leaves that are not
    arrays or floats: the keys and sizes f captures beside its arrays); calls whose static part equals
    it use a compiled function that holds it in its closure, avoiding the cost of a static jit argument
    and of hashing it (several microseconds a call). Equal is what JAX's own cache of static arguments
    means: the same object, or one of the same type that compares equal.
    """

    __slots__ = ("target", "kinds", "simple", "common", "flat", "writes", "probed")

    def __init__(self, target: Target, contexts: tuple[Any, ...]) -> None:
        self.target = target
        # set when f wrote into a captured array: from then on f gets writable stand-ins for them. Until
        # then f reads the plain arrays, which JAX's own functions take (lax.select of a captured mask)
        self.writes = False
        self.probed = False  # whether f's writes were looked for over the user's own arrays (see _probe)
        self.kinds = tuple(type(c) for c in contexts)
        self.simple = not contexts and target.stateless
        self.common = None
        self.flat = False  # no contexts and every captured leaf an array or a number: no pytree to flatten
        if not self.simple:
            flat, treedef = self._flatten(contexts)
            self.common = _Static(treedef, tuple(_static_leaf(v) if not _is_dynamic(v) else _DYNAMIC for v in flat))
            if all(_is_dynamic(v) for v in flat):
                plan = target.plan  # has_state, spelt out for a type checker
                self.flat = not contexts and plan is not None and not plan.empty and len(flat) == len(plan.read())

    def _flatten(self, contexts: tuple[Any, ...]) -> tuple[Any, ...]:
        plan = self.target.plan
        state = plan.read() if plan is not None and not plan.empty else []  # the state, where f has some
        flat, treedef = jax.tree_util.tree_flatten(([c.value for c in contexts], state))
        # a torch tensor is an argument too, as numpy (no copy on the CPU): as a static argument it
        # would be baked into the compiled program, and an update by the user would not be seen
        return [np.asarray(to_family(v, NUMPY)) if family(v) == TORCH else v for v in flat], treedef

    def arguments(self, contexts: tuple[Any, ...]) -> tuple[Any, ...]:
        """``(dyn, static)``: the current values of the contexts and of the captured state, split;
        ``static`` is None when it is ``common``."""
        if self.flat:  # the common case, on the prepared path: the leaves as they are (a few us less)
            plan = self.target.plan
            assert plan is not None  # flat: f has captured state
            state = plan.read()
            if all(map(_is_dynamic, state)):
                return state, None
        flat, treedef = self._flatten(contexts)
        common = self.common
        if common is not None and treedef == common.treedef:  # one pass: most static leaves are the same objects
            dyn = []
            for v, seen in zip(flat, common.leaves):
                if seen is _DYNAMIC:
                    if not _is_dynamic(v):
                        break
                    dyn.append(v)
                elif v is not seen and (_is_dynamic(v) or not _equal(v, seen)):
                    break
            else:
                return dyn, None
        dynamic = [_is_dynamic(v) for v in flat]
        dyn = [v for v, d in zip(flat, dynamic) if d]
        return dyn, _Static(treedef, tuple(_DYNAMIC if d else _static_leaf(v) for v, d in zip(flat, dynamic)))

    def pure(self, x: jax.Array, dyn: Sequence[ArrayLike] = (), static: _Static | None = None) -> Any:
        if self.simple:
            return _output(self.target.f(x), self.target)
        static = self.common if static is None else static
        assert static is not None  # not simple: common is set
        it = iter(dyn)
        flat = [next(it) if v is _DYNAMIC else (v.array.copy() if type(v) is _Constant else v) for v in static.leaves]
        values, state = jax.tree_util.tree_unflatten(static.treedef, flat)
        contexts = [duplicate(v, WritableArray) if kind is Cache else v for kind, v in zip(self.kinds, values)]

        def run(leaf: Any) -> Any:
            fn = self.target.instance(leaf, values=state if self.target.has_state else None)
            return _output(_unwrap(fn(x, *contexts)), self.target)

        if self.writes or not self.target.has_state:
            return run(_writable)
        try:
            out = run(_plain)
        except Exception as error:
            if not _wrote(error):
                raise  # f's own error
            self.writes = True  # f wrote into a captured array: it runs again over stand-ins (this trace too)
            return run(_writable)
        if not self.probed and any(isinstance(v, Tracer) for v in jax.tree_util.tree_leaves(state)):
            self.probed = True
            self._probe(x, contexts)
            if self.writes:
                return run(_writable)
        return out

    def _probe(self, x: jax.Array, contexts: list[Any]) -> None:
        """Where the captured arrays reach ``f`` as JAX's arguments (tracers, in a compiled call), an
        in-place operator on a part of one (``part = buf[1:3]; part *= x``) is no write JAX can see: a
        tracer has none, and Python rebinds ``part`` to ``part * x``. So ``f`` runs once, in this trace,
        over the user's own arrays as guarded aliases (``read_only_alias``: an in-place operator is a
        refused write), its result discarded: a refused write sets ``writes``, and ``f`` then gets
        writable stand-ins (whose views write their base). It runs after ``f`` succeeded over the tracers
        (an error of ``f`` is raised after one run), and any other error of it is ignored (``f`` may use
        JAX's own methods on a captured array, ``buf.at[0].set(v)``, which a numpy alias lacks)."""
        plan = self.target.plan
        assert plan is not None  # has_state
        fn = self.target.instance(_plain, values=plan.read())
        try:
            fn(x, *contexts)
        except Exception as error:
            self.writes = _wrote(error)


def _reporting(runner: Callable[..., Any]) -> Callable[..., Any]:
    """``runner`` raising a host callback's own error where JAX reports it as a runtime error (an opaque
    rule's body, a ``DifferentiateWith``'s inner backend: its error names its call, JAX's does not;
    ``diffinterface.extend.keep_host_error``). Only for an ``f`` that meets a host callback: the others'
    runners are left one call."""

    def run(x: Any, tangents: tuple[Array, ...], contexts: Contexts) -> Any:
        with _host_errors():
            return runner(x, tangents, contexts)

    return run


@contextlib.contextmanager
def _host_errors() -> Any:
    """A host callback's own error for JAX's report of it (:func:`_reporting`); any other error as it is."""
    try:
        yield
    except RuntimeError as error:  # JaxRuntimeError (XlaRuntimeError before 0.4.36)
        kept = host_error(error)
        if kept is None:
            raise
        raise kept from None


def _wrote(error: BaseException) -> bool:
    """Whether ``error`` (of ``f`` over plain arrays) is a write: one refused over the plain arrays, or a
    traced value written into a numpy array ``f`` made from them (``copy.copy(buf); c[0] = z[0]``); over
    stand-ins both are functional updates."""
    return _write_refused(error) or raised_by(error, lambda e: isinstance(e, _TRACER_ERRORS))


def _output(y: Any, target: Target) -> Any:
    """``f``'s output as one jax array (checked while JAX traces: no cost in a compiled call)."""
    if isinstance(y, (tuple, list, dict)):
        raise structured_output(y, target.call)
    return jnp.asarray(y)


def _split(results: jax.Array, count: int) -> tuple[jax.Array, ...]:
    return tuple(results[i] for i in range(count))


def _cast(ts: Sequence[ArrayLike], like: jax.Array) -> tuple[ArrayLike, ...]:
    """Tangents (or cotangents) in the dtype of ``like`` (x, or f(x)), as the other backends take them:
    JAX refuses a tangent of another dtype, and a Python number arrives weakly typed. Traced: no cost
    in a compiled call where the dtypes already match."""
    dtype = like.dtype
    return tuple(t if getattr(t, "dtype", None) == dtype else jnp.asarray(t).astype(dtype) for t in ts)


def _jvps(f: Callable[..., Any], x: jax.Array, ts: tuple[ArrayLike, ...]) -> tuple[Any, ...]:
    """``(f(x), (J t for t in ts))``: ``jax.jvp`` for one tangent, ``linearize`` and ``vmap`` for a batch."""
    ts = _cast(ts, x)
    if len(ts) == 1:
        y, out = jax.jvp(f, (x,), (ts[0],))
        return y, (out,)
    y, lin = jax.linearize(f, x)
    return y, _split(jax.vmap(lin)(jnp.stack(ts)), len(ts))


def _with_value(transform: Callable[..., Callable[..., Any]], f: Callable[..., Any]) -> Callable[..., Any]:
    """``transform`` (jacfwd, jacrev, grad) of ``f`` that also returns ``f(x)``, from the same pass."""
    return transform(lambda z: (f(z), f(z)), has_aux=True)


# What an operator is traced as inside the compiled function: ``(f, x, tangents, value) -> results``,
# with ``value`` the value form (a tuple, the value first); without, the plain result only, so the
# compiled program computes nothing it does not return (JAX's counterpart of the kit's ``Body``,
# which returns ``(primal, result)`` for both forms: here each form is its own program).
Traced = Callable[[Callable[..., Any], Any, tuple[Any, ...], bool], Any]  # x: an array, or a list of leaves


def _pushforward(forward: bool) -> Traced:
    def pushforward(f: Callable[..., Any], x: jax.Array, ts: tuple[jax.Array, ...], value: bool) -> Any:
        if not forward:
            jac, y = _with_value(jax.jacrev, f)(x)
            out = contract_all(jac, _cast(ts, x), x, True)
        else:
            y, out = _jvps(f, x, ts)
        return (y, out) if value else out

    return pushforward


def _pullback(forward: bool) -> Traced:
    def pullback(f: Callable[..., Any], x: jax.Array, ts: tuple[ArrayLike, ...], value: bool) -> Any:
        if forward:
            jac, y = _with_value(jax.jacfwd, f)(x)
            out = contract_all(jac, _cast(ts, y), x, False)
        else:
            y, vjp = jax.vjp(f, x)
            ts = _cast(ts, y)
            if len(ts) == 1:
                out = (vjp(ts[0])[0],)
            else:
                out = _split(jax.vmap(lambda t: vjp(t)[0])(jnp.stack(ts)), len(ts))
        return (y, out) if value else out

    return pullback


def _derivative(forward: bool) -> Traced:
    def derivative(f: Callable[..., Any], x: jax.Array, _: tuple[jax.Array, ...], value: bool) -> Any:
        if forward:
            y, der = jax.jvp(f, (x,), (jnp.ones_like(x),))
        else:
            der, y = _with_value(jax.jacrev, f)(x)
        return (y, der) if value else der

    return derivative


def _gradient(forward: bool) -> Traced:
    def gradient(f: Callable[..., Any], x: jax.Array, _: tuple[jax.Array, ...], value: bool) -> Any:
        if forward:
            return _with_value(jax.jacfwd, f)(x)[::-1] if value else jax.jacfwd(f)(x)
        return jax.value_and_grad(f)(x) if value else jax.grad(f)(x)

    return gradient


def _jacobian(forward: bool) -> Traced:
    def jacobian(f: Callable[..., Any], x: jax.Array, _: tuple[jax.Array, ...], value: bool) -> Any:
        transform = jax.jacfwd if forward else jax.jacrev
        return _with_value(transform, f)(x)[::-1] if value else transform(f)(x)

    return jacobian


def _second_derivative(forward: bool) -> Traced:
    def second_derivative(f: Callable[..., Any], x: jax.Array, _: tuple[jax.Array, ...], value: bool) -> Any:
        def first(z: jax.Array) -> tuple[jax.Array, jax.Array]:
            return jax.jvp(f, (z,), (jnp.ones_like(z),))

        (y, der), (_, der2) = jax.jvp(first, (x,), (jnp.ones_like(x),))
        return (y, der, der2) if value else der2

    return second_derivative


def _hvp(forward: bool) -> Traced:
    def hvp(f: Callable[..., Any], x: jax.Array, ts: tuple[jax.Array, ...], value: bool) -> Any:
        g, out = _jvps(jax.grad(f), x, ts)
        return (g, out) if value else out

    return hvp


def _hessian(forward: bool) -> Traced:
    def hessian(f: Callable[..., Any], x: jax.Array, _: tuple[jax.Array, ...], value: bool) -> Any:
        if not value:
            return jax.jacfwd(jax.grad(f))(x)
        hess, (y, g) = jax.jacfwd(lambda z: (jax.grad(f)(z), jax.value_and_grad(f)(z)), has_aux=True)(x)
        return y, g, hess

    return hessian


# JAX's native operators: for each, the body in direction ``forward`` (True: forward mode)
NATIVE: dict[Operator, Callable[[bool], Traced]] = {
    PUSHFORWARD: _pushforward,
    PULLBACK: _pullback,
    DERIVATIVE: _derivative,
    GRADIENT: _gradient,
    JACOBIAN: _jacobian,
    SECOND_DERIVATIVE: _second_derivative,
    HVP: _hvp,
    HESSIAN: _hessian,
}


class _Prepared:
    """One operator compiled for one function: the value form and the plain form (which drops the
    value, so the compiled program returns only what is asked for). :meth:`runners` gives the
    runners, ``(x, tangents, contexts) -> results``: they hold this object and it does not hold them
    (no reference cycle: a one-shot call's compiled forms, its function and its captured arrays are
    freed as soon as the call returns, not at the garbage collector's next pass).

    A tangent operator prepared for one tangent compiles it bare (not as a 1-tuple pytree) and the
    runner puts the result back in a tuple: a tenth of a microsecond at the smallest sizes.
    """

    __slots__ = ("function", "value_form", "plain_form", "x64", "convert", "tangents", "bare")

    def __init__(
        self,
        function: _Function,
        operator: Operator,
        body: Traced,
        jit: bool,
        x64: bool,
        convert: bool,
        n_tangents: int,
    ) -> None:
        self.function, self.x64, self.convert = function, x64, convert
        self.tangents = operator.tangent is not None
        self.bare = self.tangents and n_tangents == 1
        self.value_form = self._compile(body, True, jit)
        self.plain_form = self._compile(body, False, jit)

    def runners(self, host: bool, jit: bool) -> Runners:
        """The plain and value runners (see :meth:`_runner`), this object as their data; ``host``: ``f``
        may run a host callback (an opaque rule), whose body's error the runners raise for JAX's.

        ``fast`` (``extend.Runners``): the compiled plain form itself, where the plain runner is a
        Python layer around it (its x64 test, the tuple of one tangent's result): a simple ``f``, without
        a tangent or with one (bare: ``fast(x, t)``), prepared with x64 on where ``x`` is float64 (the
        user's setting, global or their own ``enable_x64``). The x64 test is then made where ``jax.jit``
        makes it, in its cache key: a call with x64 off traces the form again, and that trace raises
        ``Unserved`` (:meth:`_compile`) before it traces ``f``; the prep's plain runner, which enters the
        x64 context, serves the call and the later ones (a prepared gradient at n = 10 with x64 on: 4.95
        -> 4.63 us against 3.98 for JAX's own ``jit(grad)``; a prepared hvp at n = 10, float32 and float64:
        1.28x and 1.32x -> 1.19x and 1.17x JAX's own ``jit`` of ``jvp(grad)``, with the fast path's check of
        ``aval``, ``benchmarks/results/jax_overhead*.md``, measured 2026-11-28 on a 2-core x86_64 VM).
        Prepared with x64 off (the adapter's own context), the calls would each meet x64 off: none
        offered. Without a tangent, a float32 prep's plain runner is the compiled form already."""
        plain, value = self._runner(self.plain_form, False), self._runner(self.value_form, True)
        if host:
            return Runners(_reporting(plain), _reporting(value), self)
        direct = jit and self.function.simple and not self.convert and (self.bare or not self.tangents)
        if direct and self.x64 and not jax.config.jax_enable_x64:  # type: ignore[attr-defined]
            direct = False
        return Runners(plain, value, self, self.plain_form if direct else None)

    def _runner(self, compiled: Any, value: bool) -> Any:
        """The runner: one call into ``compiled`` where ``f`` is simple, :meth:`_state_runner` where
        its state is arrays and numbers, else :meth:`run`. A float64 ``x`` was traced with x64 on:
        the runner checks that it still is (globally, or in the user's own ``enable_x64``), and only
        where it is not takes :meth:`run`, which enters the context (a prepared gradient at n = 10
        with x64 on: 4.8 us, where going through :meth:`run` took 5.3, against 4.6 for JAX's own
        ``jit(grad)``); ``not x64`` is the whole test of any other runner."""
        slow = lambda x, tangents, contexts: self.run(compiled, value, x, tangents, contexts)  # noqa: E731
        if self.convert or not (self.function.simple or self.function.flat):
            return slow
        x64, config = self.x64, jax.config
        if not self.function.simple:
            state = self._state_runner(compiled, value)
            if not x64:
                return state
            return lambda x, tangents, contexts: (
                state(x, tangents, contexts) if config.jax_enable_x64 else slow(x, tangents, contexts)  # type: ignore[attr-defined]
            )
        if not self.tangents:  # the common case: the compiled function is the runner (its signature)
            if not x64:
                return compiled
            return lambda x, tangents, contexts: (
                compiled(x, tangents, contexts) if config.jax_enable_x64 else slow(x, tangents, contexts)  # type: ignore[attr-defined]
            )
        if not self.bare:
            return lambda x, tangents, contexts: (
                compiled(x, tangents) if not x64 or config.jax_enable_x64 else slow(x, tangents, contexts)  # type: ignore[attr-defined]
            )
        if not value:
            return lambda x, tangents, contexts: (
                (compiled(x, tangents[0]),) if not x64 or config.jax_enable_x64 else slow(x, tangents, contexts)  # type: ignore[attr-defined]
            )

        def run_value(x: Array, tangents: tuple[Array, ...], contexts: Contexts) -> Any:
            if x64 and not config.jax_enable_x64:  # type: ignore[attr-defined]
                return slow(x, tangents, contexts)
            y, out = compiled(x, tangents[0])
            return y, (out,)

        return run_value

    def _state_runner(self, compiled: Any, value: bool) -> Any:
        """The runner of an ``f`` whose captured state is arrays and numbers (no contexts): what
        :meth:`_invoke` does for it, unrolled (a microsecond less at small sizes). A call that finds
        another kind of leaf in the state (the user rebound a captured name) takes :meth:`run`."""
        plan = self.function.target.plan
        assert plan is not None  # called where f has captured state
        read, common, tangents_op, bare = plan.read, compiled[0], self.tangents, self.bare

        def run_state(x: Array, tangents: tuple[Array, ...], contexts: Contexts) -> Any:
            state = read()
            if not all(map(_is_dynamic, state)):
                return self.run(compiled, value, x, tangents, contexts)
            if not tangents_op:
                return common(x, state)
            if not bare:
                return common(x, tangents, state)
            results = common(x, tangents[0], state)
            return (results[0], (results[1],)) if value else (results,)

        return run_state

    def _compile(self, body: Traced, value: bool, jit: bool) -> Any:
        """The compiled function; for a function with contexts or state, a pair: one for the
        ``common`` static structure (held in its closure) and one taking the static part as argument."""
        function, bare = self.function, self.bare

        def call(f: Callable[..., Any], x: jax.Array, ts: tuple[jax.Array, ...] | jax.Array) -> Any:
            if not bare:
                return body(f, x, cast("tuple[jax.Array, ...]", ts), value)
            results = body(f, x, (ts,), value)  # ts is the one tangent, bare
            return (results[0], results[1][0]) if value else results[0]

        x64 = self.x64

        def simple_tangents(x: jax.Array, ts: tuple[jax.Array, ...] | jax.Array) -> Any:
            if x64 and not jax.config.jax_enable_x64:  # type: ignore[attr-defined]
                raise Unserved("a float64 x's compiled form called with x64 off")  # (as in simple, below)
            return call(function.pure, x, ts)

        def simple(x: jax.Array, tangents: tuple[()], contexts: tuple[()]) -> Any:
            # the runner's signature, so that the compiled function is the runner (_runner: empty tuples
            # cost jax.jit nothing measurable). A float64 x's form traced with x64 off (JAX's cache key has
            # the setting) would compute in float32: the fast runner's call that meets it is declined
            # here, and the plain runner enters the x64 context (runners)
            if x64 and not jax.config.jax_enable_x64:  # type: ignore[attr-defined]
                raise Unserved("a float64 x's compiled form called with x64 off")
            return body(function.pure, x, (), value)

        def with_tangents(
            x: jax.Array, ts: tuple[jax.Array, ...] | jax.Array, dyn: Sequence[ArrayLike], static: _Static | None
        ) -> Any:
            return call(lambda z: function.pure(z, dyn, static), x, ts)

        def without_tangents(x: jax.Array, dyn: Sequence[ArrayLike], static: _Static | None) -> Any:
            return body(lambda z: function.pure(z, dyn, static), x, (), value)

        if function.simple:
            run: Any = simple_tangents if self.tangents else simple
            return jax.jit(run) if jit else run
        run = with_tangents if self.tangents else without_tangents
        common = function.common

        def common_tangents(x: jax.Array, ts: tuple[jax.Array, ...] | jax.Array, dyn: Sequence[ArrayLike]) -> Any:
            return run(x, ts, dyn, common)

        def common_plain(x: jax.Array, dyn: Sequence[ArrayLike]) -> Any:
            return run(x, dyn, common)

        run_common = common_tangents if self.tangents else common_plain
        if not jit:
            return run_common, run
        return jax.jit(run_common), jax.jit(run, static_argnums=3 if self.tangents else 2)

    def run(
        self,
        compiled: Any,
        value: bool,
        x: Array | list[Array],
        tangents: tuple[Array, ...],
        contexts: Contexts,
        ahead: bool = False,
    ) -> Any:
        if self.x64 and not jax.config.jax_enable_x64:  # type: ignore[attr-defined]
            with enable_x64(True):
                return self._invoke(compiled, value, x, tangents, contexts, ahead)
        return self._invoke(compiled, value, x, tangents, contexts, ahead)

    def compile_ahead(self, x: Array | list[Array], tangents: tuple[Array, ...], contexts: Contexts) -> None:
        """Lower and compile the plain form for these arguments now (``jit(...).lower(...).compile()``),
        so that preparation pays its compile and the first prepared call does not. JAX caches the trace
        and the executable by the arguments' shapes and dtypes, which the prepared calls share. The
        value form (``value_and_*``) compiles at its first call, as ``jax.jit`` does: compiling both
        here made preparation cost two of JAX's own first calls where most users run one form."""
        self.run(self.plain_form, False, x, tangents, contexts, ahead=True)

    def _invoke(
        self,
        compiled: Any,
        value: bool,
        x: Array | list[Array],
        tangents: tuple[Array, ...],
        contexts: Contexts,
        ahead: bool = False,
    ) -> Any:
        if self.convert:  # torch tensors: through dlpack (zero-copy on the CPU), inside the x64 context
            x, tangents = _to_jax(x), tuple(_to_jax(t) for t in tangents)
        args: tuple[Any, ...] = (x,)
        if self.tangents:
            args += (tangents[0] if self.bare else tangents,)
        elif self.function.simple:  # the simple form takes the runner's signature (_compile)
            args += ((), ())
        if not self.function.simple:
            dyn, static = self.function.arguments(contexts)
            if static is None:
                compiled, args = compiled[0], args + (dyn,)
            else:
                compiled, args = compiled[1], args + (dyn, static)
        if ahead:
            compiled.lower(*args).compile()
            return None
        results = compiled(*args)
        if not self.bare:
            return results
        return (results[0], (results[1],)) if value else (results,)


def _to_jax(value: Array | list[Array]) -> Any:
    """A torch tensor, or a list of them (the leaves of a structure), as jax arrays."""
    if isinstance(value, list):
        return [to_family(v, "jax") for v in value]
    return to_family(value, "jax")


def _structured(body: Traced, layout: Layout, operator: Operator, forward: bool, n_tangents: int) -> Traced:
    """``body`` over the leaves of a structured x (and tangents), its results cut into leaves, all
    inside the compiled program (``structures_inside``: see ``diffinterface._core.structure``).

    The gradient (reverse mode), one pullback, one pushforward (forward mode) and one hvp of a real
    x run JAX's own pytree transforms over the list of leaves instead (``f`` takes the list too):
    measured at 10 leaves of 1e3, a program over the concatenated vector cost 1.14x JAX's own
    ``jit(grad)`` of the dict, the tree program 1.0x."""
    tangent_like = layout.tangent(operator)
    complex_parts = layout.xs.has_complex or (layout.ys is not None and layout.ys.has_complex)
    tree = _tree_body(operator, forward, layout) if n_tangents <= 1 and not complex_parts else None
    if tree is not None:
        return tree

    def traced(f: Callable[..., Any], x: list[jax.Array], ts: tuple[list[jax.Array], ...], value: bool) -> Any:
        # ts is empty where tangent_like is None (an operator without tangents)
        flat_ts = tuple(tangent_like.ravel(list(t)) for t in ts)  # type: ignore[union-attr]
        return layout.cut_all(operator, value, body(f, layout.xs.ravel(list(x)), flat_ts, value))

    return traced


def _tree_body(operator: Operator, forward: bool, layout: Layout) -> Traced | None:
    """The body of :func:`_structured` on JAX's pytree transforms, or None for the other operators.
    Results as ``Layout.cut_all`` gives them: lists of leaves, f(x) cut from its vector."""
    cut_y = layout.cut

    if operator is GRADIENT and not forward:

        def gradient(f: Callable[..., Any], x: list[jax.Array], ts: tuple[list[jax.Array], ...], value: bool) -> Any:
            if value:
                y, g = jax.value_and_grad(f)(list(x))
                return [y], list(g)
            return list(jax.grad(f)(list(x)))

        return gradient
    if operator is PULLBACK and not forward:

        def pullback(f: Callable[..., Any], x: list[jax.Array], ts: tuple[list[jax.Array], ...], value: bool) -> Any:
            y, vjp = jax.vjp(f, list(x))
            # layout.ys is learnt at the first evaluation of f, before any trace
            ys = layout.ys.ravel(list(ts[0]))  # type: ignore[union-attr]
            out = (list(vjp(_cast((ys,), y)[0])[0]),)
            return (cut_y("y", y), out) if value else out

        return pullback
    if operator is PUSHFORWARD and forward:

        def pushforward(f: Callable[..., Any], x: list[jax.Array], ts: tuple[list[jax.Array], ...], value: bool) -> Any:
            y, out = jax.jvp(f, (list(x),), ([_cast((t,), leaf)[0] for t, leaf in zip(ts[0], x)],))
            return (cut_y("y", y), (cut_y("y", out),)) if value else (cut_y("y", out),)

        return pushforward
    if operator is HVP:

        def hvp(f: Callable[..., Any], x: list[jax.Array], ts: tuple[list[jax.Array], ...], value: bool) -> Any:
            g, out = jax.jvp(jax.grad(f), (list(x),), ([_cast((t,), leaf)[0] for t, leaf in zip(ts[0], x)],))
            return (list(g), (list(out),)) if value else (list(out),)

        return hvp
    return None


def _preferring(mode: str, body: Traced) -> Traced:
    """``body`` traced with ``diffinterface.rules.prefer(mode)``: a function with custom rules for
    both directions uses the one of this operator (JAX registers one or the other, see jax_rules)."""

    def traced(
        f: Callable[..., Any], x: jax.Array | list[jax.Array], ts: tuple[jax.Array | list[jax.Array], ...], value: bool
    ) -> Any:
        with prefer(mode):
            return body(f, x, ts, value)

    return traced


def _is_float64(value: Array | list[Array]) -> bool:
    """float64 or complex128 (a complex x of a structure's layout is differentiated as float64 pairs)."""
    dtype = getattr(value, "dtype", None)
    return dtype is not None and np.dtype(str(dtype).replace("torch.", "")) in (np.float64, np.complex128)


# JAX's own errors for a traced value that f needs concrete (float(), .item(), int(), a Python `if`,
# np.asarray): the first trace of f (output_info) turns them into the call's error
_CONCRETE_NEEDED = (
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerArrayConversionError,
    jax.errors.TracerIntegerConversionError,
)


def _traced_value_error(target: Target, error: BaseException) -> TypeError | None:
    """The call's error where ``f``, traced by JAX, needs a concrete value of x (JAX's own error types)
    or hands JAX's traced arrays to another engine's functions (a TypeError raised right in ``f``,
    whose code names a module of another registered array family: ``torch.sin(z)``); None otherwise."""
    first = str(error).strip().split("\n", 1)[0]
    if isinstance(error, _CONCRETE_NEEDED):
        return TypeError(
            f"{target.call}: f needs the value of an array computed from x, which JAX traces without values "
            f"({type(error).__name__}: {first}): float(), int(), .item(), a Python `if` on x's values or "
            f"np.asarray of one. Write that part with jax.numpy (jnp.where or lax.cond for a branch), or "
            f"differentiate f with {RUNS_ON_VALUES}"
        )
    frame = innermost_frame(error)
    if not isinstance(error, TypeError) or frame is None:
        return None
    engines = {r.array_type.split(".")[0] for r in families().values()} - {"jax", "jaxlib", "numpy"}
    code, scopes = frame.f_code, (frame.f_locals, frame.f_globals)  # f_locals holds f's free variables
    used = sorted(
        {
            getattr(value, "__name__", "").split(".")[0]
            for name in code.co_names + code.co_freevars
            for value in (next((s[name] for s in scopes if name in s), None),)
            if isinstance(value, types.ModuleType)
        }
        & engines
    )
    if not used:
        return None
    return TypeError(
        f"{target.call}: f calls {', '.join(used)} on JAX's traced arrays ({type(error).__name__}: {first}); "
        f"AutoJAX runs f on JAX arrays: write f with jax.numpy (or array_namespace(x)), use the backend of "
        f"{used[0]}, or wrap the {used[0]} part in DifferentiateWith(part, backend)"
    )


class Adapter(_Base):
    """JAX; see the module docstring."""

    engine_name = "JAX"
    array_family = "jax"
    traceable_results = True  # the runners are traced under an outer JAX transformation
    structures_inside = True  # a structure's ravel and cut are traced into the compiled program

    @staticmethod
    def traced(value: object) -> bool:  # any captured value
        """A tracer: under closure='const' the frontend checks that none is left in captured lists."""
        return isinstance(value, Tracer)

    @staticmethod
    def refused_write(error: BaseException) -> bool:
        """numpy refusing a write into a read-only view (the base hook), or JAX refusing item
        assignment into one of its arrays or tracers (captured jax arrays reach f as they are)."""
        return _Base.refused_write(error) or _jax_write_refused(error)

    def aux(self, target: Target, x: Any, contexts: Contexts) -> Any:  # x: an array or a structure of them
        """has_aux's aux: ``f`` at ``x`` as JAX arrays, inside the x64 context for a float64 ``x`` (or a
        structure with a float64 leaf)."""
        leaves = [x] if family(x) is not None else list(getattr(x, "values", lambda: x)())
        with _x64_where(any(_is_float64(v) for v in leaves)), _host_errors():
            return super().aux(target, x, contexts)

    def evaluate(self, target: Target, x: Array, contexts: Contexts) -> Any:
        """``f(x)`` once (the value of ``SecondOrder(...)``'s value forms), inside the x64 context
        for a float64 ``x`` as every other call of ``f``: float64 stays float64 with x64 off."""
        with _x64_where(_is_float64(x)), _host_errors():
            return super().evaluate(target, x, contexts)

    def output_info(self, target: Target, x: Array, contexts: Contexts, oneshot: bool) -> Info:
        function = _Function(target, contexts)
        x64 = _is_float64(x)

        def shape() -> Any:
            xj = to_family(x, "jax") if family(x) == TORCH else x
            if function.simple:
                return jax.eval_shape(function.pure, xj)
            dyn, static = function.arguments(contexts)
            return jax.eval_shape(lambda z, d: function.pure(z, d, static), xj, dyn)

        take_conversion()  # a stand-in converted from here on is this trace's
        try:  # the first trace of f: where writes into captured state fail
            with _x64_where(x64):
                out = shape()
        except (TypeError, ValueError) as error:
            const = const_write_error(target, error, "JAX", _leaked) or standin_error(target, error, "JAX")
            if const is not None:
                raise const from error
            traced = _traced_value_error(target, error)
            if traced is not None:
                raise traced from error
            raise
        return Info(tuple(out.shape), out.dtype, None, tuple(np.shape(x)), oneshot)

    def prepare(
        self,
        operator: Operator,
        target: Target,
        x: Array | list[Array],
        tangents: tuple[Array, ...],
        contexts: Contexts,
        info: Info,
    ) -> Runners:
        """The adapter contract (``diffinterface._adapters.contract``): the compiled value and plain forms of one
        operator (see _Prepared), ``plain`` one call into the compiled function."""
        forward = self.forward(operator, info)
        body = NATIVE[operator](forward)
        leaf = x
        if info.layout is not None:  # x is the list of a structure's leaves
            body = _structured(body, info.layout, operator, forward, len(tangents))
            leaf = cast("list[Array]", x)[0]
        if operator.order == 1:  # the second order's directions are fixed
            body = _preferring("forward" if forward else "reverse", body)
        jit = self.backend.jit and not info.oneshot
        function = _Function(target, contexts)
        prepared = _Prepared(function, operator, body, jit, _is_float64(leaf), family(leaf) == TORCH, len(tangents))
        traced = host_callbacks()
        if jit:  # a user's prepare_*: compiled here (an unprepared call compiles nothing: jit=False there)
            prepared.compile_ahead(x, tangents, contexts)
        # the trace met a host callback, or none ran yet (an eager prep traces at each call)
        return prepared.runners(not jit or host_callbacks() != traced, jit)

    def jaxpr(self, target: Target, x: Array, contexts: Contexts) -> Any:
        """The closed jaxpr of ``f`` at ``x`` as this adapter traces it (captured state and caches as
        writable stand-ins, their values constants of the jaxpr), inside the x64 context for a float64
        ``x``; for ``diffinterface.sparse.JaxprSparsityDetector``, which interprets it."""
        function = _Function(target, contexts)
        xj = to_family(x, "jax") if family(x) == TORCH else x

        def trace() -> Any:
            if function.simple:
                return jax.make_jaxpr(function.pure)(xj)
            dyn, static = function.arguments(contexts)
            return jax.make_jaxpr(lambda z: function.pure(z, dyn, static))(xj)

        with _x64_where(_is_float64(x)):
            return trace()

    def prepare_compressed(
        self,
        kind: str,
        target: Target,
        x: Array,
        seeds: np.ndarray,
        index: np.ndarray,
        contexts: Contexts,
        info: Info,
        pattern: Any = None,  # a scipy csr_array (scipy ships no types)
    ) -> Runners:
        """AutoSparse's compressed derivative compiled whole (``diffinterface.sparse._adapter``): the
        products along the stacked ``seeds`` (``"columns"``: pushforwards, ``"rows"``: pullbacks,
        ``"star"``: Hessian-vector products), flattened and gathered at ``index`` in one program.
        Runners without tangents: ``plain`` gives the nonzeros, ``value`` ``(y, nonzeros)`` or
        ``(y, gradient, nonzeros)`` for ``"star"``. Given the ``pattern`` (CSR), the nonzeros come
        back as a ``jax.experimental.sparse.BCOO`` with it: the program's nonzeros and the pattern's
        indices (a device array made here, once) joined by the BCOO's pytree structure, outside the
        program. Built inside it, the BCOO's indices are an output that each call copies (56 MB for
        the 7e6 nonzeros of a 3-D stencil at n = 1e6: the call 1.7x the program without them)."""
        with _x64_where(_is_float64(x)):  # float64 seeds stay float64
            body = _compressed(kind, seeds, index)
        if kind != "star":
            body = _preferring("forward" if kind == "columns" else "reverse", body)
        jit = self.backend.jit and not info.oneshot
        prepared = _Prepared(_Function(target, contexts), JACOBIAN, body, jit, _is_float64(x), family(x) == TORCH, 0)
        traced = host_callbacks()
        if jit:
            prepared.compile_ahead(x, (), contexts)
        runners = prepared.runners(not jit or host_callbacks() != traced, False)  # as in prepare; no fast runner
        if pattern is None:
            return runners
        to_sparse = _bcoo_of(pattern)
        plain_data, value_data = runners.plain, runners.value

        def plain(x: Array, tangents: tuple[Array, ...], contexts: Contexts) -> Any:
            return to_sparse(plain_data(x, tangents, contexts))

        def value(x: Array, tangents: tuple[Array, ...], contexts: Contexts) -> Any:
            *front, data = value_data(x, tangents, contexts)
            return (*front, to_sparse(data))

        return Runners(plain, value)


def _bcoo_of(pattern: Any) -> Callable[[jax.Array], Any]:
    """``nonzeros -> BCOO`` of the CSR ``pattern``: its indices made once on the device, and each
    BCOO unflattened from them and the nonzeros (as ``jax.jit`` returns one: no checks, no copy)."""
    from jax.experimental import sparse as jsparse

    rows = np.repeat(np.arange(pattern.shape[0]), np.diff(pattern.indptr))
    coo = jnp.asarray(np.stack([rows, pattern.indices], axis=1).astype(np.int32))
    template = jsparse.BCOO(
        (jnp.zeros(coo.shape[0], jnp.float32), coo),
        shape=tuple(pattern.shape),
        indices_sorted=True,
        unique_indices=True,
    )
    structure = jax.tree_util.tree_structure(template)

    def to_sparse(data: jax.Array) -> Any:
        return jax.tree_util.tree_unflatten(structure, (data, coo))

    return to_sparse


def _compressed(kind: str, seeds: np.ndarray, index: np.ndarray) -> Traced:
    """The body of ``Adapter.prepare_compressed``. The seeds and the index are device arrays made
    here, once, that the program closes over (JAX passes them to it as arguments); as numpy constants
    they were literals compiled into it."""
    s, idx = jnp.asarray(seeds), jnp.asarray(index)

    def body(f: Callable[..., Any], x: jax.Array, _: tuple[jax.Array, ...], value: bool) -> Any:
        y = g = None  # f(x) and the gradient, computed where value asks for them
        if kind == "columns":
            y, lin = jax.linearize(f, x)
            compressed = jax.vmap(lin)(s)
        elif kind == "rows":
            y, vjp = jax.vjp(f, x)
            compressed = jax.vmap(lambda t: vjp(t)[0])(s)
        elif value:
            (y, g), lin = jax.linearize(jax.value_and_grad(f), x)
            compressed = jax.vmap(lambda t: lin(t)[1])(s)
        else:
            _, lin = jax.linearize(jax.grad(f), x)
            compressed = jax.vmap(lin)(s)
        # the index is in bounds and, but for a star coloring's symmetric pairs, one entry per nonzero
        # (``decompression`` checks both): no bounds handling in the gather
        flat = jnp.reshape(compressed, (-1,))
        if index.size and not 0 <= int(index.min()) <= int(index.max()) < flat.shape[0]:  # checked at the trace
            raise AssertionError(f"the decompression index leaves the {flat.shape[0]} compressed entries")
        data: Any = flat.at[idx].get(mode="promise_in_bounds", unique_indices=kind != "star")
        if not value:
            return data
        return (y, g, data) if kind == "star" else (y, data)

    return body


# -- the bench record: JAX's own best calls ---------------------------------------------------------
