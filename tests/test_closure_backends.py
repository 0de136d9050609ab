"""Closures duplicated by default (contract section 7), on every installed backend.

tests/test_closure.py pins the discovery mechanism down on finite differences; here the same user
patterns run on every engine: the captured-buffer example, work buffers kept as module globals,
captured arrays updated between prepared calls, partials, callable objects and nested closures,
an exception inside f, and two threads sharing a prep.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import threading
import types

import numpy as np
import pytest
from array_api_compat import array_namespace

import _gierer_meinhardt as gm
import diffinterface as di
from conftest import backend_params, installed

BACKENDS = backend_params(finite_diff=True)


def _tol(backend) -> float:
    if isinstance(backend, di.AutoFiniteDiff):
        return 1e-6
    own = getattr(backend, "tolerance", None)  # an engine's documented float64 accuracy (AutoMLX's sin, exp)
    return own(np.float64, False) if own is not None else 1e-12


# Where an engine cannot run a test's f (PyTensor builds a graph, without values), the call's own error is
# asserted instead: (config class name, test name) -> (error type, message pattern, reason).
CANNOT_RUN = {
    ("AutoPyTensor", "test_a_function_that_writes_only_sometimes_falls_back_to_copies"): (
        TypeError,
        r"^gradient\(AutoPyTensor\(\), f, x\): f needs a value of x",
        "f branches on x's value (if x[0] > 0), which PyTensor's symbolic graph does not have",
    ),
}


def _cannot_run(request, backend, call) -> bool:
    """Where :data:`CANNOT_RUN` names this engine and test: asserts that ``call()`` raises its error, and
    returns True (the test ends there); False otherwise."""
    expected = CANNOT_RUN.get((type(backend).__name__, request.node.originalname))
    if expected is None:
        return False
    kind, pattern, _ = expected
    with pytest.raises(kind, match=pattern):
        call()
    return True


def _states() -> list:
    out = [pytest.param(lambda: np.full(3, 9.0), id="numpy"), pytest.param(lambda: [9.0, 9.0, 9.0], id="list")]
    if installed("torch"):
        import torch

        out.append(pytest.param(lambda: torch.full((3,), 9.0, dtype=torch.float64), id="torch"))
    return out


@pytest.mark.parametrize("make_state", _states())
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_captured_buffer_example(backend, make_state):
    buffer = make_state()

    def f(x):
        buffer[0] = 1.0
        buffer[0] += x
        return buffer[0] ** 2

    before = [float(v) for v in buffer]
    prep = di.prepare_derivative(backend, f, 0.0)
    for x in (0.3, 0.3, -1.2, 2.5):  # four calls in a row, prepared and not
        assert abs(di.derivative(backend, f, x, prep=prep) - 2 * (1 + x)) < 10 * _tol(backend)
        assert abs(di.derivative(backend, f, x) - 2 * (1 + x)) < 10 * _tol(backend)
    assert [float(v) for v in buffer] == before and type(buffer) is type(make_state())


@pytest.mark.parametrize("backend", BACKENDS)
def test_work_buffers_kept_as_module_globals(backend):
    x = np.concatenate([np.linspace(0.5, 1.5, gm.N), np.linspace(1.0, 2.0, gm.N)])
    expected = gm.jacobian(x)
    gm.Ayu[...], gm.Ayv[...] = 7.0, -7.0
    prep = di.prepare_jacobian(backend, gm.rhs, np.ones(2 * gm.N))
    for _ in range(2):
        assert np.allclose(di.jacobian(backend, gm.rhs, x), expected, rtol=_tol(backend), atol=_tol(backend))
        assert np.allclose(di.jacobian(backend, gm.rhs, x, prep=prep), expected, rtol=_tol(backend), atol=_tol(backend))
    assert np.all(gm.Ayu == 7.0) and np.all(gm.Ayv == -7.0)


@pytest.mark.parametrize("closure", ["duplicated", "const"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_captured_array_updated_between_prepared_calls_is_seen(backend, closure):
    # jax.jit, mx.compile, pytensor.function and tf.function bake it in (docs/closures.md)
    baked = closure == "const" and isinstance(backend, (di.AutoJAX, di.AutoMLX, di.AutoPyTensor, di.AutoTensorFlow))
    backend = type(backend)(closure=closure)  # const: read-only state is no error
    a = np.array([1.0, 2.0, 3.0])

    def f(x):
        xp = array_namespace(x)
        return xp.sum(xp.asarray(a) * x * x)  # under const, torch gets the numpy array itself

    x = np.ones(3)
    prep = di.prepare_gradient(backend, f, x)
    assert np.allclose(di.gradient(backend, f, x, prep=prep), 2 * a, rtol=_tol(backend))
    a[1] = 10.0
    expected = [2.0, 4.0, 6.0] if baked else [2.0, 20.0, 6.0]
    got = di.gradient(backend, f, x, prep=prep)
    if isinstance(backend, di.AutoPyTensor) and closure == "const":
        # PyTensor's constant shares the array's memory under its Python linker (FAST_COMPILE, the
        # suite's mode) and is copied into compiled C code (FAST_RUN): either value, never another
        assert np.allclose(got, expected, rtol=_tol(backend)) or np.allclose(got, [2.0, 20.0, 6.0], rtol=_tol(backend))
        return
    assert np.allclose(got, expected, rtol=_tol(backend))


@pytest.mark.parametrize("backend", BACKENDS)
def test_partials_callable_objects_and_nested_closures(backend):
    work = np.zeros(3)

    def base(x, w, buf):
        buf[...] = w * x
        return (buf * buf).sum()  # gradient 2 w^2 x

    class Loss:
        def __init__(self, w):
            self.w, self.buf = w, np.zeros(3)

        def __call__(self, x):
            self.buf[...] = self.w * x
            return (self.buf * self.buf).sum()

    def outer(w):
        buf = np.zeros(3)

        def inner(x):
            buf[...] = w * x
            return (buf * buf).sum()

        return inner

    w = np.array([1.0, 2.0, 3.0])
    loss = Loss(w)
    x = np.array([0.5, -1.0, 2.0])
    for fn in (functools.partial(base, w=w, buf=work), loss, loss.__call__, outer(w)):
        prep = di.prepare_gradient(backend, fn, np.ones(3))
        for _ in range(2):
            assert np.allclose(
                di.gradient(backend, fn, x, prep=prep), 2 * w**2 * x, rtol=_tol(backend), atol=_tol(backend)
            )
    assert np.all(work == 0.0) and np.all(loss.buf == 0.0)


class _Kind(enum.Enum):
    SQUARE = 2


@dataclasses.dataclass(frozen=True)
class _Settings:
    n: int  # a shape: stays a Python int under JAX's trace
    scale: float
    kind: _Kind  # an Enum member copies as itself: left as it is
    name: str


class _Model:
    """A user's object that is not callable, as a training loop keeps one: arrays, a work buffer, a
    function over a captured buffer, settings."""

    def __init__(self, settings: _Settings) -> None:
        self.w = np.array([1.0, 2.0, 3.0])
        self.buf = np.zeros(3)
        self.settings = settings
        work = np.zeros(3)

        def shifted(z):
            work[0:1] = z[0:1]  # a write into an array this function captures
            return z + 0.5 * array_namespace(z).asarray(work)

        self.shifted = shifted


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_plain_user_objects_arrays_are_state_read_at_every_call(backend):
    """``f`` reads arrays through a user's object that is not callable (``model.w``): they are state, read at
    every call and written in copies. Before, such an object was left alone: the compiled engines (JAX, MLX,
    TensorFlow, PyTensor) took ``model.w`` as a constant of the program, so a loop that rebound it got the
    first value's gradient from its fourth unprepared call on (prep_cache's kept prep), and a prepared call
    never saw an update; a write through it landed in the user's buffer (found by the differential test,
    whose dict-x functions reach f through such an object)."""
    dtype = np.float32 if isinstance(backend, di.AutoMLX) else np.float64
    tol = max(_tol(backend), 1e-4) if dtype == np.float32 else _tol(backend)
    settings = _Settings(n=3, scale=2.0, kind=_Kind.SQUARE, name="m")
    model = _Model(settings)
    work = next(c.cell_contents for c in model.shifted.__closure__ if isinstance(c.cell_contents, np.ndarray))

    def loss(z):
        xp = array_namespace(z)
        model.buf[...] = z  # a write into the object's work buffer
        padded = z + xp.zeros(model.settings.n, dtype=z.dtype)
        power = model.settings.kind.value
        return xp.sum(model.settings.scale * xp.asarray(model.w) * padded**power) + xp.sum(model.shifted(z))

    def grad(w, z):  # d/dz [2 w z^2 + sum(z + 0.5 * work)], work[0] = z[0]
        return 4 * w * z + np.array([1.5, 1.0, 1.0])

    x = np.array([0.5, -1.0, 2.0], dtype=dtype)
    for _ in range(5):  # a training loop: the object's array rebound at every step, no prep= (prep_cache keeps one)
        model.w = model.w + 1.0
        np.testing.assert_allclose(di.gradient(backend, loss, x), grad(model.w, x), rtol=tol, atol=tol)
    prep = di.prepare_gradient(backend, loss, x)
    model.w *= 2.0  # written in place between prepared calls
    np.testing.assert_allclose(di.gradient(backend, loss, x, prep=prep), grad(model.w, x), rtol=tol, atol=tol)
    model.w = model.w - 3.0  # rebound between prepared calls
    np.testing.assert_allclose(di.gradient(backend, loss, x, prep=prep), grad(model.w, x), rtol=tol, atol=tol)
    assert np.all(model.buf == 0.0) and np.all(work == 0.0)  # the user's buffers as they were
    assert model.settings is settings and _Kind.SQUARE.value == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_exception_inside_f_leaves_the_state_untouched(backend):
    buf = np.full(3, 4.0)
    items = [1.0, 2.0]

    def f(x):
        buf[...] = x
        items[0] = x[0]
        raise RuntimeError("inside f")

    with pytest.raises(RuntimeError, match="inside f"):
        di.gradient(backend, f, np.ones(3))
    assert np.all(buf == 4.0) and items == [1.0, 2.0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_threads_share_a_function_and_a_prep(backend):
    buf = np.zeros(3)

    def f(x):
        buf[...] = x * 2
        return (buf * x).sum()  # gradient 4 x

    prep = di.prepare_gradient(backend, f, np.ones(3))
    errors = []

    def work(i):
        for j in range(10):
            x = np.full(3, float(i + j))
            g = di.gradient(backend, f, x, prep=prep)
            if not np.allclose(g, 4 * x, rtol=_tol(backend), atol=_tol(backend)):
                errors.append((i, j, g))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and np.all(buf == 0.0)


def _const_cases() -> list:
    out = []
    for config, engine, states in [
        (di.AutoJAX(closure="const"), "jax", ("numpy", "torch")),
        (di.AutoTorch(closure="const"), "torch", ("numpy",)),
        (di.AutoAutograd(closure="const"), "autograd", ("numpy", "torch")),
    ]:
        for state in states:
            skip = not installed(engine) or (state == "torch" and not installed("torch"))
            marks = (
                pytest.mark.skip(reason=f'{engine} or torch is not installed: pip install "diffinterface[all]"')
                if skip
                else ()
            )
            out.append(pytest.param(config, state, marks=marks, id=f"{type(config).__name__}-{state}"))
    return out


@pytest.mark.parametrize("backend, state", _const_cases())
def test_const_closure_writing_x_into_captured_state_is_an_error_naming_it(backend, state):
    # Where the engine cannot carry the written value, "const" raises, naming the state, instead of
    # returning a derivative that misses the path through it.
    if state == "torch":
        import torch

        buffer = torch.zeros(2, dtype=torch.float64)
    else:
        buffer = np.zeros(2)

    def f(x):
        buffer[0] = 1.0
        buffer[0] += x
        return buffer[0] ** 2

    name = type(backend).__name__
    with pytest.raises(
        (ValueError, TypeError),
        match=rf"^derivative\({name}\(closure='const'\), f, x\): with closure='const', "
        r"f writes into its own captured state \('buffer' captured by .*f\), .*"
        r"Use closure='duplicated'",
    ):
        di.derivative(backend, f, 0.3)
    assert di.derivative(type(backend)(), f, 0.3) == pytest.approx(2.6, rel=1e-12)  # the default


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_captured_number_rebound_between_prepared_calls_is_seen(backend):
    # A captured float f only reads needs no duplicate (f is called as it is), and is still read
    # at every call: under JAX it is an argument of the compiled function, not a constant.
    scale = 3.0

    def f(x):
        xp = array_namespace(x)
        return scale * xp.sum(x * x)

    x = np.array([1.0, -2.0])
    prep = di.prepare_gradient(backend, f, x)
    assert np.allclose(di.gradient(backend, f, x, prep=prep), 6.0 * x, rtol=_tol(backend))
    scale = 5.0
    assert np.allclose(di.gradient(backend, f, x, prep=prep), 10.0 * x, rtol=_tol(backend))


@pytest.mark.parametrize("backend", BACKENDS)
def test_captured_keys_and_sizes_changed_between_prepared_calls_are_seen(backend):
    # Captured state that is not an array (a list of key strings, an int size) is static under JAX:
    # the call's values are compared with those seen at preparation; a change takes another program.
    keys = ["a", "b"]
    size = 2

    def f(x):
        xp = array_namespace(x)
        parts = {k: x[i * size : (i + 1) * size] for i, k in enumerate(keys)}
        return sum(float(j + 1) * xp.sum(parts[k] ** 2) for j, k in enumerate(keys))

    x = np.array([1.0, -2.0, 0.5, 3.0])
    prep = di.prepare_gradient(backend, f, x)
    for _ in range(2):
        assert np.allclose(
            np.asarray(di.gradient(backend, f, x, prep=prep)), [2.0, -4.0, 2.0, 12.0], rtol=_tol(backend)
        )
    size = 1  # rebound: the parts are x[0:1] and x[1:2]
    assert np.allclose(np.asarray(di.gradient(backend, f, x, prep=prep)), [2.0, -8.0, 0.0, 0.0], rtol=_tol(backend))
    keys[1] = "c"  # the same list, written: the weights follow the order, the parts the new key
    keys.append("d")  # three parts now
    assert np.allclose(np.asarray(di.gradient(backend, f, x, prep=prep)), [2.0, -8.0, 3.0, 0.0], rtol=_tol(backend))


def _array_states() -> list:
    out = [pytest.param(lambda v: np.array(v), id="numpy")]
    if installed("torch"):
        import torch

        out.append(pytest.param(lambda v: torch.tensor(v, dtype=torch.float64), id="torch"))
    return out


@pytest.mark.parametrize("make_state", _array_states())
@pytest.mark.parametrize("backend", [b for b in BACKENDS if b.id != "AutoJAX"])  # jit: no branch on x's value
def test_a_function_that_writes_only_sometimes_falls_back_to_copies(request, backend, make_state):
    """Captured arrays reach f as guarded aliases (read-only views, tensors that require grad) until
    f writes into one: the call that writes runs again over copies, and later calls copy."""
    a = make_state([1.0, 2.0, 3.0])

    def f(x):
        xp = array_namespace(x)
        if x[0] > 0:  # a write only on this branch
            a[0] = 5.0
        w = xp.asarray(a, dtype=x.dtype) if not isinstance(a, (list,)) else a
        return xp.sum(w * x**2)

    def expected(x):
        w = np.array([5.0 if x[0] > 0 else 1.0, 2.0, 3.0])
        return 2 * w * x

    if _cannot_run(request, backend, lambda: di.gradient(backend, f, np.ones(3))):
        assert [float(v) for v in a] == [1.0, 2.0, 3.0]
        return
    prep = di.prepare_gradient(backend, f, np.ones(3) * -1)
    for x in (
        np.array([-1.0, 0.5, 2.0]),
        np.array([1.0, 0.5, 2.0]),
        np.array([-2.0, 1.5, 0.5]),
        np.array([3.0, 1.0, 1.0]),
    ):
        for p in (prep, None):
            g = di.gradient(backend, f, x, prep=p)
            assert np.allclose(np.asarray(g), expected(x), rtol=_tol(backend), atol=_tol(backend))
            assert [float(v) for v in a] == [1.0, 2.0, 3.0]
    if isinstance(a, np.ndarray):
        assert a.flags.writeable  # the read-only flag was set on views only


@pytest.mark.parametrize("make_state", _array_states())
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_read_only_capture_sees_updates_and_rebinding_between_calls(backend, make_state):
    """f over aliases is reused between calls while the user's objects are the same: an in-place
    update is seen through the alias, and a rebinding makes a new one."""
    state = {"a": make_state([1.0, 2.0])}
    a = state["a"]

    def make():
        def f(x):
            xp = array_namespace(x)
            return xp.sum(xp.asarray(a, dtype=x.dtype) * xp.sin(x))

        return f

    f = make()
    x = np.array([0.3, -0.7])
    prep = di.prepare_gradient(backend, f, x)
    for values in ([1.0, 2.0], [4.0, -1.0], [0.5, 0.5]):
        a[0], a[1] = values  # the user updates the captured array in place
        g = di.gradient(backend, f, x, prep=prep)
        assert np.allclose(np.asarray(g), np.array(values) * np.cos(x), rtol=_tol(backend), atol=_tol(backend))
    if isinstance(a, np.ndarray):
        assert a.flags.writeable

    def rebinding():
        scale = make_state([1.0, 1.0])

        def f(x):
            xp = array_namespace(x)
            return xp.sum(xp.asarray(scale, dtype=x.dtype) * x**2)

        def rebind(values):
            nonlocal scale
            scale = make_state(values)

        return f, rebind

    f, rebind = rebinding()
    prep = di.prepare_gradient(backend, f, x)
    for values in ([1.0, 1.0], [3.0, -2.0]):
        rebind(values)
        g = di.gradient(backend, f, x, prep=prep)
        assert np.allclose(np.asarray(g), 2 * np.array(values) * x, rtol=_tol(backend), atol=_tol(backend))


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_error_of_f_over_aliases_is_raised_as_it_is(backend):
    a = np.array([1.0, 2.0])
    switch = types.SimpleNamespace(fail=False)  # not state: left as it is

    def f(x):
        xp = array_namespace(x)
        if switch.fail:
            raise KeyError("f's own error")
        return xp.sum(xp.asarray(a, dtype=x.dtype) * x)

    prep = di.prepare_gradient(backend, f, np.zeros(2))
    switch.fail = True
    with pytest.raises(KeyError, match="f's own error"):
        di.gradient(backend, f, np.zeros(2))
    switch.fail = False
    assert np.allclose(np.asarray(di.gradient(backend, f, np.zeros(2), prep=prep)), a)
    assert np.all(a == [1.0, 2.0])


def test_a_stand_in_passed_to_a_library_function_is_an_error_naming_it():
    """Under JAX an array f writes into is a stand-in (and so is a slice of it, a view as numpy's);
    handed to jnp.sin it would fail obscurely: an error names it and the fix, jnp.asarray(buf)."""
    if not installed("jax"):
        pytest.skip('jax is not installed: pip install "diffinterface[jax]"')
    import jax.numpy as jnp

    backend = di.AutoJAX()
    buf = np.zeros(3)

    def f(x):
        buf[...] = x
        return jnp.sum(jnp.sin(buf))

    def sliced(x):
        buf[...] = x
        return jnp.sum(jnp.sin(buf[0:2]))

    def fixed(x):
        buf[...] = x
        return jnp.sum(jnp.sin(jnp.asarray(buf))) + jnp.sum(jnp.asarray(buf[0:2]) ** 2)

    x = np.array([0.1, 0.2, 0.3])
    for g in (f, sliced):
        with pytest.raises(
            (TypeError, ValueError), match=r"^gradient\(AutoJAX\(\), f, x\): .*'buf'.*jnp\.asarray\(buf\)"
        ):
            di.gradient(backend, g, x)
        with pytest.raises((TypeError, ValueError), match="'buf'"):
            di.gradient(backend, g, x, prep=di.prepare_gradient(backend, g, x))
    assert np.allclose(np.asarray(di.gradient(backend, fixed, x)), np.cos(x) + 2 * x * [1, 1, 0], rtol=1e-12)
    assert np.all(buf == 0)


def test_autograd_numpy_functions_take_a_stand_in_and_its_views():
    """Under autograd numpy's functions reach a stand-in through numpy's own dispatch (__array_ufunc__,
    __array_function__) and compute with autograd's function of the same name: the derivative through
    anp.sin(buf), np.sin(buf[0:2]), np.sum, np.concatenate and A @ buf is kept (before, anp.sin(buf)
    was the call's error), prepared and not."""
    if not installed("autograd"):
        pytest.skip('autograd is not installed: pip install "diffinterface[autograd]"')
    import autograd.numpy as anp

    backend = di.AutoAutograd()
    buf = np.zeros(3)
    A = np.arange(9.0).reshape(3, 3)

    def f(x):
        buf[...] = x
        local = np.array([1.0, 2.0, 3.0])  # f's own numpy array, on the left of @
        return (
            anp.sum(anp.sin(buf))
            + np.sum(np.sin(buf[0:2]))
            + np.sum(np.concatenate([buf[1:], buf[:1]]) ** 2)
            + np.sum(A @ buf)
            + local @ buf
        )

    def grad(x):
        return 2 * np.cos(x) * [1, 1, 0] + np.cos(x) * [0, 0, 1] + 2 * x + A.sum(axis=0) + [1.0, 2.0, 3.0]

    x = np.array([0.1, 0.2, 0.3])
    prep = di.prepare_gradient(backend, f, x)
    for _ in range(2):
        np.testing.assert_allclose(di.gradient(backend, f, x), grad(x), rtol=1e-12)
        np.testing.assert_allclose(di.gradient(backend, f, x, prep=prep), grad(x), rtol=1e-12)
    assert np.all(buf == 0)


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b.id in ("AutoJAX", "AutoAutograd")])
def test_const_closure_writing_a_traced_value_into_a_captured_list_is_an_error_and_the_list_is_put_back(backend):
    """Under closure='const' a JAX tracer or an autograd box written into a captured list would
    outlive the call; the preparation raises, naming the list, and puts its contents back."""
    const = type(backend)(closure="const")
    state = [1.0, 2.0]

    def f(x):
        state[0] = x[0] * 2
        return state[0] ** 2 + x[1]

    with pytest.raises(ValueError, match=r"closure='const'.*'state' captured by .*closure='duplicated'"):
        di.gradient(const, f, np.array([0.5, 1.0]))
    assert state == [1.0, 2.0] and all(type(v) is float for v in state)
    with pytest.raises(ValueError, match="'state'"):
        di.prepare_gradient(const, f, np.array([0.5, 1.0]))
    assert state == [1.0, 2.0]
    assert np.allclose(np.asarray(di.gradient(backend, f, np.array([0.5, 1.0]))), [8 * 0.5, 1.0])
    assert state == [1.0, 2.0]

    def reads(x):  # a list only read under const: fine
        return state[0] * x[0] ** 2 + state[1] * x[1]

    assert np.allclose(np.asarray(di.gradient(const, reads, np.array([0.5, 1.0]))), [1.0, 2.0])


_BUFFER_PACKAGE = """
import numpy as np

a = np.zeros(1)


def f(x):
    a[0] = 1.0
    a[0] += x
    return a[0] ** 2
"""


@pytest.fixture
def installed_package(tmp_path, monkeypatch):
    """docs/closures.md's buffer example as a module of a package in a site-packages directory, imported
    the way an installed package is (``site.addsitedir``): model code usually is one."""
    import importlib
    import site
    import sys

    root = tmp_path / "lib" / "python3" / "site-packages"
    (root / "dimodelpkg" / "models").mkdir(parents=True)
    (root / "dimodelpkg" / "__init__.py").write_text(_BUFFER_PACKAGE)
    (root / "dimodelpkg" / "models" / "__init__.py").write_text(_BUFFER_PACKAGE)
    monkeypatch.setattr(sys, "path", list(sys.path))
    site.addsitedir(str(root))
    yield importlib.import_module("dimodelpkg"), importlib.import_module("dimodelpkg.models")
    for name in ("dimodelpkg.models", "dimodelpkg"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_buffer_example_in_an_installed_package_is_walked(backend, installed_package):
    """Which functions are walked depends on the module's name, not on where it is installed: the
    docs/closures.md's example from a package under site-packages gives 3.0 and leaves the package's ``a``
    alone on every backend (it gave 0.0 on torch and mutated ``a`` before)."""
    pkg, _ = installed_package
    for _ in range(2):
        assert abs(di.derivative(backend, pkg.f, 0.5) - 3.0) < _tol(backend)
        prep = di.prepare_derivative(backend, pkg.f, 0.25)
        assert abs(di.derivative(backend, pkg.f, 0.5, prep=prep) - 3.0) < _tol(backend)
        np.testing.assert_array_equal(pkg.a, [0.0])


def test_declared_library_modules_are_not_walked_and_the_most_specific_declaration_wins(installed_package):
    pkg, models = installed_package
    from diffinterface._closures import namespaces as _closure

    try:
        di.declare_modules("dimodelpkg", walk=False)
        di.declare_modules("dimodelpkg.models", walk=True)
        # a library's function runs as it is, over its own module's a (finite differences read it)
        di.derivative(di.AutoFiniteDiff(), pkg.f, 0.5)
        assert pkg.a[0] != 0.0
        assert abs(di.derivative(di.AutoFiniteDiff(), models.f, 0.5) - 3.0) < 1e-6
        np.testing.assert_array_equal(models.a, [0.0])
    finally:
        _closure.undeclare_modules("dimodelpkg", "dimodelpkg.models")
    assert _closure.is_user_module("dimodelpkg.models") and _closure.is_user_module("__main__")
    assert not any(
        _closure.is_user_module(m)
        for m in ("json", "numpy.linalg", "torch.nn.functional", "diffinterface._closures.walk")
    )
    import diffinterface.testing  # noqa: F401 - declares its scenario module user code on import

    assert _closure.is_user_module("diffinterface.testing._scenarios")
    with pytest.raises(ValueError, match="expected a module name"):
        di.declare_modules("", walk=True)
    with pytest.raises(TypeError, match="walk must be True or False"):
        di.declare_modules("x", walk="yes")


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_f_that_raises_runs_once_and_a_refused_write_reruns_over_copies(backend):
    """Only the guard's own error (a write into an alias that the engine refused) makes f run again
    over copies; any other error of f is raised after one run, side effects included once."""
    a = np.array([1.0, 2.0])
    runs = types.SimpleNamespace(n=0, fail=False)  # not state: left as it is

    def f(x):
        runs.n += 1
        xp = array_namespace(x)
        if runs.fail:
            raise ValueError("f's own error")
        return xp.sum(xp.asarray(a, dtype=x.dtype) * x)

    # a compiled prep does not run f again (JAX, PyTensor, TensorFlow's tf.function): its unprepared call runs f once
    compiled = isinstance(backend, (di.AutoJAX, di.AutoPyTensor, di.AutoTensorFlow))
    prep = None if compiled else di.prepare_gradient(backend, f, np.zeros(2))
    runs.fail, runs.n = True, 0
    with pytest.raises(ValueError, match="f's own error"):
        di.gradient(backend, f, np.zeros(2), prep=prep)
    assert runs.n == 1

    b = np.array([1.0, 2.0])

    def g(x):  # writes into its captured array: refused over the alias, then run over a copy
        runs.n += 1
        xp = array_namespace(x)
        b[0] = 3.0
        return xp.sum(xp.asarray(b, dtype=x.dtype) * x)

    prep = di.prepare_gradient(backend, g, np.zeros(2))
    counts = []
    for _ in range(3):
        runs.n = 0
        assert np.allclose(np.asarray(di.gradient(backend, g, np.zeros(2), prep=prep)), [3.0, 2.0])
        assert np.all(b == [1.0, 2.0])
        counts.append(runs.n)
    # learnt at the first refusal (at preparation or at the first call): copies from then on
    assert counts[2] == counts[1] <= counts[0] <= counts[1] + 1  # the refused run at most once


# Each way f can write into a captured numpy array; the expected state after it is numpy's own, applied
# to a writable copy. Each is refused over the read-only alias (the adapter's ``refused_write`` hook
# recognises it) and f runs again over a copy.
NUMPY_WRITES = {
    "setitem": lambda b: b.__setitem__(0, 3.0),
    "iadd": lambda b: b.__iadd__(1.0),
    "ufunc_out": lambda b: np.add(b, 1.0, out=b),
    "copyto": lambda b: np.copyto(b, 2.0),
    "fill": lambda b: b.fill(2.0),
    "sort": lambda b: b.sort(),
    "put": lambda b: np.put(b, 0, 3.0),
    "place": lambda b: np.place(b, b > 1.5, 0.0),
}


@pytest.mark.parametrize("write", NUMPY_WRITES.values(), ids=NUMPY_WRITES.keys())
def test_every_numpy_write_into_a_captured_array_is_refused_and_rerun_over_a_copy(write):
    backend = di.AutoFiniteDiff()
    b = np.array([2.0, 1.0])
    expected = b.copy()
    write(expected)

    def f(x):
        write(b)
        return np.sum(b * x)

    prep = di.prepare_gradient(backend, f, np.zeros(2))
    for _ in range(2):
        np.testing.assert_allclose(di.gradient(backend, f, np.zeros(2), prep=prep), expected, atol=1e-6)
        np.testing.assert_array_equal(b, [2.0, 1.0])


def _torch_writes() -> list:
    if not installed("torch"):
        return [pytest.param(None, marks=pytest.mark.skip(reason='pip install "diffinterface[torch]"'))]
    import torch

    ones = functools.partial(torch.ones, dtype=torch.float64)
    writes = {
        "setitem": lambda b: b.__setitem__(0, 3.0),
        "add_": lambda b: b.add_(1.0),
        "view_mul_": lambda b: b[0:1].mul_(3.0),
        "split_mul_": lambda b: b.split([1, 1])[0].mul_(3.0),
        "copy_": lambda b: b.copy_(ones(2) * 2.0),
        "out": lambda b: torch.add(b, 1.0, out=b),
        "numpy": lambda b: b.numpy(),
        "batch_norm_statistics": lambda b: torch.nn.functional.batch_norm(ones(2, 2), b, ones(2), training=True),
    }
    return [pytest.param(w, id=name) for name, w in writes.items()]


@pytest.mark.parametrize("write", _torch_writes())
def test_every_torch_refusal_over_a_captured_tensor_reruns_over_a_copy(write):
    """torch refuses each of these over the guarded alias (a tensor that requires grad): the torch
    adapter's ``refused_write`` recognises each, and f runs again over a copy; the expected state is
    torch's own, applied to a plain copy."""
    import torch

    backend = di.AutoTorch()
    b = torch.tensor([2.0, 1.0], dtype=torch.float64)
    expected = b.clone()
    write(expected)

    def f(x):
        write(b)
        return (b * x).sum()

    x = torch.zeros(2, dtype=torch.float64)
    prep = di.prepare_gradient(backend, f, x)
    for _ in range(2):
        torch.testing.assert_close(di.gradient(backend, f, x, prep=prep), expected, rtol=1e-15, atol=0)
        torch.testing.assert_close(b, torch.tensor([2.0, 1.0], dtype=torch.float64), rtol=0, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_engine_error_of_f_over_its_captured_array_runs_once(backend):
    """An error the engine itself raises in f (a reshape to the wrong size), of the same type as a
    refused write (numpy's ValueError, torch's RuntimeError) and in a frame that holds the guarded
    alias, is f's own: raised after one run of f, not taken for a refusal."""
    b = np.array([1.0, 2.0])
    runs = types.SimpleNamespace(n=0)

    def f(x):
        runs.n += 1
        xp = array_namespace(x)
        return xp.sum(xp.reshape(xp.asarray(b, dtype=x.dtype), (3,))) * x[0]

    errors: tuple = (ValueError, RuntimeError, TypeError)
    if isinstance(backend, di.AutoTensorFlow):  # TensorFlow raises its own InvalidArgumentError (an OpError)
        import tensorflow as tf

        errors += (tf.errors.InvalidArgumentError,)
    with pytest.raises(errors):
        di.gradient(backend, f, np.zeros(2))
    assert runs.n == 1


def _augmented_writes() -> list:
    # (f over a captured buffer of ones, its Jacobian at x = [2, 3] in closed form)
    def add_slice(buf, x):
        buf[0:2] += x
        return buf * 1.0

    def mul_slice(buf, x):
        buf[0:2] *= x
        return buf * 1.0

    def add_ellipsis(buf, x):
        buf[...] += x[0]
        return buf * 1.0

    def through_a_view(buf, x):  # numpy: an in-place update of a view writes its base
        part = buf[1:3]
        part *= x
        part += x**2
        return buf * 1.0

    return [
        pytest.param(add_slice, [[1, 0], [0, 1], [0, 0]], id="buf[0:2] += x"),
        pytest.param(mul_slice, [[1, 0], [0, 1], [0, 0]], id="buf[0:2] *= x"),
        pytest.param(add_ellipsis, [[1, 0], [1, 0], [1, 0]], id="buf[...] += x[0]"),
        pytest.param(through_a_view, [[0, 0], [5, 0], [0, 7]], id="part = buf[1:3]; part *= x; part += x**2"),
    ]


@pytest.mark.parametrize("g, want", _augmented_writes())
@pytest.mark.parametrize("backend", BACKENDS)
def test_38_10_augmented_assignment_into_a_slice_of_a_captured_buffer(request, backend, g, want):
    buf = np.ones(3)

    def f(x):
        return g(buf, x)

    x = np.array([2.0, 3.0])
    expected = g(np.ones(3), x)  # f's value, by numpy itself
    prep = di.prepare_jacobian(backend, f, x)
    for _ in range(2):
        y, jac = di.value_and_jacobian(backend, f, x)
        np.testing.assert_allclose(np.asarray(y), expected, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(jac), want, atol=10 * _tol(backend))
        np.testing.assert_allclose(np.asarray(di.jacobian(backend, f, x, prep=prep)), want, atol=10 * _tol(backend))
    np.testing.assert_array_equal(buf, np.ones(3))  # the user's buffer is left alone


def _views() -> list:
    # (f over a captured buffer of ones, its value by numpy, its Jacobian at x = [2, 3] in closed form):
    # basic indexing gives views that write their base and see its later writes; advanced indexing copies
    def sees_a_later_write(buf, x):  # a view taken before a write into its base reads the written value
        part = buf[1:3]
        buf[1] = x[0]
        return part * x[1]

    def view_setitem(buf, x):
        part = buf[1:3]
        part[0] = x[1]
        return buf * 1.0

    def view_of_a_view(buf, x):
        part = buf[1:3]
        tail = part[1:]
        tail += x[0]
        return buf * 1.0

    def integer_array_copy(buf, x):  # numpy: buf[[0, 2]] is a copy, its update does not reach buf
        buf[1] = 4.0  # f writes into buf: where an engine has stand-ins, buf is one here
        c = buf[np.array([0, 2])]
        c *= x
        return c + buf[0:2]

    def mask_copy(buf, x):  # a boolean mask: a copy too
        c = buf[np.array([True, False, True])]
        c += x
        buf[1] = 5.0
        return c * buf[1:3]

    return [
        pytest.param(sees_a_later_write, [[3, 2], [0, 1]], id="part = buf[1:3]; buf[1] = x[0]; part * x[1]"),
        pytest.param(view_setitem, [[0, 0], [0, 1], [0, 0]], id="part = buf[1:3]; part[0] = x[1]"),
        pytest.param(view_of_a_view, [[0, 0], [0, 0], [1, 0]], id="tail = buf[1:3][1:]; tail += x[0]"),
        pytest.param(integer_array_copy, [[1, 0], [0, 1]], id="c = buf[[0, 2]]; c *= x (a copy)"),
        pytest.param(mask_copy, [[5, 0], [0, 1]], id="c = buf[mask]; c += x (a copy)"),
    ]


@pytest.mark.parametrize("g, want", _views())
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_slice_of_a_captured_buffer_is_a_view_and_an_advanced_index_a_copy(request, backend, g, want):
    """numpy's semantics on every engine, prepared and not: basic indexing of a captured buffer gives a
    view whose writes reach the buffer (and which sees the buffer's later writes), advanced indexing
    a copy whose writes do not; values against numpy running the same f, Jacobians in closed form."""
    x = np.array([2.0, 3.0])
    expected = g(np.ones(3), x)  # f's value, by numpy itself
    buf = np.ones(3)

    def f(x):
        return g(buf, x)

    if isinstance(backend, di.AutoMLX) and "mask" in request.node.callspec.id:
        with pytest.raises(ValueError, match="boolean indices"):  # MLX has no boolean indexing: its own error
            di.jacobian(backend, f, x)
        return
    prep = di.prepare_jacobian(backend, f, x)
    for _ in range(2):
        y, jac = di.value_and_jacobian(backend, f, x)
        np.testing.assert_allclose(np.asarray(y), expected, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(jac), want, atol=10 * _tol(backend))
        y, jac = di.value_and_jacobian(backend, f, x, prep=prep)
        np.testing.assert_allclose(np.asarray(y), expected, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(jac), want, atol=10 * _tol(backend))
    np.testing.assert_array_equal(buf, np.ones(3))  # the user's buffer is left alone


def test_mlx_stand_ins_take_mlx_and_numpy_functions():
    """Under MLX a captured array reaches f as a stand-in over a fresh MLX array: MLX's functions take
    it (__mlx_array__), numpy's ufuncs compute with MLX's function of the same name (the derivative
    kept: np.float64(3) * buf, np.sin(buf)), its slices are views, a numpy integer index works."""
    if not installed("mlx"):
        pytest.skip('mlx is not installed: pip install "diffinterface[mlx]"')
    import mlx.core as mx

    backend = di.AutoMLX()
    buf = np.ones(3)

    def f(x):
        buf[0] = x[0]
        part = buf[1:3]
        part *= x
        return mx.sin(buf) + 3.0 * np.sin(buf) + np.float64(2.0) * buf + buf[np.array([2, 1, 0])]

    # buf = [x0, x0, x1] after the writes; f = 4 sin(buf) + 2 buf + [x1, x0, x0]
    x = np.array([0.5, 1.5])
    c0, c1 = 4 * np.cos(x[0]) + 2, 4 * np.cos(x[1]) + 2
    want = np.array([[c0, 1.0], [c0 + 1.0, 0.0], [1.0, c1]])
    prep = di.prepare_jacobian(backend, f, x)
    for _ in range(2):
        np.testing.assert_allclose(np.asarray(di.jacobian(backend, f, x)), want, atol=1e-5)
        np.testing.assert_allclose(np.asarray(di.jacobian(backend, f, x, prep=prep)), want, atol=1e-5)
    assert np.all(buf == 1)


@pytest.mark.parametrize("name", ["jax", "pytensor", "tensorflow"])
def test_under_const_the_first_traces_guards_are_the_users_own_arrays(name):
    """The guards the first trace gives f under closure='const' (ConstGuardView) are views of your
    arrays: a write that does not depend on x lands in your buffer as const says, reads see it, the
    derivative is right; an in-place operator with x's traced value is the call's error, naming the
    array and the operator."""
    if not installed(name):
        pytest.skip(f'{name} is not installed: pip install "diffinterface[{name}]"')
    backend = {"jax": di.AutoJAX, "pytensor": di.AutoPyTensor, "tensorflow": di.AutoTensorFlow}[name](closure="const")
    buf = np.array([1.0, 2.0, 3.0])

    def f(x):
        counter = buf[0:1]
        counter += 1.0  # a constant write: into your buffer
        return x * buf[1]

    x = np.array([0.5, 1.5])
    np.testing.assert_allclose(np.asarray(di.jacobian(backend, f, x)), 2.0 * np.eye(2))
    assert buf[0] > 1.0 and list(buf[1:]) == [2.0, 3.0] and type(buf) is np.ndarray

    def g(x):
        part = buf[1:3]
        part -= x
        return buf * 1.0

    with pytest.raises(ValueError, match=r"captured array \('buf' captured by .*g\) with an in-place operator \(-=\)"):
        di.jacobian(backend, g, x)
    assert list(buf[1:]) == [2.0, 3.0]


@pytest.mark.parametrize("write", ["setitem", "copyto", "out"])
@pytest.mark.parametrize("backend", backend_params())
def test_under_const_numpy_writing_an_engine_value_into_a_captured_array_is_the_calls_error(backend, write):
    """closure='const' hands f your own numpy buffer; numpy writes an engine's value into it by item
    assignment, np.copyto or a ufunc's out= as its values alone (TensorFlow's and MLX's arrays, which
    numpy reads), or refuses it (JAX's tracers, autograd's boxes, PyTensor's variables, torch's tensors
    that require grad): the derivative through the buffer is lost either way. Each is the call's
    error, never a derivative that misses that path (TensorFlow and MLX gave [6, 6] for [8, 6]); the
    same writes of numbers land in the buffer, as const says."""
    buf = np.ones(3)

    def f(x):
        xp = array_namespace(x)
        if write == "setitem":
            buf[1:3] = x
        elif write == "copyto":
            np.copyto(buf[1:3], x)
        else:
            np.multiply(buf[1:3], x, out=buf[1:3])
        return xp.sum(x * x) + buf[1] * x[0]  # buf[1] = x0: f = 2 x0^2 + x1^2, gradient [8, 6]

    const = type(backend)(closure="const")
    x = np.array([2.0, 3.0])
    with pytest.raises((TypeError, ValueError, di.LostDerivativeError), match=r"^gradient\(.*closure='const'"):
        di.gradient(const, f, x)
    # the default closure: the right derivative (item assignment everywhere; copyto and out= where the
    # engine's stand-ins take numpy's writes, MLX and autograd), or an error, never another number
    carried = write == "setitem" or isinstance(backend, (di.AutoMLX, di.AutoAutograd))
    try:
        duplicated = di.gradient(type(backend)(), f, x)
    except (TypeError, ValueError, di.LostDerivativeError):
        assert not carried
    else:
        np.testing.assert_allclose(np.asarray(duplicated), [8.0, 6.0], rtol=1e-6)
    assert list(buf) == [1.0, 1.0, 1.0]

    def g(x):  # numbers written: they land in the buffer, and the derivative needs none of them
        xp = array_namespace(x)
        buf[0] = 2.0
        np.copyto(buf[1:2], 3.0)
        np.multiply(buf[2:3], 0.5, out=buf[2:3])
        return xp.sum(x * x) * buf[0]

    buf[:] = 1.0
    np.testing.assert_allclose(np.asarray(di.gradient(const, g, x)), [8.0, 12.0], rtol=1e-6)
    assert buf[0] == 2.0 and buf[1] == 3.0 and buf[2] < 1.0


@pytest.mark.parametrize("backend", backend_params())
def test_a_view_written_under_const_closure_is_the_calls_error(backend):
    """closure='const' hands f your own buffer: a write through a slice held in a variable
    (part = buf[1:3]; part *= x) cannot carry x's derivative into a numpy array, so the call raises
    (torch, autograd, MLX), as docs/closures.md says (what f writes under const may reach your buffer).
    Under JAX, PyTensor and TensorFlow numpy hands part *= x to the engine's value's own operator,
    which rebinds part and leaves buf as it was: the first trace gives f guards of its numpy arrays
    (ConstGuardView) whose in-place operators raise on a traced operand, on TensorFlow any tensor,
    eager ones included (they gave zeros)."""
    buf = np.ones(3)

    def f(x):
        part = buf[1:3]
        part *= x
        part += x**2
        return buf * 1.0

    backend = type(backend)(closure="const")
    with pytest.raises((TypeError, ValueError, di.LostDerivativeError), match=r"^jacobian\(.*closure='const'"):
        di.jacobian(backend, f, np.array([2.0, 3.0]))


_SHARED_BY_TORCH = np.array([1.0, 2.0])  # a module global f converts with torch.asarray


@pytest.mark.parametrize("operator", ["gradient", "jacobian"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_writing_into_a_captured_numpy_array_never_reaches_the_users(backend, operator):
    """torch makes a writable tensor over a numpy array's memory whatever numpy's read-only flag says
    (``torch.asarray``, ``torch.from_numpy``): a read-only view of the user's array, the guard against
    writes of the finite differences' and autograd's adapters, guards nothing there. With torch
    inputs, ``f`` gets copies: the derivative is right (or the engine's error), and neither the captured
    array nor a ``Constant`` ever changes (finite differences gave -247707 and left the array at [6, 7])."""
    torch = pytest.importorskip("torch")
    constant = np.array([1.0, 2.0])

    def captured(x):
        c = torch.asarray(_SHARED_BY_TORCH)
        c.add_(1.0)  # each call's f sees [1, 2] + 1: the derivative of sum(c * x) is [2, 3]
        return c * x if operator == "jacobian" else (c * x).sum()

    def given(x, k):
        c = torch.asarray(k)
        c.add_(1.0)
        return c * x if operator == "jacobian" else (c * x).sum()

    expected = np.array([2.0, 3.0]) if operator == "gradient" else np.diag([2.0, 3.0])
    op = getattr(di, operator)

    def given_in_a_dict(x, k):  # x numpy, a torch tensor among the contexts: torch is in play as well
        c = torch.asarray(k["c"])
        c.add_(1.0)
        y = c.numpy() * x + 0.0 * k["t"].numpy()
        return y if operator == "jacobian" else y.sum()

    cases = (
        (captured, (), "torch"),
        (given, (di.Constant(constant),), "torch"),
        (given_in_a_dict, (di.Constant({"c": constant, "t": torch.zeros(1, dtype=torch.float64)}),), "numpy"),
    )
    for f, contexts, fam in cases:
        _SHARED_BY_TORCH[:] = [1.0, 2.0]
        x = torch.tensor([1.0, 2.0], dtype=torch.float64) if fam == "torch" else np.array([1.0, 2.0])
        for _ in range(3):  # the third call without prep= prepares (and keeps) a preparation
            try:
                result = op(backend, f, x, *contexts)
            except Exception:  # noqa: BLE001 - an engine that cannot run torch code in f says so
                pass
            else:
                np.testing.assert_allclose(np.asarray(result), expected, rtol=_tol(backend) * 1e3, atol=1e-6)
            np.testing.assert_array_equal(_SHARED_BY_TORCH, [1.0, 2.0])
            np.testing.assert_array_equal(constant, [1.0, 2.0])


_WRITTEN = np.array([0.25, 0.5])  # a module global f writes into, after writing into its own input


@pytest.mark.parametrize(
    "backend",
    backend_params(modes=(None, "forward", "reverse"), finite_diff=True)
    + [pytest.param(di.AutoFiniteDiff(method="forward"), id="AutoFiniteDiff-forward")],
)
def test_an_f_that_writes_into_its_input_and_then_into_a_captured_array_is_run_again_from_its_input(backend):
    """A captured array reaches f as a guarded alias until f writes into it; f then runs again over
    copies. Where f wrote into its own input first (``z *= -1.5``), the run again starts from the input
    as it was: the attempt over aliases gets an input whose writes are refused (finite differences: a
    read-only view) or a copy of its own (torch: the dual tensor or the copy f writes). Before
    2026-12-08 the run again met the input already scaled, and finite differences and torch's forward
    mode gave f at -1.5 times the point (value 0.551 for 0.633, a Hessian of 2.8e6). Analytic: with the
    user's array left as [0.25, 0.5], y = (-2.25 z0, -1.5 z1 + 0.25), f = tanh(y), g = sum(f**2) / 2."""

    def written(z):
        xp = array_namespace(z)
        z *= -1.5
        _WRITTEN[0:1] = z[0:1]
        return xp.tanh(z + 0.5 * xp.asarray(_WRITTEN, dtype=z.dtype))

    def g(z):
        y = written(z)
        return array_namespace(y).sum(y * y) * 0.5

    x, t = np.array([-0.9384, -0.2629]), np.array([1.0, -0.5])
    c = np.array([-2.25, -1.5])
    y = np.tanh(c * x + np.array([0.0, 0.25]))
    s2 = 1 - y**2
    J = np.diag(c * s2)
    grad, H = y * s2 * c, np.diag(c**2 * (s2**2 - 2 * y**2 * s2))
    tol = _tol(backend) * (1e3 if isinstance(backend, di.AutoFiniteDiff) else 10)
    cases = [
        ("value_and_gradient", g, (), (0.5 * np.sum(y**2), grad), "gradient"),
        ("value_gradient_and_hessian", g, (), (0.5 * np.sum(y**2), grad, H), "hessian"),
        ("value_and_jacobian", written, (), (y, J), "jacobian"),
        ("value_and_pushforward", written, (t,), (y, J @ t), "pushforward"),
        ("value_and_pullback", written, (t,), (y, t @ J), "pullback"),
    ]
    for name, fn, args, expected, prepared in cases:
        prep = getattr(di, f"prepare_{prepared}")(backend, fn, x, *args)
        for p in (prep, prep, prep, None, None):
            got = getattr(di, name)(backend, fn, x, *args, prep=p)
            for a, e in zip(got, expected):
                np.testing.assert_allclose(np.asarray(a), e, rtol=tol, atol=tol, err_msg=f"{name} {backend}")
            np.testing.assert_array_equal(_WRITTEN, [0.25, 0.5])
            np.testing.assert_array_equal(x, [-0.9384, -0.2629])
