"""pushforward (JVP): ``J(x) @ tx`` for a tangent ``tx`` shaped like ``x``, or a tuple of them (a batch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._core.configs import Backend
from .._core.operators import PUSHFORWARD
from .._frontend.pipeline import prepare, run, run_prepared_tangent
from .._frontend.prep import Prep

if TYPE_CHECKING:
    from .._core.contexts import Contexts
    from .._core.types import Array


def prepare_pushforward(
    backend: Backend,
    f: Callable[..., Any],
    x: Any,
    tx: Any,
    *contexts: Contexts,
    y: Array | None = None,
    strict: bool = True,
    has_aux: bool = False,
) -> Prep:
    """Prepare :func:`pushforward` and :func:`value_and_pushforward` for arguments shaped like these.

    Example:

        >>> f = lambda x: x ** 2
        >>> prep = di.prepare_pushforward(di.AutoFiniteDiff(), f, np.zeros(3), (np.zeros(3), np.zeros(3)))
        >>> jvps = di.pushforward(di.AutoFiniteDiff(), f, np.ones(3), (np.eye(3)[0], np.eye(3)[1]), prep=prep)
        >>> print(len(jvps))  # a tuple of tangents: a tuple of results
        2
    """
    return prepare(PUSHFORWARD, backend, f, x, tangent=tx, contexts=contexts, y=y, strict=strict, has_aux=has_aux)


def value_and_pushforward(
    backend: Backend,
    f: Callable[..., Any],
    x: Any,
    tx: Any,
    *contexts: Contexts,
    y: Array | None = None,
    prep: Prep | None = None,
    has_aux: bool = False,
    out: Array | tuple[Array, ...] | None = None,
) -> tuple[Any, ...]:
    """``(f(x), J(x) @ tx)``; a tuple ``tx`` gives a tuple of results, computed as one batch where the engine can.

    ``f(x, *contexts)`` returns its output, or with ``y=`` is ``f(y, x, *contexts)`` writing it into ``y``.

    Example:

        >>> x, t = np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0, 0.0])
        >>> y, jvp = di.value_and_pushforward(di.AutoFiniteDiff(), lambda x: x ** 2, x, t)
        >>> print(y, jvp.round(6) + 0.0)
        [1. 4. 9.] [2. 4. 0.]
    """
    return run(
        PUSHFORWARD, backend, f, x, tangent=tx, contexts=contexts, y=y, prep=prep, value=True, out=out, has_aux=has_aux
    )


def pushforward(
    backend: Backend,
    f: Callable[..., Any],
    x: Any,
    tx: Any,
    *contexts: Contexts,
    y: Array | None = None,
    prep: Prep | None = None,
    has_aux: bool = False,
    out: Array | tuple[Array, ...] | None = None,
) -> Any:
    """``J(x) @ tx`` (JVP), shaped like ``f(x)``; a tuple ``tx`` gives a tuple.

    Example:

        >>> x, t = np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0, 0.0])
        >>> print(di.pushforward(di.AutoFiniteDiff(), lambda x: x ** 2, x, t).round(6) + 0.0)  # J @ t
        [2. 4. 0.]
    """
    if not has_aux and out is None and type(prep) is Prep and y is None and type(tx) is type(x) is not float:
        return run_prepared_tangent(PUSHFORWARD, prep, backend, f, x, tx, contexts)
    return run(PUSHFORWARD, backend, f, x, tangent=tx, contexts=contexts, y=y, prep=prep, out=out, has_aux=has_aux)
