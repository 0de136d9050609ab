"""Evaluations of ``f`` at many points, here or on a ``concurrent.futures.Executor`` (issue 18).

A finite-difference call knows all its points before it evaluates ``f`` at any of them. It
describes them to this module as a *job* and a list of *recipes*: the job holds what an evaluation
needs (``f`` as adapters call it, the contexts, ``x`` and the few vectors the points are made of),
a recipe says how one point is made from them (``backends/finitediff.py``: ``_Job``, ``_PointSet``).
The same job code evaluates a recipe here and on a worker, so a result is the serial one to the bit
(same points, built by the same code, combined by the caller in the same order).

- No executor: a vectorized ``f`` is called once per batch, lazily as the caller combines the values
  (a plain ``f`` never comes here: the adapter maps it over the points it builds with the same
  builder); ``f``'s exceptions are raised as they are.
- An executor: the recipes go out in tasks of ``batch_size``. The job is pickled once per call
  (``cloudpickle`` where installed, so closures and lambdas travel; else ``pickle``) and loaded once per
  worker process (a small cache keyed by the call's token). Dask's ``ClientExecutor`` gets it by
  ``client.scatter(..., broadcast=True)``: each worker receives it once, and a worker that dies does
  not take the only copy with it (Dask reschedules the dead worker's tasks). Other executors carry
  the pickled bytes in every task (``batch_size`` amortises that). A ``ThreadPoolExecutor`` runs in
  this process: the job is passed as it is, unpickled.
- Arrays cross processes in the dtype they have: a worker unpickles the job, and the caller the
  values, inside the context in which x's library keeps x's dtype (``job.environment``; JAX
  unpickles a float64 array as float32 where x64 is off, which made a float64 gradient 5% wrong).
- The caller receives every value or none: an exception in ``f`` at a point comes back as a
  :class:`EvaluationError` naming the point (its index, how it is made, the point itself in
  ``error.point``), with ``f``'s exception as its cause; a task the executor itself failed (a
  process pool whose worker died, a Dask ``KilledWorker``) is an :class:`EvaluationError` too. The
  other tasks are cancelled.
"""

from __future__ import annotations

import collections
import concurrent.futures
import pickle
import sys
import threading
import traceback
import uuid
from collections.abc import Iterable
from itertools import chain
from typing import Any, Protocol

from diffinterface.extend import (
    EvaluationError,
)


class Job(Protocol):
    """What this module needs from a caller's job (``backends/finitediff.py``: ``_Job``)."""

    vectorized: bool

    def one(self, recipe: Any) -> Any: ...  # f at one point

    def batch(self, recipes: list[Any]) -> list[Any]: ...  # a vectorized f at several points, one call

    @property
    def environment(self) -> Any: ...  # see _task

    def point(self, recipe: Any) -> Any: ...  # the point itself (for an error)

    def describe(self, recipe: Any) -> str: ...  # how the point is made, in words


def evaluations(job: Job, recipes: list[Any], executor: Any, batch_size: int | None, call: str) -> Iterable[Any]:
    """The values of ``f`` at the points of ``recipes``, in their order: on ``executor``, or without
    one for a vectorized ``f`` (``job.vectorized``)."""
    if executor is None:
        size = batch_size or max(len(recipes), 1)
        return chain.from_iterable(job.batch(recipes[s : s + size]) for s in range(0, len(recipes), size))
    if not recipes:
        return []
    return _on_executor(job, recipes, executor, batch_size or 1, call)


class _Failure:
    """What a task returns when ``f`` raised at one of its points: picklable whatever ``f`` raised."""

    __slots__ = ("index", "count", "kind", "message", "remote", "cause")

    def __init__(self, index: int, count: int, error: BaseException) -> None:
        self.index, self.count = index, count  # the point (count 1), or the batch of a vectorized f
        self.kind = f"{type(error).__module__}.{type(error).__qualname__}".removeprefix("builtins.")
        self.message = str(error)
        self.remote = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        try:
            self.cause: bytes | None = pickle.dumps(error)
        except Exception:  # noqa: BLE001 - an exception that does not pickle still reaches the caller as text
            self.cause = None


def _task(payload: Any, environment: Any, token: str, start: int, recipes: list[Any]) -> list[Any] | bytes | _Failure:
    """One task, run by a worker: the values at ``recipes`` (the points ``start``, ``start + 1``, ...).

    ``environment()`` is the context in which x's library keeps x's dtype (a picklable callable): the
    worker unpickles the job inside it, as JAX unpickles a float64 array as float32 where x64 is off."""
    with environment():
        job = _load(token, payload)
        if job.vectorized:
            try:
                values = job.batch(recipes)
            except Exception as error:  # noqa: BLE001 - reported to the caller with the batch's points
                return _Failure(start, len(recipes), error)
        else:
            values = []
            for k, recipe in enumerate(recipes):
                try:
                    values.append(job.one(recipe))
                except Exception as error:  # noqa: BLE001 - reported to the caller with the point
                    return _Failure(start + k, 1, error)
    # pickled here, unpickled by the caller inside the environment (the executor's own unpickling of
    # a result runs outside it: JAX's float64 values came back float32)
    return values if not isinstance(payload, bytes) else pickle.dumps(values)


_LOADED: collections.OrderedDict[str, Any] = collections.OrderedDict()
_LOADED_LOCK = threading.Lock()
_KEEP = 4  # jobs kept loaded per worker process: the calls in flight at once, a few


def _load(token: str, payload: Any) -> Any:
    """The job of a call: ``payload`` itself in this process (a thread pool), else unpickled once per
    worker process and kept while the call is among the last few."""
    if not isinstance(payload, bytes):
        return payload
    with _LOADED_LOCK:
        job = _LOADED.get(token)
        if job is not None:
            _LOADED.move_to_end(token)
            return job
    job = pickle.loads(payload)
    with _LOADED_LOCK:
        job = _LOADED.setdefault(token, job)
        while len(_LOADED) > _KEEP:
            _LOADED.popitem(last=False)
    return job


def _dumps(job: Job, call: str) -> bytes:
    try:
        import cloudpickle  # a dependency of Dask: closures and lambdas pickle by value
    except ModuleNotFoundError:
        dumps = pickle.dumps
    else:
        dumps = cloudpickle.dumps
    try:
        return dumps(job)
    except Exception as error:
        raise TypeError(
            f"{call}: f, its captured state or its contexts cannot be sent to the executor's workers "
            f"({type(error).__name__}: {error}); make them picklable (install cloudpickle for closures and "
            f"lambdas), or use a ThreadPoolExecutor, which runs f in this process"
        ) from error


def _dask_client(executor: Any) -> Any:
    """The Dask client behind ``client.get_executor()``, or None (Dask is not imported to find out)."""
    module = sys.modules.get("distributed.cfexecutor")
    kind = getattr(module, "ClientExecutor", None)
    if kind is not None and isinstance(executor, kind):
        return executor._client
    return None


def _on_executor(job: Job, recipes: list[Any], executor: Any, size: int, call: str) -> list[Any]:
    starts = range(0, len(recipes), size)
    payload: Any = job
    if not isinstance(executor, concurrent.futures.ThreadPoolExecutor):
        payload = _dumps(job, call)
        client = _dask_client(executor)
        if client is not None:
            payload = client.scatter(payload, broadcast=True, hash=False)
    token = uuid.uuid4().hex
    environment = job.environment
    futures: dict[Any, int] = {}
    done: dict[int, list[Any]] = {}
    try:
        for s in starts:
            try:
                futures[executor.submit(_task, payload, environment, token, s, recipes[s : s + size])] = s
            except RuntimeError as error:  # an executor that was shut down
                raise RuntimeError(
                    f"{call}: the executor refused the task of points {s} to {min(s + size, len(recipes)) - 1} "
                    f"({error}); pass an executor that is running (not shut down, not broken)"
                ) from error
        for future in concurrent.futures.as_completed(futures):
            start = futures[future]
            try:
                values = future.result()
            except Exception as error:
                last = min(start + size, len(recipes)) - 1
                raise EvaluationError(
                    f"{call}: the executor failed the task that evaluates f at points {start} to {last} of "
                    f"{len(recipes)} ({type(error).__name__}: {error}); no result is returned. Dask reschedules "
                    f"the tasks of a worker that died; a process pool cannot (it is broken from then on)",
                    index=start,
                    point=job.point(recipes[start]),
                ) from error
            if isinstance(values, _Failure):
                raise _failure_error(values, job, recipes, call)
            if isinstance(values, bytes):
                with environment():
                    values = pickle.loads(values)
            done[start] = values
    finally:
        for future in futures:
            future.cancel()
    return list(chain.from_iterable(done[s] for s in starts))


def _failure_error(failure: _Failure, job: Job, recipes: list[Any], call: str) -> EvaluationError:
    recipe = recipes[failure.index]
    if failure.count == 1:
        where = f"point {failure.index} of {len(recipes)} ({job.describe(recipe)})"
    else:
        where = f"the batch of points {failure.index} to {failure.index + failure.count - 1} of {len(recipes)}"
    error = EvaluationError(
        f"{call}: f raised {failure.kind} at {where} on the executor: {failure.message}; no result is "
        f"returned. error.point is the point (call f(error.point) to reproduce it here); the worker's "
        f"traceback is error.remote_traceback",
        index=failure.index,
        point=job.point(recipe),
        remote_traceback=failure.remote,
    )
    if failure.cause is not None:
        try:
            error.__cause__ = pickle.loads(failure.cause)
        except Exception:  # noqa: BLE001 - an exception class this process cannot import: the text stays
            pass
    return error
