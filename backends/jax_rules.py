"""A :class:`diffinterface.rules.Rule` under JAX: ``jax.custom_jvp`` for the forward rule,
``jax.custom_vjp`` for the reverse rules, with ``symbolic_zeros`` so that the rules see which
arguments are differentiated. Opaque bodies run through ``jax.pure_callback`` (``vmap`` loops over
the batch, or hands it to the bodies whole with ``vectorized=True``); so they work under ``jit``.

One registration cannot serve both modes on JAX 0.10: a ``custom_vjp`` function refuses ``jvp``,
and a ``custom_jvp`` rule made of host callbacks cannot be transposed for reverse mode. A function
with both rules takes, in this order: the direction ``diffinterface.rules.prefer`` names (the JAX
adapter sets it while tracing each operator); else ``custom_jvp`` for non-opaque bodies (JAX
transposes the forward rule for reverse mode, as for its own functions); else, opaque, the reverse
rules (``jax.grad`` works; ``jax.jvp`` needs ``prefer("forward")``).

An opaque forward rule's tangent and the primal are two callbacks (under ``jacfwd`` the tangents
are batched and the primals not, and one callback's results are batched alike): the primal runs
twice per forward pass.

An opaque reverse pass recomputes the augmented primal inside the backward callback: JAX residuals
must have shapes known when tracing, and a tape of arbitrary plain data has none. A non-opaque tape
is a residual like any other.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero

from diffinterface.rules import Active, Rule, annotate, cotangent_like, cotangents, preferred


def call(rule: Rule, args: tuple[Any, ...], kwargs: dict[Any, Any]) -> Any:
    mode = _choose(rule, preferred())
    key = ("jax", mode, tuple(sorted(kwargs.items())))
    return rule.native(key, lambda: _register(rule, mode, kwargs))(*args)


def _choose(rule: Rule, hint: str | None) -> str:
    fwd, rev = rule.has_forward, rule.has_reverse
    if hint == "forward" or (hint is None and fwd and (not rev or not rule.opaque)):
        return "forward"
    if hint == "reverse" or rev:
        return "reverse"
    return "forward"


def _register(rule: Rule, mode: str, kwargs: dict[Any, Any]) -> Any:
    def primal(*args: Any) -> Any:
        if rule.opaque:
            return _host(lambda *a: rule.primal(*a, **kwargs), _out(rule, args, kwargs), args, rule.vectorized)
        return rule.primal(*args, **kwargs)

    if mode == "forward":
        forward = jax.custom_jvp(primal)
        forward.defjvp(_forward_rule(rule, kwargs), symbolic_zeros=True)
        return forward
    reverse = jax.custom_vjp(primal)
    fwd, bwd = _reverse_rules(rule, kwargs, primal)
    reverse.defvjp(fwd, bwd, symbolic_zeros=True)
    return reverse


def _forward_rule(rule: Rule, kwargs: dict[Any, Any]) -> Any:
    def jvp(primals: Any, tangents: Any) -> Any:
        if not rule.has_forward:
            raise rule.missing("forward", "under JAX")
        active = tuple(type(t) is not SymbolicZero for t in tangents)
        if rule.opaque:
            out = _out(rule, primals, kwargs)
            live = tuple(t for t, a in zip(tangents, active) if a)

            def host(*arrays: Any) -> Any:
                values, ts = arrays[: len(primals)], iter(arrays[len(primals) :])
                full = tuple(next(ts) if a else None for a in active)
                y, dy = rule.forward(*annotate(values, active, Active, full), **kwargs)
                return np.zeros_like(y) if dy is None else dy

            # y from its own callback: under jacfwd the tangents are batched and the primals are
            # not, and a callback's results are all batched alike
            y = _host(lambda *a: rule.primal(*a, **kwargs), out, tuple(primals), rule.vectorized)
            dy = _host(host, out, tuple(primals) + live, rule.vectorized)
        else:
            y, dy = rule.forward(*annotate(tuple(primals), active, Active, tuple(tangents)), **kwargs)
            if dy is None:
                dy = jnp.zeros_like(y)
        return y, dy

    return jvp


def _reverse_rules(rule: Rule, kwargs: dict[Any, Any], primal: Any) -> tuple[Any, ...]:
    def fwd(*cargs: Any) -> Any:
        if not rule.has_reverse:
            raise rule.missing("reverse", "under JAX")
        values = tuple(c.value for c in cargs)
        active = tuple(bool(c.perturbed) for c in cargs)
        # the activity travels to bwd in the residuals' structure (None for a constant): static
        split = (
            tuple(v if a else None for v, a in zip(values, active)),
            tuple(None if a else v for v, a in zip(values, active)),
        )
        if rule.opaque:
            return primal(*values), (split, None)
        y, tape = rule.augmented_primal(*annotate(values, active, Active), **kwargs)
        return y, (split, tape)

    def bwd(res: Any, ct: Any) -> Any:
        (live, const), tape = res
        active = tuple(v is not None for v in live)
        values = tuple(a if a is not None else c for a, c in zip(live, const))
        if type(ct) is SymbolicZero:
            ct = jnp.zeros(ct.shape, ct.dtype)
        if rule.opaque:
            wanted = tuple(jax.ShapeDtypeStruct(jnp.shape(v), _dtype(v)) for v, a in zip(values, active) if a)

            def host(*arrays: Any) -> Any:
                vals, dy = arrays[:-1], arrays[-1]
                args = annotate(vals, active, Active)
                y, tp = rule.augmented_primal(*args, **kwargs)
                cts = rule.reverse(tp, dy, *args, **kwargs)
                return tuple(cotangent_like(c, v) for c, v, a in zip(cotangents(cts, len(vals)), vals, active) if a)

            got = iter(_host(host, wanted, values + (ct,), rule.vectorized))
            return tuple(next(got) if a else None for a in active)
        cts = cotangents(rule.reverse(tape, ct, *annotate(values, active, Active), **kwargs), len(values))
        return tuple(
            (jnp.zeros_like(v) if c is None else jnp.asarray(c, dtype=_dtype(v))) if a else None
            for c, v, a in zip(cts, values, active)
        )

    return fwd, bwd


def _dtype(v: Any) -> Any:
    return jax.dtypes.canonicalize_dtype(jnp.result_type(v))


def _host(body: Any, out: Any, args: tuple[Any, ...], vectorized: bool) -> Any:
    """``body`` on NumPy arrays through ``jax.pure_callback``; results cast to ``out``'s dtypes."""

    def callback(*arrays: Any) -> Any:
        result = body(*(np.asarray(a) for a in arrays))
        if vectorized:  # the batch axis leads: the shapes are out's with it
            return jax.tree.map(lambda r, o: np.asarray(r, dtype=o.dtype), result, out)
        return jax.tree.map(lambda r, o: np.asarray(r, dtype=o.dtype).reshape(o.shape), result, out)

    return jax.pure_callback(callback, out, *args, vmap_method="broadcast_all" if vectorized else "sequential")


_PROBE = np.random.default_rng(20261122)


def _out(rule: Rule, args: tuple[Any, ...], kwargs: dict[Any, Any]) -> Any:
    """The output's shape and dtype for a host callback: ``out_shape``, else the primal run once on
    random inputs of the arguments' shapes (cached per shapes, dtypes and keywords)."""
    structs = tuple(jax.ShapeDtypeStruct(jnp.shape(a), _dtype(a)) for a in args)
    key = ("jax-out", structs, tuple(sorted(kwargs.items())))

    def build() -> Any:
        if rule.out_shape is not None:
            shape, dtype = rule.out_shape(*structs, **kwargs)
        else:
            probes = [
                (_PROBE.standard_normal(s.shape) if np.issubdtype(s.dtype, np.inexact) else np.ones(s.shape)).astype(
                    s.dtype
                )
                for s in structs
            ]
            try:
                y = np.asarray(rule.primal(*probes, **kwargs))
            except Exception as error:  # noqa: BLE001 - reported with what to do
                raise TypeError(
                    f"{rule.__name__} under JAX: an opaque function's output shape is needed before it "
                    f"runs; running it on random inputs of shapes {[s.shape for s in structs]} failed "
                    f"({type(error).__name__}: {error}). Pass custom_rule(opaque=True, out_shape=fn) with "
                    f"fn(*args) -> (shape, dtype)"
                ) from error
            shape, dtype = y.shape, y.dtype
        return jax.ShapeDtypeStruct(tuple(shape), jax.dtypes.canonicalize_dtype(dtype))

    return rule.native(key, build)
