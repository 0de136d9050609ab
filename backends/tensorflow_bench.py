"""TensorFlow's own best calls (a ``tf.function`` of the tape), what ``AutoTensorFlow`` is benchmarked against.

The record is a leaf of its own: the adapter does not import it, and ``python -m diffinterface bench`` loads
it through the config's ``bench`` path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from diffinterface.extend import Array, BenchEngine

from .tensorflow import _SCOPE


def _matvec(A: tf.Tensor, z: tf.Tensor) -> Any:
    return tf.linalg.matvec(A, z)


class Bench(BenchEngine):
    """Each operator as one ``tf.function`` (traced once, with a fixed input signature) of TensorFlow's
    tape or forward accumulator, on float64 tensors."""

    inputs = "tensorflow float64"
    numpy_dtype = "float64"
    # TensorFlow's own tape.jacobian (pfor) of sin(A @ x) at 1e5 x 10 fails inside TensorFlow
    # (InvalidArgumentError: UnsortedSegmentSum's segment ids out of int32 range; measured 2026-11-25,
    # tensorflow-cpu 2.21): there is no native to compare with, so the Jacobian rows stop at 1e3.
    limits = {
        "gradient": 1_000_000,
        "hvp": 1_000_000,
        "hessian": 1_000,
        "pushforward": 1_000_000,
        "pullback": 1_000_000,
        "jacobian tall": 1_000,
        "jacobian wide": 1_000,
    }
    _DISPATCH = (
        "the public call's Python layers (the prep check, the runner) and the adapter's: the call's scope "
        "(the array API set on TensorFlow's tensor class and restored), the inputs converted to tensors"
    )
    costs = {
        "gradient": _DISPATCH,
        "hvp": _DISPATCH + ", and the tangent checked too",
        "hessian": _DISPATCH,
        "pushforward": _DISPATCH + ", and the tangent checked too",
        "pullback": _DISPATCH + ", and the tangent checked too",
        "jacobian tall": _DISPATCH + ", and the captured A read from f's closure at every call and passed to the "
        "traced function (so that updates between calls are seen)",
        "jacobian wide": _DISPATCH + ", and the captured A read from f's closure at every call and passed to the "
        "traced function (so that updates between calls are seen)",
    }

    def array(self, a: Array) -> Any:
        return tf.convert_to_tensor(np.asarray(a, dtype=np.float64))

    def ready(self, value: Any) -> Any:
        return value.numpy() if hasattr(value, "numpy") else value

    def compiled(self, f: Callable[..., Any]) -> Any:
        """``f`` (array-API code) as a ``tf.function``, traced inside the adapter's call scope, which lends
        TensorFlow's tensors the array API (``python -m diffinterface bench``'s cheap-gradient table)."""

        def in_scope(*args: Any) -> Any:
            with _SCOPE:
                return f(*args)

        return tf.function(in_scope, autograph=False, reduce_retracing=True)

    def rule_by_hand(self, primal: Any, vjp: Any) -> Any:
        """A ``tf.custom_gradient`` over ``tf.numpy_function``."""

        @tf.custom_gradient
        def by_hand(a: Array) -> Any:
            y = tf.numpy_function(primal, [a], a.dtype, stateful=False)
            y.set_shape(a.shape)

            def grad(dy: Any) -> Any:
                g = tf.numpy_function(vjp, [a, dy], a.dtype, stateful=False)
                g.set_shape(a.shape)
                return g

            return y, grad

        return by_hand

    def _compiled(self, operator: str, f: Callable[..., Any], x: Array, t: Array, A: Array) -> Any:
        spec = tf.TensorSpec(tuple(x.shape), tf.float64)
        if operator == "gradient":

            def gradient(z: tf.Tensor) -> Any:
                with tf.GradientTape() as tape:
                    tape.watch(z)
                    y = f(z)
                return tape.gradient(y, z)

            return tf.function(gradient, input_signature=[spec], autograph=False)
        if operator == "hvp":

            def hvp(z: tf.Tensor, t: tf.Tensor) -> Any:
                with tf.autodiff.ForwardAccumulator(z, t) as acc:
                    with tf.GradientTape() as tape:
                        tape.watch(z)
                        y = f(z)
                    g = tape.gradient(y, z)
                return acc.jvp(g)

            return tf.function(hvp, input_signature=[spec, spec], autograph=False)
        if operator == "hessian":

            def hessian(z: tf.Tensor) -> Any:
                with tf.GradientTape() as outer:
                    outer.watch(z)
                    with tf.GradientTape() as inner:
                        inner.watch(z)
                        y = f(z)
                    g = inner.gradient(y, z)
                return outer.jacobian(g, z)

            return tf.function(hessian, input_signature=[spec], autograph=False)
        if operator == "pushforward":

            def pushforward(z: tf.Tensor, t: tf.Tensor) -> Any:
                with tf.autodiff.ForwardAccumulator(z, t) as acc:
                    y = f(z)
                return acc.jvp(y)

            return tf.function(pushforward, input_signature=[spec, spec], autograph=False)
        if operator == "pullback":  # t has f(x)'s shape
            spec_t = tf.TensorSpec(tuple(t.shape), tf.float64)
            return tf.function(lambda z, u: _pull(f, z, u), input_signature=[spec, spec_t], autograph=False)
        if operator in ("jacobian tall", "jacobian wide"):  # A as an argument, as our closure passes it
            spec_a = tf.TensorSpec(tuple(A.shape), tf.float64)

            def jacobian(z: tf.Tensor, a: tf.Tensor) -> Any:
                with tf.GradientTape() as tape:
                    tape.watch(z)
                    y = tf.sin(_matvec(a, z))
                return tape.jacobian(y, z)

            return tf.function(jacobian, input_signature=[spec, spec_a], autograph=False)
        return None

    @staticmethod
    def _arguments(operator: str, x: Array, t: Array, A: Array) -> tuple[Any, ...]:
        if operator.startswith("jacobian"):
            return (x, A)
        return (x, t) if operator in ("hvp", "pushforward", "pullback") else (x,)

    def native(self, operator: str, f: Callable[..., Any], x: Array, t: Array, A: Array) -> Any:
        g = self._compiled(operator, f, x, t, A)
        if g is None:
            return None
        args = self._arguments(operator, x, t, A)
        with _SCOPE:  # traced here, with the array API on tensors (f is array-API code); the calls timed run the graph
            g(*args)
        return lambda: g(*args).numpy()

    def native_numpy(self, operator: str, f: Callable[..., Any], x: Array, t: Array, A: Array) -> Any:
        """The traced function called on numpy arrays (converted on the way in), its result as numpy."""
        g = self._compiled(operator, f, x, t, A)
        if g is None:
            return None
        args = self._arguments(operator, x, t, A)
        with _SCOPE:
            g(*[tf.convert_to_tensor(a) for a in args])
        return lambda: g(*[tf.convert_to_tensor(a) for a in args]).numpy()


def _pull(f: Callable[..., Any], z: tf.Tensor, u: tf.Tensor) -> Any:
    with tf.GradientTape() as tape:
        tape.watch(z)
        y = f(z)
    return tape.gradient(y, z, output_gradients=[u])  # a list of one: as TensorFlow flattens u itself
