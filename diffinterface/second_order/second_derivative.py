"""second_derivative: ``d2f/dx2`` for a scalar ``x``, shaped like ``f(x)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._core.configs import Backend
from .._core.operators import SECOND_DERIVATIVE
from .._frontend.pipeline import prepare, run, run_prepared
from .._frontend.prep import Prep

if TYPE_CHECKING:
    from .._core.contexts import Contexts
    from .._core.types import Array


def prepare_second_derivative(
    backend: Backend, f: Callable[..., Any], x: Any, *contexts: Contexts, strict: bool = True, has_aux: bool = False
) -> Prep:
    """Prepare :func:`second_derivative` and :func:`value_derivative_and_second_derivative`.

    Example:

        >>> f = lambda x: x ** 3
        >>> prep = di.prepare_second_derivative(di.AutoFiniteDiff(), f, 0.0)
        >>> print(di.second_derivative(di.AutoFiniteDiff(), f, 2.0, prep=prep).round(4))
        12.0
    """
    return prepare(SECOND_DERIVATIVE, backend, f, x, contexts=contexts, strict=strict, has_aux=has_aux)


def value_derivative_and_second_derivative(
    backend: Backend,
    f: Callable[..., Any],
    x: Any,
    *contexts: Contexts,
    prep: Prep | None = None,
    has_aux: bool = False,
    out: Array | tuple[Array, ...] | None = None,
) -> tuple[Any, ...]:
    """``(f(x), df/dx, d2f/dx2)`` for a scalar ``x``.

    Example:

        >>> y, der, der2 = di.value_derivative_and_second_derivative(di.AutoFiniteDiff(), lambda x: x ** 3, 2.0)
        >>> print(y, der.round(6), der2.round(4))
        8.0 12.0 12.0
    """
    return run(SECOND_DERIVATIVE, backend, f, x, contexts=contexts, prep=prep, value=True, out=out, has_aux=has_aux)


def second_derivative(
    backend: Backend,
    f: Callable[..., Any],
    x: Any,
    *contexts: Contexts,
    prep: Prep | None = None,
    has_aux: bool = False,
    out: Array | tuple[Array, ...] | None = None,
) -> Any:
    """``d2f/dx2`` for a scalar ``x``, shaped like ``f(x)``.

    Example:

        >>> print(di.second_derivative(di.AutoFiniteDiff(), lambda x: x ** 3, 2.0).round(4))
        12.0
    """
    if not has_aux and type(prep) is Prep:
        return run_prepared(SECOND_DERIVATIVE, prep, backend, f, x, contexts, out)
    return run(SECOND_DERIVATIVE, backend, f, x, contexts=contexts, prep=prep, out=out, has_aux=has_aux)
