"""hvp: the Hessian-vector product ``H(x) @ tx`` of a scalar-valued ``f``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._backends import Backend
from .._frontend import prepare, run, run_prepared_tangent
from .._prep import Prep


def prepare_hvp(backend: Backend, f: Callable[..., Any], x: Any, tx: Any, *contexts: Any, strict: bool = True) -> Prep:
    """Prepare :func:`hvp` and :func:`gradient_and_hvp` for arguments shaped like these."""
    return prepare("hvp", backend, f, x, tx, contexts, None, strict)


def gradient_and_hvp(
    backend: Backend, f: Callable[..., Any], x: Any, tx: Any, *contexts: Any, prep: Prep | None = None
) -> tuple[Any, ...]:
    """``(grad, H @ tx)``; a tuple ``tx`` gives a tuple of products."""
    return run("hvp", backend, f, x, tx, contexts, None, prep, value=True)


def hvp(backend: Backend, f: Callable[..., Any], x: Any, tx: Any, *contexts: Any, prep: Prep | None = None) -> Any:
    """``H(x) @ tx``, shaped like ``x``; a tuple ``tx`` gives a tuple."""
    if type(prep) is Prep and type(tx) is type(x) is not float:
        return run_prepared_tangent("hvp", prep, backend, f, x, tx, contexts)
    return run("hvp", backend, f, x, tx, contexts, None, prep)
