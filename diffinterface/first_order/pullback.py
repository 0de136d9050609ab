"""pullback (VJP): ``ty @ J(x)`` for a cotangent ``ty`` shaped like ``f(x)``, or a tuple of them (a batch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._arrays import as_input, output_like
from .._frontend import prepare, resolve, run_prepared_tangent, tangent_result, tangents_of
from .._prep import Prep


def prepare_pullback(backend: Any, f: Callable, x: Any, ty: Any, *contexts: Any, y: Any = None, strict: bool = True) -> Prep:
    """Prepare :func:`pullback` and :func:`value_and_pullback` for arguments shaped like these."""
    return prepare("pullback", backend, f, x, ty, contexts, y, strict)


def value_and_pullback(backend: Any, f: Callable, x: Any, ty: Any, *contexts: Any, y: Any = None, prep: Prep | None = None) -> tuple:
    """``(f(x), ty @ J(x))``; a tuple ``ty`` gives a tuple of results, computed as one batch where the engine can."""
    p = resolve("pullback", backend, f, x, ty, contexts, y, prep)
    value, results = p.adapter.value_and_pullback(p.data, p.target, as_input(x), tangents_of(ty, x), contexts)
    return output_like(value, x), tangent_result(results, ty, x)


def pullback(backend: Any, f: Callable, x: Any, ty: Any, *contexts: Any, y: Any = None, prep: Prep | None = None) -> Any:
    """``ty @ J(x)`` (VJP), shaped like ``x``; a tuple ``ty`` gives a tuple."""
    if type(prep) is Prep and y is None and type(ty) is type(x) is not float:
        return run_prepared_tangent("pullback", prep, backend, f, x, ty, contexts)
    p = resolve("pullback", backend, f, x, ty, contexts, y, prep)
    return tangent_result(p.adapter.pullback(p.data, p.target, as_input(x), tangents_of(ty, x), contexts), ty, x)
