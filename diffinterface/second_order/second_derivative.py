"""second_derivative: ``d2f/dx2`` for a scalar ``x``, shaped like ``f(x)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._arrays import as_input, output_like
from .._frontend import prepare, resolve, run_prepared
from .._prep import Prep


def prepare_second_derivative(backend: Any, f: Callable, x: Any, *contexts: Any, strict: bool = True) -> Prep:
    """Prepare :func:`second_derivative` and :func:`value_derivative_and_second_derivative`."""
    return prepare("second_derivative", backend, f, x, None, contexts, None, strict)


def value_derivative_and_second_derivative(backend: Any, f: Callable, x: Any, *contexts: Any, prep: Prep | None = None) -> tuple:
    """``(f(x), df/dx, d2f/dx2)`` for a scalar ``x``."""
    p = resolve("second_derivative", backend, f, x, None, contexts, None, prep)
    value, der, der2 = p.adapter.value_derivative_and_second_derivative(p.data, p.target, as_input(x), contexts)
    return output_like(value, x), output_like(der, x), output_like(der2, x)


def second_derivative(backend: Any, f: Callable, x: Any, *contexts: Any, prep: Prep | None = None) -> Any:
    """``d2f/dx2`` for a scalar ``x``, shaped like ``f(x)``."""
    if type(prep) is Prep:
        return run_prepared("second_derivative", prep, backend, f, x, contexts)
    p = resolve("second_derivative", backend, f, x, None, contexts, None, prep)
    return output_like(p.adapter.second_derivative(p.data, p.target, as_input(x), contexts), x)
