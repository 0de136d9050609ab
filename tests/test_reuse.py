"""Calls without ``prep=`` reuse preparation (``diffinterface.prep_cache``): the second call with the
same function and argument shapes prepares once, later calls run the prepared path, and every result
stays right when the captured state, the shapes, dtypes, families or contexts change between calls."""

from __future__ import annotations

import collections
import dataclasses
import gc
import importlib.util
import threading
import types
import weakref

import numpy as np
import pytest
from array_api_compat import array_namespace

import diffinterface as di
from conftest import backend_params
from diffinterface import LostDerivativeError
from diffinterface._closures import summaries

BACKENDS = backend_params(finite_diff=True)


def _tol(backend):
    if isinstance(backend, di.AutoFiniteDiff):
        return 1e-6
    own = getattr(backend, "tolerance", None)  # an engine's documented float64 accuracy (AutoMLX's sin)
    return own(np.float64, False) if own is not None else 1e-12


@pytest.fixture(autouse=True)
def fresh_cache():
    di.prep_cache.clear()
    yield
    di.prep_cache.clear()


def sum_sin2(x):
    xp = array_namespace(x)
    return xp.sum(xp.sin(x) ** 2)


def _in_threads(work, count):
    """``work(k)`` for k in range(count), each in a thread of its own, all at once: the errors raised."""
    errors: list[BaseException] = []

    def run(k):
        try:
            work(k)
        except BaseException as error:  # noqa: BLE001 - returned to the test
            errors.append(error)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(count)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return errors


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_third_call_prepares_and_later_calls_reuse_it(backend):
    x = np.linspace(0.0, 1.0, 5)
    for k in range(4):
        g = di.gradient(backend, sum_sin2, x + k)
        np.testing.assert_allclose(g, np.sin(2 * (x + k)), atol=_tol(backend))
    # first and second calls: counted only (no compilation), third: prepared and kept, fourth: reused
    assert (di.prep_cache.misses, di.prep_cache.builds, di.prep_cache.hits) == (3, 1, 1)
    assert len(di.prep_cache) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_fresh_lambda_each_call_leaves_nothing_but_its_codes_preparation(backend):
    """A new lambda at every call (over a number of its own, its default ``k``): the first two run
    unprepared, the third prepares once for the code (its copy takes each lambda's ``k`` at the call),
    and nothing of any lambda stays registered."""
    x = np.linspace(0.0, 1.0, 4)
    for k in range(5):
        g = di.gradient(backend, lambda z, k=k: k * sum_sin2(z), x)
        np.testing.assert_allclose(g, k * np.sin(2 * x), atol=_tol(backend))
    gc.collect()
    assert (di.prep_cache.builds, di.prep_cache.shared_hits) == (1, 3)
    assert di.prep_cache.functions == 0  # each lambda's entry died with it
    assert len(di.prep_cache) == 1  # its code's


@pytest.mark.parametrize("backend", BACKENDS)
def test_changing_captured_state_between_unprepared_calls_is_seen(backend):
    scale = np.array([1.0])
    buffer = np.zeros(3)

    def f(x):
        xp = array_namespace(x)
        return SCALE * scale[0] * xp.sum(xp.asarray(buffer) + x**2)

    global SCALE
    x = np.array([1.0, 2.0, 3.0])
    for s, c in [(1.0, 1.0), (2.0, 3.0), (5.0, -1.0), (0.5, 4.0), (3.0, 0.25)]:
        SCALE = s
        scale[0] = c  # a captured array written between calls
        np.testing.assert_allclose(di.gradient(backend, f, x), s * c * 2 * x, atol=_tol(backend) * 100)
    assert di.prep_cache.hits >= 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_captured_state_that_changes_shape_between_calls_is_prepared_again_or_refused(backend):
    """f(x)'s shape follows a captured matrix. Calls without prep= are right before and after it
    changes shape (the kept prep is dropped and the call prepared again); a prep given with prep= is
    right (an engine that traces again) or refused with the shapes and the fix, never wrong (autograd's
    reverse Jacobian broadcast the old basis over the new f(x) without an error before)."""
    x = np.array([0.5, -1.0, 2.0])
    t = np.array([1.0, 0.5, -2.0])
    state = {"A": np.arange(6.0).reshape(2, 3) / 3}

    def f(z):
        xp = array_namespace(z)
        return xp.sin(xp.asarray(state["A"]) @ z)

    def jac(A):
        return np.cos(A @ x)[..., None] * A

    tol = _tol(backend) * 10
    prep = di.prepare_jacobian(backend, f, x)
    push = di.prepare_pushforward(backend, f, x, t)
    for A in (state["A"], np.arange(12.0).reshape(2, 2, 3) / 7 + 0.1, np.ones((1, 3)), state["A"]):
        state["A"] = A
        for _ in range(4):  # one-shot calls, the kept prep, then its reuse
            np.testing.assert_allclose(np.asarray(di.jacobian(backend, f, x)), jac(A), atol=tol)
            np.testing.assert_allclose(np.asarray(di.pushforward(backend, f, x, t)), jac(A) @ t, atol=tol)
        for p, call, expected in (
            (prep, lambda p: di.jacobian(backend, f, x, prep=p), jac(A)),
            (push, lambda p: di.pushforward(backend, f, x, t, prep=p), jac(A) @ t),
        ):
            try:
                got = np.asarray(call(p))
            except di.PreparationMismatchError as error:
                assert A.shape != (2, 3)
                assert "f(x) has shape" in str(error) and "changed shape since preparation" in str(error)
            else:
                np.testing.assert_allclose(got, expected, atol=tol)


@pytest.mark.parametrize("backend", BACKENDS)
def test_captured_state_that_changes_shape_under_has_aux_is_prepared_again(backend):
    """The same as above with ``has_aux=True``: a kept prep whose f(x) changed shape is dropped and the
    call prepared again (it raised OutputShapeChanged before, whose message promised a new preparation)."""
    x = np.array([0.5, -1.0, 2.0])
    state = {"A": np.arange(6.0).reshape(2, 3) / 3}

    def f(z):
        xp = array_namespace(z)
        y = xp.sin(xp.asarray(state["A"]) @ z)
        return y, xp.sum(y)

    tol = _tol(backend) * 10
    for A in (state["A"], np.arange(12.0).reshape(4, 3) / 7 + 0.1, np.ones((1, 3)), state["A"]):
        state["A"] = A
        for _ in range(3):  # a one-shot call, the kept prep, then its reuse
            (y, aux), jac = di.value_and_jacobian(backend, f, x, has_aux=True)
            np.testing.assert_allclose(np.asarray(jac), np.cos(A @ x)[:, None] * A, atol=tol)
            np.testing.assert_allclose(np.asarray(y), np.sin(A @ x), atol=tol)
            np.testing.assert_allclose(float(np.asarray(aux)), np.sin(A @ x).sum(), atol=tol)
            jac, aux = di.jacobian(backend, f, x, has_aux=True)
            np.testing.assert_allclose(np.asarray(jac), np.cos(A @ x)[:, None] * A, atol=tol)


SCALE = 1.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_shapes_dtypes_and_contexts_changed_between_calls_get_their_own_preparation(backend):
    def f(x, c):
        xp = array_namespace(x)
        return c * xp.sum(x**3)

    for _ in range(3):
        for n in (2, 5):
            for dtype in (np.float64, np.float32):
                for c in (2.0, 3.0):
                    x = np.linspace(0.5, 1.0, n).astype(dtype)
                    g = di.gradient(backend, f, x, di.Constant(c))
                    assert g.shape == (n,) and g.dtype == dtype
                    tol = 2e-2 if dtype == np.float32 and isinstance(backend, di.AutoFiniteDiff) else 1e-4
                    np.testing.assert_allclose(g, c * 3 * x.astype(np.float64) ** 2, rtol=tol)
    assert di.prep_cache.builds == 4  # one per shape and dtype; the context's value is not a key
    # a scalar x and a tangent operator with a batch of tangents: keys of their own
    for _ in range(3):
        d = di.derivative(backend, np.sin if isinstance(backend, di.AutoFiniteDiff) else _sin, 0.3)
        np.testing.assert_allclose(d, np.cos(0.3), rtol=1e-6)
        jvp = di.pushforward(backend, _square, np.array([1.0, 2.0]), (np.array([1.0, 0.0]), np.array([0.0, 1.0])))
        np.testing.assert_allclose(np.stack(jvp), [[2.0, 0.0], [0.0, 4.0]], atol=1e-6)


def _sin(x):
    return array_namespace(x).sin(x)


def _square(x):
    return x**2


@pytest.mark.skipif(not importlib.util.find_spec("torch"), reason="pip install torch==2.13.0")
def test_another_family_at_the_same_shape_is_another_key():
    import torch

    for _ in range(3):
        g_numpy = di.gradient(di.AutoTorch(), sum_sin2, np.array([0.1, 0.2]))
        g_torch = di.gradient(di.AutoTorch(), sum_sin2, torch.tensor([0.1, 0.2], dtype=torch.float64))
        assert type(g_numpy) is np.ndarray and isinstance(g_torch, torch.Tensor)
        np.testing.assert_allclose(g_torch.numpy(), g_numpy, atol=1e-15)
    assert di.prep_cache.builds == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_threads_calling_unprepared_with_the_same_f_agree(backend):
    xs = [np.linspace(0.0, 1.0, 6) + k for k in range(8)]
    results: dict[int, np.ndarray] = {}

    def work(k):
        for _ in range(5):
            results[k] = di.gradient(backend, sum_sin2, xs[k])

    assert not _in_threads(work, 8)
    for k in range(8):
        np.testing.assert_allclose(results[k], np.sin(2 * xs[k]), atol=_tol(backend))
    assert di.prep_cache.hits > 0


def test_the_switches_turn_reuse_off_per_backend_and_process_wide():
    x = np.array([0.1, 0.2])
    for _ in range(3):
        np.testing.assert_allclose(
            di.gradient(di.AutoFiniteDiff(reuse_prep=False), sum_sin2, x), np.sin(2 * x), atol=1e-6
        )
    assert (di.prep_cache.misses, di.prep_cache.builds) == (0, 0)
    assert repr(di.AutoFiniteDiff(reuse_prep=False)) == "AutoFiniteDiff(reuse_prep=False)"
    di.prep_cache.enabled = False
    try:
        for _ in range(3):
            di.gradient(di.AutoFiniteDiff(), sum_sin2, x)
        assert (di.prep_cache.misses, di.prep_cache.builds) == (0, 0)
    finally:
        di.prep_cache.enabled = True
    with pytest.raises(ValueError, match=r"AutoJAX\(reuse_prep='no'\): reuse_prep must be one of True, False"):
        di.AutoJAX(reuse_prep="no")


def test_a_collected_function_leaves_the_cache():
    def make():
        return lambda z: sum_sin2(z) * 2.0

    f = make()
    x = np.array([0.3])
    for _ in range(3):
        di.gradient(di.AutoFiniteDiff(), f, x)
    assert len(di.prep_cache) == 1
    del f
    gc.collect()
    assert len(di.prep_cache) == 0


def test_the_cache_is_bounded():
    cache = di.PrepCache(max_functions=3, max_keys=2)
    functions = [lambda z, k=k: z * k for k in range(5)]
    for f in functions:
        for key in ("a", "b", "c"):
            cache.seen(f, key)
    assert cache.functions == 3
    assert [list(f.__dict__["__diffinterface_preps__"].keys) for f in functions[2:]] == [["b", "c"]] * 3
    assert all("__diffinterface_preps__" not in f.__dict__ for f in functions[:2])  # evicted


def test_a_first_call_registers_nothing_and_the_second_holds_the_first_key():
    """A first call leaves its key on the function alone: a new lambda at every call of a loop puts
    nothing in the cache's own registry (nothing to evict, nothing to walk at clear()); the second
    call registers the function with both calls' keys, and the third with one key prepares."""
    x, y = np.array([0.1, 0.2]), np.array([0.1, 0.2, 0.3])
    lambdas = [lambda z, k=k: k * sum_sin2(z) for k in range(3)]  # alive: only registration is counted
    for k, g in enumerate(lambdas):
        np.testing.assert_allclose(di.gradient(di.AutoFiniteDiff(), g, x), k * np.sin(2 * x), atol=1e-6)
    # the third, a new function of the first two's code over other state (its default k), is served by
    # the prep its code shares over state (made for its copy), which is not its own registration either
    assert (di.prep_cache.functions, di.prep_cache.misses, di.prep_cache.builds) == (0, 3, 1)
    f = lambdas[1]
    di.gradient(di.AutoFiniteDiff(), f, y)  # another key: two keys held, one call each
    assert di.prep_cache.functions == 1
    assert [e.calls for e in f.__dict__["__diffinterface_preps__"].keys.values()] == [1, 1]
    di.gradient(di.AutoFiniteDiff(), f, x)  # the first key's second call
    assert di.prep_cache.builds == 1
    np.testing.assert_allclose(di.gradient(di.AutoFiniteDiff(), f, x), np.sin(2 * x), atol=1e-6)
    assert di.prep_cache.builds == 2


def test_clear_and_a_wrapper_forget_a_first_call():
    """``clear()`` forgets first calls too (their marks are on the functions, out of its reach: they
    carry the cache's token), and a ``functools.wraps`` wrapper, which copies ``f.__dict__``, does not
    count ``f``'s first call as its own."""
    import functools

    x = np.array([0.3, 0.4])
    f = lambda z: 2.0 * sum_sin2(z)  # noqa: E731
    di.gradient(di.AutoFiniteDiff(), f, x)
    di.prep_cache.clear()
    for _ in range(2):
        np.testing.assert_allclose(di.gradient(di.AutoFiniteDiff(), f, x), 2 * np.sin(2 * x), atol=1e-6)
    assert (di.prep_cache.misses, di.prep_cache.builds) == (2, 0)  # two first-and-second calls, no third

    g = lambda z: 4.0 * sum_sin2(z)  # noqa: E731
    di.gradient(di.AutoFiniteDiff(), g, x)  # g's first call: its mark

    @functools.wraps(g)
    def w(z):
        return 3.0 * sum_sin2(z)

    assert type(w.__dict__["__diffinterface_preps__"]).__name__ == "_First"  # g's mark, copied
    for _ in range(2):
        np.testing.assert_allclose(di.gradient(di.AutoFiniteDiff(), w, x), 3 * np.sin(2 * x), atol=1e-6)
    assert (di.prep_cache.misses, di.prep_cache.builds) == (5, 0)
    di.gradient(di.AutoFiniteDiff(), w, x)
    assert di.prep_cache.builds == 1


def test_a_prepared_call_with_prep_still_checks_strictly_and_unprepared_calls_never_raise_a_mismatch():
    x = np.array([1.0, 2.0])
    for n in (2, 3, 2, 3, 4, 2):  # shapes alternate: each has its key, none gets another's preparation
        g = di.gradient(di.AutoFiniteDiff(), sum_sin2, np.linspace(0.1, 0.5, n))
        np.testing.assert_allclose(g, np.sin(2 * np.linspace(0.1, 0.5, n)), atol=1e-6)
    prep = di.prepare_gradient(di.AutoFiniteDiff(), sum_sin2, x)
    with pytest.raises(di.PreparationMismatchError, match="x: prepared for numpy float64 \\(2,\\)"):
        di.gradient(di.AutoFiniteDiff(), sum_sin2, np.zeros(3), prep=prep)


def test_a_function_sent_to_another_process_carries_no_preparation():
    cloudpickle = pytest.importorskip("cloudpickle")
    scale = 3.0
    f = lambda z: scale * sum_sin2(z)  # noqa: E731 - a closure, as users send to process pools
    x = np.array([0.2, 0.4])
    for _ in range(3):
        di.gradient(di.AutoFiniteDiff(), f, x)
    assert len(di.prep_cache) == 1
    g = cloudpickle.loads(cloudpickle.dumps(f))
    hits, misses = di.prep_cache.hits, di.prep_cache.misses
    np.testing.assert_allclose(di.gradient(di.AutoFiniteDiff(), g, x), 3.0 * np.sin(2 * x), atol=1e-6)
    assert (di.prep_cache.hits, di.prep_cache.misses) == (hits, misses + 1)  # g came with nothing kept


def test_the_latest_hit_is_tried_first_and_a_call_it_does_not_serve_takes_the_keyed_path():
    """A loop calling f the same way reuses the latest hit's prep without building a key; alternating
    shapes, a new but equal config, holomorphic and a tangent operator each get their own right prep."""
    backend = di.AutoFiniteDiff()
    xs = {n: np.linspace(0.1, 0.5, n) for n in (2, 3)}
    for _ in range(3):  # prepare both shapes
        for n in (2, 3):
            di.gradient(backend, sum_sin2, xs[n])
    assert di.prep_cache.builds == 2
    hits = di.prep_cache.hits
    for n in (2, 2, 3, 3, 2):  # the latest hit, then the other shape through its key: both counted as hits
        np.testing.assert_allclose(di.gradient(backend, sum_sin2, xs[n]), np.sin(2 * xs[n]), atol=1e-6)
    assert di.prep_cache.hits == hits + 5 and di.prep_cache.builds == 2
    held = sum_sin2.__dict__["__diffinterface_preps__"]
    assert held.last.serves(held.last.operator, backend, sum_sin2, (xs[2],), False)
    assert not held.last.serves(held.last.operator, backend, sum_sin2, (xs[3],), False)  # another shape
    assert not held.last.serves(held.last.operator, backend, sum_sin2, (xs[2].astype(np.float32),), False)
    assert not held.last.serves(held.last.operator, backend, sum_sin2, (xs[2],), True)  # holomorphic
    # an equal config built anew (di.gradient(di.AutoFiniteDiff(), ...) in a loop): found by key, same prep
    for _ in range(2):
        np.testing.assert_allclose(di.gradient(di.AutoFiniteDiff(), sum_sin2, xs[2]), np.sin(2 * xs[2]), atol=1e-6)
    assert di.prep_cache.builds == 2
    # float32 at the same shape: not served by the float64 prep
    for _ in range(3):
        g = di.gradient(backend, sum_sin2, xs[2].astype(np.float32))
        assert g.dtype == np.float32
    assert di.prep_cache.builds == 3
    di.prep_cache.clear()
    assert held.last is None


def test_a_loops_call_is_served_by_the_latest_hit_s_fast_key_and_nothing_else():
    """PrepCache.serving: a call with x alone or one tangent of x's own type, found by the latest hit's
    fast_key (an equal config built anew too); any other call takes the keyed path, and a cache
    switched off serves nothing."""
    backend = di.AutoFiniteDiff()
    x, t = np.array([0.1, 0.2, 0.3]), np.array([1.0, -1.0, 0.5])
    for _ in range(3):
        di.gradient(backend, sum_sin2, x)
        di.pushforward(backend, _square, x, t)
    gradient = sum_sin2.__dict__["__diffinterface_preps__"].last
    push = _square.__dict__["__diffinterface_preps__"].last
    serving = di.prep_cache.serving
    hits = di.prep_cache.hits
    assert serving(gradient.operator, di.AutoFiniteDiff(), sum_sin2, x, None, False) is gradient
    assert serving(push.operator, di.AutoFiniteDiff(), _square, x, t, False) is push
    assert di.prep_cache.hits == hits + 2
    for call in (
        (gradient.operator, backend, sum_sin2, x[:2], None, False),  # another shape
        (gradient.operator, backend, sum_sin2, x.astype(np.float32), None, False),  # another dtype
        (gradient.operator, backend, sum_sin2, x, None, True),  # holomorphic
        (gradient.operator, di.AutoFiniteDiff(method="forward"), sum_sin2, x, None, False),  # another config
        (push.operator, backend, sum_sin2, x, t, False),  # another operator than the latest hit's
        (push.operator, backend, _square, x, (t, t), False),  # a batch of tangents
        (push.operator, backend, _square, x, t[:2], False),  # a tangent of another shape
        (push.operator, backend, _square, x, t.astype(np.float32), False),  # a tangent of another dtype
        (push.operator, backend, lambda z: _square(z), x, t, False),  # another function
    ):
        assert serving(*call) is None
    assert di.prep_cache.hits == hits + 2
    # the calls themselves: the latest hit serves, and every other call still gets its right answer
    np.testing.assert_allclose(di.gradient(di.AutoFiniteDiff(), sum_sin2, x), np.sin(2 * x), atol=1e-6)
    np.testing.assert_allclose(di.pushforward(backend, _square, x, t), 2 * x * t, atol=1e-6)
    np.testing.assert_allclose(di.pushforward(backend, _square, x, (t, 2 * t))[1], 4 * x * t, atol=1e-6)
    np.testing.assert_allclose(di.pushforward(backend, _square, x, t.astype(np.float32)), 2 * x * t, atol=1e-6)
    di.prep_cache.enabled = False
    try:
        assert serving(gradient.operator, backend, sum_sin2, x, None, False) is None
        builds = di.prep_cache.builds
        np.testing.assert_allclose(di.gradient(backend, sum_sin2, x), np.sin(2 * x), atol=1e-6)
        assert di.prep_cache.builds == builds
    finally:
        di.prep_cache.enabled = True


def test_configs_keep_their_hash_and_repr_and_pickle_without_them():
    import pickle

    for make in (di.AutoFiniteDiff, lambda: di.AutoFiniteDiff(method="forward"), di.AutoJAX, di.AutoTorch):
        a, b = make(), make()
        assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
        assert "_hash" in a.__dict__  # kept after the first hash
        assert repr(a) == repr(b) and a.__dict__["_repr"] == repr(a)  # kept after the first repr
        c = pickle.loads(pickle.dumps(a))
        assert "_hash" not in c.__dict__ and "_repr" not in c.__dict__ and c == a and hash(c) == hash(a)
        assert repr(c) == repr(a)
    second = di.SecondOrder(di.AutoFiniteDiff(), di.AutoFiniteDiff(method="forward"))
    assert hash(second) == hash(di.SecondOrder(di.AutoFiniteDiff(), di.AutoFiniteDiff(method="forward")))
    assert di.AutoFiniteDiff() != di.AutoFiniteDiff(method="forward")


def _counting(calls):
    def f(x):
        calls.n += 1
        return sum_sin2(x)

    return f


@pytest.mark.parametrize("engine", ["torch", "autograd"])
def test_a_one_shot_call_evaluates_f_once(engine):
    """A call that reuses nothing on an eager engine records ``f`` in its preparation's
    ``output_info`` and hands the recording to the runner (``Info.take_value``): one evaluation of f
    for a gradient, its value form, a pullback, and torch's hvp and Hessian, where it took two. A
    pushforward along one tangent gets the tangent there too (``Target.tangents``) and computes
    ``f(x)`` and its tangent by forward mode: one evaluation for it and its value form, where it took
    two. torch's Jacobian is recorded too, and one in reverse mode (a wide one) takes the recording.
    The results agree with the closed forms at two points; a batch of tangents and
    ``mode="reverse"`` keep their own evaluations and the same results, and torch's inference mode
    still gives the gradient."""
    pytest.importorskip(engine)
    backend = di.AutoTorch() if engine == "torch" else di.AutoAutograd()
    forward = di.AutoTorch(mode="forward") if engine == "torch" else di.AutoAutograd(mode="forward")
    reverse = di.AutoTorch(mode="reverse") if engine == "torch" else di.AutoAutograd(mode="reverse")
    x, t = np.linspace(0.1, 1.0, 5), np.linspace(-1.0, 1.0, 5)
    calls = types.SimpleNamespace(n=0)  # not state: f's captured lists would be duplicated, this is not

    def vec(z):
        calls.n += 1
        return array_namespace(z).sin(z) * z

    def wide(z):
        calls.n += 1
        return z[:2] * z[1:3]

    def once(run, expected, evaluations=1):
        calls.n = 0
        np.testing.assert_allclose(np.asarray(run()), expected, rtol=1e-12, atol=1e-15)
        assert calls.n == evaluations or (evaluations is None and calls.n >= 1)

    di.prep_cache.enabled = False  # every call a one-shot call
    try:
        for k in range(2):
            z = x + k
            once(lambda z=z: di.gradient(backend, _counting(calls), z), np.sin(2 * z))
            once(lambda z=z: di.value_and_gradient(backend, _counting(calls), z)[0], np.sum(np.sin(z) ** 2))
            once(lambda z=z: di.pullback(backend, vec, z, (t,))[0], t * (np.cos(z) * z + np.sin(z)))
            if engine == "torch":  # autograd's hvp is forward over reverse: a trace of its own
                once(lambda z=z: di.hvp(backend, _counting(calls), z, (t,))[0], 2 * np.cos(2 * z) * t)
                once(lambda z=z: di.hessian(backend, _counting(calls), z), np.diag(2 * np.cos(2 * z)))
                # a wide Jacobian (2 outputs of 5 inputs) runs in reverse mode: the recording is taken
                jw = np.zeros((2, 5))
                jw[0, :2], jw[1, 1:3] = (z[1], z[0]), (z[2], z[1])
                once(lambda z=z: di.jacobian(backend, wide, z), jw)
                once(lambda z=z: di.value_and_jacobian(backend, wide, z)[1], jw)
                once(lambda z=z: di.value_and_jacobian(backend, wide, z)[0], z[:2] * z[1:3])
            jt = t * (np.cos(z) * z + np.sin(z))
            once(lambda z=z: di.pushforward(backend, vec, z, t), jt)
            once(lambda z=z: di.value_and_pushforward(backend, vec, z, t)[1], jt)
            once(lambda z=z: di.pushforward(forward, vec, z, (t,))[0], jt)
            once(lambda z=z: di.value_and_pushforward(backend, vec, z, t)[0], np.sin(z) * z)
            once(lambda z=z: di.pushforward(backend, vec, z, (t, 2 * t))[1], 2 * jt, None)
            once(lambda z=z: di.pushforward(reverse, vec, z, t), jt, None)
        if engine == "torch":
            import torch

            with torch.inference_mode():
                g = di.gradient(backend, sum_sin2, torch.asarray(x))
            np.testing.assert_allclose(g.numpy(), np.sin(2 * x), rtol=1e-12)
    finally:
        di.prep_cache.enabled = True


def _counted_watches(monkeypatch):
    """A counter of torch's lost-derivative watches (``watches.n``: each ``_Watch`` made, one per
    watched run of f), for the test's duration."""
    from diffinterface.backends import torch as torch_backend

    watches = types.SimpleNamespace(n=0)

    class Counted(torch_backend._Watch):
        def __init__(self, *key):
            super().__init__(*key)
            watches.n += 1

    monkeypatch.setattr(torch_backend, "_Watch", Counted)
    return watches


def test_a_one_shot_torch_call_watches_f_once(monkeypatch):
    """torch's runners go on with the ``_Function`` that a one-shot ``output_info`` ran ``f`` with:
    where that run read no tensor's value, ``f`` is not watched again (a Jacobian in forward mode
    after its recording: one watched run, where there were two). An ``f`` that reads a value stays
    watched, and a value read that reaches f(x) is still the call's error."""
    torch = pytest.importorskip("torch")
    watches = _counted_watches(monkeypatch)
    x = torch.linspace(0.1, 1.0, 3, dtype=torch.float64)

    def tall(z):  # 6 outputs of 3 inputs: forward mode
        return torch.cat([torch.sin(z), z**2])

    def branching(z):  # reads a value: watched at every run
        return torch.cat([torch.sin(z), z**2]) if z.max() > 0 else -z.repeat(2)

    def lost(z):
        return torch.cat([torch.sin(z), z * z[0].item()])

    want = torch.cat([torch.diag(torch.cos(x)), torch.diag(2 * x)])
    di.prep_cache.enabled = False
    try:
        for f, watched in ((tall, 1), (branching, 2)):
            watches.n = 0
            torch.testing.assert_close(di.jacobian(di.AutoTorch(), f, x), want, rtol=1e-12, atol=0)
            assert watches.n == watched, f.__name__
        with pytest.raises(LostDerivativeError, match=r"jacobian\(AutoTorch\(\), f, x\).*\.item\(\)"):
            di.jacobian(di.AutoTorch(), lost, x)
    finally:
        di.prep_cache.enabled = True


def test_a_new_function_of_a_code_that_read_no_value_is_not_watched_at_its_first_call(monkeypatch):
    """torch's lost-derivative watch learns for a code, not only for a function (``Target.learned``):
    a lambda written anew at each call, around the same helper, runs unwatched at its first call once
    one of them ran watched and read no value at an x of that shape, dtype and device, in either
    direction. Another shape or dtype is watched again, and the same code around another helper (its
    closure walk's summary no longer holds) is a new program: its ``.item()`` is the call's error."""
    torch = pytest.importorskip("torch")
    watches = _counted_watches(monkeypatch)

    def clean(z):
        return torch.sin(z) ** 2

    def reads(z):  # the value of z[0] reaches f(x): its derivative is lost
        return torch.sin(z) ** 2 * z[0].item()

    def around(helper):
        return lambda z: helper(z).sum()

    backend = di.AutoTorch()
    x = torch.linspace(0.1, 1.0, 3, dtype=torch.float64)
    t = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    di.prep_cache.enabled = False
    try:
        for watched in (1, 0, 0):
            watches.n = 0
            torch.testing.assert_close(di.gradient(backend, around(clean), x), torch.sin(2 * x), rtol=1e-12, atol=0)
            assert watches.n == watched
        watches.n = 0  # forward mode's runs: the same program
        pushed = di.pushforward(backend, around(clean), x, t)
        torch.testing.assert_close(pushed, torch.sin(2 * x) @ t, rtol=1e-12, atol=0)
        assert watches.n == 0
        for z in (torch.linspace(0.1, 1.0, 4, dtype=torch.float64), x.float()):
            watches.n = 0
            torch.testing.assert_close(di.gradient(backend, around(clean), z), torch.sin(2 * z))
            assert watches.n == 1, z
        with pytest.raises(LostDerivativeError, match=r"gradient\(AutoTorch\(\), f, x\).*\.item\(\)"):
            di.gradient(backend, around(reads), x)
    finally:
        di.prep_cache.enabled = True


class _Settings:
    pass


_SWITCH = _Settings()  # a user's object at module level: its attribute is flipped
_SWITCH.exact = False


class _Switch:  # a user's class: its attribute is flipped
    exact = False


def _loss_on_object(z):
    return (z[0].item() * z).sum() if _SWITCH.exact else (z * z).sum()


def _loss_on_class(z):
    return (z[0].item() * z).sum() if _Switch.exact else (z * z).sum()


@pytest.mark.parametrize("where", ["object", "class"])
def test_a_value_read_behind_a_flipped_user_switch_is_caught_in_a_new_function_of_a_seen_code(monkeypatch, where):
    """The watch's verdict is shared only where nothing the code reaches can change under the same
    objects (``Summary.closed``): a user's class or object whose attribute a program flips between
    calls (``Config.exact = True``) keeps new functions of the code watched, so the ``.item()`` the
    flip turns on is the call's error, not the gradient of ``x[0].item() * x`` taken as constant
    (``[2, 2]`` at ``[2, 3]``, where the truth is ``[7, 3]``)."""
    torch = pytest.importorskip("torch")
    watches = _counted_watches(monkeypatch)
    loss = _loss_on_object if where == "object" else _loss_on_class
    holder = _SWITCH if where == "object" else _Switch
    monkeypatch.setattr(holder, "exact", False)
    x = torch.tensor([2.0, 3.0], dtype=torch.float64)

    def call():
        return di.gradient(di.AutoTorch(), lambda z: loss(z), x)

    di.prep_cache.enabled = False
    try:
        for _ in range(2):
            watches.n = 0
            torch.testing.assert_close(call(), 2 * x, rtol=1e-12, atol=0)
            assert watches.n == 1  # watched at every new function: nothing shared
        monkeypatch.setattr(holder, "exact", True)
        with pytest.raises(LostDerivativeError, match=r"\.item\(\)"):
            call()
    finally:
        di.prep_cache.enabled = True


def test_a_one_shot_pushforward_of_an_f_writing_into_its_input_leaves_x_unchanged():
    """torch's one-shot pushforward runs f on the preparation's own copy of x: f's write into its input
    (z[0] = 5) gives the derivative of the written function (J t = 2 z t with 0 in the overwritten
    coordinate), and the user's x, numpy or tensor, is unchanged."""
    torch = pytest.importorskip("torch")

    def f(z):
        z[0] = 5.0
        return z**2

    di.prep_cache.enabled = False
    try:
        for x in (np.array([1.0, 2.0, -3.0]), torch.tensor([1.0, 2.0, -3.0], dtype=torch.float64)):
            t = np.ones(3) if isinstance(x, np.ndarray) else torch.ones(3, dtype=torch.float64)
            y, pf = di.value_and_pushforward(di.AutoTorch(), f, x, t)
            np.testing.assert_array_equal(np.asarray(pf), [0.0, 4.0, -6.0])
            np.testing.assert_array_equal(np.asarray(y), [25.0, 4.0, 9.0])
            np.testing.assert_array_equal(np.asarray(x), [1.0, 2.0, -3.0])
    finally:
        di.prep_cache.enabled = True


_ONE_SHOT_ENGINES = {
    "torch": ("torch", di.AutoTorch),
    "autograd": ("autograd", di.AutoAutograd),
    "finitediff": (None, di.AutoFiniteDiff),
    "jax": ("jax", di.AutoJAX),
    "tensorflow": ("tensorflow", di.AutoTensorFlow),
    "mlx": ("mlx.core", di.AutoMLX),
}


@pytest.mark.parametrize("engine", sorted(_ONE_SHOT_ENGINES))
def test_a_one_shot_call_leaves_no_reference_cycle(engine):
    """A call without ``prep=`` builds a preparation and drops it: it is freed as soon as the call
    returns, by reference counting, with nothing for the garbage collector (a cycle through the
    direction fallback's runners, or through JAX's and MLX's compiled forms and their runners, held
    each one-shot preparation, the graph of its function and its arrays until the collector's next
    pass). Checked with the collector off: after the calls it finds nothing unreachable. (PyTensor is
    not here: its own graphs are cyclic, a variable and the node that owns it.)"""
    module, config = _ONE_SHOT_ENGINES[engine]
    if module is not None:
        pytest.importorskip(module)
    backend = config()
    x, t, a = np.linspace(0.1, 1.0, 5), np.linspace(-1.0, 1.0, 5), np.linspace(1.0, 2.0, 5)
    di.prep_cache.enabled = False
    try:
        calls = [
            lambda: di.gradient(backend, sum_sin2, x),
            lambda: di.gradient(backend, lambda z: array_namespace(z).sum(a * z**2), x),  # captured state
            lambda: di.pushforward(backend, lambda z: array_namespace(z).sin(z) * z, x, t),
            lambda: di.pullback(backend, lambda z: array_namespace(z).sin(z) * a, x, t),
        ]
        # the closure walk's summaries hold the objects a stateless function reached (a library's callable
        # object: another test's DifferentiateWith, whose target and plan are cyclic), and a summary goes
        # when its function dies, by a weakref callback that can run inside a collection: what it held
        # then becomes garbage for the next collection, which must not be the measured one. So: the
        # summaries cleared, and the collector run until it finds nothing
        summaries.clear()
        for call in calls:
            call()  # imports and caches of the first call
        while gc.collect():
            pass
        gc.disable()
        try:
            for call in calls:
                call()
            gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds is kept in gc.garbage, to be named
            try:
                found = gc.collect()
                kinds = collections.Counter(type(o).__qualname__ for o in gc.garbage).most_common(10)
                named = sorted({getattr(o, "__qualname__", "") for o in gc.garbage if callable(o)} - {""})[:10]
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
            assert found == 0, (kinds, named)
        finally:
            gc.enable()
    finally:
        di.prep_cache.enabled = True


# -- new functions of a code seen before share its preparation ---------------------------------


def _cube_sum(x):
    xp = array_namespace(x)
    return xp.sum(x**3)


_HELPER = sum_sin2  # rebound by a test: a global that a lambda's code reads


def _d_sum_sin2(x):
    return np.sin(2 * x)


def _d_cube_sum(x):
    return 3 * x**2


@pytest.mark.parametrize("backend", BACKENDS)
def test_new_functions_of_one_code_share_its_preparation(backend):
    """A lambda written anew at each iteration of a loop: the first new functions of its code run
    one-shot, one prepares (for a private copy of itself), and every later new function takes that
    prep; each derivative is right, for the gradient, a pushforward and a value form."""
    x, t = np.linspace(0.1, 0.9, 5), np.linspace(1.0, 2.0, 5)
    for k in range(6):
        z = x + 0.1 * k
        g = di.gradient(backend, lambda v: 2.0 * sum_sin2(v), z)
        np.testing.assert_allclose(g, 2.0 * np.sin(2 * z), atol=_tol(backend))
        (jt,) = di.pushforward(backend, lambda v: array_namespace(v).sin(v) * 3.0, z, (t,))
        np.testing.assert_allclose(jt, 3.0 * np.cos(z) * t, atol=_tol(backend))
        y, g2 = di.value_and_gradient(backend, lambda v: sum_sin2(v) - 1.0, z)
        np.testing.assert_allclose(y, np.sum(np.sin(z) ** 2) - 1.0, atol=_tol(backend))
        np.testing.assert_allclose(g2, np.sin(2 * z), atol=_tol(backend))
    assert di.prep_cache.builds == 3  # one per code (and operator), however many lambdas
    assert di.prep_cache.shared_hits >= 3 * 2
    assert len(di.prep_cache) == 3 and di.prep_cache.functions == 0  # held by the cache, not by a lambda
    di.prep_cache.clear()
    di.gradient(backend, lambda v: 2.0 * sum_sin2(v), x)
    assert di.prep_cache.shared_hits == 0 and len(di.prep_cache) == 0  # clear() forgot them


def _share(backend, make, x, expected, calls=5):
    """``make()``'s function called once each, ``calls`` times: every gradient checked."""
    for _ in range(calls):
        np.testing.assert_allclose(di.gradient(backend, make(), x), expected(x), atol=_tol(backend))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_shared_preparation_never_serves_a_function_whose_slots_changed(backend):
    """What a code's new functions share holds only while their slots hold the very objects the
    shared prep's function held: a rebound global, a closure over another helper, a cell of the
    function the prep was made for rebound afterwards, and the same code over another module's
    globals each get their own derivative (never the shared one)."""
    global _HELPER
    x = np.linspace(0.2, 0.8, 4)
    try:
        _share(backend, lambda: lambda v: _HELPER(v), x, _d_sum_sin2)
        built = di.prep_cache.builds
        assert built == 1
        _HELPER = _cube_sum  # the global the code reads, rebound
        _share(backend, lambda: lambda v: _HELPER(v), x, _d_cube_sum)
    finally:
        _HELPER = sum_sin2

    def over(helper):
        def setter(new):
            nonlocal helper
            helper = new

        return (lambda v: helper(v)), setter

    _share(backend, lambda: over(sum_sin2)[0], x, _d_sum_sin2)
    _share(backend, lambda: over(_cube_sum)[0], x, _d_cube_sum)
    # the function a prep is made for rebinds its cell after the build: the prep is its copy's
    made = [over(sum_sin2) for _ in range(4)]
    for fn, _ in made:
        np.testing.assert_allclose(di.gradient(backend, fn, x), _d_sum_sin2(x), atol=_tol(backend))
    for _, setter in made:
        setter(_cube_sum)
    _share(backend, lambda: over(sum_sin2)[0], x, _d_sum_sin2)
    for fn, _ in made:
        np.testing.assert_allclose(di.gradient(backend, fn, x), _d_cube_sum(x), atol=_tol(backend))
    # the same code object over another module's globals: whose helper is another function, or the
    # helper the shared prep's function read before its own module's global was rebound
    code = (lambda v: _HELPER(v)).__code__
    _share(backend, lambda: types.FunctionType(code, globals()), x, _d_sum_sin2)
    other = {"_HELPER": _cube_sum, "__builtins__": __builtins__}
    _share(backend, lambda: types.FunctionType(code, other), x, _d_cube_sum)
    _share(backend, lambda: types.FunctionType(code, globals()), x, _d_sum_sin2)
    try:
        _HELPER = _cube_sum  # this module's, after the build; the other module's holds what it held
        other["_HELPER"] = sum_sin2
        _share(backend, lambda: types.FunctionType(code, other), x, _d_sum_sin2)
    finally:
        _HELPER = sum_sin2


@pytest.mark.parametrize("backend", BACKENDS[:2])
def test_what_a_code_shares_needs_a_closed_function_that_stores_nothing(backend):
    """No sharing where the slots reach a user's object (its attributes may change between calls
    while the object stays) or where the code stores (a nonlocal rebound); reuse_prep=False and the
    process-wide switch turn sharing off too."""

    class Scale:
        k = 2.0

    x = np.linspace(0.2, 0.8, 4)
    _share(backend, lambda: lambda v: Scale.k * sum_sin2(v), x, lambda z: 2.0 * np.sin(2 * z))
    Scale.k = 3.0
    _share(backend, lambda: lambda v: Scale.k * sum_sin2(v), x, lambda z: 3.0 * np.sin(2 * z))

    def storing():
        helper = sum_sin2

        def fn(v):
            nonlocal helper
            helper = helper
            return helper(v)

        return fn

    _share(backend, storing, x, _d_sum_sin2)
    assert di.prep_cache.shared_hits == 0 and di.prep_cache.builds == 0
    _share(
        dataclasses.replace(backend, reuse_prep=False),
        lambda: lambda v: 2.0 * sum_sin2(v),
        x,
        lambda z: 2.0 * np.sin(2 * z),
    )
    di.prep_cache.enabled = False
    try:
        _share(backend, lambda: lambda v: 2.0 * sum_sin2(v), x, lambda z: 2.0 * np.sin(2 * z))
    finally:
        di.prep_cache.enabled = True
    assert di.prep_cache.shared_hits == 0 and di.prep_cache.builds == 0


def test_threads_writing_new_lambdas_of_one_code_agree():
    backend = di.AutoFiniteDiff()
    x = np.linspace(0.1, 0.9, 6)

    def work(k):
        for j in range(20):
            z = x + 0.01 * (k + j)
            g = di.gradient(backend, lambda v: 2.0 * sum_sin2(v), z)
            np.testing.assert_allclose(g, 2.0 * np.sin(2 * z), atol=1e-6)

    assert not _in_threads(work, 4)
    assert di.prep_cache.shared_hits > 0 and di.prep_cache.builds <= 4


_FLAG = True  # rebound by a test: a global flag a kept preparation's f reads


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("stateful", [False, True], ids=["stateless", "with-state"])
def test_a_kept_preparation_is_dropped_where_fs_functions_or_flags_were_rebound(backend, stateful):
    """A kept preparation is made for f as it is: the tracing engines compile the helpers f calls and
    the flags it reads (torch stops watching an f that read no value). A closure cell or a global
    rebound to another helper, or a flag rebound, between calls without prep= gives the derivative of
    f as it is now (the four tracing engines returned the old helper's before, 2026-11-28): the kept
    prep is dropped (prep_cache.stale), the key counted anew and prepared again. State rebound (a new
    captured array) is read at the call and keeps the prep; a loop that rebinds the helper at every
    call never prepares (it would compile at every call)."""
    global _HELPER, _FLAG
    x = np.linspace(0.2, 0.8, 4)
    weights = np.ones(4)
    helper = sum_sin2

    def f(z):
        xp = array_namespace(z)
        core = helper(z) + (_HELPER(z) if _FLAG else 0.0)
        return core + (xp.sum(xp.asarray(weights) * z) if stateful else 0.0)

    def expected(inner, outer, flag, w):
        return inner(x) + (outer(x) if flag else 0.0) + (w if stateful else 0.0)

    def check(inner, outer, flag, w, calls=4):
        for _ in range(calls):
            np.testing.assert_allclose(di.gradient(backend, f, x), expected(inner, outer, flag, w), atol=_tol(backend))

    try:
        check(_d_sum_sin2, _d_sum_sin2, True, weights)
        assert (di.prep_cache.builds, di.prep_cache.stale) == (1, 0) and di.prep_cache.hits >= 1
        helper = _cube_sum  # f's closure cell, rebound
        check(_d_cube_sum, _d_sum_sin2, True, weights)
        assert (di.prep_cache.builds, di.prep_cache.stale) == (2, 1)  # dropped, counted anew, prepared again
        _HELPER = _cube_sum  # a module global f reads, rebound
        check(_d_cube_sum, _d_cube_sum, True, weights)
        _FLAG = False  # a flag
        check(_d_cube_sum, _d_cube_sum, False, weights)
        assert (di.prep_cache.builds, di.prep_cache.stale) == (4, 3)
        weights = np.full(4, 3.0)  # state: read at the call, the prep kept
        check(_d_cube_sum, _d_cube_sum, False, weights)
        assert (di.prep_cache.builds, di.prep_cache.stale) == (4, 3)
        builds = di.prep_cache.builds
        for k in range(5):  # a helper rebound at every call: each call unprepared, none prepares
            helper = _cube_sum if k % 2 else sum_sin2
            check(_d_cube_sum if k % 2 else _d_sum_sin2, _d_cube_sum, False, weights, calls=1)
        assert di.prep_cache.builds == builds
        # a prep made after a rebinding is made for f as it is (TensorFlow's graphs, shared between the
        # preps of one function, gave the old helper's here before)
        helper = sum_sin2
        di.prepare_gradient(backend, f, x)
        helper = _cube_sum
        prep = di.prepare_gradient(backend, f, x)
        want = expected(_d_cube_sum, _d_cube_sum, False, weights)
        np.testing.assert_allclose(di.gradient(backend, f, x, prep=prep), want, atol=_tol(backend))
    finally:
        _HELPER, _FLAG = sum_sin2, True


@pytest.mark.skipif(not importlib.util.find_spec("torch"), reason="pip install torch==2.13.0")
def test_a_helper_rebound_to_one_that_reads_a_value_is_watched_again():
    """torch's kept preparation stops watching an f that read no tensor's value; a helper rebound to
    one that reads one (``.item()``, which drops its derivative) is caught again, not a derivative
    with that part missing (it gave [2, 5, 6] for [4, 5, 6] before, 2026-11-28)."""
    import torch

    def clean(z):
        return torch.sum(z**2)

    def reads(z):
        return torch.sum(z**2) + z[0].item() * z[1]

    helper = clean

    def f(z):
        return helper(z)

    x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    for _ in range(4):
        torch.testing.assert_close(di.gradient(di.AutoTorch(), f, x), 2 * x)
    helper = reads
    with pytest.raises(LostDerivativeError, match="item"):
        di.gradient(di.AutoTorch(), f, x)


def _weighted(z, batch):
    xp = array_namespace(z)
    return xp.sum(xp.sin(xp.asarray(batch) * z) ** 2)


def _d_weighted(z, batch):
    return batch * np.sin(2 * batch * z)


_BATCH = np.ones(4)  # rebound by a test: a module global batch a lambda's code reads


class _Model:
    """A user's object (its attributes may change while it stays the same object)."""

    scale = 1.0


_MODEL = _Model()


@pytest.mark.parametrize("backend", BACKENDS)
def test_new_functions_over_new_state_share_their_codes_preparation(backend):
    """A lambda written anew for each batch (``lambda p: loss(p, batch)``), the batch in a closure cell,
    a default argument or a module global: from its code's fourth new function with a key, the calls
    run the prep made for the third's private copy (the third's call included), which takes each new
    function's state at its call.
    Every derivative is the one of its own batch (new values at every call, another shape once)."""
    global _BATCH
    rng = np.random.default_rng(5)
    x = np.linspace(0.2, 0.8, 4)

    def over_cell(batch):
        return lambda z: _weighted(z, batch)

    def over_default(batch):
        return lambda z, b=batch: _weighted(z, b)

    def over_global(batch):
        global _BATCH
        _BATCH = batch
        return lambda z: _weighted(z, _BATCH)

    try:
        for k, make in enumerate((over_cell, over_default, over_global)):
            for _ in range(8):
                batch = rng.normal(size=4)
                g = di.gradient(backend, make(batch), x)
                np.testing.assert_allclose(g, _d_weighted(x, batch), atol=_tol(backend) * 10)
            assert (di.prep_cache.builds, di.prep_cache.shared_hits) == (k + 1, 6 * (k + 1)), make.__name__
        assert len(di.prep_cache) == 3
        builds, hits = di.prep_cache.builds, di.prep_cache.shared_hits
        for size in (1, 1, 4):  # another batch shape (broadcast): f(x)'s unchanged, right (traced again or eager)
            batch = rng.normal(size=size)
            np.testing.assert_allclose(
                di.gradient(backend, over_cell(batch), x), _d_weighted(x, batch), atol=_tol(backend) * 10
            )
        assert di.prep_cache.builds == builds and di.prep_cache.shared_hits == hits + 3
    finally:
        _BATCH = np.ones(4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_code_met_once_leaves_nothing_in_the_caches_once_it_is_gone(backend):
    """A function of a code met once (``exec``'d code, a function of a new code at each call of a loop):
    what the caches keep for it and its code (the walk's facts of its code, its summary, the count of
    its code's new functions over state, TensorFlow's traced graph of a kept prep) is held weakly and
    goes with them, stateless or over state, called once or kept (three calls). The caches held such
    codes strongly, so a loop of new codes left every one of them, and their summaries, for the garbage
    collector's full passes to walk; TensorFlow's table of traced graphs kept every function it traced.
    JAX's own caches hold the code objects it traced (``jax.clear_caches()`` empties them); TensorFlow's
    runtime keeps some code objects it ran from outside any Python object (the function is freed):
    there the function is checked, not its code."""
    x = np.linspace(0.1, 0.9, 4)
    batch = np.linspace(1.0, 2.0, 4)
    sources = {
        "stateless": ("lambda z: sum_sin2(z)", lambda z: np.sin(2 * z)),
        "over state": ("lambda z: _weighted(z, batch)", lambda z: _d_weighted(z, batch)),
    }
    for name, (source, expected) in sources.items():
        for calls in (1, 3):
            functions, codes = [], []
            for _ in range(3):  # a loop of three new codes, collected together (a full collection is 0.3-1 s)
                f = eval(source, {"sum_sin2": sum_sin2, "_weighted": _weighted, "batch": batch})  # a new code
                functions.append(weakref.ref(f))
                codes.append(weakref.ref(f.__code__))
                for _ in range(calls):
                    np.testing.assert_allclose(di.gradient(backend, f, x), expected(x), atol=_tol(backend) * 10)
                del f
            gc.collect()
            assert all(function() is None for function in functions), (name, calls)
            if isinstance(backend, di.AutoJAX):
                import jax

                jax.clear_caches()
                gc.collect()
            if not isinstance(backend, di.AutoTensorFlow):
                assert all(code() is None for code in codes), (name, calls)


def test_new_functions_over_state_of_two_keys_are_counted_per_key_from_the_first():
    """A code's first function over state is counted by a mark on its code's record, which the code's
    second function turns into entries: with two keys (x of two shapes) in turn, each key's third new
    function prepares, as where every function made an entry; after ``clear()`` the counts start anew."""
    backend = di.AutoFiniteDiff()
    rng = np.random.default_rng(7)

    def over_cell(batch):
        return lambda z: _weighted(z, batch)

    for _round in range(2):
        di.prep_cache.clear()
        builds = []
        for k in range(8):
            x = np.linspace(0.2, 0.8, 4 if k % 2 == 0 else 3)
            batch = rng.normal(size=x.shape)
            g = di.gradient(backend, over_cell(batch), x)
            np.testing.assert_allclose(g, _d_weighted(x, batch), atol=1e-6)
            builds.append(di.prep_cache.builds)
        # functions 1, 3 (shape 4) and 2, 4 (shape 3) counted; 5 and 6 prepare; 7 and 8 served
        assert builds == [0, 0, 0, 0, 1, 2, 2, 2], builds
        assert di.prep_cache.shared_hits == 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_what_new_functions_over_state_share_needs_the_same_helpers_and_code_that_stores_nothing(backend):
    """A code's prep over state serves a new function only where its slots hold what the prep's
    function held besides state: a closure over another helper gets its own derivative (and its own
    prep, from its own third function); a code that
    rebinds a captured name, or reaches a user's object, never shares (its prep would write into, or
    read from, what the new function does not)."""
    rng = np.random.default_rng(6)
    x = np.linspace(0.2, 0.8, 4)

    def over(helper, batch):
        return lambda z: helper(z) + _weighted(z, batch)

    for k in range(10):
        helper, d_helper = (sum_sin2, _d_sum_sin2) if k % 3 else (_cube_sum, _d_cube_sum)
        batch = rng.normal(size=4)
        g = di.gradient(backend, over(helper, batch), x)
        np.testing.assert_allclose(g, d_helper(x) + _d_weighted(x, batch), atol=_tol(backend) * 10)
    # a prep for each helper (the functions of one code around other objects: entries of their own),
    # each from its third function: sum_sin2's at k = 4, 5, 7, 8 and _cube_sum's at k = 6, 9
    assert (di.prep_cache.builds, di.prep_cache.shared_hits) == (2, 6)

    def counting(batch):
        calls = 0

        def f(z):
            nonlocal calls
            calls += 1
            return _weighted(z, batch)

        return f

    def reaching(batch, model=_MODEL):
        return lambda z: model.scale * _weighted(z, batch)

    for make in (counting, reaching):
        builds = di.prep_cache.builds
        for _ in range(6):
            batch = rng.normal(size=4)
            np.testing.assert_allclose(
                di.gradient(backend, make(batch), x), _d_weighted(x, batch), atol=_tol(backend) * 10
            )
        assert di.prep_cache.builds == builds, make.__name__


def test_threads_writing_new_lambdas_over_their_own_state_agree():
    """Four threads, each writing a lambda over its own batch at every call: the code's prep over state
    serves one call at a time (a thread that finds it busy runs unprepared), each with its own batch."""
    backend = di.AutoFiniteDiff()
    x = np.linspace(0.1, 0.9, 6)

    def work(k):
        rng = np.random.default_rng(k)
        for _ in range(25):
            batch = rng.normal(size=6)
            g = di.gradient(backend, lambda v: _weighted(v, batch), x)
            np.testing.assert_allclose(g, _d_weighted(x, batch), atol=1e-6)

    assert not _in_threads(work, 4)
    assert di.prep_cache.shared_hits > 0 and di.prep_cache.builds == 1


def test_a_code_summarised_over_a_stateless_helper_shares_over_state_around_one_with_state():
    """One lambda code (``lambda z: fn(z)``) around a stateless helper first (the walk keeps a summary
    of the code for those objects), then around a helper with an array default: its new functions share
    the code's preparation over state (the summary, made for other objects, does not hold for them),
    and every derivative follows the array, written between calls."""
    backend = di.AutoFiniteDiff()
    x = np.linspace(0.2, 0.8, 4)
    weights = np.ones(4)

    def around(fn):
        return lambda z: fn(z)

    def weighted(z, w=weights):
        return _weighted(z, w)

    for _ in range(4):
        np.testing.assert_allclose(di.gradient(backend, around(sum_sin2), x), _d_sum_sin2(x), atol=1e-6)
    hits = di.prep_cache.shared_hits
    for k in range(6):
        weights[:] = k + 1.0
        np.testing.assert_allclose(di.gradient(backend, around(weighted), x), _d_weighted(x, weights), atol=1e-6)
    assert di.prep_cache.shared_hits - hits == 4  # from the third new function around `weighted`


def test_new_functions_with_keyword_only_defaults_or_a_failing_preparation_run_unprepared(monkeypatch):
    """A function with keyword-only defaults is not shared over state (a copy takes its cells and
    defaults, not those); nor is a code whose preparation for the copy fails (here made to fail for
    any function but the user's): those calls run unprepared and give their own derivatives."""
    from diffinterface._frontend import pipeline

    backend = di.AutoFiniteDiff()
    x = np.linspace(0.2, 0.8, 4)
    rng = np.random.default_rng(7)
    for _ in range(5):
        batch = rng.normal(size=4)

        def keyword(z, *, b=batch):
            return _weighted(z, b)

        np.testing.assert_allclose(di.gradient(backend, keyword, x), _d_weighted(x, batch), atol=1e-6)
    assert di.prep_cache.builds == 0
    users: list = []  # the user's functions, alive (a dead one's id could be the copy's)
    prepare = pipeline.prepare

    def failing(operator, backend, f, x, **options):
        if not any(f is g for g in users):  # the copy made for the code's shared preparation
            raise RuntimeError("this preparation fails")
        return prepare(operator, backend, f, x, **options)

    monkeypatch.setattr(pipeline, "prepare", failing)
    for _ in range(6):
        batch = rng.normal(size=4)
        f = lambda z, b=batch: _weighted(z, b)  # noqa: E731 - a lambda written at each call
        users.append(f)
        np.testing.assert_allclose(di.gradient(backend, f, x), _d_weighted(x, batch), atol=1e-6)
    assert di.prep_cache.builds == 0 and di.prep_cache.shared_hits == 0
