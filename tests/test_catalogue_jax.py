"""JAX's own autodiff catalogue through the library: the ops of ``LAX_GRAD_OPS`` in JAX's
``tests/lax_autodiff_test.py`` (op, number of arguments, order, input distribution, dtypes, shapes,
tolerance) and its special values (``LAX_GRAD_SPECIAL_VALUE_TESTS``), written here as a table.

JAX checks each op with ``check_grads(op, args, order, ["fwd", "rev"])``. Here each case runs through
``AutoJAX`` in its three modes (jacobian, pushforward and pullback; gradient and, for order 2,
hessian and hvp of ``sum(op(x))``; derivative and second derivative for a scalar ``x``; the first
unprepared, then prepared at another point) against ``jax.jacfwd``, ``jax.jacrev``, ``jax.jvp``,
``jax.vjp``, ``jax.grad`` and ``jax.hessian``, and through ``AutoFiniteDiff`` (jacobian, float64)
within the table's tolerance. Two-argument ops take ``x = (lhs, rhs)``, a structured ``x``; complex
dtypes go through pushforward and pullback (the library's convention: ``conj(vjp(conj(ct)))``).
Float64 inputs are made inside ``jax.enable_x64`` and differentiated outside it (global x64 off), as a
float64 checkpoint loaded into a float32 session would be.

Every case ends as one of: agrees with JAX, or raises an error (counted with its type: printed at the
end of the run). A number that differs without an error fails the test.

The budget (each case compiles its own functions: about a second each on a 2-core machine): by
default one dtype per row (float64, or every third row one of its others), one shape combination
(``DIFFINTERFACE_LAX_SHAPES``, a different one for each row; ``0`` tries all of them) and one of
the two modes, in turn; ``DIFFINTERFACE_LAX_FULL=1`` runs every dtype in both modes. ``mode=None``
runs the prepared jacobian (it picks one of the two modes).
"""

from __future__ import annotations

import itertools
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from conftest import catalogue_count

jax = pytest.importorskip("jax", reason='jax is not installed: pip install "diffinterface[jax]"')
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

import diffinterface as di  # noqa: E402

pytestmark = [pytest.mark.catalogue, pytest.mark.filterwarnings("ignore")]

SHAPES_TRIED = int(os.environ.get("DIFFINTERFACE_LAX_SHAPES", "1"))
FULL = bool(os.environ.get("DIFFINTERFACE_LAX_FULL"))  # every dtype of a row and both modes for each case
CATALOGUE = f"JAX {jax.__version__} LAX_GRAD_OPS (AutoJAX x 3 modes x operators, AutoFiniteDiff)"

# JAX's compatible_shapes: the argument shapes of an op are drawn, with replacement, from one group
SHAPE_GROUPS = [[(3,)], [(), (3, 4), (3, 1), (1, 4)], [(2, 3, 4), (2, 1, 4)]]


# -- the input distributions (jax._src.test_util's rand_* factories, in their own words) ---------------


def _default(rng, shape):  # rand_default: normal, scale 3
    return 3.0 * rng.standard_normal(shape)


def _small(rng, shape):  # rand_small: normal, scale 1e-3
    return 1e-3 * rng.standard_normal(shape)


def _positive(rng, shape):  # rand_positive: uniform on [1, 3)
    return 2.0 * rng.random(shape) + 1.0


def _not_small(rng, shape):  # rand_not_small: normal, scale 3, moved 3 away from zero
    v = 3.0 * rng.standard_normal(shape)
    return v + np.where(v > 0, 3.0, -3.0)


def _uniform(low, high):
    def draw(rng, shape):
        return rng.uniform(low, high, shape)

    draw.__name__ = f"uniform({low}, {high})"
    return draw


FLOAT = ("float32", "float64")  # grad_float_dtypes on CPU
COMPLEX = ("complex64", "complex128")
INEXACT = FLOAT + COMPLEX


@dataclass(frozen=True)
class Spec:
    """One row of the table: JAX's ``grad_test_spec(op, nargs, order, rng_factory, dtypes, name, tol)``."""

    name: str
    op: Callable[..., Any]
    nargs: int
    order: int
    draw: Callable[..., Any]
    dtypes: tuple[str, ...]
    tol: float | dict[str, float] | None = None


LAX_GRAD_OPS = [
    Spec("neg", lax.neg, 1, 2, _default, INEXACT),
    Spec("floor", lax.floor, 1, 2, _uniform(0.1, 0.4), FLOAT),
    Spec("ceil", lax.ceil, 1, 2, _uniform(0.1, 0.4), FLOAT),
    Spec("round", lax.round, 1, 2, _uniform(0.1, 0.4), FLOAT),
    Spec("exp", lax.exp, 1, 2, _small, INEXACT),
    Spec("exp2", lax.exp2, 1, 2, _small, INEXACT),
    Spec("expm1", lax.expm1, 1, 2, _default, INEXACT),
    Spec("log", lax.log, 1, 2, _positive, INEXACT),
    Spec("log1p", lax.log1p, 1, 2, _positive, INEXACT),
    Spec("sinh", lax.sinh, 1, 2, _default, FLOAT + ("complex64",), 1e-5),
    Spec("cosh", lax.cosh, 1, 2, _default, INEXACT, 1e-5),
    Spec("tanh", lax.tanh, 1, 2, _default, INEXACT, 2e-4),
    Spec("sin", lax.sin, 1, 2, _default, INEXACT, {"float32": 5e-1}),
    Spec("cos", lax.cos, 1, 2, _default, INEXACT),
    Spec("tan", lax.tan, 1, 2, _uniform(-1.3, 1.3), INEXACT, 1e-3),
    Spec("asin", lax.asin, 1, 2, _uniform(-1.3, 1.3), FLOAT, 1e-3),
    Spec("acos", lax.acos, 1, 2, _uniform(-1.3, 1.3), FLOAT, 2e-2),
    Spec("atan2", lax.atan2, 2, 2, _default, FLOAT),
    Spec("erf", lax.erf, 1, 2, _small, FLOAT),
    Spec("erfc", lax.erfc, 1, 2, _small, FLOAT),
    Spec("erf_inv", lax.erf_inv, 1, 2, _small, FLOAT),
    Spec("bessel_i0e", lax.bessel_i0e, 1, 2, _default, FLOAT),
    Spec("bessel_i1e", lax.bessel_i1e, 1, 2, _default, FLOAT),
    Spec("real", lax.real, 1, 2, _default, COMPLEX),
    Spec("imag", lax.imag, 1, 2, _default, COMPLEX),
    Spec("complex", lax.complex, 2, 2, _default, FLOAT),
    Spec("conj", lax.conj, 1, 2, _default, INEXACT),
    Spec("abs", lax.abs, 1, 2, _positive, INEXACT),
    Spec("pow", lax.pow, 2, 2, _positive, INEXACT, {"float32": 3e-1}),
    Spec("sqrt", lax.sqrt, 1, 2, _positive, FLOAT),
    Spec("sqrt_complex", lax.sqrt, 1, 2, _default, COMPLEX),
    Spec("rsqrt", lax.rsqrt, 1, 2, _positive, FLOAT),
    Spec("rsqrt_complex", lax.rsqrt, 1, 2, _default, COMPLEX, {"float64": 2e-3}),
    Spec("cbrt", lax.cbrt, 1, 2, _not_small, FLOAT, {"float64": 5e-3}),
    Spec("logistic", lax.logistic, 1, 2, _default, INEXACT),
    Spec("add", lax.add, 2, 2, _default, INEXACT),
    Spec("sub", lax.sub, 2, 2, _default, INEXACT),
    Spec("mul", lax.mul, 2, 2, _default, INEXACT),
    Spec("div", lax.div, 2, 1, _not_small, INEXACT),
    Spec("max", lax.max, 2, 2, _default, FLOAT),
    Spec("min", lax.min, 2, 2, _default, FLOAT),
]

# LAX_GRAD_SPECIAL_VALUE_TESTS: the op at given scalar points, second order, float64
SPECIAL_VALUES = [
    ("sinh", lax.sinh, (0.0,), None),
    ("cosh", lax.cosh, (0.0,), None),
    ("tanh", lax.tanh, (0.0, 1000.0), 5e-3),
    ("sin", lax.sin, (0.0, np.pi, np.pi / 2.0, np.pi / 4.0), None),
    ("cos", lax.cos, (0.0, np.pi, np.pi / 2.0, np.pi / 4.0), None),
    ("tan", lax.tan, (0.0,), None),
    ("asin", lax.asin, (0.0,), None),
    ("acos", lax.acos, (0.0,), None),
    ("atan", lax.atan, (0.0, 1000.0), None),
    ("erf", lax.erf, (0.0, 10.0), None),
    ("erfc", lax.erfc, (0.0, 10.0), None),
]


def _shape_combos(nargs: int, row: int) -> list[tuple]:
    """JAX's shape combinations for ``nargs`` arguments; ``SHAPES_TRIED`` of them, evenly spaced from
    an offset that moves with the table's row (so that the rows together try every combination)."""
    combos = [c for group in SHAPE_GROUPS for c in itertools.combinations_with_replacement(group, nargs)]
    if SHAPES_TRIED and len(combos) > SHAPES_TRIED:
        step = len(combos) / SHAPES_TRIED
        combos = [combos[(row + int(i * step)) % len(combos)] for i in range(SHAPES_TRIED)]
    return combos


def _fd_tol(spec_tol, dtype: str) -> float:
    """AutoFiniteDiff's tolerance: the table's (JAX's check_grads tolerance), at least 1e-5."""
    if isinstance(spec_tol, dict):
        spec_tol = spec_tol.get(dtype)
    return max(1e-5, spec_tol or 0.0)


# -- checking ------------------------------------------------------------------------------------------


def _np(value) -> np.ndarray:
    return np.asarray(value)


def _close(got, want, rtol: float, outside: bool = False) -> bool:
    """Within ``rtol`` where JAX's derivative is a number. Where it is NaN (a point outside the op's
    domain, ``asin(1.2)``: JAX's Jacobian has NaN rows, its one-hot tangents times NaN) there is no
    derivative to compare with."""
    got, want = _np(got), _np(want)
    if got.shape != want.shape:
        return False
    defined = ~np.isnan(want)
    if outside:  # f(x) itself has NaN entries: a mode may spread them (0 * NaN) where another does not
        defined &= ~np.isnan(got)
    got, want = got[defined], want[defined]
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    return bool(np.allclose(got, want, rtol=rtol, atol=rtol * max(1.0, scale)))


def _leaves(value) -> list:
    """The arrays of a result or a reference (tuples for a two-argument op, nested for its Hessian)."""
    return jax.tree_util.tree_leaves(value)


class Runner:
    def __init__(self, name: str):
        self.name = name
        self.wrong: list[str] = []
        self.outside = False  # f(x) has NaN entries at this case's x (outside the op's domain)

    def check(self, label: str, thunk, want, rtol: float, x=None, x_before=None) -> None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = thunk()
        except Exception as error:  # noqa: BLE001 - every error is an allowed outcome, counted by type
            catalogue_count(CATALOGUE, f"error {type(error).__name__} ({label.split(' ')[0]})")
            if os.environ.get("DIFFINTERFACE_LAX_VERBOSE"):
                print(f"{self.name}: {label}: {type(error).__name__}: {str(error)[:300]}")
            return
        got_leaves, want_leaves = _leaves(got), _leaves(want)
        ok = len(got_leaves) == len(want_leaves) and all(
            _close(g, w, rtol, self.outside) for g, w in zip(got_leaves, want_leaves)
        )
        if ok and self.outside:
            catalogue_count(CATALOGUE, "agree where both are not NaN (f(x) has NaN entries: x outside the op's domain)")
        elif ok:
            catalogue_count(CATALOGUE, "agree")
        else:
            diffs = [
                float(np.max(np.abs(_np(g) - _np(w)))) if _np(g).shape == _np(w).shape else "shape"
                for g, w in zip(got_leaves, want_leaves)
            ]
            self.wrong.append(f"{self.name}: {label} differs from JAX by {diffs}")
        if x is not None and not all(np.array_equal(_np(a), b) for a, b in zip(_leaves(x), x_before)):
            self.wrong.append(f"{self.name}: {label} changed x")


def _run_case(
    runner: Runner, op, shapes: tuple, dtype: str, draw, order: int, fd_tol: float | None, seed: int, modes: tuple
):
    rng = np.random.default_rng(seed)
    complex_dtype = dtype.startswith("complex")
    values = []
    for shape in shapes:
        v = draw(rng, shape)
        if complex_dtype:
            v = v + 1j * draw(rng, shape)
        values.append(np.asarray(v, dtype=dtype))
    nargs = len(shapes)
    with jax.enable_x64(True):
        args = tuple(jnp.asarray(v) for v in values)
        x = args if nargs > 1 else args[0]
        x2 = tuple(a + 0.01 for a in args) if nargs > 1 else args[0] + 0.01
        x_before = [np.asarray(a) for a in args]

        def f(z):
            return op(*z) if nargs > 1 else op(z)

        try:
            y = f(x)
        except Exception:  # noqa: BLE001 - JAX's own op refuses these arguments
            catalogue_count(CATALOGUE, "not tried: JAX's op refuses these shapes or dtypes")
            return
        y = jnp.asarray(y)
        runner.outside = bool(np.isnan(np.asarray(y)).any())
        argnums = tuple(range(nargs)) if nargs > 1 else 0

        def g(*zs):
            return jnp.sum(f(zs if nargs > 1 else zs[0]).real)

        def direction(shape):
            v = rng.standard_normal(shape)
            return v + 1j * rng.standard_normal(shape) if complex_dtype else v

        t = tuple(jnp.asarray(np.asarray(direction(a.shape), dtype=dtype)) for a in args)
        t = t if nargs > 1 else t[0]
        ct = jnp.asarray(np.asarray(rng.standard_normal(y.shape), dtype=y.dtype))
        _, jvp = jax.jvp(f, (x,), (t,))
        _, vjp_fn = jax.vjp(f, x)
        vjp = vjp_fn(jnp.conj(ct))[0]
        vjp = tuple(jnp.conj(v) for v in vjp) if nargs > 1 else jnp.conj(vjp)
        real_in = not complex_dtype
        real_out = not jnp.iscomplexobj(y)
        refs: dict[str, Any] = {}
        if real_in and real_out:
            refs["jacfwd"] = jax.jacfwd(lambda *zs: f(zs if nargs > 1 else zs[0]), argnums=argnums)(*args)
            refs["jacrev"] = jax.jacrev(lambda *zs: f(zs if nargs > 1 else zs[0]), argnums=argnums)(*args)
            refs["grad"] = jax.grad(g, argnums=argnums)(*args)
            if order >= 2:
                refs["hessian"] = jax.hessian(g, argnums=argnums)(*args)
                _, refs["hvp"] = jax.jvp(lambda *zs: jax.grad(g, argnums=argnums)(*zs), args, tuple(_leaves(t)))
    rtol = 2e-5 if dtype in ("float32", "complex64") else 1e-10

    def sum_of(z):
        return jnp.sum(f(z))

    if "jacfwd" in refs:
        runner.check(
            "jacobian AutoJAX(mode=None) prepared",
            lambda: di.jacobian(di.AutoJAX(), f, x, prep=di.prepare_jacobian(di.AutoJAX(), f, x2)),
            refs["jacfwd"],
            rtol,
            x,
            x_before,
        )
    for mode in modes:
        backend = di.AutoJAX(mode=mode)
        tag = f"AutoJAX(mode={mode!r})"
        runner.check(f"pushforward {tag}", lambda b=backend: di.pushforward(b, f, x, t), jvp, rtol, x, x_before)
        runner.check(f"pullback {tag}", lambda b=backend: di.pullback(b, f, x, ct), vjp, rtol, x, x_before)
        if "jacfwd" not in refs:
            continue
        jac = refs["jacfwd"] if mode == "forward" else refs["jacrev"]
        runner.check(
            f"jacobian {tag} prepared",
            lambda b=backend: di.jacobian(b, f, x, prep=di.prepare_jacobian(b, f, x2)),
            jac,
            rtol,
            x,
            x_before,
        )
        runner.check(f"gradient {tag}", lambda b=backend: di.gradient(b, sum_of, x), refs["grad"], rtol, x, x_before)
        if order >= 2:
            runner.check(
                f"hessian {tag}", lambda b=backend: di.hessian(b, sum_of, x), refs["hessian"], rtol, x, x_before
            )
            runner.check(f"hvp {tag}", lambda b=backend: di.hvp(b, sum_of, x, t), refs["hvp"], rtol, x, x_before)
        if nargs == 1 and x.shape == ():
            runner.check(f"derivative {tag}", lambda b=backend: di.derivative(b, f, x), jac, rtol, x, x_before)
            if order >= 2:
                runner.check(
                    f"second_derivative {tag}",
                    lambda b=backend: di.second_derivative(b, f, x),
                    refs["hessian"],
                    rtol,
                    x,
                    x_before,
                )
    if fd_tol is not None and "jacfwd" in refs and dtype == "float64":
        runner.check(
            "jacobian AutoFiniteDiff()",
            lambda: di.jacobian(di.AutoFiniteDiff(), f, x),
            refs["jacfwd"],
            fd_tol,
            x,
            x_before,
        )


def _modes(row: int) -> tuple:
    return ("forward", "reverse") if FULL else (("forward", "reverse")[row % 2],)


def _cases() -> list:
    """(row, dtype) pairs: every dtype of each row with ``DIFFINTERFACE_LAX_FULL``; by default one,
    float64 first, the row's others in turn (the suite's time: each case compiles its own functions)."""
    out = []
    for row, spec in enumerate(LAX_GRAD_OPS):
        dtypes = spec.dtypes if FULL else (("float64",) if "float64" in spec.dtypes else spec.dtypes[-1:])
        if not FULL and row % 3 == 2 and len(spec.dtypes) > 1:  # every third row: a float32 or complex dtype
            dtypes = (spec.dtypes[row % len(spec.dtypes)],)
        for dtype in dtypes:
            out.append(pytest.param(spec, dtype, id=f"{spec.name}-{dtype}"))
    return out


@pytest.mark.parametrize(("spec", "dtype"), _cases())
def test_lax_grad_ops_agree_with_jax_or_raise(spec: Spec, dtype: str):
    row = LAX_GRAD_OPS.index(spec)
    runner = Runner(f"{spec.name} {dtype}")
    fd_tol = None if spec.name in ("floor", "ceil", "round") else _fd_tol(spec.tol, dtype)
    for i, shapes in enumerate(_shape_combos(spec.nargs, row)):
        _run_case(runner, spec.op, shapes, dtype, spec.draw, spec.order, fd_tol, seed=i, modes=_modes(row + i))
    assert not runner.wrong, "\n".join(runner.wrong)


@pytest.mark.parametrize(
    ("name", "op", "values", "tol"), SPECIAL_VALUES, ids=[f"{name}-special" for name, *_ in SPECIAL_VALUES]
)
def test_lax_grad_special_values_agree_with_jax_or_raise(name, op, values, tol):
    runner = Runner(f"{name} at special values")
    for i, value in enumerate(values):
        draw = lambda rng, shape, v=value: np.full(shape, v)  # noqa: E731
        _run_case(runner, op, ((),), "float64", draw, 2, None, seed=0, modes=_modes(i))
    assert not runner.wrong, "\n".join(runner.wrong)
