"""derivative: ``df/dx`` for a scalar ``x``, shaped like ``f(x)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._arrays import as_input, output_like
from .._frontend import prepare, resolve, run_prepared
from .._prep import Prep


def prepare_derivative(backend: Any, f: Callable, x: Any, *contexts: Any, y: Any = None, strict: bool = True) -> Prep:
    """Prepare :func:`derivative` and :func:`value_and_derivative` for arguments shaped like these."""
    return prepare("derivative", backend, f, x, None, contexts, y, strict)


def value_and_derivative(backend: Any, f: Callable, x: Any, *contexts: Any, y: Any = None, prep: Prep | None = None) -> tuple:
    """``(f(x), df/dx)`` for a scalar ``x`` (a float or a 0-d array)."""
    p = resolve("derivative", backend, f, x, None, contexts, y, prep)
    value, der = p.adapter.value_and_derivative(p.data, p.target, as_input(x), contexts)
    return output_like(value, x), output_like(der, x)


def derivative(backend: Any, f: Callable, x: Any, *contexts: Any, y: Any = None, prep: Prep | None = None) -> Any:
    """``df/dx`` for a scalar ``x``, shaped like ``f(x)``."""
    if type(prep) is Prep and y is None:
        return run_prepared("derivative", prep, backend, f, x, contexts)
    p = resolve("derivative", backend, f, x, None, contexts, y, prep)
    return output_like(p.adapter.derivative(p.data, p.target, as_input(x), contexts), x)
