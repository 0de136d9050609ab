"""The catalogue's records: a reference function (closed-form value and derivatives), a
:class:`Scenario`, and the conversion of numpy references into each array family."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class Reference:
    """A function with closed-form value, Jacobian (flat: ``(y.size, x.size)``) and Hessian."""

    name: str
    f: Callable[..., Any]
    x: Any
    value: Callable[..., Any]
    jac: Callable[..., Any]
    hess: Callable[..., Any] | None = None  # (x.size, x.size), scalar outputs only
    der2: Callable[..., Any] | None = None  # d2f/dx2 shaped like f(x), scalar inputs only


FIRST_ORDER = ("pushforward", "pullback", "derivative", "gradient", "jacobian")
SECOND_ORDER = ("second_derivative", "hvp", "hessian")
OPERATORS = FIRST_ORDER + SECOND_ORDER


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One operator on one function at one point, with its reference results.

    ``value`` is ``f(x)``; ``first`` the first-order result of the operator (the derivative, gradient,
    Jacobian, pushforward or pullback; the gradient for ``hvp`` and ``hessian``); ``second`` the
    second-order result (second derivative, hvp, Hessian). A tuple ``tangent`` is a batch and its
    results are tuples. ``y`` is the output buffer of a two-argument ``f(y, x, *contexts)``.
    The harness prepares at ``prep_x`` with ``prep_tangent`` and ``prep_contexts`` and checks that
    ``x``, the tangent, the contexts and the objects in ``state`` are unchanged by every call.
    """

    operator: str
    f: Callable[..., Any]
    x: Any
    tangent: Any = None
    contexts: tuple[Any, ...] = ()
    y: Any = None
    value: Any = None
    first: Any = None
    second: Any = None
    name: str = ""
    prep_x: Any = None
    prep_tangent: Any = None
    prep_contexts: tuple[Any, ...] | None = None
    state: tuple[Any, ...] = ()
    sparse: bool = False  # run through AutoSparse(backend): results are sparse matrices of shape (y.size, x.size)
    structured: bool = False  # x or f(x) a dict, tuple, list or nesting: results are structures
    holomorphic: bool = False  # passed to jacobian and derivative (a complex x)

    def __repr__(self) -> str:
        return f"Scenario({self.name})"


def convert(value: Any, family: str, dtype: Any) -> Any:
    """A numpy value as an array of ``family`` with ``dtype`` (Python floats stay floats for numpy)."""
    if isinstance(value, float) and family == "numpy" and np.dtype(dtype) == np.float64:
        return value
    arr = np.asarray(value, dtype=dtype)
    if family == "numpy":
        return arr
    if family == "torch":
        import torch

        return torch.from_numpy(arr.copy())
    if family == "jax":
        import jax.numpy as jnp

        return jnp.asarray(arr)
    if family == "mlx":
        import mlx.core  # noqa: F401  (the family converts once its module is imported)

        from .._core.arrays import to_family

        return to_family(arr, "mlx")
    if family == "tensorflow":
        import tensorflow as tf

        return tf.convert_to_tensor(arr)
    raise ValueError(f"unknown array family {family!r}; use 'numpy', 'jax', 'torch', 'mlx' or 'tensorflow'")


def _mutable_family(family: str) -> str:
    """The family of buffers f writes into: jax arrays and TensorFlow tensors are immutable, so such a
    user's buffer is numpy."""
    return "numpy" if family in ("jax", "tensorflow") else family


def _tangent(shape: tuple[Any, ...], k: int) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    t = np.linspace(0.5, 1.5, n) * (-1.0) ** np.arange(n) + 0.25 * k
    return np.reshape(t, shape) if shape else np.asarray(t[0])
