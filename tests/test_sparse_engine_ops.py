"""AutoSparse's default detector on f written in the dense engine's own operations (issue 40):
``tf.*`` for AutoTensorFlow, ``mx.*`` for AutoMLX, ``pytensor.tensor`` for AutoPyTensor.

The engine-free tracer cannot run such an f; these engines' adapters declare
``local_sparsity_fallback``, so the default detector detects the pattern locally (the nonzeros of
the engine's dense derivatives at x and around it) with a ``LocalSparsityWarning``. References: the
engine's own dense Jacobian or Hessian (and the closed-form pattern); the colors are the known optimum
of each pattern.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

sp = pytest.importorskip("scipy.sparse")

import diffinterface as di  # noqa: E402
from conftest import installed  # noqa: E402
from diffinterface.extend import to_family  # noqa: E402
from diffinterface.sparse import (  # noqa: E402
    AutoSparse,
    LocalSparsityDetector,
    LocalSparsityWarning,
    TracerError,
    TracerSparsityDetector,
)
from diffinterface.testing._sparse_problems import arrowhead, banded, diffusion  # noqa: E402

N = 12


def _ops(engine: str) -> dict:
    """The engine's own sin, cos, sum and concatenate."""
    if engine == "tensorflow":
        import tensorflow as tf

        return {"sin": tf.sin, "cos": tf.cos, "sum": tf.reduce_sum, "concat": lambda xs: tf.concat(xs, 0)}
    if engine == "mlx":
        import mlx.core as mx

        return {"sin": mx.sin, "cos": mx.cos, "sum": mx.sum, "concat": lambda xs: mx.concatenate(xs, 0)}
    import pytensor.tensor as pt

    return {"sin": pt.sin, "cos": pt.cos, "sum": pt.sum, "concat": lambda xs: pt.concatenate(xs, 0)}


def _functions(o: dict) -> dict:
    """(f, operator, closed-form pattern, colors at mode=None, sparse_mode at mode=None)."""

    def band(x):  # y_i = x_i - 2 sin(x_{i+1}) + x_{i+2}**2: three diagonals, 3 column colors
        return x[:-2] - 2 * o["sin"](x[1:-1]) + x[2:] ** 2

    def arrow(x):  # a full first row and column and a diagonal: 3 products bicolored, n one-sided
        return o["concat"]([o["sum"](x**2)[None], x[0] * o["sin"](x[1:])])

    def band_hessian(x):  # half-bandwidth 2: 3 acyclic colors (5 star)
        return o["sum"](o["sin"](x[:-2] + 2 * x[1:-1] + 3 * x[2:])) + o["sum"](x**4) / 12

    def arrow_hessian(x):  # an arrowhead Hessian: 2 star colors
        return o["sum"](o["cos"](x[0] + x[1:])) + o["sum"](x**2) / 2

    band_pattern = sp.diags_array([np.ones(N - 2)] * 3, offsets=[0, 1, 2], shape=(N - 2, N)).toarray() != 0
    arrow_pattern = np.eye(N, dtype=bool)
    arrow_pattern[0, :] = arrow_pattern[:, 0] = True
    hband = sp.diags_array([np.ones(N - abs(k)) for k in range(-2, 3)], offsets=range(-2, 3)).toarray() != 0
    return {
        "band": (band, "jacobian", band_pattern, 3, "columns"),
        "arrowhead": (arrow, "jacobian", arrow_pattern, 3, "bidirectional"),
        "band_hessian": (band_hessian, "hessian", hband, 3, "acyclic"),
        "arrowhead_hessian": (arrow_hessian, "hessian", arrow_pattern, 2, "star"),
    }


ENGINES = [("AutoTensorFlow", "tensorflow"), ("AutoMLX", "mlx"), ("AutoPyTensor", "pytensor")]


def _params() -> list:
    out = []
    for config, engine in ENGINES:
        mark = () if installed(engine) else pytest.mark.skip(reason=f'pip install "diffinterface[{engine}]"')
        for inputs in ("numpy", "own") if engine != "pytensor" else ("numpy",):  # PyTensor: numpy in and out
            out.extend(
                pytest.param(config, engine, inputs, name, marks=mark, id=f"{config}-{inputs}-{name}")
                for name in ("band", "arrowhead", "band_hessian", "arrowhead_hessian")
            )
    return out


def _x(engine: str, inputs: str):
    x = np.linspace(0.3, 1.4, N)
    if inputs == "numpy":
        return x
    if engine == "tensorflow":
        import tensorflow as tf

        return tf.constant(x)
    import mlx.core as mx

    return mx.array(x, dtype=mx.float64)  # float64 on the CPU


def _as_numpy(result, engine: str, inputs: str) -> np.ndarray:
    """The sparse result, checked to be of the documented type, as a dense NumPy array."""
    if engine == "tensorflow" and inputs == "own":
        import tensorflow as tf

        assert isinstance(result, tf.sparse.SparseTensor), type(result)
        assert result.dtype == tf.float64
        return tf.sparse.to_dense(result).numpy()
    # NumPy inputs, MLX's arrays (MLX has no sparse type) and PyTensor: a scipy.sparse CSR array
    assert isinstance(result, sp.csr_array), type(result)
    assert result.dtype == np.float64
    return result.toarray()


def _tol(backend, second: bool) -> float:
    own = getattr(backend, "tolerance", None)  # AutoMLX: float64 sin and cos are float32-accurate
    return 1e-12 if own is None else own(np.float64, second)


@pytest.mark.parametrize(("config", "engine", "inputs", "name"), _params())
def test_default_detector_on_engine_ops_against_the_dense_derivative(config, engine, inputs, name):
    f, operator, pattern, colors, mode = _functions(_ops(engine))[name]
    dense = getattr(di, config)()
    sparse = AutoSparse(dense)
    x = _x(engine, inputs)
    op, prep_op = (di.jacobian, di.prepare_jacobian) if operator == "jacobian" else (di.hessian, di.prepare_hessian)
    call = f"{operator}(AutoSparse(dense={config}()), f, x)"
    label = "Jacobian" if operator == "jacobian" else "Hessian"
    with pytest.warns(LocalSparsityWarning, match=f"^{re.escape(call)}: the {label} pattern is detected locally"):
        prep = prep_op(sparse, f, x)
    np.testing.assert_array_equal(prep.sparsity.toarray(), pattern)  # the closed form's pattern
    assert prep.ncolors == colors and prep.sparse_mode == mode, (prep.ncolors, prep.sparse_mode)
    reference = np.asarray(to_family(op(dense, f, x), "numpy"))  # the engine's dense derivative
    tol = _tol(dense, operator == "hessian")
    scale = max(1.0, float(np.abs(reference).max()))
    for result in (op(sparse, f, x, prep=prep), op(sparse, f, x, prep=prep)):
        got = _as_numpy(result, engine, inputs)
        np.testing.assert_allclose(got, reference, rtol=0, atol=tol * scale)
    assert np.all(reference[~pattern] == 0)  # the dense derivative has nothing outside the pattern


@pytest.mark.parametrize(("config", "engine"), [pytest.param(c, e, id=c) for c, e in ENGINES])
def test_array_api_f_keeps_the_global_tracer_and_the_fallback_can_be_refused(config, engine):
    if not installed(engine):
        pytest.skip(f'pip install "diffinterface[{engine}]"')
    dense = getattr(di, config)()
    x = np.linspace(0.3, 1.4, N)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LocalSparsityWarning)  # the tracer runs array-API code: global, no warning
        J = di.jacobian(AutoSparse(dense), diffusion, x)
        H = di.hessian(AutoSparse(dense), banded, x)
        H2 = di.hessian(AutoSparse(dense), arrowhead, x)
    assert J.nnz == 3 * N - 2 and H.nnz == 5 * N - 6 and H2.nnz == 3 * N - 2
    # local_fallback=False: the tracer's error, naming the call and the other detectors
    f = _functions(_ops(engine))["band"][0]
    with pytest.raises(TracerError, match=rf"^jacobian\(AutoSparse\(dense={config}\(\), .*\), f, x\): .*KnownSparsity"):
        di.jacobian(AutoSparse(dense, sparsity_detector=TracerSparsityDetector(local_fallback=False)), f, x)
    # chosen knowingly: no warning, the same pattern
    with warnings.catch_warnings():
        warnings.simplefilter("error", LocalSparsityWarning)
        prep = di.prepare_jacobian(AutoSparse(dense, sparsity_detector=LocalSparsityDetector()), f, x)
    assert prep.sparsity.nnz == 3 * (N - 2)


def test_engines_without_the_fallback_still_raise():
    """AutoFiniteDiff (and JAX, torch, autograd) keep the tracer's error: their f is array-API or NumPy code."""
    f = lambda x: np.asarray(x)[1:] * 2  # noqa: E731  # a conversion the tracer cannot follow
    with pytest.raises(TracerError, match=r"^jacobian\(AutoSparse\(dense=AutoFiniteDiff\(\)\), f, x\): "):
        di.jacobian(AutoSparse(di.AutoFiniteDiff()), f, np.ones(4))
