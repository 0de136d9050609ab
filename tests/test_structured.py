"""Structured x, tangents and f(x) (dicts, lists, tuples, namedtuples, registered classes) against the
engines' own pytree support (``jax.jacobian``/``jax.hessian`` on pytrees, ``torch.func`` on dicts,
``autograd.grad`` on dicts, a module's ``.grad`` after ``backward``), and the errors around them.
The catalogue's structured scenarios (closed forms) run in test_catalogue.py."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import diffinterface as di
from conftest import installed
from diffinterface import PreparationMismatchError

jax = pytest.importorskip("jax")
jnp = jax.numpy
torch = pytest.importorskip("torch")

AD = [di.AutoJAX(), di.AutoJAX(mode="forward"), di.AutoTorch(), di.AutoTorch(mode="forward"), di.AutoAutograd()]
ALL = [*AD, di.AutoFiniteDiff(), di.AutoFiniteDiff(method="complex")]


def _tol(backend):
    return 1e-6 if isinstance(backend, di.AutoFiniteDiff) and backend.method != "complex" else 1e-11


def _np(tree):
    return jax.tree_util.tree_map(lambda v: np.asarray(v, dtype=np.float64), tree)


def assert_tree_close(actual, expected, tol):
    """Same structure (JAX's view of it, dict key order aside) and leaves within ``tol``."""
    a_leaves, a_def = jax.tree_util.tree_flatten(actual)
    e_leaves, e_def = jax.tree_util.tree_flatten(expected)
    assert a_def == e_def, (a_def, e_def)
    for a, e in zip(a_leaves, e_leaves):
        a, e = np.asarray(a), np.asarray(e)
        assert a.shape == e.shape
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol)


def _xp_of(v):
    from array_api_compat import array_namespace

    return array_namespace(v)


def loss(p):  # array API on the leaves: runs on every engine
    xp = _xp_of(p["w"])
    h = xp.tanh(p["w"] @ p["x"][0] + p["b"])
    return xp.sum(h * h) * p["x"][1] + xp.sum(xp.exp(p["b"]))


def model(p):  # a structured output
    xp = _xp_of(p["w"])
    return {"h": xp.tanh(p["w"] @ p["x"][0] + p["b"]), "n": xp.sum(p["w"] * p["w"]) * p["x"][1]}


def point():
    rng = np.random.default_rng(17)
    return {
        "w": rng.normal(size=(3, 2)),
        "b": rng.normal(size=3),
        "x": (rng.normal(size=2), np.asarray(0.7)),
    }


@pytest.fixture(autouse=True)
def _x64():
    with di._core.arrays.jax_enable_x64()(True):  # the references in float64
        yield


@pytest.mark.parametrize("backend", ALL, ids=repr)
def test_first_order_against_jax_pytrees(backend):
    p = point()
    tol = _tol(backend)
    assert_tree_close(di.gradient(backend, loss, p), _np(jax.grad(loss)(p)), tol)
    assert_tree_close(di.jacobian(backend, model, p), _np(jax.jacobian(model)(p)), tol)
    t = jax.tree_util.tree_map(lambda v: np.cos(np.asarray(v) + 1.0), p)
    _, jvp = jax.jvp(model, (p,), (t,))
    assert_tree_close(di.pushforward(backend, model, p, t), _np(jvp), tol)
    ct = {"h": np.array([1.0, -2.0, 0.5]), "n": np.asarray(3.0)}
    (vjp,) = jax.vjp(model, p)[1](ct)
    assert_tree_close(di.pullback(backend, model, p, ct), _np(vjp), tol)
    # a batch of two tangents: a tuple of results
    both = di.pushforward(backend, model, p, (t, p))
    assert isinstance(both, tuple) and len(both) == 2
    assert_tree_close(both[1], _np(jax.jvp(model, (p,), (p,))[1]), tol)


@pytest.mark.parametrize("backend", ALL, ids=repr)
def test_second_order_against_jax_pytrees(backend):
    p = point()
    tol = 1e-5 if isinstance(backend, di.AutoFiniteDiff) else 1e-10
    assert_tree_close(di.hessian(backend, loss, p), _np(jax.hessian(loss)(p)), tol)
    t = jax.tree_util.tree_map(lambda v: np.sin(np.asarray(v)), p)
    hvp = jax.jvp(jax.grad(loss), (p,), (t,))[1]
    assert_tree_close(di.hvp(backend, loss, p, t), _np(hvp), tol)


@pytest.mark.parametrize("backend", ALL, ids=repr)
def test_prepared_twice_at_other_points(backend):
    p = point()
    prep = di.prepare_jacobian(backend, model, p)
    for shift in (0.5, -1.0):
        q = jax.tree_util.tree_map(lambda v: np.asarray(v) + shift, p)
        assert_tree_close(di.jacobian(backend, model, q, prep=prep), _np(jax.jacobian(model)(q)), _tol(backend))
        value, grad = di.value_and_gradient(backend, loss, q, prep=di.prepare_gradient(backend, loss, p))
        assert np.isclose(value, loss(q))
        assert_tree_close(grad, _np(jax.grad(loss)(q)), _tol(backend))


@pytest.mark.parametrize("backend", [di.AutoTorch(), di.AutoTorch(mode="forward"), di.AutoFiniteDiff()], ids=repr)
def test_torch_dicts_against_torch_func(backend):
    p = {k: torch.as_tensor(np.asarray(v, dtype=np.float64)) for k, v in point().items() if k != "x"}
    p["x"] = tuple(torch.as_tensor(v) for v in point()["x"])
    grad = di.gradient(backend, loss, p)
    assert all(isinstance(v, torch.Tensor) for v in jax.tree_util.tree_leaves(grad))
    expected = torch.func.grad(loss)(p)
    assert_tree_close(_torch_np(grad), _torch_np(expected), _tol(backend))
    jac = di.jacobian(backend, model, p)
    assert_tree_close(_torch_np(jac), _torch_np(torch.func.jacrev(model)(p)), _tol(backend))


def _torch_np(tree):
    return jax.tree_util.tree_map(lambda v: v.detach().numpy() if isinstance(v, torch.Tensor) else v, tree)


@pytest.mark.skipif(not installed("autograd"), reason="autograd is not installed")
def test_against_autograd_containers():
    import autograd
    import autograd.numpy as anp

    def f(p):
        return anp.sum(anp.sin(p["a"]) * p["b"][0]) + anp.sum(p["b"][1] ** 3)

    p = {"a": np.array([0.1, 0.4, -0.9]), "b": [np.asarray(1.5), np.array([0.2, -0.3])]}
    expected = autograd.grad(f)(p)
    for backend in (di.AutoAutograd(), di.AutoAutograd(mode="forward"), di.AutoFiniteDiff()):
        got = di.gradient(backend, f, p)
        assert list(got) == ["a", "b"] and isinstance(got["b"], list)
        np.testing.assert_allclose(got["a"], expected["a"], rtol=_tol(backend), atol=_tol(backend))
        np.testing.assert_allclose(got["b"][1], expected["b"][1], rtol=_tol(backend), atol=_tol(backend))
        np.testing.assert_allclose(got["b"][0], expected["b"][0], rtol=_tol(backend), atol=_tol(backend))


@jax.tree_util.register_pytree_node_class
class Params:
    """A class a JAX user registered with JAX's tree registry."""

    def __init__(self, scale, shift):
        self.scale, self.shift = scale, shift

    def tree_flatten(self):
        return (self.scale, self.shift), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)


@pytest.mark.parametrize("backend", [di.AutoJAX(), di.AutoJAX(mode="forward"), di.AutoFiniteDiff()], ids=repr)
def test_a_class_registered_with_jax(backend):
    def f(p):
        return jnp.sum(jnp.sin(p.scale) * p.shift**2)

    p = Params(jnp.array([0.3, -1.2]), jnp.array([0.5, 2.0]))
    got = di.gradient(backend, f, p)
    assert isinstance(got, Params)
    expected = jax.grad(f)(p)
    np.testing.assert_allclose(got.scale, expected.scale, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(got.shift, expected.shift, rtol=1e-6, atol=1e-8)


def test_a_class_registered_with_torch():
    import torch.utils._pytree as pytree

    class Pair:
        def __init__(self, a, b):
            self.a, self.b = a, b

    pytree.register_pytree_node(Pair, lambda p: ([p.a, p.b], None), lambda leaves, ctx: Pair(*leaves))
    try:
        p = Pair(torch.tensor([0.2, 0.4], dtype=torch.float64), torch.tensor(1.5, dtype=torch.float64))
        got = di.gradient(di.AutoTorch(), lambda q: (q.a**2).sum() * q.b, p)
        assert isinstance(got, Pair)
        torch.testing.assert_close(got.a, 2 * p.a * p.b)
        torch.testing.assert_close(got.b, (p.a**2).sum())
    finally:
        pytree.SUPPORTED_NODES.pop(Pair, None)


def test_namedtuples_none_and_python_floats():
    Point = collections.namedtuple("Point", ["u", "v"])

    def f(p):
        return np.sum(p["pt"].u ** 2) * p["pt"].v + p["s"] ** 2

    p = {"pt": Point(np.array([1.0, 2.0]), 3.0), "unused": None, "s": 0.5}
    for backend in (di.AutoFiniteDiff(), di.AutoJAX(), di.AutoTorch()):
        g = di.gradient(backend, _engine_f(backend, f), p)
        assert type(g["pt"]) is Point and g["unused"] is None
        np.testing.assert_allclose(g["pt"].u, 2 * p["pt"].u * 3.0, rtol=1e-6)
        assert isinstance(g["pt"].v, float) and abs(g["pt"].v - 5.0) < 1e-6
        assert isinstance(g["s"], float) and abs(g["s"] - 1.0) < 1e-6


def _engine_f(backend, f):
    if isinstance(backend, di.AutoJAX):
        return lambda p: jnp.sum(p["pt"].u ** 2) * p["pt"].v + p["s"] ** 2
    if isinstance(backend, di.AutoTorch):
        return lambda p: (p["pt"].u ** 2).sum() * p["pt"].v + p["s"] ** 2
    return f


@pytest.mark.parametrize("backend", ALL, ids=repr)
def test_dict_order_and_tuple_x_against_batches(backend):
    def f(p):
        a, b = p
        return a * b[0]

    x = (np.array([1.0, 2.0]), np.array([3.0, 4.0]))
    # a tangent shaped like the tuple x is one tangent; a tuple of such tangents is a batch
    one = di.pushforward(backend, f, x, (np.ones(2), np.zeros(2)))
    np.testing.assert_allclose(one, [3.0, 3.0], rtol=1e-6)
    batch = di.pushforward(backend, f, x, ((np.ones(2), np.zeros(2)), (np.zeros(2), np.ones(2))))
    assert isinstance(batch, tuple) and len(batch) == 2
    np.testing.assert_allclose(batch[1], [1.0, 2.0], rtol=1e-6)  # a * tb[0]
    g = di.gradient(backend, lambda p: _xp_of(p["z"]).sum(p["z"] * p["a"]), {"z": x[0], "a": x[1]})
    assert list(g) == ["z", "a"]  # the user's order of keys, on every backend


@pytest.mark.parametrize(
    "backend", [di.AutoFiniteDiff(), di.AutoTorch(), di.AutoTorch(mode="forward"), di.AutoJAX()], ids=repr
)
def test_the_users_structure_is_never_modified(backend):
    def f(p):
        if isinstance(backend, di.AutoJAX):
            p = {**p, "a": p["a"].at[0].set(0.0)}
        else:
            p["a"][0] = 0.0  # f writes into a leaf of x
        return _xp_of(p["a"]).sum(p["a"] * p["b"])

    p = {"a": np.array([1.0, 2.0]), "b": np.array([3.0, 4.0])}
    g = di.gradient(backend, f, p)
    np.testing.assert_array_equal(p["a"], [1.0, 2.0])
    np.testing.assert_allclose(g["a"], [0.0, 4.0], atol=1e-6)
    np.testing.assert_allclose(g["b"], [0.0, 2.0], atol=1e-6)


def test_a_mismatched_leaf_is_named_by_its_path():
    p = {"layer1": [np.ones(3), np.ones(2)], "out": np.ones(2)}

    def f(q):
        return np.sum(q["layer1"][0]) + np.sum(q["layer1"][1] * q["out"])

    prep = di.prepare_gradient(di.AutoFiniteDiff(), f, p)
    q = {"layer1": [np.ones(4), np.ones(2)], "out": np.ones(2)}
    with pytest.raises(
        PreparationMismatchError,
        match=r"x\['layer1'\]\[0\]: prepared for numpy float64 \(3,\); got numpy float64 \(4,\)",
    ):
        di.gradient(di.AutoFiniteDiff(), f, q, prep=prep)
    # leaves swapped in size (the same total size) are a mismatch too, even with strict=False
    loose = di.prepare_gradient(di.AutoFiniteDiff(), f, p, strict=False)
    with pytest.raises(PreparationMismatchError, match=r"x\['layer1'\]\[0\]"):
        di.gradient(di.AutoFiniteDiff(), f, {"layer1": [np.ones(2), np.ones(3)], "out": np.ones(2)}, prep=loose)
    with pytest.raises(PreparationMismatchError, match=r"x: prepared for a dict with keys \['layer1', 'out'\]"):
        di.gradient(di.AutoFiniteDiff(), f, {"layer1": p["layer1"]}, prep=prep)


def test_errors_name_the_call_and_the_path():
    p = {"a": np.ones(2), "b": np.ones(2, dtype=np.float32)}
    with pytest.raises(
        TypeError, match=r"gradient\(AutoFiniteDiff\(\), f, x\): x\['a'\] has precision float64 and x\['b'\] float32"
    ):
        di.gradient(di.AutoFiniteDiff(), lambda q: np.sum(q["a"]), p)
    with pytest.raises(TypeError, match=r"x\['b'\] has dtype int64"):
        di.gradient(di.AutoFiniteDiff(), lambda q: np.sum(q["a"]), {"a": np.ones(2), "b": np.arange(2)})
    with pytest.raises(TypeError, match=r"x\['a'\] is a numpy array and x\['b'\] a torch one"):
        di.gradient(di.AutoFiniteDiff(), lambda q: 0.0, {"a": np.ones(2), "b": torch.ones(2, dtype=torch.float64)})

    class Opaque:
        pass

    with pytest.raises(TypeError, match=r"x\['o'\] is a Opaque, which is neither an array nor a container"):
        di.gradient(di.AutoFiniteDiff(), lambda q: 0.0, {"a": np.ones(2), "o": Opaque()})
    with pytest.raises(ValueError, match=r"gradient needs f\(x\) to be a scalar array, but f returned a structure"):
        di.gradient(di.AutoFiniteDiff(), model, point())
    with pytest.raises(ValueError, match=r"derivative needs a scalar x .* got a dict"):
        di.derivative(di.AutoFiniteDiff(), lambda q: q["a"], {"a": np.asarray(1.0)})
    with pytest.raises(TypeError, match="out= takes an array result"):
        di.gradient(di.AutoFiniteDiff(), loss, point(), out=np.zeros(3))
    with pytest.raises(TypeError, match="AutoSparse takes one array x"):
        di.jacobian(di.AutoSparse(di.AutoFiniteDiff()), model, point())
    with pytest.raises(
        ValueError,
        match=r"pushforward\(AutoFiniteDiff\(\), f, x, tx\): tx\['b'\]: expected numpy float64 \(3,\), got numpy float64 \(2,\)",
    ):
        t = {**point(), "b": np.ones(2)}
        di.pushforward(di.AutoFiniteDiff(), model, point(), t)
    with pytest.raises(ValueError, match=r"f\(x\)\['n'\] is .* where it was"):
        calls = []  # closure="const": f's own list counts its calls (a duplicated one is fresh each call)

        def changes(p):
            calls.append(1)
            return {"h": p["b"], "n": p["b"][:1] if len(calls) > 1 else p["b"][0]}

        di.jacobian(di.AutoFiniteDiff(closure="const"), changes, point())


@pytest.mark.parametrize("backend", AD, ids=repr)
def test_a_prepared_structured_call_runs_the_adapter_once(backend):
    """The prepared path adds no work: one call of the adapter's flat runner per prepared call."""
    p = point()
    prep = di.prepare_gradient(backend, loss, p)
    inner = prep.data.inner
    calls = []
    plain = inner.plain
    inner.plain = lambda *args: calls.append(1) or plain(*args)
    try:
        for _ in range(3):
            di.gradient(backend, loss, p, prep=prep)
    finally:
        inner.plain = plain
    assert len(calls) == 3
