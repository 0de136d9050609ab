"""Differentiable SciPy functions, written with :mod:`diffinterface.rules` (opaque bodies): usable
on every backend and inside each engine's own code, every array argument active.

- ``solve(A, b)``: ``scipy.linalg.solve`` (b a vector or a matrix); the reverse pass reuses the LU
  factorisation of the augmented primal (its tape).
- ``expm(A)``: ``scipy.linalg.expm``; forward and reverse through ``scipy.linalg.expm_frechet``
  (the reverse pass is the Frechet derivative at ``A.T``, its adjoint for real ``A``).
- ``fftconvolve(in1, in2, mode="full")``: ``scipy.signal.fftconvolve`` in any dimension; ``mode``
  is static. Both passes are convolutions again (the reverse one with the flipped other input).

Real floating arrays only (the rules do not conjugate).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .rules import Active, Duplicated, custom_rule

if TYPE_CHECKING:
    from ._core.types import Array
    from .rules import Const

    # what each rule receives (diffinterface.rules): NumPy arrays in the primal, annotated ones in the
    # forward rule (a tangent where Duplicated) and in the augmented primal and reverse pass (Active)
    Forward = Const | Duplicated
    Reverse = Const | Active

__all__ = ["expm", "fftconvolve", "solve"]


def _linalg() -> Any:
    import scipy.linalg

    return scipy.linalg


def _signal() -> Any:
    import scipy.signal

    return scipy.signal


# -- solve -----------------------------------------------------------------------------------------


def _solve_shape(A: Array, b: Array) -> tuple[Any, ...]:
    return tuple(b.shape), np.result_type(A.dtype, b.dtype)


@custom_rule(opaque=True, out_shape=_solve_shape)
def solve(A: np.ndarray, b: np.ndarray) -> Any:
    """``x`` with ``A @ x = b`` (``scipy.linalg.solve``)."""
    return _linalg().solve(A, b)


@solve.def_forward
def _solve_forward(A: Forward, b: Forward) -> tuple[Any, ...]:
    linalg = _linalg()
    lu = linalg.lu_factor(A.val)
    y = linalg.lu_solve(lu, b.val)
    rhs = np.zeros_like(y)
    if isinstance(b, Duplicated):
        rhs = rhs + b.dval
    if isinstance(A, Duplicated):
        rhs = rhs - A.dval @ y
    return y, linalg.lu_solve(lu, rhs)


@solve.def_augmented_primal
def _solve_augmented(A: Reverse, b: Reverse) -> tuple[Any, ...]:
    linalg = _linalg()
    lu = linalg.lu_factor(A.val)
    y = linalg.lu_solve(lu, b.val)
    return y, (lu, y)


@solve.def_reverse
def _solve_reverse(tape: tuple[Any, ...], dy: np.ndarray, A: Reverse, b: Reverse) -> tuple[Any, ...]:
    lu, y = tape
    g = _linalg().lu_solve(lu, dy, trans=1)  # A^T g = dy
    dA = None
    if isinstance(A, Active):
        dA = -(np.outer(g, y) if np.ndim(y) == 1 else g @ y.T)
    return dA, (g if isinstance(b, Active) else None)


# -- expm ------------------------------------------------------------------------------------------


@custom_rule(opaque=True, out_shape=lambda A: (tuple(A.shape), A.dtype))
def expm(A: np.ndarray) -> Any:
    """The matrix exponential (``scipy.linalg.expm``)."""
    return _linalg().expm(A)


@expm.def_forward
def _expm_forward(A: Forward) -> tuple[Any, ...]:
    if not isinstance(A, Duplicated):
        return _linalg().expm(A.val), None
    return _linalg().expm_frechet(A.val, A.dval, compute_expm=True)


@expm.def_augmented_primal
def _expm_augmented(A: Reverse) -> tuple[Any, ...]:
    return _linalg().expm(A.val), A.val


@expm.def_reverse
def _expm_reverse(tape: np.ndarray, dy: np.ndarray, A: Reverse) -> tuple[Any, ...]:
    if not isinstance(A, Active):
        return (None,)
    return (_linalg().expm_frechet(tape.T, dy, compute_expm=False),)


# -- fftconvolve -----------------------------------------------------------------------------------


def _conv_shape(in1: Array, in2: Array, mode: str = "full") -> tuple[Any, ...]:
    s1, s2 = np.array(in1.shape), np.array(in2.shape)
    if mode == "full":
        shape = s1 + s2 - 1
    elif mode == "same":
        shape = s1
    elif mode == "valid":
        shape = np.abs(s1 - s2) + 1
    else:
        raise ValueError(f'fftconvolve: mode must be "full", "same" or "valid", got {mode!r}')
    return tuple(int(s) for s in shape), np.result_type(in1.dtype, in2.dtype)


@custom_rule(opaque=True, out_shape=_conv_shape)
def fftconvolve(in1: np.ndarray, in2: np.ndarray, mode: str = "full") -> Any:
    """The convolution of two N-dimensional arrays (``scipy.signal.fftconvolve``)."""
    return _signal().fftconvolve(in1, in2, mode=mode)


@fftconvolve.def_forward
def _conv_forward(in1: Forward, in2: Forward, mode: str = "full") -> tuple[Any, ...]:
    conv = _signal().fftconvolve
    y = conv(in1.val, in2.val, mode=mode)
    dy = np.zeros_like(y)
    if isinstance(in1, Duplicated):
        dy = dy + conv(in1.dval, in2.val, mode=mode)
    if isinstance(in2, Duplicated):
        dy = dy + conv(in1.val, in2.dval, mode=mode)
    return y, dy


@fftconvolve.def_augmented_primal
def _conv_augmented(in1: Reverse, in2: Reverse, mode: str = "full") -> tuple[Any, ...]:
    return _signal().fftconvolve(in1.val, in2.val, mode=mode), None


@fftconvolve.def_reverse
def _conv_reverse(tape: None, dy: np.ndarray, in1: Reverse, in2: Reverse, mode: str = "full") -> tuple[Any, ...]:
    conv = _signal().fftconvolve
    a, b = in1.val, in2.val
    full = tuple(s1 + s2 - 1 for s1, s2 in zip(a.shape, b.shape))
    g = np.zeros(full, dtype=np.result_type(dy.dtype, a.dtype, b.dtype))
    start = tuple((f - s) // 2 for f, s in zip(full, dy.shape))  # where scipy's "same"/"valid" crop
    g[tuple(slice(s, s + n) for s, n in zip(start, dy.shape))] = dy
    flip = tuple(range(a.ndim))
    d1 = conv(g, np.flip(b, flip), mode="valid") if isinstance(in1, Active) else None
    d2 = conv(g, np.flip(a, flip), mode="valid") if isinstance(in2, Active) else None
    return d1, d2
