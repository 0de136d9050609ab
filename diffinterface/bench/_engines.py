"""The engines a table can time: their configs, inputs and native calls (``Engine``, the bench record)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from typing import Any

from array_api_compat import array_namespace

from .._adapters.bench_engine import BenchEngine as Engine
from .._core.configs import AbstractBackend

# -- the engines: inputs and native calls ------------------------------------------------------
# Each backend config names its record (``bench = "package.module:Class"``, a subclass of Engine):
# nothing here knows an engine by name.


def _benchable() -> dict[str, type[AbstractBackend]]:
    from .._core.configs import registered_backends

    return {name: cls for name, cls in registered_backends().items() if cls.bench}


def engine_names() -> list[str]:
    """The registered backends that name a bench record."""
    return list(_benchable())


def installed_engines(names: list[str] | None = None) -> list[str]:
    from .._core.configs import check_available

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


def approx_derivative() -> Callable[..., Any]:
    """``scipy.optimize.approx_derivative``: the differencing behind SciPy's ``least_squares`` and
    ``minimize``, exported from ``scipy.optimize._numdiff`` (not from ``scipy.optimize`` in 1.17)."""
    try:
        # a SciPy that exports it (a newer one than the type information installed here may describe)
        from scipy.optimize import approx_derivative  # pyright: ignore[reportAttributeAccessIssue]
    except ImportError:
        from scipy.optimize._numdiff import approx_derivative
    return approx_derivative


def engine(name: str) -> Engine:
    """The bench record of the backend named ``name`` (its module imported here)."""
    path = _benchable()[name].bench or ""
    module, _, cls = path.partition(":")
    return getattr(importlib.import_module(module), cls)()
