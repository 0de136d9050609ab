"""jacobian: ``df/dx`` of shape ``f(x).shape + x.shape``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._arrays import as_input, output_like
from .._frontend import finish, prepare, resolve, run_prepared
from .._prep import Prep


def prepare_jacobian(backend: Any, f: Callable, x: Any, *contexts: Any, y: Any = None, strict: bool = True) -> Prep:
    """Prepare :func:`jacobian` and :func:`value_and_jacobian` for arguments shaped like these."""
    return prepare("jacobian", backend, f, x, None, contexts, y, strict)


def value_and_jacobian(backend: Any, f: Callable, x: Any, *contexts: Any, y: Any = None, prep: Prep | None = None, out: Any = None) -> tuple:
    """``(f(x), J)``; ``out=`` receives the Jacobian."""
    p = resolve("jacobian", backend, f, x, None, contexts, y, prep)
    value, jac = p.adapter.value_and_jacobian(p.data, p.target, as_input(x), contexts)
    return output_like(value, x), finish(jac, x, out, "value_and_jacobian", backend)


def jacobian(backend: Any, f: Callable, x: Any, *contexts: Any, y: Any = None, prep: Prep | None = None, out: Any = None) -> Any:
    """The Jacobian of ``f`` at ``x``, of shape ``f(x).shape + x.shape``.

    With ``mode=None`` the adapter builds it in the cheaper direction: forward when
    ``x.size <= f(x).size``, reverse otherwise.
    """
    if type(prep) is Prep and y is None:
        return run_prepared("jacobian", prep, backend, f, x, contexts, out)
    p = resolve("jacobian", backend, f, x, None, contexts, y, prep)
    return finish(p.adapter.jacobian(p.data, p.target, as_input(x), contexts), x, out, "jacobian", backend)
