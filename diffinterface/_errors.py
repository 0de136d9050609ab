"""Exceptions raised by diffinterface, and the one helper that formats their messages."""

from __future__ import annotations

from typing import Any


class BackendNotAvailableError(ImportError):
    """The engine behind a backend config is not installed."""


class PreparationMismatchError(ValueError):
    """A prepared call received arguments that differ from the ones the prep was made for."""


def call_repr(operator: str, backend: object, args: str = "f, x") -> str:
    """The prefix of every error message: the call as the user wrote it, e.g. ``gradient(AutoJAX(), f, x)``."""
    return f"{operator}({backend!r}, {args})"


class EvaluationError(RuntimeError):
    """``f`` failed at one of the points that ``AutoFiniteDiff(executor=...)`` sent to an executor, or
    the executor failed the task: no result is returned. ``index`` is the point's position among the
    call's points, ``point`` the point itself (``f(error.point)`` reproduces the failure here), and
    ``remote_traceback`` the worker's traceback where ``f`` raised; ``__cause__`` is ``f``'s exception
    where it could be sent back."""

    def __init__(self, message: str, index: int, point: Any, remote_traceback: str | None = None) -> None:
        super().__init__(message)
        self.index, self.point, self.remote_traceback = index, point, remote_traceback

    def __reduce__(self) -> Any:
        return (type(self), (str(self), self.index, self.point, self.remote_traceback))


class LostDerivativeError(ValueError):
    """``f(x)`` depends on ``x`` through a step the engine cannot differentiate (``.detach()``,
    ``.item()``, a conversion to numpy, a write under ``torch.no_grad()``): every derivative would
    come out zero, so the call raises instead."""


LOST_CAUSES = (
    "The usual causes: .detach(), .item(), .tolist(), float(t), .numpy() or np.asarray/np.array of a "
    "traced value, torch.asarray(t) before torch 2.13 (it drops requires_grad there), a write under "
    "torch.no_grad(); compute f(x) from x with the engine's own operations throughout"
)


class StructuredOutputError(TypeError):
    """``f`` returned a tuple, list or dict where an engine needs one array. The frontend turns
    such outputs into one vector (``diffinterface._structure``) and prepares again; the error reaches
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
