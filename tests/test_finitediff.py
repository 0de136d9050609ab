"""AutoFiniteDiff against SciPy: closed-form Rosenbrock derivatives, approx_derivative's steps and counts."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import rosen, rosen_der, rosen_hess, rosen_hess_prod
from scipy.optimize._numdiff import approx_derivative

import diffinterface as di
from conftest import family_params, installed

X = np.array([1.3, 0.7, 0.8, 1.9, 1.2, -0.6, 2.1])
SCIPY_METHOD = {"forward": "2-point", "central": "3-point", "complex": "cs"}


def rel_err(a, b):
    return np.max(np.abs(np.asarray(a) - b)) / np.max(np.abs(b))


def test_rosenbrock_gradient_hessian_and_hvp_match_scipy_closed_forms():
    fd = di.AutoFiniteDiff()
    assert rel_err(di.gradient(fd, rosen, X), rosen_der(X)) < 1e-8  # central differences, float64
    assert rel_err(di.hessian(fd, rosen, X), rosen_hess(X)) < 1e-6
    t = np.linspace(-1.0, 1.0, X.size)
    assert rel_err(di.hvp(fd, rosen, X, t), rosen_hess_prod(X, t)) < 1e-6
    y, g, h = di.value_gradient_and_hessian(fd, rosen, X)
    assert y == rosen(X) and rel_err(g, rosen_der(X)) < 1e-8 and rel_err(h, rosen_hess(X)) < 1e-6
    assert rel_err(di.gradient(di.AutoFiniteDiff(method="complex"), rosen, X), rosen_der(X)) < 1e-13


@pytest.mark.parametrize("method", ["forward", "central", "complex"])
def test_jacobian_equals_approx_derivative_with_the_same_steps(method):
    def f(x):
        return np.array([np.sin(x[0]) * x[1] ** 3, np.exp(x[2] / 3) - x[0] * x[3], np.sum(x**2)])

    x = np.array([0.3, -2.5, 40.0, 1e-3])  # steps scale with |x_i| as in SciPy
    ours = di.jacobian(di.AutoFiniteDiff(method=method), f, x)
    theirs = approx_derivative(f, x, method=SCIPY_METHOD[method])
    assert np.allclose(ours, theirs, rtol=1e-13, atol=1e-13)
    ours = di.jacobian(di.AutoFiniteDiff(method=method, rel_step=1e-5), f, x)
    theirs = approx_derivative(f, x, method=SCIPY_METHOD[method], rel_step=1e-5)
    assert np.allclose(ours, theirs, rtol=1e-13, atol=1e-13)


class Counted:
    def __init__(self, f):
        self.f, self.calls = f, 0

    def __call__(self, x):
        self.calls += 1
        return self.f(x)


@pytest.mark.parametrize("method", ["forward", "central", "complex"])
@pytest.mark.parametrize("operator", ["jacobian", "gradient", "value_and_gradient", "value_and_jacobian"])
def test_never_more_evaluations_than_approx_derivative(method, operator):
    n = X.size
    f = Counted(rosen if "gradient" in operator else lambda x: np.sin(x) * x[0])
    approx_derivative(f, X, method=SCIPY_METHOD[method])
    scipy_calls, f.calls = f.calls, 0
    backend = di.AutoFiniteDiff(method=method, closure="const")
    op = getattr(di, operator)
    op(backend, f, X)  # unprepared: preparation evaluates f once and the call reuses that value
    unprepared, f.calls = f.calls, 0
    assert unprepared <= scipy_calls == {"forward": n + 1, "central": 2 * n + 1, "complex": n + 1}[method]
    prep = getattr(di, "prepare_" + operator.replace("value_and_", ""))(backend, f, X)
    f.calls = 0
    op(backend, f, X, prep=prep)
    expected = {"forward": n + 1, "central": 2 * n, "complex": n}[method]
    if operator.startswith("value_and_") and method != "forward":
        expected += 1  # the value itself
    assert f.calls == expected


@pytest.mark.parametrize("method", ["forward", "central", "backward", "complex"])
def test_a_one_shot_pushforward_evaluates_f_twice(method):
    """A call without ``prep=`` along one tangent: by hand a central difference evaluates f twice
    (x + k t and x - k t) and a one-sided one twice (x and one step). The one-shot preparation
    evaluates f at the first step point instead of at x (``Target.tangents``), and the runner takes
    that value: 2 evaluations, where central took 3. (A complex step takes 2 as before: f(x) for the
    shape and dtype, then x + i k t; by hand it is 1.) The result is the prepared call's, bit for
    bit, and J t = (cos(x) x + sin(x)) t (closed form) to the method's accuracy; a batch of two
    tangents costs what it did."""
    t = np.linspace(-1.0, 1.0, X.size)
    f = Counted(lambda z: np.sin(z) * z)
    backend = di.AutoFiniteDiff(method=method, closure="const")
    prep = di.prepare_pushforward(backend, f, X, t)
    prepared = di.pushforward(backend, f, X, t, prep=prep)
    di.prep_cache.enabled = False
    try:
        f.calls = 0
        one_shot = di.pushforward(backend, f, X, t)
        assert f.calls == 2
        f.calls = 0
        y, value_form = di.value_and_pushforward(backend, f, X, t)
        assert f.calls == (3 if method == "central" else 2)  # f(x) itself is the value
        f.calls = 0
        batch = di.pushforward(backend, f, X, (t, 2 * t))
        assert f.calls == 1 + {"central": 4, "complex": 2}.get(method, 2)
    finally:
        di.prep_cache.enabled = True
    np.testing.assert_array_equal(one_shot, prepared)
    np.testing.assert_array_equal(value_form, prepared)
    np.testing.assert_array_equal(batch[0], prepared)
    np.testing.assert_array_equal(y, np.sin(X) * X)
    exact = (np.cos(X) * X + np.sin(X)) * t
    assert rel_err(one_shot, exact) < (1e-13 if method == "complex" else 1e-9 if method == "central" else 1e-6)


@pytest.mark.parametrize("method", ["forward", "central"])
def test_a_one_shot_pushforward_of_an_f_writing_into_its_input_leaves_x_unchanged(method):
    """The one-shot pushforward's points are its own arrays (x + k t, x - k t, a copy of x): an f that
    writes into its input (z[0] = 5, then z**2) gives the written function's derivative, J t = 2 z t with 0
    in the overwritten coordinate (closed form, to the method's accuracy), the prepared call's bits,
    and the user's x unchanged; a captured buffer f writes into is the user's no more."""
    buffer = np.zeros(3)

    def f(z):
        z[0] = 5.0
        buffer[:] = z
        return z**2 + buffer

    x = np.array([1.0, 2.0, -3.0])
    t = np.array([0.5, 1.0, -2.0])
    backend = di.AutoFiniteDiff(method=method)
    prepared = di.pushforward(backend, f, x, t, prep=di.prepare_pushforward(backend, f, x, t))
    di.prep_cache.enabled = False
    try:
        one_shot = di.pushforward(backend, f, x, t)
    finally:
        di.prep_cache.enabled = True
    np.testing.assert_array_equal(one_shot, prepared)
    exact = np.array([0.0, (2 * 2.0 + 1) * 1.0, (2 * -3.0 + 1) * -2.0])
    np.testing.assert_allclose(one_shot, exact, rtol=1e-6 if method == "forward" else 1e-9, atol=1e-9)
    np.testing.assert_array_equal(x, [1.0, 2.0, -3.0])
    np.testing.assert_array_equal(buffer, np.zeros(3))


def test_second_order_evaluation_counts():
    # closure="const": the counter is state of the callable object, which "duplicated" would copy
    n, f, fd = X.size, Counted(rosen), di.AutoFiniteDiff(closure="const")
    prep = di.prepare_hessian(fd, f, X)
    f.calls = 0
    di.hessian(fd, f, X, prep=prep)
    assert f.calls == 2 * n * n + 1
    prep = di.prepare_hvp(fd, f, X, (X, X))
    f.calls = 0
    di.hvp(fd, f, X, (X, X), prep=prep)
    assert f.calls == 2 * 4 * n


def test_duplicated_closure_leaves_a_counting_object_untouched():
    f = Counted(rosen)
    di.gradient(di.AutoFiniteDiff(), f, X)
    assert f.calls == 0  # every evaluation counted into its own duplicate of the object


@pytest.mark.parametrize("family", family_params())
def test_float32_stays_float32_with_float32_steps(family):
    from diffinterface.testing._scenarios import convert

    x = convert(X, family, np.float32)
    xp = __import__("array_api_compat").array_namespace(x)
    g = di.gradient(di.AutoFiniteDiff(), lambda x: xp.sum(x**2 * 0.5), x)
    assert type(g) is type(x) and g.dtype == x.dtype
    assert np.allclose(np.asarray(g), X, rtol=1e-3)  # eps32**(2/3) ~ 2e-5 relative steps


def test_the_step_is_relative_to_x_as_in_scipy():
    # far from the origin a fixed absolute step would cancel catastrophically; relative steps do not
    x = np.array([1e8, -3e7])
    g = di.gradient(di.AutoFiniteDiff(), lambda x: np.sum(x**2), x)
    assert rel_err(g, 2 * x) < 1e-8


def test_pushforward_is_a_directional_difference():
    t = np.linspace(-1.0, 2.0, X.size)
    for method in ("central", "forward", "backward", "complex"):
        got = di.pushforward(di.AutoFiniteDiff(method=method), rosen, X, t)
        assert rel_err(got, rosen_der(X) @ t) < (1e-7 if method in ("central", "complex") else 1e-5)
    assert di.pushforward(di.AutoFiniteDiff(), rosen, X, np.zeros_like(X)) == 0.0


def test_second_derivative_and_derivative():
    y, d, d2 = di.value_derivative_and_second_derivative(di.AutoFiniteDiff(), np.sin, 0.7)
    assert isinstance(y, float) and isinstance(d, float) and isinstance(d2, float)
    assert y == np.sin(0.7) and abs(d - np.cos(0.7)) < 1e-10 and abs(d2 + np.sin(0.7)) < 1e-7


def test_a_nonfinite_coordinate_does_not_spoil_the_pushforward_of_the_others():
    """sin(x) * 2 along t = 1: the derivative 2 cos(x_i) in every finite entry (closed form), NaN in
    the nonfinite one, with a step set by the finite coordinates (x = 100 among them)."""
    t = np.ones(4)
    for bad in (np.inf, -np.inf, np.nan):
        x = np.array([bad, 0.3, 100.0, -2.5])
        with np.errstate(invalid="ignore"):
            got = di.pushforward(di.AutoFiniteDiff(), lambda z: 2.0 * np.sin(z), x, t)
        assert np.isnan(got[0])
        assert rel_err(got[1:], 2 * np.cos(x[1:])) < 1e-9, bad


def test_a_large_pushforward_takes_its_step_from_every_block_of_x_and_t():
    """The step along t is computed a block of coordinates at a time for large numpy arrays: the
    coordinate that limits it (a large t_i, a large x_i) or a nonfinite one may sit in any block.
    Closed form: d/dk 2 sin(x + k t) = 2 cos(x) t; the step is SciPy's per-coordinate rule,
    r / max(|t_i| / max(1, |x_i|)), over the whole arrays."""
    from diffinterface.backends.finitediff import _BLOCK

    rng = np.random.default_rng(3)
    n = 3 * _BLOCK + 5
    x, t = rng.normal(size=(n // 5, 5)), rng.normal(size=(n // 5, 5))
    t[-1, -1] = 1e4  # the last coordinate, in the last (short) block, sets the step
    r = np.finfo(float).eps ** (1 / 3)
    expected_step = r / np.max(np.abs(t) / np.maximum(np.abs(x), 1.0))
    seen = []  # the points f gets (closure="const": the list itself, not a per-call duplicate)

    def f(z):
        seen.append(z)
        return 2.0 * np.sin(z)

    got = di.pushforward(di.AutoFiniteDiff(closure="const"), f, x, t)
    step = max(abs(z[-1, -1] - x[-1, -1]) / t[-1, -1] for z in seen)  # x + k t, read where k t is largest
    assert step == pytest.approx(expected_step, rel=1e-6)
    assert rel_err(got, 2 * np.cos(x) * t) < 1e-7
    for bad in (np.nan, np.inf):
        x_bad = x.copy()
        x_bad[-1, 0] = bad
        with np.errstate(invalid="ignore"):
            got = di.pushforward(di.AutoFiniteDiff(), lambda z: 2.0 * np.sin(z), x_bad, t)
        assert np.isnan(got[-1, 0])
        finite = np.isfinite(x_bad)
        assert rel_err(got[finite], (2 * np.cos(x) * t)[finite]) < 1e-7, bad


@pytest.mark.skipif(not installed("jax"), reason='jax is not installed: pip install "diffinterface[jax]"')
def test_float64_jax_inputs_stay_float64_without_global_x64():
    # finite differences on a float64 jax x computed in float32 (steps, f's values) where x64 is off
    # globally: results came back float32 and 1e-1 off for a float64 step size; now they run inside
    # JAX's enable_x64 context, as the AD adapters do
    import jax.numpy as jnp

    from diffinterface.backends.jax import enable_x64

    def f(x):
        return jnp.concatenate([jnp.sin(x[:1]) * x[1:2], x[1:] ** 3])

    with enable_x64(True):
        x = jnp.asarray([0.3, -1.2, 2.0])
    xn = np.asarray(x)
    J = np.zeros((3, 3))
    J[0, :2] = np.cos(xn[0]) * xn[1], np.sin(xn[0])
    J[1, 1], J[2, 2] = 3 * xn[1] ** 2, 3 * xn[2] ** 2
    fd = di.AutoFiniteDiff()
    jac = di.jacobian(fd, f, x)
    assert jac.dtype == np.float64
    np.testing.assert_allclose(np.asarray(jac), J, rtol=1e-9, atol=1e-9)
    push = di.pushforward(fd, f, x, x, prep=di.prepare_pushforward(fd, f, x, x))
    assert push.dtype == np.float64
    np.testing.assert_allclose(np.asarray(push), J @ xn, rtol=1e-8)
    g = di.gradient(fd, lambda z: jnp.sum(z**3), x)
    assert g.dtype == np.float64
    np.testing.assert_allclose(np.asarray(g), 3 * xn**2, rtol=1e-9)
    H = di.hessian(fd, lambda z: jnp.sum(z**3), x)
    assert H.dtype == np.float64
    np.testing.assert_allclose(np.asarray(H), np.diag(6 * xn), rtol=1e-6, atol=1e-6)


def test_a_call_s_points_share_f_over_read_only_views_of_its_captured_arrays(monkeypatch):
    """f over guarded aliases of its captured arrays is built once per call (``Target.shared``), not
    once per point: a 6-coordinate central Jacobian made 12 instances of f before (one per point)."""
    from diffinterface._adapters.target import Target

    A = np.arange(18.0).reshape(3, 6) / 10

    def f(x):
        return np.sin(A @ x)

    x = np.linspace(0.2, 0.8, 6)
    built = []
    instance = Target.instance
    monkeypatch.setattr(Target, "instance", lambda self, *a, **k: built.append(1) or instance(self, *a, **k))
    prep = di.prepare_jacobian(di.AutoFiniteDiff(), f, x)
    for _ in range(3):
        built.clear()
        jac = di.jacobian(di.AutoFiniteDiff(), f, x, prep=prep)
        np.testing.assert_allclose(jac, np.cos(A @ x)[:, None] * A, rtol=1e-7, atol=1e-9)
        assert len(built) == 2  # the first point's, through the write guard, and the one the others share


def test_a_write_into_captured_state_at_some_points_only_goes_into_copies(monkeypatch):
    """f writes into a captured array only where x[-1] > 0.6: the last point of a central Jacobian's
    stencil, after the others ran over the shared read-only views. That evaluation is refused there and
    runs again over copies (through the write guard), the derivative is right, and the user's array
    is never written."""
    from diffinterface._adapters.target import Target

    A = np.arange(12.0).reshape(2, 6) / 10
    log = np.zeros(2)

    def f(x):
        y = A @ x
        if x[-1] > 0.6:
            log[:] = y  # a write, into the call's copy
        return np.sin(y)

    x = np.array([0.5, 0.1, 0.2, 0.3, 0.4, 0.6])
    want = np.cos(A @ x)[:, None] * A
    built = []
    instance = Target.instance
    monkeypatch.setattr(Target, "instance", lambda self, *a, **k: built.append(1) or instance(self, *a, **k))
    np.testing.assert_allclose(di.jacobian(di.AutoFiniteDiff(), f, x), want, rtol=1e-7, atol=1e-9)
    # f(x) at preparation, the first point, the one shared from the second point on, the writing point's
    # two (views refused, then copies), and the last point (over copies: f writes): the shared views
    # served the 10 points between
    assert len(built) == 6, len(built)
    for _ in range(3):
        np.testing.assert_allclose(di.jacobian(di.AutoFiniteDiff(), f, x), want, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(di.gradient(di.AutoFiniteDiff(), lambda z: f(z).sum(), x), want.sum(0), rtol=1e-6)
    assert not log.any()
