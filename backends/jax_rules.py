"""A :class:`diffinterface.rules.Rule` under JAX, one registration per call site's needs, with
``symbolic_zeros`` so that the rules see which arguments are differentiated. Opaque bodies run
through ``jax.pure_callback`` (``vmap`` loops over the batch, or hands it to the bodies whole with
``vectorized=True``); so they work under ``jit``.

- An opaque function with both rules: a ``jax.custom_jvp`` whose tangent is a
  ``jax.custom_derivatives.linear_call`` of the forward rule, with the reverse rules as its
  transpose. ``jax.jvp`` and ``jacfwd`` run the forward rule; ``grad``, ``vjp`` and ``jacrev``
  (linearize, then transpose) run the reverse rules; one registration serves both. JAX has no
  batching rule for ``linear_call`` (0.4.35 to 0.10 at least): where ``vmap`` of one raises, the
  first such registration adds one that loops over the batch with ``lax.map`` (what a sequential
  host callback does anyway), so ``jacfwd``, ``jacrev`` and ``vmap(grad)`` work too.
- A non-opaque function with a forward rule: ``custom_jvp``; JAX transposes the forward rule (traced
  array code) for reverse mode, as for its own functions, and differentiates it again for second
  derivatives.
- Reverse rules only: ``custom_vjp``.

``diffinterface.rules.prefer`` picks the single registration of one direction (``custom_jvp`` for
"forward", ``custom_vjp`` for "reverse"); the JAX adapter sets it while tracing a first-order operator.

Second derivatives through an opaque rule raise ``SecondOrderError`` (its residuals pass through an
identity whose derivative raises), before JAX would differentiate a host callback.

An opaque forward rule's tangent and the primal are two callbacks (under ``jacfwd`` the tangents
are batched and the primals not, and one callback's results are batched alike): the primal runs
twice per forward pass.

An opaque reverse pass recomputes the augmented primal inside the backward callback: JAX residuals
must have shapes known when tracing, and a tape of arbitrary plain data has none. A rule without an
augmented primal (a reverse pass of the arguments alone) skips it, so its gradient runs one host
callback, as a hand-written ``custom_vjp`` whose residuals are its inputs does (JAX drops the unused
primal callback under ``grad``). A non-opaque tape is a residual like any other.

Size: over 400 lines in one module, because each registration (forward, reverse, opaque, symbolic
zeros) is one piece of the same ``custom_jvp``/``custom_vjp`` builder, read together.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray
from jax.custom_derivatives import SymbolicZero, linear_call

from diffinterface.extend import (
    Active,
    Rule,
    annotate,
    cotangent_like,
    cotangents,
    keep_host_error,
    note_host_callback,
    preferred,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from jax.custom_derivatives import CustomVJPPrimal
    from jax.typing import ArrayLike
    from numpy.typing import DTypeLike

    Tangent = jax.Array | SymbolicZero  # JAX's tangents with symbolic_zeros=True
    Out = jax.ShapeDtypeStruct | tuple[jax.ShapeDtypeStruct, ...]  # what a host callback returns


def call(rule: Rule, args: tuple[Any, ...], kwargs: dict[Any, Any]) -> Any:
    mode = _choose(rule, preferred())
    key = ("jax", mode, tuple(sorted(kwargs.items())))
    return rule.native(key, lambda: _register(rule, mode, kwargs))(*args)


def _choose(rule: Rule, hint: str | None) -> str:
    """The registration: "forward" (custom_jvp), "reverse" (custom_vjp) or "both" (see the docstring)."""
    fwd, rev = rule.has_forward, rule.has_reverse
    if hint == "forward":
        return "forward"  # without a forward rule, its jvp raises the error that names the other
    if hint == "reverse":
        return "reverse" if rev or not (fwd and not rule.opaque) else "forward"  # JAX transposes it
    if fwd and rev and rule.opaque:
        return "both"
    return "forward" if fwd or not rev else "reverse"


def _register(rule: Rule, mode: str, kwargs: dict[Any, Any]) -> Any:
    def primal(*args: ArrayLike) -> Any:
        if rule.opaque:
            return _host(_primal_host(rule, kwargs), _out(rule, args, kwargs), args, rule.vectorized)
        return rule.primal(*_jax(args), **kwargs)

    if mode == "forward":
        forward = jax.custom_jvp(primal)
        forward.defjvp(_forward_rule(rule, kwargs), symbolic_zeros=True)
        return forward
    if mode == "both":
        _batchable_linear_call()
        both = jax.custom_jvp(primal)
        both.defjvp(_both_rule(rule, kwargs, primal), symbolic_zeros=True)
        return both
    reverse = jax.custom_vjp(primal)
    fwd, bwd = _reverse_rules(rule, kwargs, primal)
    reverse.defvjp(fwd, bwd, symbolic_zeros=True)
    return reverse


def _first_order(rule: Rule) -> Any:
    """The identity on a rule's arguments, whose derivative raises ``SecondOrderError``: the values
    an opaque rule's passes use pass through it, so that differentiating them (a second derivative)
    raises before JAX reaches a host callback."""

    def build() -> Any:
        @jax.custom_jvp
        def first_order(values: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
            return values

        def jvp(primals: Sequence[Any], tangents: Sequence[Any]) -> Any:
            if any(type(t) is not SymbolicZero for t in jax.tree.leaves(tangents[0], is_leaf=_is_zero)):
                raise rule.second_order("under JAX", "AutoJAX()")
            return primals[0], jax.tree.map(lambda p: jnp.zeros_like(p), primals[0])

        first_order.defjvp(jvp, symbolic_zeros=True)
        return first_order

    return rule.native(("jax-first-order",), build)


def _is_zero(t: Any) -> bool:
    return type(t) is SymbolicZero


def _forward_rule(rule: Rule, kwargs: dict[Any, Any]) -> Any:
    def jvp(primals: tuple[jax.Array, ...], tangents: tuple[Tangent, ...]) -> Any:
        if not rule.has_forward:
            raise rule.missing("forward", "under JAX")
        active = tuple(type(t) is not SymbolicZero for t in tangents)
        if rule.opaque:
            primals = _first_order(rule)(tuple(primals))
            out = _out(rule, primals, kwargs)
            live = tuple(t for t, a in zip(tangents, active) if a)
            # y from its own callback: under jacfwd the tangents are batched and the primals are
            # not, and a callback's results are all batched alike
            y = _host(_primal_host(rule, kwargs), out, tuple(primals), rule.vectorized)
            dy = _host(_forward_host(rule, kwargs, active, len(primals)), out, tuple(primals) + live, rule.vectorized)
        else:
            y, dy = rule.forward(*annotate(_jax(primals), active, Active, _jax(tangents)), **kwargs)
            if dy is None:
                dy = jnp.zeros_like(y)
        return y, dy

    return jvp


# The host bodies are built once per rule, keywords and activity (``rule.native``): a host callback
# is compiled per callable, and a new closure per call would make every eager call compile again.


def _primal_host(rule: Rule, kwargs: dict[Any, Any]) -> Any:
    """The opaque primal, on NumPy arrays."""

    def build() -> Any:
        def host(*arrays: np.ndarray) -> Any:
            return rule.primal(*arrays, **kwargs)

        return host

    return rule.native(("jax-primal-host", tuple(sorted(kwargs.items()))), build)


def _forward_host(rule: Rule, kwargs: dict[Any, Any], active: tuple[bool, ...], n: int) -> Any:
    """The opaque forward rule's tangent, on NumPy arrays: the n values, then the live tangents."""

    def build() -> Any:
        def host(*arrays: np.ndarray) -> Any:
            values, ts = arrays[:n], iter(arrays[n:])
            full = tuple(next(ts) if a else None for a in active)
            y, dy = rule.forward(*annotate(values, active, Active, full), **kwargs)
            return np.zeros_like(y) if dy is None else dy

        return host

    return rule.native(("jax-forward-host", tuple(sorted(kwargs.items())), active, n), build)


def _reverse_host(rule: Rule, kwargs: dict[Any, Any], active: tuple[bool, ...]) -> Any:
    """The opaque reverse pass, on NumPy arrays (the values, then dy): the augmented primal run again
    for its tape (where the rule has one), then the cotangents of the active arguments."""

    def build() -> Any:
        def host(*arrays: np.ndarray) -> Any:
            vals, dy = arrays[:-1], arrays[-1]
            args = annotate(vals, active, Active)
            tape = rule.tape(*args, **kwargs)
            cts = rule.reverse(tape, dy, *args, **kwargs)
            return tuple(cotangent_like(c, v) for c, v, a in zip(cotangents(cts, len(vals)), vals, active) if a)

        return host

    return rule.native(("jax-reverse-host", tuple(sorted(kwargs.items())), active), build)


def _both_rule(rule: Rule, kwargs: dict[Any, Any], primal: Callable[..., Any]) -> Any:
    """An opaque function's JVP whose tangent is linear_call(forward rule, transpose = reverse rules)."""

    def jvp(primals: tuple[jax.Array, ...], tangents: tuple[Tangent, ...]) -> Any:
        active = tuple(type(t) is not SymbolicZero for t in tangents)
        values = _first_order(rule)(tuple(primals))
        out = _out(rule, values, kwargs)
        live = tuple(t for t, a in zip(tangents, active) if a)
        wanted = _cotangent_structs(values, active)
        forward = _forward_host(rule, kwargs, active, len(values))
        reverse = _reverse_host(rule, kwargs, active)

        def tangent(res: Sequence[jax.Array], lin: Sequence[jax.Array]) -> Any:
            return _host(forward, out, tuple(res) + tuple(lin), rule.vectorized)

        def transpose(res: Sequence[jax.Array], ct: jax.Array) -> Any:
            return tuple(_host(reverse, wanted, tuple(res) + (ct,), rule.vectorized))

        return primal(*values), linear_call(tangent, transpose, values, live)

    return jvp


def _reverse_rules(rule: Rule, kwargs: dict[Any, Any], primal: Callable[..., Any]) -> tuple[Any, ...]:
    def fwd(*cargs: CustomVJPPrimal) -> Any:
        if not rule.has_reverse:
            raise rule.missing("reverse", "under JAX")
        values = tuple(c.value for c in cargs)
        active = tuple(bool(c.perturbed) for c in cargs)
        if rule.opaque:
            values = _first_order(rule)(values)
        # the activity travels to bwd in the residuals' structure (None for a constant): static
        split = (
            tuple(v if a else None for v, a in zip(values, active)),
            tuple(None if a else v for v, a in zip(values, active)),
        )
        if rule.opaque:
            return primal(*values), (split, None)
        y, tape = rule.augment(*annotate(_jax(values), active, Active), **kwargs)
        return y, (split, tape)

    def bwd(res: tuple[Any, Any], ct: Tangent) -> Any:
        (live, const), tape = res
        active = tuple(v is not None for v in live)
        values = tuple(a if a is not None else c for a, c in zip(live, const))
        if type(ct) is SymbolicZero:
            aval = ct.aval  # SymbolicZero forwards shape and dtype to it, out of a type checker's sight
            assert isinstance(aval, ShapedArray), aval  # a zero cotangent of an array output
            ct = jnp.zeros(aval.shape, aval.dtype)
        if rule.opaque:
            wanted = _cotangent_structs(values, active)
            got = iter(_host(_reverse_host(rule, kwargs, active), wanted, values + (ct,), rule.vectorized))
            return tuple(next(got) if a else None for a in active)
        cts = cotangents(rule.reverse(tape, ct, *annotate(_jax(values), active, Active), **kwargs), len(values))
        return tuple(
            (jnp.zeros_like(v) if c is None else jnp.asarray(c, dtype=_dtype(v))) if a else None
            for c, v, a in zip(cts, values, active)
        )

    return fwd, bwd


def _cotangent_structs(values: tuple[Any, ...], active: tuple[bool, ...]) -> tuple[Any, ...]:
    """The shapes and dtypes of the active arguments' cotangents: an opaque reverse pass's results."""
    return tuple(jax.ShapeDtypeStruct(jnp.shape(v), _dtype(v)) for v, a in zip(values, active) if a)


def _jax(values: Sequence[ArrayLike | SymbolicZero]) -> tuple[Any, ...]:
    """NumPy arrays among a non-opaque body's arguments as JAX arrays: JAX hands a custom rule its
    primals as the caller gave them (NumPy, outside jit), and array-API bodies must not see two
    namespaces (``array_namespace(a, b)`` of a NumPy and a JAX array raises)."""
    return tuple(jnp.asarray(v) if isinstance(v, (np.ndarray, np.generic)) else v for v in values)


def _dtype(v: ArrayLike) -> Any:
    return jax.dtypes.canonicalize_dtype(jnp.result_type(v))


def _host(body: Callable[..., Any], out: Out, args: tuple[Any, ...], vectorized: bool) -> Any:
    """``body`` on NumPy arrays through ``jax.pure_callback``; results cast to ``out``'s dtypes.

    64-bit operands and results travel as pairs of uint32 (a bitcast each way): JAX converts a
    callback's operands and checks its results by the x64 flag of the thread the callback runs on,
    and XLA runs a large computation's callbacks on its own threads, where the thread-local
    ``jax.enable_x64`` context of the caller (the one diffinterface uses for float64 inputs) is off:
    float64 operands arrived as float32 there (derivatives silently 1e-8 off) and float64 results
    failed. The results of ``vectorized`` rules travel as they are (their batch axes are JAX's to
    add): there a float64 result of a large input fails loudly unless x64 is on globally."""
    note_host_callback()  # the adapter's runners then check JAX's errors for the body's (host_error)
    wide_in = tuple(d if _is_wide(d) else None for d in (_dtype(a) for a in args))
    operands = tuple(
        jax.lax.bitcast_convert_type(jnp.asarray(a, dtype=w), jnp.uint32) if w is not None else a
        for a, w in zip(args, wide_in)
    )
    declared = jax.tree.map(lambda o: _as_pairs(o) if _wide(o, vectorized) else o, out)
    results = jax.pure_callback(
        _callback(body, out, vectorized, wide_in),
        declared,
        *operands,
        vmap_method="broadcast_all" if vectorized else "sequential",
    )
    return jax.tree.map(
        lambda r, o: jax.lax.bitcast_convert_type(r, o.dtype) if _wide(o, vectorized) else r, results, out
    )


def _as_pairs(struct: jax.ShapeDtypeStruct) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(tuple(struct.shape) + (2,), np.uint32)


def _is_wide(dtype: DTypeLike) -> bool:
    dtype = np.dtype(dtype)
    return dtype.itemsize == 8 and dtype.kind in "fiu"


def _wide(struct: jax.ShapeDtypeStruct, vectorized: bool) -> bool:
    """A 64-bit result of a looped rule, which travels as uint32 pairs (see _host)."""
    return not vectorized and _is_wide(struct.dtype)


@functools.lru_cache(maxsize=4096)
def _callback(body: Callable[..., Any], out: Out, vectorized: bool, wide_in: tuple[Any, ...]) -> Any:
    """The host function of ``body`` for ``out``: one object per body and output (see _primal_host)."""

    several = isinstance(out, tuple)  # a tuple of results (cotangents) or one (out is hashable: no lists)
    # per result, what JAX declared: (dtype, shape, travels as uint32 pairs), worked out once
    outs = out if isinstance(out, tuple) else (out,)
    declared = tuple((np.dtype(o.dtype), tuple(o.shape), _wide(o, vectorized)) for o in outs)

    def one(r: ArrayLike, spec: tuple[Any, ...]) -> np.ndarray:
        dtype, shape, wide = spec
        if type(r) is np.ndarray and r.dtype == dtype and not wide and r.flags.c_contiguous:
            if vectorized or r.shape == shape:  # as JAX wants it already (the common case): no copy
                return r
        if vectorized:  # the batch axis leads: the shape is out's with it
            return np.asarray(r, dtype=dtype)
        r = np.ascontiguousarray(np.asarray(r, dtype=dtype).reshape(shape))
        return r.reshape(r.shape + (1,)).view(np.uint32) if wide else r

    def operand(a: ArrayLike, wide: DTypeLike | None) -> np.ndarray:
        if wide is None:
            return np.asarray(a)  # JAX hands a callback its own arrays (0.10): the bodies get NumPy's
        return np.ascontiguousarray(a).view(wide)[..., 0]  # (..., 2) uint32 -> (...) 64-bit

    def callback(*arrays: ArrayLike) -> Any:
        try:
            result = body(*(operand(a, w) for a, w in zip(arrays, wide_in)))
        except Exception as error:  # JAX reports it as its own error: kept for the call (keep_host_error)
            raise keep_host_error(error) from error
        return tuple(map(one, result, declared)) if several else one(result, declared[0])

    return callback


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
                # eagerly, also inside a trace of JAX (omnistaging would stage the primal's own JAX
                # operations into the trace around this call: DifferentiateWith(f, AutoJAX()) in AutoJAX)
                with jax.ensure_compile_time_eval():
                    y = np.asarray(rule.primal(*probes, **kwargs))
            except Exception as error:  # noqa: BLE001 - reported with what to do
                raise TypeError(
                    f"{rule.__name__} under JAX: an opaque function's output shape is needed before it "
                    f"runs; running it on random inputs of shapes {[s.shape for s in structs]} failed "
                    f"({type(error).__name__}: {error}). Pass {rule.out_shape_fix}"
                ) from error
            shape, dtype = y.shape, y.dtype
        return jax.ShapeDtypeStruct(tuple(shape), jax.dtypes.canonicalize_dtype(dtype))

    return rule.native(key, build)


# -- a batching rule for linear_call, where JAX has none --------------------------------------------


@functools.cache
def _batchable_linear_call() -> None:
    """Make ``vmap`` of a ``linear_call`` work where it raises (JAX registers no batching rule for
    its primitive): a rule that maps the primitive over the batch with ``lax.map``. Registered once
    (two threads racing here would register the same rule twice), through
    ``jax.interpreters.batching.primitive_batchers``, and only where ``vmap`` of a ``linear_call``
    fails; the primitive is found by tracing one (no private import)."""

    def identity(r: ArrayLike, x: ArrayLike) -> Any:
        return linear_call(lambda _, v: v, lambda _, t: t, r, x)

    probe = np.zeros((2, 1), np.float32)
    try:
        jax.vmap(identity)(probe, probe)
    except NotImplementedError:
        from jax.interpreters import batching

        primitive = jax.make_jaxpr(identity)(probe[0], probe[0]).jaxpr.eqns[0].primitive
        batching.primitive_batchers[primitive] = lambda args, dims, **params: _map_over_batch(
            primitive, args, dims, params
        )
        jax.vmap(identity)(probe, probe)  # the rule answers now


def _map_over_batch(
    primitive: Any, args: Sequence[jax.Array], dims: Sequence[int | None], params: dict[str, Any]
) -> Any:
    """The batched ``primitive``: bound once per element of the batch, in a ``lax.map`` loop."""
    mapped = [jnp.moveaxis(a, d, 0) for a, d in zip(args, dims) if d is not None]

    def one(parts: Sequence[jax.Array]) -> Any:
        it = iter(parts)
        return primitive.bind(*(next(it) if d is not None else a for a, d in zip(args, dims)), **params)

    out = jax.lax.map(one, mapped)
    return out, [0] * len(out)
