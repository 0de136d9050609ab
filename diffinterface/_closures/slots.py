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
"""

from __future__ import annotations

import types
from typing import Any

from .code import code_facts
from .namespaces import is_user_function
from .summaries import EMPTY, MISSING
from .walk import is_state


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
    checks them by identity, in three flat loops (a function reading one helper: 0.3 us)."""

    __slots__ = ("functions", "cells", "names")

    def __init__(self, fn: types.FunctionType) -> None:
        functions: list[tuple[Any, ...]] = []
        cells: list[tuple[Any, Any]] = []
        names: list[tuple[Any, str, Any]] = []
        seen: set[int] = set()
        todo = [fn]
        while todo:
            fn = todo.pop()
            if id(fn) in seen:
                continue
            seen.add(id(fn))
            functions.append((fn, fn.__code__, fn.__defaults__, fn.__kwdefaults__))
            reached = [*(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values()]
            for cell in fn.__closure__ or ():
                try:
                    value = cell.cell_contents
                except ValueError:  # an empty cell
                    value = EMPTY
                cells.append((cell, _kept(value)))
                reached.append(value)
            module_globals = fn.__globals__
            for name in code_facts(fn.__code__)[1]:
                value = module_globals.get(name, MISSING)
                if not isinstance(value, types.ModuleType):
                    names.append((module_globals, name, _kept(value)))
                    reached.append(value)
            todo.extend(v for v in reached if type(v) is types.FunctionType and is_user_function(v))
        self.functions, self.cells, self.names = tuple(functions), tuple(cells), tuple(names)

    def holds(self) -> bool:
        """Whether every slot holds what it held (other state where it held state)."""
        for fn, code, defaults, kwdefaults in self.functions:
            if fn.__code__ is not code or fn.__defaults__ is not defaults or fn.__kwdefaults__ is not kwdefaults:
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


def _still(kept: Any, value: Any) -> bool:
    """Whether a slot that held ``kept`` and holds ``value`` still holds what the preparation may take:
    state where it held state."""
    return type(kept) is _State and (type(value) is kept.kind or is_state(value))


def slots_of(fn: Any) -> Slots | None:
    """The :class:`Slots` of a Python function (and of the user functions it reaches); None for
    any other callable (a bound method, a callable object, a partial: the cache keeps nothing for them)."""
    if type(fn) is not types.FunctionType:
        return None
    return Slots(fn)
