"""The walker: what a function captures, found once (contract section 7).

:class:`Walker` visits what ``f`` captures: closure cells (following captured user functions and
nested closures), default argument values, ``functools.partial`` arguments, attributes of a
callable object or of a bound method's ``self`` (an ``nn.Module``'s submodules through its
:class:`~diffinterface._core.arrays.ArrayFamily` record), and module globals that the code of ``f``
(and of the user functions it reaches) reads or writes (its global-name instructions: an attribute
of the same name, ``model.w``, is not the global ``w``). Which functions it looks into is decided by module
name (``namespaces``). The captured values that are state (arrays, Python scalars, and lists,
tuples and dicts of them: :func:`is_state`) are its *leaves*; each visit returns a rebuild function
``build(values, memo) -> new object`` over new leaf values, or None where the object holds no state.
``plan.StatePlan`` is what the rest of the package uses.
"""

from __future__ import annotations

import copy
import functools
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from .._core.arrays import is_array, stateful_object
from . import summaries
from .code import CodeRecord, code_record
from .namespaces import is_user_function, is_user_module


def is_state(value: Any) -> bool:
    """Whether a captured value is state to duplicate: an array, a number, or a container of them."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float, complex)) or is_array(value):
        return True
    if isinstance(value, (list, dict)):
        return True
    if isinstance(value, tuple):
        return any(is_state(v) for v in value)
    return False


def _immutable(value: Any) -> bool:
    """A number, a numpy scalar, or a tuple of them: nothing ``f`` can write into."""
    if isinstance(value, (bool, int, float, complex, np.generic)):
        return True
    return isinstance(value, tuple) and all(_immutable(v) for v in value)


def _text(where: Any) -> str:
    """Where a captured value lives, for messages: a string, or ``(template, *args)`` formatted only
    where a message may need it (a leaf, a partial's or an object's parts), not for every slot walked."""
    return where if type(where) is str else where[0].format(*where[1:])


class _Leaf:
    __slots__ = ("get", "where")

    def __init__(self, get: Callable[..., Any], where: str) -> None:
        self.get, self.where = get, where


class Walker:
    """Discovery: builds, for each captured object that holds state, a rebuild function."""

    def __init__(self) -> None:
        self.leaves: list[_Leaf] = []
        self._seen: dict[int, Any] = {}
        self._active: set[int] = set()  # the objects being walked (a cycle back to one is provisional)
        self._cycles = 0  # how many times a walk met an object still being walked
        self.writable = False  # a mutable leaf, a function that rebinds or stores, or an object
        # a list or dict leaf, a function that rebinds or stores, an object, or module globals: a
        # rebuilt f holds something f may change, or that the user may rebind, so it is not reused
        self.structural = False
        # an object (rebuilt as a copy) or a function that rebinds or stores: what f sets on them lands
        # in the rebuild's copies, so a rebuild over the very same values is not f itself
        self.copies_effects = False
        # the summaries met or kept on the way, by the id of their function (live while the walk runs): a
        # helper's, found where its summary held, is not looked up again where the function around it
        # is summarized, and the walked function's own is read from here by the plan
        self.summaries: dict[int, summaries.Summary] = {}

    def leaf(self, get: Callable[..., Any], where: str) -> int:
        self.leaves.append(_Leaf(get, where))
        value = get()
        self.writable = self.writable or not _immutable(value)
        self.structural = self.structural or not (_immutable(value) or is_array(value))
        return len(self.leaves) - 1

    # Each visit_* returns None when the object holds no state (a user object: always a copy), or
    # build(values, memo) -> new object.
    def visit(self, obj: Any, where: Any) -> Any:
        key = id(obj)
        if key in self._seen:
            if key in self._active:
                self._cycles += 1
            return self._seen[key]
        self._seen[key] = None  # cycles (recursive functions) are left as they are
        if is_user_function(obj):  # (where is not read there)
            summary = summaries.summary_of(obj)
            if summary is not None:
                if summary.holds(obj, set()):  # stateless as it was: not walked again
                    if summary.stores:
                        self.writable = self.structural = self.copies_effects = True
                    self.summaries[key] = summary
                    return None
                summaries.drop(obj)  # what it held is not kept alive (the walk may keep a new one)
            self._active.add(key)
            build = self._function(obj, where)
            self._active.discard(key)
        elif isinstance(obj, functools.partial):
            build = self._partial(obj, _text(where))
        elif isinstance(obj, types.MethodType):
            build = self._method(obj, _text(where))
        elif callable(obj) and hasattr(obj, "__dict__") and is_user_module(type(obj).__module__):
            build = self._object(obj, _text(where))
        elif callable(obj) and stateful_object(obj) is not None:  # torch's nn.Module (its ArrayFamily record)
            build = self._object(obj, _text(where))
        elif hasattr(obj, "__dict__") and is_user_module(type(obj).__module__):  # params, read as params.w
            build = self._object(obj, _text(where), copy_always=False)
        else:
            build = None
        self._seen[id(obj)] = build
        return build

    def _part(self, value: Any, get: Callable[..., Any], where: Any) -> Any:
        """A rebuild for one captured slot: a leaf index, a nested rebuild, or None (``where``: see
        :func:`_text`)."""
        if type(value) is not types.FunctionType and is_state(value):  # a function is never state
            index = self.leaf(get, _text(where))
            return lambda values, memo: values[index]
        return self.visit(value, where)

    def _function(self, fn: types.FunctionType, where: Any) -> Any:
        name = fn.__qualname__
        record = code_record(fn.__code__)
        stores, names = record.facts
        if stores:
            self.writable = self.structural = self.copies_effects = True
        cycles = self._cycles
        read: list[Any] = []  # what the slots hold, for a summary (see summaries.Summary)
        slots: list[tuple[Any, Any]] = []
        cells: dict[int, Any] = {}
        for i, (var, cell) in enumerate(zip(fn.__code__.co_freevars, fn.__closure__ or ())):
            try:
                value = cell.cell_contents
            except ValueError:  # empty cell
                slots.append((cell, summaries.EMPTY))
                continue
            slots.append((cell, value))
            read.append(value)
            part = self._part(value, (lambda c=cell: c.cell_contents), ("{!r} captured by {}", var, name))
            if part is not None:
                cells[i] = part
        defaults = {}
        read.extend(fn.__defaults__ or ())
        for i, value in enumerate(fn.__defaults__ or ()):
            part = self._part(value, (lambda f=fn, i=i: f.__defaults__[i]), ("default argument {} of {}", i, name))
            if part is not None:
                defaults[i] = part
        kwdefaults = {}
        for k, value in (fn.__kwdefaults__ or {}).items():
            part = self._part(value, (lambda f=fn, k=k: f.__kwdefaults__[k]), ("default argument {!r} of {}", k, name))
            if part is not None:
                kwdefaults[k] = part
        module_globals = fn.__globals__
        global_parts = {}
        found = []  # each name's object, or summaries.MISSING
        for var in names:
            value = module_globals.get(var, summaries.MISSING)
            found.append(value)
            if value is summaries.MISSING or isinstance(value, (types.ModuleType, type)):
                continue
            read.append(value)
            part = self._part(value, (lambda g=module_globals, v=var: g[v]), ("global {!r} of {}", var, fn.__module__))
            if part is not None:
                global_parts[var] = part
        if not (cells or defaults or kwdefaults or global_parts):
            # kept by code: a lambda written at the call is a new function of one code at each call
            if self._cycles == cycles and not fn.__kwdefaults__:
                self._summarize(fn, record, slots, names, found, read, stores)
            return None
        self.structural = self.structural or bool(global_parts)  # a copy of the module's globals

        def build(values: list[Any], memo: dict[Any, Any]) -> types.FunctionType:
            if id(fn) in memo:
                return memo[id(fn)]
            if global_parts:
                key = ("globals", id(module_globals))
                new_globals = memo.get(key)
                if new_globals is None:
                    new_globals = memo[key] = dict(module_globals)
            else:
                new_globals = module_globals
            closure = fn.__closure__
            if cells:
                closure = tuple(
                    types.CellType(cells[i](values, memo)) if i in cells else c for i, c in enumerate(closure or ())
                )
            new_fn = types.FunctionType(fn.__code__, new_globals, fn.__name__, fn.__defaults__, closure)
            memo[id(fn)] = new_fn
            new_fn.__kwdefaults__ = fn.__kwdefaults__
            new_fn.__dict__.update(fn.__dict__)
            new_fn.__qualname__, new_fn.__module__, new_fn.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
            if defaults:
                new_fn.__defaults__ = tuple(
                    defaults[i](values, memo) if i in defaults else d for i, d in enumerate(fn.__defaults__ or ())
                )
            if kwdefaults:
                new_fn.__kwdefaults__ = {
                    k: kwdefaults[k](values, memo) if k in kwdefaults else d
                    for k, d in (fn.__kwdefaults__ or {}).items()
                }
            for var, part in global_parts.items():
                new_globals[var] = part(values, memo)
            return new_fn

        return build

    def _summarize(
        self,
        fn: types.FunctionType,
        record: CodeRecord,
        slots: list[tuple[Any, Any]],
        names: tuple[str, ...],
        found: list[Any],
        read: list[Any],
        stores: bool,
    ) -> None:
        """Keep ``fn``'s summary (``summaries``), where every slot it read is one a summary can check."""
        functions = []
        met = self.summaries
        for value in read:
            if type(value) is types.FunctionType:
                summary = met.get(id(value))  # (a helper whose summary held, met by this walk)
                if summary is not None or is_user_function(value):
                    if summary is None:
                        summary = summaries.summary_of(value)
                        if summary is None:
                            return
                    stores = stores or summary.stores
                    functions.append(value)
            elif isinstance(value, (functools.partial, types.MethodType)):
                return  # walked through to what they bind
            elif not isinstance(value, summaries.TERMINAL):
                if is_state(value) or (callable(value) and stateful_object(value) is not None):
                    return
        try:
            summary = summaries.Summary(
                fn, record, tuple(v for _, v in slots), names, tuple(found), tuple(functions), stores
            )
        except summaries.Unsafe:  # an object it could neither hold weakly nor keep alive without harm
            return
        summaries.keep(record, summary)
        met[id(fn)] = summary

    def _partial(self, p: functools.partial, where: str) -> Any:
        func = self.visit(p.func, where)
        args = {}
        for i, value in enumerate(p.args):
            part = self._part(value, (lambda p=p, i=i: p.args[i]), f"argument {i} of {where}")
            if part is not None:
                args[i] = part
        keywords = {}
        for k, value in p.keywords.items():
            part = self._part(value, (lambda p=p, k=k: p.keywords[k]), f"keyword {k!r} of {where}")
            if part is not None:
                keywords[k] = part
        if func is None and not args and not keywords:
            return None

        def build(values: list[Any], memo: dict[Any, Any]) -> functools.partial:
            new_func = func(values, memo) if func is not None else p.func
            new_args = [args[i](values, memo) if i in args else a for i, a in enumerate(p.args)]
            new_kw = {k: keywords[k](values, memo) if k in keywords else v for k, v in p.keywords.items()}
            return functools.partial(new_func, *new_args, **new_kw)

        return build

    def _method(self, m: types.MethodType, where: str) -> Any:
        func = self.visit(m.__func__, where)
        owner = m.__self__
        obj = (
            self._object(owner, f"{where}.__self__")
            if hasattr(owner, "__dict__") and not isinstance(owner, type)
            else None
        )
        if func is None and obj is None:
            return None

        def build(values: list[Any], memo: dict[Any, Any]) -> types.MethodType:
            new_func = func(values, memo) if func is not None else m.__func__
            new_self = obj(values, memo) if obj is not None else owner
            return types.MethodType(new_func, new_self)

        return build

    def _object(self, obj: Any, where: str, copy_always: bool = True) -> Any:
        """A user's object rebuilt as a copy over duplicates of the state its attributes hold. A callable
        one (``copy_always``) is copied even without state attributes: its methods may set attributes on it
        (``self.calls += 1`` over a class attribute), and the user's object must stay as it was. Any other
        (``params``, whose attributes ``f`` reads: ``params.w``) only where an attribute holds state, and is
        left alone otherwise (settings, flags); before, it was always left alone, so a compiled engine took
        ``params.w`` as a constant of its program and a loop that rebound it got the first value's
        derivative from its fourth call on."""
        attrs = {}
        record = stateful_object(obj)
        children = record.children if record is not None else None
        for name, value in vars(obj).items():
            if name == children and isinstance(value, dict):  # submodules: their parameters and buffers
                part = self._submodules(value, type(obj).__name__)
            else:
                part = self._part(
                    value, (lambda o=obj, n=name: vars(o)[n]), f"attribute {name!r} of {type(obj).__name__}"
                )
            if part is not None:
                attrs[name] = part
        if not attrs and not copy_always:
            return None
        self.writable = self.structural = self.copies_effects = True  # its methods may set attributes: not scanned

        def build(values: list[Any], memo: dict[Any, Any]) -> Any:
            if id(obj) in memo:
                return memo[id(obj)]
            new = copy.copy(obj)
            if new is obj:  # a singleton that copies as itself (an Enum member): left as it is, never written
                memo[id(obj)] = obj
                return obj
            memo[id(obj)] = new
            new_vars = vars(new)
            for name, part in attrs.items():
                new_vars[name] = part(values, memo)
            return new

        return build

    def _submodules(self, modules: dict[Any, Any], owner: str) -> Any:
        """The ``_modules`` dict of an ``nn.Module``: each submodule rebuilt like its parent."""
        parts = {
            name: self.visit(sub, f"submodule {name!r} of {owner}") for name, sub in modules.items() if sub is not None
        }
        parts = {name: part for name, part in parts.items() if part is not None}
        if not parts:
            return None

        def build(values: list[Any], memo: dict[Any, Any]) -> dict[Any, Any]:
            new = copy.copy(modules)
            for name, part in parts.items():
                new[name] = part(values, memo)
            return new

        return build
