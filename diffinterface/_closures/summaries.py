"""Summaries: a user function the closure walk found stateless, checked instead of walked again.

A function's walk (``walk.Walker``) reads its code, its closure cells, its defaults and the module
globals its code names, and recurses into the user functions among them. Where nothing under it is
state (its build is None: the common case for the helpers a loss calls, and for the lambda around
them), what it read is kept on its code object's record (``code.CodeRecord``, which goes with the
code): the very objects in each slot. A
later walk that meets a function of that code -- the same one, or a new one: a loop that writes a new
lambda at every call makes a new function of one code each time -- checks its slots by identity (one
dict read or cell read each, and the same again for the user functions among them) instead of
walking it (the walk of a lambda around a helper: 7 us of a first call in a loop, measured, becomes a
check of about two). Any slot bound to another object, a rebound ``__code__`` or ``__defaults__``, a
module declared otherwise (``declare_modules``) or a new array family since, and the function is
walked as before.

Only slots whose walk cannot change while they hold the same object are kept: modules and classes
(skipped by the walk), library functions and other objects the walk left as they are (a library's
callable object, numpy's dispatchers, a dtype: whether the walk looks into one depends on the
modules' declarations and on the registered array families, whose generations are kept), builtins,
strings, None and booleans (:data:`TERMINAL`), and user functions with a summary of their own. They
are held by weak reference (a summary outlives the function it was made for, and keeps nothing of
the user's alive: a slot whose object died has changed); an object that takes none is held only
where it holds nothing of the user's (a string, a ufunc, an array family's constants such as torch's
dtypes and devices), else the function gets no summary. The
walker decides which functions get one (``Walker._summarize``): none for a function with anything
else (state, a user's object, a partial, a bound method, keyword defaults), or whose walk met a
function still being walked (recursion: the answer there is provisional).
"""

from __future__ import annotations

import types
import weakref
from typing import Any

import numpy as np

from .._core import arrays as _arrays
from . import namespaces
from .code import RECORDS as _RECORDS
from .code import CodeRecord

TERMINAL = (
    types.BuiltinFunctionType,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.MethodWrapperType,
    types.ModuleType,
    type,
    str,
    bytes,
    bool,
    type(None),
    type(Ellipsis),
    np.ufunc,
)
MISSING = object()  # a global name the code reads that the module does not define
EMPTY = object()  # an empty closure cell


class Unsafe(Exception):
    """A slot's object that a summary could neither hold weakly nor keep alive without harm."""


# Objects a summary may hold strongly where they take no weak reference: ones that hold nothing of
# the user's (strings, flags, slices, numpy's ufuncs, functions and dtypes, the descriptors of
# classes: all alive anyway). Any other such object (a random generator) leaves its function
# without a summary: walked at each call, as before summaries
_STRONG = (
    str,
    bytes,
    bool,
    type(None),
    type(Ellipsis),
    slice,
    range,
    np.ufunc,
    np.dtype,
    type(np.sum),  # numpy's functions: array-function dispatchers
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.ClassMethodDescriptorType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
)
_REF = weakref.ReferenceType
_FUNCTION = types.FunctionType


def _held(value: Any) -> Any:
    """How a summary holds a slot's object: a weak reference, or the object itself where it takes
    none and holds nothing of the user's (``_STRONG``, the markers, an array family's constants:
    ``ArrayFamily.constant_types``, torch's dtypes and devices); else :class:`Unsafe`."""
    if type(value) is _FUNCTION:  # the common slot (a helper): weakly, without the tests below
        return _REF(value)
    if value is MISSING or value is EMPTY or isinstance(value, _STRONG):
        return value
    try:
        return weakref.ref(value)
    except TypeError:
        if type(value) is tuple:
            return tuple(_held(v) for v in value)  # a tuple of strings
        if _arrays.family_constant(value):
            return value
        raise Unsafe from None


_DEAD = object()  # what _object answers for an object a summary held weakly and that died (not closed)


def _object(kept: Any) -> Any:
    """The object a summary holds as ``kept`` (see :func:`_held`), or :data:`_DEAD`."""
    if type(kept) is _REF:
        value = kept()
        return _DEAD if value is None else value
    if type(kept) is tuple:
        return tuple(_object(k) for k in kept)
    return kept


def _same(kept: Any, value: Any) -> bool:
    """Whether ``value`` is the object a summary holds as ``kept`` (see :func:`_held`)."""
    if type(kept) is _REF:
        return kept() is value
    if type(kept) is tuple:
        return type(value) is tuple and len(kept) == len(value) and all(_same(k, v) for k, v in zip(kept, value))
    return kept is value


class Summary:
    """A stateless user function's slots as its walk found them (see the module docstring).

    Kept by the function's code object, so that a new function of the same code (a lambda written
    anew at each call of a loop, a helper ``def`` run again) is checked instead of walked: what
    decides its walk is its code and what its slots hold, compared by identity. The objects are
    held weakly (a summary keeps nothing of the user's alive: a dead one is a slot that changed)."""

    __slots__ = (
        "owner",
        "defaults",
        "cells",
        "names",
        "values",
        "functions",
        "stores",
        "declarations",
        "families",
        "learned",
        "_closed",
    )

    def __init__(
        self,
        fn: types.FunctionType,
        record: CodeRecord,
        cells: tuple[Any, ...],
        names: tuple[str, ...],
        values: tuple[Any, ...],
        functions: tuple[types.FunctionType, ...],
        stores: bool,
    ) -> None:
        # the weak reference to the code of its record (``record``: code_record(fn.__code__), which keeps the
        # summary and goes with the code)
        self.owner = record.owner
        # (map, not generators: this runs at the first call of every new code, 5.0 -> 4.2 us for a lambda
        # around a helper, measured 2026-11-28 on a 2-core x86_64 VM under load)
        defaults = fn.__defaults__ or ()
        self.defaults = tuple(map(_held, defaults))
        self.cells = tuple(map(_held, cells))  # each closure cell's object, in fn.__closure__'s order
        self.names, self.values = names, tuple(map(_held, values))
        self.functions = tuple(map(_REF, functions))
        self.stores = stores
        # what the walk's answers depend on besides the slots: the modules' declarations (whether a
        # library's function or object is looked into) and the array families (whether an object is
        # an array, state, now); a summary made under others is walked again
        self.declarations, self.families = namespaces.GENERATION, _arrays.FAMILIES_GENERATION
        # what adapters learned running a function of this code over these very objects, shared by
        # every function the summary holds for (``Target.learned``): made anew with the summary, so a
        # slot bound to another object starts it empty
        self.learned = Learned()
        self._closed: bool | None = None  # (see closed: found at its first reading)

    @property
    def closed(self) -> bool:
        """Whether what the slots hold cannot change while they hold the same objects, as far as the
        user's program goes: no user module, class or object (whose attributes a program sets
        between calls: ``Config.exact = True``), only libraries' and builtins' objects and user
        functions whose own summaries are closed. Only then is what was learned shared
        (``Target.learned``, the prep cache's sharing). Found at its first reading, from the objects
        the summary holds (a slot whose object died: not closed; a change of the modules'
        declarations fails :meth:`holds` first), not at the summary's making: a new code's first
        call on most engines never reads it (0.5 us of a lambda's walk, measured 2026-12-07 on a
        2-core AMD EPYC VM)."""
        found = self._closed
        if found is None:
            found = self._closed = all(closed(_object(kept)) for kept in self.cells + self.values + self.defaults)
        return found

    def holds(self, fn: types.FunctionType, checking: set[int]) -> bool:
        """Whether ``fn``'s slots hold the objects they held (and its user functions' theirs). Inline
        tests, not calls of :func:`_same`, for the common slots, in one loop for the cells and one for
        the globals: this runs at every first call (one loop over ``chain``/``map`` of both measured
        1.63 -> 2.15 us for a lambda around a helper)."""
        if (
            fn.__kwdefaults__
            or self.owner() is not fn.__code__
            or self.declarations != namespaces.GENERATION
            or self.families != _arrays.FAMILIES_GENERATION
        ):
            return False
        defaults = fn.__defaults__
        if defaults or self.defaults:
            if defaults is None or len(defaults) != len(self.defaults):
                return False
            for kept, value in zip(self.defaults, defaults):
                if not _same(kept, value):
                    return False
        if self.cells:
            for kept, cell in zip(self.cells, fn.__closure__ or ()):
                try:
                    value = cell.cell_contents
                except ValueError:  # an empty cell
                    value = EMPTY
                if type(kept) is _REF:
                    if kept() is not value:
                        return False
                elif kept is not value and not _same(kept, value):
                    return False
        if self.names:
            get = fn.__globals__.get
            for name, kept in zip(self.names, self.values):
                value = get(name, MISSING)
                if type(kept) is _REF:
                    if kept() is not value:
                        return False
                elif kept is not value and not _same(kept, value):
                    return False
        if self.functions:
            checking.add(id(fn))
            for ref in self.functions:
                f = ref()
                if f is None:
                    return False
                if id(f) not in checking:
                    summary = summary_of(f)
                    if summary is None or not summary.holds(f, checking):
                        return False
        return True


def closed(value: Any) -> bool:
    """Whether a slot's object is one a user's program does not change (see ``Summary.closed``): a
    library's module, class, function or object (decided by module name, as the walk decides what it
    looks into), a builtin's, a string, a flag, None, and a user function whose summary is closed."""
    if value is _DEAD:
        return False
    if isinstance(value, types.ModuleType):
        return not namespaces.is_user_module(value.__name__)
    if isinstance(value, type):
        return not namespaces.is_user_module(value.__module__)
    if type(value) is types.FunctionType and namespaces.is_user_function(value):
        summary = summary_of(value)
        return summary is not None and summary.closed
    if type(value) is tuple:
        return all(closed(v) for v in value)
    if isinstance(value, (types.BuiltinFunctionType, types.MethodWrapperType)):
        bound = getattr(value, "__self__", None)  # a method of a user's object is that object's
        if bound is not None and not isinstance(bound, (types.ModuleType, type)):
            return closed(bound)
    return not namespaces.is_user_module(type(value).__module__)


class Learned(dict):  # type: ignore[type-arg]
    """``Summary.learned``: a dict that an adapter's facts cannot grow without bound (one key per
    shape an ``f`` of one code meets, say): past :data:`MAX_LEARNED` keys it starts again empty,
    where a fact not found is only learned again."""

    __slots__ = ()

    def __setitem__(self, key: Any, value: Any) -> None:
        if len(self) >= MAX_LEARNED and key not in self:
            self.clear()
        super().__setitem__(key, value)


MAX_LEARNED = 64

# A summary is kept on its code's record (``code.CodeRecord.summary``): held while the code lives, and
# gone with it (before 2026-12-07 in a table of its own, with a weak reference and a callback of its own:
# 0.3 us more at the first call of every new code)


def summary_of(fn: Any) -> Summary | None:
    """The summary of ``fn``'s code (its slots are checked by :meth:`Summary.holds`), or None."""
    code = fn.__code__
    record = _RECORDS.get(id(code))
    if record is None:
        return None
    summary = record.summary  # (None for most records: a code whose functions hold state; no owner read then)
    return summary if summary is not None and record.owner() is code else None


def keep(record: CodeRecord, summary: Summary) -> None:
    """Keep ``summary`` on its code's record (the one it was made with)."""
    record.summary = summary


def drop(fn: types.FunctionType) -> None:
    """Forget the summary of ``fn``'s code (it no longer holds for ``fn``)."""
    code = fn.__code__
    record = _RECORDS.get(id(code))
    if record is not None and record.owner() is code:
        record.summary = None


def clear() -> None:
    """Forget every summary (the code records stay: what they read of the code does not change)."""
    for record in list(_RECORDS.values()):
        record.summary = None
