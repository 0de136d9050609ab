"""pullback (VJP): ``ty @ J(x)`` for a cotangent ``ty`` shaped like ``f(x)``, or a tuple of them (a batch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._core.configs import Backend
from .._core.operators import PULLBACK
from .._frontend.pipeline import prepare, run, run_prepared_tangent
from .._frontend.prep import Prep

if TYPE_CHECKING:
    from .._core.contexts import Contexts
    from .._core.types import Array


def prepare_pullback(
    backend: Backend,
    f: Callable[..., Any],
    x: Any,
    ty: Any,
    *contexts: Contexts,
    y: Array | None = None,
    strict: bool = True,
    has_aux: bool = False,
) -> Prep:
    """Prepare :func:`pullback` and :func:`value_and_pullback` for arguments shaped like these.

    Example:

        >>> f = lambda x: x ** 2
        >>> prep = di.prepare_pullback(di.AutoFiniteDiff(), f, np.zeros(3), np.zeros(3))
        >>> print(di.pullback(di.AutoFiniteDiff(), f, np.array([1.0, 2.0, 3.0]), np.ones(3), prep=prep).round(6))
        [2. 4. 6.]
    """
    return prepare(PULLBACK, backend, f, x, tangent=ty, contexts=contexts, y=y, strict=strict, has_aux=has_aux)


def value_and_pullback(
    backend: Backend,
    f: Callable[..., Any],
    x: Any,
    ty: Any,
    *contexts: Contexts,
    y: Array | None = None,
    prep: Prep | None = None,
    has_aux: bool = False,
    out: Array | tuple[Array, ...] | None = None,
) -> tuple[Any, ...]:
    """``(f(x), ty @ J(x))``; a tuple ``ty`` gives a tuple of results, computed as one batch where the engine can.

    Example:

        >>> x, ty = np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0, 1.0])
        >>> y, vjp = di.value_and_pullback(di.AutoFiniteDiff(), lambda x: x ** 2, x, ty)
        >>> print(y, vjp.round(6))
        [1. 4. 9.] [2. 4. 6.]
    """
    return run(
        PULLBACK, backend, f, x, tangent=ty, contexts=contexts, y=y, prep=prep, value=True, out=out, has_aux=has_aux
    )


def pullback(
    backend: Backend,
    f: Callable[..., Any],
    x: Any,
    ty: Any,
    *contexts: Contexts,
    y: Array | None = None,
    prep: Prep | None = None,
    has_aux: bool = False,
    out: Array | tuple[Array, ...] | None = None,
) -> Any:
    """``ty @ J(x)`` (VJP), shaped like ``x``; a tuple ``ty`` gives a tuple.

    Example:

        >>> x, ty = np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0, 1.0])
        >>> print(di.pullback(di.AutoFiniteDiff(), lambda x: x ** 2, x, ty).round(6))  # ty @ J
        [2. 4. 6.]
    """
    if not has_aux and out is None and type(prep) is Prep and y is None and type(ty) is type(x) is not float:
        return run_prepared_tangent(PULLBACK, prep, backend, f, x, ty, contexts)
    return run(PULLBACK, backend, f, x, tangent=ty, contexts=contexts, y=y, prep=prep, out=out, has_aux=has_aux)
