"""``WritableArray``: what ``f`` writes into when its engine's arrays cannot be written (contract section 7).

JAX arrays are immutable, and autograd traces through numpy arrays that must not be written in
place (a boxed value written into a numpy array loses its derivative). An adapter for such an
engine gives ``f`` a stand-in for each captured array, cache and output buffer: item assignment and
augmented assignment replace the stand-in's value by a functional update, so that
``buf[...] = A @ u``, ``buf[i] += x`` and ``xp.sum(buf * buf)`` differentiate; arithmetic and ``@``
give the engine's arrays. Indexing follows numpy: basic indexing (ints, slices, ``...``, ``None``)
that leaves an axis gives a *view*, a stand-in of the same class whose value is read from its base
at every use and whose writes (``part = buf[1:3]; part *= x``, ``part[0] = v``) are functional
updates of the base, so derivatives flow through them; a full integer index gives the engine's
scalar, and advanced indexing (integer arrays, boolean masks) a copy, as numpy's: the engine's array,
or a stand-in over it where the subclass sets ``_copies`` (writable, its writes staying in it).
An adapter subclasses it with three class attributes: ``_wrap(value)`` (the stored value),
``_update(value, index, item)`` (the functional update) and ``_namespace`` (what
``array_namespace(stand_in)`` gives); its views are made of the same subclass (its conversion hooks
and methods included).
"""

from __future__ import annotations

import copy
import operator
import threading
from collections.abc import Callable
from typing import Any

import numpy as np


class StandInConversionError(TypeError):
    """A stand-in holding a traced value was converted to a plain array, which would drop its
    derivative (autograd's ``anp.sin(buf)``); the adapter reports it naming the captured array."""


_conversions = threading.local()


def note_conversion(engine: str | None = None) -> None:
    """Called by a stand-in's conversion hook (JAX's ``__jax_array__``): an engine function was
    handed a stand-in of ``engine`` (the name its adapter passes to :func:`standin_error`). Newer
    JAX refuses the hook with a generic error; :func:`take_conversion` lets the adapter recognise
    that error by this mark rather than by its message. The mark is the engine's own: one that
    nothing took (the hook also runs where the conversion succeeds) never names another engine's
    error; ``engine=None`` marks for every engine."""
    _conversions.seen = engine if engine is not None else True


def take_conversion(engine: str | None = None) -> bool:
    """Whether a stand-in was converted on this thread since the last call: one of ``engine``'s, or
    any with ``engine=None``; the mark is cleared either way."""
    seen = getattr(_conversions, "seen", False)
    _conversions.seen = False
    return seen is True or (seen is not False and (engine is None or seen == engine))


class WritableArray:
    """A writable stand-in: ``a[i] = v`` and ``a[i] += v`` are functional updates of ``a.value``."""

    __slots__ = ("value",)
    _namespace: Any = None
    # whether advanced indexing gives a stand-in over the copy (writable, as numpy's copy is) rather than the
    # engine's array: for an engine whose functions take stand-ins where they take its arrays
    _copies: bool = False

    def __init__(self, value: Any) -> None:
        self.value = self._wrap(value)

    @staticmethod
    def _wrap(value: Any) -> Any:
        return value

    @staticmethod
    def _update(value: Any, index: Any, item: Any) -> Any:  # pragma: no cover - every subclass sets it
        raise NotImplementedError

    def __array_namespace__(self, api_version: str | None = None) -> Any:
        return self._namespace

    def __getitem__(self, index: Any) -> Any:
        """``a[index]`` as numpy gives it: a view (a stand-in writing into this one) for basic indexing
        that leaves an axis, else the engine's value (a scalar, or an advanced index's copy)."""
        index = unwrap(index)
        if is_view_index(index, getattr(self.value, "ndim", None)):
            return view_class(type(self))(self, index)
        part = self.value[index]
        if self._copies and tuple(getattr(part, "shape", ())) != ():
            return type(self)(part)  # an advanced index's copy, writable as numpy's (its writes stay in it)
        return part

    def __setitem__(self, index: Any, item: Any) -> None:
        index = unwrap(index)
        if isinstance(item, _View) and item.parent is self and _same_index(item.index, index):
            return  # a[i] op= v: the view a[i] has already written its result into a
        self.value = self._update(self.value, index, unwrap(item))

    def __getattr__(self, name: str) -> Any:  # shape, dtype, ndim, size, T, sum, reshape, astype, ...
        if name == "value":  # not set yet (an instance made without __init__): no recursion through here
            raise AttributeError(name)
        return getattr(self.value, name)

    def __copy__(self) -> WritableArray:  # copy.copy(a), as numpy's: a stand-in over a copy of the value
        new = object.__new__(type(self))
        new.value = copy.copy(self.value)
        return new

    def __deepcopy__(self, memo: dict[Any, Any]) -> WritableArray:
        new = object.__new__(type(self))
        new.value = copy.deepcopy(self.value, memo)
        return new

    def __len__(self) -> int:
        return len(self.value)

    def __iter__(self) -> Any:
        return iter(self.value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value!r})"


def is_view_index(index: object, ndim: int | None) -> bool:
    """Whether numpy's ``a[index]`` (``a`` with ``ndim`` axes) is a view of ``a``: basic indexing
    (ints, slices, ``...``, ``None``) that leaves at least one axis. All ints (a scalar) and advanced
    indexing (an integer array, a boolean, a mask) give a copy."""
    if ndim is None:
        return False
    parts = index if isinstance(index, tuple) else (index,)
    ints = 0
    for part in parts:
        if isinstance(part, (bool, np.bool_)):
            return False  # a[True] is advanced indexing
        if isinstance(part, (int, np.integer)):
            ints += 1
        elif not (part is None or part is Ellipsis or isinstance(part, slice)):
            return False  # an array, a list, a traced index: advanced indexing, a copy
    return ints < ndim or any(p is None or p is Ellipsis or isinstance(p, slice) for p in parts)


def _same_part(a: object, b: object) -> bool:
    if isinstance(a, slice) and isinstance(b, slice):
        return all(_same_part(u, v) for u, v in ((a.start, b.start), (a.stop, b.stop), (a.step, b.step)))
    if a is b:
        return True
    plain = (int, np.integer)
    return isinstance(a, plain) and isinstance(b, plain) and not isinstance(a, bool) and int(a) == int(b)


def _same_index(a: object, b: object) -> bool:
    """Whether two view indexes (see :func:`is_view_index`) are the same, compared part by part
    (ints by value, ``None`` and ``...`` by identity)."""
    a = a if isinstance(a, tuple) else (a,)
    b = b if isinstance(b, tuple) else (b,)
    return len(a) == len(b) and all(_same_part(u, v) for u, v in zip(a, b))


class _View(WritableArray):
    """A view of a stand-in (``part = buf[1:3]``): its value read from ``parent`` at every use (a
    later write into ``buf`` shows in ``part``, as in numpy), its writes functional updates of
    ``parent`` at ``index``. Made through :func:`view_class`, which mixes it into the adapter's own
    stand-in class."""

    __slots__ = ("parent", "index")

    def __init__(self, parent: WritableArray, index: object) -> None:  # noqa: D107
        self.parent = parent
        self.index = index

    @property  # type: ignore[override]
    def value(self) -> Any:
        return self.parent.value[self.index]

    @value.setter
    def value(self, new: object) -> None:
        parent = self.parent
        parent.value = parent._update(parent.value, self.index, new)

    def __getattr__(self, name: str) -> Any:
        if name in ("parent", "index"):  # not set yet: no recursion through value
            raise AttributeError(name)
        return getattr(self.value, name)

    def __copy__(self) -> WritableArray:  # copy.copy(part): a stand-in over the current values
        base: type[WritableArray] = next(
            c for c in type(self).__mro__[1:] if issubclass(c, WritableArray) and not issubclass(c, _View)
        )
        return base(self.value)

    def __deepcopy__(self, memo: dict[Any, Any]) -> WritableArray:
        return self.__copy__()


_VIEW_CLASSES: dict[type, type] = {}


def view_class(cls: type) -> type:
    """The class of ``cls``'s views: :class:`_View` mixed into ``cls`` (made once per class)."""
    if issubclass(cls, _View):
        return cls
    made = _VIEW_CLASSES.get(cls)
    if made is None:
        made = type(f"{cls.__name__}View", (_View, cls), {"__slots__": (), "__module__": cls.__module__})
        _VIEW_CLASSES[cls] = made
    return made


def unwrap(value: Any) -> Any:
    """The value of a stand-in; anything else as it is."""
    return value.value if isinstance(value, WritableArray) else value


def _binary(op: Callable[[Any, Any], Any]) -> Callable[[WritableArray, Any], Any]:
    return lambda self, other: op(self.value, unwrap(other))


def _reflected(op: Callable[[Any, Any], Any]) -> Callable[[WritableArray, Any], Any]:
    return lambda self, other: op(unwrap(other), self.value)


def _inplace(op: Callable[[Any, Any], Any]) -> Callable[[WritableArray, Any], WritableArray]:
    def update(self: WritableArray, other: Any) -> WritableArray:
        self.value = op(self.value, unwrap(other))
        return self

    return update


for _name, _op in [
    ("add", operator.add),
    ("sub", operator.sub),
    ("mul", operator.mul),
    ("truediv", operator.truediv),
    ("floordiv", operator.floordiv),
    ("mod", operator.mod),
    ("pow", operator.pow),
    ("matmul", operator.matmul),
]:
    setattr(WritableArray, f"__{_name}__", _binary(_op))
    setattr(WritableArray, f"__r{_name}__", _reflected(_op))
    setattr(WritableArray, f"__i{_name}__", _inplace(_op))
for _name, _op in [
    ("lt", operator.lt),
    ("le", operator.le),
    ("gt", operator.gt),
    ("ge", operator.ge),
    ("eq", operator.eq),
    ("ne", operator.ne),
]:
    setattr(WritableArray, f"__{_name}__", _binary(_op))


def _unary(op: Callable[[Any], Any]) -> Callable[[WritableArray], Any]:
    return lambda self: op(self.value)


_UNARY: list[tuple[str, Callable[[Any], Any]]] = [("neg", operator.neg), ("pos", operator.pos), ("abs", operator.abs)]
for _name, _op1 in _UNARY:
    setattr(WritableArray, f"__{_name}__", _unary(_op1))
WritableArray.__hash__ = None  # type: ignore[assignment]
