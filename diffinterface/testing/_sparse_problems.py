"""Sparse test problems with closed-form derivatives (issue 16), for the tests and the sparse bench.

Each function is written once with the array API (``xp = array_namespace(x)``), so it runs on every
engine and on the sparsity tracer; each reference is a closed form assembled with ``scipy.sparse``
(nothing here differentiates anything):

- :func:`diffusion`: ``y_i = x_{i-1} - 2 x_i + x_{i+1} - x_i**3`` (zero boundary values), a 1-D
  reaction-diffusion right-hand side; its Jacobian is tridiagonal (3 colors);
- :func:`brusselator`: the 2-D Brusselator right-hand side on an ``N x N`` periodic grid
  (``n = 2 N**2``), five-point Laplacian through ``roll``; about 8-10 colors;
- :func:`arrowhead`: ``sum(cos(x_0 + x_i), i >= 1) + sum(x**2) / 2``, whose Hessian is an
  arrowhead (2 star colors, n column colors);
- :func:`banded`: ``sum(sin(x_i + 2 x_{i+1} + 3 x_{i+2})) + sum(x**4) / 12``, a Hessian of
  half-bandwidth 2 (5 star colors, 3 acyclic);
- :func:`arrowhead_map`: a Jacobian with a full first row and column and a diagonal (3 products as
  a bicoloring, n in one direction);
- :func:`pairs`: a Hessian with the pattern of any graph (random symmetric patterns).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from array_api_compat import array_namespace

if TYPE_CHECKING:
    from .._core.types import NumericArray


def _sp() -> Any:
    import scipy.sparse as sp

    return sp


# -- 1-D diffusion -----------------------------------------------------------------------------------


def diffusion(x: NumericArray) -> Any:
    xp = array_namespace(x)
    zero = xp.zeros_like(x[:1])
    left = xp.concat([zero, x[:-1]])
    right = xp.concat([x[1:], zero])
    return left - 2 * x + right - x**3


def diffusion_jacobian(x: np.ndarray) -> Any:
    x = np.asarray(x)
    n = x.size
    return _sp().diags_array([np.ones(n - 1), -2 - 3 * x**2, np.ones(n - 1)], offsets=[-1, 0, 1], format="csr")


# -- 3-D diffusion -----------------------------------------------------------------------------------


def diffusion3d(x: NumericArray) -> Any:
    """``y = L x - x**3`` with ``L`` the seven-point Laplacian on a periodic ``N x N x N`` grid
    (``x.size = N**3``): a Jacobian with 7 nonzeros per row."""
    xp = array_namespace(x)
    size = int(round(x.shape[0] ** (1 / 3)))
    u = xp.reshape(x, (size, size, size))
    lap = -6 * u
    for axis in range(3):
        lap = lap + xp.roll(u, 1, axis=axis) + xp.roll(u, -1, axis=axis)
    return xp.reshape(lap - u**3, (-1,))


def diffusion3d_jacobian(x: np.ndarray) -> Any:
    sp = _sp()
    x = np.asarray(x)
    size = int(round(x.size ** (1 / 3)))
    ring = sp.diags_array([np.ones(size - 1), np.ones(size - 1)], offsets=[-1, 1], shape=(size, size), format="lil")
    ring[0, size - 1] = ring[size - 1, 0] = 1
    ring, eye = sp.csr_array(ring), sp.eye_array(size, format="csr")
    lap = sp.kron(sp.kron(ring, eye), eye) + sp.kron(sp.kron(eye, ring), eye) + sp.kron(sp.kron(eye, eye), ring)
    return sp.csr_array(lap + sp.diags_array(-6 - 3 * x**2))


# -- 2-D Brusselator -------------------------------------------------------------------------------

BRUSSELATOR_A, BRUSSELATOR_B, BRUSSELATOR_ALPHA = 3.4, 1.0, 10.0


def _laplacian(u: NumericArray, xp: Any) -> Any:
    return xp.roll(u, 1, axis=0) + xp.roll(u, -1, axis=0) + xp.roll(u, 1, axis=1) + xp.roll(u, -1, axis=1) - 4 * u


def brusselator(x: NumericArray) -> Any:
    """The 2-D Brusselator right-hand side; ``x`` holds u then v, each ``N x N`` (row-major)."""
    xp = array_namespace(x)
    n2 = x.shape[0] // 2
    size = int(round(n2**0.5))
    u = xp.reshape(x[:n2], (size, size))
    v = xp.reshape(x[n2:], (size, size))
    a, b, alpha = BRUSSELATOR_A, BRUSSELATOR_B, BRUSSELATOR_ALPHA
    du = b + u * u * v - (a + 1) * u + alpha * _laplacian(u, xp)
    dv = a * u - u * u * v + alpha * _laplacian(v, xp)
    return xp.concat([xp.reshape(du, (-1,)), xp.reshape(dv, (-1,))])


def brusselator_jacobian(x: np.ndarray) -> Any:
    sp = _sp()
    x = np.asarray(x)
    n2 = x.size // 2
    size = int(round(n2**0.5))
    u, v = x[:n2], x[n2:]
    shift = sp.csr_array(np.roll(np.eye(size), 1, axis=1)) + sp.csr_array(np.roll(np.eye(size), -1, axis=1))
    eye = sp.eye_array(size)
    lap = sp.kron(shift, eye) + sp.kron(eye, shift) - 4 * sp.eye_array(n2)
    a, alpha = BRUSSELATOR_A, BRUSSELATOR_ALPHA
    return sp.csr_array(
        sp.block_array(
            [
                [sp.diags_array(2 * u * v - (a + 1)) + alpha * lap, sp.diags_array(u * u)],
                [sp.diags_array(a - 2 * u * v), sp.diags_array(-u * u) + alpha * lap],
            ]
        )
    )


def brusselator_x0(size: int) -> np.ndarray:
    """The usual initial condition: u = 22 y (1 - y)^1.5, v = 27 x (1 - x)^1.5 on the unit grid."""
    grid = np.linspace(0.0, 1.0, size)
    xx, yy = np.meshgrid(grid, grid, indexing="ij")
    return np.concatenate([(22 * yy * (1 - yy) ** 1.5).ravel(), (27 * xx * (1 - xx) ** 1.5).ravel()])


# -- an arrowhead Jacobian -------------------------------------------------------------------------


def arrowhead_map(x: NumericArray) -> Any:
    """``y_0 = sum(sin(x))``, ``y_i = x_i**2 + x_0 x_i``: a Jacobian with a full first row, a full
    first column and a diagonal (n colors in either direction alone, 3 products as a bicoloring)."""
    xp = array_namespace(x)
    return xp.concat([xp.reshape(xp.sum(xp.sin(x)), (1,)), x[1:] * x[1:] + x[0] * x[1:]])


def arrowhead_map_jacobian(x: np.ndarray) -> Any:
    sp = _sp()
    x = np.asarray(x)
    n = x.size
    rest = np.arange(1, n)
    rows = np.concatenate([np.zeros(n, int), rest, rest])
    cols = np.concatenate([np.arange(n), np.zeros(n - 1, int), rest])
    vals = np.concatenate([np.cos(x), x[1:], 2 * x[1:] + x[0]])
    return sp.csr_array(sp.coo_array((vals, (rows, cols)), shape=(n, n)))


# -- Hessians ----------------------------------------------------------------------------------------


def arrowhead(x: NumericArray) -> Any:
    xp = array_namespace(x)
    return xp.sum(xp.cos(x[0] + x[1:])) + xp.sum(x * x) / 2


def arrowhead_hessian(x: np.ndarray) -> Any:
    sp = _sp()
    x = np.asarray(x)
    n = x.size
    c = -np.cos(x[0] + x[1:])
    rows = np.concatenate([[0], np.zeros(n - 1, int), np.arange(1, n), np.arange(1, n)])
    cols = np.concatenate([[0], np.arange(1, n), np.zeros(n - 1, int), np.arange(1, n)])
    vals = np.concatenate([[1 + c.sum()], c, c, 1 + c])
    return sp.csr_array(sp.coo_array((vals, (rows, cols)), shape=(n, n)))


WEIGHTS = (1.0, 2.0, 3.0)


def banded(x: NumericArray) -> Any:
    xp = array_namespace(x)
    a, b, c = WEIGHTS
    return xp.sum(xp.sin(a * x[:-2] + b * x[1:-1] + c * x[2:])) + xp.sum(x**4) / 12


def pairs(edges: np.ndarray) -> Callable[[NumericArray], Any]:
    """``f(x) = sum(sin(x_i x_j) for (i, j) in edges) + sum(x**4) / 12``: a Hessian with the
    pattern of the graph ``edges`` (an ``(E, 2)`` integer array, i != j) and the diagonal."""
    first, second = np.ascontiguousarray(edges[:, 0]), np.ascontiguousarray(edges[:, 1])

    def f(x: NumericArray) -> Any:
        xp = array_namespace(x)
        i, j = xp.asarray(first), xp.asarray(second)  # index arrays of x's own library (MLX takes no numpy ones)
        return xp.sum(xp.sin(x[i] * x[j])) + xp.sum(x**4) / 12

    return f


def pairs_hessian(edges: np.ndarray, x: np.ndarray) -> Any:
    sp = _sp()
    x = np.asarray(x)
    i, j = edges[:, 0], edges[:, 1]
    t = x[i] * x[j]
    c, s = np.cos(t), np.sin(t)
    off = c - t * s  # d2/dxi dxj sin(xi xj)
    rows = np.concatenate([i, j, i, j, np.arange(x.size)])
    cols = np.concatenate([j, i, i, j, np.arange(x.size)])
    vals = np.concatenate([off, off, -(x[j] ** 2) * s, -(x[i] ** 2) * s, x**2])
    return sp.csr_array(sp.coo_array((vals, (rows, cols)), shape=(x.size, x.size)))


def banded_hessian(x: np.ndarray) -> Any:
    sp = _sp()
    x = np.asarray(x)
    n = x.size
    w = np.asarray(WEIGHTS)
    s = -np.sin(w[0] * x[:-2] + w[1] * x[1:-1] + w[2] * x[2:])
    base = np.arange(n - 2)
    rows, cols, vals = [np.arange(n)], [np.arange(n)], [x**2]
    for i in range(3):
        for j in range(3):
            rows.append(base + i)
            cols.append(base + j)
            vals.append(s * w[i] * w[j])
    coo = sp.coo_array((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n))
    return sp.csr_array(coo)


# -- the catalogue of problems ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SparseProblem:
    """A sparse derivative to compute: ``operator`` ("jacobian" or "hessian") of ``f`` at ``x``, with
    its closed form ``reference(x)`` (a ``scipy.sparse`` matrix)."""

    name: str
    operator: str
    f: Callable[..., Any]
    x: np.ndarray
    reference: Callable[[Any], Any]
    colors: int | None = None  # the optimal number of colors, where known


def sparse_problems(scale: str = "test") -> list[SparseProblem]:
    """The issue's test problems: ``scale="test"`` sizes run in seconds on every backend;
    ``"bench"`` the benchmark's (n = 1e4 diffusion, N = 64 Brusselator, n = 1e4 Hessians)."""
    rng = np.random.default_rng(16)
    n, size, m = (200, 8, 100) if scale == "test" else (10_000, 64, 10_000)
    return [
        SparseProblem("diffusion", "jacobian", diffusion, rng.uniform(-1, 1, n), diffusion_jacobian, 3),
        SparseProblem(
            f"brusselator_{size}",
            "jacobian",
            brusselator,
            brusselator_x0(size) + 0.1 * rng.standard_normal(2 * size * size),
            brusselator_jacobian,
        ),
        SparseProblem("arrowhead", "hessian", arrowhead, rng.uniform(-1, 1, m), arrowhead_hessian, 2),
        SparseProblem("banded", "hessian", banded, rng.uniform(-1, 1, m), banded_hessian),
    ]
