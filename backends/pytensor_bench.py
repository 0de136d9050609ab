"""PyTensor's own best calls (the compiled ``pytensor.function`` of the derivative graph), what
``AutoPyTensor`` is benchmarked against.

The record is a leaf of its own: the adapter does not import it, and ``python -m diffinterface bench`` loads
it through the config's ``bench`` path. The benchmarks' ``f`` is array-API code: its graph is built
inside the adapter's build context (``diffinterface.backends.pytensor``), which lends PyTensor's
symbolic tensors the array API; the compiled function is what a PyTensor user compiles by hand.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytensor.tensor as pt
from pytensor import gradient as ptg
from pytensor.compile.maker import function as pytensor_function
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op

from diffinterface.extend import BenchEngine

from .pytensor import building

grad: Any = ptg.grad  # its overloads return Optional types a graph built here never has


def _compile(build: Any, *arrays: Any) -> Any:
    """``pytensor.function`` of ``build(*symbols)`` over symbols shaped like ``arrays`` (PyTensor's default mode)."""
    symbols = [pt.tensor(dtype=a.dtype.name, shape=a.shape) for a in arrays]
    with building:
        out = build(*symbols)
    return pytensor_function(symbols, out)


_DISPATCH = (
    "the public call's Python layers (the prep check, the runner's lookup of the compiled function by "
    "x's shape and dtype)"
)


class Bench(BenchEngine):
    """PyTensor's ``grad``, ``pushforward``, ``pullback``, ``jacobian(vectorize=True)`` and the
    Jacobian of the gradient, compiled once."""

    costs = {
        "gradient": _DISPATCH,
        "hvp": _DISPATCH + ", and the tangent converted and checked too",
        "hessian": _DISPATCH,
        "pushforward": _DISPATCH + ", and the tangent converted and checked too",
        "pullback": _DISPATCH + ", and the tangent converted and checked too",
        "jacobian tall": _DISPATCH + ", and the captured A read from f's closure at every call and passed to the "
        "compiled function (so that updates between calls are seen)",
        "jacobian wide": _DISPATCH + ", and the captured A read from f's closure at every call and passed to the "
        "compiled function (so that updates between calls are seen)",
    }

    def native(self, operator: Any, f: Any, x: Any, t: Any, A: Any) -> Any:
        if operator == "gradient":
            fn = _compile(lambda z: grad(f(z), z), x)
            return lambda: fn(x)
        if operator == "hvp":
            fn = _compile(lambda z, v: ptg.pushforward(grad(f(z), z), z, v), x, t)
            return lambda: fn(x, t)
        if operator == "hessian":
            fn = _compile(lambda z: ptg.jacobian(grad(f(z), z), z, vectorize=True), x)
            return lambda: fn(x)
        if operator == "pushforward":
            fn = _compile(lambda z, v: ptg.pushforward(f(z), z, v), x, t)
            return lambda: fn(x, t)
        if operator == "pullback":
            fn = _compile(lambda z, v: ptg.pullback(f(z), z, v), x, t)
            return lambda: fn(x, t)
        if operator in ("jacobian tall", "jacobian wide"):
            fn = _compile(lambda z: ptg.jacobian(f(z, A), z, vectorize=True), x)
            return lambda: fn(x)
        return None

    def rule_by_hand(self, primal: Any, vjp: Any) -> Any:
        """An ``Op`` whose ``perform`` runs ``primal`` and whose ``pullback`` is an ``Op`` running ``vjp``."""

        class ByHandVJP(Op):
            __props__ = ("fn",)

            def __init__(self) -> None:
                self.fn = vjp

            def make_node(self, *inputs: Any) -> Apply:  # (a, dy)
                return Apply(self, list(inputs), [inputs[0].type()])

            def perform(self, node: Apply, inputs: Any, output_storage: Any) -> None:
                output_storage[0][0] = np.asarray(vjp(*inputs), dtype=inputs[0].dtype)

        class ByHand(Op):
            __props__ = ("fn",)

            def __init__(self) -> None:
                self.fn = primal

            def make_node(self, *inputs: Any) -> Apply:  # (a,)
                a = pt.as_tensor_variable(inputs[0])
                return Apply(self, [a], [a.type()])

            def perform(self, node: Apply, inputs: Any, output_storage: Any) -> None:
                output_storage[0][0] = np.asarray(primal(inputs[0]), dtype=inputs[0].dtype)

            def pullback(self, inputs: Any, outputs: Any, cotangents: Any) -> Any:
                return [ByHandVJP()(inputs[0], cotangents[0])]

        return ByHand()

    def native_numpy(self, operator: Any, f: Any, x: Any, t: Any, A: Any) -> Any:
        """The same compiled function: PyTensor's arrays are numpy's."""
        native = self.native(operator, f, x, t, A)
        return None if native is None else lambda: np.asarray(native())
