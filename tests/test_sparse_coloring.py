"""Colorings of sparsity patterns (issue 16): each one checked valid on random patterns by
compressing a random matrix with that pattern and decompressing it exactly, and counted against
known optima and SciPy's own greedy grouping."""

from __future__ import annotations

import numpy as np
import pytest

sp = pytest.importorskip("scipy.sparse")

from diffinterface.sparse import GreedyColoring  # noqa: E402
from diffinterface.sparse._coloring import csr_pattern, decompression  # noqa: E402

ORDERS = ["largest_first", "natural"]


def _random_pattern(rng, m, n, density):
    return csr_pattern(rng.random((m, n)) < density)


def _values(p, rng):
    """A random matrix with exactly the pattern p."""
    v = sp.csr_array((rng.standard_normal(p.nnz) + 2.0, p.indices, p.indptr), shape=p.shape)
    return v


def _seeds(colors):
    """The seed matrix S (n x n_colors): S[j, colors[j]] = 1."""
    n_colors = int(colors.max()) + 1
    return np.eye(n_colors)[colors]


def _check_columns(p, colors, rng):
    J = _values(p, rng)
    B = (J @ _seeds(colors)).T  # B[c] = J @ seed_c
    got = B.ravel()[decompression(p, colors, "columns")]
    np.testing.assert_array_equal(got, J.data)


def _check_rows(p, colors, rng):
    J = _values(p, rng)
    B = _seeds(colors).T @ J.toarray()  # B[c] = seed_c @ J
    got = B.ravel()[decompression(p, colors, "rows")]
    np.testing.assert_array_equal(got, J.data)


def _symmetric(p, rng):
    H = _values(csr_pattern(p + p.T + sp.eye_array(p.shape[0])), rng)
    H = csr_pattern(H)  # pattern only
    vals = sp.triu(_values(H, rng))
    return sp.csr_array(vals + sp.triu(vals, k=1).T)


def _check_star(H, colors):
    B = (H @ _seeds(colors)).T
    got = B.ravel()[decompression(H, colors, "star")]
    np.testing.assert_array_equal(got, sp.csr_array(H).data)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("seed", range(12))
def test_colorings_of_random_patterns_decompress_exactly(order, seed):
    rng = np.random.default_rng(seed)
    m, n = rng.integers(1, 60, size=2)
    p = _random_pattern(rng, m, n, rng.uniform(0.01, 0.3))
    coloring = GreedyColoring(order)
    _check_columns(p, coloring.columns(p), rng)
    _check_rows(p, coloring.rows(p), rng)
    H = _symmetric(_random_pattern(rng, n, n, rng.uniform(0.01, 0.2)), rng)
    colors = coloring.star(H)
    _check_star(H, colors)
    # a star coloring is a distance-1 coloring: no edge joins two vertices of one color
    r, c = H.nonzero()
    off = r != c
    assert not np.any(colors[r[off]] == colors[c[off]])


def test_an_invalid_coloring_is_an_error_not_a_wrong_entry():
    p = csr_pattern(np.array([[1, 1, 0], [0, 1, 1]]))
    with pytest.raises(ValueError, match=r"column coloring does not determine the entries \(0, 0\)"):
        decompression(p, np.array([0, 0, 1]), "columns")
    with pytest.raises(ValueError, match="row coloring does not determine"):
        decompression(p, np.array([0, 0]), "rows")
    H = csr_pattern(np.ones((3, 3)))
    with pytest.raises(ValueError, match="star coloring does not determine"):
        decompression(H, np.array([0, 1, 1]), "star")


def _banded(n, k):
    return csr_pattern(sp.diags_array([np.ones(n - abs(d)) for d in range(-k, k + 1)], offsets=range(-k, k + 1)))


@pytest.mark.parametrize("order", ORDERS)
def test_known_color_counts(order):
    coloring = GreedyColoring(order)
    tri = _banded(1000, 1)
    assert coloring.columns(tri).max() + 1 == 3  # the optimum for a tridiagonal pattern
    assert coloring.rows(tri).max() + 1 == 3
    penta = _banded(1000, 2)
    assert coloring.columns(penta).max() + 1 == 5
    # an arrowhead Hessian: a column coloring needs n colors, a star coloring 2
    n = 500
    arrow = sp.lil_array((n, n))
    arrow[0, :] = 1
    arrow[:, 0] = 1
    arrow.setdiag(1)
    arrow = csr_pattern(arrow)
    assert coloring.columns(arrow).max() + 1 == n
    colors = coloring.star(arrow)
    assert colors.max() + 1 == 2
    _check_star(_symmetric(arrow, np.random.default_rng(0)), colors)
    # a banded Hessian of half-bandwidth 2: a star coloring needs at most as many colors as columns
    band = _banded(1000, 2)
    assert coloring.star(band).max() + 1 <= coloring.columns(band).max() + 1


def test_no_more_colors_than_scipy_group_columns():
    numdiff = pytest.importorskip("scipy.optimize._numdiff")  # SciPy's greedy (private), as a reference
    rng = np.random.default_rng(16)
    for _ in range(10):
        p = _random_pattern(rng, 80, 60, 0.05)
        ours = GreedyColoring("largest_first").columns(p).max() + 1
        theirs = numdiff.group_columns(p.toarray()).max() + 1
        assert ours <= theirs + 1, (ours, theirs)  # greedy orders differ; largest-first is rarely worse
    tri = _banded(1000, 1)
    assert GreedyColoring().columns(tri).max() + 1 <= numdiff.group_columns(tri).max() + 1


def test_coloring_time_on_a_banded_pattern_of_1e5():
    import time

    p = _banded(100_000, 1)
    start = time.perf_counter()
    colors = GreedyColoring().columns(p)
    elapsed = time.perf_counter() - start
    assert colors.max() + 1 == 3
    assert elapsed < 5.0, elapsed  # the budget is 1 s for detection and coloring (measured in the bench)
