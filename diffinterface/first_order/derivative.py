"""derivative: ``df/dx`` for a scalar ``x``, shaped like ``f(x)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._backends import Backend
from .._frontend import prepare, run, run_prepared
from .._prep import Prep


def prepare_derivative(
    backend: Backend, f: Callable[..., Any], x: Any, *contexts: Any, y: Any = None, strict: bool = True
) -> Prep:
    """Prepare :func:`derivative` and :func:`value_and_derivative` for arguments shaped like these."""
    return prepare("derivative", backend, f, x, None, contexts, y, strict)


def value_and_derivative(
    backend: Backend, f: Callable[..., Any], x: Any, *contexts: Any, y: Any = None, prep: Prep | None = None
) -> tuple[Any, ...]:
    """``(f(x), df/dx)`` for a scalar ``x`` (a float or a 0-d array)."""
    return run("derivative", backend, f, x, None, contexts, y, prep, value=True)


def derivative(
    backend: Backend, f: Callable[..., Any], x: Any, *contexts: Any, y: Any = None, prep: Prep | None = None
) -> Any:
    """``df/dx`` for a scalar ``x``, shaped like ``f(x)``."""
    if type(prep) is Prep and y is None:
        return run_prepared("derivative", prep, backend, f, x, contexts)
    return run("derivative", backend, f, x, None, contexts, y, prep)
