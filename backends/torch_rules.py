"""A :class:`diffinterface.rules.Rule` under torch: one ``torch.autograd.Function`` carrying both
rules (``backward`` runs the reverse pass on the tape of the augmented primal, ``jvp`` the forward
rule), in the ``setup_context`` style so that ``torch.func`` (``grad``, ``jacrev``, ``jacfwd``,
``vmap``) accepts it as well as eager ``.backward()``.

Opaque bodies get NumPy arrays: tensors are moved to NumPy inside the Functions' ``forward``, which
torch runs on plain tensors at every level of ``torch.func``. So the backward and forward passes
call two more Functions (``_Reverse``, ``_Forward``) rather than NumPy directly: under ``jacrev`` or
``jacfwd`` they are vmapped, and a Function's ``vmap`` rule can loop where NumPy cannot take a
batched tensor. Every Function's ``vmap`` rule loops over the batch (the per-element tapes kept as a
list), or with ``vectorized=True`` hands the batch to the bodies whole.

Which arguments are active: those that require grad (the augmented primal is run for them when
any does); the reverse pass then returns the cotangents torch asks for (``needs_input_grad``).
Second derivatives through a rule are not supported (the reverse and forward passes have no rules
of their own): torch raises.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from diffinterface.backends.torch import as_tensor
from diffinterface.rules import Active, Rule, annotate, cotangents

_Tensor = torch.Tensor


class _Spec:
    """One call's static data: the rule, its keywords, which arguments are tensors, the activity of
    the augmented primal, and the tape it returned (a list of tapes for a looped batch)."""

    __slots__ = ("rule", "kwargs", "active", "tape")

    def __init__(self, rule: Rule, kwargs: dict[Any, Any], active: tuple[Any, ...]) -> None:
        self.rule, self.kwargs, self.active = rule, kwargs, active
        self.tape: Any = None

    def again(self) -> _Spec:
        return _Spec(self.rule, self.kwargs, self.active)


class _Batched(list):
    """The tapes of a batch that the vmap rule looped over, one per element."""


def call(rule: Rule, args: tuple[Any, ...], kwargs: dict[Any, Any]) -> Any:
    active = tuple(
        isinstance(a, _Tensor) and a.requires_grad and (a.is_floating_point() or a.is_complex()) for a in args
    )
    # through the Function even where nothing requires grad: dual tensors and torch.func's wrapped
    # tensors (vmap, jvp) say nothing of it, and only the Function's forward gets plain tensors
    return _RuleFunction.apply(_Spec(rule, kwargs, active if rule.has_reverse else (False,) * len(args)), *args)


# -- the bodies, on tensors or (opaque) on NumPy ---------------------------------------------------


def _like(args: tuple[Any, ...]) -> Any:
    return next((a for a in args if isinstance(a, _Tensor)), None)


def _to_np(a: Any) -> Any:
    return a.detach().cpu().numpy() if isinstance(a, _Tensor) else a


def _to_tensor(value: Any, like: Any) -> Any:
    """A body's result as a tensor on ``like``'s device (the adapter's conversion: no copy where
    torch can share the array's memory, a copy of a read-only or strided one)."""
    return as_tensor(value if isinstance(value, (_Tensor, np.ndarray)) else np.asarray(value), like)


def _primal(spec: _Spec, args: tuple[Any, ...]) -> Any:
    rule = spec.rule
    if rule.opaque:
        return _to_tensor(rule.primal(*(_to_np(a) for a in args), **spec.kwargs), _like(args))
    return rule.primal(*args, **spec.kwargs)


def _augmented(spec: _Spec, args: tuple[Any, ...]) -> tuple[Any, ...]:
    rule = spec.rule
    if rule.opaque:
        y, tape = rule.augmented_primal(*annotate(tuple(_to_np(a) for a in args), spec.active, Active), **spec.kwargs)
        return _to_tensor(y, _like(args)), tape
    return rule.augmented_primal(*annotate(args, spec.active, Active), **spec.kwargs)


def _reverse(spec: _Spec, tape: Any, dy: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The cotangents of the active arguments, as tensors shaped like them."""
    rule, like = spec.rule, _like(args)
    if rule.opaque:
        values = tuple(_to_np(a) for a in args)
        cts = rule.reverse(tape, _to_np(dy), *annotate(values, spec.active, Active), **spec.kwargs)
    else:
        cts = rule.reverse(tape, dy, *annotate(args, spec.active, Active), **spec.kwargs)
    out = []
    for c, a, act in zip(cotangents(cts, len(args)), args, spec.active):
        if act:
            c = torch.zeros_like(a) if c is None else _to_tensor(c, like).to(a.dtype).reshape(a.shape)
            out.append(c)
    return tuple(out)


def _forward(spec: _Spec, active: tuple[Any, ...], tangents: tuple[Any, ...], args: tuple[Any, ...]) -> Any:
    rule, like = spec.rule, _like(args)
    if not rule.has_forward:
        raise rule.missing("forward", "under torch")
    if rule.opaque:
        values = tuple(_to_np(a) for a in args)
        y, dy = rule.forward(*annotate(values, active, Active, tuple(_to_np(t) for t in tangents)), **spec.kwargs)
    else:
        y, dy = rule.forward(*annotate(args, active, Active, tangents), **spec.kwargs)
    y = _to_tensor(y, like)
    return torch.zeros_like(y) if dy is None else _to_tensor(dy, like).to(y.dtype).reshape(y.shape)


# -- vmap: a loop over the batch, or the batch whole (vectorized) ---------------------------------


def _slices(info: Any, in_dims: tuple[Any, ...], args: tuple[Any, ...]) -> list[Any]:
    return [
        tuple(a.select(d, i) if d is not None else a for a, d in zip(args, in_dims)) for i in range(info.batch_size)
    ]


def _whole(info: Any, in_dims: tuple[Any, ...], args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Every tensor argument with the batch on its first axis (broadcast where it had none)."""
    out = []
    for a, d in zip(args, in_dims):
        if isinstance(a, _Tensor):
            a = a.movedim(d, 0) if d is not None else a.unsqueeze(0).expand((info.batch_size,) + tuple(a.shape))
        out.append(a)
    return tuple(out)


class _RuleFunction(torch.autograd.Function):
    @staticmethod
    def forward(spec: _Spec, *args: Any) -> Any:
        if any(spec.active):
            y, spec.tape = _augmented(spec, args)
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
    def backward(ctx: Any, dy: Any) -> tuple[Any, ...]:
        spec = ctx.spec
        if not spec.rule.has_reverse:
            raise spec.rule.missing("reverse", "under torch")
        args = tuple(o if t is None else t for t, o in zip(ctx.saved_tensors, ctx.others))
        if not any(spec.active):
            return (None,) * (len(args) + 1)
        cts = iter(_Reverse.apply(spec, ctx.tape, dy, *args))
        full = [next(cts) if act else None for act in spec.active]
        return (None,) + tuple(c if need else None for c, need in zip(full, ctx.needs_input_grad[1:]))

    @staticmethod
    def jvp(ctx: Any, _spec: Any, *tangents: Any) -> Any:
        spec = ctx.spec
        args = tuple(o if t is None else t for t, o in zip(ctx.saved_tensors, ctx.others))
        active = tuple(t is not None for t in tangents)
        if not any(active):
            return None
        live = tuple(t for t in tangents if t is not None)
        return _Forward.apply(spec, active, len(live), *live, *args)

    @staticmethod
    def vmap(info: Any, in_dims: tuple[Any, ...], spec: _Spec, *args: Any) -> tuple[Any, ...]:
        dims = in_dims[1:]
        if spec.rule.vectorized:
            return _RuleFunction.forward(spec, *_whole(info, dims, args)), 0
        outs, tapes = [], _Batched()
        for part in _slices(info, dims, args):
            one = spec.again()
            outs.append(_RuleFunction.forward(one, *part))
            tapes.append(one.tape)
        spec.tape = tapes
        return torch.stack(outs), 0


class _Pass(torch.autograd.Function):
    """A pass of a rule (reverse or forward) as a Function of its own, for its ``vmap`` rule; it has
    no derivative: differentiating it raises ``unsupported`` (formatted with the rule's name)."""

    unsupported = ""

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.name = inputs[0].rule.__name__

    @classmethod
    def backward(cls, ctx: Any, *grads: Any) -> tuple[Any, ...]:
        raise NotImplementedError(cls.unsupported.format(name=ctx.name))


class _Reverse(_Pass):
    """The cotangents of the active arguments: ``reverse(tape, dy, *args)``."""

    unsupported = (
        "{name}: second derivatives through a custom rule are not supported under torch (its "
        "reverse pass has no rule of its own); use a SecondOrder(AutoFiniteDiff(), AutoTorch()) backend"
    )

    @staticmethod
    def forward(spec: _Spec, tape: Any, dy: Any, *args: Any) -> tuple[Any, ...]:
        return _reverse(spec, tape, dy, args)

    @staticmethod
    def vmap(info: Any, in_dims: tuple[Any, ...], spec: _Spec, tape: Any, dy: Any, *args: Any) -> tuple[Any, ...]:
        dims = in_dims[2:]
        if spec.rule.vectorized:
            whole = _whole(info, dims, (dy,) + args)
            return _reverse(spec, tape, whole[0], whole[1:]), tuple(0 for a in spec.active if a)
        parts = []
        for i, part in enumerate(_slices(info, dims, (dy,) + args)):
            parts.append(_reverse(spec, tape[i] if isinstance(tape, _Batched) else tape, part[0], part[1:]))
        return tuple(torch.stack(c) for c in zip(*parts)), tuple(0 for _ in parts[0])


class _Forward(_Pass):
    """The forward rule's tangent: ``forward(*args with tangents)[1]``."""

    unsupported = (
        "{name}: reverse mode over a custom forward rule is not supported under torch; use "
        "the function's reverse rules (def_augmented_primal, def_reverse)"
    )

    @staticmethod
    def forward(spec: _Spec, active: tuple[Any, ...], n: int, *rest: Any) -> Any:
        return _forward(spec, active, _expand(active, rest[:n]), rest[n:])

    @staticmethod
    def vmap(
        info: Any, in_dims: tuple[Any, ...], spec: _Spec, active: tuple[Any, ...], n: int, *rest: Any
    ) -> tuple[Any, ...]:
        dims = in_dims[3:]
        if spec.rule.vectorized:
            whole = _whole(info, dims, rest)
            return _forward(spec, active, _expand(active, whole[:n]), whole[n:]), 0
        outs = [_forward(spec, active, _expand(active, part[:n]), part[n:]) for part in _slices(info, dims, rest)]
        return torch.stack(outs), 0


def _expand(active: tuple[Any, ...], live: tuple[Any, ...]) -> tuple[Any, ...]:
    it = iter(live)
    return tuple(next(it) if a else None for a in active)
