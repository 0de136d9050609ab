"""The jaxpr sparsity detector (issue 16): patterns read from JAX's jaxpr, against the closed forms
of the sparse problems, functions written with jax.numpy only, and module-global work buffers."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("scipy.sparse")
jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402

import _gierer_meinhardt as gm  # noqa: E402
import diffinterface as di  # noqa: E402
from diffinterface.sparse import AutoSparse, JaxprSparsityDetector, TracerError  # noqa: E402
from diffinterface.testing._sparse_problems import sparse_problems  # noqa: E402

PROBLEMS = sparse_problems("test")
BACKENDS = [di.AutoJAX(), di.AutoFiniteDiff()]


@pytest.mark.parametrize("backend", BACKENDS, ids=repr)
@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.name)
def test_patterns_of_the_problems(problem, backend):
    sparse = AutoSparse(backend, sparsity_detector=JaxprSparsityDetector())
    prep_op, op = (
        (di.prepare_jacobian, di.jacobian) if problem.operator == "jacobian" else (di.prepare_hessian, di.hessian)
    )
    prep = prep_op(sparse, problem.f, problem.x)
    reference = problem.reference(problem.x)
    assert (prep.sparsity != (reference != 0)).nnz == 0  # the closed form's pattern, exactly
    got = op(sparse, problem.f, problem.x, prep=prep)
    tol = 1e-10 if isinstance(backend, di.AutoJAX) else 1e-5
    assert abs(got - reference).max() <= tol * max(1.0, abs(reference).max())


def test_jax_numpy_code_the_array_api_tracer_cannot_follow():
    # jnp.roll with a traced array, .at[].set, jnp.where, a jit inside f, a matrix constant
    A = np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]])

    @jax.jit
    def inner(z):
        return jnp.sin(z) * 2

    def f(x):
        y = jnp.zeros(5).at[1:4].set(inner(x))
        y = y.at[0].set(x[2] ** 2)
        return jnp.concatenate([jnp.roll(y, 1), jnp.asarray(A) @ x, jnp.where(x[:1] > 0, x[1:2], x[2:3])])

    x = np.array([0.3, -0.4, 0.5])
    sparse = AutoSparse(di.AutoJAX(), sparsity_detector=JaxprSparsityDetector())
    prep = di.prepare_jacobian(sparse, f, x)
    dense = np.asarray(di.jacobian(di.AutoJAX(), f, x))
    expected = dense != 0
    expected[7, 2] = True  # where(): both branches count in a global pattern, x[2] is the one not taken here
    np.testing.assert_array_equal(prep.sparsity.toarray(), expected)
    np.testing.assert_allclose(di.jacobian(sparse, f, x, prep=prep).toarray(), dense, rtol=1e-12)
    with pytest.raises(TracerError):  # jnp code is not the array API: the default tracer stops
        di.jacobian(AutoSparse(di.AutoJAX()), f, x)


def test_module_global_work_buffers():
    # Gierer-Meinhardt writes into module-global NumPy buffers: the JAX adapter's writable stand-ins
    # make them updates in the jaxpr, so the global pattern is read exactly
    x = np.concatenate([np.linspace(0.5, 1.5, gm.N), np.linspace(1.0, 2.0, gm.N)])
    gm.Ayu[...], gm.Ayv[...] = 7.0, -7.0
    for backend in (di.AutoJAX(), di.AutoFiniteDiff(), di.AutoTorch()):
        sparse = AutoSparse(backend, sparsity_detector=JaxprSparsityDetector())
        prep = di.prepare_jacobian(sparse, gm.rhs, x)
        reference = gm.jacobian(x)
        np.testing.assert_array_equal(prep.sparsity.toarray(), reference != 0)
        tol = 1e-6 if isinstance(backend, di.AutoFiniteDiff) else 1e-12
        np.testing.assert_allclose(di.jacobian(sparse, gm.rhs, x, prep=prep).toarray(), reference, rtol=tol, atol=tol)
    assert np.all(gm.Ayu == 7.0) and np.all(gm.Ayv == -7.0)


def test_value_dependent_indexing_and_unknown_primitives_raise():
    def dynamic(x):
        return x[jnp.argmax(x)] * x

    def loop(x):
        return jax.lax.fori_loop(0, 3, lambda i, v: v * 2, x)

    sparse = AutoSparse(di.AutoJAX(), sparsity_detector=JaxprSparsityDetector())
    for f in (dynamic, loop):
        with pytest.raises(TracerError, match="KnownSparsity"):
            di.jacobian(sparse, f, np.ones(3))
