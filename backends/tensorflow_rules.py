"""A :class:`diffinterface.rules.Rule` under TensorFlow: one ``tf.custom_gradient`` whose gradient
function (the rule's reverse pass) is itself a ``tf.custom_gradient`` of the cotangent, with the
rule's forward pass as its gradient.

TensorFlow's forward mode (``tf.autodiff.ForwardAccumulator``) computes a JVP by differentiating the
gradient function with respect to its cotangent (``J t`` is the derivative of ``J^T u`` in ``u``
along ``t``): that derivative is the rule's forward pass, so one registration serves tapes and
accumulators alike, eagerly and inside ``tf.function``.

Opaque bodies get NumPy arrays: eagerly directly, inside a graph through ``tf.numpy_function`` (the
output's shape from ``out_shape``, else from the primal run once on random inputs); the reverse pass
runs the augmented primal again for its tape (a tape of Python data cannot cross a graph). Which
arguments are active: those a tape records or one of the adapter's accumulators carries (all
floating tensors where none is known: an accumulator of the user's own).

Second derivatives through a rule raise ``SecondOrderError``: the reverse pass is registered with a
gradient in its cotangent only, so differentiating it in the arguments would miss the rule's own
curvature.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import record as _record

from diffinterface.extend import Active, Rule, annotate, cotangent_like, cotangents, keep_host_error

from .tensorflow import _RECORDER, _carries, _Eager, _Tensor

_PROBE = np.random.default_rng(20)


def _is_tensor(value: Any) -> bool:
    return isinstance(value, (_Tensor, tf.Variable))


def _floating(value: Any) -> bool:
    return _is_tensor(value) and (value.dtype.is_floating or value.dtype.is_complex)


class GraphForwardError(NotImplementedError):
    """A rule met by a forward accumulator while a graph is traced: TensorFlow's accumulator then
    takes the gradient override of ``tf.custom_gradient`` for an identity and its tangent would be
    lost (zeros), so the adapter's ``tf.function`` refuses the trace and runs eagerly instead."""


def call(rule: Rule, args: tuple[Any, ...], kwargs: dict[Any, Any]) -> Any:
    args = tuple(a.read_value() if isinstance(a, tf.Variable) else a for a in args)
    if _RECORDER.accumulators and not _eager(args):
        raise GraphForwardError(f"{rule.__name__}: forward mode through a custom rule inside a graph")
    active = tuple(_floating(a) and _carries(a) for a in args)
    if not any(active):
        active = tuple(_floating(a) for a in args)
    if not any(active):
        return _primal(rule, args, kwargs)
    injected = _forward_injected(rule, args, active, kwargs)
    if injected is not None:
        return injected
    positions = [i for i, a in enumerate(active) if a]

    def full(values: Any) -> tuple[Any, ...]:
        out = list(args)
        for i, v in zip(positions, values):
            out[i] = v
        return tuple(out)

    @tf.custom_gradient
    def op(*diff: Any) -> Any:
        values = full(diff)
        y = _primal(rule, values, kwargs)

        def grad(u: Any) -> Any:
            if rule.reverse is None:
                raise rule.missing("reverse", "under TensorFlow")
            if _record.should_record_backprop([u, *diff]) and _outer(diff):
                raise rule.second_order("under TensorFlow", "AutoTensorFlow()")

            @tf.custom_gradient
            def reverse(u: Any) -> Any:
                cts = _reverse(rule, values, active, u, kwargs)

                def forward(*ws: Any) -> Any:
                    if not rule.has_forward:
                        raise rule.missing("forward", "under TensorFlow")
                    return _forward(rule, values, active, ws, y, kwargs)

                return cts, forward

            return reverse(u)

        return y, grad

    return op(*[args[i] for i in positions])


def _forward_injected(rule: Rule, args: tuple[Any, ...], active: tuple[Any, ...], kwargs: dict[Any, Any]) -> Any:
    """Under one of the adapter's forward accumulators and no tape (eagerly: the adapter's fallback for
    a rule without a reverse pass, which TensorFlow's transpose trick needs), the rule's forward pass
    run directly: ``y + dy * <w, a - stop_gradient(a)>`` with ``<w, t> = 1`` has the value ``y`` and
    the accumulator's JVP ``dy``. None where this does not apply."""
    if not rule.has_forward or not _eager(args):
        return None
    floating = [a for a in args if _floating(a)]
    if any(_record.should_record_backprop([a]) for a in floating):
        return None
    accs = [acc for acc in _RECORDER.accumulators if any(acc.jvp(a) is not None for a in floating)]
    if not accs:
        return None
    if len(accs) > 1:
        raise rule.second_order("under TensorFlow", "AutoTensorFlow()")
    acc = accs[0]
    tangents = [acc.jvp(a) if live and _floating(a) else None for a, live in zip(args, active)]
    tangents = [tf.zeros_like(a) if live and t is None else t for a, t, live in zip(args, tangents, active)]
    plain = tuple(tf.stop_gradient(a) if _floating(a) else a for a in args)
    if rule.opaque:
        ts = tuple(None if t is None else np.asarray(t) for t in tangents)
        y, dy = rule.forward(*annotate(tuple(map(_np, plain)), active, Active, ts), **kwargs)
        y, dy = tf.convert_to_tensor(np.asarray(y)), tf.convert_to_tensor(np.asarray(dy))
    else:
        y, dy = rule.forward(*annotate(plain, active, Active, tuple(tangents)), **kwargs)
    norm = sum(float(tf.reduce_sum(tf.abs(t) ** 2)) for t in tangents if t is not None)
    if norm == 0.0:
        return tf.stop_gradient(y)
    pairing = tf.add_n(
        [
            tf.reduce_sum(tf.stop_gradient(t) / norm * (a - tf.stop_gradient(a)))
            for a, t in zip(args, tangents)
            if t is not None
        ]
    )
    return tf.stop_gradient(y) + tf.cast(tf.stop_gradient(dy), y.dtype) * tf.cast(pairing, y.dtype)


def _outer(diff: tuple[Any, ...]) -> bool:
    """Whether the rule's arguments are recorded by a tape while its reverse pass runs: an outer
    derivative of the reverse pass (a second derivative), not the pass itself."""
    return any(_record.should_record_backprop([d]) for d in diff)


def _eager(values: tuple[Any, ...]) -> bool:
    return all(not _is_tensor(v) or isinstance(v, _Eager) for v in values)


def _np(value: Any) -> Any:
    return np.asarray(value) if _is_tensor(value) else value


def _host(fn: Any, values: tuple[Any, ...], outs: list[tuple[Any, Any]]) -> list[Any]:
    """``fn(*numpy values) -> list of arrays`` on NumPy: eagerly, or through ``tf.numpy_function``
    inside a graph (``outs``: each output's shape and TensorFlow dtype)."""
    if _eager(values):
        return [
            tf.convert_to_tensor(np.asarray(r, dtype=d.as_numpy_dtype))
            for r, (_, d) in zip(fn(*map(_np, values)), outs)
        ]
    where = [i for i, v in enumerate(values) if _is_tensor(v)]

    def host(*tensors: Any) -> Any:
        vals = list(values)
        for i, t in zip(where, tensors):
            vals[i] = t
        try:
            results = fn(*vals)
        except Exception as error:  # TensorFlow reports it as its own error: kept for the call (keep_host_error)
            raise keep_host_error(error) from error
        return [np.asarray(r, dtype=d.as_numpy_dtype) for r, (_, d) in zip(results, outs)]

    results = tf.numpy_function(host, [values[i] for i in where], [d for _, d in outs], stateful=False)
    for r, (shape, _) in zip(results, outs):
        r.set_shape(shape)
    return list(results)


def _out(rule: Rule, values: tuple[Any, ...], kwargs: dict[Any, Any]) -> tuple[Any, Any]:
    """The primal's output shape and TensorFlow dtype (``out_shape``, else one run on random inputs)."""
    shapes = tuple((tuple(v.shape), v.dtype.as_numpy_dtype) if _is_tensor(v) else (None, None) for v in values)
    key = ("tensorflow-out", shapes, tuple(sorted(kwargs.items())))

    def build() -> Any:
        if rule.out_shape is not None:
            structs = tuple(_Struct(s, d) if s is not None else v for (s, d), v in zip(shapes, values))
            shape, dtype = rule.out_shape(*structs, **kwargs)
        else:
            probes = [_PROBE.standard_normal(s).astype(d) if s is not None else v for (s, d), v in zip(shapes, values)]
            y = np.asarray(rule.primal(*probes, **kwargs))
            shape, dtype = y.shape, y.dtype
        return tuple(shape), tf.as_dtype(np.dtype(dtype))

    return rule.native(key, build)


class _Struct:
    """An argument's shape and dtype, as ``out_shape`` receives it."""

    def __init__(self, shape: Any, dtype: Any) -> None:
        self.shape, self.dtype = shape, dtype


def _primal(rule: Rule, values: tuple[Any, ...], kwargs: dict[Any, Any]) -> Any:
    if not rule.opaque:
        return rule.primal(*values, **kwargs)
    out = _out(rule, values, kwargs) if not _eager(values) else None
    if out is None:
        y = np.asarray(rule.primal(*map(_np, values), **kwargs))
        return tf.convert_to_tensor(y)
    return _host(lambda *v: [rule.primal(*v, **kwargs)], values, [out])[0]


def _reverse(rule: Rule, values: tuple[Any, ...], active: tuple[Any, ...], u: Any, kwargs: dict[Any, Any]) -> list[Any]:
    n = len(values)
    live = [i for i, a in enumerate(active) if a]
    if not rule.opaque:
        marked = annotate(values, active, Active)
        cts = cotangents(rule.reverse(rule.tape(*marked, **kwargs), u, *marked, **kwargs), n)
        return [tf.zeros_like(values[i]) if cts[i] is None else tf.cast(cts[i], values[i].dtype) for i in live]

    def host(*vals: Any) -> list[Any]:
        *args, dy = vals
        marked = annotate(tuple(args), active, Active)
        cts = cotangents(rule.reverse(rule.tape(*marked, **kwargs), dy, *marked, **kwargs), n)
        return [cotangent_like(cts[i], args[i]) for i in live]

    outs = [(tuple(values[i].shape), values[i].dtype) for i in live]
    return _host(host, (*values, u), outs)


def _forward(
    rule: Rule, values: tuple[Any, ...], active: tuple[Any, ...], ws: tuple[Any, ...], y: Any, kwargs: dict[Any, Any]
) -> Any:
    it = iter(ws)
    tangents = tuple(next(it) if a else None for a in active)
    if not rule.opaque:
        _, dy = rule.forward(*annotate(values, active, Active, tangents), **kwargs)
        return tf.cast(dy, y.dtype)
    where = [i for i, a in enumerate(active) if a]

    def host(*vals: Any) -> list[Any]:
        args, ts = vals[: len(values)], vals[len(values) :]
        full_ts = [None] * len(values)
        for i, t in zip(where, ts):
            full_ts[i] = t
        _, dy = rule.forward(*annotate(tuple(args), active, Active, tuple(full_ts)), **kwargs)
        return [cotangent_like(dy, np.zeros(tuple(y.shape), y.dtype.as_numpy_dtype))]

    return _host(host, (*values, *[t for t in tangents if t is not None]), [(tuple(y.shape), y.dtype)])[0]
