"""AutoSparse (issue 16): sparse Jacobians and Hessians on every dense backend, against closed forms.

The problems (``diffinterface.testing._sparse_problems``) carry closed-form derivatives assembled with
scipy.sparse; every sparse result is compared with them entry by entry (1e-10 relative for AD, the
finite-difference tolerance for AutoFiniteDiff), prepared and unprepared, each twice. The pattern,
the colors and the structure of the returned matrices are checked too.
"""

from __future__ import annotations

import numpy as np
import pytest

sp = pytest.importorskip("scipy.sparse")

import _gierer_meinhardt as gm  # noqa: E402
import diffinterface as di  # noqa: E402
from conftest import AD_ENGINES, engine_marks, installed  # noqa: E402
from diffinterface.sparse import (  # noqa: E402
    AutoSparse,
    GreedyColoring,
    KnownSparsity,
    LocalSparsityDetector,
    LocalSparsityWarning,
    TracerError,
)
from diffinterface.testing._sparse_problems import (  # noqa: E402
    arrowhead,
    diffusion,
    diffusion_jacobian,
    sparse_problems,
)


def _dense_backends() -> list:
    """AutoFiniteDiff, every AD engine (conftest's AD_ENGINES) and JAX in reverse mode."""
    out = [pytest.param(di.AutoFiniteDiff(), id="AutoFiniteDiff")]
    for name, engine, extra in AD_ENGINES:
        for config in [getattr(di, name)()] + ([di.AutoJAX(mode="reverse")] if engine == "jax" else []):
            out.append(pytest.param(config, marks=engine_marks(engine, extra), id=repr(config)))
    return out


DENSE = _dense_backends()
PROBLEMS = {p.name: p for p in sparse_problems("test")}


def _tol(backend, operator):
    if isinstance(backend, di.AutoFiniteDiff):
        return 1e-5 if operator == "hessian" else 1e-7
    return max(1e-10, _engine_tol(backend, operator == "hessian"))


def _engine_tol(backend, second: bool = True) -> float:
    """The engine's documented float64 accuracy (AutoMLX's float32-accurate sin and cos), else 0."""
    own = getattr(backend, "tolerance", None)
    return 0.0 if own is None else own(np.float64, second)


def _check(result, reference, tol):
    assert sp.issparse(result) and result.format == "csr", type(result)
    ref = sp.csr_array(reference)
    assert result.shape == ref.shape
    scale = max(1.0, float(np.abs(ref.data).max()))
    err = abs(sp.csr_array(result) - ref).max()  # sparse arithmetic: nothing densified (n = 1e5)
    assert err <= tol * scale, (err, tol * scale)


@pytest.mark.parametrize("backend", DENSE)
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_problems_against_closed_forms(backend, name):
    problem = PROBLEMS[name]
    sparse = AutoSparse(backend)
    op, prep_op = (
        (di.jacobian, di.prepare_jacobian) if problem.operator == "jacobian" else (di.hessian, di.prepare_hessian)
    )
    x = problem.x
    rng = np.random.default_rng(0)
    other = x + 0.05 * rng.standard_normal(x.shape)
    prep = prep_op(sparse, problem.f, other)  # prepared at another point
    tol = _tol(backend, problem.operator)
    for _ in range(2):
        _check(op(sparse, problem.f, x), problem.reference(x), tol)
        _check(op(sparse, problem.f, x, prep=prep), problem.reference(x), tol)
    # the pattern the tracer found is the closed form's, and the colors are few
    assert (prep.sparsity != (problem.reference(x) != 0)).nnz == 0
    n_colors = prep.colors.max() + 1
    if problem.colors is not None:
        assert n_colors == problem.colors, (prep.sparse_mode, n_colors)
    assert n_colors <= 12
    if problem.operator == "hessian":
        y, g, H = di.value_gradient_and_hessian(sparse, problem.f, x, prep=prep)
        _check(H, problem.reference(x), tol)
        # f's value: the engine's float64 accuracy (AutoMLX: float32-accurate cos and sin)
        np.testing.assert_allclose(y, problem.f(x), rtol=max(1e-12, _engine_tol(backend, False)))
        np.testing.assert_allclose(g, di.gradient(backend, problem.f, x), rtol=1e-6 if tol > 1e-9 else 1e-12)
    else:
        y, J = di.value_and_jacobian(sparse, problem.f, x, prep=prep)
        _check(J, problem.reference(x), tol)
        np.testing.assert_allclose(y, problem.f(x), rtol=1e-12)


@pytest.mark.parametrize("backend", DENSE)
def test_brusselator_colors_and_mode(backend):
    problem = PROBLEMS["brusselator_8"]
    prep = di.prepare_jacobian(AutoSparse(backend), problem.f, problem.x)
    mode = getattr(backend, "mode", None)
    assert prep.sparse_mode == ("rows" if mode == "reverse" else "columns")
    assert 8 <= prep.colors.max() + 1 <= 12  # 5-point stencil and the u-v coupling


def _families():
    """(family, engine): each family's sparse type (MLX has none: scipy.sparse, as for NumPy)."""
    out = []
    for fam, config in [
        ("jax", "AutoJAX"),
        ("torch", "AutoTorch"),
        ("tensorflow", "AutoTensorFlow"),
        ("mlx", "AutoMLX"),
    ]:
        if installed(fam):
            out.append(pytest.param(fam, getattr(di, config)(), id=fam))
    return out


@pytest.mark.parametrize("fam, backend", _families())
def test_results_in_the_family_of_x(fam, backend):
    x_np = PROBLEMS["diffusion"].x
    ref = diffusion_jacobian(x_np).toarray()
    h_np = PROBLEMS["arrowhead"].x
    href = PROBLEMS["arrowhead"].reference(h_np).toarray()
    if fam == "jax":
        import jax.numpy as jnp
        from jax.experimental import sparse as jsparse

        from diffinterface.backends.jax import enable_x64

        with enable_x64(True):
            x, xh = jnp.asarray(x_np), jnp.asarray(h_np)

        def dense(m):  # float64 JAX arrays need x64 for any operation on them, todense too
            with enable_x64(True):
                return np.asarray(m.todense())

        kind = jsparse.BCOO
    elif fam == "torch":
        import torch

        x, xh = torch.tensor(x_np), torch.tensor(h_np)
        kind, dense = torch.Tensor, lambda m: m.to_dense().numpy()
    elif fam == "tensorflow":
        import tensorflow as tf

        x, xh = tf.constant(x_np), tf.constant(h_np)
        kind, dense = tf.sparse.SparseTensor, lambda m: tf.sparse.to_dense(m).numpy()
    else:  # MLX has no sparse arrays: a scipy.sparse.csr_array, as for NumPy
        import mlx.core as mx

        x, xh = mx.array(x_np, dtype=mx.float64), mx.array(h_np, dtype=mx.float64)  # float64 on the CPU
        kind, dense = sp.csr_array, lambda m: m.toarray()
    for b in (backend, di.AutoFiniteDiff()):
        J = di.jacobian(AutoSparse(b), diffusion, x)
        H = di.hessian(AutoSparse(b), arrowhead, xh)
        assert isinstance(J, kind) and isinstance(H, kind)
        assert "float64" in str(J.dtype) and "float64" in str(H.dtype)  # float64 kept
        if fam == "torch":
            assert J.layout == torch.sparse_csr and J.values().numel() == 3 * x_np.size - 2
        if fam == "mlx":
            assert J.format == "csr" and J.nnz == 3 * x_np.size - 2
        tol = tol_h = _tol(b, "hessian") if b is not backend else max(1e-10, _engine_tol(b))
        if fam == "mlx" and b is not backend:
            # finite differences over MLX's float32-accurate float64, steps from the MLX family's
            # accuracy: central first differences err by about eps32**(2/3) = 2.4e-5 (measured 2.4e-5),
            # second differences by eps32 * |f| / h**2 with h = eps32**(1/4): 3.4e-2 at |f| = 99
            # (measured 9.5e-3 absolute; with float64 steps the Hessian was off by 4.2)
            eps32 = float(np.finfo(np.float32).eps)
            tol, tol_h = 10 * eps32 ** (2 / 3), eps32**0.5 * max(1.0, abs(float(arrowhead(h_np))))
        np.testing.assert_allclose(dense(J), ref, rtol=tol, atol=tol)
        np.testing.assert_allclose(dense(H), href, rtol=tol_h, atol=tol_h)
        y, J2 = di.value_and_jacobian(AutoSparse(b), diffusion, x)
        np.testing.assert_allclose(dense(J2), ref, rtol=tol, atol=tol)
        if fam == "jax":
            with pytest.raises(TypeError, match="immutable"):
                di.jacobian(AutoSparse(b), diffusion, x, out=J)


def test_out_fills_the_values_of_a_matrix_with_the_pattern_in_place():
    x = PROBLEMS["diffusion"].x
    backend = AutoSparse(di.AutoFiniteDiff())
    prep = di.prepare_jacobian(backend, diffusion, x)
    out = prep.sparsity.astype(float)
    indptr, indices = out.indptr.copy(), out.indices.copy()
    got = di.jacobian(backend, diffusion, x, prep=prep, out=out)
    assert got is out
    np.testing.assert_array_equal(out.indptr, indptr)
    np.testing.assert_array_equal(out.indices, indices)
    np.testing.assert_allclose(out.toarray(), diffusion_jacobian(x).toarray(), rtol=1e-7, atol=1e-7)
    x2 = x + 0.5  # the repeated Newton-solve case: same matrix object, new values
    di.jacobian(backend, diffusion, x2, prep=prep, out=out)
    np.testing.assert_allclose(out.toarray(), diffusion_jacobian(x2).toarray(), rtol=1e-7, atol=1e-7)
    with pytest.raises(ValueError, match="another sparsity pattern"):
        di.jacobian(backend, diffusion, x, prep=prep, out=sp.eye_array(x.size, format="csr"))
    with pytest.raises(TypeError, match="out= must be a scipy.sparse CSR matrix"):
        di.jacobian(backend, diffusion, x, prep=prep, out=np.zeros((x.size, x.size)))


@pytest.mark.skipif(not installed("torch"), reason='torch is not installed: pip install "diffinterface[torch]"')
def test_out_with_a_torch_sparse_tensor():
    import torch

    x = torch.tensor(PROBLEMS["diffusion"].x)
    backend = AutoSparse(di.AutoTorch())
    J = di.jacobian(backend, diffusion, x)
    out = J.clone()
    with torch.no_grad():
        out.values().zero_()
    assert di.jacobian(backend, diffusion, x + 1, out=out) is out
    np.testing.assert_allclose(out.to_dense().numpy(), diffusion_jacobian(x.numpy() + 1).toarray(), rtol=1e-12)


def test_known_and_local_detectors():
    x = PROBLEMS["diffusion"].x
    pattern = diffusion_jacobian(x) != 0
    known = AutoSparse(di.AutoFiniteDiff(), sparsity_detector=KnownSparsity(pattern))
    _check(di.jacobian(known, diffusion, x), diffusion_jacobian(x), 1e-7)
    with pytest.raises(ValueError, match="the jacobian pattern has the wrong shape"):
        di.jacobian(AutoSparse(di.AutoFiniteDiff(), sparsity_detector=KnownSparsity(np.ones((3, 3)))), diffusion, x)
    local = AutoSparse(di.AutoFiniteDiff(), sparsity_detector=LocalSparsityDetector())
    prep = di.prepare_jacobian(local, diffusion, x)
    assert (prep.sparsity != pattern).nnz == 0


@pytest.mark.parametrize("backend", DENSE)
def test_module_global_work_buffers_with_the_local_detector(backend):
    # the seed's Gierer-Meinhardt right-hand side writes into module-global NumPy buffers: the tracer
    # cannot follow a write into a NumPy array (an error naming the other detectors), the local
    # detector (dense Jacobians under the closure policy) can, and the sparse result is exact
    x = np.concatenate([np.linspace(0.5, 1.5, gm.N), np.linspace(1.0, 2.0, gm.N)])
    if getattr(backend, "engine", None) in ("tensorflow", "mlx", "pytensor"):
        # engines whose f is written in their own operations: the default detector falls back to local
        # detection, with the warning (tests/test_sparse_engine_ops.py)
        with pytest.warns(LocalSparsityWarning, match="the Jacobian pattern is detected locally"):
            _check(di.jacobian(AutoSparse(backend), gm.rhs, x), gm.jacobian(x), _tol(backend, "jacobian") * 10)
    else:
        with pytest.raises(TracerError, match="LocalSparsityDetector"):
            di.jacobian(AutoSparse(backend), gm.rhs, x)
    sparse = AutoSparse(backend, sparsity_detector=LocalSparsityDetector(points=2))
    gm.Ayu[...], gm.Ayv[...] = 7.0, -7.0
    prep = di.prepare_jacobian(sparse, gm.rhs, np.ones(2 * gm.N) + 0.5)
    for p in (None, prep):
        _check(di.jacobian(sparse, gm.rhs, x, prep=p), gm.jacobian(x), _tol(backend, "jacobian") * 10)
    assert np.all(gm.Ayu == 7.0) and np.all(gm.Ayv == -7.0)
    assert prep.colors.max() + 1 < 2 * gm.N


def test_tracer_errors_name_the_other_detectors():
    def control_flow(x):
        return x * 2 if x[0] > 0 else x

    def opaque(x):
        return np.asarray(x) * 2

    backend = AutoSparse(di.AutoFiniteDiff())
    for f in (control_flow, opaque):
        with pytest.raises(TracerError, match="KnownSparsity"):
            di.jacobian(backend, f, np.ones(3))


def test_the_tracer_follows_numpy_code_and_finds_global_patterns():
    from diffinterface.sparse import TracerSparsityDetector
    from diffinterface.sparse._detectors import Problem

    def numpy_code(x):  # NumPy functions and operators on the tracer, a NumPy matrix on the left
        A = np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]])
        return np.concatenate([A @ np.sin(x), np.where(x[:1] > 0, x[1:2], x[2:3]), np.sum(x[:2] ** 2, keepdims=True)])

    det = TracerSparsityDetector()
    x = np.ones(3)
    J = det.jacobian_sparsity(Problem(numpy_code, None, 5, numpy_code), x).toarray()
    np.testing.assert_array_equal(J, [[1, 0, 1], [0, 0, 1], [0, 1, 1], [1, 1, 0]][:2] + [[0, 1, 1], [1, 1, 0]])
    H = det.hessian_sparsity(Problem(arrowhead, None, 1, arrowhead), np.ones(6)).toarray()
    np.testing.assert_array_equal(
        H != 0, arrowhead_pattern := (PROBLEMS["arrowhead"].reference(np.ones(6)).toarray() != 0)
    )
    assert arrowhead_pattern.sum() == 3 * 6 - 2

    def products(x):  # x0 * x1 is bilinear (no diagonal), x2**2 only its diagonal, x3 linear
        return x[0] * x[1] + x[2] ** 2 + 3 * x[3]

    H = det.hessian_sparsity(Problem(products, None, 1, products), np.ones(4)).toarray()
    np.testing.assert_array_equal(H, [[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0]])


def test_coloring_options_and_config_errors():
    x = PROBLEMS["diffusion"].x
    natural = AutoSparse(di.AutoFiniteDiff(), coloring=GreedyColoring("natural"))
    _check(di.jacobian(natural, diffusion, x), diffusion_jacobian(x), 1e-7)
    with pytest.raises(TypeError, match="dense must be a backend config"):
        AutoSparse("jax")
    with pytest.raises(
        TypeError, match=r"sparsity_detector=<ndarray of shape \(2, 2\)>.*jacobian_sparsity.*KnownSparsity\(pattern\)"
    ):
        AutoSparse(di.AutoFiniteDiff(), sparsity_detector=np.ones((2, 2)))
    with pytest.raises(
        ValueError, match=r"GreedyColoring\(order='lexicographic'\): order must be one of .*smallest_last"
    ):
        GreedyColoring("lexicographic")
    with pytest.raises(ValueError, match=r"GreedyColoring\(symmetric='direct'\): symmetric must be one of"):
        GreedyColoring(symmetric="direct")
    prep = di.prepare_gradient(di.AutoFiniteDiff(), arrowhead, np.ones(3))
    with pytest.raises(AttributeError, match="AutoSparse"):
        _ = prep.sparsity
    # other operators are the dense backend's
    g = di.gradient(AutoSparse(di.AutoFiniteDiff()), arrowhead, np.ones(3))
    np.testing.assert_allclose(g, di.gradient(di.AutoFiniteDiff(), arrowhead, np.ones(3)))


def _bench_backends():
    out = []
    for config, engine in [(di.AutoJAX(), "jax"), (di.AutoTorch(), "torch")]:
        marks = (
            ()
            if installed(engine)
            else pytest.mark.skip(reason=f'{engine} is not installed: pip install "diffinterface[{engine}]"')
        )
        out.append(pytest.param(config, marks=marks, id=repr(config)))
    return out


@pytest.mark.parametrize("backend", _bench_backends())
def test_the_issue_sizes(backend):
    # the problems at the sizes of the issue and the bench: tridiagonal n = 1e5, Brusselator N = 32,
    # arrowhead and banded Hessians n = 1e4, against the closed forms (float64, 1e-10)
    from diffinterface.testing import _sparse_problems as sparse_problems_module

    rng = np.random.default_rng(1)
    sparse = AutoSparse(backend)
    x = rng.uniform(-1, 1, 100_000)
    _check(di.jacobian(sparse, diffusion, x), diffusion_jacobian(x), 1e-10)
    x = sparse_problems_module.brusselator_x0(32) + 0.1 * rng.standard_normal(2 * 32 * 32)
    prep = di.prepare_jacobian(sparse, sparse_problems_module.brusselator, x)
    assert prep.ncolors == prep.colors.max() + 1 <= 10  # dynamic largest first (largest first: 12)
    _check(
        di.jacobian(sparse, sparse_problems_module.brusselator, x, prep=prep),
        sparse_problems_module.brusselator_jacobian(x),
        1e-10,
    )
    x = rng.uniform(-1, 1, 10_000)
    for f, reference in [
        (arrowhead, sparse_problems_module.arrowhead_hessian),
        (sparse_problems_module.banded, sparse_problems_module.banded_hessian),
    ]:
        _check(di.hessian(sparse, f, x), reference(x), 1e-10)


@pytest.mark.parametrize("backend", DENSE)
def test_constant_contexts_reach_f_and_a_new_value_is_seen(backend):
    # f(x, p): a parameter as a Constant context, read by the detector and the compressed calls
    def f(x, p):
        from array_api_compat import array_namespace

        xp = array_namespace(x)
        return diffusion(x) * p[0] + xp.sin(x) * p[1]

    x = PROBLEMS["diffusion"].x
    sparse = AutoSparse(backend)
    prep = di.prepare_jacobian(sparse, f, x, di.Constant(np.array([1.0, 0.0])))
    tol = _tol(backend, "jacobian")
    for p in (np.array([1.0, 0.0]), np.array([2.0, 0.5])):
        expected = p[0] * diffusion_jacobian(x) + sp.diags_array(p[1] * np.cos(x))
        _check(di.jacobian(sparse, f, x, di.Constant(p), prep=prep), expected, tol)
        _check(di.jacobian(sparse, f, x, di.Constant(p)), expected, tol)


# -- a pattern that depends on what f captures ----------------------------------------------------

_IDX = np.array([0, 1, 2, 3])


def _gathered_squares(z):  # J[i, idx[i]] = 2 z[idx[i]]: its pattern is where _IDX points
    from array_api_compat import array_namespace, device

    xp = array_namespace(z)
    return z[xp.asarray(_IDX, device=device(z))] ** 2


def _gathered_cubes(z):  # H = diag(6 z) on _IDX[:2] alone
    from array_api_compat import array_namespace, device

    xp = array_namespace(z)
    return xp.sum(z[xp.asarray(_IDX[:2], device=device(z))] ** 3)


def _constant_squares(z, idx):
    from array_api_compat import array_namespace, device

    xp = array_namespace(z)
    return z[xp.asarray(idx, device=device(z))] ** 2


def _gather_backends() -> list:
    out = [pytest.param(di.AutoFiniteDiff(), id="AutoFiniteDiff")]
    for name, module in (("AutoTorch", "torch"), ("AutoJAX", "jax"), ("AutoAutograd", "autograd")):
        if installed(module):
            out.append(pytest.param(getattr(di, name)(), id=name))
    return out


@pytest.mark.parametrize("change", ["rebound", "written", "constant"])
@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
@pytest.mark.parametrize("dense", _gather_backends())
def test_a_pattern_follows_what_f_captures_when_it_changes(dense, prepared, change):
    """The pattern depends on the index array f captures (or takes as a Constant): a loop that changes
    it gets each call's own Jacobian and Hessian, unprepared (the prep the cache keeps from the third
    call on) and with a prep made before the changes, where before the first index's pattern served
    every later call and dropped nonzeros without an error."""
    global _IDX
    backend = AutoSparse(dense)
    x = np.arange(1.0, 5.0)
    tol = _tol(dense, "hessian")
    first = np.arange(4)
    _IDX = first.copy()
    if change == "constant":
        jac_f, args = _constant_squares, lambda idx: (di.Constant(idx.copy()),)
    else:
        jac_f, args = _gathered_squares, lambda idx: ()
    preps = (
        (
            di.prepare_jacobian(backend, jac_f, x, *args(first)),
            None if change == "constant" else di.prepare_hessian(backend, _gathered_cubes, x),
        )
        if prepared
        else (None, None)
    )
    for k in range(6):
        idx = np.roll(first, k)
        if change == "rebound":
            _IDX = idx.copy()
        elif change == "written":
            _IDX[...] = idx  # the same array, other values
        J = di.jacobian(backend, jac_f, x, *args(idx), prep=preps[0])
        want = np.zeros((4, 4))
        want[np.arange(4), idx] = 2 * x[idx]
        np.testing.assert_allclose(J.toarray() if hasattr(J, "toarray") else _check_dense(J), want, atol=tol)
        if preps[0] is not None:
            assert np.array_equal(preps[0].sparsity.toarray(), want != 0)  # the pattern it computed with
        if change != "constant":
            H = di.hessian(backend, _gathered_cubes, x, prep=preps[1])
            want_h = np.zeros((4, 4))
            want_h[idx[:2], idx[:2]] = 6 * x[idx[:2]]
            np.testing.assert_allclose(H.toarray() if hasattr(H, "toarray") else _check_dense(H), want_h, atol=tol)


def _check_dense(result):
    """A sparse result of an engine's own type (torch's sparse CSR tensor, JAX's BCOO) as a numpy array."""
    if hasattr(result, "to_dense"):
        return result.to_dense().numpy()
    return np.asarray(result.todense())


def test_an_unchanged_capture_keeps_the_pattern_and_a_known_one_is_never_detected_again():
    """With what f captures unchanged, a prep's calls reuse its plan (no detection); a KnownSparsity
    pattern is the user's: its prep is never detected again, whatever f captures."""
    global _IDX
    _IDX = np.arange(4)
    x = np.arange(1.0, 5.0)
    prep = di.prepare_jacobian(AutoSparse(di.AutoFiniteDiff()), _gathered_squares, x)
    plan = prep.data.data
    for _ in range(3):
        di.jacobian(AutoSparse(di.AutoFiniteDiff()), _gathered_squares, x, prep=prep)
    assert prep.data.data is plan
    known = AutoSparse(di.AutoFiniteDiff(), sparsity_detector=KnownSparsity(np.eye(4, dtype=bool)))
    kprep = di.prepare_jacobian(known, _gathered_squares, x)
    _IDX = np.array([1, 0, 2, 3])
    di.jacobian(known, _gathered_squares, x, prep=kprep)
    assert np.array_equal(kprep.sparsity.toarray(), np.eye(4, dtype=bool))  # the user's, as given
