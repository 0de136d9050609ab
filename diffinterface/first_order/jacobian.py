"""jacobian: ``df/dx`` of shape ``f(x).shape + x.shape``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._core.configs import Backend
from .._core.operators import JACOBIAN
from .._frontend.pipeline import prepare, run, run_prepared
from .._frontend.prep import Prep

if TYPE_CHECKING:
    from .._core.contexts import Contexts
    from .._core.types import Array


def prepare_jacobian(
    backend: Backend,
    f: Callable[..., Any],
    x: Any,
    *contexts: Contexts,
    y: Array | None = None,
    strict: bool = True,
    has_aux: bool = False,
    holomorphic: bool = False,
) -> Prep:
    """Prepare :func:`jacobian` and :func:`value_and_jacobian` for arguments shaped like these.

    Example:

        >>> f = lambda x: x[1:] * x[:-1]
        >>> prep = di.prepare_jacobian(di.AutoFiniteDiff(), f, np.zeros(3))
        >>> print(di.jacobian(di.AutoFiniteDiff(), f, np.array([1.0, 2.0, 3.0]), prep=prep).round(6))
        [[2. 1. 0.]
         [0. 3. 2.]]
    """
    return prepare(
        JACOBIAN, backend, f, x, contexts=contexts, y=y, strict=strict, holomorphic=holomorphic, has_aux=has_aux
    )


def value_and_jacobian(
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
    """``(f(x), J)``; ``out=`` receives the Jacobian.

    Example:

        >>> y, J = di.value_and_jacobian(di.AutoFiniteDiff(), lambda x: x[1:] * x[:-1], np.array([1.0, 2.0, 3.0]))
        >>> print(y, J.shape)
        [2. 6.] (2, 3)
    """
    return run(
        JACOBIAN,
        backend,
        f,
        x,
        contexts=contexts,
        y=y,
        prep=prep,
        out=out,
        value=True,
        holomorphic=holomorphic,
        has_aux=has_aux,
    )


def jacobian(
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
    """The Jacobian of ``f`` at ``x``, of shape ``f(x).shape + x.shape``.

    With ``mode=None`` the adapter builds it in the cheaper direction: forward when
    ``x.size <= f(x).size``, reverse otherwise. For a complex ``x``, ``holomorphic=True`` says that
    ``f`` is complex-differentiable: the result is ``dy/dz`` (as ``jax.jacfwd(f, holomorphic=True)``).

    Example:

        >>> J = di.jacobian(di.AutoFiniteDiff(), lambda x: x[1:] * x[:-1], np.array([1.0, 2.0, 3.0]))
        >>> print(J.round(6))  # shape f(x).shape + x.shape
        [[2. 1. 0.]
         [0. 3. 2.]]
    """
    if not has_aux and type(prep) is Prep and y is None and not holomorphic:
        return run_prepared(JACOBIAN, prep, backend, f, x, contexts, out)
    return run(
        JACOBIAN, backend, f, x, contexts=contexts, y=y, prep=prep, out=out, holomorphic=holomorphic, has_aux=has_aux
    )
