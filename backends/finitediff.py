"""``AutoFiniteDiff``: finite differences on ``x``'s own array type, through the array API.

First order follows ``scipy.optimize.approx_derivative``: per-coordinate absolute steps
``h_i = r * sign(x_i) * max(1, |x_i|)`` with ``r = eps**(1/2)`` (forward, backward, complex) or
``eps**(1/3)`` (central), ``eps`` that of ``x``'s dtype, or ``h_i = rel_step * sign(x_i) * |x_i|`` when
``rel_step`` is given (falling back to the default where that step is zero); the divisor is the
representable difference of the two points. A Jacobian costs ``n`` evaluations of ``f`` (complex),
``n + 1`` (forward, backward) or ``2n`` (central), plus one for the value where it is asked for and
not already computed. A pushforward along ``t`` takes the largest step ``k`` that moves no coordinate
by more than its own step above: ``k = min over t_i != 0 of |h_i| / |t_i|`` (one scale for all
coordinates, ``max|x|``, made the error 6e-4 at ``x = [100, -0.5]``, where SciPy's per-coordinate steps
give 6e-8). A NaN or inf coordinate gets the step of a coordinate of 1 (it stays NaN in its own
entries and does not set the step of the others); in a pushforward an inf coordinate sets no limit
on ``k`` (it stays inf whatever the step) and a NaN one limits it as a coordinate of 1 would.

``f`` never receives the user's ``x`` itself: where it is evaluated at ``x``, it gets a copy, so that
an ``f`` that writes into its input leaves the caller's array unchanged.

Second order uses central second differences with ``r = eps**(1/4)`` whatever the first-order method:
``H_ij = [f(x+h_i e_i+h_j e_j) - f(x+h_i e_i-h_j e_j) - f(x-h_i e_i+h_j e_j) + f(x-h_i e_i-h_j e_j)] / (4 h_i h_j)``
(``2n^2 + 1`` evaluations), the same along ``t`` for an hvp (``4n`` per tangent).

With ``method="complex"`` (``Im f(x + i h) / h``) ``f`` must be complex-analytic; the duplicates of its
captured state, caches and output buffer are complex so that what ``f`` writes keeps its imaginary part.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np
from array_api_compat import array_namespace, device

from diffinterface._adapter import Adapter as _Base
from diffinterface._adapter import Runners
from diffinterface._arrays import NUMPY, dtype_name, families, family, is_array, private_copy, to_family
from diffinterface._bench import Engine as BenchEngine
from diffinterface._bench import approx_derivative as _approx_derivative
from diffinterface._closure import copy_leaf, duplicate, read_only_alias
from diffinterface._contexts import context_values
from diffinterface._errors import structured_output

_ORDER_EXPONENT = {"forward": 1 / 2, "backward": 1 / 2, "complex": 1 / 2, "central": 1 / 3, "second": 1 / 4}


def _complex_leaf(value: Any) -> Any:
    value = copy_leaf(value)
    xp = array_namespace(value)
    if xp.isdtype(value.dtype, "real floating"):
        return xp.astype(value, xp.complex64 if value.dtype == xp.float32 else xp.complex128)
    return value


def _constant_alias(value: Any) -> Any:
    """A ``Constant`` array as ``f`` reads it: a read-only view of a numpy array (a write raises, and
    ``f`` runs again over copies), a copy of a torch tensor (torch has no read-only tensors; the
    caller's constants are never modified)."""
    alias = read_only_alias(value)
    return copy_leaf(value) if alias is None else alias


def _along(xp: Any, abs_h: Any, t: Any) -> float:
    """The step along ``t``: the largest ``k`` that moves no coordinate by more than its own step,
    ``min over t_i != 0 of |h_i| / |t_i|`` = ``1 / max |t_i| / |h_i|`` (every ``|h_i| > 0``); 0.0
    where ``t`` is zero, NaN where ``t`` has a NaN (the derivative along it is NaN)."""
    if abs_h.shape[0] == 0:
        return 0.0
    top = float(xp.max(xp.abs(xp.reshape(t, (-1,))) / abs_h))
    return 0.0 if top == 0.0 else 1.0 / top


def _step_along(xp: Any, x: Any, t: Any, r: float) -> float | None:
    """:func:`_along` for the default steps ``r * max(1, |x_i|)`` in one expression (its temporaries
    freed as soon as used): ``r / max(|t_i| / max(1, |x_i|))``. An inf coordinate of ``x`` sets no
    limit on the step (its ratio is 0: it stays inf whatever the step, and does not shrink the step
    of the others); a NaN one makes the maximum NaN: None, and the caller takes the exact path, where
    it gets the step of a coordinate of 1."""
    if 0 in x.shape:
        return 0.0
    if type(x) is np.ndarray and type(t) is np.ndarray and x.ndim and t.ndim:  # numpy's out=: two temporaries
        scale = np.abs(x)
        np.maximum(scale, 1.0, out=scale)
        ratio = np.abs(t)
        np.divide(ratio, scale, out=ratio)
        top = float(np.max(ratio))
    else:
        scale = xp.abs(x)  # maximum with an array of ones: array-api-compat 1.11's torch maximum takes no number
        top = float(xp.max(xp.abs(t) / xp.maximum(scale, xp.ones_like(scale))))
    if not math.isfinite(top):
        return None
    return 0.0 if top == 0.0 else r / top


class _Along:
    """The preparation of a pushforward: the output's :class:`Info`, and the namespace and relative
    step of ``x``'s type and dtype, reused while calls bring the same (a call with another, under
    ``strict=False``, looks them up)."""

    __slots__ = ("info", "exponent", "kind", "dtype", "xp", "r")
    kind: Any
    dtype: Any
    xp: Any
    r: float

    def __init__(self, info: Any, x: Any, exponent: float) -> None:
        self.info, self.exponent = info, exponent
        self.kind = None
        self.namespace(x)

    def namespace(self, x: Any) -> tuple[Any, float]:
        """``x``'s array namespace and relative step ``eps ** exponent``."""
        if type(x) is not self.kind or x.dtype != self.dtype:
            self.kind, self.dtype, self.xp = type(x), x.dtype, array_namespace(x)
            self.r = float(np.finfo(np.dtype(dtype_name(x))).eps) ** self.exponent
        return self.xp, self.r


class _Points:
    """The flat point, its steps and the helpers that perturb it, for one call."""

    __slots__ = ("xp", "x", "flat", "shape", "n", "idx", "h", "plus", "minus", "dev", "finite")

    def __init__(self, x: Any, exponent: float, rel_step: float | None) -> None:
        xp = self.xp = array_namespace(x)
        self.x, self.shape, self.dev = x, tuple(x.shape), device(x)
        flat = self.flat = xp.reshape(x, (-1,))
        self.n = flat.shape[0]
        self.idx = xp.arange(self.n, device=self.dev)
        r = float(xp.finfo(x.dtype).eps) ** exponent
        sign = xp.where(
            flat >= 0, xp.asarray(1.0, dtype=x.dtype, device=self.dev), xp.asarray(-1.0, dtype=x.dtype, device=self.dev)
        )
        default = r * sign * xp.maximum(xp.abs(flat), xp.ones_like(flat))
        if rel_step is None:
            h = default
        else:
            h = rel_step * sign * xp.abs(flat)
            h = xp.where((flat + h) - flat == 0, default, h)
        # A NaN or inf coordinate gets a finite step and the nominal divisor, so that it makes its own
        # entries NaN without poisoning the derivatives with respect to the other coordinates.
        finite = xp.isfinite(flat)
        h = xp.where(finite, h, r * xp.ones_like(flat))
        self.h, self.plus, self.minus = h, flat + h, flat - h
        self.finite = finite

    def along(self, t: Any) -> float:
        """The step along ``t`` (see :func:`_along`)."""
        return _along(self.xp, self.xp.abs(self.h), t)

    def divisor(self, method: str) -> Any:
        """The representable distance between the two points of each coordinate's difference."""
        xp = self.xp
        if method == "central":
            return xp.where(self.finite, self.plus - self.minus, 2 * self.h)
        if method == "forward":
            return xp.where(self.finite, self.plus - self.flat, self.h)
        return xp.where(self.finite, self.flat - self.minus, self.h)

    def at(self, i: int, values: Any) -> Any:
        """The point with coordinate ``i`` taken from ``values`` (a perturbed copy of the flat point)."""
        return self.xp.reshape(self.xp.where(self.idx == i, values, self.flat), self.shape)

    def point(self, flat: Any) -> Any:
        return self.xp.reshape(flat, self.shape)


def _computing(x: Any) -> Any:
    """The context in which x's library keeps x's dtype (a no-op for NumPy)."""
    record = families().get(family(x) or NUMPY)
    if record is None or record.name == NUMPY:
        return contextlib.nullcontext()
    return record.computing(x.dtype)


class Adapter(_Base):
    """Finite differences; see the module docstring for steps and evaluation counts."""

    evaluates_only = True  # an outer finite difference differentiates any inner engine's results

    def __init__(self, backend: Any) -> None:
        super().__init__(backend)
        self.method: str = backend.method
        self.rel_step: float | None = backend.rel_step
        # the frontend refuses a complex x for a complex step: it steps along the imaginary axis of a real x
        self.complex_step = self.method == "complex"

    # -- evaluations ---------------------------------------------------------------------------

    def _evaluator(
        self, target: Any, contexts: tuple[Any, ...], x: Any, complex_step: bool = False, xp: Any = None
    ) -> Any:
        """``point -> f(point)`` as an array, each evaluation over fresh duplicates of the state
        (``xp``: ``x``'s namespace, when the caller has it)."""
        xp = xp or array_namespace(x)
        dtype, dev = x.dtype, device(x)
        leaf = _complex_leaf if complex_step else copy_leaf
        const = target.closure == "const"

        fam = family(x)

        def as_array(y: Any) -> Any:
            if not is_array(y):  # a Python number
                if isinstance(y, (tuple, list, dict)):
                    raise structured_output(y, target.call)
                return xp.asarray(y, dtype=dtype if not isinstance(y, complex) else None, device=dev)
            if family(y) != fam:  # f computed in another library (a numpy buffer read by a torch f)
                return to_family(np.asarray(y) if family(y) == NUMPY else y, fam, like=x)
            # under "const", f may return a buffer it reuses; a read-only y is an alias of the user's array
            return copy_leaf(y) if const or (type(y) is np.ndarray and not y.flags.writeable) else y

        if target.plain and not contexts and not complex_step:
            f = target.f
            return lambda point: as_array(f(point))

        def evaluate(point: Any) -> Any:
            def run(aliased: bool) -> Any:  # f reads its arrays through read-only views until it writes
                constant = _constant_alias if aliased else copy_leaf
                values = context_values(contexts, lambda v: duplicate(v, leaf), lambda v: duplicate(v, constant))
                return as_array(target.instance(leaf, guard=read_only_alias if aliased else None)(point, *values))

            return target.guarded_with(run, bool(contexts))

        return evaluate

    def evaluate(self, target: Any, x: Any, contexts: Any) -> Any:
        if type(x) is np.ndarray:  # no dtype context to enter (the prepared hessian's value: no extra call)
            return self._evaluator(target, contexts, x)(private_copy(x))
        with _computing(x):
            return self._evaluator(target, contexts, x)(private_copy(x))

    def prepare(
        self, operator: str, target: Any, x: Any, tangents: tuple[Any, ...], contexts: tuple[Any, ...], info: Any
    ) -> Any:
        """The base runners, run inside the context in which x's library keeps x's dtype (JAX's
        ``enable_x64`` for float64 x without global x64: else the steps and f's values were float32)."""
        with _computing(x):
            runners = super().prepare(operator, target, x, tangents, contexts, info)
        if family(x) in (NUMPY, None):
            return runners
        plain, value = runners.plain, runners.value

        def plain_in(x: Any, ts: Any, cs: Any) -> Any:
            with _computing(x):
                return plain(x, ts, cs)

        def value_in(x: Any, ts: Any, cs: Any) -> Any:
            with _computing(x):
                return value(x, ts, cs)

        return Runners(plain_in, value_in, runners.data)

    def _exponent(self, order: str) -> float:
        return _ORDER_EXPONENT[order if order == "second" else self.method]

    # -- first order -----------------------------------------------------------------------------

    def _jacobian(self, data: Any, target: Any, x: Any, contexts: tuple[Any, ...], want_value: bool) -> tuple[Any, ...]:
        """``(f(x) or None, J)`` by per-coordinate differences, J of shape ``y_shape + x_shape``."""
        method = self.method
        p = _Points(x, self._exponent("first"), self.rel_step)
        xp, n = p.xp, p.n
        y0 = data.take_value()
        if method == "complex":
            ev = self._evaluator(target, contexts, x, complex_step=True)
            cdtype = xp.complex64 if x.dtype == xp.float32 else xp.complex128
            cflat = xp.astype(p.flat, cdtype)
            shifted = cflat + xp.astype(p.h, cdtype) * 1j
            cols = []
            for i in range(n):
                y = ev(xp.reshape(xp.where(p.idx == i, shifted, cflat), p.shape))
                if not xp.isdtype(y.dtype, "complex floating"):
                    raise TypeError(
                        f"jacobian({self.backend!r}, f, x): method='complex' needs f to compute in complex "
                        f"arithmetic, but f returned {y.dtype} for a complex x; use method='central'"
                    )
                cols.append(xp.imag(y) / p.h[i])
            if want_value and y0 is None:
                y0 = self.evaluate(target, x, contexts)
        else:
            ev = self._evaluator(target, contexts, x)
            if method != "central" or want_value:
                y0 = ev(private_copy(x)) if y0 is None else y0
            dx = p.divisor(method)
            cols = []
            for i in range(n):
                if method == "central":
                    cols.append((ev(p.at(i, p.plus)) - ev(p.at(i, p.minus))) / dx[i])
                elif method == "forward":
                    cols.append((ev(p.at(i, p.plus)) - y0) / dx[i])
                else:
                    cols.append((y0 - ev(p.at(i, p.minus))) / dx[i])
        y_shape, x_shape = data.y_shape, data.x_shape
        if n == 0:
            return y0, xp.zeros(y_shape + x_shape, dtype=x.dtype, device=p.dev)
        jac = xp.reshape(xp.stack([xp.reshape(c, (-1,)) for c in cols], axis=1), y_shape + x_shape)
        return y0, jac

    def prepare_jacobian(self, target: Any, x: Any, contexts: Any, info: Any) -> Any:
        return info

    def value_and_jacobian(self, data: Any, target: Any, x: Any, contexts: Any) -> Any:
        return self._jacobian(data, target, x, contexts, True)

    def jacobian(self, data: Any, target: Any, x: Any, contexts: Any) -> Any:
        return self._jacobian(data, target, x, contexts, False)[1]

    # gradient and derivative are Jacobians of shape x.shape and f(x).shape: same code, same counts.
    prepare_gradient = prepare_derivative = prepare_jacobian
    value_and_gradient = value_and_derivative = value_and_jacobian
    gradient = derivative = jacobian

    def _pushforward(self, data: Any, target: Any, x: Any, tangents: Any, contexts: Any, want_value: Any) -> Any:
        if type(data) is not _Along:  # an Info from another adapter's preparation (one that delegates here)
            data = _Along(data, x, self._exponent("first"))
        xp, r = data.namespace(x)
        y0 = data.info.take_value()
        complex_step = self.method == "complex"
        ev = self._evaluator(target, contexts, x, complex_step=complex_step, xp=xp)
        if (want_value or self.method in ("forward", "backward")) and y0 is None:
            y0 = self.evaluate(target, x, contexts)
        abs_h = None
        results = []
        for t in tangents:
            k = _step_along(xp, x, t, r) if self.rel_step is None else None
            if k is None:  # rel_step, or a NaN coordinate: every step as _Points takes it
                if abs_h is None:
                    abs_h = xp.abs(_Points(x, self._exponent("first"), self.rel_step).h)
                k = _along(xp, abs_h, t)
            if k == 0.0:
                results.append(xp.zeros(data.info.y_shape, dtype=x.dtype, device=device(x)))
                continue
            # k is a Python float: x's dtype is kept (NEP 50 in numpy >= 2, weak scalars in JAX and torch)
            if complex_step:
                cdtype = xp.complex64 if x.dtype == xp.float32 else xp.complex128
                results.append(xp.imag(ev(xp.astype(x, cdtype) + (1j * k) * xp.astype(t, cdtype))) / k)
            elif self.method == "central":
                results.append((ev(x + k * t) - ev(x - k * t)) / (2 * k))
            elif self.method == "forward":
                results.append((ev(x + k * t) - y0) / k)
            else:
                results.append((y0 - ev(x - k * t)) / k)
        return y0, tuple(results)

    def prepare_pushforward(self, target: Any, x: Any, tangents: Any, contexts: Any, info: Any) -> Any:
        return _Along(info, x, self._exponent("first"))

    def value_and_pushforward(self, data: Any, target: Any, x: Any, tangents: Any, contexts: Any) -> Any:
        return self._pushforward(data, target, x, tangents, contexts, True)

    def pushforward(self, data: Any, target: Any, x: Any, tangents: Any, contexts: Any) -> Any:
        return self._pushforward(data, target, x, tangents, contexts, False)[1]

    # -- second order: central second differences ------------------------------------------------

    def prepare_second_derivative(self, target: Any, x: Any, contexts: Any, info: Any) -> Any:
        return info

    prepare_hessian = prepare_second_derivative

    def prepare_hvp(self, target: Any, x: Any, tangents: Any, contexts: Any, info: Any) -> Any:
        return info

    def _hessian(self, data: Any, target: Any, x: Any, contexts: Any, y0: Any) -> Any:
        p = _Points(x, self._exponent("second"), self.rel_step)
        xp, n, h = p.xp, p.n, p.h
        ev = self._evaluator(target, contexts, x)
        flat = p.flat
        rows = [[None] * n for _ in range(n)]
        for i in range(n):
            ei = xp.where(p.idx == i, h, xp.zeros_like(h))
            for j in range(i, n):
                ej = xp.where(p.idx == j, h, xp.zeros_like(h))
                if i == j:
                    value = (ev(p.point(flat + 2 * ei)) - 2 * y0 + ev(p.point(flat - 2 * ei))) / (4 * h[i] * h[i])
                else:
                    value = (
                        ev(p.point(flat + ei + ej))
                        - ev(p.point(flat + ei - ej))
                        - ev(p.point(flat - ei + ej))
                        + ev(p.point(flat - ei - ej))
                    ) / (4 * h[i] * h[j])
                rows[i][j] = rows[j][i] = xp.reshape(xp.asarray(value), ())
        if n == 0:
            return xp.zeros(p.shape + p.shape, dtype=x.dtype, device=p.dev)
        return xp.reshape(xp.stack([xp.stack(r) for r in rows]), p.shape + p.shape)

    def _hvp(self, data: Any, target: Any, x: Any, tangents: Any, contexts: Any) -> Any:
        p = _Points(x, self._exponent("second"), self.rel_step)
        xp, n, h, flat = p.xp, p.n, p.h, p.flat
        ev = self._evaluator(target, contexts, x)
        results = []
        for t in tangents:
            k = p.along(t) if n else 0.0
            if k == 0.0:
                results.append(xp.zeros(p.shape, dtype=x.dtype, device=p.dev))
                continue
            tk = k * xp.reshape(t, (-1,))
            out = []
            for i in range(n):
                ei = xp.where(p.idx == i, h, xp.zeros_like(h))
                value = (
                    ev(p.point(flat + ei + tk))
                    - ev(p.point(flat + ei - tk))
                    - ev(p.point(flat - ei + tk))
                    + ev(p.point(flat - ei - tk))
                ) / (4 * h[i] * k)
                out.append(xp.reshape(xp.asarray(value), ()))
            results.append(xp.reshape(xp.stack(out), p.shape))
        return tuple(results)

    def _value(self, data: Any, target: Any, x: Any, contexts: Any) -> Any:
        y0 = data.take_value()
        return self.evaluate(target, x, contexts) if y0 is None else y0

    def hessian(self, data: Any, target: Any, x: Any, contexts: Any) -> Any:
        return self._hessian(data, target, x, contexts, self._value(data, target, x, contexts))

    def value_gradient_and_hessian(self, data: Any, target: Any, x: Any, contexts: Any) -> Any:
        y0 = self._value(data, target, x, contexts)
        grad = self._jacobian(data, target, x, contexts, False)[1]
        return y0, grad, self._hessian(data, target, x, contexts, y0)

    def hvp(self, data: Any, target: Any, x: Any, tangents: Any, contexts: Any) -> Any:
        return self._hvp(data, target, x, tangents, contexts)

    def gradient_and_hvp(self, data: Any, target: Any, x: Any, tangents: Any, contexts: Any) -> Any:
        grad = self._jacobian(data, target, x, contexts, False)[1]
        return grad, self._hvp(data, target, x, tangents, contexts)

    def _second_derivative(self, x: Any, y0: Any, ev: Any) -> Any:
        p = _Points(x, self._exponent("second"), self.rel_step)
        xp = p.xp
        step = xp.reshape(p.divisor("central"), ()) / 2
        return (ev(xp.reshape(p.plus, ())) - 2 * y0 + ev(xp.reshape(p.minus, ()))) / (step * step)

    def second_derivative(self, data: Any, target: Any, x: Any, contexts: Any) -> Any:
        ev = self._evaluator(target, contexts, x)
        return self._second_derivative(x, self._value(data, target, x, contexts), ev)

    def value_derivative_and_second_derivative(self, data: Any, target: Any, x: Any, contexts: Any) -> Any:
        y0 = self._value(data, target, x, contexts)
        der = self._jacobian(data, target, x, contexts, False)[1]
        return y0, der, self._second_derivative(x, y0, self._evaluator(target, contexts, x))


# -- the bench record: the direct calls AutoFiniteDiff is compared with ---------------------------


class Bench(BenchEngine):
    """SciPy's ``approx_derivative`` (gradient, jacobians) and a central difference along ``t``."""

    # an evaluation of f per coordinate: the sizes where that stays reasonable
    limits = {"gradient": 1_000, "jacobian tall": 100_000, "jacobian wide": 1_000, "pushforward": 1_000_000}
    costs = {
        "pushforward": "per-coordinate steps r*max(1, |x_i|) (SciPy's rule; the hand-written difference takes one "
        "scale, max|x|): |x|, a maximum, |t| and a division over n; at n = 10, the prep check, the namespace and step lookups and the evaluator's checks of f(x)",
    }

    def native(self, operator: Any, f: Any, x: Any, t: Any, A: Any) -> Any:
        approx_derivative = _approx_derivative()

        if operator in ("gradient", "jacobian tall", "jacobian wide"):
            return lambda: approx_derivative(f, x, method="3-point")
        if operator == "pushforward":  # central difference along t, with the step AutoFiniteDiff takes
            r = np.finfo(x.dtype).eps ** (1 / 3)

            def central() -> Any:
                h = r * max(1.0, float(np.max(np.abs(x)))) / float(np.max(np.abs(t)))
                return (f(x + h * t) - f(x - h * t)) / (2 * h)

            return central
        return None
