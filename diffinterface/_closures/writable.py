"""``WritableArray``: what ``f`` writes into when its engine's arrays cannot be written (contract section 7).

JAX arrays are immutable, and autograd traces through numpy arrays that must not be written in
place (a boxed value written into a numpy array loses its derivative). An adapter for such an
engine gives ``f`` a stand-in for each captured array, cache and output buffer: item assignment and
augmented assignment replace the stand-in's value by a functional update, so that
``buf[...] = A @ u``, ``buf[i] += x`` and ``xp.sum(buf * buf)`` differentiate; indexing, arithmetic
and ``@`` give the engine's arrays. An adapter subclasses it with three class attributes:
``_wrap(value)`` (the stored value), ``_update(value, index, item)`` (the functional update) and
``_namespace`` (what ``array_namespace(stand_in)`` gives).
"""

from __future__ import annotations

import copy
import operator
import threading
from collections.abc import Callable
from typing import Any


class StandInConversionError(TypeError):
    """A stand-in holding a traced value was converted to a plain array, which would drop its
    derivative (autograd's ``anp.sin(buf)``); the adapter reports it naming the captured array."""


_conversions = threading.local()


def note_conversion() -> None:
    """Called by a stand-in's conversion hook (JAX's ``__jax_array__``): an engine function was
    handed a stand-in. Newer JAX refuses the hook with a generic error; :func:`take_conversion`
    lets the adapter recognise that error by this mark rather than by its message."""
    _conversions.seen = True


def take_conversion() -> bool:
    """Whether a stand-in was converted on this thread since the last call (and clear the mark)."""
    seen = getattr(_conversions, "seen", False)
    _conversions.seen = False
    return seen


class WritableArray:
    """A writable stand-in: ``a[i] = v`` and ``a[i] += v`` are functional updates of ``a.value``."""

    __slots__ = ("value",)
    _namespace: Any = None

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
        return self.value[unwrap(index)]

    def __setitem__(self, index: Any, item: Any) -> None:
        self.value = self._update(self.value, unwrap(index), unwrap(item))

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
