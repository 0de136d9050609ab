"""hvp: the Hessian-vector product ``H(x) @ tx`` of a scalar-valued ``f``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._core.configs import Backend
from .._core.operators import HVP
from .._frontend.pipeline import prepare, run, run_prepared_tangent
from .._frontend.prep import Prep

if TYPE_CHECKING:
    from .._core.contexts import Contexts
    from .._core.types import Array


def prepare_hvp(
    backend: Backend,
    f: Callable[..., Any],
    x: Any,
    tx: Any,
    *contexts: Contexts,
    strict: bool = True,
    has_aux: bool = False,
) -> Prep:
    """Prepare :func:`hvp` and :func:`gradient_and_hvp` for arguments shaped like these.

    Example:

        >>> f = lambda x: (x ** 3).sum()
        >>> prep = di.prepare_hvp(di.AutoFiniteDiff(), f, np.zeros(2), np.zeros(2))
        >>> print(di.hvp(di.AutoFiniteDiff(), f, np.array([1.0, 2.0]), np.ones(2), prep=prep).round(4))
        [ 6. 12.]
    """
    return prepare(HVP, backend, f, x, tangent=tx, contexts=contexts, strict=strict, has_aux=has_aux)


def gradient_and_hvp(
    backend: Backend,
    f: Callable[..., Any],
    x: Any,
    tx: Any,
    *contexts: Contexts,
    prep: Prep | None = None,
    has_aux: bool = False,
    out: Array | tuple[Array, ...] | None = None,
) -> tuple[Any, ...]:
    """``(grad, H @ tx)``; a tuple ``tx`` gives a tuple of products.

    Example:

        >>> x, t = np.array([1.0, 2.0]), np.array([1.0, 1.0])
        >>> grad, hvp = di.gradient_and_hvp(di.AutoFiniteDiff(), lambda x: (x ** 3).sum(), x, t)
        >>> print(grad.round(6), hvp.round(4))
        [ 3. 12.] [ 6. 12.]
    """
    return run(HVP, backend, f, x, tangent=tx, contexts=contexts, prep=prep, value=True, out=out, has_aux=has_aux)


def hvp(
    backend: Backend,
    f: Callable[..., Any],
    x: Any,
    tx: Any,
    *contexts: Contexts,
    prep: Prep | None = None,
    has_aux: bool = False,
    out: Array | tuple[Array, ...] | None = None,
) -> Any:
    """``H(x) @ tx``, shaped like ``x``; a tuple ``tx`` gives a tuple.

    Example:

        >>> x, t = np.array([1.0, 2.0]), np.array([1.0, 1.0])
        >>> print(di.hvp(di.AutoFiniteDiff(), lambda x: (x ** 3).sum(), x, t).round(4))  # H @ t
        [ 6. 12.]
    """
    if not has_aux and out is None and type(prep) is Prep and type(tx) is type(x) is not float:
        return run_prepared_tangent(HVP, prep, backend, f, x, tx, contexts)
    return run(HVP, backend, f, x, tangent=tx, contexts=contexts, prep=prep, out=out, has_aux=has_aux)
