"""The engines a table can time: their configs, inputs and native calls (``Engine``, the bench record)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from typing import Any

import numpy as np
from array_api_compat import array_namespace

from ..backends.configs import AbstractBackend

# -- the engines: inputs and native calls ------------------------------------------------------
# Each backend config names its record (``bench = "package.module:Class"``, a subclass of Engine):
# nothing here knows an engine by name.


def _benchable() -> dict[str, type[AbstractBackend]]:
    from ..backends.configs import registered_backends

    return {name: cls for name, cls in registered_backends().items() if cls.bench}


def engine_names() -> list[str]:
    """The registered backends that name a bench record."""
    return list(_benchable())


def installed_engines(names: list[str] | None = None) -> list[str]:
    from ..backends.configs import check_available

    configs = _benchable()
    return [e for e in (names or list(configs)) if e in configs and check_available(configs[e]())]


def config_class(engine: str) -> type[AbstractBackend]:
    """The config class of the backend named ``engine``."""
    return _benchable()[engine]


def config(engine: str, **options: Any) -> Any:
    """The config of the backend named ``engine``, with ``options``."""
    return _benchable()[engine](**options)


def has_modes(engine: str) -> bool:
    """Whether the backend's config has a ``mode`` field (forward or reverse mode to choose)."""
    cls = _benchable()[engine]
    return is_dataclass(cls) and any(f.name == "mode" for f in fields(cls))


def sum_sin2(x):
    xp = array_namespace(x)
    return xp.sum(xp.sin(x) ** 2)


def sin_times_sum(x):
    xp = array_namespace(x)
    return xp.sin(x) * xp.sum(x)


class Engine:
    """One engine's record for the benchmarks (public as ``diffinterface.extend.BenchEngine``): its
    inputs (its own array type) and its best direct calls, each ``() -> result`` with the result
    ready (JAX: blocked on). A backend config names it with ``bench = "package.module:Class"``.

    - ``inputs``: a label for the tables; ``array(a)``: a numpy array in the engine's type;
      ``ready(value)``: ``value`` once computed;
    - ``native(operator, f, x, t, A)``: the engine's own call for ``operator`` (``gradient``,
      ``hvp``, ``hessian``, ``pushforward``, ``pullback``, ``jacobian tall``/``wide`` with
      ``f(x) = sin(A @ x)``), or None where it has none; ``native_first``: its cold call, what
      preparation is compared with (JAX: a fresh jit, compiled);
    - ``compiled(f)``: ``f`` as the engine's users run it (JAX: ``jax.jit(f)``);
    - ``limits``: the largest size per operator worth timing (finite differences cost an evaluation
      of ``f`` per coordinate), or None for every size;
    - ``costs``: per operator, the work the adapter does beyond the native call and why (shown in the
      overhead table next to the measured split of a row over budget);
    - ``rule_by_hand(primal, vjp)``: an opaque NumPy function of one array (``primal(a)``, an array of
      a's shape; ``vjp(a, dy)``) registered with the engine's own mechanism as its users write it by
      hand, what the rules table compares a ``custom_rule`` with; None where the engine has none.
    - ``numpy_dtype``: for an engine whose own arrays are not numpy's, the dtype of the overhead
      table's rows with numpy inputs (JAX: float32, what it computes in by default; None: no such rows);
      ``native_numpy(operator, f, x, t, A)``: the native call as a NumPy user writes it.
    """

    inputs = "numpy float64"
    numpy_dtype: str | None = None
    limits: dict[str, int] | None = None
    costs: dict[str, str] = {}

    def array(self, a: np.ndarray) -> Any:
        return a

    def ready(self, value: Any) -> Any:
        return value

    def native(self, operator: str, f: Callable[..., Any], x: Any, t: Any, A: Any) -> Callable[[], Any] | None:
        raise NotImplementedError(
            f"{type(self).__name__}: a bench record implements native(operator, f, x, t, A), the engine's own call"
        )

    def native_first(self, operator: str, f: Callable[..., Any], x: Any, t: Any, A: Any) -> Callable[[], Any] | None:
        return self.native(operator, f, x, t, A)

    def native_numpy(self, operator: str, f: Callable[..., Any], x: Any, t: Any, A: Any) -> Callable[[], Any] | None:
        """The native call on numpy ``x``, ``t`` and ``A`` as a NumPy user writes it: each converted with
        :meth:`array` at every call and the result brought back with ``np.asarray``. This default builds
        :meth:`native` at every call, which suits an eager engine; one whose native compiles overrides it."""
        if self.native(operator, f, *self.arrays(x, t, A)) is None:
            return None
        return lambda: np.asarray(self.native(operator, f, *self.arrays(x, t, A))())  # type: ignore[misc]

    def arrays(self, *values: Any) -> tuple[Any, ...]:
        """Each numpy array of ``values`` in the engine's type (:meth:`array`); None stays None."""
        return tuple(None if v is None else self.array(v) for v in values)

    def compiled(self, f: Callable[..., Any]) -> Callable[..., Any]:
        return f

    def rule_by_hand(self, primal: Callable[..., Any], vjp: Callable[..., Any]) -> Callable[..., Any] | None:
        return None

    def allows(self, operator: str, size: int) -> bool:
        """Whether ``operator`` at ``size`` is within :attr:`limits`."""
        return self.limits is None or size <= self.limits.get(operator, -1)


def approx_derivative() -> Callable[..., Any]:
    """``scipy.optimize.approx_derivative``: the differencing behind SciPy's ``least_squares`` and
    ``minimize``, exported from ``scipy.optimize._numdiff`` (not from ``scipy.optimize`` in 1.17)."""
    try:
        from scipy.optimize import approx_derivative
    except ImportError:
        from scipy.optimize._numdiff import approx_derivative
    return approx_derivative


def engine(name: str) -> Engine:
    """The bench record of the backend named ``name`` (its module imported here)."""
    path = _benchable()[name].bench or ""
    module, _, cls = path.partition(":")
    return getattr(importlib.import_module(module), cls)()
