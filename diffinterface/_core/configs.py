"""Backend configs: small frozen values that name an engine and how to use it.

They hold plain values, compare and hash by value, validate their fields on construction, and
show only the fields that differ from the defaults. One field holds an object: the executor of
``AutoFiniteDiff(executor=...)``, compared and hashed by identity (an executor has no value).

Size: over 400 lines in one module, because the built-in configs and the registry they are entered
in read as one table: each config is a short class, and apart they would import each other.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib
import importlib.util
import threading
import warnings
from collections.abc import Callable
from typing import Any, ClassVar, cast

from .errors import BackendNotAvailableError

_CLOSURES = ("duplicated", "const")
_MODES = (None, "forward", "reverse")


def _choice(config: object, field: str, value: object, allowed: tuple[Any, ...]) -> None:
    if value not in allowed:
        raise ValueError(
            f"{type(config).__name__}({field}={value!r}): {field} must be one of {', '.join(repr(a) for a in allowed)}"
        )


_HASH = "_hash"  # where hash_once keeps a config's hash, in the instance's __dict__
_REPR = "_repr"  # where _Repr.__repr__ keeps a frozen config's repr


class _Repr:
    """``repr`` that prints only the fields that differ from their defaults (as ADTypes.jl does).

    A frozen config's repr is computed once and kept: every call builds its messages' prefix from it
    (``gradient(AutoTorch(), f, x)``), and reading the fields took 7 us of an unprepared torch call."""

    def __getstate__(self) -> dict[str, Any]:
        # the kept hash (hash_once) and repr are left out: a string's hash differs between processes
        return {k: v for k, v in self.__dict__.items() if k not in (_HASH, _REPR)}

    def __repr__(self) -> str:
        kept: str | None = self.__dict__.get(_REPR)
        if kept is not None:
            return kept
        parts = []
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, field.name)
            if field.default is dataclasses.MISSING or value != field.default:
                parts.append(f"{field.name}={value!r}")
        text = f"{type(self).__name__}({', '.join(parts)})"
        params = getattr(type(self), "__dataclass_params__", None)
        if params is not None and params.frozen:  # a config that cannot change: its repr cannot either
            object.__setattr__(self, _REPR, text)
        return text


class AbstractBackend(_Repr):
    """Base of the backend configs (public as ``diffinterface.extend.BackendConfig``).

    A config describes its engine with four class attributes, and nothing else in the package
    needs to know it:

    - ``name``: the short name the registry, ``python -m diffinterface check --backend NAME`` and
      the benchmarks use (``"jax"``);
    - ``engine``: the module whose presence means the engine is installed (``"jax"``; None: numpy
      only), looked up without importing it;
    - ``adapter``: where its adapter class lives, ``"package.module:Class"``, imported at first use;
    - ``install``: what to install when the engine is missing (``'pip install "diffinterface[jax]"'``).

    Every built-in config has ``closure`` (``"duplicated"``, or ``"const"`` to pass captured state as it is,
    contract section 7) and ``reuse_prep`` (True: a call without ``prep=`` reuses the preparation of an
    earlier call with the same function and argument shapes, see ``diffinterface.prep_cache``; False:
    every such call prepares afresh, as ``prepare_*`` would, and compiles nothing it keeps).

    A config may also define ``tolerance(dtype, second_order) -> float``: the scaled tolerance the
    test harness checks its results with (finite differences need looser ones), and ``bench``:
    where its :class:`diffinterface.extend.BenchEngine` lives (``"package.module:Class"``: the
    engine's own best calls, which ``python -m diffinterface bench`` compares the backend with).
    """

    name: ClassVar[str] = ""
    engine: ClassVar[str | None] = None
    adapter: ClassVar[str] = ""
    install: ClassVar[str] = ""
    bench: ClassVar[str | None] = None
    closure: str

    def _check_closure(self) -> None:
        _choice(self, "closure", self.closure, _CLOSURES)
        _choice(self, "reuse_prep", getattr(self, "reuse_prep", True), (True, False))


@dataclasses.dataclass(frozen=True, repr=False)
class _EngineConfig(AbstractBackend):
    """Base of the configs of the AD engines (every built-in one but ``AutoFiniteDiff``): ``mode``, their
    first field, and the validation written once: ``mode``, then the engine's own fields
    (:meth:`_check_options`), then ``closure`` and ``reuse_prep``.

    Each config declares its own fields after ``mode``, ``closure`` and ``reuse_prep`` last (a dataclass
    puts a base's fields first, so these two stay in each config to keep its field order and positional
    arguments)."""

    mode: str | None = None

    def __post_init__(self) -> None:
        _choice(self, "mode", self.mode, _MODES)
        self._check_options()
        self._check_closure()

    def _check_options(self) -> None:
        """Validates the engine's own fields (none here); raises ``ValueError``/``TypeError`` naming the config."""


@dataclasses.dataclass(frozen=True, repr=False)
class AutoFiniteDiff(AbstractBackend):
    """Finite differences on any array-API array; needs only numpy.

    Steps are scaled to ``x`` as in ``scipy.optimize.approx_derivative``: a relative step of
    ``eps**(1/2)`` (forward, backward, complex) or ``eps**(1/3)`` (central) times ``max(1, |x_i|)``,
    with ``eps`` that of ``x``'s dtype. ``rel_step`` replaces the relative step.

    For an expensive ``f``, the evaluations of one call can run elsewhere (the executor module of its adapter, ``diffinterface.backends.finitediff_executor``):

    - ``executor``: a ``concurrent.futures.Executor`` (``distributed.Client(...).get_executor()``
      for Dask, ``ProcessPoolExecutor``, ``ThreadPoolExecutor``) to which the points are submitted,
      ``batch_size`` points per task (default 1); the results are those of the serial call to the
      bit. The executor is compared by identity.
    - ``vectorized=True``: ``f`` takes a batch of points stacked along a new first axis,
      ``(k, *x.shape)``, and returns its values stacked the same way; it is called once per batch
      of ``batch_size`` points (default: all the points of a call; with an executor, one batch per
      task).

    Example:

        >>> di.AutoFiniteDiff(method="forward")
        AutoFiniteDiff(method='forward')
        >>> print(di.derivative(di.AutoFiniteDiff(), np.sin, 0.0).round(8))
        1.0
    """

    method: str = "central"
    rel_step: float | None = None
    closure: str = "duplicated"
    reuse_prep: bool = True
    executor: Any = None
    batch_size: int | None = None
    vectorized: bool = False
    name: ClassVar[str] = "finitediff"
    adapter: ClassVar[str] = "diffinterface.backends.finitediff:Adapter"
    bench: ClassVar[str | None] = "diffinterface.backends.finitediff_bench:Bench"
    mode: ClassVar[str] = "forward"

    def __post_init__(self) -> None:
        _choice(self, "method", self.method, ("central", "forward", "backward", "complex"))
        if self.rel_step is not None and not (
            isinstance(self.rel_step, (int, float)) and not isinstance(self.rel_step, bool) and self.rel_step > 0
        ):
            raise ValueError(f"AutoFiniteDiff(rel_step={self.rel_step!r}): rel_step must be a positive float or None")
        self._check_closure()
        if self.executor is not None and not isinstance(self.executor, concurrent.futures.Executor):
            hint = (
                "; pass client.get_executor()"
                if hasattr(self.executor, "get_executor")
                else " such as distributed.Client(...).get_executor() or ProcessPoolExecutor()"
            )
            raise TypeError(
                f"AutoFiniteDiff(executor=...): expected a concurrent.futures.Executor{hint}, "
                f"got {type(self.executor).__module__}.{type(self.executor).__qualname__}"
            )
        if self.batch_size is not None and not (
            isinstance(self.batch_size, int) and not isinstance(self.batch_size, bool) and self.batch_size > 0
        ):
            raise ValueError(
                f"AutoFiniteDiff(batch_size={self.batch_size!r}): batch_size must be a positive int or None"
            )
        _choice(self, "vectorized", self.vectorized, (False, True))


@dataclasses.dataclass(frozen=True, repr=False)
class AutoJAX(_EngineConfig):
    """JAX: ``jax.jvp``/``jax.vjp``, ``jacfwd``/``jacrev``, ``vmap``; jitted when ``jit=True``.

    Example:

        >>> g = di.gradient(di.AutoJAX(), lambda x: (x ** 2).sum(), np.array([1.0, 2.0]))
        >>> print(g, g.dtype)  # numpy in, numpy out; float64 kept
        [2. 4.] float64
    """

    jit: bool = True
    closure: str = "duplicated"
    reuse_prep: bool = True
    name: ClassVar[str] = "jax"
    engine: ClassVar[str | None] = "jax"
    adapter: ClassVar[str] = "diffinterface.backends.jax:Adapter"
    bench: ClassVar[str | None] = "diffinterface.backends.jax_bench:Bench"
    install: ClassVar[str] = 'pip install "diffinterface[jax]"'

    def _check_options(self) -> None:
        _choice(self, "jit", self.jit, (True, False))


@dataclasses.dataclass(frozen=True, repr=False)
class AutoTorch(_EngineConfig):
    """PyTorch: ``torch.func`` transforms and eager ``torch.autograd``; ``compile=True`` uses ``torch.compile``.

    Example:

        >>> g = di.gradient(di.AutoTorch(), lambda x: (x ** 2).sum(), np.array([1.0, 2.0]))
        >>> print(g, g.dtype)  # numpy in, numpy out; float64 kept
        [2. 4.] float64
    """

    compile: bool = False
    closure: str = "duplicated"
    reuse_prep: bool = True
    name: ClassVar[str] = "torch"
    engine: ClassVar[str | None] = "torch"
    adapter: ClassVar[str] = "diffinterface.backends.torch:Adapter"
    bench: ClassVar[str | None] = "diffinterface.backends.torch_bench:Bench"
    install: ClassVar[str] = 'pip install "diffinterface[torch]"'

    def _check_options(self) -> None:
        _choice(self, "compile", self.compile, (True, False))


@dataclasses.dataclass(frozen=True, repr=False)
class AutoAutograd(_EngineConfig):
    """HIPS autograd: ``make_vjp`` for reverse mode, its JVPs for forward mode.

    Example:

        >>> g = di.gradient(di.AutoAutograd(), lambda x: (x ** 2).sum(), np.array([1.0, 2.0]))
        >>> print(g, g.dtype)  # numpy in, numpy out; float64 kept
        [2. 4.] float64
    """

    closure: str = "duplicated"
    reuse_prep: bool = True
    name: ClassVar[str] = "autograd"
    engine: ClassVar[str | None] = "autograd"
    adapter: ClassVar[str] = "diffinterface.backends.autograd:Adapter"
    bench: ClassVar[str | None] = "diffinterface.backends.autograd_bench:Bench"
    install: ClassVar[str] = 'pip install "diffinterface[autograd]"'


@dataclasses.dataclass(frozen=True, repr=False)
class AutoMLX(_EngineConfig):
    """Apple's MLX: ``mx.vjp``/``mx.jvp``, ``mx.grad``, ``mx.vmap``; prepared calls ``mx.compile``-d.

    ``compile=True`` (the default) compiles a prepared operator once with ``mx.compile`` (its
    captured arrays and contexts arguments of the compiled function, read at every call); an ``f``
    that reads a traced value into Python (``if x.max() > 1:``) runs eagerly instead. float64 is
    computed on MLX's CPU stream (``mx.stream(mx.cpu)``), the user's default device untouched.

    Example:

        >>> g = di.gradient(di.AutoMLX(), lambda x: (x ** 2).sum(), np.array([1.0, 2.0]))
        >>> print(g, g.dtype)  # numpy in, numpy out; float64 kept
        [2. 4.] float64
    """

    compile: bool = True
    closure: str = "duplicated"
    reuse_prep: bool = True
    name: ClassVar[str] = "mlx"
    engine: ClassVar[str | None] = "mlx"
    adapter: ClassVar[str] = "diffinterface.backends.mlx:Adapter"
    bench: ClassVar[str | None] = "diffinterface.backends.mlx_bench:Bench"
    install: ClassVar[str] = 'pip install "diffinterface[mlx]"'

    def _check_options(self) -> None:
        _choice(self, "compile", self.compile, (True, False))

    def tolerance(self, dtype: Any, second_order: bool) -> float:
        """What the test harness allows: MLX computes float64 ``exp``, ``sin``, ``cos`` and ``erf`` on the
        CPU with its float32 approximations (ml-explore/mlx issues 3047 and 4158; about 1e-7 relative
        error in mlx 0.32), so float64 results are float32-accurate where f uses them."""
        import numpy as np

        return 1e-5 if np.dtype(dtype) == np.float32 else (2e-6 if second_order else 1e-6)


@dataclasses.dataclass(frozen=True, repr=False)
class AutoPyTensor(_EngineConfig):
    """PyTensor: ``f`` written with ``pytensor.tensor``; its symbolic derivatives compiled with ``pytensor.function``.

    ``compile_mode`` is the mode of prepared calls (None: PyTensor's configured mode; ``"NUMBA"``,
    ``"FAST_COMPILE"``, a ``pytensor.compile.mode.Mode`` name); one-shot calls compile with the
    Python linker and no rewrites, which costs a few milliseconds.

    Example:

        >>> import pytensor.tensor as pt
        >>> g = di.gradient(di.AutoPyTensor(), lambda x: pt.sum(x ** 2), np.array([1.0, 2.0]))
        >>> print(g, g.dtype)  # numpy in, numpy out; float64 kept
        [2. 4.] float64
    """

    compile_mode: str | None = None
    closure: str = "duplicated"
    reuse_prep: bool = True
    name: ClassVar[str] = "pytensor"
    engine: ClassVar[str | None] = "pytensor"
    adapter: ClassVar[str] = "diffinterface.backends.pytensor:Adapter"
    bench: ClassVar[str | None] = "diffinterface.backends.pytensor_bench:Bench"
    install: ClassVar[str] = 'pip install "diffinterface[pytensor]"'

    def _check_options(self) -> None:
        if self.compile_mode is not None and not isinstance(self.compile_mode, str):
            raise TypeError(
                f"AutoPyTensor(compile_mode={self.compile_mode!r}): expected the name of a PyTensor mode "
                f'("FAST_RUN", "NUMBA", "FAST_COMPILE") or None'
            )


@dataclasses.dataclass(frozen=True, repr=False)
class AutoTensorFlow(_EngineConfig):
    """TensorFlow: ``tf.GradientTape`` (reverse) and ``tf.autodiff.ForwardAccumulator`` (forward).

    Prepared calls run one ``tf.function`` per operator (``function=True``: traced once, its captured
    arrays and contexts arguments read at every call), XLA-compiled with ``jit_compile=True``.

    Example:

        >>> import tensorflow as tf
        >>> g = di.gradient(di.AutoTensorFlow(), lambda x: tf.reduce_sum(x ** 2), np.array([1.0, 2.0]))
        >>> print(g, g.dtype)  # numpy in, numpy out; float64 kept
        [2. 4.] float64
    """

    function: bool = True
    jit_compile: bool = False
    closure: str = "duplicated"
    reuse_prep: bool = True
    name: ClassVar[str] = "tensorflow"
    engine: ClassVar[str | None] = "tensorflow"
    adapter: ClassVar[str] = "diffinterface.backends.tensorflow:Adapter"
    bench: ClassVar[str | None] = "diffinterface.backends.tensorflow_bench:Bench"
    install: ClassVar[str] = 'pip install "diffinterface[tensorflow]"'

    def _check_options(self) -> None:
        _choice(self, "function", self.function, (True, False))
        _choice(self, "jit_compile", self.jit_compile, (True, False))
        if self.jit_compile and not self.function:
            raise ValueError("AutoTensorFlow(jit_compile=True, function=False): jit_compile needs function=True")


@dataclasses.dataclass(frozen=True, repr=False)
class SecondOrder(_Repr):
    """``inner`` differentiated by ``outer``: for second-order operators only (hvp, hessian, second_derivative).

    Example:

        >>> backend = di.SecondOrder(di.AutoFiniteDiff(), di.AutoFiniteDiff())  # differences of differences
        >>> print(di.hessian(backend, lambda x: (x ** 3).sum(), np.array([1.0, 2.0])).round(3) + 0.0)
        [[ 6.  0.]
         [ 0. 12.]]
    """

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


def hash_once(cls: type[Any]) -> type[Any]:
    """``cls`` (a frozen dataclass config) with its hash computed once per instance and kept: a call
    without ``prep=`` looks its preparation up by a key that holds the config (``prep_cache``), and
    the dataclass's hash of the fields (1.3 us for AutoJAX(), a fifth of a prepared JAX gradient at
    n = 10) would be paid at every call. Equal configs still hash equal (the kept value is the
    dataclass's own hash); pickling leaves it out (``_Repr.__getstate__``)."""
    by_fields = cast("Callable[[Any], int]", cls.__hash__)  # the unbound dataclass hash of the fields

    def __hash__(self: Any) -> int:
        kept: int | None = self.__dict__.get(_HASH)
        if kept is None:
            computed = by_fields(self)
            object.__setattr__(self, _HASH, computed)  # frozen: set past the dataclass's guard
            return computed
        return kept

    cls.__hash__ = __hash__  # type: ignore[method-assign,assignment]
    return cls


# What the operators take as their first argument (for type annotations): one engine's config, or
# a SecondOrder of two (second-order operators only).
Backend = AbstractBackend | SecondOrder


for _config in (AutoFiniteDiff, AutoJAX, AutoTorch, AutoAutograd, AutoMLX, AutoPyTensor, AutoTensorFlow, SecondOrder):
    hash_once(_config)


def check_available(backend: AbstractBackend | SecondOrder) -> bool:
    """Whether the engine(s) behind ``backend`` are installed; imports nothing.

    Example:

        >>> di.check_available(di.AutoFiniteDiff())  # imports nothing to find out
        True
    """
    if isinstance(backend, SecondOrder):
        return check_available(backend.outer) and check_available(backend.inner)
    if not isinstance(backend, AbstractBackend):
        raise TypeError(f"check_available({backend!r}): expected a backend config such as AutoJAX()")
    return backend.engine is None or importlib.util.find_spec(backend.engine) is not None


def _adapter_path(backend: AbstractBackend) -> tuple[str, str]:
    module, _, name = backend.adapter.partition(":")
    return module, name or "Adapter"


def has_adapter(backend: AbstractBackend) -> bool:
    """Whether the module of ``backend``'s adapter can be found (imports nothing but its parents)."""
    module, _ = _adapter_path(backend)
    if not module:
        return False
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


# -- the registry: every config class, built in or added -------------------------------------------

ENTRY_POINTS = "diffinterface.backends"  # the entry-point group through which packages add backends
_registered: dict[str, type[AbstractBackend]] = {}
_entry_points_loaded = False
_registry_lock = threading.Lock()


def register_backend(config: type) -> type[Any]:
    """Add a backend config class to the registry (usable as a class decorator). Its ``name`` is what
    ``python -m diffinterface check --backend NAME`` and :func:`registered_backends` use; a package
    can do the same without code, through an entry point in the group ``diffinterface.backends``::

        [project.entry-points."diffinterface.backends"]
        mybackend = "mypackage.backend:AutoMine"
    """
    if not (isinstance(config, type) and issubclass(config, AbstractBackend)):
        raise TypeError(f"register_backend({config!r}): expected a subclass of diffinterface.extend.BackendConfig")
    if not config.name or not config.adapter:
        raise ValueError(
            f"register_backend({config.__name__}): the class must set name (a short name such as 'mine') and "
            f"adapter ('package.module:AdapterClass'); got name={config.name!r}, adapter={config.adapter!r}"
        )
    with _registry_lock:
        current = _registered.get(config.name)
        if current is not None and current is not config:
            raise ValueError(
                f"register_backend({config.__name__}): the name {config.name!r} is taken by "
                f"{current.__module__}.{current.__qualname__}; choose another name"
            )
        _registered[config.name] = config
    return config


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    from importlib import metadata

    for entry in metadata.entry_points(group=ENTRY_POINTS):
        try:
            config = entry.load()
        except Exception as error:  # noqa: BLE001 - one broken package must not hide the others
            warnings.warn(
                f"diffinterface: the backend entry point {entry.name} = {entry.value!r} failed to load: "
                f"{type(error).__name__}: {error}",
                stacklevel=3,
            )
            continue
        register_backend(config)
    _entry_points_loaded = True


def registered_backends() -> dict[str, type[AbstractBackend]]:
    """Every registered config class by name: the built-in ones, those registered with
    :func:`register_backend`, and those of installed packages' ``diffinterface.backends`` entry points."""
    _load_entry_points()
    return dict(_registered)


for _config in (AutoFiniteDiff, AutoJAX, AutoTorch, AutoAutograd, AutoMLX, AutoPyTensor, AutoTensorFlow):
    register_backend(_config)


_adapters: dict[Any, Any] = {}
_adapters_lock = threading.Lock()
# id(config) -> (config, its adapter): the configs met lately, found by identity before ``_adapters``
# is asked, whose lookup calls the config's hash (a Python function: hash_once) and, for a config
# equal to the one it keeps but another object (``AutoTorch()`` written at each call site), its
# dataclass ``__eq__``. Holds the configs (small frozen records); emptied when full.
_adapters_by_id: dict[int, tuple[Any, Any]] = {}
_ADAPTERS_BY_ID_MAX = 256


def adapter_for(backend: AbstractBackend, call: str) -> Any:
    """The adapter of ``backend``, importing its module the first time it is used."""
    kept = _adapters_by_id.get(id(backend))
    if kept is not None and kept[0] is backend:
        return kept[1]
    try:
        adapter = _adapters[backend]
    except KeyError:
        pass
    else:
        if len(_adapters_by_id) >= _ADAPTERS_BY_ID_MAX:
            _adapters_by_id.clear()
        _adapters_by_id[id(backend)] = (backend, adapter)
        return adapter
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
            f"install it with: {backend.install or 'pip install ' + str(backend.engine)}"
        )
    module_name, class_name = _adapter_path(backend)
    if not has_adapter(backend):
        raise BackendNotAvailableError(
            f"{call}: the adapter of {type(backend).__name__} ({backend.adapter!r}) cannot be found in this "
            f"installation; use AutoFiniteDiff() meanwhile"
        )
    adapter_class = getattr(importlib.import_module(module_name), class_name, None)
    if adapter_class is None:
        raise BackendNotAvailableError(
            f"{call}: {module_name} has no class {class_name} ({type(backend).__name__}.adapter = {backend.adapter!r})"
        )
    adapter = adapter_class(backend)  # outside the lock: a wrapping adapter (AutoSparse) asks for its dense one
    with _adapters_lock:
        return _adapters.setdefault(backend, adapter)
