"""A :class:`diffinterface.rules.Rule` inside a PyTensor graph: an ``Op`` whose derivatives are the rule's.

- **Opaque rules** (NumPy/SciPy bodies, ``DifferentiateWith``): three small Ops running the
  bodies on NumPy in ``perform``: the primal, whose ``pullback`` is the reverse Op (the augmented
  primal run again for its tape, which as Python data cannot be a graph variable) and ``pushforward``
  the forward Op; each of those two is linear in its (co)tangents and the other's transpose, so
  PyTensor's ``pushforward``/``Rop`` (a pullback of a pullback by default) run the forward rule and
  ``grad``/``Lop``/``jacobian`` the reverse pass. A rule with one direction only still builds the
  other Op, whose ``perform`` raises the rule's "needs a ... rule" error where its value is used.
- **Array-API rules** (not opaque): an ``OpFromGraph`` of the primal with ``pullback`` and
  ``pushforward`` overrides built from the rule's bodies, traced on PyTensor variables; a missing
  direction is PyTensor's transpose of the other (the bodies are linear in the (co)tangents), as JAX
  transposes a forward rule. PyTensor differentiates those override graphs again, so second
  derivatives through an array-API rule work (hessian, hvp, ``pytensor.gradient.hessian``).

Second derivatives through an opaque rule: the rule's Ops give PyTensor a ``NullType`` derivative in
their primal arguments whose explanation is :meth:`Rule.second_order`'s message, so ``grad`` raises
PyTensor's ``NullTypeGradError`` there (and the adapter the rule's ``SecondOrderError``); a first-order
pushforward through pullbacks never reaches it.

Which arguments are active: inside the adapter's graph builds (``WRT``), those that depend on
``x``; elsewhere (the user's own PyTensor graph), every floating argument that is not a constant.
An inactive argument is disconnected (``connection_pattern``), and the rules receive it as ``Const``.

The output's type: static shapes, from ``out_shape`` or one run of the primal on random inputs of the
arguments' shapes (constants as they are), per signature; an argument of unknown shape (``pt.vector()``)
needs ``out_shape``. Batches (``jacobian(vectorize=True)``) loop over the Ops (PyTensor's ``Blockwise``).
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytensor.tensor as pt
from numpy.typing import ArrayLike
from pytensor.compile.builders import OpFromGraph
from pytensor.gradient import DisconnectedType, disconnected_type
from pytensor.gradient import pullback as _pullback
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.null_type import NullType
from pytensor.graph.op import Op
from pytensor.graph.traversal import ancestors, io_toposort
from pytensor.tensor.type import TensorType
from pytensor.tensor.variable import TensorVariable

from diffinterface.extend import Active, Rule, annotate, cotangent_like, cotangents

from .pytensor import WRT, building  # x of the adapter's graph build; the array API lent to PyTensor's variables

_PROBE = np.random.default_rng(20)
_WHERE = "under PyTensor"
_BACKEND = "AutoPyTensor()"


def call(rule: Rule, args: tuple[Any, ...], kwargs: dict[Any, Any]) -> Any:
    if not _NUMBA:
        _register_numba()
    values = tuple(_tensor(a) for a in args)
    active = _active(values)
    key = tuple(sorted(kwargs.items()))
    if rule.opaque:
        y_type = _out_type(rule, values, kwargs)
        return _Primal(rule, key, active, y_type)(*values)
    types = tuple(v.type for v in values)
    op = rule.native(("pytensor", key, active, types), lambda: _graph_op(rule, kwargs, active, types))
    return op(*values)


_NUMBA: list[bool] = []  # whether the Ops are registered with PyTensor's Numba linker (done at the first call)


def _register_numba() -> None:
    """Run the opaque Ops under PyTensor's Numba linker (its default mode) in Numba's object mode,
    as it runs any Op with a Python ``perform``, without its warning that it does: opaque bodies are
    Python by definition."""
    _NUMBA.append(True)
    if importlib.util.find_spec("numba") is None:
        return
    from pytensor.link.numba.dispatch.basic import generate_fallback_impl, numba_funcify

    @numba_funcify.register(_RuleOp)
    def _object_mode(op: Op, node: Apply | None = None, storage_map: object = None, **kwargs: object) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return generate_fallback_impl(op, node, storage_map, **kwargs)


def _tensor(value: object) -> Variable:
    if isinstance(value, Variable):
        return value
    return pt.as_tensor_variable(np.asarray(value))


def _floating(value: Variable) -> bool:
    dtype = getattr(value.type, "dtype", None)
    return dtype is not None and np.dtype(dtype).kind in "fc"


def _active(values: tuple[Any, ...]) -> tuple[bool, ...]:
    wrt = WRT.get()
    out = []
    for v in values:
        if not _floating(v) or isinstance(v, Constant):
            out.append(False)
        elif wrt is None:
            out.append(True)
        else:
            out.append(v is wrt or wrt in set(ancestors([v], blockers=[wrt])))
    return tuple(out)


def _second_order(rule: Rule) -> Any:
    """The derivative of an opaque rule's pass in its primal arguments: PyTensor's undefined
    derivative, explained by the rule's ``SecondOrderError`` message."""
    return NullType(str(rule.second_order(_WHERE, _BACKEND)))()


def _disconnected(g: Variable) -> bool:
    return isinstance(g.type, DisconnectedType)


# -- the output's type ------------------------------------------------------------------------------


def _out_type(rule: Rule, values: tuple[Any, ...], kwargs: dict[Any, Any]) -> Any:
    """The primal's output type (``out_shape``, else one run on random inputs, constants as they are)."""
    shapes = tuple(tuple(v.type.shape) for v in values)
    dtypes = tuple(np.dtype(v.type.dtype) for v in values)
    key = ("pytensor-out", shapes, tuple(d.str for d in dtypes), tuple(sorted(kwargs.items())))

    def build() -> Any:
        if rule.out_shape is not None:
            structs = (SimpleNamespace(shape=s, dtype=d) for s, d in zip(shapes, dtypes))  # what out_shape reads
            shape, dtype = rule.out_shape(*structs, **kwargs)
        else:
            if any(None in s for s, v in zip(shapes, values) if not isinstance(v, Constant)):
                raise TypeError(
                    f"{rule.__name__} ({_WHERE}): an argument's shape is not known when the graph is built "
                    f"({', '.join(str(s) for s in shapes)}), so the output's shape cannot be found by running "
                    f"the primal; give it with {rule.out_shape_fix}, or build the argument with a static shape "
                    f"(pt.tensor(shape=...))"
                )
            probes = [
                np.asarray(v.data) if isinstance(v, Constant) else _PROBE.standard_normal(s).astype(d)
                for v, s, d in zip(values, shapes, dtypes)
            ]
            y = np.asarray(rule.primal(*probes, **kwargs))
            shape, dtype = y.shape, y.dtype
        return pt.tensor(dtype=np.dtype(dtype).name, shape=tuple(shape)).type

    if any(isinstance(v, Constant) for v in values):  # a constant's value may change the shape: not cached
        return build()
    return rule.native(key, build)


# -- opaque rules: Ops running the bodies on NumPy ---------------------------------------------------


class _RuleOp(Op):
    """The common part of an opaque rule's Ops: the rule, its static keywords and which of its
    arguments are active (the first ``n`` inputs of every Op are the rule's arguments)."""

    __props__: tuple[str, ...] = ("rule", "kwargs", "active")

    def __init__(self, rule: Rule, kwargs: tuple[Any, ...], active: tuple[bool, ...]) -> None:
        self.rule, self.kwargs, self.active = rule, kwargs, active

    @property
    def n(self) -> int:
        return len(self.active)

    def _marked(self, arrays: Sequence[np.ndarray]) -> tuple[Any, ...]:
        return annotate(tuple(arrays[: self.n]), self.active, Active)

    def __str__(self) -> str:
        return f"{type(self).__name__.strip('_')}{{{self.rule.__name__}}}"


class _Typed(_RuleOp):
    """A rule's Op with one output of type ``y_type`` (the primal's, or its tangent's)."""

    __props__ = ("rule", "kwargs", "active", "y_type")

    def __init__(self, rule: Rule, kwargs: tuple[Any, ...], active: tuple[bool, ...], y_type: TensorType) -> None:
        super().__init__(rule, kwargs, active)
        self.y_type = y_type

    def make_node(self, *inputs: Variable) -> Apply:
        return Apply(self, [pt.as_tensor_variable(v) for v in inputs], [self.y_type()])

    def infer_shape(self, fgraph: object, node: Apply, shapes: Sequence[tuple[Variable, ...]]) -> list[Any]:
        if None in self.y_type.shape:
            raise NotImplementedError  # PyTensor then reads the output's shape
        return [tuple(self.y_type.shape)]


class _Primal(_Typed):
    """``y = rule(*args)``."""

    def perform(self, node: Apply, inputs: Sequence[np.ndarray], output_storage: list[list[Any]]) -> None:
        y = self.rule.primal(*inputs, **dict(self.kwargs))
        output_storage[0][0] = np.asarray(y, dtype=self.y_type.dtype).reshape(_shape(y, self.y_type))

    def connection_pattern(self, node: Apply) -> list[list[bool]]:
        return [[a] for a in self.active]

    def pullback(
        self, inputs: Sequence[Variable], outputs: Sequence[Variable], cotangents: Sequence[Variable]
    ) -> list[Any]:
        (u,) = cotangents
        if _disconnected(u):
            return [disconnected_type() for _ in inputs]
        cts = iter(cast(list, _Reverse(self.rule, self.kwargs, self.active)(*inputs, u, return_list=True)))
        return [next(cts) if a else disconnected_type() for a in self.active]

    def pushforward(
        self, inputs: Sequence[Variable], outputs: Sequence[Variable], tangents: Sequence[Variable]
    ) -> list[Any]:
        live = tuple(a and not _disconnected(t) for a, t in zip(self.active, tangents))
        if not any(live):
            return [disconnected_type()]
        ts = [t for t, a in zip(tangents, live) if a]
        return [_Forward(self.rule, self.kwargs, live, self.y_type)(*inputs, *ts)]


class _Reverse(_RuleOp):
    """The cotangents of the active arguments: ``(*args, dy) -> (ct_i for active i)``."""

    def make_node(self, *args: Variable) -> Apply:
        inputs = [pt.as_tensor_variable(v) for v in args]
        outs = [inputs[i].type() for i, a in enumerate(self.active) if a]
        return Apply(self, inputs, outs)

    def perform(self, node: Apply, inputs: Sequence[np.ndarray], output_storage: list[list[Any]]) -> None:
        rule, kwargs = self.rule, dict(self.kwargs)
        if not rule.has_reverse:
            raise rule.missing("reverse", _WHERE)
        args, dy = self._marked(inputs), inputs[-1]
        cts = cotangents(rule.reverse(rule.tape(*args, **kwargs), dy, *args, **kwargs), self.n)
        live = (i for i, a in enumerate(self.active) if a)
        for out, i in zip(output_storage, live):
            out[0] = cotangent_like(cts[i], inputs[i])

    def infer_shape(self, fgraph: object, node: Apply, shapes: Sequence[tuple[Variable, ...]]) -> list[Any]:
        return [shapes[i] for i, a in enumerate(self.active) if a]

    def connection_pattern(self, node: Apply) -> list[list[bool]]:
        k = sum(self.active)
        return [[True] * k for _ in self.active] + [[True] * k]

    def pullback(
        self, inputs: Sequence[Variable], outputs: Sequence[Variable], cotangents: Sequence[Variable]
    ) -> list[Any]:
        # linear in dy: its transpose is the forward rule along the cotangents of the outputs
        live = [not _disconnected(w) for w in cotangents]
        if not any(live):
            return [disconnected_type() for _ in inputs]
        positions = [i for i, a in enumerate(self.active) if a]
        pushed = [False] * self.n
        for i, ok in zip(positions, live):
            pushed[i] = ok
        ws = [w for w, ok in zip(cotangents, live) if ok]
        y_type = inputs[-1].type
        dy = _Forward(self.rule, self.kwargs, tuple(pushed), y_type)(*inputs[: self.n], *ws)
        return [_second_order(self.rule) for _ in range(self.n)] + [dy]


class _Forward(_Typed):
    """The forward rule's tangent: ``(*args, t_i for active i) -> dy``."""

    def perform(self, node: Apply, inputs: Sequence[np.ndarray], output_storage: list[list[Any]]) -> None:
        rule = self.rule
        if not rule.has_forward:
            raise rule.missing("forward", _WHERE)
        ts = iter(inputs[self.n :])
        tangents = tuple(next(ts) if a else None for a in self.active)
        _, dy = rule.forward(*annotate(tuple(inputs[: self.n]), self.active, Active, tangents), **dict(self.kwargs))
        output_storage[0][0] = cotangent_like(dy, np.zeros(_shape(dy, self.y_type), self.y_type.dtype))

    def pullback(
        self, inputs: Sequence[Variable], outputs: Sequence[Variable], cotangents: Sequence[Variable]
    ) -> list[Any]:
        # linear in the tangents: their transpose is the reverse pass of the cotangent
        (w,) = cotangents
        if _disconnected(w):
            return [disconnected_type() for _ in inputs]
        cts = _Reverse(self.rule, self.kwargs, self.active)(*inputs[: self.n], w, return_list=True)
        return [_second_order(self.rule) for _ in range(self.n)] + list(cast(list, cts))


for _cls in (_Primal, _Reverse, _Forward):
    _cls.__str__ = _RuleOp.__str__  # type: ignore[method-assign]  # not the __props__' long form


def _shape(y: ArrayLike, y_type: TensorType) -> tuple[Any, ...]:
    return tuple(y_type.shape) if None not in y_type.shape else np.shape(y)


# -- array-API rules: an OpFromGraph with the rule's derivatives as overrides -----------------------


def _graph_op(rule: Rule, kwargs: dict[Any, Any], active: tuple[bool, ...], types: tuple[Any, ...]) -> Any:
    n = len(types)

    def primal(args: list[Any]) -> Any:
        return pt.as_tensor_variable(rule.primal(*args, **kwargs))

    with building:
        inner = [t() for t in types]
        y = primal(inner)

    def forward(args: list[Any], tangents: list[Any]) -> Any:
        ts = tuple(t if a and not _disconnected(t) else None for t, a in zip(tangents, active))
        live = tuple(t is not None for t in ts)
        if not any(live):
            return pt.zeros_like(y)
        _, dy = rule.forward(*annotate(tuple(args), live, Active, ts), **kwargs)
        return pt.zeros_like(y) if dy is None else pt.cast(pt.as_tensor_variable(dy), y.dtype)

    def reverse(args: list[Any], dy: Variable) -> list[Any]:
        marked = annotate(tuple(args), active, Active)
        cts = cotangents(rule.reverse(rule.tape(*marked, **kwargs), dy, *marked, **kwargs), n)
        return [
            (pt.zeros_like(v) if c is None else pt.cast(pt.as_tensor_variable(c), v.dtype)) if a else None
            for c, v, a in zip(cts, args, active)
        ]

    def pullback_override(inputs: list[Any], outputs: list[Any], grads: list[Any]) -> list[Any]:
        (u,) = grads
        with building:
            if rule.has_reverse:
                cts = reverse(inputs, u)
            elif rule.has_forward:  # the transpose of the forward rule (linear in the tangents)
                ts = [pt.zeros_like(v) if a else None for v, a in zip(inputs, active)]  # where: linear
                dy = forward(inputs, [t if t is not None else disconnected_type() for t in ts])
                live = [t for t in ts if t is not None]
                got = iter(cast(list, _pullback(dy, live, u, disconnected_inputs="ignore")) if live else [])
                cts = [next(got) if t is not None else None for t in ts]
            else:
                raise rule.missing("reverse", _WHERE)
        return [c if c is not None else disconnected_type() for c in cts]

    def pushforward_override(inputs: list[Any], tangents: list[Any]) -> list[Any]:
        with building:
            if rule.has_forward:
                return [forward(inputs, tangents)]
            if not rule.has_reverse:
                raise rule.missing("forward", _WHERE)
            # the transpose of the reverse pass (linear in its cotangent); casts: PyTensor infers None or any Variable
            u = pt.zeros(y.type.shape, dtype=y.dtype) if None not in y.type.shape else pt.zeros_like(primal(inputs))
            cts = reverse(inputs, cast("Variable", u))
            pairs = [(c, t) for c, t, a in zip(cts, tangents, active) if a and c is not None and not _disconnected(t)]
            if not pairs:
                return [pt.zeros_like(y)]
            total = cast("TensorVariable", sum(cast("TensorVariable", pt.sum(c * t)) for c, t in pairs))
            return [pt.cast(_pullback(total, cast("Variable", u), pt.ones((), dtype=total.dtype)), y.dtype)]

    return OpFromGraph(
        inner,
        [y],
        pullback=pullback_override,
        pushforward=pushforward_override,
        connection_pattern=[[a] for a in active],
        name=rule.__name__,
    )


def opaque_rule_between(x: Variable, y: Variable) -> Rule | None:
    """The first opaque rule on a path from ``x`` to ``y`` (None where there is none): a second
    derivative of ``y`` in ``x`` needs its rules' derivatives, which PyTensor cannot take."""
    for node in _nodes_between(x, y):
        op = getattr(node.op, "core_op", node.op)  # a rule's Op batched by Blockwise too
        if isinstance(op, _RuleOp) and op.rule.opaque:
            return op.rule
    return None


def _nodes_between(x: Variable, y: Variable) -> list[Apply]:
    depends = {x}
    out = []
    for node in io_toposort([x], [y]):
        if any(i in depends for i in node.inputs):
            depends.update(node.outputs)
            out.append(node)
    return out
