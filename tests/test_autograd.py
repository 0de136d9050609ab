"""AutoAutograd: the catalogue in every mode and family, writable stand-ins, traces counted, errors."""

from __future__ import annotations

import numpy as np
import pytest

import diffinterface as di
from conftest import MODE_IDS, MODES, family_dtype_params, installed
from diffinterface.testing import check_scenario, default_scenarios, test_differentiation

pytestmark = pytest.mark.skipif(
    not installed("autograd"), reason='autograd is not installed: pip install "diffinterface[autograd]"'
)

SCENARIOS = default_scenarios("numpy", np.float64)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_catalogue_float64_numpy_inputs(scenario, mode):
    check_scenario(di.AutoAutograd(mode=mode), scenario)  # exact-AD tolerance: 1e-10 relative


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize(
    "family, dtype",
    family_dtype_params([("numpy", np.float32), ("torch", np.float64), ("torch", np.float32), ("jax", np.float32)]),
)
def test_catalogue_on_each_family(family, dtype, mode):
    outcomes = test_differentiation([di.AutoAutograd(mode=mode)], default_scenarios(family, dtype))
    assert len(outcomes) > 300


def _buffers():
    out = [np.full(3, 9.0), [9.0, 9.0, 9.0]]
    if installed("torch"):
        import torch

        out.append(torch.full((3,), 9.0, dtype=torch.float64))
    return out


@pytest.mark.parametrize("buffer", _buffers(), ids=["numpy", "list", "torch"][: len(_buffers())])
@pytest.mark.parametrize("prepared", [False, True])
def test_the_captured_buffer_example_gives_2_1_plus_x_on_every_call(buffer, prepared):
    def f(x):
        buffer[0] = 1.0
        buffer[0] += x
        return buffer[0] ** 2

    before = [float(v) for v in buffer]
    backend = di.AutoAutograd()
    preps = {
        op: getattr(di, "prepare_" + op)(backend, f, 0.0) if prepared else None
        for op in ("derivative", "gradient", "second_derivative")
    }
    for x in (0.3, 0.3, -1.2, 2.5):
        assert di.derivative(backend, f, x, prep=preps["derivative"]) == pytest.approx(2 * (1 + x), rel=1e-14)
        assert di.gradient(backend, f, x, prep=preps["gradient"]) == pytest.approx(2 * (1 + x), rel=1e-14)
        assert di.second_derivative(backend, f, x, prep=preps["second_derivative"]) == pytest.approx(2.0, rel=1e-14)
        assert [float(v) for v in buffer] == before


def test_work_buffer_patterns_differentiate_in_every_mode():
    # buf[...] = A @ u; buf[i] += x[i]; sum(buf * buf): gradient 2 (A^T + e_0 e_0^T...) computed by hand
    rng = np.random.default_rng(3)
    A = rng.normal(size=(4, 4))
    buf = np.zeros(4)

    def f(u):
        buf[...] = A @ u
        buf[0] += u[1]
        return np.sum(buf * buf)

    u = rng.normal(size=4)
    r = A @ u
    r[0] += u[1]
    J = A.copy()
    J[0, 1] += 1.0
    grad, hess = 2 * J.T @ r, 2 * J.T @ J
    t = rng.normal(size=4)
    for mode in MODES:
        backend = di.AutoAutograd(mode=mode)
        assert np.allclose(di.gradient(backend, f, u), grad, rtol=1e-13, atol=0)
        assert np.allclose(di.hessian(backend, f, u), hess, rtol=1e-13, atol=1e-14)
        assert np.allclose(di.hvp(backend, f, u, t), hess @ t, rtol=1e-13, atol=1e-14)
        assert np.allclose(di.hvp(backend, f, u, (t, 2 * t))[1], 2 * hess @ t, rtol=1e-13, atol=1e-14)
        assert np.allclose(di.pushforward(backend, f, u, t), grad @ t, rtol=1e-13)
    assert np.all(buf == 0.0)


def test_hvp_falls_back_to_reverse_over_reverse_where_a_primitive_has_no_jvp():
    from autograd.extend import defvjp, primitive

    @primitive
    def cube(x):
        return x**3

    defvjp(cube, lambda ans, x: lambda g: 3 * g * x**2)  # a VJP, and no JVP
    import autograd.numpy as anp

    f = lambda x: anp.sum(cube(x))  # noqa: E731
    x, t = np.array([0.5, -1.0, 2.0]), np.array([1.0, 2.0, 3.0])
    backend = di.AutoAutograd()
    prep = di.prepare_hvp(backend, f, x, t)
    for _ in range(2):
        assert np.allclose(di.hvp(backend, f, x, t, prep=prep), 6 * x * t, rtol=1e-15)
        g, hv = di.gradient_and_hvp(backend, f, x, t)
        assert np.allclose(g, 3 * x**2, rtol=1e-15) and np.allclose(hv, 6 * x * t, rtol=1e-15)
    # mode=None: forward-mode operators fall back to reverse mode where a primitive has no JVP
    # (remembered in the prep); an explicit mode="forward" raises, naming the fix
    prep = di.prepare_pushforward(backend, f, x, t)
    for _ in range(2):
        assert np.allclose(di.pushforward(backend, f, x, t, prep=prep), np.sum(3 * x**2 * t), rtol=1e-15)
    assert np.allclose(di.derivative(backend, lambda s: cube(s), 2.0), 12.0, rtol=1e-15)
    assert np.allclose(di.jacobian(backend, lambda v: cube(v) * 2, x), np.diag(6 * x**2), rtol=1e-15)
    with pytest.raises(
        NotImplementedError, match=r"pushforward\(AutoAutograd\(mode='forward'\).*JVP of cube.*mode='reverse'"
    ):
        di.pushforward(di.AutoAutograd(mode="forward"), f, x, t)


def test_reverse_mode_operators_fall_back_to_forward_mode_where_a_primitive_has_no_vjp_prepared_or_not():
    """A primitive with a JVP and no VJP: mode=None runs gradient and pullback in forward mode, with
    prep= or without (a call without prep= traces f as it prepares, where autograd raises at once: it
    raised its bare NotImplementedError before); mode="reverse" raises, naming the fix."""
    import autograd.numpy as anp
    from autograd.extend import defjvp, primitive

    @primitive
    def cube(x):
        return x**3

    defjvp(cube, lambda g, ans, x: 3 * g * x**2)  # a JVP, and no VJP
    f = lambda x: anp.sum(cube(x))  # noqa: E731
    g = lambda x: 2.0 * cube(x)  # noqa: E731
    x, ty = np.array([0.5, -1.0, 2.0]), np.array([1.0, -2.0, 0.5])
    backend = di.AutoAutograd()
    prep = di.prepare_gradient(backend, f, x)
    for _ in range(2):
        np.testing.assert_allclose(di.gradient(backend, f, x, prep=prep), 3 * x**2, rtol=1e-15)
        np.testing.assert_allclose(di.gradient(backend, lambda z: f(z), x), 3 * x**2, rtol=1e-15)
        value, grad = di.value_and_gradient(backend, lambda z: f(z), x)
        assert value == np.sum(x**3)
        np.testing.assert_allclose(grad, 3 * x**2, rtol=1e-15)
        np.testing.assert_allclose(di.pullback(backend, lambda z: g(z), x, ty), 6 * x**2 * ty, rtol=1e-15)
    with pytest.raises(
        NotImplementedError, match=r"gradient\(AutoAutograd\(mode='reverse'\).*VJP of cube.*mode='forward'"
    ):
        di.gradient(di.AutoAutograd(mode="reverse"), f, x)


def test_a_prepared_jacobian_traces_once_in_reverse_and_once_per_column_forward():
    calls = []
    A = np.arange(12.0).reshape(3, 4)

    def f(x):
        calls.append(1)
        return np.sin(A @ x)

    x = np.linspace(0.1, 0.4, 4)
    expected = np.cos(A @ x)[:, None] * A
    for mode, traces in [("reverse", 1), ("forward", 4), (None, 1)]:
        backend = di.AutoAutograd(mode=mode, closure="const")  # f counts into the user's own list
        prep = di.prepare_jacobian(backend, f, x)
        calls.clear()
        jac = di.jacobian(backend, f, x, prep=prep)
        assert len(calls) == traces and np.allclose(jac, expected, rtol=1e-14)


def test_a_forward_jacobian_reads_its_state_through_one_lookup_and_a_write_reruns_over_copies():
    """A forward Jacobian's columns run f over read-only views of its captured arrays looked up once
    for the call (StatePlan.aliased: one lookup, not one per column); an f that writes into its
    captured array fails over the views at the first column and reruns over copies, with the right
    Jacobian and the user's array untouched, on this call and the next."""
    from diffinterface._closures.plan import StatePlan

    A = np.arange(12.0).reshape(4, 3) / 10
    work = np.zeros(4)

    def reads(x):
        return np.sin(A @ x)

    def writes(x):
        work[...] = A @ x  # autograd boxes: the view refuses the write, the stand-in carries it
        return np.sin(work) * work[0]

    x = np.array([0.3, -0.2, 0.5])
    backend = di.AutoAutograd(mode="forward")
    lookups = []
    real = StatePlan.aliased

    def counted(self, *args, **kwargs):
        lookups.append(1)
        return real(self, *args, **kwargs)

    StatePlan.aliased = counted
    try:
        prep = di.prepare_jacobian(backend, reads, x)
        lookups.clear()
        jac = di.jacobian(backend, reads, x, prep=prep)
    finally:
        StatePlan.aliased = real
    assert len(lookups) == 1  # three columns, one lookup
    np.testing.assert_allclose(jac, np.cos(A @ x)[:, None] * A, rtol=1e-14)
    u = A @ x
    expected = (np.cos(u) * u[0])[:, None] * A + np.sin(u)[:, None] * A[0][None, :]
    prep = di.prepare_jacobian(backend, writes, x)
    for p in (None, prep, prep):
        np.testing.assert_allclose(di.jacobian(backend, writes, x, prep=p), expected, rtol=1e-13)
        np.testing.assert_array_equal(work, np.zeros(4))


def test_float32_stays_float32():
    x = np.linspace(0.1, 1.0, 5, dtype=np.float32)
    f = lambda z: np.sum(np.sin(z) ** 2)  # noqa: E731
    for op in ("gradient", "hessian"):
        assert getattr(di, op)(di.AutoAutograd(), f, x).dtype == np.float32
    assert di.jacobian(di.AutoAutograd(), np.sin, x).dtype == np.float32
    assert di.pushforward(di.AutoAutograd(), np.sin, x, x).dtype == np.float32


def test_writing_x_into_a_fresh_numpy_array_is_a_clear_error():
    def f(x):
        a = np.zeros(3)
        a[:] = x
        return a.sum()

    with pytest.raises(
        ValueError,
        match=r"gradient\(AutoAutograd\(\), f, x\): autograd could not trace f: setting an "
        r"array element with a sequence\. .*Cache\(a\)",
    ):
        di.gradient(di.AutoAutograd(), f, np.ones(3))
    with pytest.raises(ValueError, match=r"^pullback\(AutoAutograd\(\), f, x, ty\): autograd could not trace f"):
        di.pullback(di.AutoAutograd(), f, np.ones(3), 1.0)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_a_write_into_an_array_f_computed_is_autograds_own_refusal_naming_its_arraybox(mode):
    """The adapter's traced arrays are a subclass of autograd's ArrayBox named as it is: a write into an array
    f computed from x (which autograd's arrays do not support) is autograd's own TypeError, worded as
    autograd words it for its ArrayBox, in every mode, prepared or not (the random programs' list of
    known refusals matches that wording)."""
    backend = di.AutoAutograd(mode=mode)

    def f(z):
        y = z * 2.0
        y[0] = 1.0
        return y

    x = np.ones(3)
    for call in (
        lambda: di.jacobian(backend, f, x),
        lambda: di.jacobian(backend, f, x, prep=di.prepare_jacobian(backend, f, x)),
    ):
        with pytest.raises(TypeError, match=r"^'ArrayBox' object does not support item assignment$"):
            call()


@pytest.mark.skipif(not installed("torch"), reason='torch is not installed: pip install "diffinterface[torch]"')
def test_torch_inputs_and_constants_reach_f_as_numpy():
    import torch

    x = torch.linspace(0.1, 1.0, 4, dtype=torch.float64)
    c = torch.tensor([2.0, -1.0, 0.5, 3.0], dtype=torch.float64)
    f = lambda z, w: np.sum(w * np.sin(z))  # noqa: E731
    g = di.gradient(di.AutoAutograd(), f, x, di.Constant(c))
    assert isinstance(g, torch.Tensor) and torch.allclose(g, c * torch.cos(x), rtol=1e-15)


def test_a_value_autograd_cannot_carry_a_derivative_through_is_named_with_the_call():
    """f casting x to integers: torch and JAX give the integer part a zero derivative, autograd
    refuses the value; the error names the call and the refused type, with autograd's own chained."""
    x = np.array([1.2, 2.7])

    def f(x):
        return (x.astype(int) ** 2).sum() * 1.0 + (x**2).sum()

    with pytest.raises(TypeError, match=r"^gradient\(AutoAutograd\(\), f, x\): .*\(numpy\.int64: .*Constant") as info:
        di.gradient(di.AutoAutograd(), f, x)
    assert isinstance(info.value.__cause__, TypeError)

    def g(x, k):  # the fix the message gives: the integer part from a Constant
        return (k.astype(int) ** 2).sum() * 1.0 + (x**2).sum()

    assert np.allclose(di.gradient(di.AutoAutograd(), g, x, di.Constant(x)), 2 * x)


def test_one_shot_calls_of_an_f_that_returns_or_writes_its_captured_array():
    """A one-shot gradient or pullback records f in its preparation only where f has no captured
    state or contexts; an f that returns its captured array, or writes into it, still runs over the
    guarded aliases first, untraced, and every result is right (the user's arrays unchanged)."""
    A, buf = np.array([1.0, 2.0]), np.array([2.0, 3.0])
    x = np.array([1.0, 1.0])

    def constant(z):
        return A

    def writes(z):
        buf[:] *= z
        return buf * 1.0

    backend = di.AutoAutograd()
    di.prep_cache.enabled = False
    try:
        with pytest.warns(UserWarning, match="independent of input"):  # autograd's own notice
            (pb,) = di.pullback(backend, constant, x, (np.ones(2),))
        np.testing.assert_array_equal(pb, [0.0, 0.0])
        np.testing.assert_array_equal(di.gradient(backend, lambda z: A @ z, x), A)
        (pb,) = di.pullback(backend, writes, x, (np.array([1.0, 0.0]),))
        np.testing.assert_array_equal(pb, [2.0, 0.0])
        np.testing.assert_array_equal(buf, [2.0, 3.0])
        np.testing.assert_array_equal(A, [1.0, 2.0])
    finally:
        di.prep_cache.enabled = True


def test_an_f_that_writes_into_x_never_writes_the_users_x():
    """autograd's preparation evaluates f on the user's x uncopied where it traces a box of it
    (copies_x: autograd refuses a write into a box), and on a copy where f gets a plain array (f(x)'s
    shape for prep=, a one-shot call with contexts): the user's x is never written; the write is
    autograd's TypeError at the trace."""

    def f(z, c=1.0):
        z[0] = 5.0
        return np.sum(c * z**2)

    x = np.array([1.0, 2.0, 3.0])
    backend = di.AutoAutograd()
    calls = [
        lambda: di.prepare_gradient(backend, f, x),  # f(x)'s shape: f runs on a plain array
        lambda: di.gradient(backend, f, x),
        lambda: di.gradient(backend, lambda z, c: f(z, c), x, di.Constant(2.0)),  # one-shot, with a context
        lambda: di.pushforward(backend, lambda z: f(z) * z, x, np.ones(3)),
    ]
    for call in calls:
        try:
            call()
        except TypeError as error:
            assert "item assignment" in str(error), error
        np.testing.assert_array_equal(x, [1.0, 2.0, 3.0])
