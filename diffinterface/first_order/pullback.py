"""pullback (VJP): ``ty @ J(x)`` for a cotangent ``ty`` shaped like ``f(x)``, or a tuple of them (a batch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._backends import Backend
from .._frontend import prepare, run, run_prepared_tangent
from .._prep import Prep


def prepare_pullback(
    backend: Backend, f: Callable[..., Any], x: Any, ty: Any, *contexts: Any, y: Any = None, strict: bool = True
) -> Prep:
    """Prepare :func:`pullback` and :func:`value_and_pullback` for arguments shaped like these."""
    return prepare("pullback", backend, f, x, ty, contexts, y, strict)


def value_and_pullback(
    backend: Backend, f: Callable[..., Any], x: Any, ty: Any, *contexts: Any, y: Any = None, prep: Prep | None = None
) -> tuple[Any, ...]:
    """``(f(x), ty @ J(x))``; a tuple ``ty`` gives a tuple of results, computed as one batch where the engine can."""
    return run("pullback", backend, f, x, ty, contexts, y, prep, value=True)


def pullback(
    backend: Backend, f: Callable[..., Any], x: Any, ty: Any, *contexts: Any, y: Any = None, prep: Prep | None = None
) -> Any:
    """``ty @ J(x)`` (VJP), shaped like ``x``; a tuple ``ty`` gives a tuple."""
    if type(prep) is Prep and y is None and type(ty) is type(x) is not float:
        return run_prepared_tangent("pullback", prep, backend, f, x, ty, contexts)
    return run("pullback", backend, f, x, ty, contexts, y, prep)
