"""The state a function captures, found once and rebuilt over duplicates for every call (contract section 7).

``StatePlan(f)`` walks what ``f`` captures: closure cells (following captured user functions and
nested closures), default argument values, ``functools.partial`` arguments, attributes of a
callable object or of a bound method's ``self``, and module globals that the code of ``f`` (and of
the user functions it reaches) names. The captured values that are state (arrays, Python scalars,
and lists, tuples and dicts of them) are the plan's *leaves*.

``plan.read()`` returns the user's current leaf values; ``plan.rebuild(values)`` returns a copy of
``f`` whose leaves are ``values``, with the user's objects untouched. An adapter passes duplicates
of its own kind (numpy copies, fresh tensors, writable stand-ins) so that ``f`` may write into them.

Copies cost time and memory where ``f`` only reads its arrays, the common case. So an adapter that
can make a *guarded alias* (an array that shares the user's memory but raises on a write: a
read-only numpy view, a torch tensor that requires grad under grad mode) passes those first
(``plan.aliased``); the first time ``f`` fails over aliases, it runs again over copies, and the plan
remembers that ``f`` writes (``plan.aliases`` turns False: copies from then on). Where the state is
only arrays and numbers, in functions that rebind nothing, ``f`` over the aliases is built once and
reused while the user's objects are the same (``plan.cacheable``).

Which functions are walked is decided by **module name**, never by where a module is installed
(users' model code is usually an installed package): every function, callable object and bound
method is walked unless its module belongs to a library namespace -- the standard library
(``sys.stdlib_module_names``), the engines and their array libraries (numpy, scipy, jax, torch,
autograd, ...), diffinterface itself -- or to a namespace declared one with
:func:`declare_modules` (``declare_modules("mylib", walk=False)``). ``walk=True`` declares user code
inside a library namespace (this package's own scenario catalogue). The most specific declaration
wins. Modules, classes and other objects are never walked.

Size: over 400 lines in one module, because the walker, the state plan built from what it finds, and the
errors that name the captured objects share the walker's leaves and their paths.
"""

from __future__ import annotations

import copy
import dis
import functools
import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from .._core.arrays import is_array, stateful_object

# Library namespaces whose functions are left as they are: the standard library, the engines, their
# array libraries and the scientific stack. Extended, or overridden for a sub-namespace, with
# declare_modules; the most specific prefix of a module's name decides.
_LIBRARIES = frozenset(getattr(sys, "stdlib_module_names", ())) | {
    "__future__",
    "builtins",
    "_pytest",
    "pytest",
    "hypothesis",
    "pluggy",
    "numpy",
    "scipy",
    "jax",
    "jaxlib",
    "torch",
    "functorch",
    "torchvision",
    "autograd",
    "array_api_compat",
    "array_api_strict",
    "ml_dtypes",
    "opt_einsum",
    "numdifftools",
    "sympy",
    "pandas",
    "matplotlib",
    "sklearn",
    "numba",
    "cupy",
    "dask",
    "xarray",
    "flax",
    "optax",
    "equinox",
    "diffrax",
    "chex",
    "diffinterface",
}
_declared: dict[str, bool] = {}  # module-name prefix -> walk
_walk_cache: dict[str | None, bool] = {}


def declare_modules(*names: str, walk: bool) -> None:
    """Declare module namespaces for the closure walker (contract section 7).

    ``walk=False``: a library -- functions and callable objects defined in ``name`` or its
    submodules are called as they are, never looked into for captured state to duplicate.
    ``walk=True``: user code, also inside a library namespace (the walker looks into it as into a
    script's functions). The most specific declaration of a module's name wins::

        diffinterface.declare_modules("mylib", walk=False)      # a library f calls into
        diffinterface.declare_modules("mylib.models", walk=True)  # but this part is model code

    Example:

        >>> di.declare_modules("mylib", walk=False)  # functions of mylib are called as they are
    """
    for name in names:
        if not isinstance(name, str) or not name or name.startswith(".") or name.endswith("."):
            raise ValueError(
                f"declare_modules({name!r}, walk={walk!r}): expected a module name such as 'mylib' or 'mylib.models'"
            )
    if not isinstance(walk, bool):
        raise TypeError(f"declare_modules(..., walk={walk!r}): walk must be True or False")
    for name in names:
        _declared[name] = walk
    _walk_cache.clear()


def _is_user_module(name: str | None) -> bool:
    """Whether functions of the module named ``name`` are walked: by the name alone (see the module
    docstring). A function without a module (made by ``exec`` without ``__name__``) is user code."""
    try:
        return _walk_cache[name]
    except KeyError:
        pass
    walk = True
    if name:
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            prefix = ".".join(parts[:i])
            if prefix in _declared:
                walk = _declared[prefix]
                break
        else:
            walk = parts[0] not in _LIBRARIES
    _walk_cache[name] = walk
    return walk


def _is_user_function(value: Any) -> bool:
    return isinstance(value, types.FunctionType) and _is_user_module(value.__module__)


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


def read_only_alias(value: Any) -> Any:
    """The guarded alias of a numpy array: a read-only view (a write raises); None for other arrays."""
    if type(value) is np.ndarray:
        view = value.view()
        view.flags.writeable = False
        return view
    return None


def _message(error: BaseException) -> Any:
    return (type(error), str(error))


class LearntErrors:
    """The exact errors of some operations, learnt from the engine itself by provoking them once (at
    the first question): ``probes`` are zero-argument calls that raise them, ``key(error)`` what two
    errors must share to be the same one (default: type and message). Recognising a guard's own
    errors this way (never a substring of a message) lets :meth:`Target.guarded` retry over copies
    after exactly those, and raise every other error of ``f`` at once (``f`` runs once).

    ``learnt(error)`` is whether ``error``, an instance of ``kind``, is one of them."""

    __slots__ = ("_kind", "_probes", "_key", "_known")

    def __init__(self, kind: type, probes: Any, key: Callable[[BaseException], Any] = _message) -> None:
        self._kind, self._probes, self._key = kind, tuple(probes), key
        self._known: frozenset | None = None

    def __call__(self, error: BaseException) -> bool:
        if not isinstance(error, self._kind):
            return False
        known = self._known
        if known is None:
            found = set()
            for probe in self._probes:
                try:
                    probe()
                except Exception as provoked:  # noqa: BLE001 - what the engine raises is what is learnt
                    found.add(self._key(provoked))
            self._known = known = frozenset(found)
        return self._key(error) in known


def _numpy_alias() -> np.ndarray:
    return read_only_alias(np.zeros(3))


def _numpy_writes() -> list[Any]:
    return [
        lambda a: a.__setitem__(0, 1.0),
        lambda a: a.__iadd__(1.0),
        lambda a: np.add(a, 1.0, out=a),
        lambda a: np.copyto(a, 1.0),
        lambda a: a.fill(1.0),
        lambda a: a.sort(),
        lambda a: a.put(0, 1.0),
        lambda a: a.setflags(write=True),
        lambda a: np.put(a, 0, 1.0),
        lambda a: np.place(a, a == 0, 1.0),
    ]


# numpy refusing a write into a read-only view (read_only_alias)
numpy_write_refused = LearntErrors(ValueError, [lambda w=w: w(_numpy_alias()) for w in _numpy_writes()])


def raised_by(error: BaseException, refused: Callable[[BaseException], bool]) -> bool:
    """Whether ``refused`` recognises ``error`` or an error it was raised from or during (an engine or
    this library may re-raise the guard's error with its own message in front)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if refused(current):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _immutable(value: Any) -> bool:
    """A number, a numpy scalar, or a tuple of them: nothing ``f`` can write into."""
    if isinstance(value, (bool, int, float, complex, np.generic)):
        return True
    return isinstance(value, tuple) and all(_immutable(v) for v in value)


# Opcodes that rebind a captured name or write an attribute: a function with one of them may change
# its captured state even where every captured value is immutable.
_STORES = frozenset({"STORE_DEREF", "DELETE_DEREF", "STORE_GLOBAL", "DELETE_GLOBAL", "STORE_ATTR", "DELETE_ATTR"})


def _stores(code: types.CodeType) -> bool:
    if any(ins.opname in _STORES for ins in dis.get_instructions(code)):
        return True
    return any(_stores(c) for c in code.co_consts if isinstance(c, types.CodeType))


def _code_names(code: types.CodeType) -> set:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


class _Leaf:
    __slots__ = ("get", "where")

    def __init__(self, get: Callable[..., Any], where: str) -> None:
        self.get, self.where = get, where


class _Walker:
    """Discovery: builds, for each captured object that holds state, a rebuild function."""

    def __init__(self) -> None:
        self.leaves: list[_Leaf] = []
        self._seen: dict[int, Any] = {}
        self.writable = False  # a mutable leaf, a function that rebinds or stores, or an object
        # a list or dict leaf, a function that rebinds or stores, an object, or module globals: a
        # rebuilt f holds something f may change, or that the user may rebind, so it is not reused
        self.structural = False

    def leaf(self, get: Callable[..., Any], where: str) -> int:
        self.leaves.append(_Leaf(get, where))
        value = get()
        self.writable = self.writable or not _immutable(value)
        self.structural = self.structural or not (_immutable(value) or is_array(value))
        return len(self.leaves) - 1

    # Each visit_* returns None when the object holds no state (a user object: always a copy), or
    # build(values, memo) -> new object.
    def visit(self, obj: Any, where: str) -> Any:
        if id(obj) in self._seen:
            return self._seen[id(obj)]
        self._seen[id(obj)] = None  # cycles (recursive functions) are left as they are
        if _is_user_function(obj):
            build = self._function(obj, where)
        elif isinstance(obj, functools.partial):
            build = self._partial(obj, where)
        elif isinstance(obj, types.MethodType):
            build = self._method(obj, where)
        elif callable(obj) and hasattr(obj, "__dict__") and _is_user_module(type(obj).__module__):
            build = self._object(obj, where)
        elif callable(obj) and stateful_object(obj) is not None:  # torch's nn.Module (its ArrayFamily record)
            build = self._object(obj, where)
        else:
            build = None
        self._seen[id(obj)] = build
        return build

    def _part(self, value: Any, get: Callable[..., Any], where: str) -> Any:
        """A rebuild for one captured slot: a leaf index, a nested rebuild, or None."""
        if is_state(value):
            index = self.leaf(get, where)
            return lambda values, memo: values[index]
        return self.visit(value, where)

    def _function(self, fn: types.FunctionType, where: str) -> Any:
        name = fn.__qualname__
        if _stores(fn.__code__):
            self.writable = self.structural = True
        cells: dict[int, Any] = {}
        for i, (var, cell) in enumerate(zip(fn.__code__.co_freevars, fn.__closure__ or ())):
            try:
                value = cell.cell_contents
            except ValueError:  # empty cell
                continue
            part = self._part(value, (lambda c=cell: c.cell_contents), f"{var!r} captured by {name}")
            if part is not None:
                cells[i] = part
        defaults = {}
        for i, value in enumerate(fn.__defaults__ or ()):
            part = self._part(value, (lambda f=fn, i=i: f.__defaults__[i]), f"default argument {i} of {name}")
            if part is not None:
                defaults[i] = part
        kwdefaults = {}
        for k, value in (fn.__kwdefaults__ or {}).items():
            part = self._part(value, (lambda f=fn, k=k: f.__kwdefaults__[k]), f"default argument {k!r} of {name}")
            if part is not None:
                kwdefaults[k] = part
        module_globals = fn.__globals__
        global_parts = {}
        for var in sorted(_code_names(fn.__code__)):
            if var not in module_globals:
                continue
            value = module_globals[var]
            if isinstance(value, (types.ModuleType, type)):
                continue
            part = self._part(value, (lambda g=module_globals, v=var: g[v]), f"global {var!r} of {fn.__module__}")
            if part is not None:
                global_parts[var] = part
        if not (cells or defaults or kwdefaults or global_parts):
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

    def _object(self, obj: Any, where: str) -> Any:
        self.writable = self.structural = True  # its methods may set attributes: not scanned, so duplicated
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
        # Even without state attributes the object is copied: its methods may set attributes on it
        # (``self.calls += 1`` over a class attribute), and the user's object must stay as it was.

        def build(values: list[Any], memo: dict[Any, Any]) -> Any:
            if id(obj) in memo:
                return memo[id(obj)]
            new = copy.copy(obj)
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


class StatePlan:
    """The state ``f`` captures, discovered once; see the module docstring."""

    __slots__ = ("f", "leaves", "_build", "read_only", "aliases", "cacheable", "_cached")

    def __init__(self, f: Callable[..., Any]) -> None:
        walker = _Walker()
        self.f = f
        self._build = walker.visit(f, getattr(f, "__qualname__", type(f).__name__))
        self.leaves = walker.leaves if self._build is not None else []
        # Only immutable values (numbers, tuples of them), in functions that rebind no captured name
        # and set no attribute: f cannot change them, so it needs no duplicate and is called as it
        # is (it reads the current values itself). A compiling engine still passes them as arguments.
        self.read_only = not walker.writable
        # Guarded aliases first (learned: False once f has failed over them and run over copies),
        # and f over them reused while the user's objects are the same (see the module docstring).
        self.aliases = True
        self.cacheable = not walker.structural
        self._cached: tuple[Any, ...] | None = None

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
        cached = self._cached
        if cached is not None and cached[0] == key and all(a is b for a, b in zip(cached[1], values)):
            return cached[2]
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


def _frames(error: BaseException) -> list[Any]:
    """The frames of ``error``'s traceback, outermost first."""
    frames, tb = [], error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def innermost_frame(error: BaseException) -> Any:
    """The frame ``error`` was raised in (its traceback's last), or None without a traceback."""
    frames = _frames(error)
    return frames[-1] if frames else None


def _in_user_code(frame: Any) -> bool:
    return _is_user_module(frame.f_globals.get("__name__"))


def _operator_frame(error: BaseException) -> Any:
    """The frame an operator raised ``error`` in, where that is a ``TypeError`` raised right in user
    code (the traceback's innermost frame is ``f``'s own, not a library's); None otherwise."""
    if not isinstance(error, TypeError):
        return None
    frame = innermost_frame(error)
    return frame if frame is not None and _in_user_code(frame) else None


def _first_line(error: BaseException | str) -> str:
    """The first line of an error's message, for the library's own message around it."""
    reason = str(error).strip()
    return reason.splitlines()[0].rstrip(".") if reason else type(error).__name__


def operand_error(error: BaseException, traced: Callable[[Any], bool]) -> bool:
    """Whether ``error`` is a ``TypeError`` that an operator raised right in user code (its innermost
    frame is ``f``'s own, not a library's) where that frame holds a traced value of the engine and an
    array of another library: ``buffer[0] += x`` with a torch ``buffer`` under JAX, whose error names
    only the two operand types. Recognised from the values, never from the message."""
    frame = _operator_frame(error)
    if frame is None:
        return False
    values = list(frame.f_locals.values())
    return any(traced(v) for v in values) and any(is_array(v) and not traced(v) for v in values)


def const_operand_error(target: Any, error: BaseException, engine: str, own: Callable[[Any], bool]) -> Exception | None:
    """Under ``closure="const"``, the error for ``f`` combining the engine's value with an array it
    captures from another library (``A @ u`` with a numpy ``A`` under torch): ``"const"`` passes the
    captured arrays as they are, and the engine's operator refuses the pair with a ``TypeError`` that
    names only the two types. Recognised from the values: the ``TypeError`` was raised right in user
    code, in a frame that holds one of the engine's values (``own``) and reads (a local, a closure
    cell or a global it names) a captured array that is not the engine's. None otherwise, and
    always with ``closure="duplicated"``, which converts the captured arrays."""
    frame = _operator_frame(error) if getattr(target, "closure", None) == "const" else None
    if frame is None:
        return None
    seen = list(frame.f_locals.values()) + [frame.f_globals[n] for n in frame.f_code.co_names if n in frame.f_globals]
    if not any(own(v) for v in seen):
        return None
    plan = StatePlan(target.user_f)
    foreign = [
        where
        for where, value in zip(plan.where(), plan.read())
        if is_array(value) and not own(value) and any(value is v for v in seen)
    ]
    if not foreign:
        return None
    return TypeError(
        f"{target.call}: with closure='const', f's captured arrays reach it as they are, and {engine} cannot "
        f"combine {', '.join(foreign)} with its own values ({_first_line(error)}). Use closure='duplicated' (the "
        f"default), which gives f each captured array as one of {engine}'s, or capture {engine}'s own arrays."
    )


def const_write_error(
    target: Any,
    error: BaseException | str,
    engine: str,
    leaked: Callable[[BaseException], bool] | None = None,
    kind: type | None = None,
) -> Exception | None:
    """Under ``closure="const"``, the error for ``f`` writing a value that depends on ``x`` into its
    own captured state (contract section 7): it names the captured arrays, lists and dicts and points to
    ``closure="duplicated"``. None when the closure is duplicated, when ``leaked(error)`` (the
    engine's recogniser: its error types, see each adapter) says the error is something else, or when
    ``f`` captures no such state. A ``str`` ``error`` is the adapter's own finding (no recogniser).
    Discovery runs only here, on the way to an error, so ``"const"`` costs nothing on calls that succeed."""
    if getattr(target, "closure", None) != "const":
        return None
    if not isinstance(error, str) and (leaked is None or not leaked(error)):
        return None
    plan = StatePlan(target.user_f)
    captured = [
        where for where, value in zip(plan.where(), plan.read()) if isinstance(value, (list, dict)) or is_array(value)
    ]
    if not captured:
        return None
    first_line = _first_line(error)
    if kind is None:
        kind = TypeError if isinstance(error, TypeError) else ValueError
    return kind(
        f"{target.call}: with closure='const', f writes into its own captured state ({', '.join(captured)}), "
        f"where {engine} cannot carry a value that depends on x ({first_line}); the derivative through it "
        f"would be lost. Use closure='duplicated' (the default): f then writes into duplicates that carry "
        f"derivatives, and your objects stay as they were."
    )


def _holds_standin(frame: Any) -> bool:
    from .writable import WritableArray

    return any(isinstance(v, WritableArray) for v in frame.f_locals.values())


def standin_error(target: Any, error: BaseException, engine: str) -> Exception | None:
    """The error for ``f`` passing a writable stand-in (what ``f`` gets for a captured array it
    writes into, a ``Cache`` or an output buffer under JAX and autograd) to a library function that
    wants the engine's own array: it names the captured arrays and says what to write instead.
    Recognised by mechanism, not message: a stand-in's conversion hook ran (``take_conversion``), its
    own ``StandInConversionError`` was raised, or a frame of library code (not ``f``'s, not this
    package's stand-in methods) in the traceback holds a stand-in. None otherwise."""
    from .writable import StandInConversionError, take_conversion

    converted = take_conversion()
    if not converted and not raised_by(error, lambda e: isinstance(e, StandInConversionError)):
        frames = [
            fr
            for fr in _frames(error)
            if not _in_user_code(fr) and not fr.f_globals.get("__name__", "").startswith("diffinterface")
        ]
        if not any(_holds_standin(fr) for fr in frames):
            return None
    plan = getattr(target, "plan", None)
    captured = [where for where, value in zip(plan.where(), plan.read()) if is_array(value)] if plan is not None else []
    what = ", ".join(captured) if captured else "a Cache context or the output buffer y"
    first_line = _first_line(error)
    kind = TypeError if isinstance(error, TypeError) else ValueError
    return kind(
        f"{target.call}: f passes an array it writes into ({what}) to a function that needs a plain "
        f"{engine} array ({first_line}). Under {engine} such arrays reach f as writable stand-ins, "
        f"whose writes are functional updates. Read the current value first: buf[...] or "
        f"xp.asarray(buf) gives the {engine} array ({'jnp' if engine == 'JAX' else 'anp'}.sin(buf[...])); "
        f"arithmetic, indexing and the array API namespace take the stand-in as it is."
    )


def _holds(value: Any, traced: Callable[[Any], bool]) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_holds(v, traced) for v in value)
    if isinstance(value, dict):
        return any(_holds(v, traced) for v in value.values())
    return traced(value)


def const_trace_checked(target: Any, run: Callable[[], Any], traced: Callable[[Any], bool], engine: str) -> Any:
    """``run()`` (an engine's first trace of ``f``, at preparation) under ``closure="const"``, with
    the lists and dicts ``f`` captures checked afterwards: a traced value (a JAX tracer, an autograd
    box) that ``f`` wrote into one would outlive the call and fail later, far from its cause. Then
    their contents are put back and the error names them (contract section 7). Also put back when
    ``run`` raises. Discovery runs at preparation only; prepared calls pay nothing."""
    plan = StatePlan(target.user_f)
    containers = [(where, v) for where, v in zip(plan.where(), plan.read()) if isinstance(v, (list, dict))]
    if not containers:
        return run()
    saved = [copy.copy(v) for _, v in containers]

    def restore() -> None:
        for (_, v), old in zip(containers, saved):
            if isinstance(v, list):
                v[:] = old
            else:
                v.clear()
                v.update(old)

    try:
        out = run()
    except BaseException:
        restore()
        raise
    leaked = [where for where, v in containers if _holds(v, traced)]
    if leaked:
        restore()
        raise ValueError(
            f"{target.call}: with closure='const', f writes a value that depends on x into its own captured "
            f"state ({', '.join(leaked)}), where a {engine} trace would outlive the call; your objects have been "
            f"put back as they were. Use closure='duplicated' (the default): f then writes into duplicates "
            f"that carry derivatives, and your objects stay as they were."
        )
    return out
