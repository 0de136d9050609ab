"""Backend configs: small frozen values that name an engine and how to use it.

They hold plain values only, compare and hash by value, validate their fields on
construction, and show only the fields that differ from the defaults.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import threading
from typing import Any, ClassVar

from ._errors import BackendNotAvailableError

_CLOSURES = ("duplicated", "const")
_MODES = (None, "forward", "reverse")


def _choice(config: object, field: str, value: object, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(
            f"{type(config).__name__}({field}={value!r}): {field} must be one of "
            f"{', '.join(repr(a) for a in allowed)}"
        )


class _Repr:
    """``repr`` that prints only the fields that differ from their defaults (as ADTypes.jl does)."""

    def __repr__(self) -> str:
        parts = []
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, field.name)
            if field.default is dataclasses.MISSING or value != field.default:
                parts.append(f"{field.name}={value!r}")
        return f"{type(self).__name__}({', '.join(parts)})"


class AbstractBackend(_Repr):
    """Base of the engine configs; ``engine`` is the module the adapter needs, ``adapter`` its module."""

    engine: ClassVar[str | None] = None
    adapter_module: ClassVar[str] = ""
    extra: ClassVar[str] = ""
    closure: str

    def _check_closure(self) -> None:
        _choice(self, "closure", self.closure, _CLOSURES)


@dataclasses.dataclass(frozen=True, repr=False)
class AutoFiniteDiff(AbstractBackend):
    """Finite differences on any array-API array; needs only numpy.

    Steps are scaled to ``x`` as in ``scipy.optimize.approx_derivative``: a relative step of
    ``eps**(1/2)`` (forward, backward, complex) or ``eps**(1/3)`` (central) times ``max(1, |x_i|)``,
    with ``eps`` that of ``x``'s dtype. ``rel_step`` replaces the relative step.
    """

    method: str = "central"
    rel_step: float | None = None
    closure: str = "duplicated"
    adapter_module: ClassVar[str] = "finitediff"
    mode: ClassVar[str] = "forward"

    def __post_init__(self) -> None:
        _choice(self, "method", self.method, ("central", "forward", "backward", "complex"))
        if self.rel_step is not None and not (
            isinstance(self.rel_step, (int, float)) and not isinstance(self.rel_step, bool) and self.rel_step > 0
        ):
            raise ValueError(f"AutoFiniteDiff(rel_step={self.rel_step!r}): rel_step must be a positive float or None")
        self._check_closure()


@dataclasses.dataclass(frozen=True, repr=False)
class AutoJAX(AbstractBackend):
    """JAX: ``jax.jvp``/``jax.vjp``, ``jacfwd``/``jacrev``, ``vmap``; jitted when ``jit=True``."""

    mode: str | None = None
    jit: bool = True
    closure: str = "duplicated"
    engine: ClassVar[str | None] = "jax"
    adapter_module: ClassVar[str] = "jax"
    extra: ClassVar[str] = "jax"

    def __post_init__(self) -> None:
        _choice(self, "mode", self.mode, _MODES)
        _choice(self, "jit", self.jit, (True, False))
        self._check_closure()


@dataclasses.dataclass(frozen=True, repr=False)
class AutoTorch(AbstractBackend):
    """PyTorch: ``torch.func`` transforms and eager ``torch.autograd``; ``compile=True`` uses ``torch.compile``."""

    mode: str | None = None
    compile: bool = False
    closure: str = "duplicated"
    engine: ClassVar[str | None] = "torch"
    adapter_module: ClassVar[str] = "torch"
    extra: ClassVar[str] = "torch"

    def __post_init__(self) -> None:
        _choice(self, "mode", self.mode, _MODES)
        _choice(self, "compile", self.compile, (True, False))
        self._check_closure()


@dataclasses.dataclass(frozen=True, repr=False)
class AutoAutograd(AbstractBackend):
    """HIPS autograd: ``make_vjp`` for reverse mode, its JVPs for forward mode."""

    mode: str | None = None
    closure: str = "duplicated"
    engine: ClassVar[str | None] = "autograd"
    adapter_module: ClassVar[str] = "autograd"
    extra: ClassVar[str] = "autograd"

    def __post_init__(self) -> None:
        _choice(self, "mode", self.mode, _MODES)
        self._check_closure()


@dataclasses.dataclass(frozen=True, repr=False)
class SecondOrder(_Repr):
    """``inner`` differentiated by ``outer``: for second-order operators only (hvp, hessian, second_derivative)."""

    outer: AbstractBackend
    inner: AbstractBackend

    def __post_init__(self) -> None:
        for name in ("outer", "inner"):
            value = getattr(self, name)
            if not isinstance(value, AbstractBackend):
                raise TypeError(
                    f"SecondOrder({name}={value!r}): expected a backend config such as AutoJAX(), "
                    f"got {type(value).__name__}"
                )


Backend = AbstractBackend


def check_available(backend: AbstractBackend | SecondOrder) -> bool:
    """Whether the engine(s) behind ``backend`` are installed; imports nothing."""
    if isinstance(backend, SecondOrder):
        return check_available(backend.outer) and check_available(backend.inner)
    if not isinstance(backend, AbstractBackend):
        raise TypeError(f"check_available({backend!r}): expected a backend config such as AutoJAX()")
    return backend.engine is None or importlib.util.find_spec(backend.engine) is not None


def has_adapter(backend: AbstractBackend) -> bool:
    """Whether this installation ships the adapter module of ``backend`` (imports nothing)."""
    return importlib.util.find_spec(f"diffinterface.backends.{backend.adapter_module}") is not None


_adapters: dict = {}
_adapters_lock = threading.Lock()


def adapter_for(backend: AbstractBackend, call: str) -> Any:
    """The adapter of ``backend``, importing its module the first time it is used."""
    try:
        return _adapters[backend]
    except KeyError:
        pass
    if not isinstance(backend, AbstractBackend):
        if isinstance(backend, SecondOrder):
            raise TypeError(
                f"{call}: SecondOrder backends are for second-order operators (hvp, hessian, "
                f"second_derivative); pass one engine config such as {backend.inner!r}"
            )
        raise TypeError(
            f"{call}: expected a backend config such as AutoFiniteDiff() or AutoJAX() as first "
            f"argument, got {type(backend).__name__}"
        )
    if not check_available(backend):
        raise BackendNotAvailableError(
            f"{call}: {type(backend).__name__} needs {backend.engine}, which is not installed; "
            f'install it with: pip install "diffinterface[{backend.extra}]"'
        )
    if not has_adapter(backend):
        raise BackendNotAvailableError(
            f"{call}: this version of diffinterface has no adapter for {type(backend).__name__} yet "
            f"(diffinterface.backends.{backend.adapter_module}); use AutoFiniteDiff() meanwhile"
        )
    module = importlib.import_module(f"diffinterface.backends.{backend.adapter_module}")
    with _adapters_lock:
        return _adapters.setdefault(backend, module.Adapter(backend))
