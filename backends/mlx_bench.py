"""MLX's own best calls (``mx.compile`` of ``mx.grad``, ``mx.jvp``, ``mx.vjp`` ...), what ``AutoMLX`` is
benchmarked against.

The record is a leaf of its own: the adapter does not import it, and ``python -m diffinterface bench`` loads
it through the config's ``bench`` path. The benchmarks' ``f`` is array-API code: it is traced inside the
adapter's context (``diffinterface.backends.mlx.computing``, which lends MLX arrays the array API while
``f`` runs), once, when the native call is made; the calls timed are the compiled function alone, as an
MLX user compiles it by hand.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import mlx.core as mx
import numpy as np

from diffinterface.extend import BenchEngine

from .mlx import computing

if TYPE_CHECKING:
    from collections.abc import Callable


def _hessian(f: Callable[..., Any], x: mx.array) -> mx.array:
    """MLX has no ``hessian``: the JVPs of ``mx.grad`` along the basis of x, ``vmap``-ped (forward over reverse)."""
    grad = mx.grad(f)
    return mx.vmap(lambda t: mx.jvp(grad, [x], [t])[1][0])(mx.eye(x.size, dtype=x.dtype))


def _jacfwd(x: mx.array, A: mx.array) -> mx.array:
    """The Jacobian of ``sin(A @ x)`` by JVPs of the basis of x (columns), ``vmap``-ped."""
    cols = mx.vmap(lambda t: mx.jvp(lambda z: mx.sin(A @ z), [x], [t])[1][0])(mx.eye(x.size, dtype=x.dtype))
    return mx.transpose(cols)


def _jacrev(x: mx.array, A: mx.array) -> mx.array:
    """The Jacobian of ``sin(A @ x)`` by VJPs of the basis of f(x) (rows), ``vmap``-ped."""
    m = A.shape[0]
    return mx.vmap(lambda c: mx.vjp(lambda z: mx.sin(A @ z), [x], [c])[1][0])(mx.eye(m, dtype=x.dtype))


class Bench(BenchEngine):
    """Each operator as ``mx.compile`` of MLX's transform, on float32 MLX arrays (MLX's default)."""

    inputs = "mlx float32"
    numpy_dtype = "float32"
    _DISPATCH = "the public call's Python layers (the prep check, the runner) and the call's context (the array API lent to MLX arrays, under a lock)"
    costs = {
        "gradient": _DISPATCH,
        "hvp": _DISPATCH + ", and the tangent checked too",
        "hessian": _DISPATCH,
        "pushforward": _DISPATCH + ", and the tangent checked too",
        "pullback": _DISPATCH + ", and the tangent checked too",
        "jacobian tall": _DISPATCH + ", and the captured A read from f's closure at every call and passed to the "
        "compiled function (so that updates between calls are seen)",
        "jacobian wide": _DISPATCH + ", and the captured A read from f's closure at every call and passed to the "
        "compiled function (so that updates between calls are seen)",
    }

    def array(self, a: Any) -> Any:
        return mx.array(np.asarray(a, dtype=np.float32))

    def ready(self, value: Any) -> Any:
        mx.eval(value)
        return value

    def compiled(self, f: Callable[..., Any]) -> Any:
        return mx.compile(f)

    def rule_by_hand(self, primal: Callable[..., Any], vjp: Callable[..., Any]) -> Any:
        """An ``mx.custom_function`` whose primal and VJP run the NumPy bodies (MLX has no host callback:
        values are read out, which MLX refuses inside ``mx.compile``, so the call runs eagerly)."""

        @mx.custom_function
        def by_hand(a: mx.array) -> mx.array:
            return mx.array(np.asarray(primal(np.asarray(a)), dtype=np.float32))

        @by_hand.vjp
        def by_hand_vjp(primals: Any, cotangent: Any, output: Any) -> Any:
            a = primals[0] if isinstance(primals, (list, tuple)) else primals
            return mx.array(np.asarray(vjp(np.asarray(a), np.asarray(cotangent)), dtype=np.float32))

        return by_hand

    def _compiled(self, operator: str, f: Callable[..., Any]) -> Any:
        if operator == "gradient":
            return mx.compile(mx.grad(f))
        if operator == "hvp":
            return mx.compile(lambda x, t: mx.jvp(mx.grad(f), [x], [t])[1][0])
        if operator == "hessian":
            return mx.compile(lambda x: _hessian(f, x))
        if operator == "pushforward":
            return mx.compile(lambda x, t: mx.jvp(f, [x], [t])[1][0])
        if operator == "pullback":
            return mx.compile(lambda x, t: mx.vjp(f, [x], [t])[1][0])
        if operator == "jacobian tall":  # A as an argument, as our closure passes it
            return mx.compile(_jacfwd)
        if operator == "jacobian wide":
            return mx.compile(_jacrev)
        return None

    @staticmethod
    def _arguments(operator: str, x: Any, t: Any, A: Any) -> tuple[Any, ...]:
        if operator.startswith("jacobian"):
            return (x, A)
        return (x, t) if operator in ("hvp", "pushforward", "pullback") else (x,)

    def _traced(self, operator: str, f: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        """The compiled transform, traced and compiled once here (f's array-API code inside the adapter's
        context), or None where MLX has none."""
        g = self._compiled(operator, f)
        if g is not None:
            with computing(mx.float32):
                mx.eval(g(*args))
        return g

    def native(self, operator: str, f: Callable[..., Any], x: Any, t: Any, A: Any) -> Any:
        args = self._arguments(operator, x, t, A)
        g = self._traced(operator, f, args)
        if g is None:
            return None
        return lambda: self.ready(g(*args))

    def native_numpy(self, operator: str, f: Callable[..., Any], x: Any, t: Any, A: Any) -> Any:
        """The compiled transform called on MLX arrays made from the numpy ones at every call, its result
        read back with ``np.asarray`` (which evaluates it)."""
        numpy_args = self._arguments(operator, x, t, A)
        g = self._traced(operator, f, self.arrays(*numpy_args))
        if g is None:
            return None
        return lambda: np.asarray(g(*self.arrays(*numpy_args)))
