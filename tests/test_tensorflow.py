"""AutoTensorFlow: the catalogue in every mode and family, analytic checks, stand-ins, lost derivatives, errors.

TensorFlow's eager calls and its tf.function traces are slow (a trace costs about 0.1 s), so the whole
catalogue runs once (mode=None, numpy float64) and the other modes and families run on its plain
scenarios (one per operator and function, with the structured, complex and sparse ones for the
tensorflow family).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's oneDNN log lines, in this test process only

import numpy as np
import pytest

import diffinterface as di
from conftest import installed
from diffinterface.testing import default_scenarios, test_differentiation

pytestmark = pytest.mark.skipif(
    not installed("tensorflow"), reason='tensorflow is not installed: pip install "diffinterface[tensorflow]"'
)


def _plain(scenarios, extra=()):
    """One scenario per operator and reference function (no variants), and those named in ``extra``."""
    return [s for s in scenarios if s.name.count("/") == 1 or (s.name.startswith(extra) and s.name.count("/") == 2)]


def test_whole_catalogue_float64_numpy():
    outcomes = test_differentiation([di.AutoTensorFlow()], default_scenarios("numpy", np.float64))
    assert len(outcomes) == len(default_scenarios("numpy", np.float64)) > 400


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_plain_first_order_catalogue_in_each_mode(mode):
    # the mode directs the first-order operators only (the second order's directions are fixed)
    first = ("pushforward/", "pullback/", "derivative/", "gradient/", "jacobian/")
    scenarios = [s for s in _plain(default_scenarios("numpy", np.float64)) if s.name.startswith(first)]
    assert len(test_differentiation([di.AutoTensorFlow(mode=mode)], scenarios)) > 50


@pytest.mark.parametrize(
    "family, dtype, extra",
    [("tensorflow", np.float64, ("structured/", "complex/", "sparse/")), ("tensorflow", np.float32, ())],
    ids=["tensorflow-float64", "tensorflow-float32"],
)
def test_catalogue_on_each_family(family, dtype, extra):
    scenarios = [s for s in _plain(default_scenarios(family, dtype), extra) if "/" in s.name]
    assert len(test_differentiation([di.AutoTensorFlow()], scenarios)) > 80


def test_eager_only_config_passes_the_plain_catalogue():
    scenarios = _plain(default_scenarios("numpy", np.float64))
    assert len(test_differentiation([di.AutoTensorFlow(function=False)], scenarios)) > 80


# -- analytic checks on TensorFlow's own operations -----------------------------------------------------


def _tf():
    import tensorflow as tf

    return tf


def test_tensorflow_in_tensorflow_out_float64_kept_and_numpy_in_numpy_out():
    tf = _tf()
    x = np.array([0.3, -1.2, 2.0])
    f = lambda z: tf.reduce_sum(tf.sin(z) * z**2)  # noqa: E731
    grad = 2 * x * np.sin(x) + x**2 * np.cos(x)
    hess = np.diag(2 * np.sin(x) + 4 * x * np.cos(x) - x**2 * np.sin(x))
    backend = di.AutoTensorFlow()
    got = di.gradient(backend, f, tf.constant(x))
    assert isinstance(got, tf.Tensor) and got.dtype == tf.float64
    np.testing.assert_allclose(got.numpy(), grad, rtol=1e-13)
    out = di.hessian(backend, f, x)
    assert type(out) is np.ndarray and out.dtype == np.float64
    np.testing.assert_allclose(out, hess, rtol=1e-12, atol=1e-14)
    t = np.array([1.0, 0.5, -2.0])
    np.testing.assert_allclose(di.hvp(backend, f, x, t), hess @ t, rtol=1e-12)
    g32 = di.gradient(backend, f, tf.constant(x, dtype=tf.float32))
    assert g32.dtype == tf.float32


def test_jacobian_agrees_with_tf_test_compute_gradient_in_both_modes():
    tf = _tf()
    A = np.array([[1.0, 2.0, -1.0], [0.5, 0.0, 3.0]])

    def f(z):
        return tf.tanh(tf.linalg.matvec(tf.constant(A), z)) * tf.reduce_sum(z**2)

    x = np.array([0.2, -0.4, 0.7])
    (theoretical,), (numerical,) = tf.test.compute_gradient(f, [tf.constant(x)])
    for mode in ("forward", "reverse"):
        jac = di.jacobian(di.AutoTensorFlow(mode=mode), f, x)
        np.testing.assert_allclose(jac, theoretical, rtol=1e-12)
        np.testing.assert_allclose(jac, numerical, rtol=1e-5, atol=1e-6)  # its central step of 1e-3


def test_prepared_jit_compile_and_a_captured_array_read_at_every_call():
    tf = _tf()
    A = np.array([1.0, 2.0, 3.0])

    def f(z):
        return tf.reduce_sum(tf.constant(1.0, tf.float64) * A * z**2)

    x = np.array([0.5, -1.0, 2.0])
    for backend in (di.AutoTensorFlow(), di.AutoTensorFlow(jit_compile=True)):
        prep = di.prepare_gradient(backend, f, x)
        np.testing.assert_allclose(di.gradient(backend, f, x, prep=prep), 2 * A * x, rtol=1e-14)
        A[:] = [3.0, 2.0, 1.0]  # the user updates the captured array: the prepared graph sees it
        np.testing.assert_allclose(di.gradient(backend, f, x, prep=prep), 2 * A * x, rtol=1e-14)
        A[:] = [1.0, 2.0, 3.0]


def test_a_prepared_graph_takes_flat_tensors_x_the_tangents_then_the_captured_arrays():
    """The traced ``tf.function`` takes its arguments as flat tensors (TensorFlow binds and flattens a
    call's arguments in Python at every call: nested lists of them cost 50 us a call at n = 10, a
    fifth of TensorFlow's own call), and a prepared hvp over a captured array is exact at new points
    and after the array is updated."""
    tf = _tf()
    A = np.array([1.0, 2.0, 3.0])

    def f(z):
        return tf.reduce_sum(A * z**3)

    x, t = np.array([0.5, -1.0, 2.0]), np.array([1.0, 0.5, -2.0])
    prep = di.prepare_hvp(di.AutoTensorFlow(), f, x, t)
    signature = prep.data.data.graph.input_signature
    assert [tuple(s.shape) for s in signature] == [(3,), (3,), (3,)]  # x, tx, A
    assert all(isinstance(s, tf.TensorSpec) for s in signature)
    for scale in (1.0, 2.0):
        A[:] = scale * np.array([1.0, 2.0, 3.0])
        np.testing.assert_allclose(di.hvp(di.AutoTensorFlow(), f, 2 * x, t, prep=prep), 6 * A * 2 * x * t, rtol=1e-14)
    A[:] = [1.0, 2.0, 3.0]


# -- closures: writes carry derivatives, the user's state untouched ------------------------------------


@pytest.mark.parametrize("prepared", [False, True])
def test_the_captured_buffer_example_gives_2_1_plus_x_on_every_call(prepared):
    buffer = np.full(3, 9.0)

    def f(x):
        buffer[0] = 1.0
        buffer[0] += x
        return buffer[0] ** 2

    backend = di.AutoTensorFlow()
    preps = {
        op: getattr(di, "prepare_" + op)(backend, f, 0.0) if prepared else None
        for op in ("derivative", "gradient", "second_derivative")
    }
    for x in (0.3, 0.3, -1.2):
        assert di.derivative(backend, f, x, prep=preps["derivative"]) == pytest.approx(2 * (1 + x), rel=1e-14)
        assert di.gradient(backend, f, x, prep=preps["gradient"]) == pytest.approx(2 * (1 + x), rel=1e-14)
        assert di.second_derivative(backend, f, x, prep=preps["second_derivative"]) == pytest.approx(2.0, rel=1e-14)
        assert buffer.tolist() == [9.0, 9.0, 9.0]


_NUMPY_ON_X = {  # numpy computing on a tensor's values: its part of the derivative lost
    "np.linalg.norm": lambda x: np.linalg.norm(x),
    "np.hypot": lambda x: np.sum(np.hypot(x, 1.0)),
    "np.dot": lambda x: np.dot(x, x),
    "np.cumsum": lambda x: np.cumsum(x)[-1] * 1.0,
    "np.clip": lambda x: np.sum(np.clip(x, -0.5, 0.5)),
    "float": lambda x: float(x[0]) * x[1],
}


@pytest.mark.parametrize("prepared", [False, True], ids=["one-shot", "prepared"])
@pytest.mark.parametrize("use", list(_NUMPY_ON_X))
def test_numpy_computing_on_a_tensor_that_reaches_f_is_a_lost_derivative_error(use, prepared):
    """numpy reads an eager tensor through the buffer protocol, which TensorFlow does not see: a numpy
    function or ufunc of x (np.linalg.norm(x), np.hypot(x, 1)) gave f(x) without that term's derivative,
    a wrong gradient and no error where the rest of f kept the path to x. numpy's ufuncs and functions on
    tensors now go through hooks set during the call that record such a read, and the call checks the
    derivative against a central difference (as for float(t)): the call's error. What numpy ran as the
    tensor's own operators (A * x, np.abs(x)) and a read that only steers control flow keep their
    derivative."""
    import tensorflow as tf

    h = _NUMPY_ON_X[use]

    def f(x):
        return tf.reduce_sum(x * x) + h(x)

    backend = di.AutoTensorFlow()
    x = np.array([0.3, -0.7, 1.1])
    with pytest.raises(di.LostDerivativeError, match=r"^gradient\(AutoTensorFlow\(\), f, x\): .*derivative was lost"):
        prep = di.prepare_gradient(backend, f, x) if prepared else None
        di.gradient(backend, f, x, prep=prep)

    A = np.array([[1.0, 2.0, 0.5], [0.0, 1.0, -1.0], [2.0, 0.1, 1.0]])

    def g(x):  # numpy's operators and abs on x run as TensorFlow's; np.max and float(x[0]) only choose a branch
        y = np.sum(A * x) + np.sum(np.abs(x)) + np.sum(x @ A)
        return y * 2.0 if float(x[0]) > 0 and np.max(x) > 1.0 else y

    want = 2.0 * (A.sum(axis=0) + np.sign(x) + A.sum(axis=1))
    prep = di.prepare_gradient(backend, g, x) if prepared else None
    np.testing.assert_allclose(np.asarray(di.gradient(backend, g, x, prep=prep)), want, rtol=1e-12)


@pytest.mark.parametrize("function", [True, False], ids=["tf.function", "eager"])
@pytest.mark.parametrize("prepared", [False, True], ids=["one-shot", "prepared"])
@pytest.mark.parametrize("op", ["gradient", "jacobian", "pushforward", "pullback", "hvp"])
def test_under_const_an_in_place_operator_with_any_tensor_on_a_captured_array_is_the_calls_error(
    op, prepared, function
):
    """closure='const': numpy hands ``part *= t`` on a captured array to the tensor's own operator,
    which rebinds ``part`` and leaves the array as it was (a zero derivative). TensorFlow
    differentiates eager tensors (a one-shot call, function=False) as well as symbolic ones: the
    operator raises for either, for x's tensors and for a constant one alike (the write is lost
    both ways), naming the array and the operator, and the user's array stays as it was."""
    import tensorflow as tf

    backend = di.AutoTensorFlow(closure="const", function=function)
    buf = np.ones(3)
    x = np.array([0.5, 1.5, 2.0])

    def computed(x):
        part = buf[0:3]
        part *= tf.sin(x)
        return tf.reduce_sum(buf * x) if op in ("gradient", "hvp") else buf * x

    def constant(x):
        part = buf[1:3]
        part += tf.constant([2.0, 3.0], dtype=tf.float64)
        return tf.reduce_sum(buf * x) if op in ("gradient", "hvp") else buf * x

    args = (x, np.ones(3)) if op in ("pushforward", "pullback", "hvp") else (x,)
    for f, operator in ((computed, r"\*="), (constant, r"\+=")):
        match = rf"^{op}\(.*closure='const', f writes a TensorFlow value into its own captured array \('buf' captured by .*{f.__name__}\) with an in-place operator \({operator}\)"
        with pytest.raises(ValueError, match=match):
            if prepared:
                getattr(di, f"prepare_{op}")(backend, f, *args)
            else:
                getattr(di, op)(backend, f, *args)
        assert list(buf) == [1.0, 1.0, 1.0]


def test_a_captured_variable_assigned_in_f_carries_the_derivative_and_stays_untouched():
    tf = _tf()
    v = tf.Variable(np.array([5.0, 5.0]))

    def f(x):
        v.assign(x * 2.0)
        v.assign_add(x**2)
        return tf.reduce_sum(v.read_value() * 3.0)

    x = np.array([1.0, -2.0])
    for _ in range(3):
        np.testing.assert_allclose(di.gradient(di.AutoTensorFlow(), f, x), 6.0 + 6.0 * x, rtol=1e-14)
    np.testing.assert_array_equal(v.numpy(), [5.0, 5.0])


# -- a derivative lost on the way is an error, never zeros ---------------------------------------------


def _lost_functions():
    tf = _tf()
    return {
        "numpy()": lambda x: tf.reduce_sum(tf.constant(x.numpy()) ** 2),
        "stop_gradient": lambda x: tf.reduce_sum(tf.stop_gradient(x) ** 2),
        "np.asarray": lambda x: tf.reduce_sum(tf.constant(np.asarray(x)) ** 2),
        "float() on part of the way": lambda x: x[0] * float(x[1]),
    }


@pytest.mark.parametrize("name", ["numpy()", "stop_gradient", "np.asarray", "float() on part of the way"])
@pytest.mark.parametrize("op", ["gradient", "jacobian", "prepared gradient"])
def test_a_cut_graph_is_the_calls_lost_derivative_error(name, op):
    f = _lost_functions()[name]
    x = np.array([0.5, 1.5])
    backend = di.AutoTensorFlow(mode="forward" if op == "jacobian" else None)
    with pytest.raises(di.LostDerivativeError, match=r"AutoTensorFlow.*lost on the way"):
        if op == "prepared gradient":
            di.gradient(backend, f, x, prep=di.prepare_gradient(backend, f, x))
        else:
            getattr(di, op)(backend, f, x)


def test_a_one_shot_gradient_records_f_once():
    """A gradient without ``prep=`` records ``f`` on a tape in its preparation's ``output_info`` and
    hands the tape to the eager runner: one evaluation of ``f`` where it took two, for the plain and
    the value form, with the closed form sin(2x) at two points; a lost derivative seen on that tape
    is still the call's error (checked above, whose first calls are one-shot)."""
    tf = _tf()
    import types

    calls = types.SimpleNamespace(n=0)  # not state: a captured list would be duplicated, this is not

    def f(z):
        calls.n += 1
        return tf.reduce_sum(tf.sin(z) ** 2)

    di.prep_cache.enabled = False
    try:
        for x in (np.linspace(0.1, 1.0, 4), np.linspace(-2.0, 0.5, 4)):
            calls.n = 0
            np.testing.assert_allclose(np.asarray(di.gradient(di.AutoTensorFlow(), f, x)), np.sin(2 * x), rtol=1e-13)
            assert calls.n == 1
            calls.n = 0
            y, g = di.value_and_gradient(di.AutoTensorFlow(), f, x)
            assert calls.n == 1
            np.testing.assert_allclose(np.asarray(g), np.sin(2 * x), rtol=1e-13)
            np.testing.assert_allclose(float(y), np.sum(np.sin(x) ** 2), rtol=1e-13)
    finally:
        di.prep_cache.enabled = True


def test_a_value_read_for_control_flow_and_a_constant_f_are_not_errors():
    tf = _tf()

    def f(x):
        if float(tf.reduce_max(x)) > 10.0:
            return tf.reduce_sum(x)
        return tf.reduce_sum(x**2)

    x = np.array([0.5, 1.5])
    np.testing.assert_allclose(di.gradient(di.AutoTensorFlow(), f, x), 2 * x, rtol=1e-14)
    zero = di.gradient(di.AutoTensorFlow(), lambda z: tf.constant(3.0, tf.float64), x)
    np.testing.assert_array_equal(zero, [0.0, 0.0])


def test_a_missing_engine_names_the_install_line():
    class Absent(di.AutoTensorFlow):
        engine = "tensorflow_is_not_installed_here"

    with pytest.raises(di.BackendNotAvailableError, match=r'pip install "diffinterface\[tensorflow\]"'):
        di.gradient(Absent(), lambda x: x, np.zeros(2))


# -- custom rules inside TensorFlow's own code ----------------------------------------------------------


def test_a_rule_works_under_tensorflows_own_tape_and_accumulator():
    from diffinterface.rules import SecondOrderError, custom_rule

    tf = _tf()

    @custom_rule(opaque=True)
    def cube(x):
        return np.asarray(x) ** 3

    @cube.def_forward
    def _(x):
        return x.val**3, 3 * x.val**2 * x.dval

    @cube.def_reverse
    def _(tape, dy, x):
        return (3 * x.val**2 * dy,)

    x = tf.constant([1.0, -2.0], tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(cube(x))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [3.0, 12.0])
    with tf.autodiff.ForwardAccumulator(x, tf.constant([1.0, 1.0], tf.float64)) as acc:
        y = cube(x)
    np.testing.assert_allclose(acc.jvp(y).numpy(), [3.0, 12.0])
    with pytest.raises(SecondOrderError):
        di.hessian(di.AutoTensorFlow(), lambda z: tf.reduce_sum(cube(z)), np.array([1.0, 2.0]))


@pytest.mark.parametrize("n", [10, 80])
def test_a_one_shot_hessian_is_vectorised_from_eager_pfor_from_and_looped_below(n, monkeypatch):
    """Eagerly (a one-shot call), a Jacobian of at least ``EAGER_PFOR_FROM`` rows is vectorised by
    pfor (a Hessian at n = 1e3: 77 ms where the loop took 1.6 s), a smaller one looped; both exact."""
    import tensorflow as tf

    import diffinterface.backends.tensorflow as adapter

    seen = []
    jacobian = tf.GradientTape.jacobian

    def recording(self, *args, **kwargs):
        seen.append(kwargs.get("experimental_use_pfor"))
        return jacobian(self, *args, **kwargs)

    monkeypatch.setattr(tf.GradientTape, "jacobian", recording)
    x = np.linspace(0.1, 1.0, n)
    di.prep_cache.enabled = False
    try:
        H = di.hessian(di.AutoTensorFlow(), lambda z: tf.reduce_sum(tf.sin(z) ** 2), x)
    finally:
        di.prep_cache.enabled = True
    np.testing.assert_allclose(np.asarray(H), np.diag(2 * np.cos(2 * x)), rtol=1e-12, atol=1e-14)
    assert seen == [n >= adapter.EAGER_PFOR_FROM]
