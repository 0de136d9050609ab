"""hessian: the matrix of second derivatives of a scalar-valued ``f``, of shape ``x.shape + x.shape``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._arrays import as_input, output_like
from .._frontend import finish, prepare, resolve, run_prepared
from .._prep import Prep


def prepare_hessian(backend: Any, f: Callable, x: Any, *contexts: Any, strict: bool = True) -> Prep:
    """Prepare :func:`hessian` and :func:`value_gradient_and_hessian` for arguments shaped like these."""
    return prepare("hessian", backend, f, x, None, contexts, None, strict)


def value_gradient_and_hessian(backend: Any, f: Callable, x: Any, *contexts: Any, prep: Prep | None = None, out: Any = None) -> tuple:
    """``(f(x), grad, H)``; ``out=`` receives the Hessian."""
    p = resolve("hessian", backend, f, x, None, contexts, None, prep)
    value, grad, hess = p.adapter.value_gradient_and_hessian(p.data, p.target, as_input(x), contexts)
    return output_like(value, x), output_like(grad, x), finish(hess, x, out, "value_gradient_and_hessian", backend)


def hessian(backend: Any, f: Callable, x: Any, *contexts: Any, prep: Prep | None = None, out: Any = None) -> Any:
    """The Hessian of a scalar-valued ``f`` at ``x``, of shape ``x.shape + x.shape``."""
    if type(prep) is Prep:
        return run_prepared("hessian", prep, backend, f, x, contexts, out)
    p = resolve("hessian", backend, f, x, None, contexts, None, prep)
    return finish(p.adapter.hessian(p.data, p.target, as_input(x), contexts), x, out, "hessian", backend)
