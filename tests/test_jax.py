"""AutoJAX: the catalogue in every mode, compiled once, float64 without touching jax_enable_x64."""

from __future__ import annotations

import itertools
import subprocess
import sys

import numpy as np
import pytest

import diffinterface as di
from conftest import MODE_IDS, MODES, covering, family_dtype_params, first_calls_are_checked_not_walked, installed
from diffinterface.testing import check_scenario, default_scenarios, test_differentiation

pytestmark = pytest.mark.skipif(not installed("jax"), reason='jax is not installed: pip install "diffinterface[jax]"')

SCENARIOS = default_scenarios("numpy", np.float64)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_catalogue_float64_numpy_inputs(scenario, mode):
    check_scenario(di.AutoJAX(mode=mode), scenario)  # exact-AD tolerance: 1e-10 relative


@pytest.mark.parametrize(
    "family, dtype",
    family_dtype_params([("jax", np.float32), ("torch", np.float64), ("numpy", np.float32)]),
)
def test_catalogue_on_each_family(family, dtype):
    # numpy float64 runs every scenario in every mode above; the other families and dtypes check
    # what they add (conversion in and out, dtype kept: jax arrays are float32 here, x64 is off) on
    # each operator with each function kind and each closure/context variant once (one compiled
    # program per scenario: the whole catalogue took 85 s per family on the 2-core machine). Each
    # family and each dtype once: torch float32 (39 s) takes the conversion that torch float64 takes,
    # with the dtype kept as numpy float32's is; dropped to keep the suite near 15 minutes
    test_differentiation([di.AutoJAX()], covering(default_scenarios(family, dtype)))


def test_catalogue_without_jit():
    test_differentiation([di.AutoJAX(jit=False)], [s for s in SCENARIOS if "/" in s.name][::7])


def test_float64_is_exact_and_the_global_x64_flag_is_untouched():
    import jax

    assert not jax.config.jax_enable_x64
    x = np.linspace(0.1, 1.0, 7)
    g = di.gradient(di.AutoJAX(), lambda x: (x**3).sum() / 3, x)
    assert g.dtype == np.float64 and np.array_equal(g, x**2) or np.max(np.abs(g - x**2)) < 1e-15
    prep = di.prepare_hessian(di.AutoJAX(), lambda x: (x**3).sum() / 3, x)
    assert np.max(np.abs(di.hessian(di.AutoJAX(), prep.f, x, prep=prep) - np.diag(2 * x))) < 1e-15
    assert not jax.config.jax_enable_x64
    g32 = di.gradient(di.AutoJAX(), lambda x: (x**3).sum() / 3, x.astype(np.float32))
    assert g32.dtype == np.float32


def _cube_sum(z):
    return (z**3).sum() / 3


def _cube(z):
    return z**3 / 3


def test_a_float64_prepared_call_enters_the_x64_context_only_where_x64_is_off(monkeypatch):
    """A prep for a float64 x was traced with x64 on. Its runner calls the compiled function
    directly where the process has x64 on (here the user's own ``jax.enable_x64``, as the global
    setting does), and goes through ``_Prepared.run``, which enters the context, only where it is
    off: float64 exact either way, for the gradient and a pushforward."""
    import jax

    from diffinterface.backends import jax as jax_backend

    runs = itertools.count()
    run = jax_backend._Prepared.run
    monkeypatch.setattr(jax_backend._Prepared, "run", lambda self, *a, **k: (next(runs), run(self, *a, **k))[1])
    backend, f, g = di.AutoJAX(), _cube_sum, _cube
    x = np.linspace(0.1, 1.0, 7)
    for x64, calls in ((True, 0), (False, 2)):
        with jax.enable_x64(x64):
            xs = jax.numpy.asarray(x) if x64 else x  # a float64 JAX array exists with x64 on only
            grad, push = di.prepare_gradient(backend, f, xs), di.prepare_pushforward(backend, g, xs, xs)
            before = next(runs)
            got, pushed = di.gradient(backend, f, xs, prep=grad), di.pushforward(backend, g, xs, xs, prep=push)
            assert next(runs) - before - 1 == calls, x64
        for result, want in ((got, x**2), (pushed, x**3)):
            assert np.asarray(result).dtype == np.float64
            np.testing.assert_allclose(np.asarray(result), want, rtol=1e-15)
    assert not jax.config.jax_enable_x64


def test_a_prep_made_with_x64_on_stays_float64_where_a_call_meets_x64_off(monkeypatch):
    """Prepared with x64 on (the user's setting), a float64 prep's fast path calls the compiled form
    itself (``extend.Runners.fast``), and JAX's own cache key holds the x64 test: a call with x64 off
    traces the form again, the trace declines it (``extend.Unserved``) before it traces f, and the
    prep's plain runner serves it inside the x64 context, that call and the later ones (one declined
    trace in all). Every call float64 and exact: a prepared gradient, Hessian and Jacobian, a kept
    prep of a loop's calls without prep=, and jax and numpy x."""
    import jax

    from diffinterface.backends import jax as jax_backend

    declined = itertools.count()
    compile_ = jax_backend._Prepared._compile

    def counting(self, *args, **kwargs):  # counts the declined traces of the simple form
        form = compile_(self, *args, **kwargs)
        if not callable(form) or not hasattr(form, "lower"):
            return form

        def traced(x, tangents, contexts):
            if self.x64 and not jax.config.jax_enable_x64:
                next(declined)
            return form.__wrapped__(x, tangents, contexts)

        return jax.jit(traced)

    monkeypatch.setattr(jax_backend._Prepared, "_compile", counting)
    backend, f, g = di.AutoJAX(), _cube_sum, _cube
    x = np.linspace(0.1, 1.0, 7)
    for kind in ("jax", "numpy"):
        for op in ("gradient", "hessian", "jacobian"):
            fn, want = (g, np.diag(x**2)) if op == "jacobian" else (f, x**2 if op == "gradient" else np.diag(2 * x))
            with jax.enable_x64(True):
                xs = jax.numpy.asarray(x) if kind == "jax" else x
                prep = getattr(di, f"prepare_{op}")(backend, fn, xs)
                assert prep.plain is not prep.data.plain  # the fast runner is bound
                first = getattr(di, op)(backend, fn, xs, prep=prep)
            before = next(declined)
            off = [getattr(di, op)(backend, fn, xs, prep=prep) for _ in range(3)]  # x64 off
            assert next(declined) - before - 1 == 1, (kind, op)  # declined once, then the plain runner
            assert prep.plain is prep.data.plain
            with jax.enable_x64(True):
                again = getattr(di, op)(backend, fn, xs, prep=prep)
            for result in (first, *off, again):
                assert np.asarray(result).dtype == np.float64, (kind, op)
                np.testing.assert_allclose(np.asarray(result), want, rtol=1e-14, atol=1e-15)
    assert not jax.config.jax_enable_x64


@pytest.mark.parametrize("op", ["pushforward", "pullback", "hvp"])
@pytest.mark.parametrize("kind", ["jax", "numpy"])
def test_a_tangent_operators_fast_runner_of_one_tangent_stays_float64_where_a_call_meets_x64_off(op, kind):
    """A prep of one tangent made with x64 on binds the compiled form of one bare tangent as its fast
    runner (``prep.one``, ``extend.Runners.fast(x, t)``): no tuple in or out. A call with x64 off
    traces the form again, the trace declines it (``extend.Unserved``), and the prep's plain runner
    serves it inside the x64 context, that call and the later ones (``prep.one`` is then None). Every
    call float64 and exact, prepared and in a loop without prep=; a prep made with x64 off has none."""
    import jax

    backend, f, g = di.AutoJAX(), _cube_sum, _cube
    x = np.linspace(0.1, 1.0, 7)
    t = np.linspace(-1.0, 0.5, 7)
    fn, want = (f, 2 * x * t) if op == "hvp" else (g, x**2 * t)  # J = diag(x^2) is symmetric: J t = t J
    with jax.enable_x64(True):
        xs, ts = (jax.numpy.asarray(x), jax.numpy.asarray(t)) if kind == "jax" else (x, t)
        prep = getattr(di, f"prepare_{op}")(backend, fn, xs, ts)
        assert prep.one is not None and prep.plain is prep.data.plain
        first = getattr(di, op)(backend, fn, xs, ts, prep=prep)
        loop = [getattr(di, op)(backend, fn, xs, ts) for _ in range(4)]  # kept from the third call on
    off = [getattr(di, op)(backend, fn, xs, ts, prep=prep) for _ in range(3)]  # x64 off
    assert prep.one is None  # declined once: the plain runner from then on
    off_loop = [getattr(di, op)(backend, fn, xs, ts) for _ in range(2)]
    with jax.enable_x64(True):
        again = getattr(di, op)(backend, fn, xs, ts, prep=prep)
    for result in (first, *loop, *off, *off_loop, again):
        assert np.asarray(result).dtype == np.float64, (kind, op)
        np.testing.assert_allclose(np.asarray(result), want, rtol=1e-14, atol=1e-15)
    unserved = getattr(di, f"prepare_{op}")(backend, fn, x, t)  # x64 off: the adapter's own context
    assert unserved.one is None
    np.testing.assert_allclose(np.asarray(getattr(di, op)(backend, fn, x, t, prep=unserved)), want, rtol=1e-14)
    assert not jax.config.jax_enable_x64


def test_a_jax_preps_fast_check_compares_avals_and_the_full_check_still_decides():
    """The JAX family's key attribute (``ArrayFamily.key_attribute``: ``aval``) stands for an array's
    shape and dtype on the prepared fast path. A call whose arrays have another aval takes the full
    check: another shape or dtype raises PreparationMismatchError, a weak-typed x of the prep's shape
    and dtype (another aval) is served, right."""
    import jax.numpy as jnp

    backend = di.AutoJAX()
    x, t = jnp.linspace(0.1, 1.0, 4), jnp.linspace(-1.0, 1.0, 4)
    grad, hvp = di.prepare_gradient(backend, _cube_sum, x), di.prepare_hvp(backend, _cube_sum, x, t)
    for prep in (grad, hvp):
        assert prep.key_attr == "aval" and x.aval in prep.fast_key
    for other in (jnp.linspace(0.1, 1.0, 5), jnp.linspace(0.1, 1.0, 4, dtype=jnp.int32)):
        with pytest.raises(di.PreparationMismatchError, match="differ"):
            di.gradient(backend, _cube_sum, other, prep=grad)
        with pytest.raises(di.PreparationMismatchError, match="differ"):
            di.hvp(backend, _cube_sum, x, other, prep=hvp)
    weak = jnp.broadcast_to(jnp.asarray(0.5), (4,))  # from a Python number: float32, weakly typed
    assert weak.aval.weak_type and weak.aval != x.aval and (weak.shape, weak.dtype) == (x.shape, x.dtype)
    for w, u in ((weak, t), (x * 0 + 0.5, weak)):  # a weak x, then a weak tangent
        np.testing.assert_allclose(np.asarray(di.gradient(backend, _cube_sum, w, prep=grad)), np.full(4, 0.25))
        np.testing.assert_allclose(np.asarray(di.hvp(backend, _cube_sum, w, u, prep=hvp)), np.asarray(u), rtol=1e-6)


def test_a_float64_loop_without_prep_stays_float64_across_an_x64_switch():
    """A loop's calls without ``prep=`` (a kept prep, ``_fast``) with the user's x64 switched on and
    off between calls: float64 and exact at every call."""
    import jax

    backend, f = di.AutoJAX(), _cube_sum
    rng = np.random.default_rng(3)
    for k in range(12):
        x = rng.uniform(0.1, 1.0, size=5)
        with jax.enable_x64(k % 4 < 2):
            xs = jax.numpy.asarray(x) if k % 4 < 2 else x
            got = di.gradient(backend, f, xs)
        assert np.asarray(got).dtype == np.float64, k
        np.testing.assert_allclose(np.asarray(got), x**2, rtol=1e-14)
    assert not jax.config.jax_enable_x64


def test_jax_arrays_in_jax_arrays_out_and_float64_with_x64_enabled():
    code = (
        "import jax; jax.config.update('jax_enable_x64', True)\n"
        "import jax.numpy as jnp, numpy as np, diffinterface as di\n"
        "from diffinterface.testing import default_scenarios, test_differentiation\n"
        "sc = default_scenarios('jax', np.float64)\n"
        "assert sc[0].x.dtype == jnp.float64\n"
        "print(len(test_differentiation([di.AutoJAX(mode='reverse')], sc[::10])))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]


def test_a_prepared_gradient_does_not_retrace():
    traces = itertools.count()  # an iterator is not state: the closure machinery leaves it alone

    def f(x, c):
        next(traces)
        return c[0] * (x**2).sum() + c[1]

    backend = di.AutoJAX()
    prep = di.prepare_gradient(backend, f, np.zeros(5), di.Constant((1.0, 0.0)))
    di.gradient(backend, f, np.ones(5), di.Constant((1.0, 0.0)), prep=prep)
    before = next(traces)
    rng = np.random.default_rng(0)
    for k in range(100):
        x = rng.normal(size=5)
        g = di.gradient(backend, f, x, di.Constant((float(k), 3.0)), prep=prep)
        assert np.allclose(g, 2 * k * x, rtol=1e-12)
    assert next(traces) == before + 1  # the +1 is this read of the counter


def test_a_captured_array_updated_in_place_is_seen_without_recompiling():
    traces = itertools.count()
    w = np.array([1.0, 2.0, 3.0])

    def f(x):
        next(traces)
        return (w * x**2).sum()

    prep = di.prepare_gradient(di.AutoJAX(), f, np.zeros(3))
    x = np.ones(3)
    assert np.allclose(di.gradient(di.AutoJAX(), f, x, prep=prep), 2 * w)
    before = next(traces)
    w[...] = [-1.0, 0.5, 4.0]
    assert np.allclose(di.gradient(di.AutoJAX(), f, x, prep=prep), [-2.0, 1.0, 8.0])
    assert next(traces) == before + 1


def test_captured_scalars_read_at_every_call():
    scale = 2.0

    def f(x):
        return scale * (x**2).sum()

    prep = di.prepare_gradient(di.AutoJAX(), f, np.zeros(2))
    assert np.allclose(di.gradient(di.AutoJAX(), f, np.ones(2), prep=prep), 4.0)
    scale = 5.0  # noqa: F841 - rebinding the captured variable
    assert np.allclose(di.gradient(di.AutoJAX(), f, np.ones(2), prep=prep), 10.0)


def test_jax_out_is_a_type_error():
    jnp = pytest.importorskip("jax.numpy")
    with pytest.raises(
        TypeError, match=r"^gradient\(AutoJAX\(\), f, x\): out= is a jax array, and jax arrays are immutable"
    ):
        di.gradient(di.AutoJAX(), lambda x: (x**2).sum(), jnp.ones(3), out=jnp.zeros(3))


def test_writable_stand_in_supports_work_buffer_patterns():
    A = np.array([[2.0, 1.0], [0.5, 3.0]])
    buf = np.zeros(2)

    def f(x):
        buf[...] = A @ x
        buf[0] += x[1]
        buf[1] *= 2.0
        return (buf * buf).sum()

    x = np.array([0.3, -0.7])
    u = A @ x + np.array([x[1], 0.0])
    u[1] *= 2.0
    J = A + np.array([[0.0, 1.0], [0.0, 0.0]])
    J[1] *= 2.0
    for mode in MODES:
        assert np.allclose(di.gradient(di.AutoJAX(mode=mode), f, x), 2 * J.T @ u, rtol=1e-12)
    assert not buf.any()


# -- 38.6: tangents and cotangents given as Python numbers or another float dtype ----------------------


def _x_kinds() -> list:
    def jax_float64():  # a float64 JAX array with global x64 off, as jax.enable_x64 makes
        import jax

        with jax.enable_x64(True):
            return jax.numpy.array([1.0, 2.0], dtype=jax.numpy.float64)

    def jax_float32():
        import jax.numpy as jnp

        return jnp.array([1.0, 2.0], dtype=jnp.float32)

    return [
        pytest.param(jax_float64, np.float64, id="jax-float64-x64-off"),
        pytest.param(lambda: np.array([1.0, 2.0]), np.float64, id="numpy-float64"),
        pytest.param(jax_float32, np.float32, id="jax-float32"),
    ]


@pytest.mark.parametrize("mode", ["forward", "reverse", None])
@pytest.mark.parametrize("make_x, dtype", _x_kinds())
@pytest.mark.parametrize(
    "tangent",
    [
        pytest.param(lambda v: -1 / 12, id="python-float"),
        pytest.param(lambda v: np.full(2, v, dtype=np.float32), id="numpy-float32"),
        pytest.param(lambda v: np.full(2, v, dtype=np.float64), id="numpy-float64"),
    ],
)
def test_38_6_tangents_as_python_numbers_or_another_dtype_are_cast(mode, make_x, dtype, tangent):
    import jax.numpy as jnp

    backend, x = di.AutoJAX(mode=mode), make_x()
    z = np.array([1.0, 2.0])
    rtol = 1e-15 if dtype == np.float64 else 1e-6
    c = tangent(-1 / 12)  # the issue's own cotangent: a number, or an array of -1/12
    scalar = isinstance(c, float)
    f_scalar, f_vector = (lambda w: jnp.sum(w**4)), (lambda w: w**4)
    want_scalar = -4 * z**3 / 12  # the closed forms, in float64
    for name, got, want in (
        ("pullback", di.pullback(backend, f_scalar if scalar else f_vector, x, c), want_scalar),
        ("pushforward", None if scalar else di.pushforward(backend, f_vector, x, c), want_scalar),
        ("hvp", None if scalar else di.hvp(backend, f_scalar, x, c), -12 * z**2 / 12),
        ("value_and_pullback", None if scalar else di.value_and_pullback(backend, f_vector, x, c)[1], want_scalar),
    ):
        if got is None:
            continue
        assert np.dtype(got.dtype) == dtype, (name, got.dtype)
        # a float32 tangent of a float64 x carries float32's rounding of -1/12, as on the other backends
        exact = -1 / 12 if not (isinstance(c, np.ndarray) and c.dtype == np.float32) else float(np.float32(-1 / 12))
        np.testing.assert_allclose(
            np.asarray(got, dtype=np.float64), want * (exact / (-1 / 12)), rtol=rtol, err_msg=name
        )


# -- 38.5: captured numpy arrays that f only reads reach JAX as plain arrays ---------------------------


def test_38_5_captured_arrays_f_only_reads_reach_jax_functions_as_plain_arrays():
    import jax.numpy as jnp
    from jax import lax

    pred = np.array([True, False, True, False])  # captured, only read (closure="duplicated", the default)
    idx = np.array([0, 2])
    buf = np.zeros(4)
    x = np.array([1.0, 2.0, 3.0, 4.0])
    backend = di.AutoJAX()

    def select(z):
        return lax.select(pred, z, 2 * z)

    def take(z):
        return lax.index_take(z, (idx,), (0,))

    def select_and_write(z):  # writes into a captured buffer: every captured array becomes a stand-in
        buf[...] = lax.select(pred, z, 2 * z)
        return buf * jnp.sum(z)

    sizes = np.array([1, 3])  # lax.split needs them as values: small integer arrays are static

    def split(z):
        return lax.split(z, sizes)[1] * 2.0

    s = np.where(pred, 1.0, 2.0)
    both = np.outer(s * x, np.ones(4)) + np.diag(s * x.sum())  # d/dz of select(z) * sum(z)
    cases = [(select, np.diag(s)), (take, np.eye(4)[idx])]
    cases += [(split, 2.0 * np.eye(4)[1:])] if hasattr(lax, "split") else []  # lax.split: JAX 0.4.36 on
    cases += [(select_and_write, both)]  # the mask stays a numpy array when f writes into buf
    for f, want in cases:
        prep = di.prepare_jacobian(backend, f, x)
        for _ in range(2):
            np.testing.assert_allclose(np.asarray(di.jacobian(backend, f, x)), want, rtol=1e-6)
            np.testing.assert_allclose(np.asarray(di.jacobian(backend, f, x, prep=prep)), want, rtol=1e-6)
    np.testing.assert_array_equal(buf, np.zeros(4))  # the user's arrays are left alone
    np.testing.assert_array_equal(pred, [True, False, True, False])
    # a static array's new value is seen by a prepared call (compared by value, compiled again)
    prep = di.prepare_jacobian(backend, select, x)
    pred[:] = [False, True, True, True]
    want = np.diag(np.where(pred, 1.0, 2.0))
    np.testing.assert_allclose(np.asarray(di.jacobian(backend, select, x, prep=prep)), want, rtol=1e-6)


def test_a_helper_reading_a_jax_device_is_checked_by_its_summary_at_a_new_first_call(walk_visits):
    """A JAX device takes no weak reference; the JAX family declares ``jax.Device`` a constant
    (``ArrayFamily.constant_types``), so a stateless helper that reads one keeps its closure walk's
    summary, and a new lambda around it is checked, not walked; the derivative is JAX's."""
    import jax
    import jax.numpy as jnp

    device = jax.devices()[0]

    def helper(z):
        return jnp.sum(jax.device_put(z, device) ** 3)

    x = np.array([1.0, -2.0, 0.5])
    first_calls_are_checked_not_walked(
        helper, walk_visits, lambda f: np.testing.assert_allclose(di.gradient(di.AutoJAX(), f, x), 3 * x**2, rtol=1e-12)
    )
