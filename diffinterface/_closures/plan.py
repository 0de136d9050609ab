"""The state a function captures, found once and rebuilt over duplicates for every call (contract section 7).

``StatePlan(f)`` holds what the walker (``walk``) found in ``f``: its *leaves*, the captured
values that are state. ``plan.read()`` returns the user's current leaf values;
``plan.rebuild(values)`` returns a copy of ``f`` whose leaves are ``values``, with the user's
objects untouched. An adapter passes duplicates of its own kind (numpy copies, fresh tensors,
writable stand-ins) so that ``f`` may write into them.

Copies cost time and memory where ``f`` only reads its arrays, the common case. So an adapter that
can make a *guarded alias* (an array that shares the user's memory but raises on a write: a
read-only numpy view, a torch tensor that requires grad under grad mode) passes those first
(``plan.aliased``); the first time ``f`` fails over aliases with the guard's own error (the
adapter's ``refused_write`` hook), it runs again over copies, and the plan remembers that ``f``
writes (``plan.aliases`` turns False: copies from then on). Where the state is only arrays and
numbers, in functions that rebind nothing, ``f`` over the aliases is built once and reused while
the user's objects are the same (``plan.cacheable``).
"""

from __future__ import annotations

import copy
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from .._core.arrays import is_array
from . import summaries
from .walk import Walker


def duplicate(value: Any, leaf: Callable[[Any], Any]) -> Any:
    """``value`` with its containers copied and ``leaf`` applied to every array in it."""
    if is_array(value):
        return leaf(value)
    if isinstance(value, list):
        return [duplicate(v, leaf) for v in value]
    if isinstance(value, tuple):
        items = [duplicate(v, leaf) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, dict):
        out = copy.copy(value)
        for k, v in value.items():
            out[k] = duplicate(v, leaf)
        return out
    return value


def copy_leaf(value: Any) -> Any:
    """The duplicate of an array on its own engine: a numpy copy, a detached torch clone; jax arrays are immutable."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, np.generic):
        return value
    if hasattr(value, "detach") and hasattr(value, "clone"):
        return value.detach().clone()
    return value


class ReadOnlyView(np.ndarray):
    """The guarded alias of a numpy array: a read-only view whose in-place operators always write.

    numpy hands ``a *= t`` to ``t``'s reflected operator where ``t`` ranks above numpy arrays
    (``__array_priority__``: a JAX tracer, an autograd box, a torch tensor), which rebinds the name to
    ``t * a`` and leaves the write into ``a`` unseen (``part = buf[1:3]; part *= x`` would then leave
    ``buf`` unchanged, silently). Here an in-place operator is a write whatever its operand, and numpy
    refuses it as it refuses ``a[...] = v``. Slices of the alias are aliases too; what numpy's
    functions compute from it (a ufunc's result, a reduction) are plain arrays."""

    def __array_wrap__(self, array: np.ndarray, context: object = None, return_scalar: bool = False) -> Any:
        array = array.view(np.ndarray)
        return array[()] if return_scalar else array


def _inplace(name: str) -> Callable[[ReadOnlyView, Any], Any]:
    def update(self: ReadOnlyView, other: object) -> Any:
        if not self.flags.writeable:
            np.ndarray.__setitem__(self, Ellipsis, self)  # numpy's own refusal: "... is read-only"
        return getattr(np.ndarray, name)(self, other)  # a writeable copy (alias.copy()): numpy's own operator

    update.__name__ = name
    return update


_SYMBOLS = {
    "add": "+=",
    "sub": "-=",
    "mul": "*=",
    "truediv": "/=",
    "floordiv": "//=",
    "mod": "%=",
    "pow": "**=",
    "matmul": "@=",
    "and": "&=",
    "or": "|=",
    "xor": "^=",
    "lshift": "<<=",
    "rshift": ">>=",
}
_INPLACE = tuple(_SYMBOLS)
for _op in _INPLACE:
    setattr(ReadOnlyView, f"__i{_op}__", _inplace(f"__i{_op}__"))


class ConstTracedWrite(ValueError):
    """A write into a :class:`ConstGuardView` met the engine's value (``ConstGuardView.guard``);
    ``rebound``: by an in-place operator (the call's ValueError), else by item assignment, ``out=``
    or a numpy function (its TypeError, the kind JAX's own refusal of such a write had)."""

    def __init__(self, message: str, rebound: bool) -> None:
        super().__init__(message)
        self.rebound = rebound


# numpy's functions that write into their first argument (np.copyto's destination, np.put's array, ...)
_WRITES_FIRST = frozenset((np.copyto, np.put, np.place, np.putmask, np.fill_diagonal, np.put_along_axis))


def any_leaf(value: object, test: Callable[[Any], bool]) -> bool:
    """Whether ``test`` holds for ``value`` or for an item inside it, through lists, tuples and dicts
    (a captured container, a numpy call's arguments or result)."""
    if isinstance(value, (list, tuple)):
        return any(any_leaf(v, test) for v in value)
    if isinstance(value, dict):
        return any(any_leaf(v, test) for v in value.values())
    return test(value)


class ConstGuardView(np.ndarray):
    """A captured numpy array as ``f`` gets it in the first trace under ``closure="const"``: a
    writable view of the user's own memory (const uses the state as it is) whose writes refuse the
    engine's values. numpy hands ``part *= t`` to ``t``'s reflected operator where ``t`` ranks above
    numpy arrays (a JAX tracer, a PyTensor or TensorFlow symbolic value), which rebinds ``part`` and
    leaves the array unchanged: a zero derivative and no error; and it writes the values of an engine
    whose arrays it can read (a TensorFlow or MLX array: ``buf[1:3] = x``, ``np.copyto(buf, x)``,
    ``np.multiply(buf, x, out=buf)``) without their derivative. Here each of those writes, an
    in-place operator, item assignment, a ufunc's ``out=`` and numpy's functions that write into
    their first argument (``np.copyto``, ``np.put``, ...), raises :class:`ConstTracedWrite` where
    the value written is the engine's (``guard[0]``); any other value is numpy's own write. Slices
    of the view are guards too; what numpy computes from it is a plain array. ``guard`` holds ``(test, rebound, written)``: the adapter's test of its values and the call's
    errors, for an in-place operator (numpy hands it to the value's own operator: the write is lost)
    and for the other writes (the values written, their derivative lost), whose ``{how}`` names the
    write."""

    guard: tuple[Callable[[Any], bool], str, str] | None = None

    def __array_finalize__(self, obj: object) -> None:
        self.guard = getattr(obj, "guard", None)

    def __array_wrap__(self, array: np.ndarray, context: object = None, return_scalar: bool = False) -> Any:
        array = array.view(np.ndarray)
        return array[()] if return_scalar else array

    def _refuse(self, value: object, how: str, rebound: bool = False) -> None:
        guard = self.guard
        if guard is not None and any_leaf(value, guard[0]):
            raise ConstTracedWrite((guard[1] if rebound else guard[2]).format(how=how), rebound)

    def __setitem__(self, index: Any, value: object) -> None:
        self._refuse(value, "an item assignment (a[...] = v)")
        np.ndarray.__setitem__(self, index, value)

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: object, **kwargs: Any) -> Any:
        out = kwargs.get("out")
        if out is not None:
            for target in out if isinstance(out, tuple) else (out,):
                if isinstance(target, ConstGuardView):
                    target._refuse(inputs, f"np.{ufunc.__name__}(..., out=...)")
            kwargs["out"] = tuple(_plain(o) for o in out) if isinstance(out, tuple) else _plain(out)
        return getattr(ufunc, method)(*(_plain(i) for i in inputs), **kwargs)

    def __array_function__(
        self, func: Callable[..., Any], types: Iterable[type], args: Iterable[Any], kwargs: Mapping[str, Any]
    ) -> Any:
        args = tuple(args)
        if func in _WRITES_FIRST and args and isinstance(args[0], ConstGuardView):
            args[0]._refuse((args[1:], tuple(kwargs.values())), f"np.{func.__name__}")
        out = kwargs.get("out")
        if isinstance(out, ConstGuardView):
            out._refuse((args, tuple(kwargs.values())), f"np.{func.__name__}(..., out=...)")
        return super().__array_function__(func, types, args, kwargs)


def _plain(value: object) -> object:
    """A :class:`ConstGuardView` as the plain numpy view of the same memory (numpy's own operation on
    it, once its writes were checked); anything else as it is."""
    return value.view(np.ndarray) if isinstance(value, ConstGuardView) else value


def _const_inplace(name: str) -> Callable[[ConstGuardView, Any], Any]:
    def update(self: ConstGuardView, other: object) -> Any:
        self._refuse(other, f"an in-place operator ({_SYMBOLS[name[3:-2]]})", rebound=True)
        return getattr(np.ndarray, name)(self, other)

    update.__name__ = name
    return update


def const_guard(value: np.ndarray, test: Callable[[Any], bool], rebound: str, written: str) -> ConstGuardView:
    """``value`` as a :class:`ConstGuardView` (the messages' ``{how}`` names the write)."""
    view = value.view(ConstGuardView)
    view.guard = (test, rebound, written)
    return view


for _op in _INPLACE:
    setattr(ConstGuardView, f"__i{_op}__", _const_inplace(f"__i{_op}__"))


def read_only_alias(value: Any) -> Any:
    """The guarded alias of a numpy array: a read-only view (a write raises, an in-place operator
    included, see :class:`ReadOnlyView`); None for other arrays."""
    if type(value) is np.ndarray:
        view = value.view(ReadOnlyView)
        view.flags.writeable = False
        return view
    return None


def read_only_refused(error: BaseException) -> bool:
    """Whether ``error`` is numpy refusing a write into a read-only array, the guard of
    :func:`read_only_alias` (``a[0] = v``, ``a += v``, ``out=a``, ``a.fill``, ``a.sort``, ``np.put``,
    ``np.place``): the default of the adapters' ``refused_write`` hook.

    numpy gives this refusal no exception type and no attribute: it is a plain ``ValueError`` that
    one function of its C API (``PyArray_FailUnlessWriteable``) words ``"<what> is read-only"``.
    That wording is the only mark numpy leaves, so it is checked here, beside the guard that provokes
    it, and nowhere else (tests/test_closure.py provokes each write)."""
    return type(error) is ValueError and str(error).endswith(" is read-only")


class StatePlan:
    """The state ``f`` captures, discovered once; see the module docstring."""

    __slots__ = ("f", "leaves", "_build", "read_only", "aliases", "cacheable", "transparent", "_cached", "summary")

    def __init__(self, f: Callable[..., Any]) -> None:
        self.f = f
        self.aliases = True
        self._cached: tuple[Any, ...] | None = None
        # a function whose code has a summary that holds (summaries): stateless, nothing walked (a
        # lambda written anew at each call of a loop: what the walker's visit would answer, without it)
        if type(f) is types.FunctionType:
            summary = summaries.summary_of(f)
            if summary is not None and summary.holds(f, set()):
                self._build, self.leaves = None, []
                self.read_only = self.cacheable = self.transparent = not summary.stores
                self.summary: summaries.Summary | None = summary
                return
        walker = Walker()
        self._build = walker.visit(f, getattr(f, "__qualname__", type(f).__name__))
        # the summary the walk kept for f (a stateless user function whose slots a summary can check)
        self.summary = walker.summaries.get(id(f)) if self._build is None and type(f) is types.FunctionType else None
        self.leaves = walker.leaves if self._build is not None else []
        # Only immutable values (numbers, tuples of them), in functions that rebind no captured name
        # and set no attribute: f cannot change them, so it needs no duplicate and is called as it
        # is (it reads the current values itself). A compiling engine still passes them as arguments.
        self.read_only = not walker.writable
        # Guarded aliases first (learned: False once f has failed over them and run over copies),
        # and f over them reused while the user's objects are the same (see the module docstring).
        self.cacheable = not walker.structural
        # f rebuilt over the very same values is f itself (no object copied, no function that stores:
        # what f sets lands where it would), except for the values given in place of its leaves
        self.transparent = not walker.copies_effects

    @property
    def empty(self) -> bool:
        return self._build is None

    def where(self) -> list[str]:
        """Where each leaf lives, for error messages: ``'a' captured by f``."""
        return [leaf.where for leaf in self.leaves]

    def read(self) -> list[Any]:
        """The user's current leaf values (read at every call: updates between calls are seen)."""
        return [leaf.get() for leaf in self.leaves]

    def rebuild(self, values: list[Any]) -> Callable[..., Any]:
        """``f`` over ``values`` in place of its captured leaves; the user's objects are not touched."""
        if self._build is None:
            return self.f
        return self._build(values, {})

    def duplicated(self, leaf: Callable[[Any], Any] = copy_leaf) -> Callable[..., Any]:
        """``f`` over fresh duplicates of its state, each array passed through ``leaf``."""
        if self._build is None:
            return self.f
        return self._build([duplicate(v, leaf) for v in self.read()], {})

    def aliased(
        self, guard: Callable[[Any], Any], copy: Callable[[Any], Any] = copy_leaf, key: Any = None
    ) -> Callable[..., Any]:
        """``f`` over guarded aliases of its arrays, its containers copied. ``guard(array)`` is the
        alias, or None where the engine has none for that array (another device, a dtype that
        cannot require grad): that array is ``copy(array)``.

        Reused from the last call where the plan is ``cacheable``, every array was aliased, ``key``
        (what ``guard`` depends on: a device) is the same, and every leaf is the same object as then:
        an alias shares the user's memory, so it sees what the user writes into it between calls."""
        if self._build is None:
            return self.f
        values = self.read()
        kept = self._kept(values, key)
        if kept is not None:
            return kept
        copied = False

        def leaf(value: Any) -> Any:
            nonlocal copied
            alias = guard(value)
            if alias is None:
                copied = True
                return copy(value)
            return alias

        fn = self._build([duplicate(v, leaf) for v in values], {})
        if self.cacheable and not copied:
            self._cached = (key, values, fn)
        return fn

    def kept(self, key: Any = None) -> bool:
        """Whether :meth:`aliased` serves the user's current objects (for ``key``) with the ``f`` it
        keeps: over guarded aliases of every array, in a function that rebinds nothing. That ``f``
        holds no copy that an evaluation could write into, so several evaluations may share it."""
        return self.aliases and self._kept(self.read(), key) is not None

    def _kept(self, values: list[Any], key: Any) -> Callable[..., Any] | None:
        """The ``f`` :meth:`aliased` keeps, where it was built for ``key`` over these very objects."""
        cached = self._cached
        if cached is not None and cached[0] == key and all(a is b for a, b in zip(cached[1], values)):
            return cached[2]
        return None
