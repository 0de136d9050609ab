"""What a function's slots hold besides its state: checked before a kept preparation serves a call.

A preparation is made for ``f`` as it is: an engine that traces (JAX, TensorFlow, PyTensor, MLX)
compiles the helpers ``f`` calls, the flags it reads and the library functions it picks, and
torch's watch for values read out of tensors stops watching an ``f`` that read none. The state
``f`` captures (arrays, numbers, lists and dicts of them: ``walk.is_state``) is read at every call
(contract section 7); what else its closure cells, defaults and the module globals its code reads
hold is not. So a call without ``prep=`` that the cache serves (``_frontend.reuse``) first checks
that these slots hold what they held when the preparation was made -- the same objects, by
identity, and the same again for the user functions among them -- where a notebook that runs a
cell redefining ``helper`` again, or a rebound flag (``use_bias = False``), gave the derivative of
the old ``f`` (measured 2026-11-28: the kept preparations of the four tracing engines, and torch's
after its watch stopped, returned the old ``f``'s gradient). A slot that changed drops the kept
preparation, and the call is prepared again for ``f`` as it is.

A slot that held state may hold other state (a new batch, a rebound learning rate): that is read at
the call. What this does not see is an attribute set on a captured user object (``model.act =
np.tanh``), as ``jax.jit`` does not: an object's arrays are state, read at every call, its other
attributes are taken as they were (contract section 5).

The same check lets a code's preparation serve its new functions over other state
(``PrepCache.over_state``: ``lambda p: loss(p, batch)`` written for each batch): the preparation is
made for a private copy of one of them, each later one's cell contents and defaults are put into the
copy, and the copy's :class:`Slots` then holds only where the new function holds the same objects
besides state. :func:`own_objects` keys them (the functions of one code around other helpers apart).
"""

from __future__ import annotations

import functools
import types
from typing import Any

from . import summaries
from .code import code_facts
from .namespaces import is_user_function
from .summaries import EMPTY, MISSING
from .walk import is_state

_FUNCTION = types.FunctionType


class _State:
    """A slot that held state (of type ``kind``): it may hold any state, read at the call, nothing else."""

    __slots__ = ("kind",)

    def __init__(self, kind: type) -> None:
        self.kind = kind


def _kept(value: Any) -> Any:
    return _State(type(value)) if is_state(value) else value


class Slots:
    """What a function's slots held besides state, flat: each function reached (``f`` and the user
    functions in its slots, and in theirs) with its code and defaults, each closure cell and each module
    global its code reads with the object it held (a :class:`_State` where it held state; a module,
    which the closure walk skips too, is not checked). Made with :func:`slots_of`; :meth:`holds`
    checks them by identity, in three flat loops (0.3 us for a function reading modules alone, 0.7 with
    a helper and an array, measured 2026-11-28 on a 2-core x86_64 VM under load)."""

    __slots__ = ("functions", "cells", "names", "stores", "closed")

    def __init__(self, fn: types.FunctionType) -> None:
        functions: list[tuple[Any, ...]] = []
        cells: list[tuple[Any, Any]] = []
        names: list[tuple[Any, str, Any]] = []
        seen: set[int] = set()
        todo = [fn]
        # whether a code reached writes a captured name or an attribute (walk's ``stores``), and whether
        # every other object reached is one a program does not change while it stays the same object
        # (``summaries.closed``: no user module, class or object, whose attributes this does not check)
        self.stores, self.closed = False, True
        while todo:
            fn = todo.pop()
            if id(fn) in seen:
                continue
            seen.add(id(fn))
            stores, global_names = code_facts(fn.__code__)
            self.stores = self.stores or stores
            defaults = fn.__defaults__
            functions.append((fn, fn.__code__, defaults, tuple(map(_kept, defaults or ())), fn.__kwdefaults__))
            reached = [*(defaults or ()), *(fn.__kwdefaults__ or {}).values()]
            for cell in fn.__closure__ or ():
                try:
                    value = cell.cell_contents
                except ValueError:  # an empty cell
                    value = EMPTY
                cells.append((cell, _kept(value)))
                reached.append(value)
            module_globals = fn.__globals__
            for name in global_names:
                value = module_globals.get(name, MISSING)
                if not isinstance(value, types.ModuleType):
                    names.append((module_globals, name, _kept(value)))
                    reached.append(value)
            for value in reached:
                if type(value) is types.FunctionType and is_user_function(value):
                    todo.append(value)
                elif self.closed and value is not EMPTY and value is not MISSING and not is_state(value):
                    # a bound method or a partial holds what this does not look into (its object, its
                    # arguments): taken as open, as a summary is not made for them
                    self.closed = not isinstance(value, (types.MethodType, functools.partial)) and summaries.closed(
                        value
                    )
        self.functions, self.cells, self.names = tuple(functions), tuple(cells), tuple(names)

    def holds(self) -> bool:
        """Whether every slot holds what it held (other state where it held state)."""
        for fn, code, defaults, kept_defaults, kwdefaults in self.functions:
            if fn.__code__ is not code or fn.__kwdefaults__ is not kwdefaults:
                return False
            now = fn.__defaults__
            if now is not defaults and not _same_defaults(kept_defaults, now):
                return False
        for cell, kept in self.cells:
            try:
                value = cell.cell_contents
            except ValueError:
                value = EMPTY
            if value is not kept and not _still(kept, value):
                return False
        for module_globals, name, kept in self.names:
            value = module_globals.get(name, MISSING)
            if value is not kept and not _still(kept, value):
                return False
        return True


def _same_defaults(kept: tuple[Any, ...], defaults: tuple[Any, ...] | None) -> bool:
    """Whether another tuple of defaults holds what ``kept`` held, one by one (a function's copy made
    with another's defaults: :meth:`diffinterface._frontend.reuse.PrepCache.serve_over_state`)."""
    if defaults is None:
        return not kept
    if len(defaults) != len(kept):
        return False
    for k, value in zip(kept, defaults):
        if value is not k and not _still(k, value):
            return False
    return True


def _still(kept: Any, value: Any) -> bool:
    """Whether a slot that held ``kept`` and holds ``value`` still holds what the preparation may take:
    state where it held state."""
    return type(kept) is _State and (type(value) is kept.kind or is_state(value))


def own_objects(fn: types.FunctionType) -> tuple[int | None, ...] | None:
    """What tells apart the functions of one code that may share a preparation over state: the
    identity of each object in ``fn``'s closure cells and defaults, None for state (which may differ);
    None for a function with an empty cell or keyword-only defaults (a copy of it takes its cells and
    defaults, not those). A key, not a check (an id may be reused: :meth:`Slots.holds` decides)."""
    if fn.__kwdefaults__:
        return None
    out: list[int | None] = []
    for cell in fn.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:
            return None
        # (a function is never state: the common slot, a helper, without is_state's tests)
        out.append(None if type(value) is not _FUNCTION and is_state(value) else id(value))
    for value in fn.__defaults__ or ():
        out.append(None if type(value) is not _FUNCTION and is_state(value) else id(value))
    return tuple(out)


def slots_of(fn: Any) -> Slots | None:
    """The :class:`Slots` of a Python function (and of the user functions it reaches); None for
    any other callable (a bound method, a callable object, a partial: the cache keeps nothing for them)."""
    if type(fn) is not types.FunctionType:
        return None
    return Slots(fn)
