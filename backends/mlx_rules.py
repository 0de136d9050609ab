"""A :class:`diffinterface.rules.Rule` under MLX: one ``mx.custom_function`` with a ``vjp`` (the reverse
pass on the tape of the augmented primal, run again inside the VJP: MLX hands a custom VJP the
primals and the output, not a residual of the forward call) and a ``jvp`` (the forward rule).

An opaque rule's bodies get numpy arrays (MLX arrays are converted; their results come back as MLX
arrays of the primal's dtype); an array-API rule's bodies get the MLX arrays themselves, so MLX
differentiates its rules again where an outer transformation asks (a second derivative). MLX hands
no activity to a custom VJP (every argument is passed as ``Active`` there); a custom JVP gets None
as the tangent of an argument that is not pushed (``Const`` there).

An opaque rule cannot be differentiated twice (its rules run on numpy): inside the second-order
operators of ``AutoMLX`` it raises ``SecondOrderError`` (:data:`SECOND_ORDER` is set there). MLX
refuses an opaque body inside ``mx.compile`` and ``mx.vmap`` (it reads values); the adapter then runs
the operator eagerly.
"""

from __future__ import annotations

import contextvars
from typing import Any

import mlx.core as mx
import numpy as np

from diffinterface.extend import (
    Active,
    Rule,
    annotate,
    cotangents,
    positive_strides,
)

# set by the adapter while a second-order operator runs: an opaque rule's derivatives cannot be
# differentiated again there (they are computed on numpy arrays)
SECOND_ORDER: contextvars.ContextVar[bool] = contextvars.ContextVar("diffinterface_mlx_second_order", default=False)

_KEY = ("mlx", ())  # the registration's key without keywords


def call(rule: Rule, args: tuple[Any, ...], kwargs: dict[Any, Any]) -> Any:
    key = ("mlx", tuple(sorted(kwargs.items()))) if kwargs else _KEY
    fn = rule.native(key, lambda: _register(rule, kwargs))
    like = next(a for a in args if isinstance(a, mx.array))
    return fn(*[a if isinstance(a, mx.array) else _as_mx(a, like.dtype) for a in args])


def _np_dtype(dtype: Any) -> Any:
    return np.dtype(str(dtype).rpartition(".")[2])


def _as_mx(value: Any, dtype: Any, shape: Any = None) -> Any:
    """A body's result as an MLX array of ``dtype`` (and ``shape``)."""
    if not isinstance(value, mx.array):
        value = mx.array(positive_strides(np.asarray(value, dtype=_np_dtype(dtype))), dtype=dtype)  # x[::-1]: copied
    elif value.dtype != dtype:
        value = value.astype(dtype)
    return value if shape is None or tuple(value.shape) == tuple(shape) else mx.reshape(value, shape)


def _tuple(values: Any) -> tuple[Any, ...]:
    """MLX passes a custom function's one argument bare, several as a sequence."""
    return (values,) if isinstance(values, mx.array) else tuple(values)


def _register(rule: Rule, kwargs: dict[Any, Any]) -> Any:
    def body(values: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(np.asarray(v) for v in values) if rule.opaque else values

    def check_order(where: str) -> None:
        if rule.opaque and SECOND_ORDER.get():
            raise rule.second_order(f"{where} under MLX", "AutoMLX()")

    def primal(*args: Any) -> Any:
        out = rule.primal(*body(args), **kwargs)
        return _as_mx(out, args[0].dtype if not isinstance(out, mx.array) else out.dtype)

    primal.__name__ = rule.__name__
    fn = mx.custom_function(primal)

    def vjp(primals: Any, cotangent: Any, output: Any) -> Any:
        if rule.reverse is None:
            raise rule.missing("reverse", "under MLX")
        check_order("its reverse pass")
        primals = _tuple(primals)
        values = body(primals)
        active = (True,) * len(values)
        args = annotate(values, active, Active)
        tape = rule.augment(*args, **kwargs)[1] if rule.augmented_primal is not None else None
        ct = np.asarray(cotangent) if rule.opaque else cotangent
        cts = cotangents(rule.reverse(tape, ct, *args, **kwargs), len(values))
        out = tuple(
            mx.zeros_like(p) if c is None else _as_mx(c, p.dtype, p.shape) for c, p in zip(cts, primals, strict=True)
        )
        return out[0] if len(out) == 1 else out

    def jvp(primals: Any, tangents: Any) -> Any:
        if not rule.has_forward:
            raise rule.missing("forward", "under MLX")
        check_order("its forward rule")
        primals = _tuple(primals)
        tangents = (tangents,) if isinstance(tangents, mx.array) or tangents is None else tuple(tangents)
        active = tuple(t is not None for t in tangents)  # MLX passes None for an argument it does not push
        values = body(primals)
        ts = tuple(None if t is None else (np.asarray(t) if rule.opaque else t) for t in tangents)
        _, dy = rule.forward(*annotate(values, active, Active, ts), **kwargs)
        return _as_mx(dy, primals[0].dtype)

    fn.vjp(vjp)
    fn.jvp(jvp)
    return fn
