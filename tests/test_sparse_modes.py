"""AutoSparse beyond one direction and direct recovery (issue 42): vertex orders, acyclic Hessians
recovered by substitution, bicolored Jacobians, and what a preparation tells (``prep.sparsity``,
``prep.ncolors``). Every result is compared with a closed form and with the dense derivative of the
same engine."""

from __future__ import annotations

import numpy as np
import pytest

sp = pytest.importorskip("scipy.sparse")

import diffinterface as di  # noqa: E402
from conftest import AD_ENGINES, engine_marks, installed  # noqa: E402
from diffinterface.sparse import AutoSparse, GreedyColoring  # noqa: E402
from diffinterface.testing import _sparse_problems as problems  # noqa: E402

ORDERS = ["natural", "largest_first", "smallest_last", "incidence_degree", "dynamic_largest_first", "random", "best"]


def _engines(*, with_fd: bool = False) -> list:
    out = [pytest.param(di.AutoFiniteDiff(), id="AutoFiniteDiff")] if with_fd else []
    for name, engine, extra in AD_ENGINES:
        config = getattr(di, name)()
        out.append(pytest.param(config, marks=engine_marks(engine, extra), id=repr(config)))
    return out


def _tol(backend, tol: float, second: bool = False) -> float:
    """``tol``, or the engine's documented float64 accuracy where it is coarser (AutoMLX's float32 sin)."""
    own = getattr(backend, "tolerance", None)
    return tol if own is None else max(tol, own(np.float64, second))


def _dense(result) -> np.ndarray:
    return sp.csr_array(result).toarray()


def _close(result, reference, tol=1e-10):
    ref = sp.csr_array(reference)
    assert sp.issparse(result) and result.shape == ref.shape
    scale = max(1.0, float(np.abs(ref.data).max()))
    err = abs(sp.csr_array(result) - ref).max()
    assert err <= tol * scale, (err, tol * scale)


@pytest.mark.parametrize("order", ORDERS)
def test_every_order_recovers_the_dense_jacobian(order):
    backend = di.AutoAutograd() if installed("autograd") else di.AutoFiniteDiff()
    tol = 1e-10 if installed("autograd") else 1e-7
    x = problems.brusselator_x0(8) + 0.1 * np.random.default_rng(0).standard_normal(128)
    sparse = AutoSparse(backend, coloring=GreedyColoring(order, seed=3))
    prep = di.prepare_jacobian(sparse, problems.brusselator, x)
    J = di.jacobian(sparse, problems.brusselator, x, prep=prep)
    np.testing.assert_allclose(_dense(J), di.jacobian(backend, problems.brusselator, x), rtol=tol, atol=tol)
    _close(J, problems.brusselator_jacobian(x), tol)
    assert prep.ncolors <= 12


def test_the_preparation_tells_the_pattern_and_the_products():
    # a tall Jacobian (f(x).size != x.size): sparsity has shape (f(x).size, x.size)
    def tall(x):
        return np.concatenate([x[1:] * x[:-1], np.sin(x), x[:1] ** 2])

    x = np.linspace(0.1, 1.0, 7)
    prep = di.prepare_jacobian(AutoSparse(di.AutoFiniteDiff()), tall, x)
    pattern = prep.sparsity
    assert isinstance(pattern, sp.csr_array) and pattern.dtype == bool and pattern.shape == (6 + 7 + 1, 7)
    expected = np.zeros((14, 7), bool)
    for i in range(6):
        expected[i, [i, i + 1]] = True
    expected[6:13] |= np.eye(7, dtype=bool)
    expected[13, 0] = True
    np.testing.assert_array_equal(pattern.toarray(), expected)
    # ncolors is what one call costs: central differences evaluate f twice per pushforward
    from diffinterface.testing._benchmark import _counted, _Counter

    count = _Counter()
    counted = _counted(tall, count)
    cprep = di.prepare_jacobian(AutoSparse(di.AutoFiniteDiff()), counted, x)
    count.calls = 0
    di.jacobian(AutoSparse(di.AutoFiniteDiff()), counted, x, prep=cprep)
    assert count.calls == 2 * cprep.ncolors and cprep.ncolors == 2  # even and odd columns
    # a Hessian's pattern is n x n
    h = di.prepare_hessian(AutoSparse(di.AutoFiniteDiff()), problems.banded, np.linspace(-1, 1, 20))
    assert h.sparsity.shape == (20, 20) and h.sparsity.nnz == 20 + 2 * 19 + 2 * 18
    assert (h.sparse_mode, h.ncolors) == ("acyclic", 3)
    with pytest.raises(AttributeError, match=r"prep.ncolors: this prep is for gradient .* AutoSparse"):
        _ = di.prepare_gradient(di.AutoFiniteDiff(), problems.banded, np.ones(3)).ncolors


@pytest.mark.parametrize("backend", _engines(with_fd=True))
def test_acyclic_hessians_by_substitution(backend):
    fd = isinstance(backend, di.AutoFiniteDiff)
    tol = 1e-5 if fd else _tol(backend, 1e-10, second=True)
    rng = np.random.default_rng(42)
    x = rng.uniform(-1, 1, 300)
    colorings = {kind: AutoSparse(backend, coloring=GreedyColoring(symmetric=kind)) for kind in ("star", "acyclic")}
    preps = {kind: di.prepare_hessian(b, problems.banded, x) for kind, b in colorings.items()}
    # a band of half-width 2: 5 star colors, 3 acyclic, and "auto" takes the acyclic one
    assert (preps["star"].sparse_mode, preps["star"].ncolors) == ("star", 5)
    assert (preps["acyclic"].sparse_mode, preps["acyclic"].ncolors) == ("acyclic", 3)
    assert di.prepare_hessian(AutoSparse(backend), problems.banded, x).sparse_mode == "acyclic"
    dense = di.hessian(backend, problems.banded, x)
    for kind, b in colorings.items():
        for prep in (None, preps[kind], preps[kind]):
            H = di.hessian(b, problems.banded, x, prep=prep)
            _close(H, problems.banded_hessian(x), tol)
            np.testing.assert_allclose(_dense(H), dense, rtol=0, atol=tol * np.abs(dense).max())
    y, g, H = di.value_gradient_and_hessian(colorings["acyclic"], problems.banded, x, prep=preps["acyclic"])
    _close(H, problems.banded_hessian(x), tol)
    np.testing.assert_allclose(g, di.gradient(backend, problems.banded, x), rtol=1e-6 if fd else _tol(backend, 1e-12))
    # random symmetric patterns, through the pattern of f(x) = sum(sin(x_i x_j)) + sum(x**4) / 12
    for seed in range(3 if not fd else 1):
        rng = np.random.default_rng(seed)
        n = 60
        upper = np.argwhere(np.triu(rng.random((n, n)) < 0.06, k=1))
        f = problems.pairs(upper)
        x = rng.uniform(-1, 1, n)
        sparse = AutoSparse(backend, coloring=GreedyColoring(symmetric="acyclic"))
        prep = di.prepare_hessian(sparse, f, x)
        assert prep.sparse_mode == "acyclic"
        H = di.hessian(sparse, f, x, prep=prep)
        _close(H, problems.pairs_hessian(upper, x), tol)
        dense = di.hessian(backend, f, x)
        np.testing.assert_allclose(_dense(H), dense, rtol=0, atol=tol * max(1.0, np.abs(dense).max()))


@pytest.mark.parametrize("backend", _engines())
def test_the_arrowhead_jacobian_is_bicolored(backend):
    # a full first row, a full first column and a diagonal: n colors in one direction, <= 4 products
    rng = np.random.default_rng(7)
    sparse = AutoSparse(backend)
    x = rng.uniform(-1, 1, 10_000)
    prep = di.prepare_jacobian(sparse, problems.arrowhead_map, x)
    assert prep.sparse_mode == "bidirectional" and prep.ncolors <= 4, (prep.sparse_mode, prep.ncolors)
    tol = _tol(backend, 1e-10)
    column_colors, row_colors = prep.colors
    assert prep.ncolors == len(set(column_colors.tolist()) - {-1}) + len(set(row_colors.tolist()) - {-1})
    for p in (None, prep, prep):
        _close(di.jacobian(sparse, problems.arrowhead_map, x, prep=p), problems.arrowhead_map_jacobian(x), tol)
    y, J = di.value_and_jacobian(sparse, problems.arrowhead_map, x, prep=prep)
    np.testing.assert_allclose(np.asarray(y), problems.arrowhead_map(x), rtol=_tol(backend, 1e-12))
    _close(J, problems.arrowhead_map_jacobian(x), tol)
    # against the engine's own dense Jacobian where it fits in memory
    small = x[:300]
    got = _dense(di.jacobian(sparse, problems.arrowhead_map, small))
    dense = di.jacobian(backend, problems.arrowhead_map, small)
    np.testing.assert_allclose(got, dense, rtol=_tol(backend, 1e-12), atol=_tol(backend, 1e-12))
    # one direction only: the engine's mode, n colors
    one = AutoSparse(type(backend)(mode="forward"))
    assert di.prepare_jacobian(one, problems.arrowhead_map, small).ncolors == 300


@pytest.mark.skipif(not installed("torch"), reason='pip install "diffinterface[torch]"')
def test_bicolored_and_acyclic_results_in_the_family_of_x():
    import torch

    x = torch.tensor(np.random.default_rng(3).uniform(-1, 1, 500))
    J = di.jacobian(AutoSparse(di.AutoTorch()), problems.arrowhead_map, x)
    assert J.layout == torch.sparse_csr and J.dtype == torch.float64
    _close(sp.csr_array(J.to_dense().numpy()), problems.arrowhead_map_jacobian(x.numpy()))
    prep = di.prepare_hessian(AutoSparse(di.AutoTorch()), problems.banded, x)
    H = di.hessian(AutoSparse(di.AutoTorch()), problems.banded, x, prep=prep)
    assert prep.sparse_mode == "acyclic" and H.layout == torch.sparse_csr and H.dtype == torch.float64
    _close(sp.csr_array(H.to_dense().numpy()), problems.banded_hessian(x.numpy()))


@pytest.mark.skipif(not installed("jax"), reason='pip install "diffinterface[jax]"')
def test_acyclic_and_bicolored_with_jax_arrays():
    import jax.numpy as jnp
    from jax.experimental import sparse as jsparse

    from diffinterface.backends.jax import enable_x64

    x_np = np.random.default_rng(4).uniform(-1, 1, 500)
    with enable_x64(True):
        x = jnp.asarray(x_np)
    for f, reference, op in [
        (problems.banded, problems.banded_hessian, di.hessian),
        (problems.arrowhead_map, problems.arrowhead_map_jacobian, di.jacobian),
    ]:
        result = op(AutoSparse(di.AutoJAX()), f, x)
        assert isinstance(result, jsparse.BCOO) and str(result.dtype) == "float64"
        with enable_x64(True):
            dense = np.asarray(result.todense())
        np.testing.assert_allclose(dense, reference(x_np).toarray(), rtol=1e-10, atol=1e-10)


def test_auto_keeps_direct_recovery_in_single_precision():
    # substitution's rounding grows with a two-colored tree's size: in float32 "auto" takes star
    x = np.linspace(-1, 1, 400)
    backend = di.AutoFiniteDiff()
    assert di.prepare_hessian(AutoSparse(backend), problems.banded, x).sparse_mode == "acyclic"
    single = di.prepare_hessian(AutoSparse(backend), problems.banded, x.astype(np.float32))
    assert (single.sparse_mode, single.ncolors) == ("star", 5)
    asked = AutoSparse(backend, coloring=GreedyColoring(symmetric="acyclic"))
    assert di.prepare_hessian(asked, problems.banded, x.astype(np.float32)).sparse_mode == "acyclic"
