"""Custom derivative rules written once, for every engine (contract section 8).

```python
from diffinterface.rules import custom_rule, Const, Active, Duplicated

@custom_rule(opaque=True)          # the bodies run on NumPy arrays
def f(x, p): ...                   # the primal

@f.def_forward                     # each argument arrives as Const(val) or Duplicated(val, dval)
def f_forward(x, p): ...           # returns (y, dy)

@f.def_augmented_primal            # each argument arrives as Const(val) or Active(val)
def f_aug(x, p): ...               # returns (y, tape); the tape is plain data

@f.def_reverse
def f_rev(tape, dy, x, p): ...     # one cotangent per argument, None for a Const one
```

The augmented primal is optional: a reverse pass that needs nothing but the arguments (they reach
it as ``x.val``) is defined alone, receives ``tape=None``, and the primal serves as the augmented
primal. Engines that must run the augmented primal again inside the reverse pass (an opaque rule
under JAX, whose tape cannot be a residual) then skip it: such a rule costs what a hand-written
``custom_vjp`` whose residuals are its inputs costs.

``f`` stays an ordinary callable. Called on plain arrays it runs the primal; called on an engine's
arrays it goes through that engine's native registration of the rules (``backends/*_rules.py``):
``jax.custom_jvp`` / ``jax.custom_vjp`` (with ``jax.pure_callback`` for opaque bodies),
``torch.autograd.Function`` (with ``jvp`` and ``vmap``), an autograd primitive with its VJP and JVP,
``mx.custom_function``, ``tf.custom_gradient``, PyTensor Ops and ``OpFromGraph`` with overridden
derivatives. So it works through diffinterface's operators and inside the user's own engine code.
Finite differences see ``f`` as the black box it is.

Positional arguments are arrays (or numbers); keyword arguments are static (a ``mode`` string): they
reach every body unchanged and are never differentiated. ``f`` returns one array.

The rule holds no closures: a rule defined at module level pickles by reference, and so does a tape
of plain data (NumPy arrays, numbers, tuples), so the reverse pass can run on an unpickled tape.

Size: over 400 lines in one module, because ``diffinterface.rules`` is a public module: the rule types
and their activity wrappers import from one place; each engine's registration of a rule lives in
``backends/<engine>_rules.py``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._closures.writable import unwrap

if TYPE_CHECKING:
    from collections.abc import Hashable

    from numpy.typing import ArrayLike

__all__ = ["Active", "Const", "Duplicated", "Rule", "SecondOrderError", "custom_rule", "prefer"]


class SecondOrderError(NotImplementedError):
    """A second derivative through a custom rule whose bodies the engine cannot differentiate (an
    opaque rule, or any rule under torch and autograd): its rules are first order, and every engine
    raises this error there rather than return a derivative that misses the rule's own curvature."""


class Const:
    """An argument that is not differentiated: its value only."""

    __slots__ = ("val",)
    val: Any

    def __init__(self, val: Any) -> None:
        self.val = val

    def __repr__(self) -> str:
        return f"Const({_short(self.val)})"


class Active:
    """An argument of the reverse pass that is differentiated: ``reverse`` returns its cotangent."""

    __slots__ = ("val",)
    val: Any

    def __init__(self, val: Any) -> None:
        self.val = val

    def __repr__(self) -> str:
        return f"Active({_short(self.val)})"


class Duplicated:
    """An argument of the forward rule that is differentiated, with its tangent ``dval``."""

    __slots__ = ("val", "dval")
    val: Any
    dval: Any

    def __init__(self, val: Any, dval: Any) -> None:
        self.val, self.dval = val, dval

    def __repr__(self) -> str:
        return f"Duplicated({_short(self.val)}, {_short(self.dval)})"


class _OwnArguments:
    """An opaque rule's body, called with its own copies of the NumPy arrays it gets (bare, or in a
    ``Const``, ``Active`` or ``Duplicated``; a reverse pass's tape as it is): NumPy code may write into
    its input (contract section 4), and the engines hand an opaque body arrays that are the user's
    own memory (torch's recording aliases the user's numpy ``x``, autograd's values) or read-only
    (JAX's host callbacks). Before 2026-12-08 such a primal wrote the user's ``x`` under AutoTorch,
    AutoAutograd and AutoPyTensor, its reverse pass met the written ``x`` (wrong Jacobians there and
    under AutoMLX), and JAX and TensorFlow raised numpy's bare ``output array is read-only``. A copy
    per array, per call of a body: host code's price, beside a callback's. Pickled with its body."""

    __slots__ = ("fn", "__dict__")

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)  # (its name, module and qualname: pickling by reference reads them)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*map(_own, args), **kwargs)

    def __reduce__(self) -> Any:
        return (_OwnArguments, (self.fn,))


def _own(value: Any) -> Any:
    """An opaque body's argument with its NumPy arrays copied (see :class:`_OwnArguments`)."""
    kind = type(value)
    if kind is np.ndarray:
        return value.copy()
    if kind is Const or kind is Active:
        return kind(_own(value.val))
    if kind is Duplicated:
        return Duplicated(_own(value.val), _own(value.dval))
    return value


def _owning(fn: Callable[..., Any]) -> Callable[..., Any]:
    return fn if type(fn) is _OwnArguments else _OwnArguments(fn)


def _unowned(fn: Callable[..., Any]) -> Callable[..., Any]:
    return fn.fn if isinstance(fn, _OwnArguments) else fn


def _short(value: Any) -> str:
    shape = getattr(value, "shape", None)
    return f"<{type(value).__name__} shape={tuple(shape)}>" if shape is not None else repr(value)


# The direction an engine registration should serve where one registration cannot serve both
# (JAX: custom_vjp refuses forward mode, a host callback cannot be transposed). diffinterface's JAX
# adapter sets it while it traces; user code can set it with ``prefer``.
_PREFERRED: contextvars.ContextVar = contextvars.ContextVar("diffinterface_rules_preferred", default=None)


@contextlib.contextmanager
def prefer(mode: str | None) -> Any:
    """Within this block, a rule-carrying function under JAX uses its ``"forward"`` rule
    (``custom_jvp``) or its ``"reverse"`` rules (``custom_vjp``) when it has both.

    Outside diffinterface's operators, which set it themselves, JAX code needs it only for an opaque
    function with both rules under ``jax.jvp`` (the default there is the reverse rules)."""
    if mode not in (None, "forward", "reverse"):
        raise ValueError(f'prefer({mode!r}): expected "forward", "reverse" or None')
    token = _PREFERRED.set(mode)
    try:
        yield
    finally:
        _PREFERRED.reset(token)


def preferred() -> str | None:
    return _PREFERRED.get()


class Rule:
    """A function with derivative rules; made by :func:`custom_rule`. Calling it runs the primal, or
    the engine registration where an argument is an engine's array (see the module docstring)."""

    __name__: str  # set from the primal by functools.update_wrapper
    # the rules, None until defined (has_forward, has_reverse say which are)
    forward: Any
    augmented_primal: Any
    reverse: Any
    primal: Callable[..., Any]
    opaque: bool  # the primal is not traceable by the engines (NumPy/SciPy/compiled code)
    vectorized: bool
    out_shape: Callable[..., Any] | None
    # how a user passes out_shape to this kind of rule (an engine's message where it cannot probe it)
    out_shape_fix: str = "custom_rule(opaque=True, out_shape=fn) with fn(*args) -> (shape, dtype)"

    def __init__(
        self,
        primal: Callable[..., Any],
        *,
        opaque: bool = False,
        vectorized: bool = False,
        out_shape: Callable[..., Any] | None = None,
        forward: Callable[..., Any] | None = None,
        augmented_primal: Callable[..., Any] | None = None,
        reverse: Callable[..., Any] | None = None,
    ) -> None:
        if not callable(primal):
            raise TypeError(f"custom_rule: expected a function, got {type(primal).__name__}")
        functools.update_wrapper(self, _unowned(primal))
        self.opaque, self.vectorized, self.out_shape = bool(opaque), bool(vectorized), out_shape
        own = _owning if self.opaque else _unowned
        self.primal = own(primal)
        self.forward, self.augmented_primal, self.reverse = (
            None if fn is None else own(fn) for fn in (forward, augmented_primal, reverse)
        )
        self._native: dict[Any, Any] = {}  # per engine and static keywords: the registration (never pickled)
        self._lock = threading.Lock()

    # -- definition --------------------------------------------------------------------------

    def _set(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(fn):
            raise TypeError(f"{self.__name__}.def_{name}: expected a function, got {type(fn).__name__}")
        setattr(self, name, _owning(fn) if self.opaque else fn)
        self._native.clear()
        return fn

    def def_forward(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """The forward rule ``fn(*args) -> (y, dy)``; each argument a ``Const`` or a ``Duplicated``."""
        return self._set("forward", fn)

    def def_augmented_primal(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """The augmented primal ``fn(*args) -> (y, tape)``; each argument a ``Const`` or an ``Active``.
        Optional: without it the reverse pass receives ``tape=None`` (see the module docstring)."""
        return self._set("augmented_primal", fn)

    def def_reverse(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """The reverse pass ``fn(tape, dy, *args) -> cotangents``, None for each ``Const`` argument."""
        return self._set("reverse", fn)

    @property
    def has_forward(self) -> bool:
        return self.forward is not None

    @property
    def has_reverse(self) -> bool:
        return self.reverse is not None

    def augment(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """``(y, tape)`` for annotated arguments (``Const``/``Active``): the augmented primal, or the
        primal and ``None`` where the rule has none."""
        if self.augmented_primal is None:
            return self.primal(*(a.val for a in args), **kwargs), None
        return self.augmented_primal(*args, **kwargs)

    def tape(self, *args: Any, **kwargs: Any) -> Any:
        """The tape alone, for a reverse pass that must make it again: ``None`` without running
        anything where the rule has no augmented primal."""
        return None if self.augmented_primal is None else self.augmented_primal(*args, **kwargs)[1]

    # -- evaluation ----------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        args = tuple(map(unwrap, args))  # the JAX and autograd adapters' captured-state stand-ins
        registrar = _registrar_of(args)
        if registrar is None:
            if self.opaque:
                return self.primal(*(_np(a) for a in args), **kwargs)
            return self.primal(*args, **kwargs)
        module = _MODULES.get(registrar)
        if module is None:
            module = _MODULES[registrar] = importlib.import_module(registrar)
        return module.call(self, args, kwargs)

    def native(self, key: Hashable, build: Callable[..., Any]) -> Any:
        """The engine registration for ``key``, built once (thread-safe)."""
        try:
            return self._native[key]
        except KeyError:
            with self._lock:
                if key not in self._native:
                    self._native[key] = build()
                return self._native[key]

    def missing(self, mode: str, where: str) -> NotImplementedError:
        """The error for a mode this function has no rule for."""
        if mode == "forward":
            what, how = "a forward rule", f"@{self.__name__}.def_forward"
        else:
            what, how = (
                "a reverse rule",
                f"@{self.__name__}.def_reverse (and @{self.__name__}.def_augmented_primal for a tape)",
            )
        other = "reverse" if mode == "forward" else "forward"
        has_other = self.has_reverse if mode == "forward" else self.has_forward
        alt = f'; it has {other} rules: use {other} mode (e.g. mode="{other}")' if has_other else ""
        return NotImplementedError(
            f"{self.__name__} ({where}): {mode} mode needs {what}, which this function does not have; "
            f"define it with {how}{alt}"
        )

    def second_order(self, where: str, backend: str) -> SecondOrderError:
        """The error for a second derivative through this function (its rules are first order)."""
        return SecondOrderError(
            f"{self.__name__} ({where}): a second derivative through a custom rule needs the derivatives "
            f"of its rules, which the engine cannot take here (custom_rule defines first-order rules only). "
            f"Differentiate its first-order rules by finite differences with the backend "
            f"SecondOrder(AutoFiniteDiff(), {backend}) in hessian, hvp or second_derivative"
        )

    # -- pickling: by reference where the rule is a module attribute, else by value ---------------

    def __reduce__(self) -> Any:
        module = sys.modules.get(getattr(self.primal, "__module__", None) or "")
        qualname = getattr(self.primal, "__qualname__", "")
        obj: Any = module
        for part in qualname.split("."):
            obj = getattr(obj, part, None)
        if module is not None and obj is self:
            return (_lookup, (module.__name__, qualname))
        return (
            _rebuild,
            (
                self.primal,
                self.opaque,
                self.vectorized,
                self.out_shape,
                self.forward,
                self.augmented_primal,
                self.reverse,
            ),
        )

    def __repr__(self) -> str:
        rules = [n for n, present in (("forward", self.has_forward), ("reverse", self.has_reverse)) if present]
        return f"<custom_rule {self.__name__} opaque={self.opaque} rules={rules or 'none'}>"


# The rule registrars: (the engine's traced or array type as "module.Type", the module whose
# call(rule, args, kwargs) registers a rule natively), consulted in order; a backend adds its own with
# register_rules. The types are resolved through sys.modules: nothing is imported to find them.
_REGISTRARS: list[tuple[str, str]] = [
    ("jax.Array", "diffinterface.backends.jax_rules"),
    ("torch.Tensor", "diffinterface.backends.torch_rules"),
    ("autograd.tracer.Box", "diffinterface.backends.autograd_rules"),
    ("mlx.core.array", "diffinterface.backends.mlx_rules"),
    ("pytensor.graph.basic.Variable", "diffinterface.backends.pytensor_rules"),
    ("tensorflow.python.types.core.Tensor", "diffinterface.backends.tensorflow_rules"),
]
_MODULES: dict[Any, Any] = {}  # registrar module name -> the module, imported at first use
_REGISTRAR_OF_TYPE: dict[Any, Any] = {}  # type -> registrar module (or None), filled as types are met


def register_rules(array_type: str, module: str) -> None:
    """Make rules (:func:`custom_rule`) work inside another engine: where an argument is an instance
    of ``array_type`` (``"module.Type"``, the engine's array or traced type), the rule calls
    ``module.call(rule, args, kwargs)``, which registers it with the engine's own mechanism (see
    ``backends/jax_rules.py`` for one)."""
    if array_type.rpartition(".")[0] == "" or not module:
        raise ValueError(f"register_rules({array_type!r}, {module!r}): expected 'module.Type' and a module name")
    _REGISTRARS.insert(0, (array_type, module))
    _REGISTRAR_OF_TYPE.clear()


def _lookup(module: str, qualname: str) -> Any:
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _rebuild(
    primal: Callable[..., Any],
    opaque: bool,
    vectorized: bool,
    out_shape: Callable[..., Any] | None,
    forward: Callable[..., Any] | None,
    augmented_primal: Callable[..., Any] | None,
    reverse: Callable[..., Any] | None,
) -> Rule:
    return Rule(
        primal,
        opaque=opaque,
        vectorized=vectorized,
        out_shape=out_shape,
        forward=forward,
        augmented_primal=augmented_primal,
        reverse=reverse,
    )


def custom_rule(
    fn: Callable[..., Any] | None = None,
    *,
    opaque: bool = False,
    vectorized: bool = False,
    out_shape: Callable[..., Any] | None = None,
) -> Any:
    """Make ``fn`` a function with derivative rules (a :class:`Rule`).

    - ``opaque=True``: every body (primal and rules) receives and returns NumPy arrays; engines call
      them through host callbacks (JAX) or tensors moved to NumPy (torch). Without it, the bodies run
      on the engine's own arrays (write them with the array API) and stay inside ``jit`` and
      ``torch.compile`` graphs.
    - ``vectorized=True``: the bodies take a leading batch axis on every argument (``vmap``);
      otherwise a batch is a loop over its elements.
    - ``out_shape(*args, **kwargs) -> (shape, dtype)``: the output's shape and dtype from the
      arguments' (objects with ``.shape`` and ``.dtype``), for opaque bodies under JAX, whose host
      callbacks need it before running. Without it the primal is run once on random inputs of the
      right shapes (per shape), which fails for a primal that needs specific values.
    """

    def wrap(f: Callable[..., Any]) -> Rule:
        return Rule(f, opaque=opaque, vectorized=vectorized, out_shape=out_shape)

    return wrap if fn is None else wrap(fn)


def annotate(
    values: tuple[Any, ...], active: tuple[Any, ...], kind: type, tangents: tuple[Any, ...] | None = None
) -> tuple[Any, ...]:
    """The arguments of a rule: ``kind(v)`` (Active) or ``Duplicated(v, t)`` where active, ``Const(v)``."""
    if tangents is not None:
        return tuple([Duplicated(v, t) if a else Const(v) for v, a, t in zip(values, active, tangents)])
    return tuple([kind(v) if a else Const(v) for v, a in zip(values, active)])


def _np(value: ArrayLike) -> Any:
    return value if isinstance(value, (int, float, complex)) else np.asarray(value)


def cotangents(result: Any, n: int) -> tuple[Any, ...]:
    """A reverse pass's result as a tuple of ``n`` (one argument's cotangent may come bare)."""
    if n == 1 and not isinstance(result, (tuple, list)):
        return (result,)
    return tuple(result)


def cotangent_like(value: ArrayLike | None, ref: ArrayLike) -> Any:
    """A NumPy (co)tangent with the type, dtype and shape of ``ref``'s: zeros for None, a float
    for a Python number (engines that check (co)tangent types, autograd, need them so)."""
    if isinstance(ref, (float, int)) and not isinstance(ref, bool):
        return 0.0 if value is None else float(np.reshape(np.asarray(value), ()))
    ref = np.asarray(ref)
    if value is None:
        return np.zeros(ref.shape, ref.dtype)
    if type(value) is np.ndarray and value.dtype == ref.dtype and value.shape == ref.shape:
        return value  # already so (the common case)
    return np.asarray(value, dtype=ref.dtype).reshape(ref.shape)


def _registrar_of(args: tuple[Any, ...]) -> str | None:
    """The rules module of the engine whose arrays or traced values are among ``args`` (imports nothing)."""
    for a in args:
        kind = type(a)
        try:
            found = _REGISTRAR_OF_TYPE[kind]
        except KeyError:
            found = None
            for array_type, module in _REGISTRARS:
                owner, _, name = array_type.rpartition(".")
                loaded = sys.modules.get(owner)
                cls = getattr(loaded, name, None) if loaded is not None else None
                if cls is not None and isinstance(a, cls):
                    found = module
                    break
            if found is not None or kind.__module__.split(".")[0] in ("numpy", "builtins"):
                _REGISTRAR_OF_TYPE[kind] = found  # engines' types are cached once their module is loaded
        if found is not None:
            return found
    return None
