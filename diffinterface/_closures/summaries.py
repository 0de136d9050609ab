"""Summaries: a user function the closure walk found stateless, checked instead of walked again.

A function's walk (``walk.Walker``) reads its code, its closure cells, its defaults and the module
globals its code names, and recurses into the user functions among them. Where nothing under it is
state (its build is None: the common case for the helpers a loss calls), what it read is kept here:
the very objects in each slot. A later walk that meets the same function checks those slots by
identity (one dict read or cell read each, and the same again for the user functions among them)
instead of walking it: a loop that writes a new lambda around the same helper at every call walks
the lambda alone (the helper's walk of 2-3 us becomes a check of under one). Any slot bound to
another object, a rebound ``__code__`` or ``__defaults__``, a module declared otherwise
(``declare_modules``) or a new array family since, and the function is walked as before.

Only slots whose walk cannot change while they hold the same object are kept: modules and classes
(skipped by the walk), library functions and other objects the walk left as they are (a library's
callable object, numpy's dispatchers, a dtype: whether the walk looks into one depends on its
module's declaration, checked again, and on the registered array families, whose number is kept),
builtins, strings, None and booleans (:data:`TERMINAL`), and user functions with a summary of their
own. The walker decides which functions get one (``Walker._summarize``): none for a function with
anything else (state, a user's object, a partial, a bound method, keyword defaults), or whose walk
met a function still being walked (recursion: the answer there is provisional).
"""

from __future__ import annotations

import functools
import types
import weakref
from typing import Any

import numpy as np

from .._core import arrays as _arrays
from .namespaces import is_user_module

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


class Summary:
    """A stateless user function's slots as its walk found them (see the module docstring)."""

    __slots__ = (
        "owner",
        "code",
        "defaults",
        "cells",
        "names",
        "values",
        "library",
        "objects",
        "functions",
        "stores",
        "families",
    )

    def __init__(
        self,
        fn: types.FunctionType,
        cells: tuple[tuple[Any, Any], ...],
        names: tuple[str, ...],
        values: tuple[Any, ...],
        library: tuple[types.FunctionType, ...],
        objects: tuple[Any, ...],
        functions: tuple[types.FunctionType, ...],
        stores: bool,
    ) -> None:
        self.owner = weakref.ref(fn, functools.partial(_forget, id(fn)))  # dropped with fn
        self.code, self.defaults = fn.__code__, fn.__defaults__
        self.cells, self.names, self.values = cells, names, values
        self.library, self.objects, self.functions, self.stores = library, objects, functions, stores
        self.families = _arrays.FAMILIES_GENERATION

    def holds(self, fn: types.FunctionType, checking: set[int]) -> bool:
        """Whether ``fn``'s slots hold the objects they held (and its user functions' theirs)."""
        if fn.__code__ is not self.code or fn.__defaults__ is not self.defaults or fn.__kwdefaults__:
            return False
        for cell, value in self.cells:
            try:
                if cell.cell_contents is not value:
                    return False
            except ValueError:  # emptied since
                if value is not EMPTY:
                    return False
        get = fn.__globals__.get
        for name, value in zip(self.names, self.values):
            if get(name, MISSING) is not value:
                return False
        for f in self.library:
            if is_user_module(f.__module__):
                return False
        if self.families != _arrays.FAMILIES_GENERATION:  # an object may be a new family's array now
            return False
        for obj in self.objects:
            if is_user_module(type(obj).__module__):
                return False
        if self.functions:
            checking.add(id(fn))
            for f in self.functions:
                if id(f) not in checking and not _holds(f, checking):
                    return False
        return True


SUMMARIES: dict[int, Summary] = {}  # id(function) -> its summary (its owner checked at each read)
MAX_SUMMARIES = 4096


def _forget(key: int, owner: weakref.ref[Any]) -> None:
    summary = SUMMARIES.get(key)
    if summary is not None and summary.owner is owner:
        del SUMMARIES[key]


def summary_of(fn: Any) -> Summary | None:
    summary = SUMMARIES.get(id(fn))
    return summary if summary is not None and summary.owner() is fn else None


def _holds(fn: types.FunctionType, checking: set[int]) -> bool:
    summary = summary_of(fn)
    return summary is not None and summary.holds(fn, checking)


def keep(fn: types.FunctionType, summary: Summary) -> None:
    """Keep ``fn``'s summary."""
    if len(SUMMARIES) >= MAX_SUMMARIES:
        SUMMARIES.clear()
    SUMMARIES[id(fn)] = summary


def drop(fn: types.FunctionType) -> None:
    """Forget ``fn``'s summary (it no longer holds: what it kept is not kept alive)."""
    SUMMARIES.pop(id(fn), None)
