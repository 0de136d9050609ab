"""JAX's own best calls (``jax.jit`` of ``grad``, ``jacfwd``, ``jvp`` ...), what ``AutoJAX`` is benchmarked against.

The record is a leaf of its own: the adapter does not import it, and ``python -m diffinterface bench`` loads
it through the config's ``bench`` path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from diffinterface.extend import BenchEngine

if TYPE_CHECKING:
    from collections.abc import Callable


class Bench(BenchEngine):
    """Each operator as ``jax.jit`` of JAX's transform, on float32 JAX arrays (JAX's default)."""

    inputs = "jax float32"
    numpy_dtype = "float32"
    _DISPATCH = "the public call's Python layers (the prep check, the runner) over JAX's own jit dispatch: about 1 us"
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

    def array(self, a: np.ndarray) -> jax.Array:
        return jnp.asarray(a, dtype=jnp.float32)

    def ready(self, value: Any) -> Any:
        return jax.block_until_ready(value)

    def compiled(self, f: Callable[..., Any]) -> Any:
        return jax.jit(f)

    def rule_by_hand(self, primal: Callable[..., Any], vjp: Callable[..., Any]) -> Any:
        """A ``jax.custom_vjp`` over ``jax.pure_callback``: the input is the residual."""

        @jax.custom_vjp
        def by_hand(a: jax.Array) -> Any:
            return jax.pure_callback(primal, jax.ShapeDtypeStruct(a.shape, a.dtype), a, vmap_method="sequential")

        def fwd(a: jax.Array) -> Any:
            return by_hand(a), a

        def bwd(a: jax.Array, dy: jax.Array) -> Any:
            return (jax.pure_callback(vjp, jax.ShapeDtypeStruct(a.shape, a.dtype), a, dy, vmap_method="sequential"),)

        by_hand.defvjp(fwd, bwd)
        return by_hand

    def _compiled(self, operator: str, f: Callable[..., Any]) -> Any:
        if operator == "gradient":
            return jax.jit(jax.grad(f))
        if operator == "hvp":
            return jax.jit(lambda x, t: jax.jvp(jax.grad(f), (x,), (t,))[1])
        if operator == "hessian":
            return jax.jit(jax.hessian(f))
        if operator == "pushforward":
            return jax.jit(lambda x, t: jax.jvp(f, (x,), (t,))[1])
        if operator == "pullback":
            return jax.jit(lambda x, t: jax.vjp(f, x)[1](t)[0])
        if operator in ("jacobian tall", "jacobian wide"):  # A as an argument, as our closure passes it
            transform = jax.jacfwd if operator.endswith("tall") else jax.jacrev
            return jax.jit(transform(lambda x, A: jnp.sin(A @ x)))
        return None

    @staticmethod
    def _arguments(operator: str, x: jax.Array, t: jax.Array, A: jax.Array) -> tuple[Any, ...]:
        if operator.startswith("jacobian"):
            return (x, A)
        return (x, t) if operator in ("hvp", "pushforward", "pullback") else (x,)

    def native(self, operator: str, f: Callable[..., Any], x: jax.Array, t: jax.Array, A: jax.Array) -> Any:
        g = self._compiled(operator, f)
        if g is None:
            return None
        args = self._arguments(operator, x, t, A)
        return lambda: jax.block_until_ready(g(*args))

    def native_numpy(self, operator: str, f: Callable[..., Any], x: jax.Array, t: jax.Array, A: jax.Array) -> Any:
        """The compiled transform called on the numpy arrays (jit transfers them), its result read
        back with ``np.asarray`` (which waits for it)."""
        g = self._compiled(operator, f)
        if g is None:
            return None
        args = self._arguments(operator, x, t, A)
        return lambda: np.asarray(g(*args))
