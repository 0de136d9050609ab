"""AutoTorch: the catalogue in every mode, user tensors left alone, nn.Module functions, compile=True."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

import diffinterface as di
from conftest import MODE_IDS, MODES, family_dtype_params, first_calls_are_checked_not_walked, installed
from diffinterface.testing import check_scenario, default_scenarios, test_differentiation

pytestmark = pytest.mark.skipif(
    not installed("torch"), reason='torch is not installed: pip install "diffinterface[torch]"'
)

SCENARIOS = default_scenarios("numpy", np.float64)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_catalogue_float64_numpy_inputs(scenario, mode):
    check_scenario(di.AutoTorch(mode=mode), scenario)  # exact-AD tolerance: 1e-10 relative


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize(
    "family, dtype",
    family_dtype_params([("torch", np.float64), ("torch", np.float32), ("numpy", np.float32), ("jax", np.float32)]),
)
def test_catalogue_on_each_family(family, dtype, mode):
    # float32 at 1e-5 relative (the harness's default tolerance for float32)
    outcomes = test_differentiation([di.AutoTorch(mode=mode)], default_scenarios(family, dtype))
    assert len(outcomes) > 300


# -- the user's tensors ------------------------------------------------------------------------


def _snapshot(t):
    return (t.detach().clone(), t.requires_grad, t.grad if t.grad is None else t.grad.clone(), t.grad_fn, t.is_leaf)


def _same(before, t):
    value, requires_grad, grad, grad_fn, is_leaf = before
    assert torch_equal(t.detach(), value) and t.requires_grad == requires_grad and t.grad_fn is grad_fn
    assert t.is_leaf == is_leaf
    assert (t.grad is None) if grad is None else torch_equal(t.grad, grad)


def torch_equal(a, b):
    import torch

    return bool(torch.equal(a, b))


ALL_OPERATORS = [
    ("gradient", lambda b, f, x: di.value_and_gradient(b, f, x)),
    ("jacobian", lambda b, f, x: di.value_and_jacobian(b, lambda z: f(z) * z, x)),
    ("pushforward", lambda b, f, x: di.value_and_pushforward(b, f, x, (x, 2 * x))),
    ("pullback", lambda b, f, x: di.value_and_pullback(b, f, x, 1.5)),
    ("hvp", lambda b, f, x: di.gradient_and_hvp(b, f, x, x)),
    ("hessian", lambda b, f, x: di.value_gradient_and_hessian(b, f, x)),
]


@pytest.mark.parametrize("closure", ["duplicated", "const"])
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_user_tensors_are_left_exactly_as_they_were(mode, closure):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1)).double()
    weight = model[0].weight
    weight.grad = torch.full_like(weight, 7.0)  # an earlier .backward() of the user's
    params = list(model.parameters())
    x = torch.linspace(-1.0, 1.0, 4, dtype=torch.float64, requires_grad=True)
    x.grad = torch.ones(4, dtype=torch.float64)
    y_user = (x * 2).sum()  # a graph the user holds: calls must not free or extend it
    before = [_snapshot(t) for t in [x] + params]

    def f(z):
        return model(z).sum()

    backend = di.AutoTorch(mode=mode, closure=closure)
    for name, call in ALL_OPERATORS:
        results = call(backend, f, x)
        for r in results:
            for t in r if isinstance(r, tuple) else (r,):
                assert isinstance(t, torch.Tensor) and not t.requires_grad and t.grad_fn is None, name
        for b, t in zip(before, [x] + params):
            _same(b, t)
    # the gradient itself: W2 diag(1 - tanh^2) W1, against torch.func
    ref = torch.func.grad(lambda z: torch.func.functional_call(model, dict(model.named_parameters()), (z,)).sum())(
        x.detach()
    )
    assert torch.allclose(di.gradient(backend, f, x), ref, rtol=1e-12, atol=0)
    (g,) = torch.autograd.grad(y_user, x)  # the user's own graph still works
    assert torch.equal(g, torch.full((4,), 2.0, dtype=torch.float64))
    assert all(p.grad is None for p in params[1:]) and torch.equal(weight.grad, torch.full_like(weight, 7.0))


@pytest.mark.parametrize("closure", ["duplicated", "const"])
def test_modules_and_callable_objects_as_functions(closure):
    import torch

    torch.manual_seed(1)
    linear = torch.nn.Linear(5, 2).double()
    w, b = linear.weight.detach(), linear.bias.detach()
    x = torch.linspace(-1.0, 1.0, 5, dtype=torch.float64)
    backend = di.AutoTorch(closure=closure)
    # the module itself as f: jacobian of W x + b is W
    assert torch.allclose(di.jacobian(backend, linear, x), w, rtol=0, atol=1e-15)

    class Energy:
        def __init__(self, scale):
            self.scale = scale

        def __call__(self, z):
            return self.scale * torch.sum(torch.tanh(linear(z)) ** 2)

    energy = Energy(torch.tensor(3.0, dtype=torch.float64))
    u = torch.tanh(w @ x + b)
    expected = w.T @ (3.0 * 2 * u * (1 - u**2))
    for fn in (energy, functools.partial(Energy.__call__, energy), lambda z: energy(z)):
        prep = di.prepare_gradient(backend, fn, torch.zeros(5, dtype=torch.float64))
        for _ in range(2):
            assert torch.allclose(di.gradient(backend, fn, x, prep=prep), expected, rtol=1e-12, atol=1e-15)
            assert torch.allclose(di.gradient(backend, fn, x), expected, rtol=1e-12, atol=1e-15)
    assert linear.weight.grad is None and linear.bias.grad is None


def test_numpy_inputs_reach_f_as_tensors_sharing_their_memory():
    import torch

    seen = []

    def f(z):
        seen.append(z)
        return torch.sum(z**2)

    x = np.linspace(0.0, 1.0, 6)
    backend = di.AutoTorch(closure="const")  # f appends to the user's own list, not to a duplicate
    prep = di.prepare_gradient(backend, f, x)
    seen.clear()
    g = di.gradient(backend, f, x, prep=prep)
    assert type(g) is np.ndarray and g.dtype == np.float64 and np.array_equal(g, 2 * x)
    (z,) = seen
    assert isinstance(z, torch.Tensor) and z.data_ptr() == x.__array_interface__["data"][0]
    x32 = x.astype(np.float32)
    assert di.jacobian(di.AutoTorch(), lambda z: z * z, x32).dtype == np.float32
    t32 = torch.from_numpy(x32)
    h = di.hessian(di.AutoTorch(), lambda z: torch.sum(z**3), t32)
    assert isinstance(h, torch.Tensor) and h.dtype == torch.float32 and torch.allclose(h, torch.diag(6 * t32))


def test_out_writes_into_tensors_and_numpy_arrays():
    import torch

    f = lambda z: torch.sum(torch.sin(z))  # noqa: E731
    x = torch.linspace(0.0, 1.0, 4, dtype=torch.float64)
    out = torch.empty(4, dtype=torch.float64)
    assert di.gradient(di.AutoTorch(), f, x, out=out) is out and torch.allclose(out, torch.cos(x), rtol=1e-15)
    out_np = np.empty((4, 4))
    res = di.hessian(di.AutoTorch(), f, x.numpy(), out=out_np)
    assert res is out_np and np.allclose(out_np, np.diag(-np.sin(x.numpy())), rtol=1e-15, atol=0)


def test_grad_mode_and_inference_mode_do_not_change_the_derivatives():
    import torch

    f = lambda z: torch.sum(z**3)  # noqa: E731
    x = torch.linspace(0.0, 1.0, 5, dtype=torch.float64)
    expected_g, expected_h = 3 * x**2, 6 * x * x
    prep = di.prepare_gradient(di.AutoTorch(), f, x)
    for context in (torch.no_grad, torch.inference_mode):
        with context():
            xi = torch.linspace(0.0, 1.0, 5, dtype=torch.float64)  # an inference tensor under inference_mode
            assert torch.allclose(di.gradient(di.AutoTorch(), f, xi), expected_g, rtol=1e-15)
            assert torch.allclose(di.gradient(di.AutoTorch(), f, xi, prep=prep), expected_g, rtol=1e-15)
            assert torch.allclose(di.hvp(di.AutoTorch(), f, xi, xi), expected_h, rtol=1e-15)
            assert torch.allclose(di.pushforward(di.AutoTorch(), f, xi, xi), torch.sum(3 * x**3), rtol=1e-15)
        assert torch.allclose(di.gradient(di.AutoTorch(), f, xi), expected_g, rtol=1e-15)  # and outside it


def test_a_captured_tensor_updated_in_place_is_seen():
    import torch

    a = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    f = lambda z: torch.sum(a * z**2)  # noqa: E731
    x = torch.ones(3, dtype=torch.float64)
    for closure in ("duplicated", "const"):
        backend = di.AutoTorch(closure=closure)
        prep = di.prepare_gradient(backend, f, x)
        assert torch.equal(di.gradient(backend, f, x, prep=prep), 2 * a)
        a[1] = 10.0
        assert torch.equal(di.gradient(backend, f, x, prep=prep), torch.tensor([2.0, 20.0, 6.0], dtype=torch.float64))
        a[1] = 2.0


def test_the_captured_buffer_example_of_the_spec():
    # a captured buffer: a[0] = 1; a[0] += x; a[0]**2 has derivative 2 (1 + x) on every call
    import torch

    for state in (np.zeros(2), torch.zeros(2, dtype=torch.float64), [0.0, 0.0]):

        def f(x, a=state):
            a[0] = 1.0
            a[0] += x
            return a[0] ** 2

        before = [float(v) for v in state]
        prep = di.prepare_derivative(di.AutoTorch(), f, 0.0)
        for k in range(4):
            x = 0.25 * k
            assert abs(di.derivative(di.AutoTorch(), f, x, prep=prep) - 2 * (1 + x)) < 1e-14
            assert abs(di.gradient(di.AutoTorch(), f, x) - 2 * (1 + x)) < 1e-14
            assert abs(di.second_derivative(di.AutoTorch(), f, x) - 2.0) < 1e-14
        assert [float(v) for v in state] == before


# -- compile=True ------------------------------------------------------------------------------


def test_compile_pays_at_preparation_and_matches_eager():
    import torch
    from torch._dynamo.utils import counters

    def f(z):
        return torch.sum(torch.sin(z) ** 2) + torch.sum(z[1:] * z[:-1])

    def g(z):
        return torch.stack([torch.sum(z**2), torch.prod(torch.cos(z))])

    x = torch.linspace(0.1, 1.0, 6, dtype=torch.float64)
    compiled, eager = di.AutoTorch(compile=True), di.AutoTorch()
    prep = di.prepare_gradient(compiled, f, x)
    graphs = counters["stats"]["unique_graphs"]
    assert graphs >= 1
    for k in range(3):
        xk = x + k
        assert torch.allclose(
            di.gradient(compiled, f, xk, prep=prep), di.gradient(eager, f, xk), rtol=1e-13, atol=1e-15
        )
        y, gk = di.value_and_gradient(compiled, f, xk, prep=prep)
        assert torch.allclose(y, f(xk), rtol=1e-14)
    assert counters["stats"]["unique_graphs"] == graphs  # no compilation after preparation
    for op, args in [
        ("jacobian", ()),
        ("pullback", ((torch.tensor([1.0, -2.0], dtype=torch.float64),),)),
        ("pushforward", ((x, 2 * x),)),
        ("hessian", ()),
    ]:
        fn = g if op in ("jacobian", "pullback", "pushforward") else f
        prep = getattr(di, "prepare_" + op)(compiled, fn, x, *args)
        got = getattr(di, op)(compiled, fn, x + 0.5, *args, prep=prep)
        ref = getattr(di, op)(eager, fn, x + 0.5, *args)
        for a, b in zip(got if isinstance(got, tuple) else (got,), ref if isinstance(ref, tuple) else (ref,)):
            assert torch.allclose(a, b, rtol=1e-13, atol=1e-15), op


def test_compile_with_duplicated_state_warns_and_runs_eagerly():
    import torch

    buffer = np.zeros(4)

    def f(z):
        buffer[...] = z * 2
        return torch.sum(buffer * z)  # buffer is the duplicate, a tensor holding 2 z: gradient 4 z

    def h(z):
        w = torch.zeros(4, dtype=z.dtype)
        w[...] = z * 2  # writes into a fresh tensor: fine for compile
        return torch.sum(w * z)

    x = torch.linspace(0.0, 1.0, 4, dtype=torch.float64)
    with pytest.warns(UserWarning, match=r"compile=True.*runs eagerly.*'buffer' captured by .*closure='const'"):
        prep = di.prepare_gradient(di.AutoTorch(compile=True), f, x)
    assert torch.allclose(di.gradient(di.AutoTorch(compile=True), f, x, prep=prep), 4 * x, rtol=1e-15)
    # no warning of ours for an f without duplicated state (torch's own may come with its first compile in
    # the process, a DeprecationWarning of torch.jit's: an "error" filter failed the test where it ran first)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prep = di.prepare_gradient(di.AutoTorch(compile=True), h, x)
    assert not [w for w in caught if "compile=True" in str(w.message)], [str(w.message) for w in caught]
    assert torch.allclose(di.gradient(di.AutoTorch(compile=True), h, x, prep=prep), 4 * x, rtol=1e-15)


def test_const_closure_writing_x_into_numpy_state_is_an_error_not_a_zero_derivative():
    # numpy turns a tensor written into it into a number: without duplicates the derivative is lost
    a = np.zeros(2)

    def f(x):
        a[0] = 1.0
        a[0] += x
        return a[0] ** 2

    for op in ("derivative", "gradient", "second_derivative"):
        with pytest.raises(
            ValueError,
            match=rf"^{op}\(AutoTorch\(closure='const'\), f, x\): with closure='const', f writes "
            r"into its own captured state \('a' captured by .*\(f returned a float64, not a "
            r"tensor computed from x\).*closure='duplicated'",
        ):
            getattr(di, op)(di.AutoTorch(closure="const"), f, 0.3)
    assert di.derivative(di.AutoTorch(), f, 0.3) == pytest.approx(2.6, rel=1e-15)  # the default duplicates
    assert di.gradient(di.AutoTorch(closure="const"), lambda x: 3.0, 0.3) == 0.0  # no state: a constant f


CAPTURED_A = np.arange(6.0).reshape(2, 3)  # a global numpy matrix that f reads


def test_const_closure_reading_a_numpy_array_names_it_and_the_fix():
    """Under "const" a captured numpy array reaches f as it is, and torch refuses ``A @ u`` with a
    TypeError naming two types; the library's error names the array and closure='duplicated'. The
    default converts it: the gradient of sum(A @ u) is A's column sums."""
    import torch

    x = torch.ones(3, dtype=torch.float64)

    def reads_a_global(u):
        return (CAPTURED_A @ u).sum()

    local = np.arange(6.0).reshape(2, 3)

    def reads_a_closure_cell(u):
        return (local @ u).sum()

    for f, where in ((reads_a_global, r"global 'CAPTURED_A'"), (reads_a_closure_cell, r"'local' captured by")):
        for op in ("gradient", "jacobian"):
            with pytest.raises(
                TypeError,
                match=rf"^{op}\(AutoTorch\(closure='const'\), f, x\): .*{where}.*"
                r"unsupported operand.*closure='duplicated'",
            ) as raised:
                getattr(di, op)(di.AutoTorch(closure="const"), f, x)
            assert isinstance(raised.value.__cause__, TypeError)  # torch's own error, chained
        np.testing.assert_allclose(di.gradient(di.AutoTorch(), f, x).numpy(), [3.0, 5.0, 7.0], rtol=1e-15)
    with pytest.raises(TypeError, match=r"^unsupported operand type\(s\) for \+: 'Tensor' and 'str'$"):
        di.gradient(di.AutoTorch(closure="const"), lambda u: (u + "a").sum(), x)  # f's own error: as it is


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_submodules_state_is_duplicated(mode):
    """A module whose submodule writes into its own buffers (a call counter, a work buffer): the
    writes go to duplicates, so the user's buffers stay as they were and the derivative is right."""
    import torch

    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))
            self.register_buffer("calls", torch.zeros((), dtype=torch.float64))
            self.register_buffer("work", torch.zeros(3, dtype=torch.float64))

        def forward(self, x):
            self.calls += 1
            self.work[...] = self.weight * x
            return self.work

    model = torch.nn.Sequential(Scaled(), torch.nn.Tanh())
    inner = model[0]

    def f(x):
        return torch.sum(model(x) ** 2)

    backend = di.AutoTorch(mode=mode)
    x = torch.tensor([0.1, -0.2, 0.3], dtype=torch.float64)
    w = inner.weight.detach()
    t = torch.tanh(w * x)
    expected = 2 * t * (1 - t**2) * w
    prep = di.prepare_gradient(backend, f, x)
    for _ in range(3):
        assert torch.allclose(di.gradient(backend, f, x, prep=prep), expected, rtol=1e-12, atol=1e-12)
        assert torch.allclose(di.gradient(backend, f, x), expected, rtol=1e-12, atol=1e-12)
    assert float(inner.calls) == 0.0 and bool(torch.all(inner.work == 0)) and inner.weight.grad is None


class _Runs:
    count = 0  # a class attribute: the closure walker does not duplicate the class f names


def test_reverse_mode_differentiates_through_writes_into_x_and_learns_them_once():
    """f(z) = sum(z**2) after z[0] = 5: the derivative is 0 in the overwritten coordinate and 2 z_i
    elsewhere (closed form). torch refuses the write into the leaf alias of x; that refusal alone
    makes f run again over a differentiable copy, learnt for the preparation; the user's x is unchanged."""
    import torch

    def f(z):
        _Runs.count += 1
        z[0] = 5.0
        return (z**2).sum()

    x = torch.tensor([1.0, 2.0, -3.0], dtype=torch.float64)
    backend = di.AutoTorch(mode="reverse")
    prep = di.prepare_gradient(backend, f, x)
    _Runs.count = 0
    assert torch.equal(di.gradient(backend, f, x, prep=prep), torch.tensor([0.0, 4.0, -6.0], dtype=torch.float64))
    assert _Runs.count == 2  # the refused run and the run over the copy
    _Runs.count = 0
    di.gradient(backend, f, x, prep=prep)
    assert _Runs.count == 1  # learnt
    assert torch.equal(x, torch.tensor([1.0, 2.0, -3.0], dtype=torch.float64))
    jac = di.jacobian(backend, lambda z: f(z) * z, x)  # d/dz_j (s(z) z_i), s = 25 + z1^2 + z2^2 after the write
    z = torch.tensor([5.0, 2.0, -3.0], dtype=torch.float64)
    ds = torch.tensor([0.0, 4.0, -6.0], dtype=torch.float64)
    expected = torch.outer(z, ds) + (z**2).sum() * torch.diag(torch.tensor([0.0, 1.0, 1.0], dtype=torch.float64))
    assert torch.allclose(jac, expected)
    h = di.hessian(backend, f, x)
    assert torch.equal(h, torch.diag(torch.tensor([0.0, 2.0, 2.0], dtype=torch.float64)))
    assert torch.equal(x, torch.tensor([1.0, 2.0, -3.0], dtype=torch.float64))

    def fails(z):
        _Runs.count += 1
        raise ValueError("f's own error")

    _Runs.count = 0
    with pytest.raises(ValueError, match="f's own error"):
        di.gradient(backend, fails, x)
    assert _Runs.count == 1  # not the guard's refusal: no second run


@pytest.mark.parametrize("prepared", [False, True], ids=["one-shot", "prepared"])
def test_a_large_pushforward_s_primal_is_x_itself_and_a_write_into_it_reruns_on_a_copy(prepared):
    """From 1e4 elements a pushforward along one tangent gives f x itself as the primal of its dual
    tensor (a detached alias that requires grad: no copy of x), and an f that writes into its input
    is refused there and runs again on a copy: the derivative of what it computes, the user's x
    unchanged, on every call."""
    import torch
    import torch.autograd.forward_ad as fwAD

    n = 10_000
    x = torch.linspace(-1.0, 1.0, n, dtype=torch.float64)
    t = torch.ones(n, dtype=torch.float64)
    before = x.clone()
    seen = []

    def reads(z):
        seen.append(fwAD.unpack_dual(z).primal.data_ptr())
        return torch.sin(z) * 2

    def writes(z):
        z[0] = 5.0
        return z**2

    backend = di.AutoTorch(closure="const")  # reads appends to the user's own list
    zero = torch.zeros(1, dtype=torch.float64)
    for f, expected in ((reads, 2 * torch.cos(x)), (writes, torch.cat([zero, 2 * x[1:]]))):
        prep = di.prepare_pushforward(backend, f, x, t) if prepared else None
        seen.clear()  # preparation evaluates f on a copy, for f(x)'s shape alone
        for _ in range(2):
            torch.testing.assert_close(di.pushforward(backend, f, x, t, prep=prep), expected * t)
            torch.testing.assert_close(x, before, rtol=0, atol=0)
        if f is reads:
            assert len(seen) == 2 and all(p == x.data_ptr() for p in seen)  # no copy of x


def test_a_helper_reading_a_torch_dtype_and_device_is_checked_by_its_summary_at_a_new_first_call(walk_visits):
    """torch's dtypes and devices take no weak reference; the torch family declares them constants
    (``ArrayFamily.constant_types``), so a stateless helper that reads them (``DEVICE =
    torch.device("cpu")`` at module level is common) keeps its closure walk's summary, and a new
    lambda around it is checked, not walked (the walk was 25 us of each such first call, the check
    1.6, measured alone); the derivative is torch's."""
    import torch

    dtype, device = torch.float64, torch.device("cpu")

    def helper(z):
        return torch.sum(z.to(dtype=dtype, device=device) ** 3)

    x = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    first_calls_are_checked_not_walked(
        helper, walk_visits, lambda f: torch.testing.assert_close(di.gradient(di.AutoTorch(), f, x), 3 * x**2)
    )


@pytest.mark.parametrize("mode", [None, "forward"], ids=["mode=None", "forward"])
def test_the_asarray_warning_is_silenced_only_around_an_f_that_calls_torch_asarray(mode, monkeypatch):
    """torch warns where ``torch.asarray(t)`` keeps ``t``'s requires_grad (array-API code's
    ``xp.asarray(A)`` over the guarded alias of a captured ``A``): silenced around such an f's runs,
    and only there: a straight-line f whose watched first run called no ``torch.asarray`` runs
    without the filter from its second run on (6 to 10 us a call). Checked by the filter's calls, and
    by torch's warning, an error here; the derivatives against the analytic ``A.T @ cos(A x)``."""
    import torch
    from array_api_compat import array_namespace

    import diffinterface.backends.torch as adapter

    A = torch.tensor([[1.0, 2.0, 0.5], [-1.0, 0.3, 2.0], [0.2, -0.7, 1.1]], dtype=torch.float64)
    x = torch.tensor([0.3, -0.2, 0.9], dtype=torch.float64)

    def plain(z):
        return torch.sin(A @ z).sum()

    def through_asarray(z):
        xp = array_namespace(z)
        return xp.sum(xp.sin(xp.asarray(A) @ z))

    quieted = []
    real = adapter._quietly

    def counted(run, *args):
        quieted.append(run)
        return real(run, *args)

    monkeypatch.setattr(adapter, "_quietly", counted)
    backend = di.AutoTorch(mode=mode)
    expected = A.T @ torch.cos(A @ x)
    for f, silenced in ((plain, False), (through_asarray, True)):
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="torch.asarray")
            prep = di.prepare_gradient(backend, f, x)
            quieted.clear()
            for _ in range(3):
                torch.testing.assert_close(di.gradient(backend, f, x, prep=prep), expected)
        runs = len(quieted)
        assert runs == 3 if silenced else runs <= 1, (f.__name__, runs)  # plain: its watched first run alone


def _one_direction_cube(direction: str) -> type:
    """``z**3`` as a ``torch.autograd.Function`` with the rule of one direction only: a forward-mode rule
    (``jvp``) and no ``backward`` for ``"forward"``, a ``backward`` and no forward-mode rule for ``"reverse"``."""
    import torch

    forward = direction == "forward"

    class Cube(torch.autograd.Function):
        @staticmethod
        def forward(z):
            return z**3

        @staticmethod
        def setup_context(ctx, inputs, output):
            (ctx.save_for_forward if forward else ctx.save_for_backward)(inputs[0])

    def derivative(ctx, t):  # J t, or (the same for this elementwise cube) g J
        (z,) = ctx.saved_tensors
        return 3 * z**2 * t

    if forward:

        class ForwardOnly(Cube):
            jvp = staticmethod(derivative)

        return ForwardOnly

    class ReverseOnly(Cube):
        backward = staticmethod(derivative)

    return ReverseOnly


def test_a_one_shot_square_jacobian_goes_in_reverse_on_the_recording_of_its_first_evaluation():
    """mode=None builds a Jacobian with x and f(x) of one size from pushforwards; a call without prep=
    that reuses nothing has recorded f to learn f(x)'s size (``Adapter.recorded_in_reverse``), so it goes
    in reverse on that recording: f evaluated once, where the pushforwards evaluated it again. A
    tall one stays forward; an operation without a backward rule falls back to forward mode."""
    import torch

    A = torch.tensor([[1.0, 2.0, 0.5], [-1.0, 0.3, 2.0], [0.7, -0.2, 1.5], [0.1, 0.4, -0.9]], dtype=torch.float64)
    x = torch.tensor([0.3, -0.4, 0.8], dtype=torch.float64)

    class Count(torch.overrides.TorchFunctionMode):  # the evaluations of f, batched ones once
        def __init__(self) -> None:
            super().__init__()
            self.sins = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.sins += func is torch.sin
            return func(*args, **(kwargs or {}))

    unshared = di.AutoTorch(reuse_prep=False)
    for B, evaluations in ((A[:3], 1), (A, 2)):  # square: the recording; tall: recorded, then pushforwards
        with Count() as count:
            J = di.jacobian(unshared, lambda z, B=B: torch.sin(B @ z), x)
        torch.testing.assert_close(J, torch.cos(B @ x)[:, None] * B)
        assert count.sins == evaluations, (B.shape, count.sins)

    cube = _one_direction_cube("forward")
    torch.testing.assert_close(di.jacobian(unshared, lambda z: cube.apply(z), x), torch.diag(3 * x**2))


def test_a_one_shot_gradient_falls_back_to_forward_mode_where_an_operation_has_no_backward_rule():
    """A call without prep= takes its gradient or pullback whole from the recording its preparation
    made (``Adapter.oneshot_result``); an ``autograd.Function`` with a forward-mode rule (``jvp``)
    and no ``backward`` fails there, and mode=None goes on in forward mode as a prepared call does;
    mode="reverse" raises, naming the fix."""
    import torch

    Cube = _one_direction_cube("forward")
    x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    ty = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    backend = di.AutoTorch()

    def f(z):
        return Cube.apply(z).sum()

    prep = di.prepare_gradient(backend, f, x)
    for _ in range(2):
        torch.testing.assert_close(di.gradient(backend, lambda z: f(z), x), 3 * x**2)
        np.testing.assert_allclose(di.gradient(backend, lambda z: f(z), x.numpy()), 3 * x.numpy() ** 2, rtol=1e-15)
        value, grad = di.value_and_gradient(backend, lambda z: f(z), x)
        torch.testing.assert_close(grad, 3 * x**2)
        torch.testing.assert_close(di.gradient(backend, f, x, prep=prep), 3 * x**2)
        (dy,) = di.pullback(backend, lambda z: 2.0 * Cube.apply(z), x, (ty,))
        torch.testing.assert_close(dy, 6 * x**2 * ty)
    with pytest.raises(NotImplementedError, match=r"gradient\(AutoTorch\(mode='reverse'\).*backward.*mode='forward'"):
        di.gradient(di.AutoTorch(mode="reverse"), lambda z: f(z), x)


def test_a_prepared_pushforward_of_one_tangent_is_right_on_every_path_of_its_fast_runner():
    """torch's prepared pushforward without contexts serves one tangent by its ``fast`` runner
    (``extend.Runners``): the single forward pass inline where x is a small tensor and t one of its
    dtype, unwatched; the runner's ``plain`` path for anything else. Each case against the analytic
    J @ t, three calls each (the first watched, the later ones on the inline pass), the user's x unchanged."""
    import torch
    import torch.autograd.forward_ad as fwAD

    x = torch.tensor([0.5, -1.0, 2.0, 0.25], dtype=torch.float64)
    t = torch.tensor([1.0, 0.5, -2.0, 3.0], dtype=torch.float64)
    kept = x.clone()
    backend = di.AutoTorch()

    def check(f, expected, *, x=x, t=t, backend=backend):
        prep = di.prepare_pushforward(backend, f, x, t)
        for _ in range(3):
            got = di.pushforward(backend, f, x, t, prep=prep)
            assert type(got) is type(x)
            np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-13, atol=1e-15)
        torch.testing.assert_close(torch.as_tensor(x), torch.as_tensor(np.asarray(kept)), rtol=0, atol=0)

    check(lambda z: torch.sin(z) * z.sum(), torch.cos(x) * x.sum() * t + torch.sin(x) * t.sum())
    check(lambda z: torch.sin(z.mul_(2.0)), 2 * torch.cos(2 * x) * t)  # f writes into its input: x is not touched
    check(lambda z: torch.zeros(2, dtype=z.dtype) * 0 + 1.0, torch.zeros(2, dtype=torch.float64))  # constant f
    check(lambda z: z**2, 2 * x * t.float().double(), t=t.float())  # a float32 tangent of a float64 x
    check(lambda z: z**2, (2 * x * t).numpy(), x=x.numpy(), t=t.numpy())  # numpy arrays
    check(lambda z: z**2, 2 * x * t, t=t.clone().requires_grad_())  # a tangent that requires grad
    Cube = _one_direction_cube("reverse")
    check(lambda z: Cube.apply(z), 3 * x**2 * t)  # no forward rule: mode=None goes in reverse
    with pytest.raises(NotImplementedError, match=r"pushforward\(AutoTorch\(mode='forward'\).*mode='reverse'"):
        check(lambda z: Cube.apply(z), 3 * x**2 * t, backend=di.AutoTorch(mode="forward"))

    def cube(z):
        return z**3

    prep = di.prepare_pushforward(backend, cube, x, t)
    for _ in range(2):
        torch.testing.assert_close(di.pushforward(backend, cube, x, t, prep=prep), 3 * x**2 * t)
        with fwAD.dual_level():  # the user's own forward-mode pass around the call: torch cannot nest one
            torch.testing.assert_close(di.pushforward(backend, cube, x, t, prep=prep), 3 * x**2 * t)
        with torch.inference_mode():
            torch.testing.assert_close(di.pushforward(backend, cube, x, t, prep=prep), 3 * x**2 * t)
    with pytest.raises(di.LostDerivativeError):  # a value read out of a tensor reaches f(x): never dropped
        check(lambda z: z * float(z[0]), x[0] * t + t[0] * x)


@pytest.mark.parametrize("n", [4, 12_000])
def test_an_f_writing_into_its_input_leaves_the_callers_x_and_tangents_and_the_preps_own_seeds_as_they_were(n):
    """A dual tensor shares its tangent's memory as well as its primal's: a write of f into its input
    (``z.mul_(2)``) scales both. Every forward-mode pass runs on its own copies (a guarded alias of a large
    x, whose write torch refuses before it reaches the tangent, then copies): the user's x and tangents
    are unchanged, and a prep's own seeds (a forward Jacobian's basis, a derivative's one) too, so that
    each call gives the derivative of f, sin(2 z) (before 2026-12-08 the user's tangent doubled at each
    pushforward and a prepared forward Jacobian or derivative doubled at each call). Three prepared calls
    and two unprepared ones of every operator, against the analytic derivatives."""
    import torch

    x = torch.linspace(-1.0, 2.0, n, dtype=torch.float64)
    t, u = torch.cos(3 * x), torch.sin(5 * x)
    kept = (x.clone(), t.clone(), u.clone())

    def f(z):
        return torch.sin(z.mul_(2.0))

    def g(z):
        return torch.sin(z.mul_(2.0)).sum()

    d, dd = 2 * torch.cos(2 * x), -4 * torch.sin(2 * x)
    cases = [
        ("pushforward", f, (t,), d * t),
        ("pushforward", f, ((t, u),), (d * t, d * u)),
        ("pullback", f, (t,), d * t),
        ("gradient", g, (), d),
        ("hvp", g, (t,), dd * t),
    ]
    if n < 100:
        cases += [
            ("jacobian", f, (), torch.diag(d)),
            ("hessian", g, (), torch.diag(dd)),
        ]
    s = torch.tensor(0.3, dtype=torch.float64)
    scalar = [
        ("derivative", lambda z: torch.sin(z.mul_(2.0)), 2 * torch.cos(2 * s)),
        ("second_derivative", lambda z: torch.sin(z.mul_(2.0)), -4 * torch.sin(2 * s)),
    ]
    for backend in (di.AutoTorch(), di.AutoTorch(mode="forward"), di.AutoTorch(mode="reverse")):
        for name, fn, args, expected in cases:
            prep = getattr(di, f"prepare_{name}")(backend, fn, x, *args)
            for call in [lambda: getattr(di, name)(backend, fn, x, *args, prep=prep)] * 3 + [
                lambda: getattr(di, name)(backend, fn, x, *args)
            ] * 2:
                got = call()
                for a, b in zip(
                    got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple) else (expected,)
                ):
                    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=lambda m: f"{name} {backend}: {m}")
                for a, b in zip((x, t, u), kept):
                    torch.testing.assert_close(
                        a, b, rtol=0, atol=0, msg=lambda m: f"{name} {backend} changed an input: {m}"
                    )
        for name, fn, expected in scalar:
            prep = getattr(di, f"prepare_{name}")(backend, fn, s)
            for _ in range(3):
                torch.testing.assert_close(
                    getattr(di, name)(backend, fn, s, prep=prep), expected, rtol=1e-12, atol=1e-12
                )
                torch.testing.assert_close(getattr(di, name)(backend, fn, s), expected, rtol=1e-12, atol=1e-12)
            assert float(s) == 0.3
