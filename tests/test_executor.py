"""``AutoFiniteDiff(executor=..., batch_size=..., vectorized=...)`` (issue 18): the evaluations of one
call on a thread pool, a process pool and a real Dask ``LocalCluster`` (2 worker processes on
localhost). Every result is compared with the serial call's to the bit, and with closed forms."""

from __future__ import annotations

import multiprocessing
import os
import pathlib
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import numpy as np
import pytest

import diffinterface as di
from conftest import installed
from diffinterface.testing import default_scenarios

A = np.arange(12.0).reshape(3, 4) / 7 - 0.5
X = np.array([0.3, -1.2, 0.8, 2.1])


def f_vec(x: Any) -> Any:
    """sin(A x) * sum(x^2): R^4 -> R^3, Jacobian diag(cos(A x)) A sum(x^2) + sin(A x) (2x)^T."""
    return np.sin(A @ x) * np.sum(x**2)


def jac_vec(x: Any) -> Any:
    return np.cos(A @ x)[:, None] * A * np.sum(x**2) + np.outer(np.sin(A @ x), 2 * x)


def f_num(x: Any) -> Any:
    """sum(cos(x) x^3): gradient -sin(x) x^3 + 3 x^2 cos(x), Hessian diagonal."""
    return np.sum(np.cos(x) * x**3)


def grad_num(x: Any) -> Any:
    return -np.sin(x) * x**3 + 3 * x**2 * np.cos(x)


def hess_num(x: Any) -> Any:
    return np.diag(-np.cos(x) * x**3 - 6 * x**2 * np.sin(x) + 6 * x * np.cos(x))


def f_batch(xs: Any) -> Any:
    """f_vec for points stacked along the first axis: (k, 4) -> (k, 3)."""
    return np.sin(xs @ A.T) * np.sum(xs**2, axis=-1, keepdims=True)


def f_num_batch(xs: Any) -> Any:
    return np.sum(np.cos(xs) * xs**3, axis=-1)


# 2 worker processes of one thread on localhost; ":0": the HTTP server on a free port (not 8787)
CLUSTER = {"n_workers": 2, "threads_per_worker": 1, "processes": True, "dashboard_address": ":0"}


def _spawn() -> Any:
    # spawn, not fork: a forked child of a process that runs JAX's or torch's threads can deadlock
    return multiprocessing.get_context("spawn")


@pytest.fixture(scope="module")
def threads():
    with ThreadPoolExecutor(2) as executor:
        yield executor


@pytest.fixture(scope="module")
def processes():
    with ProcessPoolExecutor(2, mp_context=_spawn()) as executor:
        yield executor


@pytest.fixture(scope="module")
def dask_client():
    distributed = pytest.importorskip("distributed", reason='Dask is not installed: pip install "diffinterface[dask]"')
    with (
        distributed.LocalCluster(**CLUSTER) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


@pytest.fixture(params=["threads", "processes", "dask"])
def executor(request):
    if request.param == "dask":
        return request.getfixturevalue("dask_client").get_executor()
    return request.getfixturevalue(request.param)


def _same(a: Any, b: Any) -> bool:
    """Equal to the bit, with the same type and dtype (tuples compared item by item)."""
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(u, v) for u, v in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if type(a) is not type(b):
        return False
    a, b = np.asarray(a), np.asarray(b)  # numpy, CPU torch tensors and jax arrays alike
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


CALLS = {  # name: (operator, f, arguments after f)
    "jacobian": ("jacobian", f_vec, (X,)),
    "value_and_jacobian": ("value_and_jacobian", f_vec, (X,)),
    "gradient": ("gradient", f_num, (X,)),
    "value_and_gradient": ("value_and_gradient", f_num, (X,)),
    "pullback": ("pullback", f_vec, (X, np.array([1.0, -2.0, 0.5]))),
    "pushforward batch": ("pushforward", f_vec, (X, (np.ones(4), np.arange(4.0), np.zeros(4)))),
    "value_and_pushforward": ("value_and_pushforward", f_vec, (X, np.ones(4))),
    "derivative": ("derivative", np.sin, (0.7,)),
    "hessian": ("hessian", f_num, (X,)),
    "value_gradient_and_hessian": ("value_gradient_and_hessian", f_num, (X,)),
    "hvp batch": ("hvp", f_num, (X, (np.ones(4), np.arange(4.0)))),
    "gradient_and_hvp": ("gradient_and_hvp", f_num, (X, np.ones(4))),
    "second_derivative": ("second_derivative", np.sin, (0.7,)),
    "value_derivative_and_second_derivative": ("value_derivative_and_second_derivative", np.sin, (0.7,)),
}


@pytest.mark.parametrize("method", ["central", "forward", "backward", "complex"])
@pytest.mark.parametrize("name", list(CALLS))
def test_every_operator_equals_the_serial_call_to_the_bit(executor, name, method):
    operator, f, args = CALLS[name]
    run = getattr(di, operator)
    serial = run(di.AutoFiniteDiff(method=method), f, *args)
    for batch_size in (None, 3):
        backend = di.AutoFiniteDiff(method=method, executor=executor, batch_size=batch_size)
        assert _same(run(backend, f, *args), serial), (name, method, batch_size)


class _CountingThreads(ThreadPoolExecutor):
    """A thread pool that counts the points it is sent (the recipes of each task)."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self.points = 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        self.points += len(args[-1])  # _task(payload, environment, token, start, recipes)
        return super().submit(fn, *args, **kwargs)


PREPARED = {  # the prepare_ function of each call
    "value_and_jacobian": "jacobian",
    "value_and_gradient": "gradient",
    "value_and_pushforward": "pushforward",
    "value_gradient_and_hessian": "hessian",
    "gradient_and_hvp": "hvp",
    "value_derivative_and_second_derivative": "second_derivative",
}


@pytest.mark.parametrize("name", list(CALLS))
def test_every_evaluation_of_a_prepared_call_runs_on_the_executor(name):
    """The executor gets as many points as the serial call evaluates f (the counts docs/backends.md states:
    2n for a central Jacobian, 2n^2 + 1 for a Hessian, ...), and f runs on its threads only."""
    operator, f, args = CALLS[name]
    where: list[int] = []

    def counted(x: Any) -> Any:
        where.append(threading.get_ident())
        return f(x)

    prepare = getattr(di, "prepare_" + PREPARED.get(operator, operator))
    serial = di.AutoFiniteDiff(closure="const")  # const: the list is the caller's, on every thread
    prep = prepare(serial, counted, *args)
    where.clear()
    getattr(di, operator)(serial, counted, *args, prep=prep)
    evaluations = len(where)
    with _CountingThreads(2) as pool:
        backend = di.AutoFiniteDiff(executor=pool, closure="const")
        prep = prepare(backend, counted, *args)
        where.clear()
        getattr(di, operator)(backend, counted, *args, prep=prep)
    assert pool.points == len(where) == evaluations > 0
    assert threading.get_ident() not in where


@pytest.mark.parametrize("operator", ["jacobian", "gradient", "hessian", "hvp"])
def test_prepared_calls_at_other_points_equal_the_serial_ones(executor, operator):
    f = f_vec if operator == "jacobian" else f_num
    tangent = (np.linspace(0.5, 1.5, 4),) if operator == "hvp" else ()
    backend = di.AutoFiniteDiff(executor=executor, batch_size=2)
    serial = di.AutoFiniteDiff()
    prep = getattr(di, "prepare_" + operator)(backend, f, X, *tangent)
    prep_serial = getattr(di, "prepare_" + operator)(serial, f, X, *tangent)
    for x in (X + 0.25, -X):
        ours = getattr(di, operator)(backend, f, x, *tangent, prep=prep)
        assert _same(ours, getattr(di, operator)(serial, f, x, *tangent, prep=prep_serial))


def test_results_match_the_closed_forms(executor):
    backend = di.AutoFiniteDiff(executor=executor)
    np.testing.assert_allclose(di.jacobian(backend, f_vec, X), jac_vec(X), rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(di.gradient(backend, f_num, X), grad_num(X), rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(di.hessian(backend, f_num, X), hess_num(X), rtol=1e-6, atol=1e-6)


def test_the_catalogue_on_a_thread_pool_passes_and_equals_the_serial_calls(threads):
    """Every numpy float64 scenario of the catalogue (closed forms; closures that write into captured
    state, output buffers, caches, structured and complex x) through a thread pool, checked by the
    harness; and each result equal to the serial call's to the bit."""
    scenarios = default_scenarios("numpy", np.float64)
    backend = di.AutoFiniteDiff(executor=threads, batch_size=2)
    outcomes = di.testing.test_differentiation([backend], scenarios)
    assert len(outcomes) == len(scenarios) > 400
    assert _compare_with_serial(backend, [s for s in scenarios if not s.sparse]) > 400


def test_the_catalogue_on_a_dask_cluster_equals_the_serial_calls(dask_client):
    """The first-order numpy float64 scenarios on the cluster's worker processes (f, its captured state
    and contexts pickled by cloudpickle): to the bit."""
    backend = di.AutoFiniteDiff(executor=dask_client.get_executor(), batch_size=4)
    first_order = [
        s
        for s in default_scenarios("numpy", np.float64)
        if not s.sparse and s.operator not in ("hvp", "hessian", "second_derivative")
    ]
    assert _compare_with_serial(backend, first_order) > 200


def _compare_with_serial(backend: Any, scenarios: list[Any]) -> int:
    """Each scenario's operator through ``backend`` and through the serial ``AutoFiniteDiff()``: equal
    to the bit. Returns how many were compared."""
    for s in scenarios:
        args = (s.x, s.tangent) if s.operator in ("pushforward", "pullback", "hvp") else (s.x,)
        kwargs: dict[str, Any] = {"y": s.y} if s.y is not None else {}
        if s.holomorphic:
            kwargs["holomorphic"] = True
        run = getattr(di, s.operator)
        serial = run(di.AutoFiniteDiff(), s.f, *args, *s.contexts, **kwargs)
        assert _same(run(backend, s.f, *args, *s.contexts, **kwargs), serial), s.name
    return len(scenarios)


# -- vectorized f -----------------------------------------------------------------------------------


def test_a_vectorized_f_is_called_once_per_batch():
    calls: list[tuple[int, ...]] = []

    def counted(xs: Any) -> Any:
        calls.append(xs.shape)
        return f_batch(xs)

    backend = di.AutoFiniteDiff(vectorized=True, closure="const")  # const: the list is the caller's
    prep = di.prepare_jacobian(backend, counted, X)
    assert calls == [(1, 4)]  # the preparation's f(x): a batch of one
    calls.clear()
    jac = di.jacobian(backend, counted, X, prep=prep)
    assert calls == [(8, 4)]  # 2n points of a central difference, one call
    np.testing.assert_allclose(jac, jac_vec(X), rtol=1e-8, atol=1e-9)
    calls.clear()
    di.jacobian(di.AutoFiniteDiff(vectorized=True, closure="const", batch_size=3), counted, X, prep=None)
    assert calls[1:] == [(3, 4), (3, 4), (2, 4)]


def test_vectorized_results_match_the_closed_forms_and_the_executor_keeps_them_to_the_bit(executor):
    serial = di.AutoFiniteDiff(vectorized=True, batch_size=3)
    parallel = di.AutoFiniteDiff(vectorized=True, batch_size=3, executor=executor)
    for operator, f, args, expected in (
        ("jacobian", f_batch, (X,), jac_vec(X)),
        ("gradient", f_num_batch, (X,), grad_num(X)),
        ("hessian", f_num_batch, (X,), hess_num(X)),
    ):
        ours = getattr(di, operator)(serial, f, *args)
        np.testing.assert_allclose(ours, expected, rtol=1e-6, atol=1e-6)
        assert _same(getattr(di, operator)(parallel, f, *args), ours), operator


def test_a_vectorized_f_that_returns_the_wrong_shape_is_an_error():
    def first_only(xs: Any) -> Any:  # the value at the first point only: shape (4,) for any batch
        return np.sin(xs[0])

    with pytest.raises(ValueError, match=r"vectorized=True.*for 1 points it returned shape \(4,\).*vectorized=False"):
        di.jacobian(di.AutoFiniteDiff(vectorized=True), first_only, X)


def test_vectorized_refuses_an_output_buffer_and_a_structured_x():
    def writes(y: Any, xs: Any) -> None:
        y[...] = np.sin(xs)

    with pytest.raises(TypeError, match=r"vectorized=True.*writes its output into a buffer y"):
        di.jacobian(di.AutoFiniteDiff(vectorized=True), writes, X, y=np.zeros(4))
    with pytest.raises(TypeError, match=r"vectorized=True.*structured x"):
        di.gradient(di.AutoFiniteDiff(vectorized=True), lambda p: np.sum(p["a"]), {"a": X})


# -- what is shipped, and closures ---------------------------------------------------------------


class _Tally:
    """Counts its own pickling in this process, and writes the pid of each process that unpickles it."""

    pickled = 0

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> Any:
        type(self).pickled += 1
        return (_unpickle_tally, (self.path,))


def _unpickle_tally(path: str) -> _Tally:
    with open(path, "a") as fh:
        fh.write(f"{os.getpid()}\n")
    return _Tally(path)


@pytest.mark.parametrize("kind", ["processes", "dask"])
def test_f_is_pickled_once_per_call_and_loaded_once_per_worker(request, kind, tmp_path):
    executor = (
        request.getfixturevalue("processes")
        if kind == "processes"
        else request.getfixturevalue("dask_client").get_executor()
    )
    tally = _Tally(str(tmp_path / "loads"))

    def f(x: Any) -> Any:
        assert isinstance(tally, _Tally)
        return np.sin(x) * 2.0

    x = np.linspace(0.1, 1.0, 8)
    before = _Tally.pickled
    jac = di.jacobian(di.AutoFiniteDiff(executor=executor, closure="const"), f, x)  # 16 tasks
    assert _Tally.pickled - before == 1  # once for the call, not once per task
    loads = (tmp_path / "loads").read_text().split()
    assert 1 <= len(loads) <= 2 and len(set(loads)) == len(loads)  # once per worker process that ran a task
    assert os.getpid() not in map(int, loads)
    np.testing.assert_allclose(jac, np.diag(2 * np.cos(x)), atol=1e-9)


def test_captured_state_is_duplicated_on_every_worker_and_the_callers_is_untouched(executor):
    cache = np.zeros(4)
    log: list[float] = []

    def f(x: Any) -> Any:
        cache[:] = np.sin(x)  # a work buffer f writes into: it carries the derivative
        log.append(float(x[0]))
        return cache * np.sum(x)

    serial = di.jacobian(di.AutoFiniteDiff(), f, X)
    ours = di.jacobian(di.AutoFiniteDiff(executor=executor, batch_size=3), f, X)
    assert _same(ours, serial)
    np.testing.assert_allclose(ours, np.diag(np.cos(X)) * np.sum(X) + np.outer(np.sin(X), np.ones(4)), atol=1e-8)
    assert np.array_equal(cache, np.zeros(4)) and log == []


def test_a_structured_x_and_contexts_reach_the_workers(executor):
    def f(p: Any, scale: Any, work: Any) -> Any:
        work[:2] = p["a"] ** 2
        return np.sum(work[:2] * scale) + np.sum(np.sin(p["b"]))

    p = {"a": np.array([0.5, -1.0]), "b": np.array([0.2, 0.4, 0.6])}
    args = (p, di.Constant(np.array([2.0, 3.0])), di.Cache(np.zeros(2)))
    serial = di.gradient(di.AutoFiniteDiff(), f, *args)
    ours = di.gradient(di.AutoFiniteDiff(executor=executor), f, *args)
    assert _same(ours, serial)
    np.testing.assert_allclose(ours["a"], 2 * p["a"] * np.array([2.0, 3.0]), rtol=1e-8)


def test_an_f_that_cannot_be_pickled_is_an_error_that_says_what_to_do(processes):
    lock = threading.Lock()

    def f(x: Any) -> Any:
        with lock:
            return np.sin(x)

    with pytest.raises(TypeError, match=r"cannot be sent to the executor's workers.*ThreadPoolExecutor"):
        di.jacobian(di.AutoFiniteDiff(executor=processes), f, X)


# -- engines' arrays --------------------------------------------------------------------------


@pytest.mark.skipif(not installed("torch"), reason='torch is not installed: pip install "diffinterface[torch]"')
def test_torch_tensors_on_the_cluster(dask_client):
    import torch

    x = torch.tensor(X, dtype=torch.float32)
    backend = di.AutoFiniteDiff(executor=dask_client.get_executor(), batch_size=2)
    ours = di.jacobian(backend, torch.sin, x)
    assert _same(ours, di.jacobian(di.AutoFiniteDiff(), torch.sin, x)) and ours.dtype == torch.float32


@pytest.mark.skipif(not installed("jax"), reason='jax is not installed: pip install "diffinterface[jax]"')
def test_jax_float64_stays_float64_on_the_workers(dask_client):
    import jax.numpy as jnp

    from diffinterface._core.arrays import jax_enable_x64

    with jax_enable_x64()(True):
        x = jnp.asarray(X)
    backend = di.AutoFiniteDiff(executor=dask_client.get_executor(), batch_size=2)
    ours = di.gradient(backend, lambda z: jnp.sum(jnp.cos(z) * z**3), x)
    assert str(ours.dtype) == "float64"
    assert _same(ours, di.gradient(di.AutoFiniteDiff(), lambda z: jnp.sum(jnp.cos(z) * z**3), x))
    np.testing.assert_allclose(np.asarray(ours), grad_num(X), rtol=1e-8)


# -- failures ---------------------------------------------------------------------------------------


def test_an_exception_in_f_names_the_point_and_no_result_is_returned(executor):
    limit = X[2]

    def f(x: Any) -> Any:
        if x[2] > limit:
            raise ValueError(f"the solver diverged at x[2] = {x[2]}")
        return np.sin(x)

    with pytest.raises(di.EvaluationError) as caught:
        di.jacobian(di.AutoFiniteDiff(executor=executor), f, X)
    error = caught.value
    # central differences: points (x + h_0 e_0, x - h_0 e_0, x + h_1 e_1, ...): the fifth raised
    assert error.index == 4
    assert "f raised ValueError at point 4 of 8 (x + h_2 e_2)" in str(error) and "the solver diverged" in str(error)
    assert str(error).startswith("jacobian(AutoFiniteDiff(executor=")
    assert isinstance(error.__cause__, ValueError)
    assert error.point[2] > limit and np.array_equal(np.delete(error.point, 2), np.delete(X, 2))
    with pytest.raises(ValueError, match="diverged"):
        f(error.point)  # reproduces it here
    assert "ValueError" in error.remote_traceback


def test_an_executor_that_was_shut_down_is_an_error_that_names_the_call():
    pool = ThreadPoolExecutor(1)
    pool.shutdown()
    with pytest.raises(RuntimeError, match=r"^gradient\(AutoFiniteDiff\(executor=.*the executor refused the task"):
        di.gradient(di.AutoFiniteDiff(executor=pool), f_num, X)


def test_serially_f_raises_its_own_exception():
    def f(x: Any) -> Any:
        raise ZeroDivisionError("f's own")

    with pytest.raises(ZeroDivisionError, match="f's own"):
        di.gradient(di.AutoFiniteDiff(), f, X)


def test_a_worker_lost_mid_jacobian_is_retried_by_dask(tmp_path):
    distributed = pytest.importorskip("distributed", reason='Dask is not installed: pip install "diffinterface[dask]"')
    marker = str(tmp_path / "died")
    caller = os.getpid()

    def f(x: Any) -> Any:
        if os.getpid() != caller and x[1] > X[1] and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)  # the worker process dies in the middle of the Jacobian
        time.sleep(0.02)
        return f_vec(x)

    with (
        distributed.LocalCluster(**CLUSTER) as cluster,
        distributed.Client(cluster) as client,
    ):
        ours = di.jacobian(di.AutoFiniteDiff(executor=client.get_executor()), f, X)
    assert os.path.exists(marker)
    assert _same(ours, di.jacobian(di.AutoFiniteDiff(), f, X))


def test_a_process_pool_that_loses_a_worker_is_an_error(tmp_path):
    caller = os.getpid()

    def f(x: Any) -> Any:
        if os.getpid() != caller and x[1] > X[1]:
            os._exit(1)
        return f_vec(x)

    with ProcessPoolExecutor(2, mp_context=_spawn()) as pool:
        with pytest.raises(di.EvaluationError, match=r"the executor failed the task.*BrokenProcessPool") as caught:
            di.jacobian(di.AutoFiniteDiff(executor=pool), f, X)
    assert isinstance(caught.value.__cause__, BrokenProcessPool)


# -- DifferentiateWith: a cluster-evaluated simulator inside the engines' own code ----------------


def simulator(x: Any) -> Any:
    return np.sin(x) * np.sum(x)


@pytest.mark.parametrize("engine", ["jax", "torch", "autograd"])
def test_differentiate_with_a_cluster_inside_each_engine(dask_client, engine):
    if not installed(engine):
        pytest.skip(f'{engine} is not installed: pip install "diffinterface[{engine}]"')
    on_cluster = di.DifferentiateWith(simulator, di.AutoFiniteDiff(executor=dask_client.get_executor()))
    here = di.DifferentiateWith(simulator, di.AutoFiniteDiff())
    x = np.linspace(0.1, 1.0, 5)
    expected = 2 * (np.diag(np.cos(x)) * np.sum(x) + np.outer(np.sin(x), np.ones(5))).T @ simulator(x)
    if engine == "jax":
        import jax
        import jax.numpy as jnp

        from diffinterface._core.arrays import jax_enable_x64

        with jax_enable_x64()(True):
            grads = [jax.jit(jax.grad(lambda z, r=r: jnp.sum(r(z) ** 2)))(jnp.asarray(x)) for r in (on_cluster, here)]
        grads = [np.asarray(g) for g in grads]
    elif engine == "torch":
        import torch

        grads = []
        for rule in (on_cluster, here):
            xt = torch.tensor(x, requires_grad=True)
            (rule(xt) ** 2).sum().backward()
            grads.append(xt.grad.numpy())
    else:
        import autograd
        import autograd.numpy as anp

        grads = [autograd.grad(lambda z, r=r: anp.sum(r(z) ** 2))(x) for r in (on_cluster, here)]
    assert grads[0].dtype == np.float64 and np.array_equal(grads[0], grads[1])
    np.testing.assert_allclose(grads[0], expected, rtol=1e-7)


# -- the config -------------------------------------------------------------------------------------


def test_the_config_checks_its_fields(dask_client):
    with pytest.raises(TypeError, match=r"expected a concurrent.futures.Executor; pass client.get_executor\(\)"):
        di.AutoFiniteDiff(executor=dask_client)
    with pytest.raises(TypeError, match="expected a concurrent.futures.Executor such as"):
        di.AutoFiniteDiff(executor=map)
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        di.AutoFiniteDiff(batch_size=0)
    with pytest.raises(ValueError, match="vectorized must be one of"):
        di.AutoFiniteDiff(vectorized="yes")
    executor = dask_client.get_executor()
    assert di.AutoFiniteDiff(executor=executor) == di.AutoFiniteDiff(executor=executor)
    assert di.AutoFiniteDiff(executor=executor) != di.AutoFiniteDiff()
    assert "executor=" in repr(di.AutoFiniteDiff(executor=executor, batch_size=4))


def test_importing_diffinterface_imports_no_dask():
    code = (
        "import sys, diffinterface as di\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "with ThreadPoolExecutor(2) as ex:\n"
        "    di.gradient(di.AutoFiniteDiff(executor=ex), lambda x: (x ** 2).sum(), __import__('numpy').ones(3))\n"
        "print(sorted(m for m in ('dask', 'distributed', 'cloudpickle') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_guide_s_example_runs_as_a_script(tmp_path):
    """docs/distributed.md's example, run as the user runs it (a script with a __main__ guard), then
    checked against the serial Jacobian and central differences of its own simulator."""
    pytest.importorskip("distributed", reason='Dask is not installed: pip install "diffinterface[dask]"')
    guide = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "distributed.md").read_text()
    example = re.search(r"```python\n(.*?)```", guide, re.S).group(1)
    check = (
        "        serial = di.jacobian(di.AutoFiniteDiff(), simulate, np.linspace(0.5, 1.0, 6))\n"
        "        assert J.shape == (3, 6) and np.array_equal(J, serial), (J, serial)\n"
        "        print('ok')\n"
    )
    script = tmp_path / "example.py"
    script.write_text(example + check)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


@pytest.mark.skipif(not installed("jax"), reason='jax is not installed: pip install "diffinterface[jax]"')
def test_finite_differences_of_an_engine_s_gradient_on_a_thread_pool(threads):
    """SecondOrder(AutoFiniteDiff(executor=...), AutoJAX()): the outer differences of JAX's gradient run
    on the threads (JAX's float64 context entered in each), equal to the serial ones to the bit."""
    import jax.numpy as jnp

    def f(x: Any) -> Any:
        return jnp.sum(jnp.cos(x) * x**3)

    on_threads = di.hessian(di.SecondOrder(di.AutoFiniteDiff(executor=threads), di.AutoJAX()), f, X)
    serial = di.hessian(di.SecondOrder(di.AutoFiniteDiff(), di.AutoJAX()), f, X)
    assert on_threads.dtype == np.float64 and _same(on_threads, serial)
    np.testing.assert_allclose(on_threads, hess_num(X), rtol=1e-6, atol=1e-6)
