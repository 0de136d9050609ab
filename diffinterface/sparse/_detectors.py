"""Sparsity detectors: where a Jacobian or a Hessian may be nonzero.

Each detector has ``jacobian_sparsity(problem, x, contexts, dense)`` and ``hessian_sparsity(...)``,
which return a boolean ``scipy.sparse.csr_array`` of shape ``(f(x).size, x.size)`` or
``(x.size, x.size)`` (elements in row-major order). ``problem`` (:class:`Problem`) holds the user's
``f``, its output buffer ``y`` (two-argument functions), ``y_size`` and ``function``, the call
``function(x, *context values)`` as the closure policy makes it; ``x`` is the user's input (any
family), ``contexts`` the call's contexts and ``dense`` the dense backend of the :class:`AutoSparse`.

- :class:`TracerSparsityDetector` (the default): runs ``f`` once on a :class:`~._tracer.Tracer`, an
  array-API array of index sets; needs no engine; *global* (valid at every x). Where it cannot run
  ``f`` and the dense engine declares ``local_sparsity_fallback`` (TensorFlow, MLX, PyTensor: ``f``
  written in ``tf.*``, ``mx.*``, ``pytensor.tensor``), it detects locally instead, with a
  :class:`LocalSparsityWarning`.
- :class:`KnownSparsity`: a pattern the user knows (any ``scipy.sparse`` matrix or boolean array).
- :class:`LocalSparsityDetector`: the nonzeros of dense derivatives computed by ``dense`` at a few
  random points around x; *local*: an entry that is zero at those points and nonzero elsewhere is
  missed (so it is named as such, and is not the default).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import warnings
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ._coloring import csr_pattern

if TYPE_CHECKING:
    from scipy.sparse import csr_array

    from .._core.types import Array


@dataclasses.dataclass(frozen=True)
class Problem:
    """What a detector is told about the function (see the module docstring)."""

    f: Any
    y: Any
    y_size: int
    function: Any
    target: Any = None  # the call's Target (closure policy, captured state), for engines that trace f themselves


def _call(problem: Problem) -> str:
    """The call as the user wrote it, as every error message starts (``jacobian(AutoSparse(...), f, x): ``)."""
    call = getattr(problem.target, "call", None)
    return f"{call}: " if call else ""


def _shape(x: Array) -> tuple[int, ...]:
    return tuple(getattr(x, "shape", ()))


def _dtype(x: Array) -> Any:
    from .._core.arrays import dtype_name

    return np.dtype(dtype_name(x))  # a Python float: "float", numpy's float64


class LocalSparsityWarning(UserWarning):
    """AutoSparse's default detector found the pattern locally (:class:`LocalSparsityDetector`): the
    tracer cannot run ``f``, which is written in the dense engine's own operations (TensorFlow, MLX,
    PyTensor). Pass ``sparsity_detector=LocalSparsityDetector()`` to choose that knowingly (no
    warning), or ``KnownSparsity(pattern)`` / an array-API ``f`` for a global pattern."""


@dataclasses.dataclass(frozen=True)
class TracerSparsityDetector:
    """The global pattern, from one run of ``f`` on an array of index sets (see ``_tracer``).

    ``f`` must use the array API through ``array_namespace(x)`` (or NumPy functions and operators,
    which the tracer also follows); code it cannot follow (a conversion to NumPy, SciPy, an ``if`` on
    a value) raises a ``TracerError`` naming :class:`LocalSparsityDetector` and :class:`KnownSparsity`.

    Except where the dense engine writes ``f`` in its own operations, which no engine-free tracer
    runs: TensorFlow, MLX and PyTensor (their adapters' ``local_sparsity_fallback``). There, with
    ``local_fallback=True`` (default), an ``f`` the tracer cannot run has its pattern detected by
    :class:`LocalSparsityDetector` (``LocalSparsityDetector()``'s points, with ``dense``), and a
    :class:`LocalSparsityWarning` says that the pattern is local: exact at the points it was
    computed at, and missing an entry that is zero at all of them but nonzero elsewhere.
    ``local_fallback=False`` raises the ``TracerError`` instead (the JAX, torch and autograd
    behaviour, and that of ``AutoFiniteDiff``).

    Example:

        >>> backend = di.AutoSparse(di.AutoFiniteDiff(), sparsity_detector=di.TracerSparsityDetector())
        >>> prep = di.prepare_jacobian(backend, lambda x: x[1:] * x[:-1], np.ones(4))
        >>> print(prep.sparsity.toarray().astype(int))
        [[1 1 0 0]
         [0 1 1 0]
         [0 0 1 1]]
    """

    local_fallback: bool = True

    def _run(self, problem: Problem, x: Array, contexts: tuple[Any, ...], hessian: bool) -> tuple[Any, Any]:
        import scipy.sparse as sp

        from .._core.contexts import context_values
        from ._tracer import Trace, Tracer, TracerError

        shape = _shape(x)
        n = math.prod(shape)
        trace = Trace(n, hessian)
        tracer = Tracer(cast("csr_array", sp.eye_array(n, dtype=bool, format="csr")), shape, trace, _dtype(x))
        try:
            y = problem.function(tracer, *context_values(contexts, lambda v: v))
        except TracerError as error:
            raise TracerError(f"{_call(problem)}{error}") from error
        except Exception as error:  # f failed on the tracer: the tracer cannot follow it
            raise TracerError(
                f"{_call(problem)}the sparsity tracer could not run f ({type(error).__name__}: {error}); f must "
                f"compute with array_namespace(x) or NumPy. For jax.numpy code use "
                f"sparsity_detector=JaxprSparsityDetector(); otherwise LocalSparsityDetector() or KnownSparsity(pattern)"
            ) from error
        return y, trace

    def _fallback(self, error: Exception, problem: Problem, dense: Any, which: str) -> LocalSparsityDetector:
        """The local detector where ``dense``'s engine declares ``local_sparsity_fallback``, with the
        warning; else ``error`` raised."""
        from .._core.configs import AbstractBackend, adapter_for

        adapter = adapter_for(dense, _call(problem) or "AutoSparse") if isinstance(dense, AbstractBackend) else None
        if not (self.local_fallback and getattr(adapter, "local_sparsity_fallback", False)):
            raise error
        local = LocalSparsityDetector()
        cause = error.__cause__ or error
        warnings.warn(
            f"{_call(problem)}the {which} pattern is detected locally: the sparsity tracer cannot run f (as for "
            f"any f written in {dense!r}'s own operations), so the pattern is the nonzeros of dense {which}s by "
            f"{dense!r} at x "
            f"and {local.points - 1} random points around it. An entry zero at all of them is taken as "
            f"structurally zero, and the sparse {which} would miss it where it is not. For a global pattern pass "
            f"sparsity_detector=KnownSparsity(pattern) or write f with array_namespace(x); "
            f"sparsity_detector=LocalSparsityDetector() chooses this without the warning. (The tracer: "
            f"{type(cause).__name__}: {cause})",
            LocalSparsityWarning,
            stacklevel=2,
        )
        return local

    def jacobian_sparsity(self, problem: Problem, x: Array, contexts: tuple[Any, ...] = (), dense: Any = None) -> Any:
        from ._tracer import Tracer, TracerError

        try:
            y, trace = self._run(problem, x, contexts, hessian=False)
        except TracerError as error:
            return self._fallback(error, problem, dense, "Jacobian").jacobian_sparsity(problem, x, contexts, dense)
        if not isinstance(y, Tracer):  # f(x) does not depend on x
            return csr_pattern(np.zeros((int(np.size(y)), trace.n), dtype=bool))
        return csr_pattern(y.rows())

    def hessian_sparsity(self, problem: Problem, x: Array, contexts: tuple[Any, ...] = (), dense: Any = None) -> Any:
        from ._tracer import TracerError

        try:
            _, trace = self._run(problem, x, contexts, hessian=True)
        except TracerError as error:
            return self._fallback(error, problem, dense, "Hessian").hessian_sparsity(problem, x, contexts, dense)
        return csr_pattern(trace.hessian)


@dataclasses.dataclass(frozen=True, eq=False)
class KnownSparsity:
    """A sparsity pattern given by the user.

    ``pattern`` (any ``scipy.sparse`` matrix or array-like whose nonzeros are the structural
    nonzeros) for whichever of the Jacobian or the Hessian is asked, or ``jacobian=`` and
    ``hessian=`` separately. Compared and hashed by identity.

    Example:

        >>> backend = di.AutoSparse(di.AutoFiniteDiff(), sparsity_detector=di.KnownSparsity(np.eye(3)))
        >>> prep = di.prepare_jacobian(backend, lambda x: np.exp(x), np.zeros(3))
        >>> print(prep.colors)  # one color: the diagonal in one pushforward
        [0 0 0]
    """

    pattern: Any = None
    jacobian: Any = None
    hessian: Any = None

    def __post_init__(self) -> None:
        if self.pattern is None and self.jacobian is None and self.hessian is None:
            raise ValueError("KnownSparsity(): give the pattern (or jacobian= and/or hessian=)")

    def _get(self, which: str, shape: tuple[int, int]) -> Any:
        given = getattr(self, which)
        given = self.pattern if given is None else given
        if given is None:
            raise ValueError(f"KnownSparsity has no {which} pattern: pass KnownSparsity({which}=...)")
        try:
            return csr_pattern(given, shape)
        except ValueError as error:
            raise ValueError(
                f"KnownSparsity: the {which} pattern has the wrong shape: {error} "
                f"(rows: the elements of {'f(x)' if which == 'jacobian' else 'x'}, columns: the elements of x)"
            ) from None

    def jacobian_sparsity(self, problem: Problem, x: Array, contexts: tuple[Any, ...] = (), dense: Any = None) -> Any:
        return self._get("jacobian", (problem.y_size, math.prod(_shape(x))))

    def hessian_sparsity(self, problem: Problem, x: Array, contexts: tuple[Any, ...] = (), dense: Any = None) -> Any:
        n = math.prod(_shape(x))
        return self._get("hessian", (n, n))


@dataclasses.dataclass(frozen=True)
class LocalSparsityDetector:
    """The nonzeros of the dense derivative at ``x`` and at random points around it.

    The dense Jacobian (or Hessian) is computed by the dense backend at ``x`` and at
    ``points - 1`` random points around it (``x + scale * (1 + |x|) * N(0, 1)``, seeded). *Local*:
    an entry that happens to be zero at all of them is taken as structurally zero, so the sparse
    result would miss it wherever it is not; use it for code the tracer cannot follow, and prefer a
    known or traced pattern when one exists.

    Example:

        >>> backend = di.AutoSparse(di.AutoFiniteDiff(), sparsity_detector=di.LocalSparsityDetector())
        >>> prep = di.prepare_jacobian(backend, lambda x: x * x[0], np.array([1.0, 2.0, 3.0]))
        >>> print(prep.sparsity.toarray().astype(int))  # the nonzeros at this point
        [[1 0 0]
         [1 1 0]
         [1 0 1]]
    """

    points: int = 3
    scale: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        if not (isinstance(self.points, int) and self.points >= 1):
            raise ValueError(f"LocalSparsityDetector(points={self.points!r}): points must be an integer >= 1")

    def _points(self, x: Array) -> list[Any]:
        from .._core.arrays import families, family, to_family

        base = np.asarray(to_family(x, "numpy"), dtype=float)
        rng = np.random.default_rng(self.seed)
        out = [x]
        dtype, fam = _dtype(x), family(x)
        record = families().get(fam) if fam is not None else None
        for _ in range(self.points - 1):
            p = base + self.scale * (1 + np.abs(base)) * rng.standard_normal(base.shape)
            # in x's own dtype: a float64 JAX x stays float64 where JAX's x64 setting is off
            with record.computing(dtype) if record is not None else contextlib.nullcontext():
                out.append(to_family(p.astype(dtype), fam, like=x))
        return out

    def _union(self, mats: list[Any]) -> Any:
        from .._core.arrays import to_family

        total = None
        for m in mats:
            nz = np.asarray(to_family(m, "numpy")) != 0
            total = nz if total is None else (total | nz)
        return total

    def jacobian_sparsity(self, problem: Problem, x: Array, contexts: tuple[Any, ...] = (), dense: Any = None) -> Any:
        from ..first_order import jacobian

        kwargs = {"y": problem.y} if problem.y is not None else {}
        mats = [jacobian(dense, problem.f, p, *contexts, **kwargs) for p in self._points(x)]
        total = self._union(mats)
        n = math.prod(_shape(x))
        return csr_pattern(total.reshape(-1, n))

    def hessian_sparsity(self, problem: Problem, x: Array, contexts: tuple[Any, ...] = (), dense: Any = None) -> Any:
        from ..second_order import hessian

        mats = [hessian(dense, problem.f, p, *contexts) for p in self._points(x)]
        n = math.prod(_shape(x))
        total = self._union(mats).reshape(n, n)
        return csr_pattern(total | total.T)
