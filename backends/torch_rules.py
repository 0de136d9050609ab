"""A :class:`diffinterface.rules.Rule` under torch: one ``torch.autograd.Function`` carrying both
rules (``backward`` runs the reverse pass on the tape of the augmented primal, ``jvp`` the forward
rule), in the ``setup_context`` style so that ``torch.func`` (``grad``, ``jacrev``, ``jacfwd``,
``vmap`` and their compositions) accepts it as well as eager ``.backward()``.

Opaque bodies get NumPy arrays: tensors are moved to NumPy inside the Functions' ``forward``, which
torch runs on plain tensors at every level of ``torch.func``. So the backward and forward passes
call two more Functions (``_Reverse``, ``_Forward``) rather than NumPy directly: under ``jacrev`` or
``jacfwd`` they are vmapped, and a Function's ``vmap`` rule can loop where NumPy cannot take a
batched tensor.

Every Function's ``vmap`` rule calls the Function again (``apply``) on each element of the batch,
as torch's documentation does, so that nested levels (``vmap(jacrev(f))``: a vmap over the
cotangents inside a vmap over the inputs) are unwrapped one at a time until ``forward`` gets plain
tensors. The tapes of a looped batch are kept as a list, one per element, nested like the levels;
a reverse pass at a level where the saved inputs are batched (the forward was vmapped there) takes
element i's tape, and at a level where only the cotangent is (``jacrev``) every element's pass
shares the one tape. With ``vectorized=True`` a level hands its batch to the bodies whole instead:
at the innermost call the leading batch axes of every level are flattened into one for the bodies.

Which arguments are active: those that require grad (the augmented primal is run for them when
any does); the reverse pass then returns the cotangents torch asks for (``needs_input_grad``).
Second derivatives through a rule raise ``SecondOrderError`` (the reverse and forward passes have
no rules of their own).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from diffinterface.extend import (
    Active,
    Rule,
    annotate,
    cotangents,
)

from .torch import as_tensor

if TYPE_CHECKING:
    from numpy.typing import ArrayLike
    from torch._functorch.autograd_function import VmapInfo  # what torch hands a Function's vmap

_Tensor = torch.Tensor


class _Spec:
    """One call's static data: the rule, its keywords, the activity of the augmented primal, the
    number of leading batch axes that vectorized vmap levels added (``lead``), and the tape the
    augmented primal returned (a list of tapes for a looped batch)."""

    __slots__ = ("rule", "kwargs", "active", "lead", "tape")

    def __init__(self, rule: Rule, kwargs: dict[Any, Any], active: tuple[Any, ...], lead: int = 0) -> None:
        self.rule, self.kwargs, self.active, self.lead = rule, kwargs, active, lead
        self.tape: Any = _NONE

    def again(self, lead: int, active: tuple[Any, ...] | None = None) -> _Spec:
        return _Spec(self.rule, self.kwargs, self.active if active is None else active, lead)


class _Held:
    """A tape, held in an object torch does not take apart: the arguments of ``apply`` are pytrees
    to torch.func, and a tape's own tuples and lists would come back rebuilt (a list as a tuple)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class _Batched:
    """The tapes (``_Held`` or ``_Batched``) of a batch that a vmap rule looped over, one per element."""

    __slots__ = ("tapes",)

    def __init__(self, tapes: list[Any]) -> None:
        self.tapes = tapes


def call(rule: Rule, args: tuple[Any, ...], kwargs: dict[Any, Any]) -> Any:
    # through the Function even where nothing requires grad: dual tensors and torch.func's wrapped
    # tensors (vmap, jvp) say nothing of it, and only the Function's forward gets plain tensors
    return _RuleFunction.apply(_Spec(rule, kwargs, _active(rule, (False,) * len(args), args)), *args)


def _active(rule: Rule, known: tuple[bool, ...], args: tuple[Any, ...]) -> tuple[bool, ...]:
    """The arguments the augmented primal treats as active: those ``known`` so, and the tensors that
    require grad here (a vmap level unwraps tensors whose wrapper said nothing of it: the rule asks
    again at every level). Without reverse rules, none (the primal runs)."""
    if not rule.has_reverse:
        return known
    return tuple(
        k or (isinstance(a, _Tensor) and a.requires_grad and (a.is_floating_point() or a.is_complex()))
        for k, a in zip(known, args)
    )


# Whether a torch.func transform is active: what torch's own Function.apply asks before taking the
# functorch path (a private function: where it is missing, every backward goes through _Reverse).
_transforms_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: True)

# The tape of a forward pass that ran the primal only (no argument was known to be active): a
# reverse pass given it runs the augmented primal first (never a reverse pass without its tape).
_NO_TAPE: Any = object()
_NONE = _Held(_NO_TAPE)


# -- the bodies, on tensors or (opaque) on NumPy ---------------------------------------------------


def _like(args: tuple[Any, ...]) -> Any:
    return next((a for a in args if isinstance(a, _Tensor)), None)


def _to_np(a: Any) -> Any:
    # force=True: detach, move to the CPU and resolve conjugate and negative bits, in one call
    return a.numpy(force=True) if isinstance(a, _Tensor) else a


def _to_tensor(value: ArrayLike | torch.Tensor, like: torch.Tensor | None) -> torch.Tensor:
    """A body's result as a tensor on ``like``'s device (the adapter's conversion: no copy where
    torch can share the array's memory, a copy of a read-only or strided one)."""
    return as_tensor(value if isinstance(value, (_Tensor, np.ndarray)) else np.asarray(value), like)


def _batch(spec: _Spec, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The leading batch axes that vectorized levels added (``spec.lead``; () for none or one)."""
    return tuple(_like(args).shape[: spec.lead]) if spec.lead > 1 else ()


def _flat(batch: tuple[Any, ...], args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Every tensor with the leading axes ``batch`` flattened into one, for a vectorized body."""
    if not batch:
        return args
    k = len(batch)
    return tuple(a.reshape((-1,) + tuple(a.shape[k:])) if isinstance(a, _Tensor) else a for a in args)


def _unflat(batch: tuple[Any, ...], y: torch.Tensor) -> torch.Tensor:
    return y.reshape(batch + tuple(y.shape[1:])) if batch else y


def _primal(spec: _Spec, args: tuple[Any, ...]) -> Any:
    rule, batch = spec.rule, _batch(spec, args)
    args = _flat(batch, args)
    if rule.opaque:
        return _unflat(batch, _to_tensor(rule.primal(*(_to_np(a) for a in args), **spec.kwargs), _like(args)))
    return _unflat(batch, rule.primal(*args, **spec.kwargs))


def _augmented(spec: _Spec, args: tuple[Any, ...]) -> tuple[Any, ...]:
    rule = spec.rule
    if rule.augmented_primal is None:  # the primal, no tape
        return _primal(spec, args), None
    batch = _batch(spec, args)
    args = _flat(batch, args)
    if rule.opaque:
        y, tape = rule.augmented_primal(*annotate(tuple(map(_to_np, args)), spec.active, Active), **spec.kwargs)
        return _unflat(batch, _to_tensor(y, _like(args))), tape
    y, tape = rule.augmented_primal(*annotate(args, spec.active, Active), **spec.kwargs)
    return _unflat(batch, y), tape


def _reverse(spec: _Spec, tape: Any, dy: torch.Tensor, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The cotangents of the active arguments, as tensors shaped like them."""
    rule, like, batch = spec.rule, _like(args), _batch(spec, args)
    if tape is _NO_TAPE:
        tape = _augmented(spec, args)[1] if rule.augmented_primal is not None else None  # None: no primal run
    shaped = args
    if batch:
        dy, *rest = _flat(batch, (dy,) + args)
        args = tuple(rest)
    if rule.opaque:
        cts = rule.reverse(tape, _to_np(dy), *annotate(tuple(map(_to_np, args)), spec.active, Active), **spec.kwargs)
    else:
        cts = rule.reverse(tape, dy, *annotate(args, spec.active, Active), **spec.kwargs)
    out = []
    for c, a, act in zip(cotangents(cts, len(args)), shaped, spec.active):
        if act:
            if c is None:
                c = torch.zeros_like(a)
            else:
                c = _to_tensor(c, like)
                if c.dtype != a.dtype:
                    c = c.to(a.dtype)
                if c.shape != a.shape:
                    c = c.reshape(a.shape)
            out.append(c)
    return tuple(out)


def _forward(spec: _Spec, active: tuple[Any, ...], tangents: tuple[Any, ...], args: tuple[Any, ...]) -> Any:
    rule, like, batch = spec.rule, _like(args), _batch(spec, args)
    if not rule.has_forward:
        raise rule.missing("forward", "under torch")
    tangents, args = _flat(batch, tangents), _flat(batch, args)
    if rule.opaque:
        values = tuple(_to_np(a) for a in args)
        y, dy = rule.forward(*annotate(values, active, Active, tuple(_to_np(t) for t in tangents)), **spec.kwargs)
    else:
        y, dy = rule.forward(*annotate(args, active, Active, tangents), **spec.kwargs)
    y = _to_tensor(y, like)
    return _unflat(batch, torch.zeros_like(y) if dy is None else _to_tensor(dy, like).to(y.dtype).reshape(y.shape))


# -- vmap: a loop over the batch, or the batch whole (vectorized) ---------------------------------


def _slices(info: VmapInfo, in_dims: tuple[Any, ...], args: tuple[Any, ...]) -> list[Any]:
    return [
        tuple(a.select(d, i) if d is not None else a for a, d in zip(args, in_dims)) for i in range(info.batch_size)
    ]


def _whole(info: VmapInfo, in_dims: tuple[Any, ...], args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Every tensor argument with the batch on its first axis (broadcast where it had none)."""
    out = []
    for a, d in zip(args, in_dims):
        if isinstance(a, _Tensor):
            a = a.movedim(d, 0) if d is not None else a.unsqueeze(0).expand((info.batch_size,) + tuple(a.shape))
        out.append(a)
    return tuple(out)


# torch declares Function's backward, jvp and vmap with variadic parameters (``*grad_outputs``,
# ``*args``: one per input or output); its documentation's overrides name them one by one, as these
# do, which a type checker reads as an incompatible override: the ignores below say so, one a method.
class _RuleFunction(torch.autograd.Function):
    @staticmethod
    def forward(spec: _Spec, *args: Any) -> Any:
        if any(spec.active):
            y, tape = _augmented(spec, args)
            spec.tape = _Held(tape)
            return y
        return _primal(spec, args)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        spec, *args = inputs
        ctx.spec, ctx.tape = spec, spec.tape
        tensors = [a if isinstance(a, _Tensor) else None for a in args]
        ctx.others = [None if isinstance(a, _Tensor) else a for a in args]
        ctx.save_for_backward(*tensors)
        ctx.save_for_forward(*tensors)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:  # pyright: ignore[reportIncompatibleMethodOverride]
        spec = ctx.spec
        if not spec.rule.has_reverse:
            raise spec.rule.missing("reverse", "under torch")
        args = tuple([o if t is None else t for t, o in zip(ctx.saved_tensors, ctx.others)])
        needs = ctx.needs_input_grad[1:]
        tape, active = ctx.tape, spec.active
        if needs != active:
            active = tuple([a or n for a, n in zip(active, needs)])
            if not any(active):
                return (None,) * (len(args) + 1)
            if active != spec.active:  # torch asks for an argument the forward pass did not know active
                spec, tape = spec.again(spec.lead, active), _NONE
        if torch.is_grad_enabled() or _transforms_active():  # differentiable (create_graph) or vmapped
            cts = _Reverse.apply(spec, tape, dy, *args)
        else:  # plain eager backward: the pass itself, without a Function around it (about 20 us)
            cts = _reverse(spec, tape.value if isinstance(tape, _Held) else _NO_TAPE, dy, args)
        if len(cts) == len(args) and all(needs):  # every argument active and asked for
            return (None, *cts)
        it = iter(cts)
        full = [next(it) if act else None for act in spec.active]
        return (None,) + tuple([c if need else None for c, need in zip(full, needs)])

    @staticmethod
    def jvp(ctx: Any, _spec: None, *tangents: torch.Tensor | None) -> Any:  # pyright: ignore[reportIncompatibleMethodOverride]
        spec = ctx.spec
        args = tuple(o if t is None else t for t, o in zip(ctx.saved_tensors, ctx.others))
        active = tuple(t is not None for t in tangents)
        if not any(active):
            return None
        live = tuple(t for t in tangents if t is not None)
        return _Forward.apply(spec, active, len(live), *live, *args)

    @staticmethod
    def vmap(info: VmapInfo, in_dims: tuple[Any, ...], spec: _Spec, *args: Any) -> tuple[Any, ...]:  # pyright: ignore[reportIncompatibleMethodOverride]
        dims = in_dims[1:]
        if spec.rule.vectorized:
            whole = _whole(info, dims, args)
            inner = spec.again(spec.lead + 1, _active(spec.rule, spec.active, whole))
            out = _RuleFunction.apply(inner, *whole)
            spec.tape = inner.tape
            return out, 0
        outs, tapes = [], []
        for part in _slices(info, dims, args):
            one = spec.again(spec.lead, _active(spec.rule, spec.active, part))
            outs.append(_RuleFunction.apply(one, *part))
            tapes.append(one.tape)
        spec.tape = _Batched(tapes)
        return torch.stack(outs), 0


class _Pass(torch.autograd.Function):
    """A pass of a rule (reverse or forward) as a Function of its own, for its ``vmap`` rule; it has
    no derivative: differentiating it (a second derivative through the rule) raises SecondOrderError."""

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.rule = inputs[0].rule

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
        raise ctx.rule.second_order("under torch", "AutoTorch()")

    @staticmethod
    def jvp(ctx: Any, *tangents: torch.Tensor | None) -> Any:
        raise ctx.rule.second_order("under torch", "AutoTorch()")


class _Reverse(_Pass):
    """The cotangents of the active arguments: ``reverse(tape, dy, *args)``."""

    @staticmethod
    def forward(spec: _Spec, tape: _Held | _Batched, dy: torch.Tensor, *args: Any) -> tuple[Any, ...]:
        # a batch's tapes reaching plain tensors would be another level's: the augmented primal instead
        return _reverse(spec, tape.value if isinstance(tape, _Held) else _NO_TAPE, dy, args)

    @staticmethod
    def vmap(  # pyright: ignore[reportIncompatibleMethodOverride]
        info: VmapInfo, in_dims: tuple[Any, ...], spec: _Spec, tape: _Held | _Batched, dy: torch.Tensor, *args: Any
    ) -> tuple[Any, ...]:
        dims = in_dims[2:]
        n_out = sum(1 for a in spec.active if a)
        # the inputs batched at this level: the forward was vmapped here too, and its tapes follow
        forward_batched = any(d is not None for d in dims[1:])
        if spec.rule.vectorized and forward_batched:
            whole = _whole(info, dims, (dy,) + args)
            return _Reverse.apply(spec.again(spec.lead + 1), tape, *whole), (0,) * n_out
        if forward_batched:  # element i's tape, or none (each element's pass runs its augmented primal)
            tapes = tape.tapes if isinstance(tape, _Batched) else [_NONE] * info.batch_size
        else:
            tapes = [tape] * info.batch_size
        parts = [_Reverse.apply(spec, t, *part) for t, part in zip(tapes, _slices(info, dims, (dy,) + args))]
        return tuple(torch.stack(c) for c in zip(*parts)), (0,) * n_out


class _Forward(_Pass):
    """The forward rule's tangent: ``forward(*args with tangents)[1]``."""

    @staticmethod
    def forward(spec: _Spec, active: tuple[Any, ...], n: int, *rest: Any) -> Any:
        return _forward(spec, active, _expand(active, rest[:n]), rest[n:])

    @staticmethod
    def vmap(  # pyright: ignore[reportIncompatibleMethodOverride]
        info: VmapInfo, in_dims: tuple[Any, ...], spec: _Spec, active: tuple[Any, ...], n: int, *rest: Any
    ) -> tuple[Any, ...]:
        dims = in_dims[3:]
        if spec.rule.vectorized:
            return _Forward.apply(spec.again(spec.lead + 1), active, n, *_whole(info, dims, rest)), 0
        return torch.stack([_Forward.apply(spec, active, n, *part) for part in _slices(info, dims, rest)]), 0


def _expand(active: tuple[Any, ...], live: tuple[Any, ...]) -> tuple[Any, ...]:
    it = iter(live)
    return tuple(next(it) if a else None for a in active)


# torch's Function.apply binds its arguments to forward's signature at every call (inspect.signature,
# about 10 us): a signature set once (the inspect protocol's __signature__) makes that a lookup.
for _function in (_RuleFunction, _Reverse, _Forward):
    forward: Any = _function.forward
    forward.__signature__ = inspect.signature(forward)
