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


class LostDerivativeError(ValueError):
    """``f(x)`` depends on ``x`` through a step the engine cannot differentiate (``.detach()``,
    ``.item()``, a conversion to numpy, a write under ``torch.no_grad()``): every derivative would
    come out zero, so the call raises instead."""


LOST_CAUSES = (
    "The usual causes: .detach(), .item(), .tolist(), float(t), .numpy() or np.asarray/np.array of a "
    "traced value, torch.asarray(t) before torch 2.13 (it drops requires_grad there), a write under "
    "torch.no_grad(); compute f(x) from x with the engine's own operations throughout"
)


def structured_output_error(y: object, call: str) -> TypeError | None:
    """The error for an ``f`` that returns a tuple, list or dict, or None for anything else.

    Structured outputs are not supported yet (an engine would stack them, or drop their derivatives):
    every backend raises the same error rather than return a different answer each."""
    if not isinstance(y, (tuple, list, dict)):
        return None
    return structured_output(y, call)


def structured_output(y: tuple[Any, ...] | list | dict, call: str) -> TypeError:
    """:func:`structured_output_error` for a ``y`` known to be a tuple, list or dict."""
    kind = type(y).__name__
    what = f"a {kind} of {len(y)} items"
    return TypeError(
        f"{call}: f returned {what}, and outputs must be one array; structured outputs (tuples, lists, "
        f"dicts) are not supported yet. Return one array: xp.stack([...]) for items of one shape, "
        f"xp.concat([xp.reshape(a, (-1,)) for a in items]) otherwise"
    )
