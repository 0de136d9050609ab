"""gradient: ``df/dx`` for a scalar-valued ``f``, shaped like ``x``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._backends import Backend
from .._frontend import prepare, run, run_prepared
from .._prep import Prep


def prepare_gradient(backend: Backend, f: Callable[..., Any], x: Any, *contexts: Any, strict: bool = True) -> Prep:
    """Prepare :func:`gradient` and :func:`value_and_gradient` for arguments shaped like these."""
    return prepare("gradient", backend, f, x, None, contexts, None, strict)


def value_and_gradient(
    backend: Backend, f: Callable[..., Any], x: Any, *contexts: Any, prep: Prep | None = None, out: Any = None
) -> tuple[Any, ...]:
    """``(f(x), grad)``; ``out=`` receives the gradient."""
    return run("gradient", backend, f, x, None, contexts, None, prep, out, value=True)


def gradient(
    backend: Backend, f: Callable[..., Any], x: Any, *contexts: Any, prep: Prep | None = None, out: Any = None
) -> Any:
    """The gradient of a scalar-valued ``f`` at ``x``, shaped like ``x``; written into ``out=`` when given."""
    if type(prep) is Prep:
        return run_prepared("gradient", prep, backend, f, x, contexts, out)
    return run("gradient", backend, f, x, None, contexts, None, prep, out)
