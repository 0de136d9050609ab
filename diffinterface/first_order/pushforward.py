"""pushforward (JVP): ``J(x) @ tx`` for a tangent ``tx`` shaped like ``x``, or a tuple of them (a batch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._backends import Backend
from .._frontend import prepare, run, run_prepared_tangent
from .._prep import Prep


def prepare_pushforward(
    backend: Backend, f: Callable[..., Any], x: Any, tx: Any, *contexts: Any, y: Any = None, strict: bool = True
) -> Prep:
    """Prepare :func:`pushforward` and :func:`value_and_pushforward` for arguments shaped like these."""
    return prepare("pushforward", backend, f, x, tx, contexts, y, strict)


def value_and_pushforward(
    backend: Backend, f: Callable[..., Any], x: Any, tx: Any, *contexts: Any, y: Any = None, prep: Prep | None = None
) -> tuple[Any, ...]:
    """``(f(x), J(x) @ tx)``; a tuple ``tx`` gives a tuple of results, computed as one batch where the engine can.

    ``f(x, *contexts)`` returns its output, or with ``y=`` is ``f(y, x, *contexts)`` writing it into ``y``.
    """
    return run("pushforward", backend, f, x, tx, contexts, y, prep, value=True)


def pushforward(
    backend: Backend, f: Callable[..., Any], x: Any, tx: Any, *contexts: Any, y: Any = None, prep: Prep | None = None
) -> Any:
    """``J(x) @ tx`` (JVP), shaped like ``f(x)``; a tuple ``tx`` gives a tuple."""
    if type(prep) is Prep and y is None and type(tx) is type(x) is not float:
        return run_prepared_tangent("pushforward", prep, backend, f, x, tx, contexts)
    return run("pushforward", backend, f, x, tx, contexts, y, prep)
