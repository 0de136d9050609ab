"""Closures duplicated by default (contract section 7), on the finite-difference backend.

The mechanism lives in the frontend; these tests pin down what any adapter inherits from it:
captured state is found in closure cells, partial arguments, callable objects, bound methods,
defaults and module globals; each evaluation gets a duplicate; the user's objects never change.
"""

from __future__ import annotations

import functools
import threading

import numpy as np
import pytest
from scipy.optimize._numdiff import approx_derivative

import diffinterface as di
from conftest import installed

FD = di.AutoFiniteDiff()


def accumulating(buffer):
    def f(x):
        buffer[0] = 1.0
        buffer[0] += x
        return buffer[0] ** 2

    return f


def buffers():
    out = [("numpy", np.full(3, 9.0)), ("list", [9.0, 9.0, 9.0])]
    if installed("torch"):
        import torch

        out.append(("torch", torch.full((3,), 9.0, dtype=torch.float64)))
    return out


@pytest.mark.parametrize("kind, buffer", buffers(), ids=[k for k, _ in buffers()])
@pytest.mark.parametrize("prepared", [False, True])
def test_the_accumulating_buffer_gives_2_1_plus_x_on_every_call(kind, buffer, prepared):
    f = accumulating(buffer)
    before = [float(v) for v in buffer]
    prep = di.prepare_derivative(FD, f, 0.0) if prepared else None
    for x in (0.3, 0.3, -1.2, 2.5):
        assert di.derivative(FD, f, x, prep=prep) == pytest.approx(2 * (1 + x), rel=1e-9)
        assert [float(v) for v in buffer] == before and type(buffer[0]) is type(buffer[0])


def test_partial_callable_object_nested_and_bound_method():
    buf = np.zeros(2)

    def base(x, w, work):
        work[...] = w * x
        return np.sum(work**2)

    class Loss:
        def __init__(self):
            self.w, self.work = np.array([1.0, 2.0]), np.zeros(2)

        def __call__(self, x):
            self.work[...] = self.w * x
            return np.sum(self.work**2)

        def method(self, x):
            return self(x)

    def outer():
        work = np.zeros(2)

        def inner(x):
            work[...] = np.array([1.0, 2.0]) * x
            return np.sum(work**2)

        return lambda x: inner(x)

    loss = Loss()
    x = np.array([0.5, -0.25])
    expected = 2 * np.array([1.0, 4.0]) * x
    for f in (functools.partial(base, w=np.array([1.0, 2.0]), work=buf), loss, loss.method, outer()):
        for _ in range(2):
            assert np.allclose(di.gradient(FD, f, x), expected, rtol=1e-8)
    assert not buf.any() and not loss.work.any()


def test_default_argument_buffers_are_duplicated():
    def f(x, work=np.zeros(3)):  # noqa: B008 - the pattern under test
        work[...] = x * x
        return np.sum(work)

    x = np.array([1.0, 2.0, 3.0])
    assert np.allclose(di.gradient(FD, f, x), 2 * x, rtol=1e-8)
    assert not f.__defaults__[0].any()


# -- module globals as work buffers: a Gierer-Meinhardt right-hand side ------------------------

N = 4
Ax = np.diag(np.full(N, -2.0)) + np.diag(np.ones(N - 1), 1) + np.diag(np.ones(N - 1), -1)
Ay = Ax.copy()
Ayu, uAx, Ayv, vAx = (np.zeros((N, N)) for _ in range(4))
D = 0.3


def _kinetics(u, v):
    return u * u / v - u, u * u - v


def gierer_meinhardt(x):
    u, v = x[0], x[1]
    Ayu[...] = Ay @ u
    uAx[...] = u @ Ax
    Ayv[...] = Ay @ v
    vAx[...] = v @ Ax
    ku, kv = _kinetics(u, v)
    return np.stack([D * (Ayu + uAx) + ku, Ayv + vAx + kv])


def gierer_meinhardt_pure(x):
    u, v = x[0], x[1]
    ku, kv = _kinetics(u, v)
    return np.stack([D * (Ay @ u + u @ Ax) + ku, Ay @ v + v @ Ax + kv])


def test_module_global_work_buffers():
    x = 1.0 + 0.1 * np.arange(2 * N * N, dtype=float).reshape(2, N, N)
    reference = approx_derivative(
        lambda z: gierer_meinhardt_pure(z.reshape(x.shape)).ravel(), x.ravel(), method="3-point"
    )
    before = [a.copy() for a in (Ayu, uAx, Ayv, vAx)]
    prep = di.prepare_jacobian(FD, gierer_meinhardt, np.ones_like(x))
    for p in (None, prep, prep):
        jac = di.jacobian(FD, gierer_meinhardt, x, prep=p)
        assert np.allclose(jac.reshape(reference.shape), reference, rtol=1e-7, atol=1e-9)
    assert all(np.array_equal(a, b) for a, b in zip((Ayu, uAx, Ayv, vAx), before))


def test_a_captured_array_updated_between_prepared_calls_is_seen():
    w = np.array([1.0, 2.0])

    def f(x):
        return np.sum(w * x**2)

    x = np.array([1.0, 1.0])
    prep = di.prepare_gradient(FD, f, x)
    assert np.allclose(di.gradient(FD, f, x, prep=prep), 2 * w)
    w[...] = [3.0, -1.0]
    assert np.allclose(di.gradient(FD, f, x, prep=prep), [6.0, -2.0])


def test_an_exception_inside_f_leaves_the_state_untouched():
    state = {"buf": np.zeros(2), "calls": [0]}

    def f(x):
        state["buf"][...] = x
        state["calls"].append(1)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        di.gradient(FD, f, np.ones(2))
    assert not state["buf"].any() and state["calls"] == [0]


def test_two_threads_share_a_function_and_a_prep():
    buf = np.zeros(50)

    def f(x):
        buf[...] = x
        for _ in range(20):  # give the other thread time to interleave
            buf[...] = buf * 1.0
        return np.sum(buf**2)

    prep = di.prepare_gradient(FD, f, np.zeros(50))
    results, errors = {}, []

    def work(k):
        try:
            x = np.full(50, float(k))
            results[k] = [di.gradient(FD, f, x, prep=prep) for _ in range(3)]
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for k in (1, 2):
        for g in results[k]:
            assert np.allclose(g, 2.0 * k, rtol=1e-8)
    assert not buf.any()


def test_const_uses_the_captured_state_as_it_is():
    seen = []
    w = np.array([1.0, 2.0])

    def f(x):
        seen.append(w)
        return np.sum(w * x)

    assert np.allclose(di.gradient(di.AutoFiniteDiff(closure="const"), f, np.zeros(2)), w)
    assert all(s is w for s in seen)  # no copies
    seen.clear()
    di.gradient(FD, f, np.zeros(2))
    assert seen == []  # under "duplicated", the list the user captured is not appended to


COUNTER = 0


def test_numbers_f_cannot_change_need_no_duplicate_and_rebinding_ones_do():
    from diffinterface._closures.plan import StatePlan

    scale, pair = 3.0, (1.0, 2.0)

    def reads(x):
        return scale * pair[1] * np.sum(x**2)

    count = 0

    def rebinds(x):
        nonlocal count
        count += 1
        return scale * np.sum(x**2)

    def rebinds_global(x):
        global COUNTER
        COUNTER += 1
        return np.sum(x**2)

    class Counting:
        calls = 0

        def __call__(self, x):
            self.calls += 1
            return np.sum(x**2)

    assert StatePlan(reads).read_only and not StatePlan(reads).empty
    for f in (rebinds, rebinds_global, Counting(), accumulating(np.zeros(2))):
        assert not StatePlan(f).read_only
    x = np.array([1.0, 2.0])
    for f in (rebinds, rebinds_global):
        assert np.allclose(di.gradient(FD, f, x), 2 * x * (3.0 if f is rebinds else 1.0), rtol=1e-8)
    counting = Counting()
    di.gradient(FD, counting, x)
    assert count == 0 and COUNTER == 0 and counting.calls == 0  # the calls went to duplicates


def test_a_stateless_helper_is_checked_instead_of_walked_and_rebinding_its_slots_is_seen():
    """A user function found stateless is kept as a summary (its slots' objects) and checked by
    identity at the next walk instead of walked again; any slot bound to something else since (a
    module global, a closure cell, ``__defaults__``, ``__code__``, a module declared otherwise) and
    the walk finds what is there now: its state is duplicated and its derivative flows."""
    from diffinterface._closures import namespaces, summaries
    from diffinterface._closures.plan import StatePlan

    space: dict = {"__name__": "summarymod", "np": np}
    exec(
        "def scale(z):\n"
        "    return W * z\n"
        "def outer(z):\n"
        "    return np.sum(scale(z) ** 2)\n"
        "def entry(z):\n"
        "    return outer(z)\n"
        "W = np.sum\n",  # a library function: no state
        space,
    )
    f, x = space["entry"], np.array([1.0, 2.0])
    assert StatePlan(lambda z: f(z)).empty  # a new function around the helpers, as a loop writes it
    assert all(summaries.summary_of(space[name]) is not None for name in ("entry", "outer", "scale"))
    checked = []
    real = summaries.Summary.holds

    def counted(self, fn, checking):
        checked.append(fn.__name__)
        return real(self, fn, checking)

    summaries.Summary.holds = counted
    try:
        assert StatePlan(lambda z: f(z)).empty
    finally:
        summaries.Summary.holds = real
    assert checked == ["entry", "outer", "scale"]  # entry checked (and through it the others), none walked
    # a global of the innermost helper rebound to an array: found, duplicated, differentiated
    space["W"] = np.array([3.0, -1.0])
    plan = StatePlan(lambda z: f(z))
    assert plan.where() == ["global 'W' of summarymod"]
    np.testing.assert_allclose(di.gradient(FD, lambda z: f(z), x), 2 * space["W"] ** 2 * x, rtol=1e-7)
    # __defaults__ and __code__ rebound
    space["W"] = None
    assert StatePlan(lambda z: f(z)).empty
    scale = space["scale"]
    scale.__defaults__ = (np.zeros(2),)
    assert len(StatePlan(lambda z: f(z)).leaves) == 1
    scale.__defaults__ = None
    assert StatePlan(lambda z: f(z)).empty
    exec("def scale2(z):\n    return Q * z\nQ = 1.5\n", space)
    scale.__code__ = space["scale2"].__code__
    assert StatePlan(lambda z: f(z)).where() == ["global 'Q' of summarymod"]
    # a closure cell rebound from a builtin to a list (state)
    k = abs

    def helper(z):
        return k(z)

    g = lambda z: np.sum(helper(z))  # noqa: E731
    assert StatePlan(lambda z: g(z)).empty and summaries.summary_of(helper) is not None
    k = [2.0]  # noqa: F841 - read by helper through its cell
    assert StatePlan(lambda z: g(z)).where() == [
        "'k' captured by test_a_stateless_helper_is_checked_instead_of_walked_and_rebinding_its_slots_is_seen.<locals>.helper"
    ]
    # a library function among the slots, declared user code since: walked into
    lib: dict = {"__name__": "disummarylib"}
    exec("RATE = 2.0\ndef rate(z):\n    return RATE * z\n", lib)
    space["W"] = lib["rate"]
    exec("def scale(z):\n    return W(z)\n", space)  # outer reads the new scale
    try:
        di.declare_modules("disummarylib", walk=False)
        assert StatePlan(lambda z: f(z)).empty  # rate is a library's: called as it is
        di.declare_modules("disummarylib", walk=True)
        assert StatePlan(lambda z: f(z)).where() == ["global 'RATE' of disummarylib"]
    finally:
        namespaces.undeclare_modules("disummarylib")


def test_a_lambda_written_anew_at_each_call_is_checked_by_its_code_and_its_summary_holds_nothing_alive(walk_visits):
    """Summaries are kept by code object: a lambda written anew at each call (a new function of one
    code, as a loop writes it) is checked, not walked; a new object in one of its slots is found
    (state: duplicated, its derivative flows); the objects are held weakly (a helper that only dead
    lambdas reached is freed); a slot whose object takes no weak reference and may hold the user's
    data (a random generator) leaves the function without a summary, walked at each call."""
    import gc
    import weakref

    from diffinterface._closures import summaries
    from diffinterface._closures.plan import StatePlan

    def helper(z):
        return np.sum(z**2)

    def make(h):
        return lambda z: h(z)

    assert StatePlan(make(helper)).empty
    walk_visits.clear()  # from here: checked, not walked
    for _ in range(3):
        assert StatePlan(make(helper)).empty  # a new lambda of the same code: checked
    assert walk_visits == []
    w = np.array([3.0, -1.0])

    def scaled(z):
        return np.sum(w * z**2)

    plan = StatePlan(make(scaled))  # another object in the lambda's cell: walked, its state found
    assert plan.where() == [f"'w' captured by {scaled.__qualname__}"] and walk_visits
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(di.gradient(FD, make(scaled), x), 2 * w * x, rtol=1e-7)
    np.testing.assert_allclose(di.gradient(FD, make(helper), x), 2 * x, rtol=1e-7)

    def new_helper():
        def h(z):
            return np.sum(z)

        return h

    h = new_helper()
    lam = make(h)
    assert StatePlan(lam).empty and summaries.summary_of(lam) is not None
    held = weakref.ref(h)
    del h, lam
    gc.collect()
    assert held() is None  # the lambda's summary lives on with its code, and keeps no helper alive

    rng = np.random.default_rng(0)
    noisy = lambda z: z * 0.0 + rng.standard_normal()  # noqa: E731
    assert StatePlan(noisy).empty and summaries.summary_of(noisy) is None


@pytest.mark.parametrize("library", ["tensorflow", "pytensor"])
def test_an_engines_own_functions_and_ops_are_called_as_they_are_not_walked(library):
    """TensorFlow and PyTensor are library namespaces, as jax and torch are: a helper that captures
    one of their functions or ops (``sin = pt.sin``, an ``Elemwise`` object; ``tf.math.sin``) holds no
    state (PyTensor's op attributes were found as three captured leaves and duplicated at every call,
    TensorFlow's functions walked into at every first call), keeps its walk's summary, and its
    derivative is the engine's."""
    from diffinterface._closures import summaries
    from diffinterface._closures.plan import StatePlan

    if library == "tensorflow":
        tf = pytest.importorskip("tensorflow")
        sin, backend, to_array = tf.math.sin, di.AutoTensorFlow(), tf.constant
    else:
        pt = pytest.importorskip("pytensor.tensor")
        sin, backend, to_array = pt.sin, di.AutoPyTensor(), np.asarray

    def helper(z):
        return (sin(z) ** 2).sum() if library == "pytensor" else tf.reduce_sum(sin(z) ** 2)

    plan = StatePlan(lambda z: helper(z))
    assert plan.empty and plan.where() == [] and summaries.summary_of(helper) is not None
    x = np.array([0.3, 1.2, -0.7])
    np.testing.assert_allclose(np.asarray(di.gradient(backend, helper, to_array(x))), np.sin(2 * x), rtol=1e-12)


def test_a_global_that_shares_an_attributes_name_is_not_taken_for_captured_state():
    """The walk reads the globals a function's instructions name, not every name of its code:
    ``model.w`` reads an attribute, so a module global array ``w`` is not ``f``'s state (it was walked
    and duplicated at every call); ``w`` itself read is. Against ``dis``' own decoding on the code
    of numpy, the standard library and this package, and on code with over 256 names (arguments
    past one byte: ``EXTENDED_ARG``), nested code, a class body and ``global`` writes."""
    import dis
    import json
    import types

    from diffinterface._closures.code import _code_names
    from diffinterface._closures.plan import StatePlan
    from diffinterface._frontend import pipeline

    namespace = {"np": np, "w": np.array([1.0, 2.0])}
    exec(
        "class Model:\n"
        "    w = 3.0\n"
        "model = Model()\n"
        "def attribute(x):\n"
        "    return np.sum(model.w * x ** 2)\n"
        "def read(x):\n"
        "    return np.sum(w * x ** 2)\n",
        namespace,
    )
    assert StatePlan(namespace["attribute"]).where() == []  # model: a user object holding no state
    assert StatePlan(namespace["read"]).where() == ["global 'w' of None"]
    x = np.array([1.0, -0.5])
    np.testing.assert_allclose(di.gradient(di.AutoFiniteDiff(), namespace["attribute"], x), 6.0 * x, rtol=1e-7)
    np.testing.assert_allclose(
        di.gradient(di.AutoFiniteDiff(), namespace["read"], x), 2 * namespace["w"] * x, rtol=1e-7
    )

    ops = {"LOAD_GLOBAL", "STORE_GLOBAL", "DELETE_GLOBAL", "LOAD_NAME", "STORE_NAME", "DELETE_NAME"}
    ops.add("LOAD_FROM_DICT_OR_GLOBALS")

    def reference(code):
        names = {i.argval for i in dis.get_instructions(code) if i.opname in ops}
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                names |= reference(const)
        return names

    many = "def many(x):\n    global g0\n    g0 = 1\n" + "".join(f"    x = x + n{i} + x.a{i}\n" for i in range(300))
    many += "    class Inner:\n        y = g299\n    return [v + g1 for v in x] + (lambda: g2)()\n"
    space: dict = {}
    exec(many, space)
    codes = [space["many"].__code__]
    for module in (np, json, pipeline):
        for value in vars(module).values():
            if isinstance(value, types.FunctionType):
                codes.append(value.__code__)
    assert len(codes) > 100
    for code in codes:
        assert _code_names(code) == reference(code), code.co_name
    names = _code_names(space["many"].__code__)
    assert {"g0", "g1", "g2", "g299", "n0", "n299"} <= names and not names & {"a0", "a299"}  # attributes


def test_a_summary_lives_on_its_codes_record_and_finds_closed_where_first_read():
    """A summary is kept on its code's record (``code.CodeRecord``), under the record's weak reference
    to the code: a function of new code gets one, and it goes with the code. Whether what its slots
    hold cannot change (``closed``) is found where it is first read, from the objects it holds: a
    user's module in a slot is not closed, a helper whose summary is closed is, and a slot whose
    object died since is not (nothing shared from it)."""
    import gc
    import types
    import weakref

    from diffinterface._closures import code, summaries
    from diffinterface._closures.plan import StatePlan

    def helper(z):
        return np.sum(z**2)

    def make(h):
        return lambda z: h(z)

    lam = make(helper)
    assert StatePlan(lam).empty
    summary = summaries.summary_of(lam)
    assert summary is not None and summary is code.code_record(lam.__code__).summary
    assert summary._closed is None  # not found at its making
    assert summary.closed and summary._closed is True

    def other(z):
        return np.sum(z**3)

    lam_other = make(other)
    assert StatePlan(lam_other).empty  # another helper in the cell: walked, a new summary for the code
    fresh = summaries.summary_of(lam_other)
    assert fresh is not None and fresh is not summary and fresh._closed is None
    del other, lam_other
    gc.collect()
    assert not fresh.closed  # its helper died before anything read it: not closed

    scoped = make(types.SimpleNamespace)  # a library's class in the cell: closed
    assert StatePlan(scoped).empty and summaries.summary_of(scoped).closed

    new = eval("lambda z: helper(z) * 2.0", {"helper": helper, "__name__": __name__})  # a new code
    assert StatePlan(new).empty and summaries.summary_of(new) is not None
    held = weakref.ref(new.__code__)
    key = id(new.__code__)
    del new
    gc.collect()
    assert held() is None and key not in code.RECORDS  # the record, and its summary, went with the code


def test_a_helper_met_through_recursion_is_not_summarised_on_a_provisional_answer():
    """Mutually recursive helpers: walked from ``a``, ``b``'s walk meets ``a`` still being walked (its
    answer there is provisional), so ``b`` gets no summary, and a later walk from ``b`` finds the
    state that ``a`` captures."""
    from diffinterface._closures import summaries
    from diffinterface._closures.plan import StatePlan

    buffer = np.zeros(2)

    def a(z, depth=0):
        buffer[0] = 1.0
        return b(z, depth) if depth == 0 else np.sum(z * buffer[0])

    def b(z, depth):
        return a(z, depth + 1)

    root = lambda z: a(z)  # noqa: E731
    assert len(StatePlan(lambda z: root(z)).leaves) == 2  # buffer, and a's default 0
    assert summaries.summary_of(b) is None
    assert len(StatePlan(lambda z: b(z, 0)).leaves) == 2
    np.testing.assert_allclose(di.gradient(FD, lambda z: b(z, 0), np.array([1.0, 2.0])), [1.0, 1.0], rtol=1e-8)
    np.testing.assert_array_equal(buffer, [0.0, 0.0])
