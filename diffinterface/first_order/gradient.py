"""gradient: ``df/dx`` for a scalar-valued ``f``, shaped like ``x``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._core.configs import Backend
from .._core.operators import GRADIENT
from .._frontend.pipeline import prepare, run, run_prepared
from .._frontend.prep import Prep

if TYPE_CHECKING:
    from .._core.contexts import Contexts
    from .._core.types import Array


def prepare_gradient(
    backend: Backend, f: Callable[..., Any], x: Any, *contexts: Contexts, strict: bool = True, has_aux: bool = False
) -> Prep:
    """Prepare :func:`gradient` and :func:`value_and_gradient` for arguments shaped like these.

    Example:

        >>> f = lambda x: (x ** 2).sum()
        >>> prep = di.prepare_gradient(di.AutoFiniteDiff(), f, np.zeros(3))
        >>> print(di.gradient(di.AutoFiniteDiff(), f, np.array([1.0, 2.0, 3.0]), prep=prep).round(6))
        [2. 4. 6.]
    """
    return prepare(GRADIENT, backend, f, x, contexts=contexts, strict=strict, has_aux=has_aux)


def value_and_gradient(
    backend: Backend,
    f: Callable[..., Any],
    x: Any,
    *contexts: Contexts,
    prep: Prep | None = None,
    has_aux: bool = False,
    out: Array | tuple[Array, ...] | None = None,
) -> tuple[Any, ...]:
    """``(f(x), grad)``; ``out=`` receives the gradient.

    Example:

        >>> y, grad = di.value_and_gradient(di.AutoFiniteDiff(), lambda x: (x ** 2).sum(), np.array([1.0, 2.0, 3.0]))
        >>> print(y, grad.round(6))
        14.0 [2. 4. 6.]
    """
    return run(GRADIENT, backend, f, x, contexts=contexts, prep=prep, out=out, value=True, has_aux=has_aux)


def gradient(
    backend: Backend,
    f: Callable[..., Any],
    x: Any,
    *contexts: Contexts,
    prep: Prep | None = None,
    has_aux: bool = False,
    out: Array | tuple[Array, ...] | None = None,
) -> Any:
    """The gradient of a scalar-valued ``f`` at ``x``, shaped like ``x``; written into ``out=`` when given.

    Example:

        >>> print(di.gradient(di.AutoFiniteDiff(), lambda x: (x ** 2).sum(), np.array([1.0, 2.0, 3.0])).round(6))
        [2. 4. 6.]
    """
    if not has_aux and type(prep) is Prep:
        return run_prepared(GRADIENT, prep, backend, f, x, contexts, out)
    return run(GRADIENT, backend, f, x, contexts=contexts, prep=prep, out=out, has_aux=has_aux)
