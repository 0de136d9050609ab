"""One rule written once, used by every engine's own transforms (issue 15), with no ``prefer``.

The rule is ``propagate(A, b) = expm(A) @ b`` of ``_rules_example``: an opaque SciPy body with a
forward rule and reverse rules. References are independent of it: central differences of the plain
SciPy code (``scipy.linalg.expm(A) @ b``, no rule involved), or closed forms.
"""

from __future__ import annotations

import _rules_example as ex
import numpy as np
import pytest
import scipy.linalg

import diffinterface as di
from conftest import installed
from diffinterface.rules import SecondOrderError, custom_rule

RNG = np.random.default_rng(15)
A0 = 0.3 * RNG.standard_normal((3, 3))
B0 = RNG.standard_normal(3)
W = RNG.standard_normal(3)
E0 = scipy.linalg.expm(A0)
FD = di.AutoFiniteDiff()

# the references, from the plain SciPy computation
JAC_A = di.jacobian(FD, lambda A: ex.plain_propagate(A, B0), A0)  # (3, 3, 3)
GRAD_A = np.tensordot(W, JAC_A, axes=1)  # of sum(w * y) in A
GRAD_B = E0.T @ W
PUSH_A = np.tensordot(JAC_A, A0, axes=2)  # the tangent of y along dA = A0
HESS_SIN_B = E0.T @ np.diag(-np.sin(E0 @ B0)) @ E0  # of sum(sin(expm(A) b)) in b, closed form


def _needs(engine):
    return pytest.mark.skipif(
        not installed(engine), reason=f'{engine} is not installed: pip install "diffinterface[{engine}]"'
    )


def _close(got, want, atol=1e-6):
    np.testing.assert_allclose(np.asarray(got), want, atol=atol, rtol=1e-6)


# -- JAX ---------------------------------------------------------------------------------------------


@_needs("jax")
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_jax_transforms(jit):
    import jax
    import jax.numpy as jnp

    from diffinterface.backends.jax import enable_x64

    J = jax.jit if jit else (lambda f: f)
    with enable_x64(True):
        A, b = jnp.asarray(A0), jnp.asarray(B0)

        def loss(A, b):
            return jnp.sum(ex.propagate(A, b) * W)

        _close(J(lambda A, dA: jax.jvp(lambda A: ex.propagate(A, b), (A,), (dA,))[1])(A, A), PUSH_A)
        _close(J(lambda b, db: jax.jvp(lambda b: ex.propagate(A, b), (b,), (db,))[1])(b, b), E0 @ B0)
        _close(J(jax.grad(loss))(A, b), GRAD_A)
        _close(J(jax.grad(loss, argnums=(0, 1)))(A, b)[1], GRAD_B)
        _close(J(jax.jacfwd(lambda A: ex.propagate(A, b)))(A), JAC_A)
        _close(J(jax.jacrev(lambda A: ex.propagate(A, b)))(A), JAC_A)
        _close(J(jax.jacfwd(lambda b: ex.propagate(A, b)))(b), E0)
        _close(J(jax.jacrev(lambda b: ex.propagate(A, b)))(b), E0)
        As = jnp.stack([A, A])
        _close(J(jax.vmap(jax.grad(loss), in_axes=(0, None)))(As, b), np.stack([GRAD_A, GRAD_A]))
        _close(J(jax.vmap(jax.jacfwd(lambda A: ex.propagate(A, b))))(As), np.stack([JAC_A, JAC_A]))
        _close(J(jax.vmap(jax.jacrev(lambda A: ex.propagate(A, b))))(As), np.stack([JAC_A, JAC_A]))
        lin = J(lambda A, dA: jax.linearize(lambda A: ex.propagate(A, b), A)[1](dA))
        _close(lin(A, A), PUSH_A)


@_needs("jax")
def test_jax_runs_the_forward_rule_forward_and_the_reverse_rules_in_reverse():
    import jax
    import jax.numpy as jnp

    from diffinterface.backends.jax import enable_x64

    with enable_x64(True):
        A, b = jnp.asarray(A0), jnp.asarray(B0)
        for key in ex.CALLS:
            ex.CALLS[key] = 0
        jax.jvp(lambda b: ex.propagate(A, b), (b,), (b,))
        assert ex.CALLS["forward"] == 1 and ex.CALLS["reverse"] == 0, ex.CALLS
        for key in ex.CALLS:
            ex.CALLS[key] = 0
        jax.grad(lambda b: jnp.sum(ex.propagate(A, b)))(b)
        assert ex.CALLS["forward"] == 0 and ex.CALLS["reverse"] == 1, ex.CALLS


# -- torch -------------------------------------------------------------------------------------------


@_needs("torch")
def test_torch_func_transforms_and_eager_backward():
    import torch
    from torch.func import grad, jacfwd, jacrev, vmap

    A, b, w = torch.tensor(A0), torch.tensor(B0), torch.tensor(W)

    def loss_A(A):
        return (ex.propagate(A, b) * w).sum()

    def loss_b(b):
        return (ex.propagate(A, b) * w).sum()

    _close(grad(loss_A)(A), GRAD_A)
    _close(grad(loss_b)(b), GRAD_B)
    _close(jacrev(lambda A: ex.propagate(A, b))(A), JAC_A)
    _close(jacfwd(lambda A: ex.propagate(A, b))(A), JAC_A)
    _close(jacfwd(lambda b: ex.propagate(A, b))(b), E0)
    As, bs = torch.stack([A, 2 * A]), torch.stack([b, -b, 2 * b])
    JAC_2A = di.jacobian(FD, lambda A: ex.plain_propagate(A, B0), 2 * A0)
    _close(vmap(jacrev(lambda A: ex.propagate(A, b)))(As), np.stack([JAC_A, JAC_2A]))
    _close(vmap(jacfwd(lambda A: ex.propagate(A, b)))(As), np.stack([JAC_A, JAC_2A]))
    _close(vmap(grad(loss_A))(As), np.stack([GRAD_A, np.tensordot(W, JAC_2A, axes=1)]))
    _close(vmap(grad(loss_b))(bs), np.tile(GRAD_B, (3, 1)))
    # nested levels, and a derivative taken outside a vmap
    bss = torch.stack([bs, 2 * bs])
    _close(vmap(vmap(lambda b: ex.propagate(A, b)))(bss), bss.numpy() @ E0.T)
    _close(vmap(vmap(grad(loss_b)))(bss), np.broadcast_to(GRAD_B, (2, 3, 3)))
    _close(vmap(vmap(jacrev(lambda b: ex.propagate(A, b))))(bss), np.broadcast_to(E0, (2, 3, 3, 3)))
    _close(grad(lambda bs: vmap(loss_b)(bs).sum())(bs), np.tile(GRAD_B, (3, 1)))
    # eager .backward(), directly and through a vmap
    Ar = A.clone().requires_grad_()
    loss_A(Ar).backward()
    _close(Ar.grad, GRAD_A)
    br = bs.clone().requires_grad_()
    vmap(loss_b)(br).sum().backward()
    _close(br.grad, np.tile(GRAD_B, (3, 1)))


@_needs("torch")
def test_torch_runs_each_pass_once_per_element():
    import torch
    from torch.func import grad, jacrev, vmap

    A, b = torch.tensor(A0), torch.tensor(B0)
    cases = [
        (lambda: grad(lambda b: ex.propagate(A, b).sum())(b), 1, 1),
        (lambda: jacrev(lambda b: ex.propagate(A, b))(b), 1, 3),  # one tape, a reverse pass per row
        (lambda: vmap(jacrev(lambda b: ex.propagate(A, b)))(torch.stack([b, b])), 2, 6),
    ]
    for run, augmented, reverse in cases:
        for key in ex.CALLS:
            ex.CALLS[key] = 0
        run()
        assert (ex.CALLS["augmented"], ex.CALLS["reverse"], ex.CALLS["primal"]) == (augmented, reverse, 0), ex.CALLS


@_needs("torch")
def test_torch_vectorized_rule_under_nested_vmaps():
    import torch
    from torch.func import grad, jacfwd, jacrev, vmap

    xs = torch.tensor(np.arange(24.0).reshape(2, 4, 3))
    X = xs.numpy()
    ex.BATCH_CALLS.clear()
    _close(vmap(vmap(ex.sumsq))(xs), np.sum(X**2, axis=-1))
    _close(vmap(vmap(grad(ex.sumsq)))(xs), 2 * X)
    assert set(ex.BATCH_CALLS) == {(8, 3)}, ex.BATCH_CALLS  # both levels' batches, flattened into one
    _close(vmap(jacrev(ex.sumsq))(xs[0]), 2 * X[0])
    _close(vmap(jacfwd(ex.sumsq))(xs[0]), 2 * X[0])
    _close(jacrev(vmap(ex.sumsq))(xs[0]), np.eye(4)[:, :, None] * 2 * X[0][None])
    xr = xs[0].clone().requires_grad_()
    vmap(ex.sumsq)(xr).sum().backward()
    _close(xr.grad, 2 * X[0])


# -- autograd ----------------------------------------------------------------------------------------


@_needs("autograd")
def test_autograd_transforms():
    import autograd
    import autograd.numpy as anp

    _close(autograd.grad(lambda A: anp.sum(ex.propagate(A, B0) * W))(A0), GRAD_A)
    _close(autograd.grad(lambda b: anp.sum(ex.propagate(A0, b) * W))(B0), GRAD_B)
    _close(autograd.make_jvp(lambda A: ex.propagate(A, B0))(A0)(A0)[1], PUSH_A)
    _close(autograd.jacobian(lambda A: ex.propagate(A, B0))(A0), JAC_A)


# -- second derivatives: one clear error, and the documented way that works --------------------------


def _native_hessians():
    out = []
    if installed("jax"):

        def jax_hessian(f, x):
            import jax

            from diffinterface.backends.jax import enable_x64

            with enable_x64(True):
                return jax.hessian(f)(jax.numpy.asarray(x))

        out.append(pytest.param(jax_hessian, "jax", id="jax.hessian"))
    if installed("torch"):

        def torch_hessian(f, x):
            import torch

            return torch.func.hessian(f)(torch.tensor(x))

        out.append(pytest.param(torch_hessian, "torch", id="torch.func.hessian"))
    if installed("autograd"):

        def autograd_hessian(f, x):
            import autograd

            return autograd.hessian(f)(x)

        out.append(pytest.param(autograd_hessian, "autograd", id="autograd.hessian"))
    return out


def _sum_sin(b):
    from array_api_compat import array_namespace

    return array_namespace(b).sum(array_namespace(b).sin(ex.propagate(A0, b)))


@pytest.mark.parametrize("hessian, engine", _native_hessians())
def test_native_second_derivatives_through_an_opaque_rule_raise(hessian, engine):
    if engine == "autograd":
        import autograd.numpy as anp

        def f(b):
            return anp.sum(anp.sin(ex.propagate(A0, b)))
    else:
        f = _sum_sin
    with pytest.raises(SecondOrderError, match=r"propagate \(under .*SecondOrder\(AutoFiniteDiff\(\), Auto"):
        hessian(f, B0)


def _engines():
    return [
        pytest.param(cls, marks=_needs(engine), id=cls.__name__)
        for cls, engine in [
            (di.AutoJAX, "jax"),
            (di.AutoTorch, "torch"),
            (di.AutoAutograd, "autograd"),
            (di.AutoPyTensor, "pytensor"),
        ]
    ]


@pytest.mark.parametrize("cls", _engines())
def test_second_order_operators_raise_and_the_finite_difference_outer_works(cls):
    for mode in (None, "forward", "reverse"):
        with pytest.raises(SecondOrderError, match=rf"SecondOrder\(AutoFiniteDiff\(\), {cls.__name__}\(\)\)"):
            di.hessian(cls(mode=mode), _sum_sin, B0)
        with pytest.raises(SecondOrderError):
            di.hvp(cls(mode=mode), _sum_sin, B0, np.ones(3))
    backend = di.SecondOrder(FD, cls())
    # central differences of the rule's exact gradient: measured 1e-9 relative here
    _close(di.hessian(backend, _sum_sin, B0), HESS_SIN_B, atol=1e-7)
    _close(di.hvp(backend, _sum_sin, B0, W), HESS_SIN_B @ W, atol=1e-7)


@_needs("jax")
def test_jax_differentiates_a_non_opaque_rule_twice():
    import jax

    from diffinterface.backends.jax import enable_x64

    x = np.array([-1.0, 0.5, 2.0])
    s = 1 / (1 + np.exp(-x))
    with enable_x64(True):
        _close(jax.hessian(lambda z: jax.numpy.sum(ex.softplus(z)))(x), np.diag(s * (1 - s)), atol=1e-12)
    _close(di.hessian(di.AutoJAX(), lambda z: _xp_sum(ex.softplus(z)), x), np.diag(s * (1 - s)), atol=1e-12)


def _xp_sum(y):
    from array_api_compat import array_namespace

    return array_namespace(y).sum(y)


@_needs("jax")
def test_jax_float64_rule_results_on_large_inputs():
    # XLA runs a large computation's host callbacks on its own threads, where the caller's
    # thread-local x64 context is off: float64 operands arrived as float32 there (gradients 2e-7
    # off, silently) and float64 results failed ("Actual: float32"), before both travelled as
    # uint32 pairs
    import jax

    from diffinterface.backends.jax import enable_x64
    from diffinterface.testing._rule_scenarios import cumsum_weighted

    n = 300_000
    b, x = np.linspace(0.5, 1.5, n), np.linspace(-1.0, 1.0, n)
    expected = np.cumsum(np.ones(n))[::-1] * b**2

    def f(z):
        return _xp_sum(cumsum_weighted(z, b))

    for backend in (di.AutoJAX(), di.AutoJAX(closure="const")):
        g = di.gradient(backend, f, x, prep=di.prepare_gradient(backend, f, x))
        assert g.dtype == np.float64
        np.testing.assert_allclose(np.asarray(g), expected, rtol=1e-13)
    with enable_x64(True):
        g = jax.jit(jax.grad(lambda z: jax.numpy.sum(cumsum_weighted(z, b))))(jax.numpy.asarray(x))
        assert g.dtype == np.float64
        np.testing.assert_allclose(np.asarray(g), expected, rtol=1e-13)


@pytest.mark.parametrize("cls", _engines())
def test_one_direction_rules_raise_second_order_errors_too(cls):
    x = np.array([1.0, 2.0, 3.0])
    for rule in (ex.cube_forward_only, ex.cube_reverse_only):
        for mode in (None, "forward", "reverse"):
            with pytest.raises((SecondOrderError, NotImplementedError)) as info:
                di.hessian(cls(mode=mode), lambda z, r=rule: _xp_sum(r(z)), x)
            # a missing direction may be what fails first; never a raw engine error
            assert isinstance(info.value, SecondOrderError) or "needs" in str(info.value), info.value


@_needs("torch")
def test_torch_reverse_pass_without_its_tape_under_vmap_runs_the_augmented_primal():
    # a level whose inputs are batched but whose tape is not a batch of tapes (the forward pass did
    # not know an argument active): each element's reverse pass recomputes its tape
    import torch

    from diffinterface.backends.torch_rules import _NONE, _Reverse, _Spec

    A, bs = torch.tensor(A0), torch.tensor(np.stack([B0, -B0]))
    spec = _Spec(ex.propagate, {}, (False, True))
    dy = torch.tensor(W)
    (db,) = torch.func.vmap(lambda b: _Reverse.apply(spec, _NONE, dy, A, b))(bs)
    _close(db, np.tile(GRAD_B, (2, 1)))


# -- a reverse pass without an augmented primal (tape=None) -------------------------------------------

X3 = np.array([0.5, -1.0, 2.0])
CUBE_GRAD, CUBE_JAC = 3 * X3**2, np.diag(3 * X3**2)  # closed forms of sum(x**3) and x**3


def _tapeless_counts():
    for key in ex.TAPELESS_CALLS:
        ex.TAPELESS_CALLS[key] = 0
    return ex.TAPELESS_CALLS


@_needs("jax")
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_jax_rule_without_a_tape(jit):
    import jax
    import jax.numpy as jnp

    from diffinterface.backends.jax import enable_x64

    J = jax.jit if jit else (lambda f: f)
    with enable_x64(True):
        x = jnp.asarray(X3)
        for rule in (ex.cube_tapeless, ex.cube_tapeless_traced):
            _close(J(jax.grad(lambda z, r=rule: jnp.sum(r(z))))(x), CUBE_GRAD)
            _close(J(jax.jacrev(rule))(x), CUBE_JAC)
            _close(J(jax.vmap(jax.grad(lambda z, r=rule: jnp.sum(r(z)))))(jnp.stack([x, x])), np.stack([CUBE_GRAD] * 2))
        calls = _tapeless_counts()
        J(jax.grad(lambda z: jnp.sum(ex.cube_tapeless(z))))(x)
        # the reverse host callback runs the reverse pass alone (the primal is not run again for a
        # tape); under jit JAX drops the unused primal callback, eagerly it runs once in the forward
        assert calls == {"primal": 0 if jit else 1, "reverse": 1}, calls


@_needs("torch")
def test_torch_rule_without_a_tape():
    import torch
    from torch.func import grad, jacfwd, jacrev, vmap

    x = torch.tensor(X3)
    for rule in (ex.cube_tapeless, ex.cube_tapeless_traced):
        _close(grad(lambda z, r=rule: r(z).sum())(x), CUBE_GRAD)
        _close(jacrev(rule)(x), CUBE_JAC)
        _close(vmap(jacrev(rule))(torch.stack([x, x])), np.stack([CUBE_JAC] * 2))
        _close(vmap(grad(lambda z, r=rule: r(z).sum()))(torch.stack([x, x])), np.stack([CUBE_GRAD] * 2))
        xr = x.clone().requires_grad_()
        rule(xr).sum().backward()
        _close(xr.grad, CUBE_GRAD)
        with pytest.raises(NotImplementedError, match="forward mode needs a forward rule"):
            jacfwd(rule)(x)
    calls = _tapeless_counts()
    jacrev(ex.cube_tapeless)(x)
    assert calls == {"primal": 1, "reverse": 3}, calls  # one forward pass, one reverse pass per row


@_needs("autograd")
def test_autograd_rule_without_a_tape():
    import autograd

    for rule in (ex.cube_tapeless, ex.cube_tapeless_traced):
        _close(autograd.grad(lambda z, r=rule: r(z).sum())(X3), CUBE_GRAD)
        _close(autograd.jacobian(rule)(X3), CUBE_JAC)


@pytest.mark.parametrize("cls", _engines())
def test_operators_through_a_rule_without_a_tape(cls):
    for rule in (ex.cube_tapeless, ex.cube_tapeless_traced):
        backend = cls(mode="reverse")
        _close(di.gradient(backend, lambda z, r=rule: _xp_sum(r(z)), X3), CUBE_GRAD)
        _close(di.jacobian(backend, rule, X3), CUBE_JAC)
        _close(di.pullback(backend, rule, X3, np.ones(3)), CUBE_GRAD)


# -- PyTensor: the rule as Ops whose derivatives are its rules (backends/pytensor_rules.py) ------------


def _pt():
    pytest.importorskip("pytensor")
    import pytensor
    import pytensor.tensor as pt
    from pytensor import gradient as ptg

    return pytensor, pt, ptg


@_needs("pytensor")
@pytest.mark.filterwarnings("ignore:(Lop|Rop) is deprecated:FutureWarning")  # the names the issue asks for
@pytest.mark.parametrize("mode", [None, "FAST_COMPILE"], ids=["default-mode", "fast-compile"])
def test_pytensor_transforms(mode):
    pytensor, pt, ptg = _pt()
    A, b = pt.tensor("A", shape=(3, 3), dtype="float64"), pt.tensor("b", shape=(3,), dtype="float64")
    dA, db = pt.tensor("dA", shape=(3, 3), dtype="float64"), pt.tensor("db", shape=(3,), dtype="float64")
    y = ex.propagate(A, b)
    loss = (y * W).sum()
    gA, gb = ptg.grad(loss, [A, b])
    outs = [
        y,
        gA,
        gb,
        ptg.Lop(y, b, pt.as_tensor(W)),
        ptg.Rop(y, [A, b], [dA, db]),
        ptg.Rop(y, [A, b], [dA, db], use_op_rop_implementation=True),
        ptg.pushforward(y, A, dA),
        ptg.jacobian(y, A, vectorize=True),
        ptg.jacobian(y, b, vectorize=False),
    ]
    fn = pytensor.function([A, b, dA, db], outs, mode=mode)
    got = fn(A0, B0, A0, np.zeros(3))
    _close(got[0], E0 @ B0, atol=1e-12)
    _close(got[1], GRAD_A)
    _close(got[2], GRAD_B, atol=1e-12)
    _close(got[3], GRAD_B, atol=1e-12)
    for push in got[4:7]:
        _close(push, PUSH_A)
    _close(got[7], JAC_A)
    _close(got[8], E0, atol=1e-12)


@_needs("pytensor")
def test_pytensor_runs_the_forward_rule_forward_and_the_reverse_rules_in_reverse():
    pytensor, pt, ptg = _pt()
    b, db = pt.tensor("b", shape=(3,), dtype="float64"), pt.tensor("db", shape=(3,), dtype="float64")
    y = ex.propagate(A0, b)  # A a constant: the rules see it as Const
    push = pytensor.function([b, db], ptg.pushforward(y, b, db), mode="FAST_COMPILE")
    pull = pytensor.function([b], ptg.grad((y * W).sum(), b), mode="FAST_COMPILE")
    for key in ex.CALLS:
        ex.CALLS[key] = 0
    _close(push(B0, B0), E0 @ B0, atol=1e-12)
    assert ex.CALLS == {"primal": 0, "forward": 1, "augmented": 0, "reverse": 0}, ex.CALLS
    _close(pull(B0), GRAD_B, atol=1e-12)
    # the gradient alone: the augmented primal (for its tape, in the reverse Op) and the reverse pass
    assert ex.CALLS == {"primal": 0, "forward": 1, "augmented": 1, "reverse": 1}, ex.CALLS


@_needs("pytensor")
def test_pytensor_native_hessian_through_an_opaque_rule_is_pytensors_null_gradient_error():
    _, pt, ptg = _pt()
    b = pt.tensor("b", shape=(3,), dtype="float64")
    loss = pt.sin(ex.propagate(A0, b)).sum()
    with pytest.raises(ptg.NullTypeGradError, match=r"propagate \(under PyTensor\).*SecondOrder\(AutoFiniteDiff"):
        ptg.hessian(loss, b)


@_needs("pytensor")
def test_pytensor_differentiates_an_array_api_rule_twice():
    pytensor, pt, ptg = _pt()
    x = np.array([-1.0, 0.5, 2.0])
    s = 1 / (1 + np.exp(-x))
    z = pt.tensor("z", shape=(3,), dtype="float64")
    H = pytensor.function([z], ptg.hessian(ex.softplus(z).sum(), z), mode="FAST_COMPILE")(x)
    _close(H, np.diag(s * (1 - s)), atol=1e-12)
    for mode in (None, "forward", "reverse"):
        backend = di.AutoPyTensor(mode=mode)
        _close(di.hessian(backend, lambda v: _xp_sum(ex.softplus(v)), x), np.diag(s * (1 - s)), atol=1e-12)
        _close(di.hvp(backend, lambda v: _xp_sum(ex.softplus(v)), x, W), s * (1 - s) * W, atol=1e-12)


@custom_rule
def _cube_forward_traced(x):  # an array-API rule with a forward rule only
    return x**3


@_cube_forward_traced.def_forward
def _(x):
    return x.val**3, 3 * x.val**2 * x.dval


@_needs("pytensor")
def test_pytensor_transposes_an_array_api_rule_of_one_direction():
    pytensor, pt, ptg = _pt()
    z, t = pt.tensor("z", shape=(3,), dtype="float64"), pt.tensor("t", shape=(3,), dtype="float64")
    for rule in (_cube_forward_traced, ex.cube_tapeless_traced):
        y = rule(z)
        outs = [
            ptg.grad(y.sum(), z),
            ptg.pushforward(y, z, t),
            ptg.pushforward(y, z, t, use_op_pushforward=True),
            ptg.hessian(y.sum(), z),  # the rule's graph differentiated again
        ]
        g, p1, p2, h = pytensor.function([z, t], outs, mode="FAST_COMPILE")(X3, W)
        _close(g, CUBE_GRAD, atol=1e-12)
        _close(p1, CUBE_GRAD * W, atol=1e-12)
        _close(p2, CUBE_GRAD * W, atol=1e-12)
        _close(h, np.diag(6 * X3), atol=1e-12)
        for mode in ("forward", "reverse"):
            _close(di.jacobian(di.AutoPyTensor(mode=mode), rule, X3), CUBE_JAC, atol=1e-12)


@_needs("pytensor")
def test_pytensor_unknown_shapes_need_out_shape():
    pytensor, pt, ptg = _pt()
    v = pt.vector("v", dtype="float64")  # shape (None,)
    with pytest.raises(TypeError, match=r"cube_tapeless \(under PyTensor\).*custom_rule\(opaque=True, out_shape=fn\)"):
        ex.cube_tapeless(v)
    shaped = custom_rule(opaque=True, out_shape=lambda x: (x.shape, x.dtype))(ex.cube_tapeless.primal)
    shaped.def_reverse(ex.cube_tapeless.reverse)
    g = pytensor.function([v], ptg.grad(shaped(v).sum(), v), mode="FAST_COMPILE")
    _close(g(X3), CUBE_GRAD, atol=1e-12)
    _close(g(np.arange(5.0)), 3 * np.arange(5.0) ** 2, atol=1e-12)


@_needs("pytensor")
@_needs("jax")
def test_differentiate_with_jax_inside_native_pytensor():
    import jax.numpy as jnp

    pytensor, pt, ptg = _pt()
    F = di.DifferentiateWith(lambda u: jnp.sin(u) * jnp.sum(u), di.AutoJAX())
    z, t = pt.tensor("z", shape=(3,), dtype="float64"), pt.tensor("t", shape=(3,), dtype="float64")
    y = F(z)
    g, p = pytensor.function([z, t], [ptg.grad((y * W).sum(), z), ptg.pushforward(y, z, t)])(X3, W)
    J = np.diag(np.cos(X3) * X3.sum()) + np.sin(X3)[:, None]  # closed form
    _close(g, J.T @ W, atol=1e-12)
    _close(p, J @ W, atol=1e-12)


@_needs("pytensor")
def test_pytensor_bench_rule_by_hand_is_the_same_gradient():
    # the rules table's hand-written PyTensor registration (an Op with a pullback Op), against the rule
    from diffinterface.backends.pytensor_bench import Bench
    from diffinterface.testing._rule_scenarios import cumsum_weighted

    b = np.linspace(0.5, 1.5, 3)
    by_hand = Bench().rule_by_hand(lambda a: np.cumsum(a * b**2), lambda a, dy: np.cumsum(dy[::-1])[::-1] * b**2)
    expected = np.cumsum(W[::-1])[::-1] * b**2  # closed form of sum(w * cumsum(x * b**2))
    backend = di.AutoPyTensor(closure="const")
    _close(di.gradient(backend, lambda z: _xp_sum(by_hand(z) * W), X3), expected, atol=1e-12)
    _close(di.gradient(backend, lambda z: _xp_sum(cumsum_weighted(z, b) * W), X3), expected, atol=1e-12)
