"""``test_differentiation``: every scenario on every backend, prepared and unprepared, twice each."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import first_order as fo
from .. import second_order as so
from .._core.arrays import JAX, NUMPY, complex_dtype, families, family, to_family
from .._core.configs import AutoFiniteDiff, SecondOrder, adapter_for
from .._core.operators import OPERATORS as RECORDS
from .._core.operators import Operator
from .._core.snapshots import snapshot, unchanged
from .._frontend.sparse_results import densify, is_sparse
from ..sparse import AutoSparse
from ._scenarios import Scenario, default_scenarios
from ._structured_scenarios import _leaves

if TYPE_CHECKING:
    pass


def _functions(op: Operator) -> tuple[Any, ...]:
    """``(plain, value form, prepare, accepts out=, takes a tangent)`` of an operator, by its record."""
    module = fo if op.order == 1 else so
    return (
        getattr(module, op.name),
        getattr(module, op.value_method),
        getattr(module, f"prepare_{op.name}"),
        op.plain_conversion == "out",
        op.tangent is not None,
    )


# operator name (a scenario's ``operator``) -> its public functions and what they take
OPERATORS: dict[str, tuple[Any, ...]] = {name: _functions(op) for name, op in RECORDS.items()}


@dataclasses.dataclass
class Outcome:
    """One scenario on one backend: passed, or the first failure met."""

    scenario: Scenario
    backend: Any
    error: str | None
    seconds: float
    # the complex dtype the backend declares refused (the scenario checked that its calls raise the
    # TypeError that says so, not derivatives), or None
    refused: str | None = None

    @property
    def passed(self) -> bool:
        return self.error is None


def default_tolerance(backend: Any, dtype: Any, second_order: bool) -> float:
    """Scaled tolerance: ``max|result - reference| <= tol * max(1, max|reference|)``; a config that
    defines ``tolerance(dtype, second_order)`` (an added backend, see ``diffinterface.extend``) gives its own."""
    own: Any = getattr(backend, "tolerance", None)
    if own is not None:
        tolerance: float = own(dtype, second_order)
        return float(tolerance)
    single = np.dtype(dtype) == np.float32
    fd = isinstance(backend, AutoFiniteDiff) or (
        isinstance(backend, SecondOrder) and AutoFiniteDiff in (type(backend.outer), type(backend.inner))
    )
    if not fd:
        return 1e-5 if single else 1e-10
    if second_order:
        return 3e-2 if single else 1e-5
    method = getattr(backend, "method", "central")  # a SecondOrder with finite differences is second order
    if method == "complex" and not single:
        return 1e-10
    if method in ("forward", "backward") or single:
        return 1e-2 if single else 1e-5
    return 1e-7


class _Check:
    def __init__(self, scenario: Scenario, backend: Any, tol: float) -> None:
        self.s, self.backend, self.tol = scenario, backend, tol
        x = _leaves(scenario.x)[0]  # of a structure, its first leaf
        self.family = family(x)
        self.dtype = (
            np.float64 if isinstance(x, float) else (to_family(x, NUMPY).dtype if self.family != NUMPY else x.dtype)
        )

    def close(self, what: str, actual: Any, expected: Any) -> None:
        if isinstance(expected, dict):  # a structured result: the same keys, in the same order
            if type(actual) is not type(expected) or list(actual) != list(expected):
                got = list(actual) if isinstance(actual, dict) else type(actual).__name__
                raise AssertionError(
                    f"{what}: expected a {type(expected).__name__} with keys {list(expected)}, got {got}"
                )
            for k in expected:
                self.close(f"{what}[{k!r}]", actual[k], expected[k])
            return
        if isinstance(expected, list) or (isinstance(expected, tuple) and hasattr(expected, "_fields")):
            if type(actual) is not type(expected) or len(actual) != len(expected):
                raise AssertionError(
                    f"{what}: expected a {type(expected).__name__} of {len(expected)}, got {type(actual).__name__}"
                )
            for i, (a, e) in enumerate(zip(actual, expected)):
                self.close(f"{what}[{i}]", a, e)
            return
        if isinstance(expected, tuple):
            if not isinstance(actual, tuple) or len(actual) != len(expected):
                raise AssertionError(
                    f"{what}: expected a tuple of {len(expected)} results, got {type(actual).__name__}"
                )
            for i, (a, e) in enumerate(zip(actual, expected)):
                self.close(f"{what}[{i}]", a, e)
            return
        if is_sparse(actual):  # AutoSparse: compared densified, in its own family
            actual = densify(actual)
        if family(actual) != self.family:
            raise AssertionError(
                f"{what}: expected a {self.family} result (the family of x), got {type(actual).__name__}"
            )
        a = np.asarray(to_family(actual, NUMPY))
        complex_result = np.iscomplexobj(expected)
        e = np.asarray(expected, dtype=np.complex128 if complex_result else np.float64)
        if a.shape != e.shape:
            raise AssertionError(f"{what}: shape {a.shape}, expected {e.shape}")
        # the precision of x; complex where the reference is (a complex x's gradient, a holomorphic f(x))
        real = np.empty(0, dtype=self.dtype).real.dtype
        want = np.result_type(real, np.complex64) if complex_result else real
        if a.dtype != want:
            raise AssertionError(f"{what}: dtype {a.dtype}, expected {np.dtype(want)} (the precision of x)")
        err = float(np.max(np.abs(a.astype(e.dtype) - e))) if e.size else 0.0
        scale = max(1.0, float(np.max(np.abs(e)))) if e.size else 1.0
        if not err <= self.tol * scale:
            raise AssertionError(
                f"{what}: max error {err:.3g} exceeds {self.tol:.1g} x {scale:.3g}\n got      {a.ravel()[:8]}\n expected {e.ravel()[:8]}"
            )

    def unchanged(self, before: list[Any], label: str) -> None:
        s = self.s
        names = ["x", "tangent", "contexts", "y", "captured state"]
        for name, b, a in zip(names, before, [s.x, s.tangent, s.contexts, s.y, s.state]):
            if not unchanged(b, a):
                raise AssertionError(f"{label}: {name} was modified by the call")

    def inputs(self) -> list[Any]:
        s = self.s
        return [snapshot(s.x), snapshot(s.tangent), snapshot(s.contexts), snapshot(s.y), snapshot(s.state)]

    def run(self) -> None:
        s, backend = self.s, self.backend
        if s.sparse and not isinstance(backend, AutoSparse):
            backend = AutoSparse(backend)
        plain, valued, prepare, takes_out, takes_tangent = OPERATORS[s.operator]
        kwargs: dict[str, Any] = {"y": s.y} if s.y is not None else {}
        if s.holomorphic:
            kwargs["holomorphic"] = True
        lead = (s.tangent,) if takes_tangent else ()
        refused = refusal(backend, s)
        if refused is not None:
            # a complex x the engine does not differentiate (Adapter.complex_dtypes): the expected outcome
            # is the call's TypeError, unprepared and prepared
            for attempt in (
                lambda: plain(backend, s.f, s.x, *lead, *s.contexts, **kwargs),
                lambda: prepare(backend, s.f, s.x, *lead, *s.contexts, **kwargs),
            ):
                try:
                    attempt()
                except TypeError:
                    continue
                raise AssertionError(
                    f"{s.operator}: {backend!r} accepted a complex x of {refused}, which it declares refused"
                )
            return
        for prepared in (False, True):
            prep = None
            if prepared:
                prep_x = s.prep_x if s.prep_x is not None else s.x
                prep_lead = (s.prep_tangent if s.prep_tangent is not None else s.tangent,) if takes_tangent else ()
                prep_ctx = s.prep_contexts if s.prep_contexts is not None else s.contexts
                before = self.inputs()
                prep = prepare(backend, s.f, prep_x, *prep_lead, *prep_ctx, **kwargs)
                self.unchanged(before, "preparation")
            mode = "prepared" if prepared else "unprepared"
            for call in (1, 2):
                label = f"{mode} call {call}"
                before = self.inputs()
                result = plain(backend, s.f, s.x, *lead, *s.contexts, prep=prep, **kwargs)
                self.unchanged(before, f"{s.operator} ({label})")
                expected = s.second if s.operator in ("second_derivative", "hvp", "hessian") else s.first
                self.close(f"{s.operator} ({label})", result, expected)
                before = self.inputs()
                outs = valued(backend, s.f, s.x, *lead, *s.contexts, prep=prep, **kwargs)
                self.unchanged(before, f"{valued.__name__} ({label})")
                refs = {
                    "second_derivative": (s.value, s.first, s.second),
                    "hessian": (s.value, s.first, s.second),
                    "hvp": (s.first, s.second),
                }.get(s.operator, (s.value, s.first))
                for i, (got, ref) in enumerate(zip(outs, refs)):
                    self.close(f"{valued.__name__}[{i}] ({label})", got, ref)
                one_array = family(expected) is not None  # a structured x's result may be one array (complex x)
                if takes_out and s.structured and not one_array:
                    try:
                        plain(backend, s.f, s.x, *lead, *s.contexts, prep=prep, out=expected, **kwargs)
                    except TypeError:
                        pass  # out= takes arrays; a structured result is refused
                    else:
                        raise AssertionError(f"{s.operator}(out=...) ({label}) accepted out= for a structured result")
                elif takes_out and _writable_family(self.family) and not isinstance(s.x, float):
                    # a complex x's result: complex in the precision of x
                    dtype = np.result_type(self.dtype, np.complex64) if complex_dtype(expected.dtype) else self.dtype
                    out = (
                        _zeroed(result)
                        if is_sparse(result)
                        else to_family(np.zeros(np.shape(expected), dtype=dtype), self.family)
                    )
                    got = plain(backend, s.f, s.x, *lead, *s.contexts, prep=prep, out=out, **kwargs)
                    if got is not out:
                        raise AssertionError(f"{s.operator}(out=...) ({label}) did not return the out array")
                    self.close(f"{s.operator}(out=...) ({label})", out, expected)


def _writable_family(fam: str | None) -> bool:
    """Whether ``out=`` takes arrays of ``fam`` (immutable arrays, JAX's and TensorFlow's, have no ``out=``)."""
    record = families().get(fam) if fam is not None else None
    return fam != JAX and (record is None or record.copy_into is not None)


def _complex_leaves(x: Any) -> bool:
    return any(complex_dtype(getattr(v, "dtype", None)) for v in _leaves(x))


def refusal(backend: Any, scenario: Scenario) -> str | None:
    """The complex dtype of ``scenario``'s x that ``backend`` declares it does not differentiate
    (``Adapter.complex_dtypes``: its calls raise the TypeError that says so), or None."""
    kinds = {
        np.dtype(to_family(v, NUMPY).dtype).name
        for v in _leaves(scenario.x)
        if complex_dtype(getattr(v, "dtype", None))
    }
    if not kinds:
        return None
    declared = adapter_for(backend, "check").complex_dtypes
    refused = sorted(kinds - set(declared))
    return refused[0] if refused else None


def _zeroed(result: Any) -> Any:
    """A sparse matrix with ``result``'s pattern and zero values: the ``out=`` of a sparse call."""
    if hasattr(result, "toarray"):
        out = result.copy()
        out.data[...] = 0
        return out
    out = result.clone()
    out.values().zero_()
    return out


def check_scenario(backend: Any, scenario: Scenario, tol: float | None = None) -> None:
    """Run one scenario on one backend; raise ``AssertionError`` naming the first failed check."""
    if tol is None:
        x = _leaves(scenario.x)[0]  # of a structure, its first leaf
        dtype = np.float64 if isinstance(x, float) else np.empty(0, to_family(x, NUMPY).dtype).real.dtype
        tol = default_tolerance(backend, dtype, scenario.operator in ("second_derivative", "hvp", "hessian"))
    _Check(scenario, backend, tol).run()


def test_differentiation(
    backends: Iterable[Any] | Any,
    scenarios: Iterable[Scenario] | None = None,
    *,
    tol: float | None = None,
    raise_on_failure: bool = True,
    progress: Callable[[int, int, Outcome], None] | None = None,
) -> list[Outcome]:
    """Run every scenario on every backend: unprepared, then prepared at another point, each called
    twice; checks results, ``value_and_`` agreement, ``out=`` identity, and that the inputs and the
    captured state are unchanged. Returns one :class:`Outcome` per pair; with ``raise_on_failure``
    raises ``AssertionError`` listing the failures.
    """
    if not isinstance(backends, (list, tuple)):
        backends = [backends]
    scenarios = list(default_scenarios() if scenarios is None else scenarios)
    outcomes = []
    total = len(backends) * len(scenarios)
    for backend in backends:
        for scenario in scenarios:
            start = time.perf_counter()
            refused = None
            try:
                refused = refusal(backend, scenario)
                check_scenario(backend, scenario, tol)
                error = None
            except Exception as e:  # every failure is reported, not only assertion errors
                error = f"{type(e).__name__}: {e}" if not isinstance(e, AssertionError) else str(e)
            outcomes.append(Outcome(scenario, backend, error, time.perf_counter() - start, refused))
            if progress is not None:
                progress(len(outcomes), total, outcomes[-1])
    failures = [o for o in outcomes if not o.passed]
    if failures and raise_on_failure:
        lines = [f"{o.scenario.name} on {o.backend!r}: {o.error}" for o in failures[:20]]
        raise AssertionError(f"{len(failures)} of {len(outcomes)} scenario runs failed:\n" + "\n".join(lines))
    return outcomes


test_differentiation.__test__ = False  # type: ignore[attr-defined]  # not a pytest test itself
