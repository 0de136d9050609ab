"""AutoMLX: the catalogue in every mode and family, float64 on MLX's CPU stream, closures, rules, errors."""

from __future__ import annotations

import numpy as np
import pytest

import diffinterface as di
from conftest import MODE_IDS, MODES, covering, family_dtype_params, first_calls_are_checked_not_walked, installed
from diffinterface.testing import check_scenario, default_scenarios, test_differentiation

pytestmark = pytest.mark.skipif(not installed("mlx"), reason='mlx is not installed: pip install "diffinterface[mlx]"')

# MLX has no complex128: a complex float64 scenario's expected outcome is the call's TypeError (AutoMLX's
# Adapter.complex_dtypes; the harness checks it is raised, prepared and unprepared; message test below)
SCENARIOS = default_scenarios("numpy", np.float64)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_catalogue_float64_numpy_inputs(scenario):
    check_scenario(di.AutoMLX(), scenario)  # float64 tolerance: AutoMLX.tolerance (MLX's float32 sin/cos/exp)


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_catalogue_in_each_mode(mode):
    outcomes = test_differentiation([di.AutoMLX(mode=mode)], covering(SCENARIOS))
    assert len(outcomes) > 100


@pytest.mark.parametrize(
    "family, dtype", family_dtype_params([("numpy", np.float32), ("mlx", np.float32), ("torch", np.float64)])
)
def test_catalogue_on_each_family(family, dtype):
    # complex scenarios on float32 (complex64, which MLX has) are differentiated, on float64 refused;
    # sparse results for MLX arrays are not built (the clear error is tested below)
    scenarios = [s for s in default_scenarios(family, dtype) if not (family == "mlx" and s.sparse)]
    outcomes = test_differentiation([di.AutoMLX()], covering(scenarios))
    assert len(outcomes) > 100


def test_catalogue_without_compile():
    test_differentiation([di.AutoMLX(compile=False)], [s for s in SCENARIOS if "/" in s.name][::5])


def test_mlx_arrays_in_mlx_arrays_out_and_float64_on_the_cpu_stream():
    import mlx.core as mx

    default = mx.default_device()
    x = mx.array(np.linspace(0.1, 1.0, 5), dtype=mx.float64)
    g = di.gradient(di.AutoMLX(), lambda z: (z**3).sum() / 3, x)
    assert isinstance(g, mx.array) and g.dtype == mx.float64
    assert np.max(np.abs(np.asarray(g) - np.asarray(x) ** 2)) < 1e-15  # multiplication is exact in float64
    assert mx.default_device() == default
    h = di.hessian(di.AutoMLX(), lambda z: (z**3).sum() / 3, np.linspace(0.1, 1.0, 5))
    assert h.dtype == np.float64 and np.allclose(h, np.diag(2 * np.linspace(0.1, 1.0, 5)), rtol=1e-15, atol=0)
    x32 = mx.array([0.5, 1.5])
    assert di.jacobian(di.AutoMLX(), mx.sin, x32).dtype == mx.float32
    assert not hasattr(mx.array(1.0), "device")  # the array-API patch is gone after the call


def test_array_api_code_runs_on_mlx_arrays_inside_a_call():
    from array_api_compat import array_namespace, device

    def f(x):
        xp = array_namespace(x)
        w = xp.asarray(np.array([1.0, 2.0, 3.0]), dtype=x.dtype, device=device(x))
        return xp.sum(w * xp.sin(x)) + xp.sum(xp.eye(3, dtype=x.dtype, device=device(x)) @ x)

    x = np.array([0.1, 0.2, 0.3])
    assert np.allclose(di.gradient(di.AutoMLX(), f, x), np.array([1.0, 2.0, 3.0]) * np.cos(x) + 1, rtol=1e-6)


@pytest.mark.parametrize("prepared", [False, True])
def test_the_captured_buffer_example_gives_2_1_plus_x_on_every_call(prepared):
    import mlx.core as mx

    for buffer in (np.full(3, 9.0), mx.full((3,), 9.0, dtype=mx.float64, stream=mx.cpu)):

        def f(x, buffer=buffer):
            buffer[0] = 1.0
            buffer[0] += x
            return buffer[0] ** 2

        before = np.array(buffer).copy()
        backend = di.AutoMLX()
        preps = {
            op: getattr(di, "prepare_" + op)(backend, f, np.array(0.0) if op == "hessian" else 0.0)
            if prepared
            else None
            for op in ("derivative", "gradient", "second_derivative", "hessian")
        }
        for x in (0.3, 0.3, -1.2, 2.5):
            assert di.derivative(backend, f, x, prep=preps["derivative"]) == pytest.approx(2 * (1 + x), rel=1e-14)
            assert di.gradient(backend, f, x, prep=preps["gradient"]) == pytest.approx(2 * (1 + x), rel=1e-14)
            assert di.second_derivative(backend, f, x, prep=preps["second_derivative"]) == pytest.approx(2.0)
            # MLX has no JVP of scatter (the VJP of buffer[0]): the Hessian runs reverse over reverse
            assert di.hessian(backend, f, np.array(x), prep=preps["hessian"]) == pytest.approx(2.0)
            assert np.array_equal(np.array(buffer), before)


def test_a_captured_array_is_read_fresh_at_every_prepared_call():
    w = np.array([1.0, 2.0])
    f = lambda x: (w * x**2).sum()  # noqa: E731
    prep = di.prepare_gradient(di.AutoMLX(), f, np.zeros(2))
    x = np.array([1.0, 1.0])
    assert np.allclose(di.gradient(di.AutoMLX(), f, x, prep=prep), [2.0, 4.0])
    w[:] = [3.0, 5.0]
    assert np.allclose(di.gradient(di.AutoMLX(), f, x, prep=prep), [6.0, 10.0])


@pytest.mark.parametrize("compile_", [False, True], ids=["eager", "compile"])
@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
def test_captured_arrays_reach_mlx_functions_that_take_only_mlx_arrays(prepared, compile_):
    """A captured array is read as a guarded alias of MLX's own array type, which every MLX function
    takes: ``mx.matmul``, ``mx.addmm`` (inside ``mlx.nn.Linear``), ``mx.concatenate``, ``mx.where``,
    ``mx.take`` and ``mx.einsum`` refused the writable stand-in it was (a TypeError of MLX's or
    ``std::bad_cast``). Derivatives against the closed form, updates of the user's arrays between
    calls seen, the user's arrays and layer untouched; a write still runs over stand-ins."""
    import mlx.core as mx
    import mlx.nn as nn

    with mx.stream(mx.cpu):
        A = mx.array(np.arange(9.0).reshape(3, 3) / 10, dtype=mx.float64)
        b = mx.array([0.3, 0.7, -0.2], dtype=mx.float64)
        layer = nn.Linear(3, 2)
        layer.update({"weight": layer.weight.astype(mx.float64), "bias": layer.bias.astype(mx.float64)})
    x = np.array([0.5, -1.0, 2.0])
    An, bn = np.array(A), np.array(b)
    W, c = np.array(layer.weight), np.array(layer.bias)
    backend = di.AutoMLX(compile=compile_)
    cases = {
        "matmul": (lambda z: mx.sum(mx.matmul(A, z) ** 2), lambda: 2 * An.T @ (An @ x)),
        "addmm": (lambda z: mx.sum(mx.addmm(b, A, z) ** 2), lambda: 2 * An.T @ (bn + An @ x)),
        "concatenate": (lambda z: mx.sum(mx.concatenate([b, z]) ** 3), lambda: 3 * x**2),
        "where": (lambda z: mx.sum(mx.where(b > 0.0, z, A[0]) ** 2), lambda: 2 * x * (bn > 0)),
        "take": (lambda z: mx.sum(mx.take(b, mx.array([0, 1])) * z[:2]), lambda: np.append(bn[:2], 0.0)),
        "einsum": (lambda z: mx.einsum("ij,j->", A, z * z), lambda: 2 * An.sum(0) * x),
        "nn.Linear": (lambda z: mx.sum(layer(z) ** 2), lambda: 2 * W.T @ (W @ x + c)),
    }
    before = (An.copy(), bn.copy(), W.copy(), c.copy())
    for name, (f, expected) in cases.items():
        prep = di.prepare_gradient(backend, f, x) if prepared else None
        for _ in range(2):
            np.testing.assert_allclose(di.gradient(backend, f, x, prep=prep), expected(), rtol=1e-10, err_msg=name)
    for now, then in zip((A, b, layer.weight, layer.bias), before):
        assert np.array_equal(np.array(now), then)
    f, expected = cases["matmul"]
    prep = di.prepare_gradient(backend, f, x) if prepared else None
    A[0, 0] = 2.0  # the user's update between calls is seen
    An = np.array(A)
    np.testing.assert_allclose(di.gradient(backend, f, x, prep=prep), expected(), rtol=1e-10)

    buffer = mx.zeros((3,), dtype=mx.float64, stream=mx.cpu)

    def writes(z):
        buffer[1:] = z[1:]  # a write: f runs over stand-ins from then on
        return mx.sum(buffer * z)

    prep = di.prepare_gradient(backend, writes, x) if prepared else None
    for _ in range(2):
        np.testing.assert_allclose(di.gradient(backend, writes, x, prep=prep), [0.0, 2 * x[1], 2 * x[2]], rtol=1e-12)
    assert np.array_equal(np.array(buffer), np.zeros(3))


@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
@pytest.mark.parametrize("write", ["copyto", "out", "put"])
def test_numpys_writes_into_a_captured_array_carry_the_derivative_or_are_the_calls_error(write, prepared):
    """numpy's functions that write into their argument, on a captured numpy array under the default
    closure: ``np.copyto(buf[1:3], x)`` and a ufunc's ``out=`` are the stand-in's item assignment (the
    derivative flows through them); ``np.put``, which MLX has no stand-in write for, is the call's
    error. Before, numpy wrote into a copy of an MLX array's values, and the write was lost without an
    error (copyto gave [5, 6] for [8, 6]). The user's array is never written."""
    buf = np.ones(3)

    def f(x):
        if write == "copyto":
            np.copyto(buf[1:3], x)
        elif write == "out":
            np.multiply(buf[1:3], x, out=buf[1:3])
        else:
            np.put(buf, [1, 2], x)
        return (x * x).sum() + buf[1] * x[0]  # buf[1] = x0: f = 2 x0^2 + x1^2

    backend = di.AutoMLX()
    x = np.array([2.0, 3.0])
    prep = di.prepare_gradient(backend, f, x) if prepared and write != "put" else None
    for _ in range(2):
        if write == "put":
            with pytest.raises(TypeError, match=r"^gradient\(AutoMLX\(\), f, x\): f passes an MLX array .* to np.put"):
                di.gradient(backend, f, x)
        else:
            np.testing.assert_allclose(np.asarray(di.gradient(backend, f, x, prep=prep)), [8.0, 6.0], rtol=1e-12)
        assert list(buf) == [1.0, 1.0, 1.0]


_NUMPY_ON_X = {  # a value read out of MLX: numpy computing on an array's values, or Python's
    "np.linalg.norm": lambda x: np.linalg.norm(x),
    "np.hypot": lambda x: np.sum(np.hypot(x, 1.0)),
    "np.dot": lambda x: np.dot(x, x),
    "float": lambda x: float(x[0]) * x[1],
    "item": lambda x: x[0].item() * x[1],
    "tolist": lambda x: sum(x.tolist()) * 1.0,
}


@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
@pytest.mark.parametrize("use", list(_NUMPY_ON_X))
def test_a_value_read_out_of_mlx_that_reaches_f_is_a_lost_derivative_error(use, prepared):
    """A value read out of MLX (numpy's function of an array MLX has no function for, ``.item()``,
    ``.tolist()``, ``float(a)``) that reaches f(x) beside a path MLX differentiates: that term's
    derivative was lost, a wrong gradient and no error (the check only looked at all-zero results).
    Such reads are recorded while the runner runs, and the call checks its derivative against a
    central difference: the call's error. A read that only chooses a branch keeps the derivative."""
    h = _NUMPY_ON_X[use]

    def f(x):
        return (x * x).sum() + h(x)

    backend = di.AutoMLX()
    x = np.array([0.3, -0.7, 1.1])
    with pytest.raises(di.LostDerivativeError, match=r"^gradient\(AutoMLX\(\), f, x\): .*derivative was lost"):
        prep = di.prepare_gradient(backend, f, x) if prepared else None
        di.gradient(backend, f, x, prep=prep)

    def g(x):
        y = (x * x).sum()
        return y * 2.0 if x[0].item() > 0 and float(np.max(x)) > 1.0 else y

    prep = di.prepare_gradient(backend, g, x) if prepared else None
    np.testing.assert_allclose(np.asarray(di.gradient(backend, g, x, prep=prep)), 4.0 * x, rtol=1e-12)


def test_numpy_writing_into_fs_own_mlx_array_is_the_calls_error():
    """``np.copyto(a, x)`` with ``a`` an MLX array of f's own: numpy cannot write an MLX array (it
    wrote into a copy of its values: a lost write, and a wrong derivative without an error)."""
    import mlx.core as mx

    def f(x):
        a = mx.zeros(2, dtype=x.dtype)
        np.copyto(a, x)
        return (a * x).sum()

    with pytest.raises(TypeError, match=r"^gradient\(AutoMLX\(\), f, x\): f passes an MLX array to np.copyto"):
        di.gradient(di.AutoMLX(), f, np.array([2.0, 3.0]))


@pytest.mark.parametrize("compile_", [False, True], ids=["eager", "compile"])
def test_an_mlx_constant_that_f_writes_into_is_left_as_it_was(compile_):
    """A ``Constant`` context's MLX array reaches ``f`` as a fresh array: MLX writes an array in place,
    and ``c[0] = 5.0`` in ``f`` wrote the user's own (a numpy constant was converted, so a copy)."""
    import mlx.core as mx

    c = mx.zeros((3,), dtype=mx.float64, stream=mx.cpu)

    def f(z, c):
        c[0] = 5.0
        return mx.sum(z * c)

    x = np.array([0.5, -1.0, 2.0])
    backend = di.AutoMLX(compile=compile_)
    prep = di.prepare_gradient(backend, f, x, di.Constant(c))
    for p in (None, prep, None):
        np.testing.assert_array_equal(di.gradient(backend, f, x, di.Constant(c), prep=p), [5.0, 0.0, 0.0])
        assert np.array_equal(np.array(c), np.zeros(3))


@pytest.mark.parametrize("compile_", [False, True], ids=["eager", "compile"])
def test_a_captured_mlx_model_in_training_mode_gives_mx_grads_value_and_is_left_as_it_was(compile_):
    """An ``nn.Sequential`` with a ``BatchNorm`` in training mode (it rebinds its running statistics at
    every call): the gradient is ``mx.grad``'s on a deep copy of the model, and the user's parameters
    and running statistics stay as they were, prepared or not."""
    import copy

    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten

    mx.random.seed(0)
    with mx.stream(mx.cpu):
        model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.BatchNorm(4), nn.Linear(4, 1))
        model.train()
        X = mx.array(np.linspace(0.1, 1.5, 15).reshape(5, 3).astype(np.float32))
        w = mx.array([1.0, 0.5, -0.7])

        def f(w):
            return mx.sum(model(X * w) ** 2)

        twin = copy.deepcopy(model)
        expected = np.array(mx.grad(lambda w: mx.sum(twin(X * w) ** 2))(w))
    before = [(k, np.array(v)) for k, v in tree_flatten(model.parameters())]
    statistics = np.array(model.layers[2].running_mean), np.array(model.layers[2].running_var)
    backend = di.AutoMLX(compile=compile_)
    prep = di.prepare_gradient(backend, f, w)
    for p in (None, prep, prep):
        np.testing.assert_allclose(np.array(di.gradient(backend, f, w, prep=p)), expected, rtol=1e-5)
    assert all(np.array_equal(v, np.array(dict(tree_flatten(model.parameters()))[k])) for k, v in before)
    assert np.array_equal(np.array(model.layers[2].running_mean), statistics[0])
    assert np.array_equal(np.array(model.layers[2].running_var), statistics[1])


def test_control_flow_on_a_traced_value_runs_eagerly_when_compiled():
    def f(x):
        return (x**2).sum() if x.sum().item() > 0 else (x**3).sum()

    backend = di.AutoMLX()
    prep = di.prepare_gradient(backend, f, np.ones(3))
    assert np.allclose(di.gradient(backend, f, np.array([1.0, 2.0, 3.0]), prep=prep), [2.0, 4.0, 6.0])
    assert np.allclose(di.gradient(backend, f, np.array([-1.0, -2.0, 0.5]), prep=prep), [3.0, 12.0, 0.75])


def test_a_cut_graph_is_a_lost_derivative_error_and_a_constant_f_gives_zeros():
    import mlx.core as mx

    x = np.array([0.5, 1.5])
    for f in (
        lambda z: (mx.stop_gradient(z) ** 2).sum(),
        lambda z: (mx.array(np.asarray(z)) ** 2).sum(),  # a round trip through numpy
        lambda z: np.sum(np.asarray(z) ** 2),  # numpy on MLX arrays
    ):
        for op in ("gradient", "hessian"):
            with pytest.raises(di.LostDerivativeError, match=rf"^{op}\(AutoMLX\(\), f, x\): f\(x\) changes with x"):
                getattr(di, op)(di.AutoMLX(), f, x)
        with pytest.raises(di.LostDerivativeError):
            di.prepare_gradient(di.AutoMLX(), f, x)
    assert np.array_equal(di.gradient(di.AutoMLX(), lambda z: mx.array(3.0), x), [0.0, 0.0])
    assert np.array_equal(di.jacobian(di.AutoMLX(), lambda z: mx.floor(z), x), np.zeros((2, 2)))


def test_complex128_is_refused_and_complex64_works():
    z = np.array([0.3 - 0.4j, -1.2 + 0.5j])
    f = lambda v: (v.real**2 + v.imag**2).sum()  # noqa: E731
    with pytest.raises(TypeError, match=r"^gradient\(AutoMLX\(\), f, x\): MLX has no complex128"):
        di.gradient(di.AutoMLX(), f, z)
    g = di.gradient(di.AutoMLX(), f, z.astype(np.complex64))
    assert g.dtype == np.complex64 and np.allclose(g, 2 * z, rtol=1e-6)


def test_sparse_results_for_mlx_and_numpy_inputs_are_scipy_sparse():
    """MLX has no sparse type: AutoSparse over MLX returns scipy.sparse for an MLX x as for a numpy x
    (contract section 12), with the values of the dense Jacobian."""
    import mlx.core as mx
    import scipy.sparse as sp

    xs = np.linspace(0.1, 0.9, 5)
    dense = np.zeros((4, 5))
    dense[np.arange(4), np.arange(4)], dense[np.arange(4), np.arange(1, 5)] = xs[1:], xs[:-1]
    jac = di.jacobian(di.AutoSparse(di.AutoMLX()), lambda z: z[1:] * z[:-1], mx.array(xs.astype(np.float32)))
    assert isinstance(jac, sp.sparray) and jac.dtype == np.float32
    np.testing.assert_allclose(jac.toarray(), dense, rtol=1e-6)
    jac = di.jacobian(di.AutoSparse(di.AutoMLX()), lambda z: z[1:] * z[:-1], xs)  # numpy in: scipy.sparse out
    assert isinstance(jac, sp.sparray)
    np.testing.assert_allclose(jac.toarray(), dense, rtol=1e-15)


def test_an_opaque_custom_rule_refuses_a_second_derivative():
    from diffinterface.rules import SecondOrderError, custom_rule

    @custom_rule(opaque=True)
    def cube(x):
        return np.asarray(x) ** 3

    @cube.def_reverse
    def _(tape, dy, x):
        return 3 * np.asarray(x.val) ** 2 * dy

    x = np.array([0.5, 2.0])
    assert np.allclose(di.gradient(di.AutoMLX(), lambda z: cube(z).sum(), x), 3 * x**2, rtol=1e-15)
    with pytest.raises(SecondOrderError):
        di.hessian(di.AutoMLX(), lambda z: cube(z).sum(), x)


def test_a_missing_mlx_gives_the_install_line(monkeypatch):
    import importlib.util

    from diffinterface._core import configs as _backends

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlx" else real(name, *a))
    monkeypatch.setattr(_backends, "_adapters", {})
    assert di.check_available(di.AutoMLX()) is False
    with pytest.raises(
        di.BackendNotAvailableError,
        match=r'gradient\(AutoMLX\(\), f, x\): AutoMLX needs mlx, which is not installed; install it with: pip install "diffinterface\[mlx\]"',
    ):
        di.gradient(di.AutoMLX(), sum, 1.0)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_jacobian_direction_by_shape_and_mode(mode):
    A = np.arange(12.0).reshape(3, 4) / 10
    x = np.linspace(0.1, 0.4, 4)
    jac = di.jacobian(di.AutoMLX(mode=mode), lambda z: z @ A.T, x)  # matmul is exact: no sin/cos
    assert np.allclose(jac, A, rtol=1e-15, atol=1e-15)


# -- AutoFiniteDiff on an MLX float64 x: steps for MLX's float32-accurate float64 ------------------

_X0 = np.array([0.3, -1.2, 2.5, 0.7])
_T0 = np.array([1.0, 0.5, -0.25, 2.0])
_S0 = 2.5
_EPS32 = float(np.finfo(np.float32).eps)


def _fd_problems():
    """(operator, call(backend, x, t, s, prep), prepare(backend, x, t, s), closed form, f's size, order):
    f = cos(x) x**2 (summed for the scalar operators), in MLX's float64, whose cos is float32-accurate."""
    from array_api_compat import array_namespace

    def vec(x):
        return array_namespace(x).cos(x) * x**2

    def scalar(x):
        return array_namespace(x).sum(vec(x))

    g = -np.sin(_X0) * _X0**2 + 2 * _X0 * np.cos(_X0)
    hd = -np.cos(_X0) * _X0**2 - 4 * _X0 * np.sin(_X0) + 2 * np.cos(_X0)
    d1 = -np.sin(_S0) * _S0**2 + 2 * _S0 * np.cos(_S0)
    d2 = -np.cos(_S0) * _S0**2 - 4 * _S0 * np.sin(_S0) + 2 * np.cos(_S0)
    size_v, size_s, size_1 = (
        np.abs(np.cos(_X0) * _X0**2).max(),
        abs(float(np.sum(np.cos(_X0) * _X0**2))),
        abs(np.cos(_S0) * _S0**2),
    )
    return {
        "gradient": (
            lambda b, x, t, s, p: di.gradient(b, scalar, x, prep=p),
            lambda b, x, t, s: di.prepare_gradient(b, scalar, x),
            g,
            size_s,
            1,
        ),
        "jacobian": (
            lambda b, x, t, s, p: di.jacobian(b, vec, x, prep=p),
            lambda b, x, t, s: di.prepare_jacobian(b, vec, x),
            np.diag(g),
            size_v,
            1,
        ),
        "pushforward": (
            lambda b, x, t, s, p: di.pushforward(b, vec, x, t, prep=p),
            lambda b, x, t, s: di.prepare_pushforward(b, vec, x, t),
            g * _T0,
            size_v,
            1,
        ),
        "pullback": (
            lambda b, x, t, s, p: di.pullback(b, vec, x, t, prep=p),
            lambda b, x, t, s: di.prepare_pullback(b, vec, x, t),
            g * _T0,
            size_v,
            1,
        ),
        "derivative": (
            lambda b, x, t, s, p: di.derivative(b, vec, s, prep=p),
            lambda b, x, t, s: di.prepare_derivative(b, vec, s),
            np.asarray(d1),
            size_1,
            1,
        ),
        "hessian": (
            lambda b, x, t, s, p: di.hessian(b, scalar, x, prep=p),
            lambda b, x, t, s: di.prepare_hessian(b, scalar, x),
            np.diag(hd),
            size_s,
            2,
        ),
        "hvp": (
            lambda b, x, t, s, p: di.hvp(b, scalar, x, t, prep=p),
            lambda b, x, t, s: di.prepare_hvp(b, scalar, x, t),
            hd * _T0,
            size_s,
            2,
        ),
        "second_derivative": (
            lambda b, x, t, s, p: di.second_derivative(b, vec, s, prep=p),
            lambda b, x, t, s: di.prepare_second_derivative(b, vec, s),
            np.asarray(d2),
            size_1,
            2,
        ),
    }


def _fd_error(operator: str, prepared: bool) -> tuple[float, float]:
    """AutoFiniteDiff's error on an MLX float64 x, and the bound of finite differences over
    float32-accurate values: central first differences with steps eps32**(1/3) err by about
    eps32**(2/3) |f| (2.4e-5 |f|), second differences with steps eps32**(1/4) by eps32**(1/2) |f|
    (3.5e-4 |f|), the truncation error of the same order; 10 and 40 times that (measured, MLX 0.32:
    at most 0.34 of the bound; with float64 steps 5 to 67 times it)."""
    import mlx.core as mx

    def m(v):
        return mx.array(np.asarray(v, dtype=np.float64), dtype=mx.float64)

    call, prepare, want, size, order = _fd_problems()[operator]
    b, x, t, s = di.AutoFiniteDiff(), m(_X0), m(_T0), m(_S0)
    prep = prepare(b, m(_X0 + 0.125), t, m(_S0 + 0.125)) if prepared else None
    got = call(b, x, t, s, prep)
    assert isinstance(got, mx.array) and got.dtype == mx.float64  # MLX float64 in, MLX float64 out
    error = float(np.max(np.abs(np.asarray(got).reshape(want.shape) - want)))
    bound = (10 * _EPS32 ** (2 / 3) if order == 1 else 40 * _EPS32**0.5) * max(1.0, size)
    return error, bound


FD_OPERATORS = list(_fd_problems())


@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
@pytest.mark.parametrize("operator", FD_OPERATORS)
def test_finite_differences_on_mlx_float64_x_against_the_closed_form(operator, prepared):
    """MLX's float64 cos is float32-accurate: the MLX family's accuracy sizes the steps for that
    (measured: gradient 3.3e-4, Hessian 1.2e-2 absolute; float64 steps gave 2.5e-2 and 1.5)."""
    error, bound = _fd_error(operator, prepared)
    assert error <= bound, (operator, error, bound)


@pytest.mark.parametrize("operator", FD_OPERATORS)
def test_finite_differences_on_mlx_without_the_family_accuracy_would_be_wrong(operator, monkeypatch):
    """The same calls with an MLX record that declares no accuracy (float64 steps): the error is
    beyond the bound (second order: by two orders of magnitude), so the test above can fail."""
    from diffinterface.extend import ArrayFamily, families, register_family

    r = families()["mlx"]
    assert r.accuracy("float64") == _EPS32 and r.accuracy("float32") is None
    bare = ArrayFamily(
        r.name, r.array_type, r.to_numpy, r.from_numpy, r.convert, r.private_copy, r.computing, r.copy_into
    )
    assert bare.accuracy("float64") is None  # the default: the dtype's own
    register_family(bare)
    try:
        error, bound = _fd_error(operator, False)
    finally:
        register_family(r)
    assert error > bound, (operator, error, bound)


def test_family_accuracy_is_what_automlx_reports_for_second_order():
    """One mechanism: ``Adapter.accuracy`` reads the family's hook (SecondOrder(AutoFiniteDiff(), AutoMLX()))."""
    import mlx.core as mx

    from diffinterface._core.configs import adapter_for
    from diffinterface.extend import family_accuracy

    adapter = adapter_for(di.AutoMLX(), "hessian(AutoMLX(), f, x)")
    assert family_accuracy("mlx", mx.float64) == family_accuracy("mlx", np.float64) == _EPS32
    assert adapter.accuracy("float64") == _EPS32 and adapter.accuracy("float32") is None
    assert family_accuracy("numpy", "float64") is None and family_accuracy(None, "float64") is None
    assert adapter_for(di.AutoFiniteDiff(), "hessian(AutoFiniteDiff(), f, x)").accuracy("float64") is None


@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
@pytest.mark.parametrize("mode", [None, "forward"])
def test_numpy_scalars_and_ufuncs_on_f_s_own_mlx_arrays_keep_their_derivative(prepared, mode):
    """MLX arrays have no __array_ufunc__ or __array_function__: np.float64(3) * mx.sin(x),
    np.sin(y) and np.sum(np.stack(...)) would convert the arrays to numpy and drop those terms'
    derivatives with no error (the other terms keep theirs). During a call numpy's ufuncs and array
    functions on MLX arrays compute with MLX's function of the same name; after it, MLX's own
    behaviour is back."""
    mx = pytest.importorskip("mlx.core")
    backend = di.AutoMLX(mode=mode)

    def f(x):
        s = mx.sin(x)
        return mx.sum(s + np.float64(3.0) * s + np.exp(x) * 2.0 + np.multiply(x, x) + np.abs(x)) + np.sum(
            np.stack([s, x * x])
        )

    x = np.array([0.3, -1.2, 2.0])
    want = 5 * np.cos(x) + 2 * np.exp(x) + 4 * x + np.sign(x)
    for xin in (x, mx.array(x)):
        prep = di.prepare_gradient(backend, f, xin) if prepared else None
        for _ in range(2):
            g = di.gradient(backend, f, xin, prep=prep)
            np.testing.assert_allclose(np.asarray(g), want, rtol=1e-6)
    assert "__array_ufunc__" not in mx.array.__dict__  # MLX's own type restored after the call
    assert "__array_function__" not in mx.array.__dict__
    assert isinstance(np.float64(3.0) * mx.array([1.0]), np.ndarray)  # numpy's conversion, as MLX has it


def test_a_one_shot_call_checks_for_a_lost_derivative_only_where_its_result_is_zero():
    """A call without a kept preparation runs the lost-derivative check (f again and a vector-Jacobian
    product) after its call and only where every result is zero: f runs twice for a gradient (its
    shape, lazily, then the gradient), where it ran three times; a constant f still gives zeros,
    after the check, and a cut graph is still the call's LostDerivativeError."""
    import types

    import mlx.core as mx

    runs = types.SimpleNamespace(n=0)  # not state: f's captured lists would be duplicated, this is not
    x = np.array([0.5, 1.5], dtype=np.float32)

    def f(z):
        runs.n += 1
        return (z**2).sum()

    def constant(z):
        runs.n += 1
        return mx.array(3.0) + 0 * mx.stop_gradient(z).sum()

    di.prep_cache.enabled = False
    try:
        np.testing.assert_allclose(di.gradient(di.AutoMLX(), f, x), 2 * x, rtol=1e-6)
        assert runs.n == 2
        runs.n = 0
        assert np.array_equal(di.gradient(di.AutoMLX(), constant, x), [0.0, 0.0])
        assert runs.n >= 3  # the check ran: f again for it
        with pytest.raises(di.LostDerivativeError, match=r"^gradient\(AutoMLX\(\), f, x\): f\(x\) changes with x"):
            di.gradient(di.AutoMLX(), lambda z: (mx.stop_gradient(z) ** 2).sum(), x)
    finally:
        di.prep_cache.enabled = True


def test_a_large_one_shot_call_compiles_and_a_small_one_runs_eagerly(monkeypatch):
    """A one-shot call runs eagerly below ``ONESHOT_COMPILED_FROM`` elements of x or f(x) and compiles
    from there (at n = 1e5 a one-shot gradient 4.3 -> 3.2 ms, MLX's own first call 5.8 ms); both right."""
    import mlx.core as mx

    import diffinterface.backends.mlx as adapter

    compiled = []
    compile_ = mx.compile

    def recording(fn, *args, **kwargs):
        compiled.append(fn)
        return compile_(fn, *args, **kwargs)

    monkeypatch.setattr(adapter.mx, "compile", recording)
    monkeypatch.setattr(adapter, "ONESHOT_COMPILED_FROM", 8)
    di.prep_cache.enabled = False
    try:
        for n in (4, 12):
            x = np.linspace(0.1, 1.0, n, dtype=np.float32)
            compiled.clear()
            g = di.gradient(di.AutoMLX(), lambda z: (z**3).sum(), x)
            np.testing.assert_allclose(g, 3 * x**2, rtol=1e-5)
            assert bool(compiled) == (n >= 8), (n, compiled)
    finally:
        di.prep_cache.enabled = True


def test_a_helper_reading_an_mlx_dtype_is_checked_by_its_summary_at_a_new_first_call(walk_visits):
    """MLX's dtypes take no weak reference; the MLX family declares ``mlx.core.Dtype`` a constant, so a
    stateless helper that reads one keeps its closure walk's summary (a new lambda around it is
    checked, not walked), and the derivative is MLX's."""
    import mlx.core as mx

    dtype = mx.float32

    def helper(z):
        return mx.sum(z.astype(dtype) ** 2)

    x = mx.array([1.0, -2.0, 0.5])

    def check(f):
        np.testing.assert_allclose(np.array(di.gradient(di.AutoMLX(), f, x)), [2.0, -4.0, 1.0], rtol=1e-6)

    first_calls_are_checked_not_walked(helper, walk_visits, check)


def _writes_a_constant(z):
    y = z * z
    y[1:2] = 5.0  # a boundary value: row 1 of the Jacobian is zero
    return y


def _writes_x(z):
    y = 2.0 * z
    y[1:3] = 3.0 * z[0:2]
    return y


def _sets_two_slices(z):  # boundary values set one after the other (the differential test's program)
    y = z * 1.0
    y[0:1] = 0.25
    y = y * 1.0
    y[1:2] = 0.25
    return y


_WRITE_BUFFER = 0.25 * np.arange(1.0, 5.0)


def _writes_a_captured_buffer_twice(z):  # the differential test's program, n = 4
    _WRITE_BUFFER[1:4] = z[1:4]
    y = z + 0.5 * _WRITE_BUFFER
    _WRITE_BUFFER[0:2] = y[0:2]
    return y + 0.5 * _WRITE_BUFFER


def _jacobian_of_write(which, x):
    n = x.size
    if which == "constant":
        J = np.diag(2.0 * x)
        J[1] = 0.0
    elif which == "two slices":
        J = np.diag([0.0, 0.0, 1.0, 1.0])
    elif which == "x":
        J = 2.0 * np.eye(n)
        J[1:3] = 0.0
        J[1, 0], J[2, 1] = 3.0, 3.0
    else:  # y1 = z + 0.5 buf1 (buf1 = [0.25, z1, z2, z3]); buf2 = [y1_0, y1_1, z2, z3]; y = y1 + 0.5 buf2
        d1 = np.diag([1.0, 1.5, 1.5, 1.5])
        buf2 = np.vstack([d1[0], d1[1], np.eye(n)[2], np.eye(n)[3]])
        J = d1 + 0.5 * buf2
    return J


@pytest.mark.parametrize("which", ["constant", "two slices", "x", "captured buffer"])
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
def test_a_slice_write_gives_the_right_batched_derivatives(which, mode, prepared):
    """MLX's ``vmap`` of a slice update with a batched source and an unbatched update drops the update
    (mlx 0.32.4), and the JVP and the VJP of a slice write make one: a vmapped Jacobian of ``y[1:2] = 5.0``
    was silently wrong in both modes, as were batched pullbacks and pushforwards and the Hessian. An
    ``f`` that writes a slice loops its batches: every batched operator against the closed form, whose
    buffer is left as it was; ``SecondOrder(AutoMLX(), AutoMLX())`` too, whose outer operator sees the
    inner derivative's evaluated result (no graph: it loops)."""
    f = {
        "constant": _writes_a_constant,
        "two slices": _sets_two_slices,
        "x": _writes_x,
        "captured buffer": _writes_a_captured_buffer_twice,
    }[which]
    backend = di.AutoMLX(mode=mode)
    x = np.array([0.5, -1.0, 2.0, 0.75])
    saved = _WRITE_BUFFER.copy()
    J = _jacobian_of_write(which, x)
    ts = tuple(np.eye(4)[[0, 1, 3]])

    def g(z):
        y = f(z)
        return (y * y).sum() * 0.5

    # the Hessian of g = 0.5 |f|^2: J^T J for a linear f (two slices, x, buffer); for the constant write,
    # g = 0.5 (z0^4 + 25 + z2^4 + z3^4)
    H = np.diag(6.0 * x**2 * [1, 0, 1, 1]) if which == "constant" else J.T @ J
    kw = (lambda op, *a: {"prep": getattr(di, f"prepare_{op}")(backend, *a)}) if prepared else (lambda op, *a: {})
    got = di.jacobian(backend, f, x, **kw("jacobian", f, x))
    np.testing.assert_allclose(np.asarray(got), J, rtol=1e-12, atol=1e-12)
    pushed = di.pushforward(backend, f, x, ts, **kw("pushforward", f, x, ts))
    np.testing.assert_allclose(np.stack([np.asarray(p) for p in pushed]), np.stack([J @ t for t in ts]), atol=1e-12)
    pulled = di.pullback(backend, f, x, ts, **kw("pullback", f, x, ts))
    np.testing.assert_allclose(np.stack([np.asarray(p) for p in pulled]), np.stack([J.T @ t for t in ts]), atol=1e-12)
    for second in (backend, di.SecondOrder(backend, di.AutoMLX())):  # MLX's own, and outer over inner
        got = di.hessian(second, g, x, **kw("hessian", g, x) if second is backend else {})
        np.testing.assert_allclose(np.asarray(got), H, rtol=1e-12, atol=1e-12)
        hvps = di.hvp(second, g, x, ts, **kw("hvp", g, x, ts) if second is backend else {})
        np.testing.assert_allclose(np.stack([np.asarray(h) for h in hvps]), np.stack([H @ t for t in ts]), atol=1e-12)
    np.testing.assert_array_equal(_WRITE_BUFFER, saved)


def test_an_f_without_a_slice_write_keeps_vmap():
    """The loop is for f's that write a slice: any other f's batches are one ``mx.vmap``."""
    backend = di.AutoMLX()
    plain = di.prepare_jacobian(backend, lambda z: z * z, np.ones(4))
    written = di.prepare_jacobian(backend, _writes_a_constant, np.ones(4))
    assert plain.data.data.vectorize and not written.data.data.vectorize


@pytest.mark.parametrize("outer", MODES, ids=MODE_IDS)
def test_second_order_of_mlx_over_mlx_is_right_where_f_writes_a_slice(outer):
    """``SecondOrder(AutoMLX(), AutoMLX())``: the outer operator differentiates the inner gradient, whose
    result it sees evaluated (no graph to read), so it loops: its ``vmap`` went through the inner
    program's slice updates and gave H[1, 1] = 1 for a g whose Hessian is zero (the differential test's
    program at n = 2)."""
    from array_api_compat import array_namespace

    def g(z):
        y = _sets_two_slices(z)
        return array_namespace(y).sum(y * y) * 0.5

    backend = di.SecondOrder(di.AutoMLX(mode=outer), di.AutoMLX())
    x = np.array([0.5, -1.0])
    np.testing.assert_allclose(np.asarray(di.hessian(backend, g, x)), np.zeros((2, 2)), atol=1e-12)
    hvps = di.hvp(backend, g, x, (np.array([1.0, 0.0]), np.array([0.0, 1.0])))
    np.testing.assert_allclose(np.stack([np.asarray(h) for h in hvps]), np.zeros((2, 2)), atol=1e-12)
