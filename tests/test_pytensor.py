"""AutoPyTensor: the catalogue (numpy float64 and float32, other families' inputs), analytic checks with
f written in pytensor.tensor, captured state (numpy buffers, shared variables), errors."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import diffinterface as di
from conftest import MODES, installed
from diffinterface.testing import check_scenario, default_scenarios, test_differentiation

pytestmark = pytest.mark.skipif(
    not installed("pytensor"), reason='pytensor is not installed: pip install "diffinterface[pytensor]"'
)

# PyTensor's C linker compiles each new graph in tens of milliseconds to seconds (its cache is cold on a
# fresh machine): the catalogue runs with PyTensor's fast-compiling mode, and a part of it with the
# default mode (what prepare_* uses unless told otherwise).
FAST = "FAST_COMPILE"


def _scenarios(dtype, family="numpy", base_only=False):
    """The catalogue (its complex scenarios' expected outcome is the call's TypeError: AutoPyTensor's
    ``Adapter.complex_dtypes``, checked by the harness; the message: test_complex_is_the_calls_error);
    ``base_only``: the reference functions alone, without variants, structures or sparse problems."""
    out = []
    for s in default_scenarios(family, dtype):
        if base_only and (s.name.count("/") > 1 or s.name.startswith(("structured/", "sparse/"))):
            continue
        out.append(s)
    return out


def _selection(dtype):
    """A bounded part of the float64 catalogue (a PyTensor build and compile per call makes the whole
    catalogue take minutes on 2 cores): every reference function, each variant kind (contexts, caches,
    closures, in-place, batches) on the first function of each operator, the sparse problems and
    every third structured scenario."""
    out, variants, structured = [], set(), 0
    for s in _scenarios(dtype):
        parts = s.name.split("/")
        if s.name.startswith("structured/"):
            structured += 1
            if structured % 3 == 1:
                out.append(s)
        elif s.name.startswith("sparse/") or len(parts) <= 2:
            out.append(s)
        elif (parts[0], parts[-1]) not in variants:
            variants.add((parts[0], parts[-1]))
            out.append(s)
    return out


SCENARIOS = _selection(np.float64)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_catalogue_float64(scenario):
    check_scenario(di.AutoPyTensor(compile_mode=FAST), scenario)  # exact-AD tolerance: 1e-10 relative


def test_catalogue_base_functions_float32():
    outcomes = test_differentiation([di.AutoPyTensor(compile_mode=FAST)], _scenarios(np.float32, base_only=True))
    assert len(outcomes) > 30


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_catalogue_first_order_forced_direction_float64(mode):
    picked = [
        s for s in _scenarios(np.float64, base_only=True) if s.operator not in ("hvp", "hessian", "second_derivative")
    ]
    outcomes = test_differentiation([di.AutoPyTensor(mode=mode, compile_mode=FAST)], picked)
    assert len(outcomes) > 20


def test_catalogue_default_compile_mode():
    """PyTensor's own default mode, FAST_RUN (its C linker after the full rewrites), on one scenario per
    operator (the suite's configured mode is FAST_COMPILE: see conftest.py)."""
    seen, picked = set(), []
    for s in _scenarios(np.float64, base_only=True):
        if s.operator not in seen:
            seen.add(s.operator)
            picked.append(s)
    assert len(picked) == 8
    test_differentiation([di.AutoPyTensor(compile_mode="FAST_RUN")], picked)


@pytest.mark.parametrize("family", [f for f in ("torch", "jax") if installed(f)])
def test_catalogue_other_families_inputs(family):
    picked = _scenarios(np.float32 if family == "jax" else np.float64, family, True)[::3]
    outcomes = test_differentiation([di.AutoPyTensor(compile_mode=FAST)], picked)
    assert len(outcomes) > 10


# -- analytic checks with f in pytensor.tensor ------------------------------------------------------


def test_operators_on_pytensor_code_against_closed_forms():
    import pytensor.tensor as pt

    rng = np.random.default_rng(0)
    A = rng.normal(size=(4, 3))
    x, t, u = rng.normal(size=3), rng.normal(size=3), rng.normal(size=4)

    def f(z):  # sin(A z): J = diag(cos(A z)) A
        return pt.sin(pt.dot(A, z))

    def g(z):  # sum(exp(z) * z): gradient exp(z) (1 + z), Hessian diag(exp(z) (2 + z))
        return pt.sum(pt.exp(z) * z)

    J = np.cos(A @ x)[:, None] * A
    H = np.diag(np.exp(x) * (2 + x))
    for mode in MODES:
        b = di.AutoPyTensor(mode=mode, compile_mode=FAST)
        assert np.allclose(di.jacobian(b, f, x), J, rtol=1e-13, atol=1e-14)
        assert np.allclose(di.pushforward(b, f, x, t), J @ t, rtol=1e-13, atol=1e-14)
        assert np.allclose(di.pullback(b, f, x, u), u @ J, rtol=1e-13, atol=1e-14)
        assert np.allclose(di.gradient(b, g, x), np.exp(x) * (1 + x), rtol=1e-13)
        assert np.allclose(di.hessian(b, g, x), H, rtol=1e-13, atol=1e-14)
        assert np.allclose(di.hvp(b, g, x, (t, 2 * t))[1], 2 * H @ t, rtol=1e-13)
        assert np.isclose(di.derivative(b, lambda s: pt.sin(3 * s), 0.2), 3 * np.cos(0.6), rtol=1e-14)
        assert np.isclose(di.second_derivative(b, lambda s: pt.sin(3 * s), 0.2), -9 * np.sin(0.6), rtol=1e-14)


def test_prepared_calls_compile_once_and_keep_float32():
    import pytensor.tensor as pt

    b = di.AutoPyTensor()
    f = lambda z: pt.sum(z**3)  # noqa: E731
    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    prep = di.prepare_gradient(b, f, x)
    for k in range(3):
        g = di.gradient(b, f, x + k, prep=prep)
        assert g.dtype == np.float32 and np.allclose(g, 3 * (x + k) ** 2, rtol=1e-6)
    assert len(prep.data.data.compiled) == 1  # one signature, one compiled function


def test_verify_grad_agrees_with_the_adapter():
    """PyTensor's own finite-difference check of its gradient, beside the adapter's gradient."""
    import pytensor.tensor as pt
    from pytensor.gradient import verify_grad

    f = lambda z: pt.sum(pt.tanh(z) * z**2)  # noqa: E731
    x = np.array([0.3, -1.2, 0.7])
    verify_grad(f, [x], rng=np.random.default_rng(1))
    g = di.gradient(di.AutoPyTensor(), f, x)
    assert np.allclose(g, (1 - np.tanh(x) ** 2) * x**2 + 2 * x * np.tanh(x), rtol=1e-13)


# -- captured state ---------------------------------------------------------------------------------


@pytest.mark.parametrize("prepared", [False, True])
def test_the_captured_buffer_example_gives_2_1_plus_x_on_every_call(prepared):
    buffer = np.full(3, 9.0)

    def f(x):
        buffer[0] = 1.0
        buffer[0] += x
        return buffer[0] ** 2

    b = di.AutoPyTensor(compile_mode=FAST)
    preps = {
        op: getattr(di, "prepare_" + op)(b, f, 0.0) if prepared else None
        for op in ("derivative", "gradient", "second_derivative")
    }
    for x in (0.3, 0.3, -1.2, 2.5):
        assert di.derivative(b, f, x, prep=preps["derivative"]) == pytest.approx(2 * (1 + x), rel=1e-14)
        assert di.gradient(b, f, x, prep=preps["gradient"]) == pytest.approx(2 * (1 + x), rel=1e-14)
        assert di.second_derivative(b, f, x, prep=preps["second_derivative"]) == pytest.approx(2.0, rel=1e-14)
        assert np.all(buffer == 9.0)


def test_captured_arrays_are_inputs_read_at_every_call():
    import pytensor.tensor as pt

    w = np.array([1.0, 2.0, 3.0])
    f = lambda z: pt.sum(w * z**2)  # noqa: E731
    b = di.AutoPyTensor(compile_mode=FAST)
    x = np.ones(3)
    prep = di.prepare_gradient(b, f, x)
    assert np.allclose(di.gradient(b, f, x, prep=prep), 2 * w)
    w[:] = [4.0, 5.0, 6.0]  # an in-place update: seen without recompiling
    assert np.allclose(di.gradient(b, f, x, prep=prep), 2 * w)
    assert len(prep.data.data.compiled) == 1


def _unaligned(values: np.ndarray) -> np.ndarray:
    """``values`` (float64) in an array whose data starts one byte into a buffer: not aligned."""
    buffer = np.zeros(values.nbytes + 1, dtype=np.uint8)
    out = np.ndarray(values.shape, dtype=np.float64, buffer=buffer, offset=1)
    out[...] = values
    return out


@pytest.mark.parametrize(  # numba, Python, C: each reads inputs its way
    "compile_mode",
    [
        None,
        FAST,
        pytest.param("CVM", marks=pytest.mark.skipif(not shutil.which("g++"), reason="PyTensor's C linker needs g++")),
    ],
)
def test_inputs_of_another_byte_order_alignment_or_layout_give_the_same_derivatives(compile_mode):
    # prepared calls skip PyTensor's input check where the inputs are what its types hold as they are
    # (_Compiled); any other input goes through the check, which converts it
    import pytensor.tensor as pt

    b = di.AutoPyTensor() if compile_mode is None else di.AutoPyTensor(compile_mode=compile_mode)
    A = np.array([[1.0, 2.0, -1.0], [0.5, 0.0, 3.0]])
    f = lambda z: pt.sin(A @ z)  # noqa: E731
    h = lambda z: pt.sum(pt.sin(z) ** 2)  # noqa: E731
    x = np.array([0.3, -0.7, 1.1])
    t = np.array([1.0, 2.0, -0.5])
    strided = np.array([0.3, 9.0, -0.7, 9.0, 1.1])[::2]
    for z, u in ((x, t), (x.astype(">f8"), t.astype(">f8")), (_unaligned(x), _unaligned(t)), (strided, t[::1])):
        preps = {  # a prep for the arrays' own dtype (a byte order is part of it)
            "jacobian": di.prepare_jacobian(b, f, z),
            "gradient": di.prepare_gradient(b, h, z),
            "pushforward": di.prepare_pushforward(b, f, z, u),
        }
        for _ in range(2):  # a second call, after the first has set how the function is called
            np.testing.assert_allclose(
                di.jacobian(b, f, z, prep=preps["jacobian"]), np.cos(A @ x)[:, None] * A, rtol=1e-14
            )
            np.testing.assert_allclose(di.gradient(b, h, z, prep=preps["gradient"]), np.sin(2 * x), rtol=1e-14)
            np.testing.assert_allclose(
                di.pushforward(b, f, z, u, prep=preps["pushforward"]), np.cos(A @ x) * (A @ t), rtol=1e-14
            )
            np.testing.assert_allclose(
                di.pushforward(b, f, x, t, prep=di.prepare_pushforward(b, f, x, t)), np.cos(A @ x) * (A @ t)
            )
    prep = di.prepare_jacobian(b, f, x)
    A = _unaligned(A)  # captured state too
    assert not A.flags.aligned
    np.testing.assert_allclose(di.jacobian(b, f, x, prep=prep), np.cos(A @ x)[:, None] * A, rtol=1e-14)


def test_a_rebound_captured_array_of_another_dtype_or_shape_gets_its_own_compiled_function():
    # state that is numpy arrays alone is keyed by each array's shape and dtype without the walk
    # (_inputs): a rebinding to another dtype or shape compiles again, never feeds the old function
    import pytensor.tensor as pt

    b = di.AutoPyTensor(compile_mode=FAST)
    x = np.array([0.5, -1.0, 2.0])
    A = np.arange(6.0).reshape(2, 3)
    f = lambda z: pt.sin(A @ z)  # noqa: E731
    prep = di.prepare_jacobian(b, f, x)
    compiled = prep.data.data.compiled

    def expected(a: np.ndarray) -> np.ndarray:
        return np.cos(a @ x)[:, None] * a

    assert np.allclose(di.jacobian(b, f, x, prep=prep), expected(A), rtol=1e-14)
    A = np.arange(6.0, dtype=np.float32).reshape(2, 3) + 0.5  # another dtype: a second function
    assert np.allclose(di.jacobian(b, f, x, prep=prep), expected(A.astype(np.float64)), rtol=1e-6)
    assert len(compiled) == 2
    A = np.arange(6.0).reshape(2, 3)[:, ::-1]  # a strided view of the first shape and dtype: the first
    assert np.allclose(di.jacobian(b, f, x, prep=prep), expected(A), rtol=1e-14)
    assert len(compiled) == 2
    A = np.linspace(-1.0, 1.0, 12).reshape(4, 3)  # another shape (and f(x)'s): a third function
    assert np.allclose(di.jacobian(b, f, x, prep=prep), expected(A), rtol=1e-14)
    assert len(compiled) == 3
    A = np.ones((2, 3))
    g = lambda z: pt.sin(A @ z) + pt.sum(ws[0] * z)  # noqa: E731 - a list beside the array: the walk
    ws = [np.array([1.0, 2.0, 3.0])]
    prep = di.prepare_jacobian(b, g, x)
    assert np.allclose(di.jacobian(b, g, x, prep=prep), expected(A) + ws[0], rtol=1e-14)
    ws[0] = np.array([3.0, 2.0, 1.0])
    assert np.allclose(di.jacobian(b, g, x, prep=prep), expected(A) + ws[0], rtol=1e-14)


def test_shared_variables_are_read_at_every_call_and_never_written():
    import pytensor
    import pytensor.tensor as pt

    s = pytensor.shared(np.array([1.0, 2.0, 3.0]))

    def f(z):
        s[0] = z[1]  # a write into the captured shared variable: a set_subtensor in the graph
        return pt.sum(s * z)

    b = di.AutoPyTensor(compile_mode=FAST)
    x = np.array([0.5, 1.5, 2.5])
    prep = di.prepare_gradient(b, f, x)
    # f = z1 z0 + 2 z1 + 3 z2: gradient (z1, z0 + 2, 3)
    assert np.allclose(di.gradient(b, f, x, prep=prep), [1.5, 2.5, 3.0])
    assert np.allclose(s.get_value(), [1.0, 2.0, 3.0])
    s.set_value(np.array([1.0, 7.0, 5.0]))
    assert np.allclose(di.gradient(b, f, x, prep=prep), [1.5, 7.5, 5.0])  # (z1, z0 + 7, 5)


# -- errors -----------------------------------------------------------------------------------------


def test_a_cut_graph_is_the_calls_error_never_zeros():
    import pytensor.tensor as pt
    from pytensor.gradient import disconnected_grad

    f = lambda z: pt.sum(disconnected_grad(z) ** 2)  # noqa: E731
    with pytest.raises(di.LostDerivativeError, match=r"gradient\(AutoPyTensor\(\), f, x\): .*disconnected_grad"):
        di.gradient(di.AutoPyTensor(), f, np.ones(3))


def test_a_constant_f_has_a_zero_derivative():
    import pytensor.tensor as pt

    g = di.gradient(di.AutoPyTensor(), lambda z: pt.sum(pt.ones(3)), np.ones(3))
    assert np.array_equal(g, np.zeros(3))


def test_complex_is_the_calls_error():
    import pytensor.tensor as pt

    z = np.array([1 + 2j, 3 - 1j])
    with pytest.raises(TypeError, match=r"gradient\(AutoPyTensor\(\), f, x\): f computes with complex numbers"):
        di.gradient(di.AutoPyTensor(), lambda v: pt.sum(pt.abs(v) ** 2), z)


def test_a_numpy_conversion_of_a_captured_array_is_the_calls_error():
    import pytensor.tensor as pt

    buf = np.zeros(3)

    def f(z):
        buf[...] = z
        return pt.sum(np.asarray(buf) * z)

    with pytest.raises(TypeError, match=r"gradient\(AutoPyTensor\(\), f, x\): .*converted to a numpy array"):
        di.gradient(di.AutoPyTensor(), f, np.ones(3))


def test_a_missing_engine_gives_the_install_line(monkeypatch):
    import importlib.util

    from diffinterface._core import configs

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pytensor" else real(name, *a))
    monkeypatch.setattr(configs, "_adapters", {})
    with pytest.raises(di.BackendNotAvailableError, match=r'pip install "diffinterface\[pytensor\]"'):
        di.gradient(di.AutoPyTensor(), lambda z: z, np.ones(2))


def test_a_large_one_shot_call_compiles_fully_and_a_small_one_with_the_python_linker(monkeypatch):
    """A one-shot call compiles with the Python linker (a few milliseconds) below
    ``ONESHOT_COMPILED_FROM`` elements of x or f(x), and with the configured mode from there (the
    Python linker's unfused graph costs more than the compile at n = 1e6); both give the gradient."""
    import diffinterface.backends.pytensor as adapter

    modes = []
    compile_ = adapter.pytensor_function

    def recording(*args, **kwargs):
        modes.append(kwargs["mode"])
        return compile_(*args, **kwargs)

    monkeypatch.setattr(adapter, "pytensor_function", recording)
    monkeypatch.setattr(adapter, "ONESHOT_COMPILED_FROM", 8)
    di.prep_cache.enabled = False
    try:
        for n in (4, 12):
            x = np.linspace(0.1, 1.0, n)
            modes.clear()
            g = di.gradient(di.AutoPyTensor(), lambda z: (z**3).sum(), x)
            np.testing.assert_allclose(g, 3 * x**2, rtol=1e-12)
            assert modes and all((m is adapter._ONESHOT_MODE) == (n < 8) for m in modes), (n, modes)
    finally:
        di.prep_cache.enabled = True
