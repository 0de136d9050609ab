"""``AutoTorch``: every operator on PyTorch's eager autograd, the fastest of its interfaces here.

Measured on this project's machine (2-core VM, torch 2.13 CPU, float64, see ``benchmarks/``): eager
``torch.autograd.grad`` takes 32 us for the gradient of ``sum(sin(x)**2)`` at n = 10 against 95 us
for ``torch.func.grad``, and 3.4 ms against 3.8 ms at n = 1e6; a Hessian-vector product by double
backward takes 69 us against 469 us for ``torch.func``'s forward over reverse; a 10 x 10 Hessian 132
us against 810 us. So the adapter uses, with the direction given by ``mode`` (contract section 2):

- reverse: ``torch.autograd.grad``; a batch of cotangents in one backward pass with
  ``is_grads_batched=True`` (a loop of backward passes over one forward pass where torch cannot
  batch the backward).
- forward: dual tensors (``torch.autograd.forward_ad``); a batch of tangents in one forward pass,
  vectorised the way ``torch.autograd.functional.jacobian(strategy="forward-mode")`` does it (a loop
  of forward passes where ``f`` cannot be batched, e.g. it writes a batched value into a buffer).
- jacobian: a batch of pushforwards of the basis of ``x`` or of pullbacks of the basis of ``f(x)``;
  ``mode=None`` picks forward when ``x.size <= f(x).size``.
- hessian, hvp: reverse over reverse (double backward) in every mode, the fastest torch offers;
  second derivative: reverse over forward, or reverse over reverse (2 ``f(x).size`` backward
  passes) from the first operation without a forward-mode derivative on, for that prep.
- ``compile=True``: prepared reverse first-order calls run ``f`` through ``torch.compile``
  (compiled during preparation; AOTAutograd compiles the backward pass). Forward mode and the
  second order run ``f`` eagerly: ``torch.compile`` traces no dual tensors and compiled graphs have
  no double backward. A function whose captured state is duplicated runs eagerly with a warning
  (new duplicates at every call would recompile). Unprepared calls never compile.

Arrays: numpy inputs reach ``f`` as tensors sharing their memory (``torch.from_numpy``; one with a
negative stride, ``x[::-1]``, which torch refuses to share, as a copy), jax arrays through dlpack;
results come back in the family of ``x``. Tensors keep their dtype and device. The user's tensors
are never modified: ``x`` is differentiated through a detached alias, so neither its ``requires_grad``
nor its ``.grad`` changes, and parameters captured by ``f`` (an ``nn.Module``) get no ``.grad`` from
these calls. Results never carry a graph.

Captured state and ``Cache`` contexts reach ``f`` as fresh tensors with no graph history, copied at
every call from the user's arrays (numpy ones become tensors on the device of ``x``), so that
``buf[...] = x * 2`` records a derivative and nothing carries over between calls. ``Constant``
arrays are converted without copying.

Size: over 400 lines in one module, because an adapter is the registry's unit (``AutoTorch.adapter``
names one module, imported at first use).
"""

from __future__ import annotations

import contextlib
import re
import threading
import warnings
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
import torch.autograd.forward_ad as fwAD
from torch._vmap_internals import _vmap  # batches dual-tensor tangents, as torch.autograd.functional does

from diffinterface.extend import (
    DERIVATIVE,
    GRADIENT,
    HESSIAN,
    HVP,
    JACOBIAN,
    LOST_CAUSES,
    NUMPY,
    PULLBACK,
    PUSHFORWARD,
    SECOND_DERIVATIVE,
    TORCH,
    Info,
    LostDerivativeError,
    Operator,
    Runner,
    Runners,
    Unserved,
    complex_dtype,
    const_operand_error,
    const_write_error,
    context_values,
    contract_all,
    duplicate,
    escaped_error,
    family,
    lost_on_the_way,
    positive_strides,
    raised_by,
    shape_size,
    structured_output_error,
    to_family,
    value_form,
)
from diffinterface.extend import (
    Adapter as _Base,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from numpy.typing import ArrayLike

    from diffinterface.extend import Array, Contexts, Target

    # f as the adapter runs it, ``(x, contexts) -> f(x)`` (see _Function.run)
    _Run = Callable[[torch.Tensor, Contexts], torch.Tensor]
    # an operator's body: ``(x, tangents, contexts) -> (primal, result)``
    Body = Callable[[torch.Tensor, tuple[Array, ...], Contexts], Any]

_Tensor = torch.Tensor

# torch's forward-mode dual levels are process-wide ("Nested forward mode AD is not supported"): the
# adapter's forward-mode passes run one at a time, whichever thread calls them.
_DUAL_LEVEL = threading.RLock()


def _dual_level() -> Any:
    """torch's ``dual_level()`` for one forward-mode pass, or NotImplementedError where one is already
    open in the process (torch's own ``forward_ad._current_level``): torch cannot nest forward mode
    (``DifferentiateWith(f, AutoTorch())`` inside AutoTorch's forward mode, or a call inside the user's
    own ``dual_level``), and ``mode=None`` answers NotImplementedError by reverse mode
    (``DirectionFallback``), where an explicit ``mode="forward"`` gets the call's error with the fix."""
    if getattr(fwAD, "_current_level", -1) >= 0:
        raise NotImplementedError(
            "a forward-mode pass of torch is already running around this call, and torch cannot nest forward-mode AD"
        )
    return fwAD.dual_level()


class _Switch:
    """A flag of a :class:`_Function` that its runners' closures read: they hold the switch, not the
    function (a closure holding the function that holds it is a reference cycle, which kept a one-shot
    preparation alive until the collector's next pass)."""

    __slots__ = ("on",)

    def __init__(self, on: bool) -> None:
        self.on = on


def _quiet_asarray(run: Callable[..., Any], quiet: _Switch) -> Callable[..., Any]:
    """``run`` (a call of ``f`` over guarded aliases, which require grad: see :func:`_alias`) with
    torch's warning that ``torch.asarray(alias)`` keeps requires_grad silenced: array-API code in ``f``
    writes ``xp.asarray(a)``, and keeping requires_grad is what ``f`` needs there. Scoped to the
    call: importing the adapter changes no warning filter of the process. Only while ``quiet``
    (``_Function.quiet``) is on: a watched run of ``f`` that read no value and called no
    ``torch.asarray`` (:func:`_after_watch`) is the same straight-line program at every call, and its
    calls skip the filter (6 to 10 us a call, measured: a prepared 10x10 Jacobian of ``sin(A @ x)``,
    ``A`` captured, 1.10-1.13 -> 1.03 of torch's own)."""

    def quieted(*args: Any) -> Any:
        if not quiet.on:
            return run(*args)
        return _quietly(run, *args)

    return quieted


def _quietly(run: Callable[..., Any], *args: Any) -> Any:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.asarray: unspecified requires_grad", category=UserWarning)
        return run(*args)


def as_tensor(value: Array | ArrayLike, like: torch.Tensor | None = None) -> torch.Tensor:
    """An input as a tensor without copying where possible (a read-only numpy array is copied)."""
    if type(value) is _Tensor:
        return value
    if type(value) is np.ndarray:
        flags = value.flags  # torch shares what it can; it refuses a negative stride (x[::-1]: copied)
        shared = flags.writeable and flags.c_contiguous and min(value.strides, default=0) >= 0
        out = torch.from_numpy(value) if shared else torch.tensor(positive_strides(value))
        return out if like is None or like.device == out.device else out.to(like.device)
    if isinstance(value, np.generic):
        value = np.asarray(value)
    return to_family(value, TORCH, like=like)


def _fresh(value: Any, device: torch.device) -> Any:
    """The duplicate of a captured array or cache for one call: a new tensor with no graph history."""
    if isinstance(value, _Tensor):
        return value.detach().clone()
    if isinstance(value, np.ndarray):
        return torch.tensor(positive_strides(value), device=device)
    if family(value) is not None and not isinstance(value, np.generic):  # a jax array
        return as_tensor(value).clone().to(device)
    return value


def _alias(value: Any, device: torch.device) -> torch.Tensor | None:
    """The guarded alias of a captured array for a call under grad mode (``Target.guarded``): a
    tensor sharing the user's memory that requires grad, so that a write into it raises ("a leaf
    Variable that requires grad is being used in an in-place operation") and ``f`` reruns over
    copies. The backward passes go to ``x`` only. None where no such alias exists (another device, integers, a read-only
    or strided numpy array): the array is copied. Not guarded: writes inside ``torch.no_grad()`` or
    through ``.detach()`` or ``.data`` in ``f`` (documented in docs/backends.md)."""
    if isinstance(value, _Tensor):
        if value.device == device and (value.is_floating_point() or value.is_complex()) and not value.is_inference():
            return value.detach().requires_grad_()
    elif type(value) is np.ndarray and device.type == "cpu" and value.dtype.kind in "fc":
        flags = value.flags
        if flags.writeable and flags.c_contiguous and min(value.strides, default=0) >= 0:
            return torch.from_numpy(value).requires_grad_()
    return None


# torch refusing what f did with a guarded alias (a tensor that requires grad, see _alias): a write
# into it or into a view of it, an out= argument, .numpy(), an input that must not require grad
# (batch_norm's running statistics). torch raises each as a plain RuntimeError from its autograd
# checks (TORCH_CHECK in check_inplace, the out= and .numpy() checks, the not-differentiable-input
# check), with no exception type or attribute of its own, so their wording is the only mark; it is
# checked here, in torch's adapter, and tests/test_torch.py provokes each refusal through f.
_REFUSALS = re.compile(
    r"leaf Variable that requires grad is being used in an in-place operation"
    r"|^Output \d+ of \w+ is a view and is being modified inplace"
    r"|^Can't call numpy\(\) on Tensor that requires grad"
    r"|functions with out=\.\.\. arguments don't support automatic differentiation, but one of the arguments "
    r"requires grad"
    r"|This input cannot have requires_grad True"
)


def _constant(value: Any, device: torch.device) -> Any:
    if isinstance(value, np.ndarray) or (family(value) not in (None, NUMPY, TORCH)):
        return as_tensor(value).to(device)
    return value


class _Function:
    """``f`` as the adapter calls it: ``fn(x, contexts) -> tensor``, over fresh duplicates of its
    captured state and caches (contract section 7). ``simple`` when there are none: ``f`` is called as is.

    With ``compile=True``, ``run`` calls ``torch.compile(f)`` (its cache is keyed on the user's code,
    as if the user had compiled ``f``) with the context values as arguments. A function whose
    captured state is duplicated is not compiled: its duplicates are new objects at every call,
    which ``torch.compile`` would recompile for (see :func:`_compilable`).
    """

    __slots__ = ("target", "simple", "run", "eager", "writes_input", "watch", "quiet", "learned")

    def __init__(self, target: Target, contexts: Contexts, compile: bool) -> None:
        self.target = target
        # whether the differentiated runs of f go under _Watch (see there): at the first one, and at
        # every one after a run where f read a tensor's value
        self.watch = True
        # what runs of functions of f's code over the same objects learned (Target.learned; None
        # where f has contexts or captured state): a watch that saw no read (_watch_for)
        self.learned = target.learned if not contexts else None
        # whether f's runs over guarded aliases silence torch.asarray's warning (_quiet_asarray): until
        # a watched run shows a straight-line f that calls no torch.asarray
        self.quiet = _Switch(True)
        # set when f wrote into its input in reverse mode (torch refused the write into the leaf):
        # from then on f gets a differentiable copy of x (see _record)
        self.writes_input = False
        self.simple = not contexts and target.plain
        # run(x, contexts) -> tensor: compiled with compile=True; eager(x, contexts): never compiled
        self.run = self._runner(torch.compile(target.f, dynamic=False) if compile else target.f)
        self.eager = self._runner(target.f) if compile else self.run

    def _runner(self, call: Callable[..., Any]) -> Callable[[torch.Tensor, Contexts], torch.Tensor]:
        target, quiet = self.target, self.quiet  # the closures below hold these, never self (a cycle)
        if self.simple:  # the common case, on the prepared fast path: one call and a type check

            def run(x: torch.Tensor, contexts: Contexts) -> torch.Tensor:
                y = call(x)
                return target.checked(y if type(y) is _Tensor else _output(y, x, target))

            return run
        plain = target.plain

        def run_with_state(x: torch.Tensor, contexts: Contexts) -> torch.Tensor:
            device = x.device

            def fresh(v: Any) -> Any:
                return _fresh(v, device)

            def alias(v: Any) -> Any:
                return _alias(v, device)

            def constant_alias(a: Any) -> Any:
                guarded = _alias(a, device)
                return _constant(a, device) if guarded is None else guarded

            def run(aliased: bool) -> torch.Tensor:
                constant = constant_alias if aliased else fresh
                values = context_values(contexts, lambda v: duplicate(v, fresh), lambda v: duplicate(v, constant))
                y = (call if plain else target.instance(fresh, guard=alias if aliased else None, key=device))(
                    _attempted(x) if aliased else x, *values
                )
                return target.checked(y if type(y) is _Tensor else _output(y, x, target))

            # Under grad mode the captured arrays and Constant contexts are guarded aliases until f
            # writes into one (outside grad mode, copies: an alias does not guard there). In forward
            # mode an alias that requires grad makes torch record a backward graph (measured: +5% on a
            # jvp of an elementwise f at 1e4) but saves the copy, which costs more for a captured
            # matrix (a jacobian of sin(A @ x), A 1e5 x 10: 1.37 -> 0.79 of the native call).
            if not torch.is_grad_enabled():
                return run(False)
            return target.guarded_with(_quiet_asarray(run, quiet), bool(contexts), Adapter.refused_write)

        plan = target.plan
        if plain or target.y is not None or plan is None:
            return run_with_state

        # f with captured state only (no contexts, no output buffer): f over the aliases, reused
        # between calls (StatePlan.aliased), without the general path's closures; a failure goes
        # to the general path, which reruns over copies and learns that f writes.
        def run_aliased(x: torch.Tensor, contexts: Contexts) -> torch.Tensor:
            if contexts or not (plan.aliases and torch.is_grad_enabled()):
                return run_with_state(x, contexts)
            device = x.device
            try:
                aliased = plan.aliased(lambda v: _alias(v, device), lambda v: _fresh(v, device), device)
                call = target.over(aliased)
                z = _attempted(x)
                y = _quietly(call, z) if quiet.on else call(z)
            except Exception as error:
                if not raised_by(error, Adapter.refused_write):
                    raise  # f's own error, after one run of f
                plan.aliases = False  # f wrote into an alias: over copies from now on (this call too)
                return run_with_state(x, contexts)
            return target.checked(y if type(y) is _Tensor else _output(y, x, target))

        return run_aliased


def _attempted(x: torch.Tensor) -> torch.Tensor:
    """``f``'s input in a run over guarded aliases, which a refused write runs again over copies: ``x``
    itself where torch refuses its writes (a leaf that requires grad, under grad mode: the reverse-mode
    recording's alias), else a copy of its own (of a dual tensor: its primal's and its tangent's), so
    that the run again starts from ``x`` as it was. Before 2026-12-08 an ``f`` that wrote into its
    input (``z *= -1.5``) and then into a captured array ran again at the written input in forward
    mode (a pushforward at -1.5 times x, silently)."""
    return x if x.is_leaf and x.requires_grad and torch.is_grad_enabled() else x.clone()


def _output(y: Any, x: torch.Tensor, target: Target) -> torch.Tensor:
    """What ``f`` returned, as a plain tensor (a Python or numpy number: a constant of x's dtype).

    Under ``closure="const"`` a number from ``f`` with numpy state captured is the mark of a write
    into that state: numpy turns the tensor written into it into a number, and its derivative is
    lost. That is an error, never a silent zero derivative."""
    if isinstance(y, _Tensor):  # a subclass (nn.Parameter)
        return y.as_subclass(_Tensor)
    structured = structured_output_error(y, target.call)
    if structured is not None:
        raise structured
    error = const_write_error(target, f"f returned a {type(y).__name__}, not a tensor computed from x", "numpy")
    if error is not None:
        raise error
    return torch.as_tensor(positive_strides(np.asarray(y)) if family(y) == NUMPY else y, dtype=x.dtype, device=x.device)


def _compilable(target: Target) -> bool:
    """Whether ``compile=True`` can compile ``f``; warns, naming the captured state, where it cannot."""
    if target.plain:
        return True
    plan = target.plan
    what = ", ".join(plan.where()) if plan is not None and not plan.empty else "the output buffer y"
    warnings.warn(
        f"AutoTorch(compile=True): f runs eagerly, not compiled: its state ({what}) is duplicated at "
        f"every call (closure='duplicated'), and torch.compile would recompile for every new duplicate. "
        f"If f only reads its captured arrays, use AutoTorch(compile=True, closure='const').",
        stacklevel=6,
    )
    return False


# -- a lost derivative -------------------------------------------------------------------------

# Tensor methods that hand out a value with no derivative attached, by the name torch gives them in
# __torch_function__, and how a user writes them.
_ESCAPES = {
    "detach": ".detach()",
    "detach_": ".detach_()",
    "item": ".item()",
    "tolist": ".tolist()",
    "numpy": ".numpy()",
    "__array__": "a conversion to numpy (np.asarray, np.array([...]))",
    "__float__": "float(t)",
    "__int__": "int(t)",
    "__index__": "an index taken from x",
    "__complex__": "complex(t)",
}


_CONSTRUCTORS = ("asarray", "as_tensor", "tensor", "from_numpy", "new_tensor")
# factories that read only the shape, dtype and device of their tensor argument (torch documents
# each as "a tensor ... with the same size as input"): their output is constant in x, not lost
_SHAPE_ONLY = ("new_zeros", "new_ones", "new_empty", "new_full", "new_empty_strided")


class _Provenance(torch.overrides.TorchFunctionMode):
    """Follows, through torch's own function mode, which floating tensors are computed from ``x``,
    and records where a value computed from ``x`` leaves autograd (``_ESCAPES``, ``.data``, an
    operation under ``torch.no_grad()``). Run once, only where ``f(x)`` came back without a graph."""

    def __init__(self, root: torch.Tensor) -> None:
        super().__init__()
        self.derived = {id(root): root}  # strong references: an id is not reused while this runs
        self.escapes: list[Any] = []

    def _mark(self, value: Any) -> None:
        if _floating(value):
            self.derived[id(value)] = value
        elif isinstance(value, (tuple, list)):
            for v in value:
                self._mark(v)

    def _from_x(self, value: Any, with_graph: bool = False) -> bool:
        """Whether ``value`` holds a tensor computed from x (``with_graph``: one that carries a graph)."""
        if isinstance(value, _Tensor):
            return id(value) in self.derived and (value.requires_grad or not with_graph)
        if isinstance(value, (tuple, list)):
            return any(self._from_x(v, with_graph) for v in value)
        if isinstance(value, dict):
            return any(self._from_x(v, with_graph) for v in value.values())
        return False

    def _escape(self, func: Callable[..., Any], name: str, cut: bool) -> str | None:
        """How a value computed from x left autograd in ``func`` (``cut``: its inputs carry x's graph,
        its floating outputs none), or None."""
        if name == "__get__":  # a property: only .data hands out a tensor without its graph
            return ".data" if getattr(getattr(func, "__self__", None), "__name__", "") == "data" else None
        if name != "__bool__" and not torch.is_grad_enabled():
            return f"{name} under torch.no_grad()"
        return f"torch.{name}" if cut and name in _CONSTRUCTORS else None

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Collection[type],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name.endswith("_like") or name in _SHAPE_ONLY or not (self._from_x(args) or self._from_x(kwargs)):
            return func(*args, **kwargs)
        if name in _ESCAPES:  # recorded before the call, which may raise (.numpy() of x)
            self.escapes.append(_ESCAPES[name])
        out = func(*args, **kwargs)
        # an operation whose inputs carry x's graph and whose floating outputs carry none: a
        # constructor (torch.asarray) lost it; any other is one torch defines as non-differentiable
        # (norm(x, 0) counts entries), constant in x as torch.autograd.functional.jacobian has it
        cut = torch.is_grad_enabled() and self._from_x((args, kwargs), with_graph=True) and not _graph_outputs(out)
        escape = None if name in _ESCAPES else self._escape(func, name, cut)
        if escape is not None:
            self.escapes.append(escape)
        if name != "__get__" and not cut:
            self._mark(out)
            if name == "__setitem__" or name.endswith("_") or "out" in kwargs:  # written in place
                self._mark(args[0] if args else None)
                self._mark(kwargs.get("out"))
        return out


def _reaches(y: Any, root: torch.Tensor) -> bool:
    """Whether torch's reverse graph of ``y`` reaches ``root`` (``allow_unused``: None where not)."""
    if not (isinstance(y, _Tensor) and y.requires_grad):
        return False
    return torch.autograd.grad(y, root, torch.ones_like(y), allow_unused=True)[0] is not None


def _graph_outputs(out: Any) -> bool:
    """Whether an operation's floating outputs carry a graph (True where it has none)."""
    outs = [o for o in (out if isinstance(out, (tuple, list)) else (out,)) if _floating(o)]
    return not outs or any(o.requires_grad for o in outs)


def _floating(value: Any) -> bool:
    """A floating or complex tensor: the only kind that carries a derivative."""
    return isinstance(value, _Tensor) and (value.is_floating_point() or value.is_complex())


def _lost(fn: _Function, x: torch.Tensor, contexts: Contexts, forward: bool = False) -> None:
    """Called where ``f(x)`` carries no derivative back to ``x``: raises :class:`LostDerivativeError`
    where a value computed from ``x`` left autograd on the way (see :class:`_Provenance`), and
    returns where ``f`` is constant in ``x`` or reaches its output only through operations torch
    defines with no derivative (``norm(x, 0)``): the derivatives are then zeros, as torch's own
    ``jacobian`` gives. In forward mode (no tangent),
    an output that reverse mode can follow back to ``x`` means an operation without a forward rule
    (a ``torch.autograd.Function`` without ``jvp``): NotImplementedError, which ``mode=None`` answers
    by switching to reverse mode."""
    leaf = x.detach().clone().requires_grad_()  # an op whose output no longer requires grad is named
    with torch.enable_grad():
        root = leaf.clone()  # f may write into its input: never into the user's x
        mode = _Provenance(root)
        cause: Exception | None = None
        try:
            with mode:
                y = fn.eager(root, contexts)
        except Exception as error:  # f fails where x requires grad (np.asarray(t) does): the escape is named
            if not mode.escapes:
                raise
            y, cause = None, error
    if not mode.escapes:  # constant in x, or through operations torch defines with no derivative
        if forward and _reaches(y, root):
            raise NotImplementedError(
                "f(x) carries no forward-mode tangent, while reverse mode follows it back to x: an "
                "operation of f has no forward-mode derivative (a torch.autograd.Function without jvp)"
            )
        return
    where = ", ".join(dict.fromkeys(mode.escapes))
    raise LostDerivativeError(
        f"{fn.target.call}: f(x) is computed from x, but its derivative was lost on the way ({where}), so "
        f"every derivative would come out zero. {LOST_CAUSES}."
    ) from cause


# -- a derivative lost on part of the way -------------------------------------------------------

# Tensor methods that hand a tensor's value to Python: f branches on it (``if x.max() > 1:``) or
# computes with it. The floating ones (_ESCAPES) drop the derivative of what they read.
_READS = frozenset(("__bool__", "__int__", "__index__", "equal", "is_nonzero"))
_VALUE_ESCAPES = frozenset(("item", "tolist", "numpy", "__array__", "__float__", "__complex__"))
_WATCHED = _READS | _VALUE_ESCAPES | {"asarray"}  # one test per operation for the common case: none


def _carries(value: Any) -> bool:
    """Whether a tensor carries a derivative: it requires grad, or it is a dual tensor with a tangent."""
    if not isinstance(value, _Tensor) or not (value.is_floating_point() or value.is_complex()):
        return False
    if value.requires_grad:
        return True
    try:
        return fwAD.unpack_dual(value).tangent is not None
    except RuntimeError:  # a tensor vmap batches: taken as carrying, the check decides
        return True


class _Watch(torch.overrides.TorchFunctionMode):
    """Sees, through torch's own function mode, where ``f`` reads a tensor's value into Python.

    ``escapes``: the floating reads of a tensor that carries a derivative (``.item()``, ``.tolist()``,
    ``float(t)``, ``.numpy()``): whatever f computes from them has no derivative, which is right where
    they only steer control flow (``if x.max().item() > 1:``) and wrong where they reach f(x); the
    call then checks the derivative itself (:func:`_check_escapes`). Reads where torch's gradients are
    off are not escapes: a ``torch.autograd.Function``'s forward runs so (a rule that converts to numpy
    has its derivative from its backward: ``DifferentiateWith(f, AutoMLX())`` under AutoTorch was
    checked by a central difference of MLX's float32-accurate values, which differed by 3e-3 from its
    exact derivative and raised, 2026-12-07's random programs, seed 7), and so does a
    ``torch.no_grad()`` inside ``f``, the user's own word that nothing there is differentiated (torch's
    own call gives that derivative too); where the caller turned gradients off around the call, every
    read counts. ``reads``: any read of a value (``__bool__`` too): f's operations may differ at
    another x, so the prep keeps watching; an f
    without any is the same straight-line program at every x and runs unwatched from then on (the
    mode costs a Python call per torch operation). ``asarray``: f called ``torch.asarray`` (array-API
    code's ``xp.asarray``), whose warning about an alias that requires grad is silenced around f's
    runs (:func:`_quiet_asarray`)."""

    def __init__(self, key: tuple[Any, ...] | None = None) -> None:
        super().__init__()
        self.escapes: list[str] = []
        self.reads = False
        self.asarray = False
        self.key = key  # the Target.learned key of its verdict, where the function has one (_watch_for)
        self.grad = True  # whether gradients were on where f's run began (__enter__)

    def __enter__(self) -> _Watch:
        self.grad = torch.is_grad_enabled()
        return cast("_Watch", super().__enter__())

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Collection[type],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        name = getattr(func, "__name__", "")
        if name in _WATCHED:
            if name == "asarray":
                self.asarray = True
            else:
                self.reads = True
                # recorded before .numpy() raises; a read where f's run turned gradients off is not one:
                # inside a torch.autograd.Function's forward (a rule's own host conversion: its backward
                # gives the derivative) or f's own torch.no_grad(), which says to differentiate nothing
                # there (under the caller's torch.no_grad(), every read counts)
                if name in _VALUE_ESCAPES and args and (torch.is_grad_enabled() or not self.grad) and _carries(args[0]):
                    self.escapes.append(_ESCAPES[name])
        return func(*args, **(kwargs or {}))


# What a run of f goes under where it is not watched (``with _UNWATCHED if watch is None else watch``,
# ``watch = _watch_for(fn, x) if fn.watch else None``: written inline at the three runs of f, two calls less
# per run on the prepared path); a nullcontext holds nothing and may be entered again and at once
_UNWATCHED = contextlib.nullcontext()


# what a value read out of torch must stay where it reaches f(x), in the lost-derivative errors
_KEEP = "a tensor (x[0] * x[1], not x[0].item() * x[1]; if x.max().item() > 1: only steers control flow)"


def _numpy_refused(fn: _Function, error: BaseException, watch: _Watch | None) -> LostDerivativeError | None:
    """The call's error where f failed because torch refuses ``.numpy()`` of a tensor that carries a
    derivative (``np.asarray(t)`` too), after the guard's retries over copies."""
    conversions = (_ESCAPES["numpy"], _ESCAPES["__array__"])
    numpy = [e for e in (watch.escapes if watch is not None else ()) if e in conversions]
    if not numpy or not raised_by(error, Adapter.refused_write):
        return None
    return lost_on_the_way(
        fn.target.call,
        numpy,
        (
            "torch refuses to convert a tensor that requires grad to numpy (a value read only for control flow: "
            "t.detach().numpy())"
        ),
        _KEEP,
    )


def _watch_for(fn: _Function, x: torch.Tensor) -> _Watch | None:
    """The watch of a run of ``f`` where ``fn.watch`` says to watch: None (and no watching from then
    on) where a function of ``f``'s code over the very objects ``f``'s slots hold ran watched at an
    ``x`` of this shape, dtype and device and read no value (``Target.learned``, the closure walk's
    summary: a lambda written anew at each call of a loop is such a function). Its runs would be the
    same straight-line program as that function's, whose later runs go unwatched too; the mode's
    Python call at every torch operation costs a first call of such an ``f`` 10-20 us, measured."""
    learned = fn.learned
    if learned is None:
        return _Watch()
    key = _watch_key(x)
    if learned.get(key):
        fn.watch = fn.quiet.on = False
        return None
    return _Watch(key)


_LEARNED_WATCH = "torch: ran watched without reading a value"  # a Target.learned key's first item


def _watch_key(x: torch.Tensor) -> tuple[Any, ...]:
    """The ``Target.learned`` key of the watch's verdict at ``x``: it holds for ``x``'s shape, dtype and device."""
    return (_LEARNED_WATCH, x.shape, x.dtype, x.device)


def _after_watch(fn: _Function, watch: _Watch | None, x: torch.Tensor, contexts: Contexts, forward: bool) -> None:
    """After a watched run of f that succeeded: keeps watching where f read values, and checks the
    derivative where a value that carried one escaped. A run that read none and called no
    ``torch.asarray`` is learned for the functions of f's code over the same objects (:func:`_watch_for`)."""
    if watch is None:
        return
    fn.watch = watch.reads
    fn.quiet.on = watch.reads or watch.asarray
    if watch.escapes:
        _check_escapes(fn, x, contexts, watch.escapes, forward)
    elif not fn.quiet.on and fn.learned is not None:
        fn.learned[watch.key] = True  # (_watch_for made the key where fn.learned is a dict)


def _check_escapes(fn: _Function, x: torch.Tensor, contexts: Contexts, escapes: list[str], forward: bool) -> None:
    """Raises :class:`LostDerivativeError` where a value read out of torch reached f(x): torch's
    directional derivative ``<w, J v>`` (random ``v`` and ``w``, seeded) against a central difference
    of f along ``v``, at two steps (their difference bounds the truncation error, so a kink or a branch
    switch inside the step widens the tolerance instead of raising). Run only where an escape was
    seen; real inputs and outputs (a complex f is not checked)."""
    x0 = x.detach()
    if not x0.is_floating_point() or x0.numel() == 0:
        return
    gen = torch.Generator().manual_seed(0)
    v = torch.randn(x0.shape, generator=gen, dtype=x0.dtype).to(x0.device)
    v = v / torch.linalg.vector_norm(v)
    dy = xt = None  # the tangent of f(x) (forward), or the input the gradient is taken for (reverse)
    if forward:
        with _DUAL_LEVEL, _dual_level():
            y, dy = fwAD.unpack_dual(fn.eager(fwAD.make_dual(x0.clone(), v), contexts))
    else:
        with torch.enable_grad():
            xt = x0.clone().requires_grad_()
            y = fn.eager(xt.clone(), contexts)  # a clone: f may write into its input
    if not y.is_floating_point():
        return
    w = torch.randn(y.shape, generator=gen, dtype=y.dtype).to(y.device)
    if xt is None:  # forward
        ad = 0.0 if dy is None else float((w * dy.detach()).sum())
    else:
        g = torch.autograd.grad(y, xt, w, allow_unused=True)[0] if y.requires_grad else None
        ad = 0.0 if g is None else float((g * v).sum())
    eps = torch.finfo(x0.dtype).eps
    h = eps ** (1 / 3) * max(1.0, float(x0.abs().max()))
    with torch.no_grad():
        y0 = fn.eager(x0.clone(), contexts).detach()

        def central(step: float) -> float:
            up, down = fn.eager(x0 + step * v, contexts), fn.eager(x0 - step * v, contexts)
            return float((w * (up.detach() - down.detach())).sum()) / (2 * step)

        fd, fd2 = central(h), central(2 * h)
        noise = eps * float((w.abs() * y0.abs()).sum()) / h  # rounding in the difference
    error = escaped_error(fn.target.call, "torch", escapes, ad, fd, fd2, noise, eps, _KEEP)
    if error is not None:
        raise error


# -- the two directions ------------------------------------------------------------------------


def _record(
    fn: _Function, x: torch.Tensor, contexts: Contexts, run: _Run | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, xt)``: ``fn.run`` (or ``run``) evaluated on ``xt``, a detached alias of ``x`` that requires
    grad. A write of ``f`` into it is refused by torch (the user's ``x`` is never modified): that
    refusal, and only it, makes ``f`` run again on ``xt.clone()``, a copy whose writes autograd
    differentiates through, and from then on for this preparation. A ``y`` with no graph is checked
    by :func:`_lost` (an error, unless ``f`` is constant)."""
    xt = x.detach().requires_grad_()
    run = fn.run if run is None else run
    if not torch.is_grad_enabled():
        with torch.enable_grad():
            return _record(fn, x, contexts, run)

    def once(run: _Run) -> torch.Tensor:
        if fn.writes_input:
            return run(xt.clone(), contexts)
        try:
            return run(xt, contexts)
        except Exception as error:
            if not raised_by(error, Adapter.refused_write):
                raise  # f's own error, after one run of f
            fn.writes_input = True
            return run(xt.clone(), contexts)

    watch = _watch_for(fn, x) if fn.watch else None
    try:
        with _UNWATCHED if watch is None else watch:
            y = once(run if watch is None else fn.eager)  # a watched run is eager: torch.compile would trace the mode
    except Exception as error:
        known = _numpy_refused(fn, error, watch)
        if known is not None:
            raise known from error
        raise
    _after_watch(fn, watch, x, contexts, False)
    if not y.requires_grad:
        _lost(fn, x, contexts)
    return y, xt


class _Recorded:
    """``f`` recorded by a one-shot ``output_info`` (:meth:`Adapter.output_info`) as the runner of a
    reverse-mode operator records it (:func:`_record`), left in ``Info.value`` for that runner's
    first call: a one-shot gradient evaluates ``f`` once, not once for f(x)'s shape and again with
    its graph. ``fn``: the :class:`_Function` that ran it, which the runners go on with (what its
    watch learned, see :func:`_function_for`)."""

    __slots__ = ("y", "xt", "fn")

    def __init__(self, y: torch.Tensor, xt: torch.Tensor, fn: _Function) -> None:
        self.y, self.xt, self.fn = y, xt, fn


# the operators whose runners start with _record in reverse mode (hvp and the Hessian: reverse over reverse)
_RECORDING = (GRADIENT, PULLBACK, JACOBIAN, HVP, HESSIAN)


def _recorder(info: Info) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """:func:`_record`, whose first call takes the recording a one-shot ``output_info`` left in
    ``info`` (see :class:`_Recorded`), if there is one."""
    if not (info.oneshot and type(info.value) is _Recorded):
        return _record

    def record(
        fn: _Function, x: torch.Tensor, contexts: Contexts, run: _Run | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        recorded = info.take_value()
        if type(recorded) is _Recorded:
            return recorded.y, recorded.xt
        return _record(fn, x, contexts, run)

    return record


class _Pushed:
    """A one-shot forward-mode pushforward computed by ``output_info`` (one tangent,
    ``Target.tangents``): ``f(x)`` and its tangent from the one evaluation of ``f`` the call needs,
    left in ``Info.value`` for the runner's first call (:func:`_pusher`)."""

    __slots__ = ("y", "dy", "fn")

    def __init__(self, y: torch.Tensor, dy: torch.Tensor, fn: _Function) -> None:
        self.y, self.dy, self.fn = y, dy, fn


def _function_for(info: Info, target: Target, contexts: Contexts, compile_: bool) -> _Function:
    """The runners' :class:`_Function`: the one a one-shot ``output_info`` ran ``f`` with (its
    :class:`_Recorded` or :class:`_Pushed`), else a new one. Going on with it, the runners keep what
    its first run learned: an ``f`` that read no tensor's value there runs unwatched from then on
    (the straight-line program of :class:`_Watch`; a forward-mode Jacobian after a recording:
    one watched run of f, not two), and one that wrote into its input gets a copy."""
    value = info.value
    if info.oneshot and not compile_ and type(value) in (_Recorded, _Pushed):
        return cast("_Recorded | _Pushed", value).fn
    return _Function(target, contexts, compile_)


def _pushed(fn: _Function, x: torch.Tensor, target: Target, contexts: Contexts) -> _Pushed | None:
    """:func:`_jvps` along the one-shot call's tangent at the user's ``x`` (``f`` gets its copy as the
    primal, and the checks of a lost derivative see ``x`` as it was), or None where an operation of
    ``f`` has no forward-mode rule (the runner's direction fallback then decides, as for any call)."""
    try:
        return _Pushed(*_jvps(fn, x, _tangent(target.one_tangent, x), contexts, False), fn)
    except NotImplementedError:
        return None


def _pusher(info: Info) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """:func:`_jvps`, whose first call takes the pushforward a one-shot ``output_info`` computed
    (:class:`_Pushed`), if there is one."""
    if not (info.oneshot and type(info.value) is _Pushed):
        return _jvps

    def jvps(
        fn: _Function, x: torch.Tensor, tangents: torch.Tensor, contexts: Contexts, batched: bool, loop: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        pushed = info.take_value()
        if type(pushed) is _Pushed and not batched:
            return pushed.y, pushed.dy
        return _jvps(fn, x, tangents, contexts, batched, loop)

    return jvps


def _vjps(
    y: torch.Tensor,
    xt: torch.Tensor,
    cotangents: Any,  # a tensor (a batch of them with batched); None for the gradient of a scalar y
    batched: bool,
    create_graph: bool = False,
    unused: Callable[[], None] | None = None,
) -> torch.Tensor:
    """``ct @ J`` for one cotangent, or for each row of ``cotangents`` (``batched``, one backward pass).

    ``xt`` is the only input differentiated: where torch says ``y`` does not depend on it (its
    ``allow_unused`` gradient is None; no cost measurable on a prepared gradient at n = 10),
    ``unused()`` is called (it raises where the derivative was lost, see :func:`_lost`) and the
    result is zero."""
    if y.requires_grad and not (batched and cotangents.shape[0] == 0):  # no cotangents: an empty f(x)
        grad = torch.autograd.grad
        g: torch.Tensor | None
        if not batched:
            g = grad(y, xt, cotangents, create_graph=create_graph, allow_unused=True)[0]
        elif cotangents.shape[0] == 1:  # one row (a scalar f): one plain backward pass, no vmap
            g = grad(y, xt, cotangents[0], create_graph=create_graph, allow_unused=True)[0]
            g = None if g is None else g[None]
        else:
            try:
                g = grad(
                    y,
                    xt,
                    cotangents,
                    retain_graph=True,
                    create_graph=create_graph,
                    is_grads_batched=True,
                    allow_unused=True,
                )[0]
            except RuntimeError:  # a backward torch cannot vmap: one pass per cotangent
                parts = [
                    grad(y, xt, ct, retain_graph=True, create_graph=create_graph, allow_unused=True)[0]
                    for ct in cotangents
                ]
                g = None if any(p is None for p in parts) else torch.stack(parts)
        if g is not None:
            return g
        if unused is not None:
            unused()
    shape = (cotangents.shape[0],) + xt.shape if batched else xt.shape  # f does not depend on x
    return torch.zeros(shape, dtype=xt.dtype, device=xt.device)


def _differentiable_gradient(
    fn: _Function, x: torch.Tensor, contexts: Contexts, record: Callable[..., Any] = _record
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(f(x) detached, gradient with its graph, xt)`` for double backward.

    ``create_graph`` keeps the first graph's buffers while ``f(x)`` holds it: it is dropped here,
    before the second backward pass, as in the native two-line hvp (measured: 3% at n = 1e4)."""
    y, xt = record(fn, x, contexts, fn.eager)  # compiled graphs: no double backward
    grad = _vjps(y, xt, None, False, create_graph=True, unused=lambda: _lost(fn, x, contexts))
    return y.detach(), grad, xt


def _no_graph(t: torch.Tensor) -> torch.Tensor:
    return t.detach() if t.requires_grad else t


def _jvps(
    fn: _Function, x: torch.Tensor, tangents: torch.Tensor, contexts: Contexts, batched: bool, loop: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, J @ t)`` for one tangent, or for each row of ``tangents`` (``batched``), by dual tensors.

    ``f``'s primal is ``x`` itself for one tangent of a large ``x`` (from :data:`_ALIAS_PRIMAL_FROM`
    elements: a detached alias that requires grad, whose in-place writes torch refuses; such a write
    runs ``f`` again on a copy), else a copy of ``x`` (a dual tensor shares its primal's memory, and
    ``f`` may write into its input: the user's ``x`` is never modified). The tangents are copies too, but
    under the guarded alias (torch refuses the write before it reaches them): the dual tensor shares its
    tangent's memory as well, and a write of ``f`` into its input writes into the tangent (the user's,
    or a prep's own seeds: a forward Jacobian's basis, a derivative's one). A batch is one vectorised pass, or a
    loop of single passes with ``loop`` (complex outputs: torch's batched forward mode gets some of
    them wrong, e.g. ``stft``, where single passes are exact) and where ``f`` cannot be batched.
    Parameters ``f`` captures may require grad: the results are detached from any graph they record.
    An output with no tangent is checked by :func:`_lost` (an error, unless ``f`` is constant)."""
    if not batched and not fn.watch and x.numel() < _ALIAS_PRIMAL_FROM:
        # one tangent of a small x, unwatched (a prepared call's, and a new function's of a code over the same
        # objects): the single pass below, inline (its closure and checks were 1 us of a 40 us call at n = 10)
        primal_x = x.detach().clone() if x.requires_grad else x.clone()  # (a detach is a new tensor: 0.8 us)
        with _DUAL_LEVEL, _dual_level():
            y, dy = fwAD.unpack_dual(fn.eager(fwAD.make_dual(primal_x, tangents.clone()), contexts))
        if dy is None:
            _lost(fn, x, contexts, forward=True)  # (returns where f is constant)
            dy = torch.zeros_like(y)
        return _no_graph(y), _no_graph(dy)
    eager = fn.eager  # torch.compile does not trace dual tensors
    lost = []
    watch = _watch_for(fn, x) if fn.watch else None

    def one(t: torch.Tensor, primal_x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # t and primal_x: the pass's own (a write of f into its input goes through the dual tensor into both)
        with _dual_level():
            dual = fwAD.make_dual(primal_x, t)
            # f alone under the watch: the mode costs a Python call per torch operation it sees
            with _UNWATCHED if watch is None else watch:
                out = eager(dual, contexts)
            y, dy = fwAD.unpack_dual(out)
        if dy is None:
            lost.append(True)
            dy = torch.zeros_like(y)
        return _no_graph(y), _no_graph(dy)

    with _DUAL_LEVEL:  # one dual level at a time in the process
        if (
            not batched
            and x.numel() >= _ALIAS_PRIMAL_FROM
            and not fn.writes_input
            and torch.is_grad_enabled()
            and _guards(x)
        ):
            # one tangent of a large x: the primal is x itself, guarded (a detached alias that requires
            # grad, whose in-place writes torch refuses, as _record's), not a copy; an f that writes
            # into its input runs again on a copy, and on copies from then on (fn.writes_input)
            try:  # (torch refuses the write before it reaches the tangent: the caller's, uncopied)
                y, out = one(tangents, x.detach().requires_grad_())
            except Exception as error:
                if not raised_by(error, Adapter.refused_write):
                    raise  # f's own error, after one run of f
                fn.writes_input = True
                lost.clear()
                y, out = one(tangents.clone(), x.detach().clone())
        elif not batched:  # (the fast path's copies, above)
            y, out = one(tangents.clone(), x.detach().clone() if x.requires_grad else x.clone())
        elif tangents.shape[0] == 0:  # no tangents (an empty x): f's value and an empty batch
            y = _no_graph(eager(x.detach().clone(), contexts))
            out = y.new_zeros((0,) + tuple(y.shape))
        else:
            primal: list[torch.Tensor] = []
            # each pass on its own tangents and primal: the caller's may be kept between calls (a prepared
            # Jacobian's basis, a derivative's one), and a write of f into its input reaches both through the
            # dual tensor (before 2026-12-08 a forward Jacobian of such an f wrote into its prep's basis, which
            # doubled the next call's result, and a loop of single passes ran its later passes at the written x)
            primal_x = x.detach().clone()

            def tangent_only(t: torch.Tensor, primal_x: torch.Tensor = primal_x) -> torch.Tensor:
                y, dy = one(t, primal_x)
                primal[:] = [y]
                return dy

            def looped() -> torch.Tensor:  # (after a vmap that failed, perhaps after a write: copies again)
                lost.clear()
                return torch.stack([tangent_only(t.clone(), x.detach().clone()) for t in tangents])

            if loop:
                out = looped()
            else:
                try:
                    out = _no_graph(_vmap(tangent_only)(tangents.clone()))
                except Exception:  # noqa: BLE001 - f cannot be batched (it writes a batched value into an
                    out = looped()  # unbatched buffer; vmap's unfold of a 0-d x raises IndexError): single passes
            y = primal[0]
    _after_watch(fn, watch, x, contexts, True)
    if lost:
        _lost(fn, x, contexts, forward=True)
    return y, out


# From this many elements a pushforward's primal is a guarded alias of x rather than a copy: the
# alias makes torch record a backward graph during the forward pass (5 us more at n = 10, 26 us against
# 36 us), the copy is a pass over x (at 1e5 and 1e6 the prepared pushforward took 1.2 and 1.13 of
# torch's own with it; measured 2026-11-27 on a 2-core Xeon VM)
_ALIAS_PRIMAL_FROM = 10_000


def _guards(x: torch.Tensor) -> bool:
    """Whether ``x.detach().requires_grad_()`` is an alias of x whose in-place writes torch refuses:
    a floating tensor outside inference mode (see _alias)."""
    return (x.is_floating_point() or x.is_complex()) and not x.is_inference()


def _tangent(t: Array | ArrayLike, x: torch.Tensor) -> torch.Tensor:
    """One tangent as a tensor of x's dtype, detached (it may be a tensor that requires grad)."""
    t = as_tensor(t, like=x)
    if t.requires_grad:
        t = t.detach()
    return t if t.dtype == x.dtype else t.to(x.dtype)


def _stack(tangents: tuple[Array, ...], x: torch.Tensor) -> torch.Tensor:
    return torch.stack([_tangent(t, x) for t in tangents])


def _basis(n: int, shape: tuple[int, ...], x: torch.Tensor) -> torch.Tensor:
    return torch.eye(n, dtype=x.dtype, device=x.device).reshape((n,) + shape)


def _outside_inference_mode(body: Body, x: torch.Tensor, ts: tuple[Array, ...], contexts: Contexts) -> Any:
    """``body`` run where autograd records: inside ``torch.inference_mode()`` nothing is recorded (every
    derivative would come out zero), and inference tensors cannot take part in a graph."""
    with torch.inference_mode(False):
        x = x.clone() if x.is_inference() else x
        ts = tuple(t.clone() if isinstance(t, _Tensor) and t.is_inference() else t for t in ts)
        return body(x, ts, contexts)


def _pulled(
    fn: _Function, x: torch.Tensor, y: torch.Tensor, xt: torch.Tensor, ts: tuple[Array, ...] | None, contexts: Contexts
) -> Any:
    """What reverse mode gives from a recording ``(y, xt)`` of ``fn`` at ``x`` (:func:`_record`): the
    gradient of a scalar ``y`` (``ts`` None), else the pullbacks along ``ts`` (a tuple); where ``y``
    does not depend on ``xt``, :func:`_lost` decides (an error, or zeros for a constant ``f``). The
    runners' bodies write the same inline: a call less on the prepared path, whose calls into
    diffinterface are counted (tests/test_prepared_work.py)."""
    unused = lambda: _lost(fn, x, contexts)  # noqa: E731
    if ts is None:
        return _vjps(y, xt, None, False, unused=unused)
    if len(ts) == 1:
        return (_vjps(y, xt, _tangent(ts[0], x), False, unused=unused),)
    return tuple(_vjps(y, xt, _stack(ts, x), True, unused=unused))


def _detached(value: torch.Tensor) -> torch.Tensor:
    return value.detach()


def _one_pushforward(fn: _Function, plain: Runner) -> Callable[[Array, Array], torch.Tensor]:
    """The ``fast`` runner of a forward-mode pushforward without contexts (``extend.Runners``): one
    tangent, ``fast(x, t)`` -> ``J @ t``, straight into :func:`_jvps` for a tensor ``x`` outside inference
    mode, without the runner's layers (the tuple of one tangent, the body, the direction fallback: 3.8 us
    over the pass at n = 10, measured 2026-12-08 on a 2-core AMD EPYC VM); any other call is ``plain``'s.
    An operation without a forward rule (or a forward-mode pass already open) raises :class:`Unserved`:
    ``plain`` then serves this call and the later ones, and its direction fallback decides."""

    def fast(x: Array, t: Array) -> torch.Tensor:
        if type(x) is not _Tensor or x.is_inference() or torch.is_inference_mode_enabled():
            return cast("torch.Tensor", plain(x, (t,), ())[0])
        try:
            return _jvps(fn, x, _tangent(t, x), (), False)[1]
        except NotImplementedError:
            raise Unserved from None

    return fast


def _build(operator: Operator, fn: _Function, forward: bool, info: Info, x_user: Array) -> tuple[Runner, Runner]:
    """The ``(plain, value)`` runners of ``operator``; the bodies below work on tensors and return
    ``(primal, result)`` (:data:`diffinterface.extend.Body`)."""
    x_shape, y_shape = info.x_shape, info.y_shape
    n, m = shape_size(x_shape), shape_size(y_shape)
    # the bases only where a Jacobian is built or contracted (an identity of n = 1e6 would be 8 TB), on
    # x's dtype and device: x as a tensor (numpy: zero-copy) only where one is built
    whole = operator.through_jacobian(forward)
    x_basis = y_basis = None
    if (whole and forward) or operator is HESSIAN:
        x_basis = _basis(n, x_shape, as_tensor(x_user))
    if (whole and not forward) or operator is SECOND_DERIVATIVE:
        y_basis = _basis(m, y_shape, as_tensor(x_user))

    # complex outputs: batched forward passes run as loops (see _jvps)
    loop = complex_dtype(info.y_dtype)
    record = _recorder(info)

    def jacobian(
        x: torch.Tensor, contexts: Contexts
    ) -> tuple[torch.Tensor, torch.Tensor]:  # (y, J shaped y_shape + x_shape)
        if forward:
            basis = cast("torch.Tensor", x_basis)  # built where forward and whole
            y, cols = _jvps(fn, x, basis, contexts, True, loop)  # (n, *y_shape)
            return y, torch.movedim(cols.reshape((n, m)), 0, 1).reshape(y_shape + x_shape)
        y, xt = record(fn, x, contexts)
        rows = _vjps(y, xt, y_basis, True, unused=lambda: _lost(fn, x, contexts))  # (m, *x_shape)
        return y, rows.reshape(y_shape + x_shape)

    if operator is PUSHFORWARD and forward:
        push = _pusher(info)

        def body(x: torch.Tensor, ts: tuple[Array, ...], contexts: Contexts) -> Any:
            if len(ts) == 1:
                y, out = push(fn, x, _tangent(ts[0], x), contexts, False)
                return y, (out,)
            y, out = _jvps(fn, x, _stack(ts, x), contexts, True, loop)
            return y, tuple(out)
    elif operator is PULLBACK and not forward:

        def body(x: torch.Tensor, ts: tuple[Array, ...], contexts: Contexts) -> Any:  # _pulled, inline
            y, xt = record(fn, x, contexts)
            unused = lambda: _lost(fn, x, contexts)  # noqa: E731
            if len(ts) == 1:
                return y, (_vjps(y, xt, _tangent(ts[0], x), False, unused=unused),)
            return y, tuple(_vjps(y, xt, _stack(ts, x), True, unused=unused))
    elif operator.tangent is not None and operator.order == 1:  # against the mode's direction: through the Jacobian

        def body(x: torch.Tensor, ts: tuple[Array, ...], contexts: Contexts) -> Any:
            y, jac = jacobian(x, contexts)
            return y, contract_all(jac, tuple(_stack(ts, x)), x, operator is PUSHFORWARD)
    elif operator is DERIVATIVE and forward:
        x_like = as_tensor(x_user)
        one = torch.ones((), dtype=x_like.dtype, device=x_like.device)

        def body(x: torch.Tensor, ts: tuple[Array, ...], contexts: Contexts) -> Any:
            return _jvps(fn, x, one, contexts, False)
    elif operator is GRADIENT and not forward:

        def body(x: torch.Tensor, ts: tuple[Array, ...], contexts: Contexts) -> Any:  # _pulled, inline
            y, xt = record(fn, x, contexts)
            return y, _vjps(y, xt, None, False, unused=lambda: _lost(fn, x, contexts))
    elif operator.order == 1:  # derivative, gradient against their direction, and the jacobian

        def body(x: torch.Tensor, ts: tuple[Array, ...], contexts: Contexts) -> Any:
            return jacobian(x, contexts)
    elif operator is SECOND_DERIVATIVE:  # reverse over forward; reverse over reverse without forward AD
        reverse_inner: list[Any] = []  # set at the first op without a forward derivative, for this prep

        def forward_body(x: torch.Tensor, contexts: Contexts) -> Any:
            xt = x.detach().requires_grad_()
            watch = _watch_for(fn, x) if fn.watch else None

            def dual() -> torch.Tensor:  # f's input: a view of xt, whose writes torch refuses; after one, of a
                # copy of xt that autograd differentiates through (as _record's), from then on (fn.writes_input)
                return fwAD.make_dual(xt.clone() if fn.writes_input else xt, torch.ones_like(xt))

            with _DUAL_LEVEL, torch.enable_grad(), _dual_level():
                with _UNWATCHED if watch is None else watch:  # f alone (see _jvps)
                    try:
                        out = fn.eager(dual(), contexts)
                    except Exception as error:
                        if fn.writes_input or not raised_by(error, Adapter.refused_write):
                            raise
                        fn.writes_input = True
                        out = fn.eager(dual(), contexts)
                y, der = fwAD.unpack_dual(out)
                _after_watch(fn, watch, x, contexts, True)
                if der is None:
                    _lost(fn, x, contexts, forward=True)
                    der = torch.zeros_like(y)
                y = y.detach()
                der2 = _vjps(der, xt, y_basis, True).reshape(y_shape)
            return (y, der), der2

        def reverse_body(x: torch.Tensor, contexts: Contexts) -> Any:  # 2 f(x).size backward passes
            y, xt = _record(fn, x, contexts, fn.eager)  # compiled graphs: no double backward
            der = _vjps(y, xt, y_basis, True, create_graph=True, unused=lambda: _lost(fn, x, contexts)).reshape(y_shape)
            return (y.detach(), der.detach()), _vjps(der, xt, y_basis, True).reshape(y_shape)

        def body(x: torch.Tensor, ts: tuple[Array, ...], contexts: Contexts) -> Any:
            if not reverse_inner:
                try:
                    return forward_body(x, contexts)
                except NotImplementedError:
                    reverse_inner.append(True)
            return reverse_body(x, contexts)
    elif operator in (HVP, HESSIAN):  # reverse over reverse

        def body(x: torch.Tensor, ts: tuple[Array, ...], contexts: Contexts) -> Any:
            y, g, xt = _differentiable_gradient(fn, x, contexts, record)
            if operator is HESSIAN:
                return (y, g), _vjps(g, xt, x_basis, True).reshape(x_shape + x_shape)
            if len(ts) == 1:
                return (y, g), (_vjps(g, xt, _tangent(ts[0], x), False),)
            return (y, g), tuple(_vjps(g, xt, _stack(ts, x), True))
    else:  # pragma: no cover - the frontend only passes the operators above
        raise ValueError(operator)

    def plain(x: Array, ts: tuple[Array, ...], contexts: Contexts) -> Any:
        if type(x) is not _Tensor:
            x = as_tensor(x)  # numpy: zero-copy
        if x.is_inference() or torch.is_inference_mode_enabled():
            return _outside_inference_mode(body, x, ts, contexts)[1]
        return body(x, ts, contexts)[1]

    def value(x: Array, ts: tuple[Array, ...], contexts: Contexts) -> Any:
        if type(x) is not _Tensor:
            x = as_tensor(x)
        if x.is_inference() or torch.is_inference_mode_enabled():
            primal, result = _outside_inference_mode(body, x, ts, contexts)
        else:
            primal, result = body(x, ts, contexts)
        return value_form(operator, primal, result, _detached)

    return plain, value


class Adapter(_Base):
    """PyTorch; see the module docstring."""

    array_family = TORCH

    @staticmethod
    def refused_write(error: BaseException) -> bool:
        """torch refusing what ``f`` did with a guarded alias (see ``_REFUSALS``), or numpy refusing a
        write into a read-only view (the kit's default: a ``Constant`` numpy array that could not be
        aliased as a tensor reaches ``f`` as one)."""
        return (type(error) is RuntimeError and _REFUSALS.search(str(error)) is not None) or _Base.refused_write(error)

    # x reaches output_info uncopied: a recording gives f a detached alias of x that requires grad (torch
    # refuses f's writes into it, see _record), a pushforward a copy as its primal (_jvps), and the
    # evaluation for f(x)'s shape alone a copy made here
    copies_x = True

    def output_info(self, target: Target, x: Array, contexts: Contexts, oneshot: bool) -> Info:
        fn = _Function(target, contexts, False)
        xt = as_tensor(x)
        # a one-shot reverse-mode call: f recorded here as its runner would record it (_Recorded)
        record = oneshot and self._records(target, xt)
        recorded: _Recorded | _Pushed | None = None
        try:
            if record:
                y, leaf = _record(fn, xt, contexts)
                recorded = _Recorded(y, leaf, fn)
            else:
                pushed = _pushed(fn, xt, target, contexts) if oneshot and self._pushes(target, xt) else None
                if pushed is not None:
                    y, recorded = pushed.y, pushed
                else:  # f(x) for its shape (an operation without a forward rule: the runner's fallback decides)
                    with torch.no_grad():
                        y = fn.eager(xt.detach().clone(), contexts)  # f may write into its input: a copy
        except TypeError as error:  # f's first run: where captured numpy arrays meet tensors under "const"
            known = const_operand_error(target, error, "torch", lambda v: isinstance(v, _Tensor))
            if known is not None:
                raise known from error
            raise
        return Info(tuple(y.shape), y.dtype, recorded, tuple(xt.shape), oneshot)

    def oneshot_result(
        self, operator: Operator, target: Target, x: Array, tangents: tuple[Array, ...], contexts: Contexts, info: Info
    ) -> Any:
        """A one-shot call's result from ``output_info``'s evaluation, as the plain runner would give
        it: a forward-mode pushforward along one tangent computed there (:class:`_Pushed`), a
        gradient or pullback from its recording (:class:`_Recorded`, made only where the runners go
        in reverse mode) after the checks :meth:`prepare` makes (a complex ``f(x)``: None, and its
        error there). None otherwise, and where an operation of ``f`` has no backward rule: the
        runners' direction fallback then decides, on a new recording."""
        value = info.value
        kind = type(value)
        if kind is _Pushed and operator is PUSHFORWARD:
            info.take_value()
            return (value.dy,)
        if kind is not _Recorded or not (operator is GRADIENT or operator is PULLBACK) or complex_dtype(info.y_dtype):
            return None  # (a complex f(x) in reverse mode: prepare's error)
        info.take_value()
        try:
            # x's recording's leaf stands for x (its values, dtype and device): a numpy x is not converted again
            return _pulled(value.fn, value.xt, value.y, value.xt, tangents if operator is PULLBACK else None, contexts)
        except NotImplementedError:
            return None

    def recorded_in_reverse(self, info: Info) -> bool:
        """A one-shot ``output_info`` that recorded ``f`` (:class:`_Recorded`), which the reverse-mode
        runners' first call takes (:func:`_recorder`)."""
        return info.oneshot and type(info.value) is _Recorded

    def _records(self, target: Target, x: torch.Tensor) -> bool:
        """Whether a one-shot ``output_info`` records ``f`` for the runner (:class:`_Recorded`): the
        reverse-mode operators, and the Jacobian unless ``mode="forward"`` (its direction follows from
        f(x)'s size, known once f has run: a reverse-mode one takes the recording, a forward-mode one
        leaves it, having paid what the evaluation for f(x)'s shape cost), on a flat x, outside
        inference mode (where the runner records on a copy of x: ``_outside_inference_mode``)."""
        operator = target.operator
        if operator not in _RECORDING or target.layout is not None:
            return False
        if operator.order == 1 and getattr(self.backend, "mode", None) == "forward":
            return False
        return not (x.is_inference() or torch.is_inference_mode_enabled())

    def _pushes(self, target: Target, x: torch.Tensor) -> bool:
        """Whether a one-shot ``output_info`` computes the pushforward itself (:class:`_Pushed`): one
        tangent of a flat x (``target.one_tangent``), forward mode, outside inference mode."""
        if target.one_tangent is None or getattr(self.backend, "mode", None) == "reverse":
            return False
        return not (x.is_inference() or torch.is_inference_mode_enabled())

    def prepare(
        self,
        operator: Operator,
        target: Target,
        x: Array,
        tangents: tuple[Array, ...],
        contexts: Contexts,
        info: Info,
    ) -> Runners:
        compile_ = self.backend.compile and not info.oneshot and _compilable(target)
        fn = _function_for(info, target, contexts, compile_)
        forward = self.forward(operator, info)
        if complex_dtype(info.y_dtype) and (not forward or operator.order == 2):
            raise TypeError(
                f"{target.call}: f(x) is complex ({info.y_dtype}) for a real x, and torch's reverse mode keeps "
                f"only the derivative of its real part; use {type(self.backend).__name__}(mode='forward') for "
                f"pushforward, derivative and jacobian, or differentiate f(x).real and f(x).imag separately"
            )

        def build(fwd: bool) -> tuple[Runner, Runner]:
            return _build(operator, fn, fwd, info, x)

        # an operation without one direction's rule: mode=None switches direction (DirectionFallback)
        fallback = self.direction_fallback(operator, forward, target, build)
        plain, value = (fallback.plain, fallback.value) if fallback is not None else build(forward)
        if compile_:  # preparation pays the compilation (the forward and the backward graphs)
            value(x, tangents, contexts)  # watched, so eager (see _Watch)
            if not fn.watch:
                value(x, tangents, contexts)
        one = _one_pushforward(fn, plain) if operator is PUSHFORWARD and forward and not contexts else None
        return Runners(plain, value, None, one)


# -- the bench record: torch's own best calls ---------------------------------------------------------
