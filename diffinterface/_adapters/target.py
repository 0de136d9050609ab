"""The function as adapters call it: ``g(x, *context values) -> y``.

It hides two things every adapter would otherwise repeat: the closure setting (a fresh duplicate of
the captured state for each call, contract section 7) and two-argument functions ``f(y, x, *contexts)``
that write their output into a buffer ``y`` (each call writes into a duplicate of the buffer and
returns it; the user's ``y`` is only a template and is never modified).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._closures.diagnose import raised_by
from .._closures.plan import StatePlan, copy_leaf, duplicate
from .._closures.slots import Slots, slots_of
from .._core.errors import OutputShapeChanged
from .._core.operators import PUSHFORWARD

if TYPE_CHECKING:
    from .._core.contexts import Contexts
    from .._core.operators import Operator
    from .._core.types import Array


class Target:
    """``call`` is the call as the user wrote it (``gradient(AutoJAX(), f, x)``), for error messages."""

    __slots__ = (
        "f",
        "user_f",
        "y",
        "plan",
        "closure",
        "call",
        "constant_aliases",
        "layout",
        "aux",
        "operator",
        "tangents",
        "y_shape",
        "copy_state",
    )

    def __init__(
        self,
        f: Callable[..., Any],
        y: Any,
        closure: str,
        call: str = "f",
        layout: Any = None,
        aux: bool = False,
        operator: Operator | None = None,
        tangents: tuple[Any, ...] | None = None,
    ) -> None:
        # ``f`` is what adapters call; with a ``layout`` (structured x or f(x), _core.structure.Layout) the
        # flat problem's function: a vector in, a vector out, around the user's ``f`` (``user_f``). With
        # ``aux`` (has_aux=True) the user's f returns ``(y, aux)`` and adapters see only ``y``.
        self.user_f, self.y, self.closure, self.call, self.layout = f, y, closure, call, layout
        self.aux = aux
        # the operator the user called, as the adapter runs it (None where no user call made the
        # target: a second-order's inner derivative, a custom rule): a one-shot ``output_info`` may
        # evaluate ``f`` the way that operator's runner will, and leave the evaluation in
        # ``Info.value`` for the runner's first call (``Info.take_value``)
        self.operator = operator
        # the tangents of a one-shot call of a tangent-in-x operator (pushforward, hvp), as its runner
        # will get them (a tuple, the user's family); None for a prepared call and other operators.
        # With them a one-shot ``output_info`` may compute the whole result (a forward-mode
        # pushforward: f(x) and its tangent from one evaluation) and leave it in ``Info.value``
        self.tangents = tangents
        # f(x)'s shape at preparation (the frontend sets it after output_info): a call's evaluations
        # are checked against it (checked), None until then and for targets no preparation made
        self.y_shape: tuple[int, ...] | None = None
        self.plan = StatePlan(f) if closure == "duplicated" else None
        self.f = self.over(f)  # adapters call it only without y (``plain``)
        # Constant contexts reach f as guarded aliases (like captured arrays) until f writes into one
        self.constant_aliases = True
        # whether f must get copies of the captured numpy arrays, never views of the user's, however
        # guarded (without_aliases): an adapter whose stand-ins read the user's memory copies it first
        self.copy_state = False

    def without_aliases(self) -> None:
        """Copies of the captured arrays and ``Constant`` contexts for ``f`` from the start, never guarded
        aliases of the user's: where ``x`` or a context is of a family that writes through numpy's
        read-only flag (``ArrayFamily.ignores_numpy_read_only``: torch), a read-only view guards
        nothing against ``torch.asarray(view).add_(1)`` in ``f``."""
        if self.plan is not None:
            self.plan.aliases = False
        self.constant_aliases = False
        self.copy_state = True

    @property
    def stateless(self) -> bool:
        return self.y is None and not self.has_state

    @property
    def plain(self) -> bool:
        """Whether ``f`` is called as it is: no output buffer, and no captured state or only state
        it cannot change (numbers it does not rebind: ``StatePlan.read_only``)."""
        return self.y is None and (self.plan is None or self.plan.empty or self.plan.read_only)

    @property
    def has_state(self) -> bool:
        return self.plan is not None and not self.plan.empty

    @property
    def learned(self) -> dict[Any, Any] | None:
        """What adapters learned running functions of ``f``'s code over the very objects ``f``'s
        slots hold now, shared by every such function (the closure walk's summary of a stateless
        user function, which the walk checks by identity instead of walking again: a lambda written
        anew at each call of a loop is one of them). An adapter reads and writes its own keys (a
        tuple that starts with its engine's name, and what else the fact depends on: x's shape,
        dtype, ...); a fact holds for a new function only as it would for ``f`` called again. None
        where nothing is shared: an ``f`` with captured state, a callable object, ``closure="const"``
        (no walk), a structured x or f(x), an output buffer ``y``, and an ``f`` whose slots reach a
        user's module, class or object (``Summary.closed``: their attributes may change between
        calls while the objects stay the same). Bounded: past 64 keys it starts again empty."""
        plan = self.plan
        if plan is None or self.layout is not None or self.y is not None:
            return None
        summary = plan.summary
        return summary.learned if summary is not None and summary.closed else None

    def slots(self) -> Slots | None:
        """What the user's ``f`` holds besides state, as it is now (``_closures.slots``): its ``holds()``
        says whether ``f``'s closure cells, defaults and the module globals its code reads (and those of
        the user functions among them) still hold these objects (state where they held state, read at
        every call anyway). For an adapter's own cache that outlives a preparation and is found by the
        user's function (TensorFlow's traced graphs): kept beside what it caches, whose reuse it
        allows only while it holds (a helper or a flag rebound since: made again). None for a
        callable that is not a Python function (its attributes are not checked)."""
        return slots_of(self.user_f)

    @property
    def one_tangent(self) -> Any:
        """The tangent of a one-shot pushforward along one tangent of a flat x (``tangents``), else
        None: the call a one-shot ``output_info`` may compute whole, from one evaluation of ``f``."""
        tangents = self.tangents
        if self.operator is not PUSHFORWARD or tangents is None or len(tangents) != 1 or self.layout is not None:
            return None
        return tangents[0]

    def guarded(self, run: Callable[[bool], Any], refused_write: Callable[[BaseException], bool]) -> Any:
        """``run(aliased)``: first with ``aliased=True`` (``run`` then builds ``f`` with
        ``instance(leaf, guard=...)``) while the plan still lets ``f`` read its arrays through guarded
        aliases; where that raises the guard's own error (``refused_write(error)``, the adapter's hook
        ``Adapter.refused_write``: a write into an alias that the engine refused), ``run(False)`` over
        copies, and if that succeeds the plan learns that ``f`` writes into its arrays (copies from
        then on). Any other error is ``f``'s own and is raised as it is, after one run of ``f``."""
        return self.guarded_with(run, False, refused_write)

    def checked(self, y: Any) -> Any:
        """``y`` (an evaluation of ``f`` by a prepared runner), after checking that it has the shape
        ``f(x)`` had at preparation (:attr:`y_shape`): where what ``f`` captures changed shape since,
        the runner's bases and reshapes were made for the old shape, and an engine that broadcasts
        would combine them into a wrong derivative without an error (autograd's reverse Jacobian
        did). Raises :class:`~diffinterface.PreparationMismatchError` (``OutputShapeChanged``). An
        eager engine's adapter calls it on each evaluation; a compiling engine's traces again for
        new shapes of the state it passes as arguments, and needs none."""
        expected = self.y_shape
        if expected is not None:
            shape = getattr(y, "shape", None)
            if shape is None:
                shape = np.shape(y)
            if shape != expected:
                raise OutputShapeChanged(
                    f"{self.call}: f(x) has shape {tuple(shape)} here; the prep was made where it had shape "
                    f"{expected}, so what f captures changed shape since preparation (a rebound array, a "
                    f"number that sizes an array). Prepare again with the new state; a call without prep= "
                    f"prepares again by itself"
                )
        return y

    def over(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` (the user's ``f`` rebuilt over other state: ``StatePlan.aliased``) as adapters call
        ``f``: its ``y`` alone with has_aux, through the layout of a structured x or f(x), when there is one."""
        if self.aux:
            fn = _output_of(fn, self.call)
        return fn if self.layout is None else self.layout.wrap(fn)

    def aux_of(self, x: Any, *contexts: Any) -> Any:
        """The auxiliary output of ``f(x, *context values) -> (y, aux)`` (has_aux), over fresh
        duplicates of the captured state: ``x`` in the arrays the engine gives ``f``."""
        plan = self.plan
        fn = self.user_f if plan is None or plan.empty or plan.read_only else plan.duplicated(copy_leaf)
        return _pair(fn(x, *contexts), self.call)[1]

    def guarded_with(
        self,
        run: Callable[[bool], Any],
        constants: bool,
        refused_write: Callable[[BaseException], bool],
    ) -> Any:
        """:meth:`guarded`, where ``run(aliased)`` also passes the ``Constant`` contexts as guarded
        aliases (``constants``): the caller's constants are never modified (a ``batch_norm`` in
        training mode updates the running statistics it is given). After a write refused over
        aliases, captured state and constants are copies from then on."""
        plan = self.plan
        state = plan is not None and not plan.read_only and plan.aliases
        if not (state or (constants and self.constant_aliases)):
            return run(False)
        try:
            return run(True)
        except Exception as error:
            if not raised_by(error, refused_write):
                raise
        out = run(False)
        if plan is not None:
            plan.aliases = False
        self.constant_aliases = False
        return out

    def shared(self, leaf: Callable[[Any], Any], guard: Callable[[Any], Any], key: Any = None) -> Any:
        """:meth:`instance` with ``guard``, where one instance may serve the rest of a call's
        evaluations of ``f`` (a finite-difference Jacobian's points) instead of one each: ``f`` reads
        no state it could write, or reads it through guarded aliases of every array, kept by the plan
        (``StatePlan.kept``). None where each evaluation needs its own duplicates (copies ``f`` may
        write into). Call it after a first evaluation through :meth:`guarded_with` (which learns whether
        ``f`` writes), and run the shared instance's evaluations under the same guard: a write that only
        some points make is refused there, and that evaluation goes back to :meth:`guarded_with`."""
        plan = self.plan
        if plan is None or plan.empty or plan.read_only or plan.kept(key):
            return self.instance(leaf, guard=guard, key=key)
        return None

    def instance(
        self,
        leaf: Callable[[Any], Any] = copy_leaf,
        values: list[Any] | None = None,
        guard: Callable[[Any], Any] | None = None,
        key: Any = None,
    ) -> Callable[..., Any]:
        """A one-output callable over fresh duplicates made with ``leaf`` (of the state and of ``y``).

        ``values`` replaces the user's current state (``plan.read()``): a compiling engine passes the
        state as arguments of the compiled function, so that it is read at every call, not baked in.
        ``guard`` (array -> guarded alias or None, see :meth:`guarded` and ``StatePlan.aliased``)
        makes the state's arrays aliases instead (``leaf`` copies where there is none); ``y`` is
        still duplicated with ``leaf``.
        """
        plan = self.plan
        if plan is None or plan.empty or (values is None and plan.read_only):
            fn = self.user_f
        elif guard is not None:
            fn = plan.aliased(guard, leaf, key)
        elif values is None:
            fn = plan.duplicated(leaf)
        else:
            fn = plan.rebuild([duplicate(v, leaf) for v in values])
        y = self.y
        if y is None:
            return self.over(fn)

        def out_of_place(x: Array, *contexts: Contexts) -> Any:
            buffer = duplicate(y, leaf)
            fn(buffer, x, *contexts)
            return buffer

        return self.over(out_of_place)


def _pair(out: Any, call: str) -> tuple[Any, Any]:
    if type(out) is not tuple or len(out) != 2:
        got = f"a tuple of {len(out)}" if type(out) is tuple else type(out).__name__
        raise TypeError(
            f"{call}: has_aux=True: f must return a pair (y, aux), as jax.grad(f, has_aux=True) takes it; got {got}"
        )
    return out


def _output_of(fn: Callable[..., Any], call: str) -> Callable[..., Any]:
    """``fn`` returning ``(y, aux)`` as a function of ``y`` alone: what engines differentiate with has_aux."""

    def y_of(*args: Any) -> Any:
        return _pair(fn(*args), call)[0]

    return y_of
