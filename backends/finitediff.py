"""``AutoFiniteDiff``: finite differences on ``x``'s own array type, through the array API.

First order follows ``scipy.optimize.approx_derivative``: per-coordinate absolute steps
``h_i = r * sign(x_i) * max(1, |x_i|)`` with ``r = eps**(1/2)`` (forward, backward, complex) or
``eps**(1/3)`` (central), ``eps`` that of ``x``'s dtype, or ``h_i = rel_step * sign(x_i) * |x_i|`` when
``rel_step`` is given (falling back to the default where that step is zero); the divisor is the
representable difference of the two points. A Jacobian costs ``n`` evaluations of ``f`` (complex),
``n + 1`` (forward, backward) or ``2n`` (central), plus one for the value where it is asked for and
not already computed. A pushforward along ``t`` takes the largest step ``k`` that moves no coordinate
by more than its own step above: ``k = min over t_i != 0 of |h_i| / |t_i|`` (one scale for all
coordinates, ``max|x|``, made the error 6e-4 at ``x = [100, -0.5]``, where SciPy's per-coordinate steps
give 6e-8). A NaN or inf coordinate gets the step of a coordinate of 1 (it stays NaN in its own
entries and does not set the step of the others); in a pushforward an inf coordinate sets no limit
on ``k`` (it stays inf whatever the step) and a NaN one limits it as a coordinate of 1 would.

``f`` never receives the user's ``x`` itself: where it is evaluated at ``x``, it gets a copy, so that
an ``f`` that writes into its input leaves the caller's array unchanged.

Second order uses central second differences with ``r = eps**(1/4)`` whatever the first-order method:
``H_ij = [f(x+h_i e_i+h_j e_j) - f(x+h_i e_i-h_j e_j) - f(x-h_i e_i+h_j e_j) + f(x-h_i e_i-h_j e_j)] / (4 h_i h_j)``
(``2n^2 + 1`` evaluations), the same along ``t`` for an hvp (``4n`` per tangent).

With ``method="complex"`` (``Im f(x + i h) / h``) ``f`` must be complex-analytic; the duplicates of its
captured state, caches and output buffer are complex so that what ``f`` writes keeps its imaginary part.

Size: over 400 lines in one module, because an adapter is the registry's unit (``AutoFiniteDiff.adapter``
names one module, imported at first use); the points of a call and the
job that evaluates them are this adapter's alone.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import math
import sys
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from array_api_compat import array_namespace, device

from diffinterface.extend import (
    NUMPY,
    PUSHFORWARD,
    Info,
    Operator,
    Runners,
    Target,
    context_values,
    copy_leaf,
    dtype_name,
    duplicate,
    families,
    family,
    family_accuracy,
    is_array,
    private_copy,
    raised_by,
    read_only_alias,
    structured_output,
    to_family,
)
from diffinterface.extend import (
    Adapter as _Base,
)

from .finitediff_executor import evaluations

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from diffinterface.extend import Array, Contexts, DType, Info, NumericArray, Target


_ORDER_EXPONENT = {"forward": 1 / 2, "backward": 1 / 2, "complex": 1 / 2, "central": 1 / 3, "second": 1 / 4}


# (array type, dtype) -> array_namespace of such an array: the lookup costs 1.5 us, and a one-shot
# pushforward asked three times (a namespace is the same for every array of a type and dtype)
_NAMESPACES: dict[Any, Any] = {}


def _namespace(x: Array) -> Any:
    """``array_namespace(x)``, kept per array type and dtype."""
    try:
        key = (type(x), x.dtype)
        return _NAMESPACES[key]
    except (KeyError, TypeError, AttributeError):  # not met yet, an unhashable dtype, or no dtype
        pass
    xp = array_namespace(x)
    try:
        if len(_NAMESPACES) >= 256:
            _NAMESPACES.clear()
        _NAMESPACES[(type(x), x.dtype)] = xp
    except (TypeError, AttributeError):
        pass
    return xp


def _complex_leaf(value: Array) -> Array:
    value = copy_leaf(value)
    xp = array_namespace(value)
    if xp.isdtype(value.dtype, "real floating"):
        return xp.astype(value, xp.complex64 if value.dtype == xp.float32 else xp.complex128)
    return value


def _constant_alias(value: Any) -> Any:
    """A ``Constant`` array as ``f`` reads it: a read-only view of a numpy array (a write raises, and
    ``f`` runs again over copies), a copy of a torch tensor (torch has no read-only tensors; the
    caller's constants are never modified)."""
    alias = read_only_alias(value)
    return copy_leaf(value) if alias is None else alias


def _along(xp: Any, abs_h: Array, t: Array) -> float:
    """The step along ``t``: the largest ``k`` that moves no coordinate by more than its own step,
    ``min over t_i != 0 of |h_i| / |t_i|`` = ``1 / max |t_i| / |h_i|`` (every ``|h_i| > 0``); 0.0
    where ``t`` is zero, NaN where ``t`` has a NaN (the derivative along it is NaN)."""
    if abs_h.shape[0] == 0:
        return 0.0
    top = float(xp.max(xp.abs(xp.reshape(t, (-1,))) / abs_h))
    return 0.0 if top == 0.0 else 1.0 / top


_BLOCK = 1 << 16  # elements per block of _step_along's numpy path: its temporaries stay in a core's cache


def _step_along(xp: Any, x: Array, t: Array, r: float) -> float | None:
    """:func:`_along` for the default steps ``r * max(1, |x_i|)`` in one expression (its temporaries
    freed as soon as used): ``r / max(|t_i| / max(1, |x_i|))``. An inf coordinate of ``x`` sets no
    limit on the step (its ratio is 0: it stays inf whatever the step, and does not shrink the step
    of the others); a NaN one makes the maximum NaN: None, and the caller takes the exact path, where
    it gets the step of a coordinate of 1."""
    if 0 in x.shape:
        return 0.0
    if type(x) is np.ndarray and type(t) is np.ndarray and x.ndim and t.ndim:
        # numpy's out=: two temporaries, a block of _BLOCK elements at a time, so that the four passes
        # over a block run in cache and x and t are read from memory once (at n = 1e6: 1.3 ms, where
        # passes over the whole arrays took 3.4 ms); x and t themselves where they fit in one block
        blocks: Any = ((x, t),)
        if x.size > _BLOCK:
            flat_x, flat_t = x.reshape(-1), t.reshape(-1)
            blocks = ((flat_x[i : i + _BLOCK], flat_t[i : i + _BLOCK]) for i in range(0, x.size, _BLOCK))
        top = -math.inf
        for xs, ts in blocks:
            scale = np.abs(xs)
            np.maximum(scale, 1.0, out=scale)
            ratio = np.abs(ts)
            np.divide(ratio, scale, out=ratio)
            block = float(ratio.max())
            if not block <= top:  # a larger maximum, or NaN: the derivative along t is NaN
                top = block
                if block != block:
                    break
    else:
        scale = xp.abs(x)  # maximum with an array of ones: array-api-compat 1.11's torch maximum takes no number
        top = float(xp.max(xp.abs(t) / xp.maximum(scale, xp.ones_like(scale))))
    if not math.isfinite(top):
        return None
    return 0.0 if top == 0.0 else r / top


def _eps(x: Array, dtype_eps: float, accuracy: float | None) -> float:
    """The relative accuracy the steps are made for: the dtype's, or a coarser one where the
    function's values have it: the arithmetic of ``x``'s family in its dtype (the family's
    ``accuracy`` hook: MLX's float64 ``sin``, ``cos``, ``exp`` are float32-accurate, and float64 steps
    over them gave gradients 3e-3 and Hessians 0.4 relative off), or an inner engine's results
    (:meth:`Adapter.for_accuracy`)."""
    eps = dtype_eps
    for coarser in (family_accuracy(family(x), x.dtype), accuracy):
        if coarser is not None and coarser > eps:
            eps = coarser
    return eps


class _Along:
    """The preparation of a pushforward: the output's :class:`Info`, and the namespace and relative
    step of ``x``'s type and dtype, reused while calls bring the same (a call with another, under
    ``strict=False``, looks them up)."""

    __slots__ = ("info", "exponent", "eps", "kind", "dtype", "xp", "r")
    kind: Any
    dtype: Any
    xp: Any
    r: float

    def __init__(self, info: Info, x: Array, exponent: float, eps: float | None = None) -> None:
        self.info, self.exponent, self.eps = info, exponent, eps
        self.kind = None
        self.namespace(x)

    def namespace(self, x: Array) -> tuple[Any, float]:
        """``x``'s array namespace and relative step ``eps ** exponent``."""
        if type(x) is not self.kind or x.dtype != self.dtype:
            self.kind, self.dtype, self.xp = type(x), x.dtype, _namespace(x)
            self.r = _relative_step(x, self.exponent, self.eps)
        return self.xp, self.r


# dtype -> its machine epsilon (numpy's finfo of the dtype's name: 0.7 us, asked at every pushforward)
_DTYPE_EPS: dict[Any, float] = {}


def _relative_step(x: Array, exponent: float, eps: float | None) -> float:
    """The relative step of a pushforward along a tangent: ``eps ** exponent`` for x's dtype (:func:`_eps`:
    the dtype's epsilon, kept per dtype, or a coarser accuracy of x's family, asked at every call: a
    family's record may be registered anew)."""
    dtype = x.dtype
    try:
        dtype_eps = _DTYPE_EPS[dtype]
    except (KeyError, TypeError):  # not met yet, or a dtype that does not hash
        dtype_eps = float(np.finfo(np.dtype(dtype_name(x))).eps)
        try:
            if len(_DTYPE_EPS) >= 256:
                _DTYPE_EPS.clear()
            _DTYPE_EPS[dtype] = dtype_eps
        except TypeError:
            pass
    return _eps(x, dtype_eps, eps) ** exponent


class _Stepped:
    """A one-shot pushforward's first step point, evaluated by ``output_info`` (``Adapter._stepped``):
    ``value`` is ``f(x + k t)`` along the call's one tangent, with ``k`` its step. Its shape and
    dtype are f(x)'s, and the runner takes it as that point's value: a one-shot central pushforward
    evaluates ``f`` twice, as by hand, not once more for f(x)'s shape. ``evaluate``: the evaluator that
    took it (``_evaluator``), which a one-shot call's second point takes too (``Adapter.oneshot_result``)."""

    __slots__ = ("k", "value", "evaluate")

    def __init__(self, k: float, value: Any, evaluate: Callable[[Array], Any]) -> None:
        self.k, self.value, self.evaluate = k, value, evaluate


class _Points:
    """The flat point, its steps and the helpers that perturb it, for one call."""

    __slots__ = ("xp", "x", "flat", "shape", "n", "idx", "h", "plus", "minus", "dev", "finite")

    def __init__(self, x: Array, exponent: float, rel_step: float | None, eps: float | None = None) -> None:
        xp = self.xp = _namespace(x)
        self.x, self.shape, self.dev = x, tuple(x.shape), device(x)
        flat = self.flat = xp.reshape(x, (-1,))
        self.n = flat.shape[0]
        self.idx = xp.arange(self.n, device=self.dev)
        r = _eps(x, float(xp.finfo(x.dtype).eps), eps) ** exponent
        sign = xp.where(
            flat >= 0, xp.asarray(1.0, dtype=x.dtype, device=self.dev), xp.asarray(-1.0, dtype=x.dtype, device=self.dev)
        )
        default = r * sign * xp.maximum(xp.abs(flat), xp.ones_like(flat))
        if rel_step is None:
            h = default
        else:
            h = rel_step * sign * xp.abs(flat)
            h = xp.where((flat + h) - flat == 0, default, h)
        # A NaN or inf coordinate gets a finite step and the nominal divisor, so that it makes its own
        # entries NaN without poisoning the derivatives with respect to the other coordinates.
        finite = xp.isfinite(flat)
        h = xp.where(finite, h, r * xp.ones_like(flat))
        self.h, self.plus, self.minus = h, flat + h, flat - h
        self.finite = finite

    def along(self, t: Array) -> float:
        """The step along ``t`` (see :func:`_along`)."""
        return _along(self.xp, self.xp.abs(self.h), t)

    def divisor(self, method: str) -> Any:
        """The representable distance between the two points of each coordinate's difference."""
        xp = self.xp
        if method == "central":
            return xp.where(self.finite, self.plus - self.minus, 2 * self.h)
        if method == "forward":
            return xp.where(self.finite, self.plus - self.flat, self.h)
        return xp.where(self.finite, self.flat - self.minus, self.h)


def _computing(x: Array) -> AbstractContextManager[Any]:
    """The context in which x's library keeps x's dtype (a no-op for NumPy)."""
    return _computing_for(family(x), x.dtype)


def _computing_for(fam: str | None, dtype: DType) -> AbstractContextManager[Any]:
    """:func:`_computing` from the family's name and the dtype, also in a process that has not imported
    the family's library yet (an executor's worker, before it unpickles the arrays)."""
    record = families().get(fam or NUMPY)
    if record is None or record.name == NUMPY:
        return contextlib.nullcontext()
    library = record.array_type.partition(".")[0]
    if library not in sys.modules:
        importlib.import_module(library)
    return record.computing(dtype)


def _attempted(point: Array) -> Array:
    """``f``'s input in a run over guarded aliases, which a refused write runs again over copies: a
    read-only view of a numpy point (a write of ``f`` into its input is refused too, before it happens),
    another family's a copy of its own. The run again then starts from the point as it was: before
    2026-12-08 an ``f`` that wrote into its input (``z *= -1.5``) and then into a captured array ran
    again at the written point (a value of 0.551 for 0.633 and a Hessian of 2.8e6, silently). An ``f``
    that writes into its input runs over copies of its state from its first such write on, as one
    that writes into its state does. (A plain read-only ndarray, not ``read_only_alias``'s
    ``ReadOnlyView``: a slice of its input that ``f`` returns would come back as that subclass.)"""
    if type(point) is np.ndarray:
        view = point.view()
        view.flags.writeable = False
        return view
    return private_copy(point)


def _evaluator(
    target: Target, contexts: Contexts, x: Array, complex_step: bool = False, batched: bool = False
) -> Callable[[Array], Any]:
    """``point -> f(point)`` as an array, each evaluation over fresh duplicates of the state (from the
    second point on, one ``f`` over read-only views of its arrays serves the points where ``f`` writes
    none: ``Target.shared``), and of the shape ``f(x)`` had at preparation (``Target.checked``;
    ``batched``: a vectorized ``f`` at a stack of points, whose values ``_unbatch`` checks)."""
    dtype = x.dtype
    check = not batched
    leaf = _complex_leaf if complex_step else copy_leaf
    const = target.closure == "const"

    fam = family(x)
    kind = type(x)  # an array: the frontend passes a number as a 0-d array

    def as_array(y: Any) -> Any:
        own = type(y) is kind  # an array of x's own type, so of its family (the common case: no lookups)
        if not own and not is_array(y):  # a Python number
            if isinstance(y, (tuple, list, dict)):
                raise structured_output(y, target.call)
            xp = _namespace(x)  # here only: x's device too (a lookup of a microsecond)
            y = xp.asarray(y, dtype=dtype if not isinstance(y, complex) else None, device=device(x))
            return target.checked(y) if check else y
        if check and y.shape != target.y_shape and target.y_shape is not None:  # inline: no call when it holds
            target.checked(y)  # f(x) no longer of the shape the prep's steps and reshapes were made for: raises
        if not own and family(y) != fam:  # f computed in another library (a numpy buffer read by a torch f)
            return to_family(np.asarray(y) if family(y) == NUMPY else y, fam, like=x)
        # under "const", f may return a buffer it reuses; a read-only y is an alias of the user's array
        return copy_leaf(y) if const or (type(y) is np.ndarray and not y.flags.writeable) else y

    if target.plain and not contexts and not complex_step:
        f = target.f
        return lambda point: as_array(f(point))

    def duplicated(v: Any) -> Any:
        return duplicate(v, leaf)

    def aliased_constant(v: Any) -> Any:
        return duplicate(v, _constant_alias)

    def copied_constant(v: Any) -> Any:
        return duplicate(v, copy_leaf)

    # f for the call's later points (Target.shared, asked at the second: evaluators are per call, and
    # most evaluate once); None before, and after a point that wrote
    shared: Callable[..., Any] | None = None
    points = 0

    def evaluate(point: Array) -> Any:
        nonlocal shared, points
        points += 1
        if points == 2 and not contexts:  # (the contexts are duplicated for each evaluation)
            shared = target.shared(leaf, read_only_alias)
        fn = shared  # one read: a thread pool's threads evaluate one call's points with this evaluator
        if fn is not None:
            try:
                return as_array(fn(_attempted(point)))
            except Exception as error:
                if not raised_by(error, Adapter.refused_write):
                    raise
                shared = None  # a write at this point alone: guarded_with runs it again over copies

        def run(aliased: bool) -> Any:  # f reads its arrays through read-only views until it writes
            values = (
                context_values(contexts, duplicated, aliased_constant if aliased else copied_constant)
                if contexts
                else ()
            )
            guard = read_only_alias if aliased else None
            return as_array(target.instance(leaf, guard=guard)(_attempted(point) if aliased else point, *values))

        return target.guarded_with(run, bool(contexts), Adapter.refused_write)

    return evaluate


def _unbatch(ys: Any, k: int, call: str, y_shape: tuple[int, ...] | None) -> list[Any]:
    """The values of a vectorized ``f`` at ``k`` points, one per point, after checking their shape."""
    shape = tuple(getattr(ys, "shape", ()))
    if not shape or shape[0] != k or (y_shape is not None and shape[1:] != tuple(y_shape)):
        expected = f"({k}, *f(x).shape)" if y_shape is None else str((k, *y_shape))
        raise ValueError(
            f"{call}: with vectorized=True, f takes points stacked along a new first axis, shape (k, *x.shape), "
            f"and returns their values stacked the same way; for {k} points it returned shape {shape}, "
            f"expected {expected}. Use vectorized=False for an f that takes one point"
        )
    return [ys[i, ...] for i in range(k)]


# A point's recipe (see _PointSet): (base, replace, adds), ``adds`` of (c, kind, arg) with ``arg`` a
# coordinate (kind "e") or a vector's name (kind "v")
Recipe = tuple[str, "tuple[int, str] | None", tuple[tuple[int, str, Any], ...]]


class _PointSet:
    """The points of one call, as recipes over a few named flat vectors, so that a point is built where
    ``f`` runs (a worker receives recipes, not points) by the same code here and there.

    A recipe ``(base, replace, adds)`` is ``vectors[base]``, with coordinate ``i`` taken from
    ``vectors[name]`` where ``replace = (i, name)``, then each ``(c, kind, arg)`` of ``adds`` added
    ``c`` times: the step along coordinate ``arg`` (``vectors["h"]`` there, zero elsewhere) for
    ``kind == "e"``, the vector ``vectors[arg]`` for ``kind == "v"``; reshaped to ``shape``. A recipe
    with neither is a copy of its base (``f`` may write into the point it gets). ``shape`` None: the
    vectors are shaped like ``x`` already (a pushforward's ``x + k t``: no reshape per point)."""

    __slots__ = ("vectors", "idx", "shape", "_xp", "_steps")

    def __init__(
        self, vectors: dict[str, NumericArray], idx: Array | None, shape: tuple[int, ...] | None, xp: Any = None
    ) -> None:
        self.vectors, self.idx, self.shape = vectors, idx, shape
        self._xp: Any = xp  # the vectors' namespace where the caller has it (else looked up at the first point)
        self._steps: list[tuple[int, Any]] = [(-1, None), (-1, None)]  # see _step

    def __getstate__(self) -> tuple[Any, ...]:
        return (self.vectors, self.idx, self.shape)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self.vectors, self.idx, self.shape = state
        self._xp, self._steps = None, [(-1, None), (-1, None)]

    def _step(self, xp: Any, i: int, position: int) -> Any:
        """The step along coordinate ``i``, kept for the next points that have it at the same position
        of their ``adds``: a Hessian's row keeps ``h_i e_i`` first while ``h_j e_j`` changes second, an
        hvp's ``h_i e_i`` serves 4 points. One slot per position, replaced whole: threads of a thread
        pool build points of one set at once."""
        h = self.vectors["h"]
        step = xp.where(self.idx == i, h, xp.zeros_like(h))
        if position < len(self._steps):
            self._steps[position] = (i, step)
        return step

    def build(self, recipe: Recipe) -> Any:
        base, replace, adds = recipe
        vectors = self.vectors
        v = vectors[base]
        xp = self._xp
        if xp is None:
            xp = self._xp = _namespace(v)
        if replace is not None:  # a Jacobian's column: one coordinate replaced
            i, name = replace
            if type(v) is np.ndarray:  # a copy with one entry set: the same values as the mask, in one pass
                v = v.copy()
                v[i] = vectors[name][i]
            else:
                v = xp.where(self.idx == i, vectors[name], v)
        elif not adds:  # the base itself: a copy, f may write into it
            v = private_copy(v)
        position = 0
        for c, kind, arg in adds:
            if kind == "e":
                kept = self._steps[position] if position < 2 else None  # one read: threads replace slots
                term = kept[1] if kept is not None and kept[0] == arg else self._step(xp, arg, position)
            else:
                term = vectors[arg]
            position += 1
            if c == 1:
                v = v + term
            elif c == -1:
                v = v - term
            else:
                v = v + c * term if c > 0 else v - (-c) * term
        return v if self.shape is None else xp.reshape(v, self.shape)

    @staticmethod
    def describe(recipe: Recipe) -> str:
        """How the point is made, in words: ``x - h_3 e_3`` (indices into the flattened ``x``)."""
        base, replace, adds = recipe
        text = {"x+h": "x + h", "x-h": "x - h"}.get(base, base)
        if replace is not None:
            i, name = replace
            text += {"x+h": f" + h_{i} e_{i}", "x-h": f" - h_{i} e_{i}", "x+ih": f" + i h_{i} e_{i}"}[name]
        for c, kind, arg in adds:
            size = "" if abs(c) == 1 else f"{abs(c)} "
            text += (" + " if c > 0 else " - ") + size + (f"h_{arg} e_{arg}" if kind == "e" else arg)
        return text


class _Job:
    """One call's evaluations of ``f`` (see ``diffinterface.backends.finitediff_executor``): ``f`` as adapters call it
    (the :class:`Target`), the contexts, ``x`` (family, dtype, device) and the call's points. Pickled
    for an executor's workers: the target travels as the user's ``f`` and what the plan has learnt,
    and is built again there."""

    __slots__ = ("target", "contexts", "x", "points", "complex_step", "vectorized", "y_shape", "_f")

    def __init__(
        self,
        target: Target,
        contexts: Contexts,
        x: Array,
        points: _PointSet,
        complex_step: bool,
        vectorized: bool,
        y_shape: tuple[int, ...] | None,
    ) -> None:
        self.target, self.contexts, self.x, self.points = target, contexts, x, points
        self.complex_step, self.vectorized, self.y_shape = complex_step, vectorized, y_shape
        self._f: Any = None

    def __getstate__(self) -> tuple[Any, ...]:
        t = self.target
        learnt = (None if t.plan is None else t.plan.aliases, t.constant_aliases)
        target = (t.user_f, t.y, t.closure, t.call, t.layout, t.aux, learnt)
        return (target, self.contexts, self.x, self.points, self.complex_step, self.vectorized, self.y_shape)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        (f, y, closure, call, layout, aux, (aliases, constant_aliases)), *rest = state
        target = Target(f, y, closure, call, layout, aux=aux)
        if target.plan is not None and aliases is not None:
            target.plan.aliases = aliases
        target.constant_aliases = constant_aliases
        self.target = target
        self.contexts, self.x, self.points, self.complex_step, self.vectorized, self.y_shape = rest
        self._f = None

    def _evaluate(self) -> Any:
        if self._f is None:
            self._f = _evaluator(self.target, self.contexts, self.x, self.complex_step, self.vectorized)
        return self._f

    def one(self, recipe: Recipe) -> Any:
        return self._evaluate()(self.points.build(recipe))

    def batch(self, recipes: list[Recipe]) -> list[Any]:
        points = [self.points.build(r) for r in recipes]
        stacked = array_namespace(points[0]).stack(points)
        return _unbatch(self._evaluate()(stacked), len(points), self.target.call, self.y_shape)

    @property
    def environment(self) -> Any:
        return functools.partial(_computing_for, family(self.x), self.x.dtype)

    def point(self, recipe: Recipe) -> Any:
        return self.points.build(recipe)

    def describe(self, recipe: Recipe) -> str:
        return self.points.describe(recipe)


class Adapter(_Base):
    """Finite differences; see the module docstring for steps and evaluation counts."""

    evaluates_only = True  # an outer finite difference differentiates any inner engine's results
    # output_info's evaluations run on copies of x made here (evaluate's private_copy, a step point)
    copies_x = True

    def __init__(self, backend: Any) -> None:
        super().__init__(backend)
        self.method: str = backend.method
        self.rel_step: float | None = backend.rel_step
        # the frontend refuses a complex x for a complex step: it steps along the imaginary axis of a real x
        self.complex_step = self.method == "complex"
        if self.complex_step:
            self.complex_dtypes = ()
        self.executor: Any = backend.executor
        self.batch_size: int | None = backend.batch_size
        self.vectorized: bool = backend.vectorized
        self.eps: float | None = None  # see for_accuracy

    def for_accuracy(self, eps: float) -> Adapter:
        """This adapter with steps for a function whose values are accurate to ``eps`` relative (coarser
        than its dtype's): ``SecondOrder(AutoFiniteDiff(), inner)`` differentiates ``inner``'s results,
        float32-accurate where ``inner`` is (``Adapter.accuracy``: MLX's float64). The steps are
        ``eps ** (1/3)`` (central) instead of ``finfo(x.dtype).eps ** (1/3)``, balancing the noise over
        the step against the truncation error; ``rel_step``, when given, is kept."""
        adapter = type(self)(self.backend)
        adapter.eps = eps
        return adapter

    # -- evaluations ---------------------------------------------------------------------------

    def _vectorizable(self, target: Target) -> None:
        if target.y is not None or target.layout is not None:
            what = "writes its output into a buffer y" if target.y is not None else "has a structured x or f(x)"
            raise TypeError(
                f"{target.call}: vectorized=True needs an f that takes one array of points and returns one "
                f"array of values; this f {what}: use vectorized=False"
            )

    def _values(
        self,
        target: Target,
        contexts: Contexts,
        x: Array,
        points: _PointSet,
        recipes: list[Recipe],
        complex_step: bool = False,
        y_shape: tuple[int, ...] | None = None,
    ) -> Any:
        """The values of ``f`` at ``recipes``'s points, in their order: lazily, or from the executor."""
        if self.executor is None and not self.vectorized:  # here, one point at a time, lazily
            return map(_evaluator(target, contexts, x, complex_step), map(points.build, recipes))
        if self.vectorized:
            self._vectorizable(target)
        job = _Job(target, contexts, x, points, complex_step, self.vectorized, y_shape)
        return iter(evaluations(job, recipes, self.executor, self.batch_size, target.call))

    def output_info(self, target: Target, x: Array, contexts: Contexts, oneshot: bool) -> Info:
        stepped = self._stepped(target, x, contexts) if oneshot else None
        if stepped is None:
            return super().output_info(target, x, contexts, oneshot)
        y = stepped.value
        return Info(tuple(y.shape), y.dtype, stepped, tuple(x.shape), oneshot)

    def _stepped(self, target: Target, x: Array, contexts: Contexts) -> _Stepped | None:
        """For a one-shot pushforward along one tangent (``target.one_tangent``), central or forward
        with the default steps, evaluated here one point at a time: ``f`` at the first point the
        runner needs, ``x + k t``, instead of at ``x`` (:class:`_Stepped`); None otherwise (a zero or
        NaN step too: the runner takes its own path there)."""
        t = target.one_tangent
        if t is None or self.method not in ("central", "forward") or self.rel_step is not None:
            return None
        if self.executor is not None or self.vectorized or not is_array(x):
            return None
        with _computing(x):
            k = _step_along(_namespace(x), x, t, _relative_step(x, self._exponent("first"), self.eps))
            if k is None or k == 0.0:
                return None
            point = x + k * t  # as the runner's point set builds it: x + (k t)
            evaluate = _evaluator(target, contexts, x)
            return _Stepped(k, evaluate(point), evaluate)

    def evaluate(self, target: Target, x: Array, contexts: Contexts) -> Any:
        if self.vectorized:  # f takes a batch: this one point is a batch of one
            self._vectorizable(target)
            with _computing(x):
                point = private_copy(x)
                ys = _evaluator(target, contexts, x, batched=True)(array_namespace(x).reshape(point, (1, *x.shape)))
                return _unbatch(ys, 1, target.call, None)[0]
        if type(x) is np.ndarray:  # no dtype context to enter (the prepared hessian's value: no extra call)
            return _evaluator(target, contexts, x)(private_copy(x))
        with _computing(x):
            return _evaluator(target, contexts, x)(private_copy(x))

    def prepare(
        self,
        operator: Operator,
        target: Target,
        x: Array,
        tangents: tuple[NumericArray, ...],
        contexts: Contexts,
        info: Info,
    ) -> Runners:
        """The base runners, run inside the context in which x's library keeps x's dtype (JAX's
        ``enable_x64`` for float64 x without global x64: else the steps and f's values were float32)."""
        if type(x) is np.ndarray:  # numpy: no context to enter, and the runners as they are
            return cast("Runners", super().prepare(operator, target, x, tangents, contexts, info))
        with _computing(x):
            runners = super().prepare(operator, target, x, tangents, contexts, info)
        assert isinstance(runners, Runners)  # the base binds the methods into Runners
        if family(x) in (NUMPY, None):
            return runners
        plain, value = runners.plain, runners.value

        def plain_in(x: Array, ts: tuple[Array, ...], cs: Contexts) -> Any:
            with _computing(x):
                return plain(x, ts, cs)

        def value_in(x: Array, ts: tuple[Array, ...], cs: Contexts) -> Any:
            with _computing(x):
                return value(x, ts, cs)

        return Runners(plain_in, value_in, runners.data)

    def _exponent(self, order: str) -> float:
        return _ORDER_EXPONENT[order if order == "second" else self.method]

    # -- first order -----------------------------------------------------------------------------

    def _jacobian(self, data: Info, target: Target, x: Array, contexts: Contexts, want_value: bool) -> tuple[Any, ...]:
        """``(f(x) or None, J)`` by per-coordinate differences, J of shape ``y_shape + x_shape``."""
        method = self.method
        p = _Points(x, self._exponent("first"), self.rel_step, self.eps)
        xp, n = p.xp, p.n
        y0 = data.take_value()
        cols = []
        recipes: list[Recipe]
        if method == "complex":
            cdtype = xp.complex64 if x.dtype == xp.float32 else xp.complex128
            cflat = xp.astype(p.flat, cdtype)
            points = _PointSet({"x": cflat, "x+ih": cflat + xp.astype(p.h, cdtype) * 1j}, p.idx, p.shape, xp)
            recipes = [("x", (i, "x+ih"), ()) for i in range(n)]
            for i, y in enumerate(self._values(target, contexts, x, points, recipes, True, data.y_shape)):
                cols.append(xp.imag(_complex_result(y, xp, target.call)) / p.h[i])
            if want_value and y0 is None:
                y0 = self.evaluate(target, x, contexts)
        else:
            points = _PointSet({"x": p.flat, "x+h": p.plus, "x-h": p.minus}, p.idx, p.shape, p.xp)
            first = (method != "central" or want_value) and y0 is None
            steps = {"central": ("x+h", "x-h"), "forward": ("x+h",), "backward": ("x-h",)}[method]
            recipes = [("x", None, ())] if first else []
            recipes += [("x", (i, step), ()) for i in range(n) for step in steps]
            values = self._values(target, contexts, x, points, recipes, False, data.y_shape)
            if first:
                y0 = next(values)
            dx = p.divisor(method)
            for i in range(n):
                if method == "central":
                    plus = next(values)
                    cols.append((plus - next(values)) / dx[i])
                elif method == "forward":
                    cols.append((next(values) - y0) / dx[i])
                else:
                    cols.append((y0 - next(values)) / dx[i])
        y_shape, x_shape = data.y_shape, data.x_shape
        if n == 0:
            return y0, xp.zeros(y_shape + x_shape, dtype=x.dtype, device=p.dev)
        jac = xp.reshape(xp.stack([xp.reshape(c, (-1,)) for c in cols], axis=1), y_shape + x_shape)
        return y0, jac

    def prepare_jacobian(self, target: Target, x: Array, contexts: Contexts, info: Info) -> Any:
        return info

    def value_and_jacobian(self, data: Info, target: Target, x: Array, contexts: Contexts) -> Any:
        return self._jacobian(data, target, x, contexts, True)

    def jacobian(self, data: Info, target: Target, x: Array, contexts: Contexts) -> Any:
        return self._jacobian(data, target, x, contexts, False)[1]

    # gradient and derivative are Jacobians of shape x.shape and f(x).shape: same code, same counts.
    prepare_gradient = prepare_derivative = prepare_jacobian
    value_and_gradient = value_and_derivative = value_and_jacobian
    gradient = derivative = jacobian

    def _pushforward(
        self,
        data: _Along | Info,
        target: Target,
        x: Array,
        tangents: tuple[NumericArray, ...],
        contexts: Contexts,
        want_value: bool,
    ) -> Any:
        if type(data) is not _Along:  # an Info from another adapter's preparation (one that delegates here)
            data = _Along(cast("Info", data), x, self._exponent("first"), self.eps)
        xp, r = data.namespace(x)
        y0 = data.info.take_value()
        stepped = None
        if type(y0) is _Stepped:  # a one-shot call: f at its first step point, not at x (see _stepped)
            stepped, y0 = y0, None
        method = self.method
        complex_step = method == "complex"
        cdtype = (xp.complex64 if x.dtype == xp.float32 else xp.complex128) if complex_step else None
        # shaped like x: no reshape per point
        vectors: dict[str, NumericArray] = {"x": xp.astype(x, cdtype) if complex_step else cast("NumericArray", x)}
        # f(x), where needed, joins the points (a complex step evaluates it apart: at a real point)
        first = (want_value or method in ("forward", "backward")) and y0 is None and not complex_step
        recipes: list[Recipe] = [("x", None, ())] if first else []
        abs_h = None
        steps: list[float] = []
        plus_of_first = None  # f(x + k t_0), where output_info evaluated it
        for j, t in enumerate(tangents):
            k: float | None
            if j == 0 and stepped is not None:  # the one-shot call's x and tangent: the step output_info took
                k = stepped.k
            else:
                k = _step_along(xp, x, t, r) if self.rel_step is None else None
            if k is None:  # rel_step, or a NaN coordinate: every step as _Points takes it
                if abs_h is None:
                    abs_h = xp.abs(_Points(x, self._exponent("first"), self.rel_step, self.eps).h)
                k = _along(xp, abs_h, t)
            steps.append(k)
            if k == 0.0:
                continue
            # k is a Python float: x's dtype is kept (NEP 50 in numpy >= 2, weak scalars in JAX and torch)
            name = f"k t_{j}"
            vectors[name] = (1j * k) * xp.astype(t, cdtype) if complex_step else k * t
            if j == 0 and stepped is not None:
                plus_of_first = stepped.value
            elif method != "backward":
                recipes.append(("x", None, ((1, "v", name),)))
            if method in ("central", "backward"):
                recipes.append(("x", None, ((-1, "v", name),)))
        if want_value and y0 is None and complex_step:
            y0 = self.evaluate(target, x, contexts)
        points = _PointSet(vectors, None, None, xp)
        values = self._values(target, contexts, x, points, recipes, complex_step, data.info.y_shape)
        if first:
            y0 = next(values)
        results = []
        for j, k in enumerate(steps):
            if k == 0.0:
                results.append(xp.zeros(data.info.y_shape, dtype=x.dtype, device=device(x)))
            elif complex_step:
                results.append(xp.imag(_complex_result(next(values), xp, target.call)) / k)
            elif method == "backward":
                results.append((y0 - next(values)) / k)
            else:  # central and forward: f(x + k t) first
                plus = plus_of_first if j == 0 and plus_of_first is not None else next(values)
                results.append((plus - next(values)) / (2 * k) if method == "central" else (plus - y0) / k)
        return y0, tuple(results)

    def prepare_pushforward(
        self, target: Target, x: Array, tangents: tuple[NumericArray, ...], contexts: Contexts, info: Info
    ) -> Any:
        return _Along(info, x, self._exponent("first"), self.eps)

    def oneshot_result(
        self,
        operator: Operator,
        target: Target,
        x: Array,
        tangents: tuple[NumericArray, ...],
        contexts: Contexts,
        info: Info,
    ) -> Any:
        """A one-shot pushforward along one tangent whose first step point ``output_info`` evaluated
        (:class:`_Stepped`): the plain runner's difference (``_pushforward``), its second point
        evaluated here without the runner's point set and recipes (the same points, in the same
        arithmetic: ``x - (k t)``, or a copy of ``x`` for a forward difference, and the same quotient);
        None for any other call."""
        if operator is not PUSHFORWARD or type(info.value) is not _Stepped:
            return None
        stepped = info.take_value()
        k, evaluate = stepped.k, stepped.evaluate  # k nonzero and finite (_stepped), central or forward, one tangent
        with _computing(x):
            if self.method == "central":
                return ((stepped.value - evaluate(x - k * tangents[0])) / (2 * k),)
            return ((stepped.value - evaluate(private_copy(x))) / k,)

    def value_and_pushforward(
        self, data: _Along | Info, target: Target, x: Array, tangents: tuple[NumericArray, ...], contexts: Contexts
    ) -> Any:
        return self._pushforward(data, target, x, tangents, contexts, True)

    def pushforward(
        self, data: _Along | Info, target: Target, x: Array, tangents: tuple[NumericArray, ...], contexts: Contexts
    ) -> Any:
        return self._pushforward(data, target, x, tangents, contexts, False)[1]

    # -- second order: central second differences ------------------------------------------------

    def prepare_second_derivative(self, target: Target, x: Array, contexts: Contexts, info: Info) -> Any:
        return info

    prepare_hessian = prepare_second_derivative

    def prepare_hvp(
        self, target: Target, x: Array, tangents: tuple[NumericArray, ...], contexts: Contexts, info: Info
    ) -> Any:
        return info

    def _hessian(self, data: Info, target: Target, x: Array, contexts: Contexts, y0: Any) -> Any:
        """The Hessian; ``f(x)``, which its diagonal needs, joins the points where ``y0`` is None."""
        p = _Points(x, self._exponent("second"), self.rel_step, self.eps)
        xp, n, h = p.xp, p.n, p.h
        first = y0 is None
        recipes: list[Recipe] = [("x", None, ())] if first else []
        for i in range(n):
            recipes += [("x", None, ((2, "e", i),)), ("x", None, ((-2, "e", i),))]
            for j in range(i + 1, n):
                recipes += [("x", None, ((a, "e", i), (b, "e", j))) for a in (1, -1) for b in (1, -1)]
        points = _PointSet({"x": p.flat, "h": h}, p.idx, p.shape, xp)
        values = self._values(target, contexts, x, points, recipes, False, data.y_shape)
        if first:
            y0 = next(values)
        rows: list[list[Any]] = [[None] * n for _ in range(n)]
        for i in range(n):
            plus = next(values)
            value = (plus - 2 * y0 + next(values)) / (4 * h[i] * h[i])
            rows[i][i] = xp.reshape(xp.asarray(value), ())
            for j in range(i + 1, n):
                pp, pm, mp, mm = next(values), next(values), next(values), next(values)
                value = (pp - pm - mp + mm) / (4 * h[i] * h[j])
                rows[i][j] = rows[j][i] = xp.reshape(xp.asarray(value), ())
        if n == 0:
            return xp.zeros(p.shape + p.shape, dtype=x.dtype, device=p.dev)
        return xp.reshape(xp.stack([xp.stack(r) for r in rows]), p.shape + p.shape)

    def _hvp(self, data: Info, target: Target, x: Array, tangents: tuple[NumericArray, ...], contexts: Contexts) -> Any:
        p = _Points(x, self._exponent("second"), self.rel_step, self.eps)
        xp, n, h = p.xp, p.n, p.h
        vectors = {"x": p.flat, "h": h}
        recipes: list[Recipe] = []
        steps = []
        for j, t in enumerate(tangents):
            k = p.along(t) if n else 0.0
            steps.append(k)
            if k == 0.0:
                continue
            name = f"k t_{j}"
            vectors[name] = k * xp.reshape(t, (-1,))
            for i in range(n):
                recipes += [("x", None, ((a, "e", i), (b, "v", name))) for a in (1, -1) for b in (1, -1)]
        values = self._values(
            target, contexts, x, _PointSet(vectors, p.idx, p.shape, p.xp), recipes, False, data.y_shape
        )
        results = []
        for k in steps:
            if k == 0.0:
                results.append(xp.zeros(p.shape, dtype=x.dtype, device=p.dev))
                continue
            out = []
            for i in range(n):
                pp, pm, mp, mm = next(values), next(values), next(values), next(values)
                out.append(xp.reshape(xp.asarray((pp - pm - mp + mm) / (4 * h[i] * k)), ()))
            results.append(xp.reshape(xp.stack(out), p.shape))
        return tuple(results)

    def hessian(self, data: Info, target: Target, x: Array, contexts: Contexts) -> Any:
        return self._hessian(data, target, x, contexts, data.take_value())

    def value_gradient_and_hessian(self, data: Info, target: Target, x: Array, contexts: Contexts) -> Any:
        y0, grad = self._jacobian(data, target, x, contexts, True)
        return y0, grad, self._hessian(data, target, x, contexts, y0)

    def hvp(self, data: Info, target: Target, x: Array, tangents: tuple[NumericArray, ...], contexts: Contexts) -> Any:
        return self._hvp(data, target, x, tangents, contexts)

    def gradient_and_hvp(
        self, data: Info, target: Target, x: Array, tangents: tuple[NumericArray, ...], contexts: Contexts
    ) -> Any:
        grad = self._jacobian(data, target, x, contexts, False)[1]
        return grad, self._hvp(data, target, x, tangents, contexts)

    def _second_derivative(self, data: Info, target: Target, x: Array, contexts: Contexts, y0: Any) -> Any:
        p = _Points(x, self._exponent("second"), self.rel_step, self.eps)
        xp = p.xp
        first = y0 is None
        recipes: list[Recipe] = [("x", None, ())] if first else []
        recipes += [("x+h", None, ()), ("x-h", None, ())]
        points = _PointSet({"x": p.flat, "x+h": p.plus, "x-h": p.minus}, None, p.shape, p.xp)
        values = self._values(target, contexts, x, points, recipes, False, data.y_shape)
        if first:
            y0 = next(values)
        step = xp.reshape(p.divisor("central"), ()) / 2
        plus = next(values)
        return (plus - 2 * y0 + next(values)) / (step * step)

    def second_derivative(self, data: Info, target: Target, x: Array, contexts: Contexts) -> Any:
        return self._second_derivative(data, target, x, contexts, data.take_value())

    def value_derivative_and_second_derivative(self, data: Info, target: Target, x: Array, contexts: Contexts) -> Any:
        y0, der = self._jacobian(data, target, x, contexts, True)
        return y0, der, self._second_derivative(data, target, x, contexts, y0)


def _complex_result(y: Array, xp: Any, call: str) -> Array:
    """``f``'s value at a complex point, which must be complex: the imaginary part of a real one is
    zero, a derivative that would be silently wrong."""
    if not xp.isdtype(y.dtype, "complex floating"):
        raise TypeError(
            f"{call}: method='complex' needs f to compute in complex arithmetic, but f returned {y.dtype} "
            f"for a complex x; use method='central'"
        )
    return y


# -- the bench record: the direct calls AutoFiniteDiff is compared with ---------------------------
