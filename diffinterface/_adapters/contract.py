"""The adapter contract, and the generic fallbacks that derive every operator from a small core.

**The contract.** The frontend asks an adapter one thing per operator:
``adapter.prepare(operator, target, x, tangents, contexts, info) -> runners``, where ``operator`` is
the operator's record (:class:`~diffinterface._core.operators.Operator`) and ``runners`` (a
:class:`Prepared`) has two :class:`Runner` callables ``(x, tangents, contexts) ->``: ``plain`` (the
result: an array, or a tuple of arrays for the tangent operators) and ``value`` (the value form's
tuple: ``(y, result)`` for the first order, ``(grad, hvps)``, ``(y, grad, hess)``, ``(y, der,
der2)``; :func:`value_form` packs it from an engine's ``(primal, result)``). The frontend calls
them and converts what they return once, for every operator (``_frontend.pipeline.run``).

**Two ways to meet it.**

- An engine that compiles or traces per operator (JAX, torch, autograd) overrides :meth:`Adapter.prepare`
  and builds both runners itself; :meth:`Adapter.forward` gives the direction of each first-order
  operator (contract section 2) and :meth:`Adapter.direction_fallback` switches a ``mode=None`` operator
  to reverse mode where the engine lacks forward rules.
- Any other adapter implements at least ``value_and_pushforward`` or ``value_and_pullback`` (the
  methods below, with ``data`` what its ``prepare_<operator>`` returned); overriding a method is
  declaring that the engine does that operator natively. The base :meth:`Adapter.prepare` binds the
  methods into runners, and every other operator has a fallback here: derivative and gradient
  through the core operator, the Jacobian from batched pushforwards or pullbacks (the direction by
  :meth:`Adapter.jacobian_forward`), a pushforward or pullback through the Jacobian when only the
  other direction is native (:meth:`Operator.through_jacobian` says which; engines use the same rule), and
  the second order by nesting the adapter's first order over itself (``_adapters.second_order``).

Conventions at this boundary:

- ``x``, tangents and context values arrive in the user's array family (a Python float already
  turned into a 0-d numpy array); results may be in the engine's family: the frontend converts them.
- tangents are always a tuple (a batch), results of tangent operators a tuple of the same length.
- ``info`` (:class:`Info`) carries what the frontend learnt at preparation: the output's shape and
  dtype, and for one-shot (unprepared) calls the value of ``f`` at ``x`` if it was computed, or
  what the adapter's own ``output_info`` recorded for its runner's first call (``target.operator``
  says which operator that runner computes; ``Info.take_value``).

Size: over 400 lines in one module, because the contract and its fallbacks are one base class whose
methods derive each operator from the core ones; a fallback read apart from the others hides which
it calls.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np
from array_api_compat import array_namespace, device

from .._closures.plan import read_only_refused
from .._core.arrays import NUMPY, complex_dtype, family, family_accuracy, private_copy, shape_size, size, to_family
from .._core.configs import adapter_for
from .._core.contexts import context_values
from .._core.errors import structured_output_error
from .._core.operators import HESSIAN, HVP, JACOBIAN, SECOND_DERIVATIVE, Operator
from .second_order import Nested

if TYPE_CHECKING:
    from .._core.configs import Backend
    from .._core.contexts import Contexts
    from .._core.structure import Layout
    from .._core.types import Array, DType
    from .target import Target


class Info:
    """What preparation learnt about ``f`` at ``x``."""

    __slots__ = ("y_shape", "y_dtype", "value", "x_shape", "oneshot", "layout")
    y_shape: tuple[int, ...]  # of f(x)
    y_dtype: Any  # of f(x), in its family
    # one-shot calls only, else None: f(x) computed at preparation (the default ``output_info``), or
    # whatever the adapter's ``output_info`` recorded there for the first call of its runner (torch:
    # the recorded graph of a reverse-mode operator, so that a one-shot gradient runs f once)
    value: Any
    x_shape: tuple[int, ...]
    oneshot: bool
    layout: Layout | None  # structured x or f(x), given to adapters with ``structures_inside``

    def __init__(
        self, y_shape: tuple[Any, ...], y_dtype: DType, value: Any, x_shape: tuple[Any, ...], oneshot: bool = False
    ) -> None:
        self.y_shape, self.y_dtype, self.value, self.x_shape = y_shape, y_dtype, value, x_shape
        self.oneshot = oneshot  # prepared inside an unprepared call: used once, at the same point
        self.layout = None

    def take_value(self) -> Any:
        """What ``output_info`` computed at preparation (``value``), once (one-shot calls only), else
        None. A one-shot preparation's runner is called once, at the same point: its first call may
        use it in place of evaluating ``f`` again."""
        value, self.value = self.value, None
        return value


def _xp(x: Array) -> Any:
    return array_namespace(x)


def basis(like: Array, shape: tuple[Any, ...], dtype: DType) -> tuple[Any, ...]:
    """The standard basis of arrays of ``shape``, in the family and on the device of ``like``."""
    n = shape_size(shape)
    if type(like) is np.ndarray:  # numpy's own eye: 4.6 -> 2.4 us at n = 10 (a one-shot Jacobian's basis)
        eye = np.eye(n, dtype=cast("np.dtype[Any]", dtype)).reshape((n, *shape))  # a numpy x's dtype
        return tuple(eye) if shape else tuple(eye[i, ...] for i in range(n))
    xp = _xp(like)
    eye = xp.eye(n, dtype=dtype, device=device(like))
    if len(shape) != 1:
        eye = xp.reshape(eye, (n, *shape))
    if type(eye) is np.ndarray and shape:
        return tuple(eye)  # its rows, as views (10 us -> 1.7 us at n = 10, 72 -> 9 us at n = 100)
    return tuple(eye[i, ...] for i in range(n))  # views too, without a reshape each


def ones(like: Array, shape: tuple[Any, ...], dtype: DType) -> Any:
    xp = _xp(like)
    return xp.ones(shape, dtype=dtype, device=device(like))


def stack_jacobian(
    parts: tuple[Any, ...], y_shape: tuple[Any, ...], x_shape: tuple[Any, ...], forward: bool, like: Array
) -> Any:
    """A Jacobian of shape ``y_shape + x_shape`` from columns (forward) or rows (reverse)."""
    if not parts:
        xp = _xp(like)
        return xp.zeros(y_shape + x_shape, dtype=like.dtype, device=device(like))
    xp = _xp(parts[0])
    if forward:
        flat = xp.stack([xp.reshape(p, (-1,)) for p in parts], axis=1)
    else:
        flat = xp.stack([xp.reshape(p, (-1,)) for p in parts], axis=0)
    return xp.reshape(flat, y_shape + x_shape)


def contract_all(jac: Array, tangents: tuple[Any, ...], x: Array, forward: bool) -> tuple[Any, ...]:
    """``J @ t`` (forward, t shaped like x) or ``t @ J`` (reverse, t shaped like f(x)) for each t."""
    xp = _xp(jac)
    x_ndim = len(getattr(x, "shape", ()))
    y_ndim = jac.ndim - x_ndim
    out = []
    for t in tangents:
        t = to_family(t, family(jac) or NUMPY, like=jac)
        if forward:
            out.append(xp.tensordot(jac, t, axes=(list(range(y_ndim, jac.ndim)), list(range(x_ndim)))))
        else:
            out.append(xp.tensordot(t, jac, axes=(list(range(y_ndim)), list(range(y_ndim)))))
    return tuple(out)


class Runner(Protocol):
    """An operator bound to one preparation: ``(x, tangents, contexts) -> result``.

    ``tangents`` is a tuple (empty for the operators without one); the plain runner returns the
    operator's result (a tuple of results for a tangent operator), the value runner the value
    form's tuple (:func:`value_form`)."""

    def __call__(self, x: Array, tangents: tuple[Any, ...], contexts: tuple[Any, ...], /) -> Any: ...


class Prepared(Protocol):
    """What :meth:`Adapter.prepare` returns: the plain and the value runner of one operator."""

    @property
    def plain(self) -> Runner: ...

    @property
    def value(self) -> Runner: ...


# What an engine's native operator computes at one point, ``(x, tangents, contexts) -> (primal,
# result)``: ``primal`` is f(x) for the first order, ``(f(x), first derivative)`` for the second
# (the gradient for hvp and hessian, the derivative for second_derivative); :func:`value_form`
# packs it into the value form, the plain runner keeps ``result``.
Body = Callable[[Any, tuple[Any, ...], tuple[Any, ...]], tuple[Any, Any]]
# An engine's runners in one direction, ``build(forward) -> (plain, value)`` (:class:`DirectionFallback`)
Build = Callable[[bool], tuple[Runner, Runner]]


def value_form(operator: Operator, primal: Any, result: Any, own: Callable[[Any], Any]) -> tuple[Any, ...]:
    """The value form of ``operator`` from what a :data:`Body` returned, each part of ``primal``
    passed through ``own`` (the engine's detach or conversion): ``(y, result)`` for the first
    order, ``(gradient, hvps)`` for hvp, ``(y, first, result)`` for hessian and second_derivative."""
    if operator.order == 1:
        return own(primal), result
    y, first = primal
    if operator is HVP:  # its value form leaves f(x) out
        return own(first), result
    return own(y), own(first), result


class Unserved(Exception):  # noqa: N818 - a signal between a fast runner and the frontend, never the user's
    """Raised by a :class:`Runners` ``fast`` runner for a call it cannot serve as compiled (a check
    that ``plain`` makes before it calls the compiled function, made inside it instead, where the
    engine traces it again: JAX's x64 setting, part of ``jax.jit``'s cache key); the frontend then
    runs ``plain``, for this call and the prep's later ones."""


class Runners:
    """What :meth:`Adapter.prepare` returns (a :class:`Prepared`): ``plain`` and ``value``, and the
    preparation's ``data``.

    ``fast`` (optional): ``plain`` without the Python layer around a compiled function, the compiled
    function itself, where ``plain`` is that layer and a check: the prepared fast path (a call with
    ``prep=``, or one a kept prep serves) calls ``fast`` in its place, one Python frame less (a third
    of a microsecond of a 5 us JAX gradient at n = 10), and where it raises :class:`Unserved`, calls
    ``plain`` from then on. Its signature and results are ``plain``'s, but for an operator with a
    tangent: there it serves a call with one tangent, ``fast(x, t)``, and returns that call's one result
    (the compiled function of one bare tangent itself: no tuple in, none out). Every other caller runs
    ``plain``."""

    __slots__ = ("plain", "value", "data", "fast")
    plain: Runner
    value: Runner
    data: Any
    fast: Runner | Callable[[Any, Any], Any] | None  # (x, tangents, contexts), or (x, t) for one tangent

    def __init__(
        self, plain: Runner, value: Runner, data: Any = None, fast: Runner | Callable[[Any, Any], Any] | None = None
    ) -> None:
        self.plain, self.value, self.data, self.fast = plain, value, data, fast


class _Derived:
    """Preparation data of a fallback: the seeds it passes and the data of the operator it calls."""

    __slots__ = ("seeds", "inner", "forward", "info")

    def __init__(self, seeds: tuple[Any, ...], inner: Any, forward: bool, info: Info) -> None:
        self.seeds, self.inner, self.forward, self.info = seeds, inner, forward, info


class Adapter:
    """Base of every adapter; see the module docstring for the contract."""

    # the engine as messages name it: declared by the adapters whose traced values can leak into
    # the user's objects (those with a ``traced`` check, read under closure="const"). An adapter may
    # also declare ``rebinding_operand(value) -> bool`` (default: its ``traced``): the engine's values
    # whose write into a captured numpy array under closure="const" is the call's error (diagnose's
    # ConstGuardView): an in-place operator numpy hands to the value's own operator (the name rebound,
    # the array left as it was), item assignment, out= or np.copyto, which write its values without
    # their derivative. TensorFlow's and MLX's: any tensor or array (neither tells a value computed
    # from x from a constant)
    engine_name: str | None

    # How the adapter serves as ``outer`` in ``SecondOrder(outer, inner)`` (_frontend.pipeline): it only
    # evaluates what ``inner`` computes (finite differences: any inner engine), and the results of
    # its runners stay differentiable by an outer call of the same engine (JAX traces them). Neither:
    # a SecondOrder of the engine over itself runs the engine's own second order.
    evaluates_only: bool = False
    traceable_results: bool = False
    # Structured x or f(x) (diffinterface._core.structure): by default the frontend hands the adapter the
    # flat problem (one vector in, one out) and cuts the results itself. An engine that can run the
    # ravel and the cut inside its own compiled program says ``structures_inside``: its ``prepare``
    # then gets ``x`` as the list of leaves, tangents as lists of leaves and ``info.layout``, and its
    # runners take and return lists of leaves (``Layout.cut_all``).
    structures_inside: bool = False
    takes_structures: bool = True  # False: a structured x or f(x) is an error (AutoSparse's matrices)
    # The array family ``f`` receives from this engine (None: the family of the user's ``x``): where
    # :meth:`aux` evaluates ``f`` for has_aux=True
    array_family: str | None = None
    # ``f`` builds a graph (PyTensor's symbolic tensors), which has no values outside the engine's compiled
    # function: where diffinterface needs ``f(x)``'s value outside an operator (DifferentiateWith's primal),
    # it asks :meth:`evaluate` with a numpy ``x``, instead of running ``f`` on the engine's arrays itself.
    builds_graph: bool = False
    # ``f`` is written in the engine's own operations (``tf.*``, ``mx.*``, ``pytensor.tensor``), which the
    # engine-free sparsity tracer cannot run: where it cannot, ``AutoSparse(dense=<this engine>)``'s default
    # detector detects the pattern locally (``LocalSparsityDetector``: the nonzeros of this engine's
    # dense derivatives at x and around it) with a ``LocalSparsityWarning``, instead of raising. False
    # (JAX: ``JaxprSparsityDetector`` reads its jaxpr): the tracer's ``TracerError`` names the detectors.
    local_sparsity_fallback: bool = False
    # The complex dtypes of x this engine differentiates; a complex x of another dtype is the call's
    # TypeError, naming the engine and what to use instead (MLX has no complex128; PyTensor's derivatives
    # of complex operations do not follow docs/complex.md; a complex step needs a real x). The scenario
    # harness (diffinterface.testing) reads it: there, such a scenario's expected outcome is that error,
    # and ``python -m diffinterface check`` counts it as "refused", not as passed.
    complex_dtypes: tuple[str, ...] = ("complex64", "complex128")
    # :meth:`output_info` gets a private copy of the user's ``x`` (``f`` may write into its input). An
    # adapter that keeps the user's ``x`` safe itself says ``copies_x``: it gets the user's ``x``
    # uncopied and copies it where ``f`` could write into it (torch records a reverse-mode ``f`` on a
    # leaf that requires grad, which refuses writes, and copies only for its other evaluations: a
    # copy of x at 1e5 elements is 90 us of a 500 us one-shot gradient).
    copies_x: bool = False

    def accuracy(self, dtype: Any) -> float | None:
        """The relative accuracy of this engine's results for an ``x`` of ``dtype``, where it is coarser
        than ``dtype``'s epsilon (None: it is not). ``SecondOrder(outer, inner)`` with an ``outer`` that
        only evaluates (finite differences) asks ``inner`` and, where there is an answer, uses
        ``outer.for_accuracy(eps)``: steps made for that accuracy (MLX's float64 ``sin``, ``cos``,
        ``exp`` are float32-accurate: finite differences over them with float64 steps lost 5 digits).

        By default the accuracy of the engine's own arithmetic: the ``accuracy`` hook of the
        :class:`~diffinterface.extend.ArrayFamily` it computes in (:attr:`array_family`; None: the
        family of the user's ``x``, which an outer finite difference reads itself). An engine whose
        results are coarser than its arrays' arithmetic for another reason overrides it."""
        return family_accuracy(self.array_family, dtype)

    def __init__(self, backend: Backend) -> None:
        self.backend: Any = backend  # the config

    # -- helpers ---------------------------------------------------------------------------------

    def _native(self, name: str) -> bool:
        return getattr(type(self), name) is not getattr(Adapter, name)

    @staticmethod
    def refused_write(error: BaseException) -> bool:
        """Whether ``error`` is the engine refusing what ``f`` did with a guarded alias (a write into
        it, an ``out=`` argument): the one hook by which an adapter recognises its engine's error.
        :meth:`Target.guarded_with` calls it on ``error`` and each error it was raised from or during;
        where it answers True, ``f`` runs again over copies, and any other error is ``f``'s own,
        raised after one run. An adapter whose engine guards aliases its own way (torch's tensors that
        require grad) overrides it, by its engine's exception types and attributes where it has them.
        The default recognises numpy refusing a write into a read-only view (``read_only_alias``)."""
        return read_only_refused(error)

    def evaluate(self, target: Target, x: Array, contexts: tuple[Any, ...]) -> Any:
        """``f(x, *contexts)`` once, over fresh duplicates of the state and caches, on a copy of ``x``
        that ``f`` may write into (contract section 4: an adapter's runner may pass the user's own ``x``;
        before 2026-12-08 an outside backend's ``f(x)`` through here wrote it)."""
        return target.instance()(private_copy(x), *context_values(contexts, _copy_value))

    def aux(self, target: Target, x: Any, contexts: tuple[Any, ...]) -> Any:
        """The auxiliary output of ``f(x) -> (y, aux)`` (``has_aux=True``): ``f`` run once at ``x`` in the
        engine's own arrays (:attr:`array_family`, leaf by leaf for a structured ``x``), over fresh
        duplicates of its state and caches, outside any derivative; aux comes back as ``f`` made it.
        An engine whose ``f`` computes symbolically (PyTensor) overrides it to evaluate the aux graph."""
        fam = self.array_family
        if fam is not None and family(x) != fam:
            if family(x) is not None:
                x = to_family(x, fam)
            else:  # a structure of arrays
                from .._core.structure import Structure

                xs = Structure.of(x, "x")
                x = xs.build([to_family(v, fam) for v in xs.leaves(x)])
        return target.aux_of(x, *context_values(contexts, _copy_value))

    def output_info(self, target: Target, x: Array, contexts: tuple[Any, ...], oneshot: bool) -> Info:
        """Shape and dtype of ``f(x)``; the default evaluates ``f`` once (kept for a one-shot call)."""
        y = self.evaluate(target, x, contexts)
        structured = structured_output_error(y, target.call)
        if structured is not None:
            raise structured
        if not hasattr(y, "shape"):
            y = np.asarray(y)
        return Info(tuple(y.shape), y.dtype, y if oneshot else None, tuple(getattr(x, "shape", ())), oneshot)

    def oneshot_result(
        self,
        operator: Operator,
        target: Target,
        x: Array,
        tangents: tuple[Any, ...],
        contexts: tuple[Any, ...],
        info: Info,
    ) -> Any:
        """A one-shot call's plain result computed whole from what :meth:`output_info` left in
        ``info.value`` (``info.take_value()``), what the plain runner of :meth:`prepare` would return
        for this call; or None (the default): the frontend then prepares the runners and calls the
        plain one. Asked only for one-shot calls of an operator's plain form (no value form, ``y``,
        ``out=`` or has_aux) on a flat ``x`` and ``f(x)``, with the arguments :meth:`prepare` would
        get: a call that builds no runners (a torch gradient at n = 10, preparation and call: 62 us,
        71 through the runners, measured). It is asked instead of :meth:`prepare`, whose checks are
        its to make too, or to leave to :meth:`prepare` by returning None (torch: a complex f(x) in
        reverse mode). An adapter that cannot finish the call there (an
        operation without a rule in this direction) returns None, with ``info.value`` taken or left
        as its runner's first call expects it: the runners' direction fallback then decides."""
        return None

    def prepare(
        self,
        operator: Operator,
        target: Target,
        x: Array,
        tangents: tuple[Any, ...],
        contexts: tuple[Any, ...],
        info: Info,
    ) -> Prepared:
        """The contract (see the module docstring): the runners of ``operator`` bound to this
        preparation. Here: the adapter's ``prepare_<operator>`` and its plain and value methods
        (native or derived); an engine that builds its runners per operator overrides this."""
        method = getattr(self, "prepare_" + operator.name)
        tangent = operator.tangent is not None
        data = method(target, x, tangents, contexts, info) if tangent else method(target, x, contexts, info)
        plain, value = getattr(self, operator.name), getattr(self, operator.value_method)
        if tangent:
            return Runners(
                lambda x, ts, cs: plain(data, target, x, ts, cs), lambda x, ts, cs: value(data, target, x, ts, cs), data
            )
        return Runners(lambda x, ts, cs: plain(data, target, x, cs), lambda x, ts, cs: value(data, target, x, cs), data)

    def forward(self, operator: Operator, info: Info) -> bool:
        """The direction of a first-order operator (contract section 2): the backend's ``mode``, else
        its own (``Operator.direction``: forward for pushforward and derivative), and for a jacobian
        forward when ``x.size <= f(x).size``."""
        mode = getattr(self.backend, "mode", None)
        if operator is JACOBIAN:
            if mode is None and complex_dtype(info.y_dtype):
                return True  # a complex f(x) of a real x: pullbacks would carry the real part only
            n, m = shape_size(info.x_shape), shape_size(info.y_shape)
            forward = self.jacobian_forward(n, m)
            if forward and n == m and mode is None and self.recorded_in_reverse(info):
                # a tie, where a one-shot output_info recorded f as the pullbacks take it: they cost what
                # the pushforwards would, which would evaluate f again (torch, 10 x 10, f of new code:
                # 617 -> 457 us a call, measured)
                return False
            return forward
        return mode == "forward" if mode is not None else operator.direction == "forward"

    def recorded_in_reverse(self, info: Info) -> bool:
        """Whether a one-shot :meth:`output_info` left in ``info.value`` a recording of ``f`` that the
        reverse-mode runners take in place of evaluating ``f`` again (torch's graph): where ``x`` and
        ``f(x)`` are of one size, a Jacobian of ``mode=None`` then goes in reverse (:meth:`forward`).
        False here: an adapter that records says so."""
        return False

    def direction_fallback(
        self, operator: Operator, forward: bool, target: Target, build: Build
    ) -> DirectionFallback | None:
        """The runners of a first-order operator behind a :class:`DirectionFallback` (``build(forward)
        -> (plain, value)``, first in the direction ``forward``); None for the second order, whose
        directions are fixed."""
        if operator.order != 1:
            return None
        mode = getattr(self.backend, "mode", None)
        return DirectionFallback(build, target.call, self.backend, switch=mode is None, forward=forward)

    def jacobian_forward(self, x_size: int, y_size: int) -> bool:
        """Whether a Jacobian is built from pushforwards (True) or pullbacks (False)."""
        has_pf, has_pb = self._native("value_and_pushforward"), self._native("value_and_pullback")
        if has_pf != has_pb:
            return has_pf
        mode = getattr(self.backend, "mode", None)
        if mode is not None:
            return mode == "forward"
        return x_size <= y_size

    def _missing_core(self) -> TypeError:
        return TypeError(
            f"{type(self).__module__}.{type(self).__name__} implements neither value_and_pushforward "
            f"nor value_and_pullback; an adapter must implement at least one"
        )

    # -- pushforward -----------------------------------------------------------------------------

    def prepare_pushforward(
        self, target: Target, x: Array, tangents: tuple[Any, ...], contexts: Contexts, info: Info
    ) -> Any:
        if self._native("value_and_pushforward"):
            return info
        return self.prepare_jacobian(target, x, contexts, info)

    def value_and_pushforward(
        self, data: Any, target: Target, x: Array, tangents: tuple[Any, ...], contexts: Contexts
    ) -> Any:
        if not self._native("value_and_pullback"):
            raise self._missing_core()
        y, jac = self.value_and_jacobian(data, target, x, contexts)
        return y, contract_all(jac, tangents, x, True)

    def pushforward(self, data: Any, target: Target, x: Array, tangents: tuple[Any, ...], contexts: Contexts) -> Any:
        if self._native("value_and_pushforward"):
            return self.value_and_pushforward(data, target, x, tangents, contexts)[1]
        return contract_all(self.jacobian(data, target, x, contexts), tangents, x, True)

    # -- pullback --------------------------------------------------------------------------------

    def prepare_pullback(
        self, target: Target, x: Array, tangents: tuple[Any, ...], contexts: Contexts, info: Info
    ) -> Any:
        if self._native("value_and_pullback"):
            return info
        return self.prepare_jacobian(target, x, contexts, info)

    def value_and_pullback(
        self, data: Any, target: Target, x: Array, tangents: tuple[Any, ...], contexts: Contexts
    ) -> Any:
        if not self._native("value_and_pushforward"):
            raise self._missing_core()
        y, jac = self.value_and_jacobian(data, target, x, contexts)
        return y, contract_all(jac, tangents, x, False)

    def pullback(self, data: Any, target: Target, x: Array, tangents: tuple[Any, ...], contexts: Contexts) -> Any:
        if self._native("value_and_pullback"):
            return self.value_and_pullback(data, target, x, tangents, contexts)[1]
        return contract_all(self.jacobian(data, target, x, contexts), tangents, x, False)

    # -- derivative: a pushforward along 1 -------------------------------------------------------

    def prepare_derivative(self, target: Target, x: Array, contexts: Contexts, info: Info) -> Any:
        seeds = (ones(x, (), x.dtype),)
        return _Derived(seeds, self.prepare_pushforward(target, x, seeds, contexts, info), True, info)

    def value_and_derivative(self, data: Any, target: Target, x: Array, contexts: Contexts) -> Any:
        y, (der,) = self.value_and_pushforward(data.inner, target, x, data.seeds, contexts)
        return y, der

    def derivative(self, data: Any, target: Target, x: Array, contexts: Contexts) -> Any:
        return self.value_and_derivative(data, target, x, contexts)[1]

    # -- gradient: a pullback of 1 ---------------------------------------------------------------

    def prepare_gradient(self, target: Target, x: Array, contexts: Contexts, info: Info) -> Any:
        seeds = (ones(x, (), x.dtype),)
        return _Derived(seeds, self.prepare_pullback(target, x, seeds, contexts, info), False, info)

    def value_and_gradient(self, data: Any, target: Target, x: Array, contexts: Contexts) -> Any:
        y, (grad,) = self.value_and_pullback(data.inner, target, x, data.seeds, contexts)
        return y, grad

    def gradient(self, data: Any, target: Target, x: Array, contexts: Contexts) -> Any:
        return self.value_and_gradient(data, target, x, contexts)[1]

    # -- jacobian: batched pushforwards of the basis of x, or pullbacks of the basis of y --------

    def prepare_jacobian(self, target: Target, x: Array, contexts: Contexts, info: Info) -> Any:
        forward = self.jacobian_forward(size(x), shape_size(info.y_shape))
        if forward:
            seeds = basis(x, info.x_shape, x.dtype)
            inner = self.prepare_pushforward(target, x, seeds, contexts, info)
        else:
            seeds = basis(x, info.y_shape, x.dtype)
            inner = self.prepare_pullback(target, x, seeds, contexts, info)
        return _Derived(seeds, inner, forward, info)

    def value_and_jacobian(self, data: Any, target: Target, x: Array, contexts: Contexts) -> Any:
        if data.forward:
            y, parts = self.value_and_pushforward(data.inner, target, x, data.seeds, contexts)
        else:
            y, parts = self.value_and_pullback(data.inner, target, x, data.seeds, contexts)
        return y, stack_jacobian(parts, data.info.y_shape, data.info.x_shape, data.forward, x)

    def jacobian(self, data: Any, target: Target, x: Array, contexts: Contexts) -> Any:
        return self.value_and_jacobian(data, target, x, contexts)[1]

    # -- second order: one first-order operator over another (see _adapters.second_order) ----------------

    def outer_inner(self) -> tuple[Any, Any]:
        """The backends that nest in the second-order fallbacks: the engine over itself."""
        return self.backend, self.backend

    def prepare_second_derivative(self, target: Target, x: Array, contexts: Contexts, info: Info) -> Any:
        return Nested(SECOND_DERIVATIVE, *self.outer_inner(), target, x, (), contexts)

    def value_derivative_and_second_derivative(self, data: Any, target: Target, x: Array, contexts: Contexts) -> Any:
        return data.run_value_derivative_and_second_derivative(x, contexts)

    def second_derivative(self, data: Any, target: Target, x: Array, contexts: Contexts) -> Any:
        return data.run_second(x, (), contexts)

    def prepare_hvp(self, target: Target, x: Array, tangents: tuple[Any, ...], contexts: Contexts, info: Info) -> Any:
        return Nested(HVP, *self.outer_inner(), target, x, tangents, contexts)

    def gradient_and_hvp(
        self, data: Any, target: Target, x: Array, tangents: tuple[Any, ...], contexts: Contexts
    ) -> Any:
        return data.run_gradient_and_hvp(x, tangents, contexts)

    def hvp(self, data: Any, target: Target, x: Array, tangents: tuple[Any, ...], contexts: Contexts) -> Any:
        return data.run_second(x, tangents, contexts)

    def prepare_hessian(self, target: Target, x: Array, contexts: Contexts, info: Info) -> Any:
        return Nested(HESSIAN, *self.outer_inner(), target, x, (), contexts)

    def value_gradient_and_hessian(self, data: Any, target: Target, x: Array, contexts: Contexts) -> Any:
        return data.run_value_gradient_and_hessian(x, contexts)

    def hessian(self, data: Any, target: Target, x: Array, contexts: Contexts) -> Any:
        return data.run_second(x, (), contexts)


class SecondOrderAdapter(Adapter):
    """The adapter of ``SecondOrder(outer, inner)``: ``outer`` differentiates what ``inner`` computes."""

    def outer_inner(self) -> tuple[Any, Any]:
        return self.backend.outer, self.backend.inner

    @property
    def complex_dtypes(self) -> tuple[str, ...]:  # type: ignore[override]  # those both engines differentiate
        outer, inner = (adapter_for(b, repr(self.backend)) for b in self.outer_inner())
        return tuple(d for d in inner.complex_dtypes if d in outer.complex_dtypes)

    def output_info(self, target: Target, x: Array, contexts: Contexts, oneshot: bool) -> Info:
        return adapter_for(self.backend.inner, repr(self.backend)).output_info(target, x, contexts, oneshot)

    def aux(self, target: Target, x: Any, contexts: tuple[Any, ...]) -> Any:
        return adapter_for(self.backend.inner, repr(self.backend)).aux(target, x, contexts)


def _copy_value(value: Any) -> Any:
    from .._closures.plan import copy_leaf, duplicate

    return duplicate(value, copy_leaf)


class DirectionFallback:
    """The runners (``plain``, ``value``) of a first-order operator, for an engine that lacks one
    direction's rules for some of its operations (torch's forward AD and autograd's JVPs or VJPs raise
    ``NotImplementedError`` there, as autograd's ``flip`` and ``take`` have no VJP, where the other
    direction works): at the first such error under ``mode=None`` (``switch``) the runners of the other
    direction are built with ``build(not forward)`` and used from then on. With an explicit ``mode``
    the error is raised, prefixed with the call and the fix."""

    __slots__ = ("_current", "_build", "_call", "_backend", "_forward")

    # one lock for every fallback's switch (rare: once per preparation at most), not one made per
    # preparation (a one-shot call makes one and drops it); reentrant: a build may prepare another
    _lock = threading.RLock()

    def __init__(self, build: Build, call: str, backend: Backend, switch: bool, forward: bool = True) -> None:
        self._current = build(forward)  # (plain, value), the chosen direction first
        self._build = build if switch else None
        self._call, self._backend, self._forward = call, backend, forward

    # The runners are its bound methods: they hold the fallback, it does not hold them (no reference
    # cycle: a one-shot call's preparation is freed as soon as the call returns, not at the garbage
    # collector's next pass), and a preparation makes no closure for them
    def plain(self, x: Array, tangents: tuple[Any, ...], contexts: tuple[Any, ...]) -> Any:
        current = self._current
        try:
            return current[0](x, tangents, contexts)
        except NotImplementedError as error:
            return self._switched(current, 0, error, x, tangents, contexts)

    def value(self, x: Array, tangents: tuple[Any, ...], contexts: tuple[Any, ...]) -> Any:
        current = self._current
        try:
            return current[1](x, tangents, contexts)
        except NotImplementedError as error:
            return self._switched(current, 1, error, x, tangents, contexts)

    def _switched(
        self, current: Any, which: int, error: NotImplementedError, x: Array, tangents: Any, contexts: Any
    ) -> Any:
        """The runner ``which`` (0 plain, 1 value) after ``current``'s direction raised ``error``."""
        if current is not self._current:  # another thread switched meanwhile
            return self._current[which](x, tangents, contexts)
        if self._build is None:
            this, other = ("forward", "reverse") if self._forward else ("reverse", "forward")
            raise NotImplementedError(
                f"{self._call}: {this} mode is not available for an operation of f ({error}); "
                f"{other} mode may be: use mode='{other}' or mode=None in {type(self._backend).__name__}"
            ) from error
        with self._lock:
            if self._current is current:
                self._current = self._build(not self._forward)
        try:
            return self._current[which](x, tangents, contexts)
        except NotImplementedError as again:
            engine = type(self._backend).__name__
            raise NotImplementedError(
                f"{self._call}: neither mode is available for the operations of f on {engine} (forward "
                f"and reverse: {error}; {again}); differentiate f with another backend, or give the "
                f"operation a rule (diffinterface.rules)"
            ) from again
