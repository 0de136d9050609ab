"""Exceptions raised by diffinterface, and the one helper that formats their messages."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import numpy as np


class BackendNotAvailableError(ImportError):
    """The engine behind a backend config is not installed.

    Example:

        >>> issubclass(di.BackendNotAvailableError, ImportError)  # its message names the pip install line
        True
    """


class PreparationMismatchError(ValueError):
    """A prepared call received arguments that differ from the ones the prep was made for.

    Example:

        >>> f = lambda x: (x ** 2).sum()
        >>> prep = di.prepare_gradient(di.AutoFiniteDiff(), f, np.zeros(3))
        >>> try:
        ...     di.gradient(di.AutoFiniteDiff(), f, np.zeros(4), prep=prep)
        ... except di.PreparationMismatchError as error:
        ...     print(str(error).splitlines()[1])
          x: prepared for numpy float64 (3,); got numpy float64 (4,)   <- differs
    """


def call_repr(operator: str, backend: object, args: str = "f, x") -> str:
    """The prefix of every error message: the call as the user wrote it, e.g. ``gradient(AutoJAX(), f, x)``."""
    return f"{operator}({backend!r}, {args})"


class OutputShapeChanged(PreparationMismatchError):
    """A prepared call's ``f(x)`` no longer has the shape it had at preparation: what ``f`` captures
    changed shape since (a rebound matrix), and the prep's bases and reshapes were made for the old one.
    A prep given with ``prep=`` raises it; a prep the cache kept for calls without ``prep=`` is dropped
    and the call prepared again (``_frontend.pipeline.run``)."""


class EvaluationError(RuntimeError):
    """``f`` failed at a point sent to an executor, or the executor failed the task: no result.

    The points are those of ``AutoFiniteDiff(executor=...)``. ``index`` is the point's position among the
    call's points, ``point`` the point itself (``f(error.point)`` reproduces the failure here), and
    ``remote_traceback`` the worker's traceback where ``f`` raised; ``__cause__`` is ``f``'s exception
    where it could be sent back.

    Example:

        >>> from concurrent.futures import ThreadPoolExecutor
        >>> def f(x):
        ...     if x[1] > 1.0:
        ...         raise ValueError("the solver diverged")
        ...     return x ** 2
        >>> with ThreadPoolExecutor(2) as pool:
        ...     try:
        ...         di.jacobian(di.AutoFiniteDiff(executor=pool), f, np.array([0.5, 1.0]))
        ...     except di.EvaluationError as error:
        ...         print(error.index, error.point.round(3), type(error.__cause__).__name__)
        2 [0.5 1. ] ValueError
    """

    def __init__(self, message: str, index: int, point: Any, remote_traceback: str | None = None) -> None:
        super().__init__(message)
        self.index: int = index
        self.point: Any = point
        self.remote_traceback: str | None = remote_traceback

    def __reduce__(self) -> tuple[type[EvaluationError], tuple[str, int, Any, str | None]]:
        return (type(self), (str(self), self.index, self.point, self.remote_traceback))


class LostDerivativeError(ValueError):
    """``f(x)`` depends on ``x`` through a step the engine cannot differentiate.

    ``.detach()``, ``.item()``, a conversion to numpy, a write under ``torch.no_grad()``: every
    derivative would come out zero, so the call raises instead.

    Example:

        >>> try:
        ...     di.gradient(di.AutoTorch(), lambda x: (x.detach() ** 2).sum(), np.ones(2))
        ... except di.LostDerivativeError as error:
        ...     print(type(error).__name__)
        LostDerivativeError
    """


LOST_CAUSES = (
    "The usual causes: .detach(), .item(), .tolist(), float(t), .numpy() or np.asarray/np.array of a "
    "traced value, torch.asarray(t) before torch 2.13 (it drops requires_grad there), a write under "
    "torch.no_grad(); compute f(x) from x with the engine's own operations throughout"
)

# What a tracing engine's error for an f that needs x's values (a branch on them, float(), .item())
# offers besides the engine's own way: the engines that run f on values, and what each does with a
# value read out of its arrays (checked by tests/test_reliability.py)
RUNS_ON_VALUES = (
    "an engine that runs it on values: AutoTorch(), AutoTensorFlow(), AutoMLX() or AutoAutograd() (a "
    "comparison of its arrays, not float()) for a branch on x's values, AutoFiniteDiff() where a value read "
    "with float() or .item() reaches f(x) (the others raise there: its derivative would be lost)"
)


def floating_value(value: object) -> bool:
    """Whether ``value``, numpy's result from an engine's arrays, holds a floating or complex number
    (a numpy array or scalar, a Python float, inside lists and tuples): what a derivative could have
    reached, where indices, flags and shapes could not. An adapter records a read out of its engine
    (checked by :func:`escaped_error`) only for such a result."""
    if isinstance(value, (np.ndarray, np.generic)):
        return value.dtype.kind in "fc"
    if isinstance(value, (float, complex)):
        return True
    if isinstance(value, (list, tuple)):
        return any(floating_value(v) for v in value)
    return False


def escaped_error(
    call: str, engine: str, escapes: list[str], ad: float, fd: float, fd2: float, noise: float, eps: float, keep: str
) -> LostDerivativeError | None:
    """The call's error where a value read out of the engine (``escapes``: ``.item()``, numpy's function
    of an array) reached ``f(x)``: the engine's derivative along a random direction, ``ad``, against
    central differences of ``f`` along it at two steps (``fd`` at ``h``, ``fd2`` at ``2 h``: their
    difference bounds the truncation error, so a kink or a branch switch inside the step widens the
    tolerance instead of raising), ``noise`` the rounding in the difference, ``eps`` the dtype's. None
    where they agree: a read that only steers control flow. ``keep``: what such a value must stay
    (``"a tensor"``). The check torch's, TensorFlow's and MLX's adapters make after a call with a read."""
    tolerance = 4 * abs(fd - fd2) + 10 * noise + eps**0.5 * (abs(ad) + abs(fd))
    if abs(ad - fd) <= tolerance:  # NaN: not within, the error
        return None
    found = f"along a random direction {engine}'s derivative is {ad:.6g}, a central difference of f gives {fd:.6g}"
    return lost_on_the_way(call, escapes, found, keep)


def lost_on_the_way(call: str, escapes: list[str], found: str, keep: str) -> LostDerivativeError:
    """The error of a call where values read out of the engine (``escapes``) lost ``f(x)``'s derivative,
    ``found`` saying how it showed (:func:`escaped_error`'s disagreement, or the engine's own refusal),
    ``keep`` what such a value must stay (``"a tensor"``)."""
    where = ", ".join(dict.fromkeys(escapes))
    return LostDerivativeError(
        f"{call}: f(x) is computed from x, but its derivative was lost on the way ({where}): {found}. A value "
        f"read into Python or numpy that only steers control flow is fine; one that reaches f(x) must stay "
        f"{keep}. {LOST_CAUSES}."
    )


class StructuredOutputError(TypeError):
    """``f`` returned a tuple, list or dict where an engine needs one array. The frontend turns
    such outputs into one vector (``diffinterface._core.structure``) and prepares again; the error reaches
    the user only where that cannot apply (AutoSparse, a rule's primal)."""


def structured_output_error(y: object, call: str) -> StructuredOutputError | None:
    """The error for an ``f`` that returns a tuple, list or dict, or None for anything else."""
    if not isinstance(y, (tuple, list, dict)):
        return None
    return structured_output(y, call)


def structured_output(y: tuple[Any, ...] | list | dict, call: str) -> StructuredOutputError:
    """:func:`structured_output_error` for a ``y`` known to be a tuple, list or dict."""
    kind = type(y).__name__
    return StructuredOutputError(
        f"{call}: f returned a {kind} of {len(y)} items where one array is needed. Return one array: "
        f"xp.stack([...]) for items of one shape, xp.concat([xp.reshape(a, (-1,)) for a in items]) otherwise"
    )


# -- errors raised inside an engine's host callbacks ------------------------------------------------------
#
# JAX runs an opaque rule's body (a DifferentiateWith's inner backend, a rule on numpy) as a host callback
# and reports an exception raised there as its own runtime error, whose text holds the traceback: the
# body's error, which names its call ("pushforward(AutoAutograd(), f, x, tx): neither mode is available
# ..."), reaches the user as "INTERNAL: CpuCallback error calling callback". The callback keeps the error
# (keep_host_error) and raises one whose message is a token; the adapter's runner, given the engine's
# error, finds the token in its text and raises the kept error instead (host_error). Bounded: the oldest
# go first (an engine that swallowed its callback's error leaves its own behind).

_HOST_ERRORS: dict[int, BaseException] = {}
_HOST_ERRORS_MAX = 64
_HOST_TOKEN = "diffinterface host error #"
_host_lock = threading.Lock()
_host_count = itertools.count()
_host_traced = [0]  # host callbacks traced (note_host_callback), for host_callbacks()


class HostCallbackError(RuntimeError):
    """What a host callback raises in place of its body's error (kept for the call, :func:`host_error`)."""


def keep_host_error(error: BaseException) -> HostCallbackError:
    """Keep ``error``, raised in a host callback's body, for the call that the engine fails with it, and
    return the exception the callback raises instead (raise it ``from error``): its message carries the
    token that :func:`host_error` finds in the engine's report."""
    with _host_lock:
        key = next(_host_count)
        _HOST_ERRORS[key] = error
        while len(_HOST_ERRORS) > _HOST_ERRORS_MAX:
            del _HOST_ERRORS[next(iter(_HOST_ERRORS))]
    return HostCallbackError(f"{_HOST_TOKEN}{key}: {type(error).__name__}: {error}")


def host_error(error: BaseException) -> BaseException | None:
    """The error a host callback kept (:func:`keep_host_error`) whose token is in the text of ``error``,
    the engine's report of it, taken out of the keep; None where ``error`` reports none."""
    text = str(error)
    at = text.find(_HOST_TOKEN)
    if at < 0:
        return None
    digits = text[at + len(_HOST_TOKEN) :].split(":", 1)[0]
    if not digits.isdigit():
        return None
    with _host_lock:
        return _HOST_ERRORS.pop(int(digits), None)


def note_host_callback() -> None:
    """Called where an engine traces a host callback: :func:`host_callbacks` counts it."""
    with _host_lock:
        _host_traced[0] += 1


def host_callbacks() -> int:
    """How many host callbacks were traced so far (:func:`note_host_callback`): an adapter that compares
    the count before and after tracing ``f`` knows whether its runners can meet a host callback's error."""
    return _host_traced[0]
