"""The sparsity detectors on the examples of issue 38, item 7: the tracer and ``xp.asarray(A) @ z**2``,
the jaxpr detector and ``jnp.stack``, ``LocalSparsityDetector`` with a float64 JAX x and ``f(y, x)``.

References: the closed-form Jacobians, or JAX's own ``jax.jacfwd``.
"""

from __future__ import annotations

import numpy as np
import pytest
from array_api_compat import array_namespace

import diffinterface as di
from conftest import installed
from diffinterface.sparse import AutoSparse, JaxprSparsityDetector, LocalSparsityDetector

A = np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]])
X = [1.0, 2.0, 3.0]


def _dense_backends() -> list:
    out = [pytest.param(di.AutoFiniteDiff(), "numpy", id="AutoFiniteDiff")]
    for cls, engine in [(di.AutoJAX, "jax"), (di.AutoTorch, "torch"), (di.AutoAutograd, "autograd")]:
        mark = () if installed(engine) else pytest.mark.skip(reason=f'pip install "diffinterface[{engine}]"')
        out.append(pytest.param(cls(), engine, marks=mark, id=cls.__name__))
    return out


def _x(family: str):
    if family == "torch":
        import torch

        return torch.tensor(X, dtype=torch.float64)
    if family == "jax":
        import jax

        with jax.enable_x64(True):
            return jax.numpy.asarray(X, dtype=jax.numpy.float64)
    return np.array(X)


def _dense(result) -> np.ndarray:
    """A sparse result (scipy's, JAX's BCOO, torch's sparse tensor) as a NumPy array."""
    for method in ("toarray", "todense", "to_dense"):
        if hasattr(result, method):
            result = getattr(result, method)()
            break
    return np.asarray(result, dtype=float)


@pytest.mark.parametrize(("dense", "family"), _dense_backends())
def test_item7_tracer_follows_a_constant_given_as_xp_asarray(dense, family):
    def f(z):
        xp = array_namespace(z)
        return xp.asarray(A) @ z**2

    x = _x(family)
    sparse = AutoSparse(dense)
    prep = di.prepare_jacobian(sparse, f, x)
    np.testing.assert_array_equal(prep.sparsity.toarray(), A != 0)  # A's own pattern, not a dense one
    tol = 1e-5 if family == "numpy" else 1e-6
    np.testing.assert_allclose(_dense(di.jacobian(sparse, f, x, prep=prep)), A * (2 * np.array(X)), rtol=tol)


def test_item7_tracer_constants_of_unknown_value_and_constant_indices():
    """A constant computed from constants has no known value: every entry may be nonzero (a pattern
    denser than need be, never one that misses an entry); indices given as ``xp.asarray(idx)`` are known."""

    def f(z):
        xp = array_namespace(z)
        b = xp.asarray(A) * 2.0 - 1.0  # every entry nonzero here: the dense pattern is the true one
        return b @ z**2 + z[xp.asarray([2, 0])]

    x = np.array(X)
    sparse = AutoSparse(di.AutoFiniteDiff())
    prep = di.prepare_jacobian(sparse, f, x)
    assert prep.sparsity.toarray().all()
    expected = (2 * A - 1) * (2 * x) + np.eye(3)[[2, 0]]
    np.testing.assert_allclose(_dense(di.jacobian(sparse, f, x, prep=prep)), expected, rtol=1e-5)


def test_item7_tracer_follows_a_write_into_a_constant():
    """A constant written with a traced value is traced (its dependencies follow the write; its
    known value is dropped, and a product with it is taken as structurally nonzero)."""

    def f(z):
        xp = array_namespace(z)
        buf = xp.asarray(np.zeros(3))
        buf[1] = z[0]
        return buf * z

    x = np.array(X)
    sparse = AutoSparse(di.AutoFiniteDiff())
    prep = di.prepare_jacobian(sparse, f, x)
    expected = np.array([[0, 0, 0], [x[1], x[0], 0], [0, 0, 0]])
    # a superset of the true pattern: buf[0] * z[0] is a constant times x[0] (global: any constant)
    np.testing.assert_array_equal(prep.sparsity.toarray(), [[1, 0, 0], [1, 1, 0], [0, 0, 1]])
    np.testing.assert_allclose(_dense(di.jacobian(sparse, f, x, prep=prep)), expected, rtol=1e-5)


@pytest.mark.parametrize(
    "stacked",
    [
        pytest.param(lambda jnp, z: jnp.stack([z[0] * z[1], z[2] ** 2]), id="scalars"),
        pytest.param(lambda jnp, z: jnp.stack([z[:2], z[1:] ** 2], axis=1).ravel(), id="vectors-axis1"),
        pytest.param(lambda jnp, z: jnp.stack([z[:2], jnp.ones(2)]).ravel() * z[0], id="with-a-constant"),
    ],
)
def test_item7_jaxpr_detector_follows_jnp_stack(stacked):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def f(z):
        return stacked(jnp, z)

    with jax.enable_x64(True):
        x = jnp.asarray(X, dtype=jnp.float64)
        reference = np.asarray(jax.jacfwd(f)(x))
    sparse = AutoSparse(di.AutoJAX(), sparsity_detector=JaxprSparsityDetector())
    prep = di.prepare_jacobian(sparse, f, x)
    np.testing.assert_array_equal(prep.sparsity.toarray(), reference != 0)
    np.testing.assert_allclose(_dense(di.jacobian(sparse, f, x, prep=prep)), reference, rtol=1e-6)


def _in_place(y, x):
    y[0] = x[0] * x[1]
    y[1] = x[2] ** 2


IN_PLACE_JACOBIAN = np.array([[X[1], X[0], 0.0], [0.0, 0.0, 2 * X[2]]])


@pytest.mark.filterwarnings("error::FutureWarning")  # JAX's scatter of float32 into float64, an error to come
@pytest.mark.parametrize("y_kind", ["numpy", "jax"])
def test_item7_local_detector_with_a_float64_jax_x_and_f_y_x(y_kind):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    with jax.enable_x64(True):  # float64 arrays while the global x64 setting stays off
        x = jnp.asarray(X, dtype=jnp.float64)
        y = jnp.zeros(2, dtype=jnp.float64) if y_kind == "jax" else np.zeros(2)
    sparse = AutoSparse(di.AutoJAX(), sparsity_detector=LocalSparsityDetector())
    prep = di.prepare_jacobian(sparse, _in_place, x, y=y)
    np.testing.assert_array_equal(prep.sparsity.toarray(), IN_PLACE_JACOBIAN != 0)
    got = di.jacobian(sparse, _in_place, x, y=y, prep=prep)
    assert got.dtype == np.float64
    with jax.enable_x64(True):  # BCOO.todense() outside it would round to float32
        np.testing.assert_allclose(_dense(got), IN_PLACE_JACOBIAN, rtol=1e-14)
    np.testing.assert_array_equal(np.asarray(y), [0.0, 0.0])  # the user's y is a template only


def test_detector_errors_name_the_call():
    """A pattern the tracer cannot follow (a write into a captured NumPy buffer): the ``TracerError``
    starts with the call, as every error does (found by tests/test_differential.py)."""
    from diffinterface.sparse import TracerError

    buf = np.zeros(2)

    def f(x):
        buf[0:1] = x[0:1]
        return x * 1.0 + buf

    with pytest.raises(TracerError, match=r"^jacobian\(AutoSparse\(dense=AutoFiniteDiff\(\)\), f, x\): the sparsity"):
        di.jacobian(AutoSparse(di.AutoFiniteDiff()), f, np.ones(2))
    with pytest.raises(TracerError, match=r"^hessian\(AutoSparse\(dense=AutoFiniteDiff\(\)\), f, x\): the sparsity"):
        di.hessian(AutoSparse(di.AutoFiniteDiff()), lambda z: np.sum(f(z) ** 2), np.ones(2))


def test_jaxpr_detector_errors_name_the_call():
    jax = pytest.importorskip("jax")
    from diffinterface.sparse import TracerError

    def f(z):
        return jax.numpy.sort(z) * z  # a primitive the jaxpr detector does not follow

    sparse = AutoSparse(di.AutoJAX(), sparsity_detector=JaxprSparsityDetector())
    with pytest.raises(
        TracerError, match=r"^jacobian\(AutoSparse\(dense=AutoJAX\(\), .*\), f, x\): the jaxpr sparsity"
    ):
        di.jacobian(sparse, f, np.ones(3))


@pytest.mark.skipif(not installed("torch"), reason='pip install "diffinterface[torch]"')
def test_item11_tracer_reads_a_captured_torch_constant():
    """Issue 38 item 11: a torch x reading a captured torch matrix (``A @ z**2``, ``z**2 @ A``,
    ``A[0] * z``) is traced with the matrix as a constant, not refused."""
    import torch

    rng = np.random.default_rng(3)
    a = torch.tensor(rng.standard_normal((3, 3)))
    a[0, 2] = 0.0  # a structural zero of the product
    x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    expected = [a.numpy() != 0, a.numpy().T != 0, np.eye(3, dtype=bool)]  # the structural patterns
    for f, pattern in zip((lambda z: a @ z**2, lambda z: z**2 @ a, lambda z: a[0] * z), expected):
        prep = di.prepare_jacobian(AutoSparse(di.AutoTorch()), f, x)
        dense = di.jacobian(di.AutoTorch(), f, x).numpy()
        np.testing.assert_array_equal(prep.sparsity.toarray(), pattern)
        np.testing.assert_allclose(
            di.jacobian(AutoSparse(di.AutoTorch()), f, x, prep=prep).to_dense().numpy(), dense, rtol=1e-12
        )
