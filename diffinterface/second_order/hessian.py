"""hessian: the matrix of second derivatives of a scalar-valued ``f``, of shape ``x.shape + x.shape``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._core.configs import Backend
from .._core.operators import HESSIAN
from .._frontend.pipeline import prepare, run, run_prepared
from .._frontend.prep import Prep

if TYPE_CHECKING:
    from .._core.contexts import Contexts
    from .._core.types import Array


def prepare_hessian(
    backend: Backend, f: Callable[..., Any], x: Any, *contexts: Contexts, strict: bool = True, has_aux: bool = False
) -> Prep:
    """Prepare :func:`hessian` and :func:`value_gradient_and_hessian` for arguments shaped like these.

    Example:

        >>> f = lambda x: (x ** 3).sum()
        >>> prep = di.prepare_hessian(di.AutoFiniteDiff(), f, np.zeros(2))
        >>> print(di.hessian(di.AutoFiniteDiff(), f, np.array([1.0, 2.0]), prep=prep).round(4) + 0.0)
        [[ 6.  0.]
         [ 0. 12.]]
    """
    return prepare(HESSIAN, backend, f, x, contexts=contexts, strict=strict, has_aux=has_aux)


def value_gradient_and_hessian(
    backend: Backend,
    f: Callable[..., Any],
    x: Any,
    *contexts: Contexts,
    prep: Prep | None = None,
    has_aux: bool = False,
    out: Array | tuple[Array, ...] | None = None,
) -> tuple[Any, ...]:
    """``(f(x), grad, H)``; ``out=`` receives the Hessian.

    Example:

        >>> y, grad, H = di.value_gradient_and_hessian(di.AutoFiniteDiff(), lambda x: (x ** 3).sum(), np.array([1.0, 2.0]))
        >>> print(y, grad.round(6), H.shape)
        9.0 [ 3. 12.] (2, 2)
    """
    return run(HESSIAN, backend, f, x, contexts=contexts, prep=prep, out=out, value=True, has_aux=has_aux)


def hessian(
    backend: Backend,
    f: Callable[..., Any],
    x: Any,
    *contexts: Contexts,
    prep: Prep | None = None,
    has_aux: bool = False,
    out: Array | tuple[Array, ...] | None = None,
) -> Any:
    """The Hessian of a scalar-valued ``f`` at ``x``, of shape ``x.shape + x.shape``.

    Example:

        >>> print(di.hessian(di.AutoFiniteDiff(), lambda x: (x ** 3).sum(), np.array([1.0, 2.0])).round(4) + 0.0)
        [[ 6.  0.]
         [ 0. 12.]]
    """
    if not has_aux and type(prep) is Prep:
        return run_prepared(HESSIAN, prep, backend, f, x, contexts, out)
    return run(HESSIAN, backend, f, x, contexts=contexts, prep=prep, out=out, has_aux=has_aux)
