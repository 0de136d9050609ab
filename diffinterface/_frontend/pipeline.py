"""What every operator does around its adapter call: validation, preparation, conversion, ``out=``.

The operator modules (``first_order/``, ``second_order/``) are thin: each public function calls
:func:`resolve` (prepare, or check the given prep), runs one adapter method, and calls :func:`finish`.

Size: over 400 lines in one module, because one pipeline, read top to bottom: every operator goes from
its public call through validation, preparation and the runners back to the user's arrays here.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .._adapters.contract import SecondOrderAdapter, Unserved
from .._adapters.target import Target
from .._closures.diagnose import const_trace_checked
from .._closures.plan import any_leaf
from .._closures.slots import slots_of
from .._core.arrays import (
    NUMPY,
    as_input,
    complex_dtype,
    describe,
    families,
    family,
    ignores_numpy_read_only,
    is_real_floating,
    output_like,
    private_copy,
    shape,
    to_family,
)
from .._core.configs import SecondOrder, adapter_for
from .._core.contexts import check_contexts
from .._core.errors import OutputShapeChanged, PreparationMismatchError, StructuredOutputError, call_repr
from .._core.operators import DERIVATIVE, HESSIAN, JACOBIAN, Operator
from .._core.structure import (
    Layout,
    Mismatch,
    Structure,
    StructuredRunners,
    check_devices,
    check_leaves,
    tangent_leaves,
)
from .prep import Prep, describe_arg, signature
from .reuse import NOT_SERVED, NoSummary, prep_cache, reusable
from .sparse_results import fill_out, is_sparse

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeAlias

    from .._adapters.contract import Adapter, Info
    from .._core.configs import Backend
    from .._core.types import Array

    Tangent: TypeAlias = "Array | tuple[Array, ...] | None"  # one tangent, a batch of them, or none
    Out: TypeAlias = "Array | tuple[Array, ...] | None"  # out=: an array, or one per tangent of a batch


def _call(operator: Operator, backend: Backend, y: Array | None) -> str:
    tangent = operator.tangent
    args = ("f, x" if y is None else "f, x, y=y") if tangent is None else f"f, x, {tangent}"
    return call_repr(operator.name, backend, args)


def _adapter(operator: Operator, backend: Backend, call: str) -> Any:
    if isinstance(backend, SecondOrder):
        if operator.order != 2:
            raise TypeError(
                f"{call}: SecondOrder backends serve the second-order operators (hvp, hessian, "
                f"second_derivative); for {operator} pass one engine config such as {backend.inner!r}"
            )
        return _second_order_adapter(backend, call)
    return adapter_for(backend, call)


def _second_order_adapter(backend: SecondOrder, call: str) -> Any:
    """The adapter of ``SecondOrder(outer, inner)``.

    - an outer adapter that only evaluates (``evaluates_only``: finite differences): nested over what
      ``inner`` computes, any ``inner``.
    - the same engine, whose results stay traceable (``traceable_results``: JAX nests its
      transformations inside one traced program, so each mode combination is what it says).
      torch's and autograd's adapters return results with no graph or box left, which an outer call
      of the same engine cannot differentiate (torch gave zeros): they run their engine's own second
      order, the fastest combination there (torch: reverse over reverse), whatever the modes.
    - other engines: an error (outer would pass its arrays into inner's engine).
    """
    outer, inner = backend.outer, backend.inner
    outer_adapter = adapter_for(outer, call)
    if outer_adapter.evaluates_only or (type(outer) is type(inner) and outer_adapter.traceable_results):
        return SecondOrderAdapter(backend)
    if type(outer) is type(inner):
        return adapter_for(inner, call)
    raise TypeError(
        f"{call}: {outer!r} cannot differentiate what {inner!r} computes (it would pass its own arrays "
        f"into another engine); use SecondOrder(AutoFiniteDiff(), {inner!r}) or a SecondOrder of one engine"
    )


def _check_x(x: Array, call: str, name: str = "x", fam: str | None = None) -> Any:
    """``x`` (or ``y``) checked and as engines take it; ``fam``: its family where the caller has it."""
    if (fam or family(x)) is None:
        raise TypeError(
            f"{call}: {name} must be a float, a numpy array, a jax array or a torch tensor, got {type(x).__name__}"
        )
    if name == "y" and complex_dtype(getattr(x, "dtype", None)):
        raise TypeError(
            f"{call}: y is complex ({describe(x)}); an f(y, x) that writes into a complex buffer is not "
            f"supported (a complex x is: its leaves are differentiated as real pairs): return the output "
            f"from f(x) instead of writing it into y, or write its real and imaginary parts into a real y"
        )
    if not is_real_floating(x):
        raise TypeError(
            f"{call}: {name} has dtype {getattr(x, 'dtype', type(x).__name__)}; derivatives need a floating "
            f"{name} (real, or complex for x): pass floats (e.g. x.astype(float) or 1.0 instead of 1)"
        )
    return as_input(x)


def _tangents(
    tangent: Tangent, x: Array, expected: tuple[Any, ...], what: str, call: str, name: str, complex_ok: bool = False
) -> tuple[Any, ...]:
    """The tangent(s) of a real x (``tx``) or of f(x) (``ty``; ``complex_ok`` for a complex f(x))."""
    kind = type(tangent)
    if kind is type(x):  # one tangent of x's own array type, as a loop passes it (x is an array: as_input's)
        one: Any = tangent
        dtype = one.dtype
        if (
            shape(one) == expected
            and (kind is not np.ndarray or dtype.isnative)  # (as_input's one change to an array of x's type)
            and (complex_ok or not complex_dtype(dtype))
        ):
            return (one,), False
    batched = isinstance(tangent, tuple)
    items: tuple[Any, ...] = tangent if isinstance(tangent, tuple) else (tangent,)  # the user's, checked here
    out = []
    fam = family(x)
    for i, t in enumerate(items):
        fam_t = family(t)
        if fam_t is None:
            raise TypeError(
                f"{call}: {_label(name, i, batched)} must be an array shaped like {what} {expected} (or a tuple of "
                f"such arrays for a batch), got {type(t).__name__}"
            )
        if shape(t) != expected:
            raise ValueError(
                f"{call}: {_label(name, i, batched)} has shape {shape(t)}, expected {what} shape {expected}"
            )
        if not complex_ok and (type(t) is complex or complex_dtype(getattr(t, "dtype", None))):
            # engines would cast it to its real part (torch with a warning) or refuse it (JAX)
            raise ValueError(
                f"{call}: {_label(name, i, batched)} is complex ({describe(t)}) and {what} is real; pass a real "
                f"tangent, or a complex x (its leaves are differentiated as real pairs)"
            )
        t = as_input(t)
        out.append(t if fam_t == fam else to_family(t, fam, like=x))
    return tuple(out), batched


def _label(name: str, i: int, batched: bool) -> str:
    """A tangent as messages name it: ``tx``, or ``tx[1]`` in a batch."""
    return f"{name}[{i}]" if batched else name


def _check_output(operator: Operator, info: Info, call: str) -> None:
    if operator.scalar_output and info.y_shape != ():
        hint = "jacobian" if operator.order == 1 else "jacobian of the gradient, or hvp of a scalar function"
        raise ValueError(
            f"{call}: {operator} needs f(x) to be a scalar, but f(x) has shape {info.y_shape}; "
            f"for a vector output use {hint}"
        )
    if operator.scalar_output and complex_dtype(info.y_dtype):
        raise ValueError(
            f"{call}: {operator} needs a real scalar f(x), and f(x) is complex ({info.y_dtype}); for a "
            f"holomorphic f use derivative or jacobian with holomorphic=True, for any f pullback with a complex "
            f"cotangent, or the {operator} of its real part (xp.real(f(x)))"
        )


def _structured_x(x: Array, call: str) -> tuple[Layout, list[Any]]:
    """The layout of a structured ``x`` (a dict, list, tuple, ... of arrays) and its leaves, checked."""
    if isinstance(x, (bool, int, str, bytes)) or (hasattr(x, "dtype") and family(x) is None):
        _check_x(x, call)  # the error for a value that is neither an array nor a structure
    try:
        xs = Structure.of(x, "x")
    except TypeError as error:
        raise TypeError(f"{call}: {error}") from None
    check_leaves(xs, "x", call)
    leaves = xs.leaves(x)
    check_devices(leaves, xs.paths, "x", call)
    return Layout(xs, call), leaves


def _structured_tangents(
    tangent: Tangent, structure: Structure, like: Array, call: str, name: str
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """A tangent shaped like ``structure`` (or a tuple of them): ``(flat tangents, leaf lists)``."""
    try:
        leaves, _ = tangent_leaves(tangent, structure, like)
    except Mismatch as m:
        raise ValueError(f"{call}: {name}{m.path}: expected {m.made}, got {m.got}") from None
    return tuple(structure.ravel(ls) for ls in leaves), leaves


class Direct:
    """A one-shot call's plain result, computed whole by its adapter (:meth:`Adapter.oneshot_result`)
    from what its ``output_info`` made: no runners and no :class:`Prep` built for the one call."""

    __slots__ = ("result",)

    def __init__(self, result: Any) -> None:
        self.result = result


def prepare(operator: Operator, backend: Backend, f: Callable[..., Any], x: Array, **options: Any) -> Prep:
    """A preparation of ``operator`` (the options are :func:`_prepare`'s, ``direct`` aside)."""
    return cast("Prep", _prepare(operator, backend, f, x, **options))


def _prepare(
    operator: Operator,
    backend: Backend,
    f: Callable[..., Any],
    x: Array,
    *,
    tangent: Tangent = None,
    contexts: tuple[Any, ...] = (),
    y: Array | None = None,
    strict: bool,
    oneshot: bool = False,
    holomorphic: bool = False,
    has_aux: bool = False,
    direct: bool = False,
) -> Prep | Direct:
    """:func:`prepare`; with ``direct`` (a one-shot call of the plain form, flat, without ``y``,
    ``out=`` or has_aux), the adapter may compute the result whole instead (:class:`Direct`)."""
    call = _call(operator, backend, y)
    if has_aux and y is not None:
        raise _aux_with_y(call)
    adapter = _adapter(operator, backend, call)
    if not callable(f):
        raise TypeError(f"{call}: f must be callable, got {type(f).__name__}")
    layout = None
    x_leaves: list[Any] = []  # the leaves of a structured x (with layout)
    inner_operator = operator
    if type(x) is complex:
        x = as_input(x)  # a Python complex: a 0-d complex128 array
    fam = family(x)
    if fam is None or complex_dtype(getattr(x, "dtype", None)):
        layout, x_leaves = _structured_x(x, call)
        if operator.scalar_input and (not layout.xs.trivial_shape or operator.order == 2):
            raise ValueError(
                f"{call}: {operator} needs a scalar x (a float or 0-d array), got a {type(x).__name__}; "
                f"for structured inputs use {'jacobian or pushforward' if operator.order == 1 else 'hessian or hvp'}"
                if not layout.xs.trivial_shape
                else f"{call}: second_derivative takes a real x; for a complex x, derivative and jacobian with "
                f"holomorphic=True give the first derivative, and hvp the second-order product of a real f"
            )
        if layout.xs.has_complex:
            inner_operator = _complex_x(operator, adapter, holomorphic, call)
        x_leaves = [as_input(v) for v in x_leaves]
        x_in = layout.xs.ravel(x_leaves)
    else:
        x_in = _check_x(x, call, fam=fam)
    if contexts:
        check_contexts(contexts, call)
    if operator.scalar_input and shape(x_in) != () and layout is None:
        raise ValueError(
            f"{call}: {operator} needs a scalar x (a float or 0-d array), got x of shape {shape(x_in)}; "
            f"for array inputs use {'jacobian or pushforward' if operator.order == 1 else 'hessian or hvp'}"
        )
    if y is not None:
        y = _check_x(y, call, "y")
    tangent_name = operator.tangent
    tangents: tuple[Any, ...] = ()
    tangent_leaves: tuple[Any, ...] = ()
    if tangent_name == "tx":
        if layout is None:
            tangents, _ = _tangents(tangent, x_in, shape(x_in), "x", call, "tx")
        else:
            tangents, tangent_leaves = _structured_tangents(tangent, layout.xs, x_leaves[0], call, "tx")
    closure = getattr(backend, "closure", getattr(getattr(backend, "inner", None), "closure", "duplicated"))
    # f evaluated at x here may write into its input: never the user's x (an adapter that copies_x guards it itself)
    x_eval = x_in if adapter.copies_x else private_copy(x_in)
    first = tangents if oneshot and tangent_name == "tx" else None  # what a one-shot output_info may use
    # torch's asarray writes through numpy's read-only views: with a torch x, y or context, f gets copies
    unguarded = (
        ignores_numpy_read_only(x_in)
        or (y is not None and ignores_numpy_read_only(y))
        or (bool(contexts) and any_leaf([c.value for c in contexts], ignores_numpy_read_only))
    )
    try:
        target = Target(f, y, closure, call, layout, aux=has_aux, operator=inner_operator, tangents=first)
        if unguarded:
            target.without_aliases()
        info = _output_info(adapter, target, x_eval, contexts, oneshot)
    except StructuredOutputError:
        if layout is not None:
            raise
        layout = Layout(Structure.of(x_in, "x"), call)  # f(x) is a structure: the flat problem ravels it
        x_leaves, tangent_leaves = [x_in], tuple([t] for t in tangents)
        target = Target(f, y, closure, call, layout, aux=has_aux, operator=inner_operator, tangents=None)
        if unguarded:
            target.without_aliases()
        info = _output_info(adapter, target, x_eval, contexts, oneshot)
    if layout is not None:
        _check_structured(operator, adapter, layout, call)
    _check_output(operator, info, call)
    target.y_shape = info.y_shape  # the runners' evaluations of f are checked against it (Target.checked)
    if tangent_name == "ty":
        if layout is None:
            tangents, _ = _tangents(tangent, x_in, info.y_shape, "f(x)", call, "ty", complex_dtype(info.y_dtype))
        else:
            assert layout.ys is not None
            tangents, tangent_leaves = _structured_tangents(tangent, layout.ys, x_leaves[0], call, "ty")
    if direct and layout is None:  # a one-shot plain call: its result from output_info's evaluation, if it can
        result = adapter.oneshot_result(inner_operator, target, x_in, tangents, contexts, info)
        if result is not None:
            return Direct(result)
    if layout is not None and adapter.structures_inside:  # the adapter takes leaves (see _adapters.contract.Adapter)
        info.layout = layout
        data = adapter.prepare(inner_operator, target, x_leaves, tangent_leaves, contexts, info)
    else:
        # the runners (see _adapters.contract)
        data = adapter.prepare(inner_operator, target, x_in, tangents, contexts, info)
    if layout is not None:
        data = StructuredRunners(data, layout, inner_operator, adapter.structures_inside, call, strict)
    names = ("x",) + ((tangent_name,) if tangent_name else ()) + ("y",) * (y is not None)
    args = (x,) + ((tangent,) if tangent_name else ()) + ((y,) if y is not None else ())
    if contexts:
        names += tuple(f"contexts[{i}]" for i in range(len(contexts)))
        args += tuple(contexts)
    prep = Prep(operator, backend, f, adapter, data, target, names, args, strict, oneshot, layout is not None, has_aux)
    prep.holomorphic = holomorphic
    if has_aux:  # aux at x: its structure for later strict calls, and the one-shot call's own aux
        aux = adapter.aux(target, private_copy(x) if family(x) is not None else x, contexts)
        prep.aux_signature, prep.aux_description = signature(aux), describe_arg(aux)
        prep.aux_first = (aux,) if oneshot else None
    return prep


def _aux_with_y(call: str) -> TypeError:
    return TypeError(
        f"{call}: has_aux=True takes f(x) -> (y, aux); an f(y, x) writes its output into y and returns "
        f"nothing to carry aux: return (y, aux) from f(x) instead"
    )


def _complex_x(operator: Operator, adapter: Adapter, holomorphic: bool, call: str) -> Operator:
    """What a complex x allows (its leaves are differentiated as real pairs, see _core.structure): the
    operator the adapter runs (a complex scalar's derivative is its 1-column Jacobian)."""
    if getattr(adapter, "complex_step", False):
        raise TypeError(
            f"{call}: method='complex' perturbs x along the imaginary axis, so it needs a real x and an f that is "
            f"real-analytic in it; x is complex here: use method='central' (or 'forward', 'backward')"
        )
    if operator is HESSIAN:
        raise TypeError(
            f"{call}: the Hessian of a real f of a complex x is not a complex matrix (f is not holomorphic); "
            f"hvp(backend, f, x, tx) gives its product with a complex tangent, and gradient its gradient"
        )
    if operator in (JACOBIAN, DERIVATIVE) and not holomorphic:
        raise TypeError(
            f"{call}: x is complex; a complex {operator} is defined for a holomorphic f only: pass "
            f"holomorphic=True if f is complex-differentiable (as jax.jacfwd(f, holomorphic=True)). For any f, "
            f"pushforward and pullback give the derivative along a complex tangent and its adjoint"
        )
    return JACOBIAN if operator is DERIVATIVE else operator


def _output_info(adapter: Adapter, target: Target, x: Array, contexts: tuple[Any, ...], oneshot: bool) -> Any:
    traced = getattr(adapter, "traced", None)  # engines whose traced values can leak into user objects
    rebinding = getattr(adapter, "rebinding_operand", traced)  # and whose values numpy cannot write
    if target.closure == "const" and rebinding is not None:
        return const_trace_checked(
            target,
            lambda: adapter.output_info(target, x, contexts, oneshot),
            traced,
            cast("str", adapter.engine_name),  # declared wherever either hook is
            rebinding,
        )
    return adapter.output_info(target, x, contexts, oneshot)


def _check_structured(operator: Operator, adapter: Adapter, layout: Layout, call: str) -> None:
    """What a structured x or f(x) cannot do: a scalar operator's structured f(x), AutoSparse."""
    ys = layout.ys
    assert ys is not None
    if operator.scalar_output and ys.trivial_shape and ys.has_complex:
        raise ValueError(
            f"{call}: {operator} needs a real scalar f(x), and f(x) is complex ({ys.dtypes[0]}); for a "
            f"holomorphic f use derivative or jacobian with holomorphic=True, for any f pullback with a complex "
            f"cotangent, or the {operator} of its real part (xp.real(f(x)))"
        )
    if operator.scalar_output and not ys.trivial:
        raise ValueError(
            f"{call}: {operator} needs f(x) to be a scalar array, but f returned a structure of "
            f"{len(ys.paths)} arrays; for structured outputs use jacobian, pushforward or pullback"
        )
    if not adapter.takes_structures and (layout.xs.has_complex or ys.has_complex) and ys.trivial_shape:
        raise TypeError(
            f"{call}: AutoSparse takes a real x and a real f(x); here {'x' if layout.xs.has_complex else 'f(x)'} "
            f"is complex: use the dense backend {adapter.backend.dense!r} (a complex x's leaves are differentiated "
            f"as real pairs there), or differentiate the real and imaginary parts as one real vector"
        )
    if not adapter.takes_structures:
        raise TypeError(
            f"{call}: AutoSparse takes one array x and one array f(x); for a structure, differentiate a "
            f"function of one vector (concatenate the leaves), or use the dense backend {adapter.backend.dense!r}"
        )


def resolve(
    operator: Operator,
    backend: Backend,
    f: Callable[..., Any],
    x: Array,
    *,
    tangent: Tangent,
    contexts: tuple[Any, ...],
    y: Array | None,
    prep: Prep | None,
    holomorphic: bool = False,
    has_aux: bool = False,
) -> Prep:
    """The given prep once checked against the arguments (a call without ``prep=`` gets its prep from
    :func:`reused` or a one-shot preparation, in :func:`run`)."""
    if not isinstance(prep, Prep):
        raise TypeError(
            f"{_call(operator, backend, y)}: prep must come from prepare_{operator}, got {type(prep).__name__}"
        )
    if holomorphic and not prep.holomorphic:
        raise PreparationMismatchError(
            f"{_call(operator, backend, y)}: holomorphic=True, but prep was made without it; pass "
            f"holomorphic=True to prepare_{operator}"
        )
    prep.check(operator, backend, f, _arguments(operator, x, tangent, y, contexts), has_aux)
    return prep


def reused(
    operator: Operator,
    backend: Backend,
    f: Callable[..., Any],
    x: Array,
    tangent: Tangent,
    contexts: tuple[Any, ...],
    y: Array | None,
    holomorphic: bool,
    has_aux: bool = False,
    over_state: bool = False,
) -> Prep | OverState | None:
    """The prep :data:`prep_cache` keeps for a call without ``prep=`` (checked against its arguments),
    made now if these arguments were seen once before; None: the call runs unprepared. With
    ``over_state`` (a plain call, which :func:`run` runs): for a new function with state of its own,
    its code's prep shared over state (:class:`OverState`, run by ``prep_cache.serve_over_state``)."""
    if type(f) is not types.FunctionType or not reusable(backend):  # only Python functions are kept
        return None
    if y is None and not contexts:  # _arguments' common case, inline (a call in a loop's every call)
        args: tuple[Any, ...] = (x,) if operator.tangent is None else (x, tangent)
    else:
        args = _arguments(operator, x, tangent, y, contexts)
    options = (holomorphic, has_aux) if has_aux else holomorphic
    if prep_cache.new_function(f):  # its first call without prep=, or one its code's prep served
        key = prep_cache.key(operator, backend, args, options)
        if key is not None and y is None and not contexts and not has_aux:
            shared = prep_cache.shared(f, key)  # its code's prep, where it serves f
            if isinstance(shared, Prep):
                shared.check(operator, backend, shared.f, args)
                return shared
            if isinstance(shared, NoSummary):  # state, or a summary for other objects: its code's prep over state
                if over_state:
                    over = prep_cache.over_state(f, key)
                    if over is not None and over.prep is None:  # the third new function of its code with key
                        _prepare_over_state(operator, backend, f, x, tangent, holomorphic, over)
                    if over is not None and isinstance(over.prep, Prep):
                        return OverState(over)
            elif shared is not None:  # the third new function of its code with this key: prepared for it
                copy = prep_cache.shared_copy(f)
                made = prepare(operator, backend, copy, x, tangent=tangent, strict=True, holomorphic=holomorphic)
                return prep_cache.keep_shared(shared, made)
        if prep_cache.first(f, key):  # marked, nothing to find: one-shot
            return None
    last = prep_cache.latest(operator, backend, f, args, holomorphic, has_aux)
    if type(last) is Prep:
        return last
    key = prep_cache.key(operator, backend, args, options)
    if key is None:
        return None
    kept = prep_cache.find(f, key)
    if kept is not None:
        kept.check(operator, backend, f, args, has_aux)
        return kept
    if prep_cache.seen(f, key):  # seen twice with these arguments before: prepare once, keep it
        slots = slots_of(f)  # what f's slots hold as it is traced, checked at each call the prep serves
        kept = prepare(
            operator,
            backend,
            f,
            x,
            tangent=tangent,
            contexts=contexts,
            y=y,
            strict=True,
            holomorphic=holomorphic,
            has_aux=has_aux,
        )
        kept.slots = slots
        prep_cache.keep(f, key, kept)
        return kept
    return None


def _arguments(
    operator: Operator, x: Array, tangent: Tangent, y: Array | None, contexts: tuple[Any, ...]
) -> tuple[Any, ...]:
    """The arguments a prep is checked against, in the order of ``Prep.names``."""
    if operator.tangent is not None:
        return (x, tangent) + ((y,) if y is not None else ()) + contexts
    return (x,) + ((y,) if y is not None else ()) + contexts


def tangents_of(tangent: Tangent, x: Array) -> tuple[Any, ...]:
    """The tangent(s) as the adapter takes them: a tuple, in the family of x."""
    items: tuple[Any, ...] = tangent if type(tangent) is tuple else (tangent,)
    kind = type(x)
    if kind is not float:
        for t in items:
            if type(t) is not kind or (kind is np.ndarray and not t.dtype.isnative):
                break
        else:
            return items  # the fast path: tangents already of x's own array type
    fam = family(x)
    return tuple(to_family(as_input(t), fam, like=x) for t in items)


def _convert(
    kind: str, result: Any, x: Array, tangent: Tangent, out: Out, name: str, backend: Backend, sparse: bool
) -> Any:
    """One result of a runner in the user's arrays (``sparse``: the prep's results may be sparse)."""
    if kind == "tangents":
        return tangent_result(result, tangent, x)
    if kind == "out" and (out is not None or sparse):
        return finish(result, x, out, name, backend)
    return output_like(result, x)  # what finish does for a dense result without out=


def run(
    operator: Operator,
    backend: Backend,
    f: Callable[..., Any],
    x: Array,
    *,
    tangent: Tangent = None,
    contexts: tuple[Any, ...],
    y: Array | None = None,
    prep: Prep | None,
    out: Out = None,
    value: bool = False,
    holomorphic: bool = False,
    has_aux: bool = False,
) -> Any:
    """An operator call: resolve the prep, run its plain or value runner, and convert what it
    returns (every operator module is this one call; the prepared fast path is :func:`run_prepared`).
    With ``has_aux`` (f returns ``(y, aux)``): ``(result, aux)``, or ``((y, aux), results...)`` for
    the value form, in JAX's order (:func:`_with_aux`)."""
    if prep is None and not (has_aux or value or contexts) and y is None and (out is None or operator.tangent is None):
        latest = prep_cache.serving(operator, backend, f, x, tangent, holomorphic)  # a loop's calls
        if latest is not None:
            try:
                return _fast(operator, latest, backend, x, tangent, contexts, out)
            except OutputShapeChanged:  # what f captures changed shape since the cache prepared it
                prep_cache.forget(f, latest)
    if has_aux:
        return _with_aux(operator, backend, f, x, tangent, contexts, y, prep, out, value, holomorphic)
    plain = not value and y is None and out is None  # a one-shot call of it may get its result whole
    p, kept = _prep_for(operator, backend, f, x, tangent, contexts, y, prep, holomorphic, False, plain)
    if isinstance(p, Direct):
        return _convert(operator.plain_conversion, p.result, x, tangent, None, operator.name, backend, False)
    if type(p) is OverState:  # f's code's prep, over f's state (a plain call)
        try:
            done = prep_cache.serve_over_state(
                p.over,
                cast("types.FunctionType", f),
                lambda q: (
                    _execute(operator, q, backend, x, tangent, contexts, out, False)
                    if q.structured
                    else _fast(operator, q, backend, x, tangent, contexts, out)
                ),
            )
        except OutputShapeChanged:  # the state's shape changed f(x)'s: dropped, and this call unprepared
            prep_cache.forget_over_state(cast("Prep", p.over.prep))
            done = NOT_SERVED
        if done is not NOT_SERVED:
            return done
        made = _oneshot(operator, backend, f, x, tangent, contexts, y, holomorphic, False, plain)
        if isinstance(made, Direct):
            return _convert(operator.plain_conversion, made.result, x, tangent, None, operator.name, backend, False)
        p, kept = made, False
    p = cast("Prep", p)
    try:
        if kept and not value and y is None and not p.structured and (out is None or operator.tangent is None):
            return _fast(operator, p, backend, x, tangent, contexts, out)  # as with prep=
        return _execute(operator, p, backend, x, tangent, contexts, out, value)
    except OutputShapeChanged:
        if not kept:
            raise  # a prep given with prep=: the caller's to make again
        prep_cache.forget(f, p)  # a kept one: dropped, and this call prepared again (as a one-shot call)
    p = cast("Prep", _oneshot(operator, backend, f, x, tangent, contexts, y, holomorphic, False))
    return _execute(operator, p, backend, x, tangent, contexts, out, value)


def _prepare_over_state(
    operator: Operator,
    backend: Backend,
    f: types.FunctionType,
    x: Array,
    tangent: Tangent,
    holomorphic: bool,
    over: Any,
) -> None:
    """The prep a code's new functions share over state, made for a private copy of ``f`` (with the
    copy's ``Prep.slots``) and kept in ``over``; where the code stores or reaches a user's object
    (``Slots``), or the preparation fails, kept as none (the calls run one-shot, which raise ``f``'s own
    error where it is ``f``'s)."""
    copy = prep_cache.shared_copy(f)
    slots = slots_of(copy)
    made: Prep | None = None
    if slots is not None and slots.closed and not slots.stores:
        try:
            made = prepare(operator, backend, copy, x, tangent=tangent, strict=True, holomorphic=holomorphic)
            made.slots = slots
        except Exception:  # noqa: BLE001 - not shared from then on
            made = None
    prep_cache.keep_over_state(over, copy, made)


class OverState:
    """What :func:`reused` answers for a new function served by its code's prep over its own state:
    the cache's entry, which :func:`run` runs with ``prep_cache.serve_over_state``."""

    __slots__ = ("over",)

    def __init__(self, over: Any) -> None:
        self.over = over


def _prep_for(
    operator: Operator,
    backend: Backend,
    f: Callable[..., Any],
    x: Array,
    tangent: Tangent,
    contexts: tuple[Any, ...],
    y: Array | None,
    prep: Prep | None,
    holomorphic: bool,
    has_aux: bool,
    direct: bool = False,
) -> tuple[Prep | Direct | OverState, bool]:
    """The call's prep and whether it is a kept one: the given prep checked (:func:`resolve`), else
    the one :data:`prep_cache` keeps (:func:`reused`), else a one-shot preparation (``direct``: or
    the one-shot call's result, see :func:`_prepare`)."""
    if prep is not None:
        p = resolve(
            operator,
            backend,
            f,
            x,
            tangent=tangent,
            contexts=contexts,
            y=y,
            prep=prep,
            holomorphic=holomorphic,
            has_aux=has_aux,
        )
        return p, False
    kept = reused(operator, backend, f, x, tangent, contexts, y, holomorphic, has_aux=has_aux, over_state=direct)
    if kept is not None:
        return kept, True
    return _oneshot(operator, backend, f, x, tangent, contexts, y, holomorphic, has_aux, direct), False


def _oneshot(
    operator: Operator,
    backend: Backend,
    f: Callable[..., Any],
    x: Array,
    tangent: Tangent,
    contexts: tuple[Any, ...],
    y: Array | None,
    holomorphic: bool,
    has_aux: bool,
    direct: bool = False,
) -> Prep | Direct:
    """The preparation of a call that reuses none: made for this call alone (never checked); with
    ``direct``, the call's result where its adapter computes it whole (:func:`_prepare`)."""
    return _prepare(
        operator,
        backend,
        f,
        x,
        tangent=tangent,
        contexts=contexts,
        y=y,
        strict=False,
        oneshot=True,
        holomorphic=holomorphic,
        has_aux=has_aux,
        direct=direct,
    )


def _execute(
    operator: Operator,
    p: Prep,
    backend: Backend,
    x: Array,
    tangent: Tangent,
    contexts: tuple[Any, ...],
    out: Out,
    value: bool,
) -> Any:
    """A resolved prep's plain or value runner, its results converted back to the user's arrays."""
    if p.structured:
        return _structured(p, value, x, tangent, contexts, out, operator, backend)
    tangents = tangents_of(tangent, x) if operator.tangent is not None else ()
    x_in = as_input(x)
    if not value:
        kind = operator.plain_conversion
        result = _convert(
            kind, p.data.plain(x_in, tangents, contexts), x, tangent, out, operator.name, backend, p.sparse
        )
        return result if out is None or kind == "out" else _into(result, out, x, operator.name, backend)
    results = p.data.value(x_in, tangents, contexts)
    name = operator.value_method
    converted = tuple(
        _convert(kind, r, x, tangent, out, name, backend, p.sparse) for kind, r in zip(operator.conversions, results)
    )
    if out is None or operator.conversions[-1] == "out":
        return converted
    return converted[:-1] + (_into(converted[-1], out, x, name, backend),)


def _into(result: Any, out: Out, x: Array, name: str, backend: Backend) -> Any:
    """``out=`` of an operator whose result is not converted by :func:`finish` (pushforward, pullback,
    derivative, second_derivative, hvp): ``result`` written into ``out``, or a tuple of results (a
    batch of tangents) into a tuple of as many arrays."""
    if type(result) is tuple:
        if type(out) is not tuple or len(out) != len(result):
            got = f"a tuple of {len(out)}" if type(out) is tuple else type(out).__name__
            raise TypeError(
                f"{call_repr(name, backend, 'f, x, ...')}: a tuple of {len(result)} tangents gives {len(result)} "
                f"results: out= must be a tuple of as many arrays, got {got}"
            )
        return tuple(finish(r, x, o, name, backend) for r, o in zip(result, out))
    return finish(result, x, out, name, backend)


def _with_aux(
    operator: Operator,
    backend: Backend,
    f: Callable[..., Any],
    x: Array,
    tangent: Tangent,
    contexts: tuple[Any, ...],
    y: Array | None,
    prep: Prep | None,
    out: Out,
    value: bool,
    holomorphic: bool,
) -> Any:
    """``has_aux=True``: ``f(x)`` returns ``(y, aux)``; engines differentiate ``y`` alone (``Target.aux``)
    and ``aux`` is ``f``'s second output at ``x``, computed once per call in the engine's arrays
    (``Adapter.aux``; a one-shot call reuses the evaluation its preparation made at this ``x``). A
    strict prep compares aux's structure (types, shapes, dtypes) with the one it was made with."""
    call = _call(operator, backend, y)
    if y is not None:
        raise _aux_with_y(call)
    made, kept = _prep_for(operator, backend, f, x, tangent, contexts, None, prep, holomorphic, True)
    p = cast("Prep", made)  # has_aux: never a Direct
    try:
        results = _execute(operator, p, backend, x, tangent, contexts, out, value)
    except OutputShapeChanged:  # as in run: a kept prep dropped and the call prepared again
        if not kept:
            raise
        prep_cache.forget(f, p)
        p = cast("Prep", _oneshot(operator, backend, f, x, tangent, contexts, None, holomorphic, True))
        results = _execute(operator, p, backend, x, tangent, contexts, out, value)
    first, p.aux_first = p.aux_first, None
    if first is not None:  # a one-shot prep's evaluation at this very x
        (aux,) = first
    else:
        aux = p.adapter.aux(p.target, private_copy(x) if family(x) is not None else x, contexts)
        if p.strict and signature(aux) != p.aux_signature:
            raise PreparationMismatchError(
                f"{call}: f's aux differs from the one the prep was made with: prepared for "
                f"{p.aux_description}; got {describe_arg(aux)}. Prepare again (prepare_{operator} with "
                f"has_aux=True), or pass strict=False to prepare_{operator} if aux may change"
            )
    if value:
        return ((results[0], aux),) + tuple(results[1:])
    return results, aux


def run_prepared(
    operator: Operator,
    prep: Prep,
    backend: Backend,
    f: Callable[..., Any],
    x: Array,
    contexts: tuple[Any, ...],
    out: Out = None,
) -> Any:
    """The prepared fast path of an operator without a tangent (``prep`` is a :class:`Prep`): the
    inline check, the runner bound at preparation, and the result in ``x``'s own type."""
    key, attr = prep.fast_key, prep.key_attr  # Prep.check's inline path, here without a call
    if (
        contexts
        or key is None
        or type(x) is not key[3]
        or (
            (operator, backend, f, key[3], x.shape, x.dtype) != key
            if attr is None
            else (operator, backend, f, key[3], getattr(x, attr)) != key  # JAX's aval for shape and dtype
        )
    ):
        prep.check(operator, backend, f, (x,) + contexts)
    if prep.structured:
        return _structured(prep, False, x, None, contexts, out, operator, backend)
    # _fast's body, inline: one call less on the prepared path (tests/test_prepared_work.py)
    x_in = x if type(x) is not float else as_input(x)
    try:
        result = prep.plain(x_in, (), contexts)
    except Unserved:  # the adapter's fast runner (extend.Runners): its plain one from now on
        result = prep.unserved()(x_in, (), contexts)
    if out is None:
        return result if type(result) is type(x) else _like_x(prep, result, x)
    return finish(result, x, out, operator.name, backend)


def _fast(
    operator: Operator, prep: Prep, backend: Backend, x: Array, tangent: Any, contexts: tuple[Any, ...], out: Any
) -> Any:
    """The prepared fast path after the check (a kept or a given prep, a flat x): the plain runner,
    and its result in ``x``'s own type (``out=`` for an operator without a tangent)."""
    # prep.plain inline, and its plain runner where its fast one raises Unserved (extend.Runners; a call in
    # a loop, served by a kept prep, makes no call more than with prep=)
    if operator.tangent is not None:
        if type(tangent) is type(x) is not float:  # one tangent of x's own type: run_prepared_tangent's body
            one = prep.one
            try:
                if one is not None:
                    result = one(x, tangent)
                else:
                    (result,) = prep.plain(x, (tangent,), contexts)
            except Unserved:
                (result,) = prep.unserved()(x, (tangent,), contexts)
            return result if type(result) is type(x) else _like_x(prep, result, x)
        x_in, tangents = as_input(x), tangents_of(tangent, x)
        try:
            results = prep.plain(x_in, tangents, contexts)
        except Unserved:
            results = prep.unserved()(x_in, tangents, contexts)
        return tangent_result(results, tangent, x)
    x_in = x if type(x) is not float else as_input(x)
    try:
        result = prep.plain(x_in, (), contexts)
    except Unserved:
        result = prep.unserved()(x_in, (), contexts)
    if out is None:
        return result if type(result) is type(x) else _like_x(prep, result, x)
    return finish(result, x, out, operator.name, backend)


def run_prepared_tangent(
    operator: Operator,
    prep: Prep,
    backend: Backend,
    f: Callable[..., Any],
    x: Array,
    tangent: Tangent,
    contexts: tuple[Any, ...],
) -> Any:
    """The prepared fast path of a tangent operator for one tangent of ``x``'s own array type."""
    key, attr, t = prep.fast_key, prep.key_attr, cast("Array", tangent)  # the callers': one tangent of x's type
    if (
        contexts
        or key is None
        or type(x) is not key[3]
        or (
            (operator, backend, f, key[3], x.shape, x.dtype, type(t), t.shape, t.dtype) != key
            if attr is None
            else (operator, backend, f, key[3], getattr(x, attr), type(t), getattr(t, attr)) != key
        )
    ):
        prep.check(operator, backend, f, (x, tangent) + contexts)
    if prep.structured:
        return _structured(prep, False, x, tangent, contexts, None, operator, backend)
    one = prep.one  # the adapter's fast runner of one tangent (extend.Runners), or None
    try:
        if one is not None:
            result = one(x, tangent)
        else:
            (result,) = prep.plain(x, (tangent,), contexts)
    except Unserved:  # the adapter's fast runner (extend.Runners): its plain one from now on
        (result,) = prep.unserved()(x, (tangent,), contexts)
    return result if type(result) is type(x) else _like_x(prep, result, x)


def _like_x(prep: Prep, result: Any, x: Array) -> Any:
    """A prepared call's result in the family of the user's ``x`` (:func:`finish` without ``out=``).

    A dense result of another family for a numpy ``x`` is converted by the family's ``to_numpy``
    (all that :func:`output_like` does for it), remembered at the first call, so that later calls
    make one call instead of the family lookups (JAX on numpy inputs: 1.3 -> 0.6 us). The callers
    return a result of x's own type themselves (no call at all)."""
    kind = type(result)
    if kind is prep.result_type and type(x) is np.ndarray:
        return prep.to_numpy(result)  # type: ignore[misc]
    if prep.result_type is None and type(x) is np.ndarray and not prep.sparse and not is_sparse(result):
        fam = family(result)
        record = families().get(fam) if fam is not None and fam != NUMPY else None
        if record is not None:
            prep.result_type, prep.to_numpy = kind, record.to_numpy
    return finish(result, x)


def _structured(
    prep: Prep,
    value: bool,
    x: Array,
    tangent: Tangent,
    contexts: tuple[Any, ...],
    out: Out,
    operator: Operator,
    backend: Backend,
) -> Any:
    """A call with a structured x or f(x): the structures come back built (``StructuredRunners``).
    ``out=`` receives a result that is one array (a complex x's gradient or Jacobian)."""
    results = prep.data.run(value, x, tangent, contexts)
    if out is None:
        return results
    kinds = operator.conversions if value else (operator.plain_conversion,)
    parts = list(results) if value else [results]
    for i, kind in enumerate(kinds):
        if kind != "out":
            continue
        if family(parts[i]) is None:
            raise TypeError(
                f"{_call(operator, backend, None)}: out= takes an array result; with a structured x or f(x) "
                f"the result is a structure: drop out= and use the returned one"
            )
        parts[i] = finish(parts[i], parts[i], out, operator.value_method if value else operator.name, backend)
    return tuple(parts) if value else parts[0]


def finish(result: Any, x: Array, out: Out = None, name: str = "", backend: Backend | None = None) -> Any:
    """``result`` in the family of the user's ``x``; written into ``out`` when given (``name``: the
    function called, an operator taking ``out=`` or its value form, for messages)."""

    if out is None and type(result) is type(x):  # computed in the user's own array type (a sparse one too)
        return result

    def call() -> str:
        return call_repr(name, backend, "f, x")  # the operators taking out= take no tangent

    if is_sparse(result):  # AutoSparse: already in x's family; out= keeps its pattern
        return result if out is None else fill_out(out, result, call())
    result = output_like(result, x)
    if out is None:
        return result

    fam = family(out)
    record = families().get(fam) if fam is not None else None
    if record is None:
        kinds = [f"a {r.array_type}" for r in families().values() if r.copy_into is not None]
        writable = ", ".join(kinds[:-1]) + " or " + kinds[-1] if len(kinds) > 1 else kinds[0]
        raise TypeError(f"{call()}: out= must be {writable}, got {type(out).__name__}")
    if record.copy_into is None:
        raise TypeError(
            f"{call()}: out= is a {fam} array, and {fam} arrays are immutable; drop out= and use the returned array"
        )
    written = cast("Array", out)  # an array of a family with copy_into by now
    if shape(written) != shape(result):
        raise ValueError(f"{call()}: out= has shape {shape(written)}, expected {shape(result)} (got {describe(out)})")
    record.copy_into(written, to_family(result, fam, like=written))
    return out


def tangent_result(results: tuple[Any, ...], tangent: Tangent, x: Array) -> Any:
    """A batch of results as a tuple (tangent was a tuple), else the single result."""
    if type(tangent) is tuple:
        return tuple(output_like(r, x) for r in results)
    return output_like(results[0], x)
