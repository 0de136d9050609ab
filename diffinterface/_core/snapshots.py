"""Copies of values that later writes do not reach, compared exactly: the test harness's check that a
call left its inputs and the captured state as they were, and AutoSparse's check that what a pattern
was detected over is unchanged (``diffinterface.sparse._adapter``)."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from .arrays import NUMPY, family, to_family
from .contexts import Context


def snapshot(value: Any) -> tuple[Any, ...]:
    """A tagged deep copy of ``value`` that :func:`unchanged` compares exactly (NaN equal to NaN): a
    context's value, a sequence's or a mapping's items one by one, an array's values in numpy, anything
    else deep-copied (``copy.deepcopy``'s error where it has no copy)."""
    if isinstance(value, Context):
        return ("context", type(value), snapshot(value.value))
    if isinstance(value, (list, tuple)):
        return ("sequence", type(value), [snapshot(v) for v in value])
    if isinstance(value, dict):
        return ("mapping", type(value), {k: snapshot(v) for k, v in value.items()})
    if family(value) is not None and not isinstance(value, (float, int)):
        return ("array", type(value), np.array(to_family(value, NUMPY), copy=True))
    return ("object", type(value), copy.deepcopy(value))


def unchanged(kept: tuple[Any, ...], value: Any) -> bool:
    """Whether ``value`` is of the types and values :func:`snapshot` kept (an object's ``==``, whose
    error is raised where it gives no single answer)."""
    kind, kept_type, u = kept
    if type(value) is not kept_type:
        return False
    if kind == "context":
        return unchanged(u, value.value)
    if kind == "sequence":
        return len(u) == len(value) and all(unchanged(p, q) for p, q in zip(u, value))
    if kind == "mapping":
        return u.keys() == value.keys() and all(unchanged(u[k], value[k]) for k in u)
    if kind == "array":
        v = np.asarray(to_family(value, NUMPY))
        return u.shape == v.shape and u.dtype == v.dtype and np.array_equal(u, v, equal_nan=True)
    return bool(u == value)
