"""derivative: ``df/dx`` for a scalar ``x``, shaped like ``f(x)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._core.configs import Backend
from .._core.operators import DERIVATIVE
from .._frontend.pipeline import prepare, run, run_prepared
from .._frontend.prep import Prep

if TYPE_CHECKING:
    from .._core.contexts import Contexts
    from .._core.types import Array


def prepare_derivative(
    backend: Backend,
    f: Callable[..., Any],
    x: Any,
    *contexts: Contexts,
    y: Array | None = None,
    strict: bool = True,
    has_aux: bool = False,
    holomorphic: bool = False,
) -> Prep:
    """Prepare :func:`derivative` and :func:`value_and_derivative` for arguments shaped like these.

    Example:

        >>> f = lambda x: x ** 3
        >>> prep = di.prepare_derivative(di.AutoFiniteDiff(), f, 0.0)
        >>> print(di.derivative(di.AutoFiniteDiff(), f, 2.0, prep=prep).round(6))
        12.0
    """
    return prepare(
        DERIVATIVE, backend, f, x, contexts=contexts, y=y, strict=strict, holomorphic=holomorphic, has_aux=has_aux
    )


def value_and_derivative(
    backend: Backend,
    f: Callable[..., Any],
    x: Any,
    *contexts: Contexts,
    y: Array | None = None,
    prep: Prep | None = None,
    has_aux: bool = False,
    out: Array | tuple[Array, ...] | None = None,
    holomorphic: bool = False,
) -> tuple[Any, ...]:
    """``(f(x), df/dx)`` for a scalar ``x`` (a float or a 0-d array).

    Example:

        >>> y, der = di.value_and_derivative(di.AutoFiniteDiff(), lambda x: x ** 3, 2.0)
        >>> print(y, der.round(6))
        8.0 12.0
    """
    return run(
        DERIVATIVE,
        backend,
        f,
        x,
        contexts=contexts,
        y=y,
        prep=prep,
        value=True,
        holomorphic=holomorphic,
        out=out,
        has_aux=has_aux,
    )


def derivative(
    backend: Backend,
    f: Callable[..., Any],
    x: Any,
    *contexts: Contexts,
    y: Array | None = None,
    prep: Prep | None = None,
    has_aux: bool = False,
    out: Array | tuple[Array, ...] | None = None,
    holomorphic: bool = False,
) -> Any:
    """``df/dx`` for a scalar ``x``, shaped like ``f(x)``.

    For a complex ``x``, ``holomorphic=True`` says that ``f`` is complex-differentiable and gives
    ``df/dz``.

    Example:

        >>> print(di.derivative(di.AutoFiniteDiff(), lambda x: x ** 3, 2.0).round(6))
        12.0
    """
    if not has_aux and type(prep) is Prep and y is None and not holomorphic:
        return run_prepared(DERIVATIVE, prep, backend, f, x, contexts, out)
    return run(
        DERIVATIVE, backend, f, x, contexts=contexts, y=y, prep=prep, holomorphic=holomorphic, out=out, has_aux=has_aux
    )
