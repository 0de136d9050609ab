"""``DifferentiateWith(f, backend)``: ``f(x)`` whose derivatives any engine takes from ``backend``.

It is a :class:`diffinterface.rules.Rule` with opaque bodies: every engine hands it NumPy arrays
(JAX through host callbacks, torch through tensors moved to NumPy, autograd as they are), and the
bodies call ``backend`` through diffinterface's own operators. So a PyTorch function runs inside
``jax.grad``, or a simulator differentiated by ``AutoFiniteDiff()`` inside ``jax.jit(jax.grad(...))``:

- primal: ``f`` on ``x`` converted to ``backend``'s arrays (a tensor for ``AutoTorch``, a jax array
  for ``AutoJAX``, float64 kept), its result back as NumPy;
- forward rule: ``value_and_pushforward(backend, f, x, dx)``;
- reverse pass: ``pullback(backend, f, x, dy)`` of the argument alone (no augmented primal: under JAX
  the backward callback does not run ``f`` again for a tape).

``f`` keeps the closure contract of the operators (contract section 7): with the backend's
``closure="duplicated"`` (the default) each run of the primal is over fresh duplicates of the state
``f`` captures, so a work buffer that ``f`` writes into is never the user's own (the bodies that call
``backend`` duplicate it through the operators themselves).

``f`` takes one array and returns one array. Under JAX the output's shape comes from one call of
``f`` at random inputs of ``x``'s shape (per shape), unless ``out_shape`` says it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._adapters.target import Target
from .._core.arrays import NUMPY, families, to_family
from .._core.configs import AbstractBackend, adapter_for
from . import Rule


class DifferentiateWith(Rule):
    """``f`` differentiated by ``backend`` inside any engine; see the module docstring.

    Example:

        >>> import autograd.numpy as anp
        >>> simulate = di.DifferentiateWith(np.sin, di.AutoFiniteDiff())  # NumPy code, finite differences
        >>> loss = lambda x: anp.sum(simulate(x) * x)  # differentiated by autograd around it
        >>> print(di.gradient(di.AutoAutograd(), loss, np.array([0.0, 1.0])).round(6))
        [0.       1.381773]
    """

    out_shape_fix = "DifferentiateWith(f, backend, out_shape=fn) with fn(x) -> (shape, dtype)"

    def __init__(
        self, f: Callable[..., Any], backend: AbstractBackend, out_shape: Callable[..., Any] | None = None
    ) -> None:
        if not callable(f):
            raise TypeError(f"DifferentiateWith(f, {backend!r}): f must be callable, got {type(f).__name__}")
        if not isinstance(backend, AbstractBackend):
            raise TypeError(
                f"DifferentiateWith(f, backend): backend must be a config such as AutoTorch(), got {type(backend).__name__}"
            )
        self.f: Callable[..., Any] = f
        self.backend: AbstractBackend = backend
        # f's captured state, found once: the primal runs over duplicates of it (Adapter.evaluate's way)
        self._target = Target(f, None, getattr(backend, "closure", "duplicated"), self.__class__.__name__)
        super().__init__(
            self._primal,
            opaque=True,
            out_shape=out_shape,
            forward=self._forward,
            reverse=self._reverse,  # needs x alone: no augmented primal, so no tape to make again
        )
        self.__name__: str = f"DifferentiateWith({getattr(f, '__name__', 'f')}, {backend!r})"

    def _primal(self, x: Any) -> Any:
        """``f`` on ``x`` in the arrays of the backend's engine (its :class:`ArrayFamily`, when it has
        one: conversions and the context that keeps x's dtype), back as numpy."""
        record = families().get(self.backend.engine or NUMPY)
        if record is not None and record.name != NUMPY:
            adapter = adapter_for(self.backend, self.__name__)  # loads the engine its arrays need (first call)
            if adapter.builds_graph:  # f's graph compiled and run by the engine, over duplicates of its state
                return np.asarray(to_family(adapter.evaluate(self._target, np.asarray(x), ()), NUMPY))
        f = self._target.instance()  # over fresh duplicates of f's captured state, as the operators call f
        if record is None or record.name == NUMPY:
            return np.asarray(f(x))
        x = np.asarray(x)
        with record.computing(x.dtype):
            return np.asarray(to_family(f(to_family(x, record.name)), NUMPY))

    def _forward(self, x: Any) -> tuple[Any, ...]:
        from ..first_order import value_and_pushforward

        if not hasattr(x, "dval"):  # Const: nothing to differentiate
            return self._primal(x.val), None
        return value_and_pushforward(self.backend, self.f, np.asarray(x.val), np.asarray(x.dval))

    def _reverse(self, tape: Any, dy: Any, x: Any) -> tuple[Any, ...]:
        from ..first_order import pullback

        return (pullback(self.backend, self.f, np.asarray(x.val), np.asarray(dy)),)

    def __reduce__(self) -> Any:
        return (DifferentiateWith, (self.f, self.backend, self.out_shape))

    def __repr__(self) -> str:
        return self.__name__
