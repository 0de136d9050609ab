"""Custom rules written once (contract section 8), DifferentiateWith, diffinterface.scipy, SecondOrder.

References are independent: central finite differences of the plain SciPy/NumPy computation (no
rule involved), or closed forms.
"""

from __future__ import annotations

import pickle

import _rules_example as ex
import numpy as np
import pytest
import scipy.linalg
import scipy.signal
from array_api_compat import array_namespace

import diffinterface as di
import diffinterface.scipy as dsp
from conftest import AD_ENGINES, backend_params, engine_marks, installed
from diffinterface.rules import Active, Const, custom_rule, prefer

RNG = np.random.default_rng(7)
A0 = 0.3 * RNG.standard_normal((3, 3))
B0 = RNG.standard_normal(3)
W = RNG.standard_normal(3)  # the weights of a scalar loss sum(w * y)


def _skip(engine):
    return engine_marks(engine, engine)


BACKENDS = backend_params((None, "forward", "reverse"), finite_diff=True)
FD = di.AutoFiniteDiff()


def _fd(f, x):
    """The reference: central differences of the plain computation."""
    return di.jacobian(FD, f, x)


def _plain_propagate(A, b):
    return scipy.linalg.expm(A) @ b


def _xp(x):
    from array_api_compat import array_namespace

    return array_namespace(x)


def _tol(backend):
    return 1e-6


# -- an opaque SciPy rule with two arguments, through every backend and mode ------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_opaque_two_argument_rule_through_every_backend(backend):
    # b constant (captured), A active; then A constant, b active; jacobians and gradients
    jac_A = di.jacobian(backend, lambda A: ex.propagate(A, B0), A0)
    np.testing.assert_allclose(jac_A, _fd(lambda A: _plain_propagate(A, B0), A0), atol=1e-6)
    jac_b = di.jacobian(backend, lambda b: ex.propagate(A0, b), B0)
    np.testing.assert_allclose(jac_b, scipy.linalg.expm(A0), atol=1e-6)

    def loss_A(A):
        return _xp(A).sum(ex.propagate(A, B0) * W)

    def loss_b(b):
        return _xp(b).sum(ex.propagate(A0, b) * W)

    np.testing.assert_allclose(
        di.gradient(backend, loss_A, A0), _fd(lambda A: np.sum(_plain_propagate(A, B0) * W), A0), atol=1e-6
    )
    np.testing.assert_allclose(di.gradient(backend, loss_b, B0), scipy.linalg.expm(A0).T @ W, atol=1e-6)

    # a Constant context for the other argument, prepared and called at another point
    def loss(b, A):
        return _xp(b).sum(ex.propagate(A, b) * W)

    prep = di.prepare_gradient(backend, loss, B0, di.Constant(A0))
    A1 = A0 + 0.1
    g = di.gradient(backend, loss, 2 * B0, di.Constant(A1), prep=prep)
    np.testing.assert_allclose(g, scipy.linalg.expm(A1).T @ W, atol=1e-6)


def test_the_rules_see_which_arguments_are_active():
    seen = []

    @custom_rule(opaque=True)
    def f(a, b):
        return a * b

    @f.def_augmented_primal
    def f_aug(a, b):
        seen.append((type(a), type(b)))
        return a.val * b.val, (a.val, b.val)

    @f.def_reverse
    def f_rev(tape, dy, a, b):
        seen.append(("reverse", type(a), type(b)))
        return (dy * tape[1] if isinstance(a, Active) else None), (dy * tape[0] if isinstance(b, Active) else None)

    x = np.arange(1.0, 4.0)
    g = di.gradient(di.AutoAutograd(), lambda a: _xp(a).sum(f(a, x)), 2 * x)
    np.testing.assert_allclose(g, x)
    assert seen == [(Active, Const), ("reverse", Active, Const)]


# -- inside each engine's own code ------------------------------------------------------------------


@pytest.mark.skipif(not installed("jax"), reason='jax is not installed: pip install "diffinterface[jax]"')
def test_inside_native_jax():
    import jax
    import jax.numpy as jnp

    with _enable_x64()(True):
        A, b = jnp.asarray(A0), jnp.asarray(B0)

        def loss(A, b):
            return jnp.sum(ex.propagate(A, b) * W)

        gA, gb = jax.jit(jax.grad(loss, argnums=(0, 1)))(A, b)
        np.testing.assert_allclose(gA, _fd(lambda A: np.sum(_plain_propagate(A, B0) * W), A0), atol=1e-6)
        np.testing.assert_allclose(gb, scipy.linalg.expm(A0).T @ W, atol=1e-10)
        np.testing.assert_allclose(jax.grad(loss, argnums=1)(A, b), scipy.linalg.expm(A0).T @ W, atol=1e-10)
        # vmap over b, of the function and of its gradient
        bs = jnp.stack([b, 2 * b, -b])
        np.testing.assert_allclose(jax.vmap(lambda b: ex.propagate(A, b))(bs), bs @ scipy.linalg.expm(A0).T, atol=1e-10)
        np.testing.assert_allclose(
            jax.jit(jax.vmap(jax.grad(loss, argnums=1), in_axes=(None, 0)))(A, bs),
            np.tile(scipy.linalg.expm(A0).T @ W, (3, 1)),
            atol=1e-10,
        )
        # jax.jvp: an opaque function with both rules takes its forward rule under prefer("forward")
        with prefer("forward"):
            y, dy = jax.jit(lambda A, b, dA: jax.jvp(lambda A: ex.propagate(A, b), (A,), (dA,)))(A, b, A)
        np.testing.assert_allclose(dy, _fd(lambda A: _plain_propagate(A, B0), A0).reshape(3, 9) @ A0.ravel(), atol=1e-6)
        np.testing.assert_allclose(jax.jacfwd(lambda b: ex.softplus(b))(b), np.diag(1 / (1 + np.exp(-B0))), atol=1e-12)


@pytest.mark.skipif(not installed("torch"), reason='torch is not installed: pip install "diffinterface[torch]"')
def test_inside_native_torch():
    import torch

    A, b = torch.tensor(A0), torch.tensor(B0)
    w = torch.tensor(W)
    expA = scipy.linalg.expm(A0)
    ref_gA = _fd(lambda A: np.sum(_plain_propagate(A, B0) * W), A0)

    def loss(A, b):
        return (ex.propagate(A, b) * w).sum()

    # eager .backward()
    Ar, br = A.clone().requires_grad_(), b.clone().requires_grad_()
    loss(Ar, br).backward()
    np.testing.assert_allclose(Ar.grad, ref_gA, atol=1e-6)
    np.testing.assert_allclose(br.grad, expA.T @ W, atol=1e-10)
    # torch.func
    np.testing.assert_allclose(torch.func.grad(loss, argnums=1)(A, b), expA.T @ W, atol=1e-10)
    np.testing.assert_allclose(torch.func.grad(loss, argnums=0)(A, b), ref_gA, atol=1e-6)
    np.testing.assert_allclose(torch.func.jacrev(lambda b: ex.propagate(A, b))(b), expA, atol=1e-10)
    np.testing.assert_allclose(torch.func.jacfwd(lambda b: ex.propagate(A, b))(b), expA, atol=1e-10)
    np.testing.assert_allclose(
        torch.func.jacfwd(lambda A: ex.propagate(A, b))(A), _fd(lambda A: _plain_propagate(A, B0), A0), atol=1e-6
    )
    bs = torch.stack([b, 2 * b])
    np.testing.assert_allclose(torch.func.vmap(lambda b: ex.propagate(A, b))(bs), bs.numpy() @ expA.T, atol=1e-10)
    np.testing.assert_allclose(
        torch.func.vmap(torch.func.grad(loss, argnums=1), in_dims=(None, 0))(A, bs),
        np.tile(expA.T @ W, (2, 1)),
        atol=1e-10,
    )
    assert ex.propagate(A, b).dtype == torch.float64


@pytest.mark.skipif(
    not installed("autograd"), reason='autograd is not installed: pip install "diffinterface[autograd]"'
)
def test_inside_native_autograd():
    import autograd
    import autograd.numpy as anp

    def loss(A, b):
        return anp.sum(ex.propagate(A, b) * W)

    np.testing.assert_allclose(autograd.grad(loss, 1)(A0, B0), scipy.linalg.expm(A0).T @ W, atol=1e-10)
    np.testing.assert_allclose(
        autograd.grad(loss, 0)(A0, B0), _fd(lambda A: np.sum(_plain_propagate(A, B0) * W), A0), atol=1e-6
    )
    _, dy = autograd.make_jvp(lambda b: ex.propagate(A0, b))(B0)(B0)
    np.testing.assert_allclose(dy, scipy.linalg.expm(A0) @ B0, atol=1e-10)


def test_plain_call_runs_the_primal_only():
    for key in ex.CALLS:
        ex.CALLS[key] = 0
    y = ex.propagate(A0, B0)
    np.testing.assert_allclose(y, _plain_propagate(A0, B0))
    assert ex.CALLS == {"primal": 1, "forward": 0, "augmented": 0, "reverse": 0}
    # finite differences see the black box: the primal only
    di.gradient(FD, lambda b: np.sum(ex.propagate(A0, b)), B0)
    assert ex.CALLS["forward"] == ex.CALLS["augmented"] == ex.CALLS["reverse"] == 0


# -- pickling ------------------------------------------------------------------------------------


def test_rule_and_tape_pickle_and_the_reverse_pass_runs_on_the_unpickled_tape():
    rule = pickle.loads(pickle.dumps(ex.propagate))
    assert rule is ex.propagate
    args = (Active(A0), Active(B0))
    y, tape = rule.augmented_primal(*args)
    tape2 = pickle.loads(pickle.dumps(tape))
    dA, db = rule.reverse(tape2, W, *args)
    np.testing.assert_allclose(db, scipy.linalg.expm(A0).T @ W, atol=1e-12)
    np.testing.assert_allclose(dA, _fd(lambda A: np.sum(_plain_propagate(A, B0) * W), A0), atol=1e-6)
    # a rule that is not a module attribute pickles by value (its bodies by reference)
    other = custom_rule(opaque=True)(ex.plain_propagate)
    other.def_augmented_primal(ex.propagate_augmented)
    other.def_reverse(ex.propagate_reverse)
    copy = pickle.loads(pickle.dumps(other))
    # (an opaque rule's bodies are called with their own copies of their arrays: the body itself is __wrapped__)
    assert copy is not other and copy.reverse.__wrapped__ is ex.propagate_reverse
    np.testing.assert_allclose(copy(A0, B0), _plain_propagate(A0, B0))
    # and so do the library's rules
    assert pickle.loads(pickle.dumps(dsp.solve)) is dsp.solve


# -- one-direction rules ----------------------------------------------------------------------------

ENGINES = [pytest.param(getattr(di, name), marks=engine_marks(e, extra), id=name) for name, e, extra in AD_ENGINES]


@pytest.mark.parametrize("cls", ENGINES)
def test_forward_only_and_reverse_only_rules(cls):
    x = np.array([1.0, 2.0, 3.0])
    fwd, rev = cls(mode="forward"), cls(mode="reverse")
    np.testing.assert_allclose(di.pushforward(fwd, ex.cube_forward_only, x, np.ones(3)), 3 * x**2)
    np.testing.assert_allclose(di.pullback(rev, ex.cube_reverse_only, x, np.ones(3)), 3 * x**2)
    np.testing.assert_allclose(di.jacobian(rev, ex.cube_reverse_only, x), np.diag(3 * x**2))
    with pytest.raises(
        NotImplementedError, match=r"cube_forward_only .*reverse mode needs a reverse rule.*def_reverse"
    ):
        di.pullback(rev, ex.cube_forward_only, x, np.ones(3))
    with pytest.raises(
        NotImplementedError, match=r"cube_reverse_only .*forward mode needs a forward rule.*def_forward.*use reverse"
    ):
        di.pushforward(fwd, ex.cube_reverse_only, x, np.ones(3))


# -- a non-opaque rule: bodies on the engine's arrays ---------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_opaque_rule(backend):
    x = np.array([-1.0, 0.5, 2.0])
    sig = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(di.jacobian(backend, ex.softplus, x), np.diag(sig), atol=1e-7)
    np.testing.assert_allclose(di.gradient(backend, lambda z: _xp(z).sum(ex.softplus(z)), x), sig, atol=1e-7)


@pytest.mark.skipif(not installed("jax"), reason='jax is not installed: pip install "diffinterface[jax]"')
def test_non_opaque_rule_stays_in_the_jax_program():
    import jax

    jaxpr = str(jax.make_jaxpr(jax.grad(lambda z: ex.softplus(z).sum()))(np.ones(3, np.float32)))
    assert "callback" not in jaxpr
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda z: ex.propagate(z, z[0]).sum()))(np.ones((3, 3), np.float32)))
    assert "callback" in jaxpr


# -- vectorized=True: one call per batch, not one per element --------------------------------------


@pytest.mark.parametrize(
    "engine", [pytest.param("jax", marks=_skip("jax")), pytest.param("torch", marks=_skip("torch"))]
)
def test_vectorized_rule_takes_the_batch_whole(engine):
    xs = np.arange(12.0).reshape(4, 3)
    ex.BATCH_CALLS.clear()
    if engine == "jax":
        import jax

        with _enable_x64()(True), prefer("reverse"):  # the one registration that batches vmap(grad)
            out = jax.vmap(ex.sumsq)(xs)
            grads = jax.vmap(jax.grad(ex.sumsq))(xs)
    else:
        import torch

        out = torch.func.vmap(ex.sumsq)(torch.tensor(xs))
        grads = torch.func.vmap(torch.func.grad(ex.sumsq))(torch.tensor(xs))
    np.testing.assert_allclose(out, np.sum(xs**2, axis=1))
    np.testing.assert_allclose(grads, 2 * xs)
    assert ex.BATCH_CALLS and all(shape == (4, 3) for shape in ex.BATCH_CALLS), ex.BATCH_CALLS


@pytest.mark.skipif(not installed("jax"), reason='jax is not installed: pip install "diffinterface[jax]"')
def test_vectorized_rule_with_both_rules_loops_in_derivatives_without_prefer():
    # one registration for both directions (linear_call) batches derivatives by a loop: the bodies
    # see single elements there, and the primal's vmap still takes the batch whole
    import jax

    xs = np.arange(12.0).reshape(4, 3)
    ex.BATCH_CALLS.clear()
    with _enable_x64()(True):
        np.testing.assert_allclose(jax.vmap(jax.grad(ex.sumsq))(xs), 2 * xs)
    # the primal once on the batch, the augmented primal and the reverse pass once per element
    assert ex.BATCH_CALLS == [(4, 3)] + [(3,)] * 8, ex.BATCH_CALLS
    ex.BATCH_CALLS.clear()
    with _enable_x64()(True):
        np.testing.assert_allclose(jax.jacfwd(ex.sumsq)(xs[0]), 2 * xs[0])
    assert ex.BATCH_CALLS == [(3,)] * 4, ex.BATCH_CALLS  # the primal, then the forward rule per tangent
    ex.BATCH_CALLS.clear()
    with _enable_x64()(True):
        jax.vmap(ex.sumsq)(xs)
    assert ex.BATCH_CALLS == [(4, 3)]


@pytest.mark.skipif(not installed("jax"), reason='jax is not installed: pip install "diffinterface[jax]"')
def test_looped_batch_calls_the_body_per_element():
    """vmap of an opaque rule runs its primal once per element. Its output shape is learned first by
    running the primal once on random inputs of those shapes, cached per shapes (``_out`` in the JAX
    rules): a first vmap (the cache filled, as any earlier test of these shapes leaves it) before the
    counted one, so that the count does not depend on which tests ran before in the process (run
    alone, it counted 3)."""
    import jax

    batch = np.stack([B0, B0])
    with _enable_x64()(True):
        jax.vmap(lambda b: ex.propagate(A0, b))(batch)
        for key in ex.CALLS:
            ex.CALLS[key] = 0
        jax.vmap(lambda b: ex.propagate(A0, b))(batch)
    assert ex.CALLS["primal"] == 2


# -- DifferentiateWith ------------------------------------------------------------------------------


@pytest.mark.skipif(not (installed("jax") and installed("torch")), reason="needs jax and torch")
def test_a_torch_function_inside_jax_grad():
    import jax
    import jax.numpy as jnp

    torch_f = ex.torch_f  # torch-only code (module level, so that F pickles)
    F = di.DifferentiateWith(torch_f, di.AutoTorch())
    x = np.linspace(0.1, 1.0, 4)
    ref = _fd(lambda z: np.sum(np.cos(z) * (np.sin(z) ** 2 * np.sum(z))), x)
    with _enable_x64()(True):
        g = jax.grad(lambda z: jnp.sum(jnp.cos(z) * F(z)))(jnp.asarray(x))
        gj = jax.jit(jax.grad(lambda z: jnp.sum(jnp.cos(z) * F(z))))(jnp.asarray(x))
    assert g.dtype == jnp.float64
    np.testing.assert_allclose(g, ref, atol=1e-7)
    np.testing.assert_allclose(gj, ref, atol=1e-7)
    # through diffinterface's own operators too, every AD engine
    jac = di.jacobian(di.AutoTorch(), torch_f, x)
    for backend in (di.AutoJAX(mode="forward"), di.AutoJAX(mode="reverse"), di.AutoAutograd()):
        np.testing.assert_allclose(di.jacobian(backend, F, x), jac, atol=1e-12)
    assert pickle.loads(pickle.dumps(F)).backend == di.AutoTorch()


@pytest.mark.skipif(not installed("jax"), reason='jax is not installed: pip install "diffinterface[jax]"')
def test_a_simulator_by_finite_differences_inside_jax_jit_grad():
    import jax
    import jax.numpy as jnp

    calls = []

    def simulator(p):  # plain NumPy, opaque to JAX
        calls.append(1)
        out = np.empty(5)
        s = 0.0
        for i in range(5):
            s = s + np.sin(p[0] * i) * p[1]
            out[i] = s
        return out

    S = di.DifferentiateWith(simulator, di.AutoFiniteDiff())
    p = np.array([0.3, 1.5])
    with _enable_x64()(True):
        g = jax.jit(jax.grad(lambda q: jnp.sum(S(q) ** 2)))(jnp.asarray(p))
    i = np.arange(5)
    cums = np.cumsum(np.sin(p[0] * i) * p[1])
    d0 = np.cumsum(np.cos(p[0] * i) * i * p[1])
    d1 = np.cumsum(np.sin(p[0] * i))
    np.testing.assert_allclose(g, [np.sum(2 * cums * d0), np.sum(2 * cums * d1)], rtol=1e-6)
    # a compiled gradient costs the finite-difference pullback's evaluations, nothing more (the
    # reverse pass needs x alone: the simulator is not run again for a tape)
    calls.clear()
    di.pullback(di.AutoFiniteDiff(), simulator, p, np.ones(5))
    pullback_calls = len(calls)
    with _enable_x64()(True):
        compiled = jax.jit(jax.grad(lambda q: jnp.sum(S(q))))
        compiled(jnp.asarray(p)).block_until_ready()
        calls.clear()
        compiled(jnp.asarray(p)).block_until_ready()
    assert len(calls) == pullback_calls, (len(calls), pullback_calls)


# -- diffinterface.scipy on every backend ----------------------------------------------------------


def _scipy_cases():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((3, 3)) + 3 * np.eye(3)
    b, B = rng.standard_normal(3), rng.standard_normal((3, 2))
    u, v = rng.standard_normal(5), rng.standard_normal(3)
    U, V = rng.standard_normal((4, 3)), rng.standard_normal((2, 2))
    E = 0.5 * rng.standard_normal((3, 3))
    return [
        ("solve-A", lambda a: dsp.solve(a, b), lambda a: scipy.linalg.solve(a, b), A),
        ("solve-b", lambda z: dsp.solve(A, z), lambda z: scipy.linalg.solve(A, z), b),
        ("solve-B", lambda z: dsp.solve(A, z), lambda z: scipy.linalg.solve(A, z), B),
        ("solve-A-matrix-rhs", lambda a: dsp.solve(a, B), lambda a: scipy.linalg.solve(a, B), A),
        ("expm", dsp.expm, scipy.linalg.expm, E),
        *[
            (
                f"fftconvolve-{mode}-in1",
                lambda z, m=mode: dsp.fftconvolve(z, v, mode=m),
                lambda z, m=mode: scipy.signal.fftconvolve(z, v, mode=m),
                u,
            )
            for mode in ("full", "same", "valid")
        ],
        *[
            (
                f"fftconvolve-{mode}-in2",
                lambda z, m=mode: dsp.fftconvolve(u, z, mode=m),
                lambda z, m=mode: scipy.signal.fftconvolve(u, z, mode=m),
                v,
            )
            for mode in ("full", "same", "valid")
        ],
        *[
            (
                f"fftconvolve2d-{mode}",
                lambda z, m=mode: dsp.fftconvolve(z, V, mode=m),
                lambda z, m=mode: scipy.signal.fftconvolve(z, V, mode=m),
                U,
            )
            for mode in ("full", "same", "valid")
        ],
        (
            "fftconvolve2d-in2",
            lambda z: dsp.fftconvolve(U, z, mode="same"),
            lambda z: scipy.signal.fftconvolve(U, z, mode="same"),
            V,
        ),
    ]


SCIPY_CASES = _scipy_cases()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", SCIPY_CASES, ids=[c[0] for c in SCIPY_CASES])
def test_scipy_functions_match_finite_differences(backend, case):
    _, f, plain, x = case
    np.testing.assert_allclose(di.jacobian(backend, f, x), _fd(plain, x), atol=2e-6)


def test_scipy_functions_with_all_arguments_active():
    pytest.importorskip("torch")
    import torch

    rng = np.random.default_rng(5)
    A = torch.tensor(rng.standard_normal((3, 3)) + 3 * np.eye(3), requires_grad=True)
    b = torch.tensor(rng.standard_normal(3), requires_grad=True)
    u, v = (
        torch.tensor(rng.standard_normal(5), requires_grad=True),
        torch.tensor(rng.standard_normal(3), requires_grad=True),
    )
    (dsp.solve(A, b).sum() + dsp.fftconvolve(u, v, mode="same").pow(2).sum() + dsp.expm(A).sum()).backward()
    An, bn, un, vn = (t.detach().numpy() for t in (A, b, u, v))

    def plain_A(a):
        return scipy.linalg.solve(a, bn).sum() + scipy.linalg.expm(a).sum()

    np.testing.assert_allclose(A.grad, _fd(plain_A, An), atol=1e-6)
    np.testing.assert_allclose(b.grad, _fd(lambda z: scipy.linalg.solve(An, z).sum(), bn), atol=1e-6)
    np.testing.assert_allclose(
        u.grad, _fd(lambda z: (scipy.signal.fftconvolve(z, vn, mode="same") ** 2).sum(), un), atol=1e-6
    )
    np.testing.assert_allclose(
        v.grad, _fd(lambda z: (scipy.signal.fftconvolve(un, z, mode="same") ** 2).sum(), vn), atol=1e-6
    )


# -- SecondOrder -----------------------------------------------------------------------------------


def _second_order_backends():
    out = [pytest.param(di.SecondOrder(FD, FD), id="FD-FD")]
    for name, engine, _ in AD_ENGINES:
        cls = getattr(di, name)
        out.append(pytest.param(di.SecondOrder(FD, cls()), marks=_skip(engine), id=f"FD-{cls.__name__}"))
        for outer in ("forward", "reverse"):
            for inner in ("forward", "reverse"):
                out.append(
                    pytest.param(
                        di.SecondOrder(cls(mode=outer), cls(mode=inner)),
                        marks=_skip(engine),
                        id=f"{cls.__name__}-{outer}-over-{inner}",
                    )
                )
    return out


# Pairs an engine cannot run, each with the call's error and the reason (never a wrong number):
# id -> (error type, message pattern, reason).
SECOND_ORDER_ERRORS = {
    "AutoMLX-forward-over-reverse": (
        NotImplementedError,
        r"^hessian\(SecondOrder\(outer=AutoMLX\(mode='forward'\).*MLX has no forward-mode derivative \(JVP\).*"
        r"\[scatter\].*use reverse mode",
        "the inner reverse pass of x[0] * x[1] is a scatter, which MLX cannot push forward",
    ),
}


@pytest.mark.parametrize("backend", _second_order_backends())
def test_second_order_combinations(request, backend):
    def f(x):
        xp = _xp(x)
        return xp.sum(x**3) + x[0] * x[1]

    x = np.array([1.0, 2.0, 3.0])
    expected_error = SECOND_ORDER_ERRORS.get(request.node.callspec.id)
    if expected_error is not None:
        kind, message, _ = expected_error
        with pytest.raises(kind, match=message):
            di.hessian(backend, f, x)
        assert di.second_derivative(backend, lambda t: t**3, 2.0) == pytest.approx(12.0, rel=1e-12)  # no scatter
        return
    H = np.diag(6 * x)
    H[0, 1] = H[1, 0] = 1.0
    atol = 1e-4 if isinstance(backend.outer, di.AutoFiniteDiff) else 1e-10
    if isinstance(backend.inner, di.AutoFiniteDiff):
        atol = 1e-3
    np.testing.assert_allclose(di.hessian(backend, f, x), H, atol=atol)
    np.testing.assert_allclose(di.hvp(backend, f, x, np.ones(3)), H @ np.ones(3), atol=atol)
    np.testing.assert_allclose(di.second_derivative(backend, lambda t: t**3, 2.0), 12.0, atol=atol)


def _engine_pairs():
    """Every ordered pair of two different AD engines (conftest's AD_ENGINES)."""
    out = []
    for outer, outer_engine, _ in AD_ENGINES:
        for inner, inner_engine, _ in AD_ENGINES:
            if outer != inner:
                marks = _skip(outer_engine) + _skip(inner_engine)
                out.append(pytest.param(outer, inner, marks=marks, id=f"{outer}-over-{inner}"))
    return out


@pytest.mark.parametrize(("outer", "inner"), _engine_pairs())
def test_second_order_across_engines_is_an_error(outer, inner):
    """An engine cannot differentiate what another computes (it would pass its own arrays into the
    other): the call's TypeError, naming the pair and what works, for hessian, hvp and second_derivative."""
    backend = di.SecondOrder(getattr(di, outer)(), getattr(di, inner)())
    pair = rf"SecondOrder\(outer={outer}\(\), inner={inner}\(\)\)"
    what = rf"{outer}\(\) cannot differentiate what {inner}\(\) computes.*use SecondOrder\(AutoFiniteDiff\(\), {inner}\(\)\)"
    with pytest.raises(TypeError, match=rf"^hessian\({pair}, f, x\): {what}"):
        di.hessian(backend, lambda x: (x**2).sum(), np.ones(2))
    with pytest.raises(TypeError, match=rf"^hvp\({pair}, f, x, tx\): {what}"):
        di.hvp(backend, lambda x: (x**2).sum(), np.ones(2), np.ones(2))
    with pytest.raises(TypeError, match=rf"^second_derivative\({pair}, f, x\): {what}"):
        di.second_derivative(backend, lambda t: t**3, 2.0)


@pytest.mark.parametrize("backend", backend_params((None, "forward", "reverse")))
def test_an_opaque_bodys_error_is_its_own_on_every_engine(backend):
    """An opaque body's error comes out as itself, one-shot, prepared, and in a loop that keeps a prep.
    JAX runs the body as a host callback and reports what it raises as a JaxRuntimeError ("INTERNAL:
    CpuCallback error calling callback", no call named: found by the differential test); the other
    engines raised it as it is already."""

    @custom_rule(opaque=True, out_shape=lambda a: (a.shape, a.dtype))
    def doubled(a):
        return 2 * a

    @doubled.def_forward
    def doubled_forward(a):
        raise ValueError("doubled's derivative is not written yet")

    @doubled.def_augmented_primal
    def doubled_augmented(a):
        return 2 * a.val, None

    @doubled.def_reverse
    def doubled_reverse(tape, dy, a):
        raise ValueError("doubled's derivative is not written yet")

    x = np.array([0.5, 1.0], dtype=np.float32 if isinstance(backend, di.AutoMLX) else np.float64)
    own = "^doubled's derivative is not written yet"  # (PyTensor appends a hint on a line of its own)
    with pytest.raises(ValueError, match=own):
        di.jacobian(backend, doubled, x)
    with pytest.raises(ValueError, match=own):
        di.jacobian(backend, doubled, x, prep=di.prepare_jacobian(backend, doubled, x))
    with pytest.raises(ValueError, match=own):
        di.pushforward(backend, doubled, x, x, prep=di.prepare_pushforward(backend, doubled, x, x))
    for _ in range(4):  # the third call keeps a compiled prep (prep_cache)
        with pytest.raises(ValueError, match=own):
            di.gradient(backend, lambda z: _xp(z).sum(doubled(z)), x)
    if installed("autograd") and not isinstance(backend, di.AutoAutograd):  # an inner backend, the same way
        with pytest.raises(ValueError, match=own):
            di.jacobian(backend, di.DifferentiateWith(doubled, di.AutoAutograd()), x)


def _sin_f(x):
    xp = _xp(x)
    return xp.sum(xp.sin(x[1:]) * x[:-1] ** 2) + xp.sum(x**3) / 6


def _sin_hessian(x):
    """The closed-form Hessian of :func:`_sin_f`."""
    n = x.size
    H = np.diag(x.copy())
    for i in range(n - 1):
        H[i, i] += 2 * np.sin(x[i + 1])
        H[i + 1, i + 1] -= np.sin(x[i + 1]) * x[i] ** 2
        H[i, i + 1] += 2 * x[i] * np.cos(x[i + 1])
        H[i + 1, i] += 2 * x[i] * np.cos(x[i + 1])
    return H


@pytest.mark.parametrize("backend", _second_order_backends())
def test_second_order_combinations_against_a_closed_form_hessian(backend):
    """Every pair of _second_order_backends on an f with sin (slices, no scatter): hessian, batched hvp,
    their value forms and second_derivative, prepared and not, against closed forms. The outer finite
    difference is within 1e-6 of the scale; an engine with a documented float64 accuracy (AutoMLX's
    float32 sin) within that accuracy, and finite differences over it within 1e-4 (the step follows the
    inner's accuracy: with float64 steps the noise over the step made it 7e-3)."""
    x = np.linspace(0.3, 1.4, 5)
    H = _sin_hessian(x)
    grad = x**2 / 2
    grad[:-1] += 2 * x[:-1] * np.sin(x[1:])
    grad[1:] += x[:-1] ** 2 * np.cos(x[1:])
    ts = (np.arange(1.0, 6.0), np.linspace(-1.0, 1.0, 5))
    own = getattr(backend.inner, "tolerance", None)
    engine_tol = 0.0 if own is None else own(np.float64, True)
    fd_outer, fd_inner = (isinstance(b, di.AutoFiniteDiff) for b in (backend.outer, backend.inner))
    if fd_outer and fd_inner:
        tol = 1e-4
    elif fd_outer:  # central differences of a gradient with float32 noise (1e-7): about 1e-7 ** (2 / 3)
        tol = 1e-6 if own is None else 1e-4
    else:
        tol = max(1e-10, engine_tol)

    def close(a, b):  # within tol of the reference's scale
        np.testing.assert_allclose(np.asarray(a), b, rtol=0, atol=tol * max(1.0, np.abs(b).max()))

    close(di.hessian(backend, _sin_f, x), H)
    prep = di.prepare_hessian(backend, _sin_f, x + 0.1)  # prepared at another point
    y, g, h = di.value_gradient_and_hessian(backend, _sin_f, x, prep=prep)
    close(h, H)
    np.testing.assert_allclose(float(y), _sin_f(x), rtol=max(1e-12, engine_tol))
    np.testing.assert_allclose(np.asarray(g), grad, rtol=max(1e-7, engine_tol))
    hv = di.hvp(backend, _sin_f, x, ts)
    for t, v in zip(ts, hv):
        close(v, H @ t)
    hprep = di.prepare_hvp(backend, _sin_f, x, ts)
    _, hv2 = di.gradient_and_hvp(backend, _sin_f, x, ts, prep=hprep)
    for t, v in zip(ts, hv2):
        close(v, H @ t)
    # t**2 sin(t): 2 sin t + 4 t cos t - t**2 sin t
    t0 = 0.7
    d2 = 2 * np.sin(t0) + 4 * t0 * np.cos(t0) - t0**2 * np.sin(t0)
    second = di.second_derivative(backend, lambda t: _xp(t).sin(t) * t**2, t0)
    np.testing.assert_allclose(float(second), d2, rtol=0, atol=tol * 4)


def _enable_x64():
    """JAX's float64 context (``jax.enable_x64``, or ``jax.experimental.enable_x64`` before JAX 0.5)."""
    from diffinterface.backends.jax import enable_x64

    return enable_x64


@pytest.mark.parametrize("backend", backend_params(modes=(None, "forward", "reverse"), finite_diff=True))
def test_an_opaque_rule_whose_bodies_write_into_their_arguments_leaves_the_users_x_and_its_derivative_right(backend):
    """An opaque rule's bodies get their own copies of the NumPy arrays they are handed: NumPy code may
    write into its input, and the engines hand an opaque body arrays that are the user's own memory
    (torch's recording aliases a numpy x) or read-only (JAX's host callbacks). Before 2026-12-08 such a
    primal wrote the user's x under AutoTorch, AutoAutograd and AutoPyTensor, its reverse pass met the
    written x (wrong Jacobians there and under AutoMLX), and JAX and TensorFlow raised numpy's bare
    read-only error. The same through ``DifferentiateWith(f, AutoFiniteDiff())`` with an ``f`` that writes
    into its input. Two calls each, against sin(x) and -1.5 cos(-1.5 x)."""
    from diffinterface.rules import Rule

    def primal(z):
        z *= 2.0
        return np.sin(z / 2.0)

    def forward(z):
        if not hasattr(z, "dval"):
            return np.sin(z.val), None
        z.dval *= 1.0  # a write into the tangent it was handed
        return np.sin(z.val), np.cos(z.val) * z.dval

    def reverse(tape, dy, z):
        dy *= 1.0  # and into the cotangent
        return (np.cos(z.val) * dy,)

    rule = Rule(primal, opaque=True, forward=forward, reverse=reverse)

    def scaled(z):
        xp = array_namespace(z)
        z *= -1.5
        return xp.sin(z)

    with_fd = di.DifferentiateWith(scaled, di.AutoFiniteDiff())
    x = np.array([0.3, -0.2])
    tol = 1e-5 if isinstance(backend, di.AutoFiniteDiff) else 1e-6
    for f, value, derivative in (
        (lambda z: rule(z), np.sin(x), np.cos(x)),
        (lambda z: with_fd(z), np.sin(-1.5 * x), -1.5 * np.cos(-1.5 * x)),
    ):
        for _ in range(2):
            y, J = di.value_and_jacobian(backend, f, x)
            np.testing.assert_allclose(np.asarray(y), value, rtol=tol, atol=tol)
            np.testing.assert_allclose(np.asarray(J), np.diag(derivative), rtol=tol, atol=tol)
            np.testing.assert_array_equal(x, [0.3, -0.2])
