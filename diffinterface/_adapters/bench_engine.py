"""An engine's record for ``python -m diffinterface bench``: the base class a backend's bench leaf subclasses.

It lives apart from ``diffinterface.bench`` so that the extension kit (``diffinterface.extend``) can name it
without importing the tables.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


class BenchEngine:
    """One engine's record for the benchmarks (public as ``diffinterface.extend.BenchEngine``; the tables call it ``Engine``): its
    inputs (its own array type) and its best direct calls, each ``() -> result`` with the result
    ready (JAX: blocked on). A backend config names it with ``bench = "package.module:Class"``.

    - ``inputs``: a label for the tables; ``array(a)``: a numpy array in the engine's type;
      ``ready(value)``: ``value`` once computed;
    - ``native(operator, f, x, t, A)``: the engine's own call for ``operator`` (``gradient``,
      ``hvp``, ``hessian``, ``pushforward``, ``pullback``, ``jacobian tall``/``wide`` with
      ``f(x) = sin(A @ x)``), or None where it has none; ``native_first``: its cold call (by
      default the native built and called: JAX's a fresh jit, compiled), what preparation is compared with;
    - ``compiled(f)``: ``f`` as the engine's users run it (JAX: ``jax.jit(f)``);
    - ``limits``: the largest size per operator worth timing (finite differences cost an evaluation
      of ``f`` per coordinate), or None for every size;
    - ``costs``: per operator, the work the adapter does beyond the native call and why (shown in the
      overhead table next to the measured split of a row over budget);
    - ``rule_by_hand(primal, vjp)``: an opaque NumPy function of one array (``primal(a)``, an array of
      a's shape; ``vjp(a, dy)``) registered with the engine's own mechanism as its users write it by
      hand, what the rules table compares a ``custom_rule`` with; None where the engine has none.
    - ``numpy_dtype``: for an engine whose own arrays are not numpy's, the dtype of the overhead
      table's rows with numpy inputs (JAX: float32, what it computes in by default; None: no such rows);
      ``native_numpy(operator, f, x, t, A)``: the native call as a NumPy user writes it.
    """

    inputs = "numpy float64"
    numpy_dtype: str | None = None
    limits: dict[str, int] | None = None
    costs: dict[str, str] = {}

    def array(self, a: np.ndarray) -> Any:
        return a

    def ready(self, value: Any) -> Any:
        return value

    def native(self, operator: str, f: Callable[..., Any], x: Any, t: Any, A: Any) -> Callable[[], Any] | None:
        raise NotImplementedError(
            f"{type(self).__name__}: a bench record implements native(operator, f, x, t, A), the engine's own call"
        )

    def native_first(self, operator: str, f: Callable[..., Any], x: Any, t: Any, A: Any) -> Callable[[], Any] | None:
        """The engine's cold call: its :meth:`native` built and called, at every call of the result (a
        compiling engine's native traces and compiles as it is built: a new ``jax.jit``, ``mx.compile``,
        ``tf.function`` or ``pytensor.function``; an eager engine's build is nothing). Timing the built
        native alone would leave the compilation out (PyTensor's and TensorFlow's natives compile in
        ``native``, so their first calls were measured as warm calls before 2026-11-25)."""

        def first() -> Any:
            native = self.native(operator, f, x, t, A)
            return None if native is None else native()

        return first

    def native_numpy(self, operator: str, f: Callable[..., Any], x: Any, t: Any, A: Any) -> Callable[[], Any] | None:
        """The native call on numpy ``x``, ``t`` and ``A`` as a NumPy user writes it: each converted with
        :meth:`array` at every call and the result brought back with ``np.asarray``. This default builds
        :meth:`native` at every call, which suits an eager engine; one whose native compiles overrides it."""
        if self.native(operator, f, *self.arrays(x, t, A)) is None:
            return None
        return lambda: np.asarray(self.native(operator, f, *self.arrays(x, t, A))())  # type: ignore[misc]

    def arrays(self, *values: Any) -> tuple[Any, ...]:
        """Each numpy array of ``values`` in the engine's type (:meth:`array`); None stays None."""
        return tuple(None if v is None else self.array(v) for v in values)

    def compiled(self, f: Callable[..., Any]) -> Callable[..., Any]:
        return f

    def rule_by_hand(self, primal: Callable[..., Any], vjp: Callable[..., Any]) -> Callable[..., Any] | None:
        return None

    def allows(self, operator: str, size: int) -> bool:
        """Whether ``operator`` at ``size`` is within :attr:`limits`."""
        return self.limits is None or size <= self.limits.get(operator, -1)
