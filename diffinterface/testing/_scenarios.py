"""The scenario catalogue: reference functions with analytic derivatives (after DifferentiationInterfaceTest).

Each reference function is written once with the array API (``xp = array_namespace(x)``) and comes
with its value and its Jacobian (and, for scalar outputs, its Hessian) in closed form. The scenarios
derive every reference result from those by linear algebra: a pushforward is ``J @ t``, a pullback
``t @ J``, an hvp ``H @ t``.

Size: over 400 lines in one module, because catalogue data: one builder per function kind, each beside
its analytic derivatives.
"""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING, Any

import numpy as np
from array_api_compat import array_namespace, device

from .._closures.namespaces import declare_modules
from .._core.contexts import Cache, Constant
from ._reference import FIRST_ORDER, OPERATORS, SECOND_ORDER, Reference, Scenario, _mutable_family, _tangent, convert
from ._rule_scenarios import rule_references
from ._structured_scenarios import complex_scenarios, structured_scenarios

if TYPE_CHECKING:
    from collections.abc import Callable

    from numpy.typing import ArrayLike, DTypeLike

    from .._core.types import Array, NumericArray

# The closure walker leaves the diffinterface namespace alone; these functions are user code.
declare_modules(__name__, walk=True)

# -- reference functions ----------------------------------------------------------------------


def _const(x: Array, value: np.ndarray) -> Any:
    """A constant array in the family, dtype and device of ``x`` (``value`` is a captured global)."""
    xp = array_namespace(x)
    return xp.asarray(value, dtype=x.dtype, device=device(x))


_MULT_VEC = np.array([1.0, 2.0])
_MULT_MAT = np.array([[1.0, 3.0], [2.0, 4.0]])


def num_to_num(x: NumericArray) -> Any:
    return array_namespace(x).sin(x)


def num_to_vec(x: NumericArray) -> Any:
    return array_namespace(x).sin(_const(x, _MULT_VEC) * x)


def num_to_mat(x: NumericArray) -> Any:
    return array_namespace(x).sin(_const(x, _MULT_MAT) * x)


def arr_to_num(x: NumericArray) -> Any:
    xp = array_namespace(x)
    return xp.sum(x**4) * xp.sum(x**6)


def vec_to_vec(x: NumericArray) -> Any:
    xp = array_namespace(x)
    return xp.concat([xp.sin(x), xp.cos(x)])


def vec_to_mat(x: NumericArray) -> Any:
    xp = array_namespace(x)
    return xp.stack([xp.sin(x), xp.cos(x)], axis=1)


def mat_to_vec(x: NumericArray) -> Any:
    xp = array_namespace(x)
    return xp.concat([xp.reshape(xp.sin(x), (-1,)), xp.reshape(xp.cos(x), (-1,))])


def mat_to_mat(x: NumericArray) -> Any:
    xp = array_namespace(x)
    return xp.stack([xp.reshape(xp.sin(x), (-1,)), xp.reshape(xp.cos(x), (-1,))], axis=1)


def diff_square(x: NumericArray) -> Any:
    return (x[1:] - x[:-1]) ** 2


def diff_cube(x: NumericArray) -> Any:
    return (x[1:] - x[:-1]) ** 3


def sum_diff_cube(x: NumericArray) -> Any:
    return array_namespace(x).sum((x[1:] - x[:-1]) ** 3)


_BANDED = (
    np.diag(np.arange(1.0, 7.0))
    + np.diag(np.full(5, 0.5), 1)
    - np.diag(np.full(5, 0.25), -1)
    + np.diag(np.full(4, 0.1), 2)
)


def banded_times_square(x: NumericArray) -> Any:
    return _const(x, _BANDED) @ (x * x)


def quadratic_form(x: NumericArray) -> Any:
    u = x * x
    return array_namespace(x).sum(u * (_const(x, _BANDED) @ u))


def _references() -> list[Reference]:
    xs = 0.7
    xv = np.array([0.6, 1.1, -0.4, 0.9, 1.3, -0.8])
    xm = np.array([[0.6, 1.1, -0.4], [0.9, 1.3, -0.8]])

    def diffs(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        d = np.diff(x)
        jac = np.zeros((d.size, x.size))
        i = np.arange(d.size)
        jac[i, i], jac[i, i + 1] = -k * d ** (k - 1), k * d ** (k - 1)
        return d, jac

    def sincos_jac(x: np.ndarray, interleave: bool) -> np.ndarray:
        xf = np.ravel(x)
        n = xf.size
        jac = np.zeros((2 * n, n))
        i = np.arange(n)
        rows_sin, rows_cos = (2 * i, 2 * i + 1) if interleave else (i, n + i)
        jac[rows_sin, i], jac[rows_cos, i] = np.cos(xf), -np.sin(xf)
        return jac

    def arr_hess(x: np.ndarray) -> np.ndarray:
        xf = np.ravel(x)
        s4, s6 = np.sum(xf**4), np.sum(xf**6)
        return np.diag(12 * xf**2 * s6 + 30 * xf**4 * s4) + 24 * np.outer(xf**3, xf**5) + 24 * np.outer(xf**5, xf**3)

    def arr_grad(x: np.ndarray) -> np.ndarray:
        xf = np.ravel(x)
        return (4 * xf**3 * np.sum(xf**6) + 6 * xf**5 * np.sum(xf**4))[None, :]

    sym = _BANDED + _BANDED.T
    refs = [
        Reference(
            "num_to_num",
            num_to_num,
            xs,
            np.sin,
            lambda x: np.reshape(np.cos(x), (1, 1)),
            hess=lambda x: np.reshape(-np.sin(x), (1, 1)),
            der2=lambda x: -np.sin(x),
        ),
        Reference(
            "num_to_vec",
            num_to_vec,
            xs,
            lambda x: np.sin(_MULT_VEC * x),
            lambda x: np.reshape(_MULT_VEC * np.cos(_MULT_VEC * x), (-1, 1)),
            der2=lambda x: -(_MULT_VEC**2) * np.sin(_MULT_VEC * x),
        ),
        Reference(
            "num_to_mat",
            num_to_mat,
            xs,
            lambda x: np.sin(_MULT_MAT * x),
            lambda x: np.reshape(_MULT_MAT * np.cos(_MULT_MAT * x), (-1, 1)),
            der2=lambda x: -(_MULT_MAT**2) * np.sin(_MULT_MAT * x),
        ),
        Reference("vec_to_num", arr_to_num, xv, lambda x: np.sum(x**4) * np.sum(x**6), arr_grad, hess=arr_hess),
        Reference("mat_to_num", arr_to_num, xm, lambda x: np.sum(x**4) * np.sum(x**6), arr_grad, hess=arr_hess),
        Reference(
            "vec_to_vec",
            vec_to_vec,
            xv,
            lambda x: np.concatenate([np.sin(x), np.cos(x)]),
            lambda x: sincos_jac(x, False),
        ),
        Reference(
            "vec_to_mat",
            vec_to_mat,
            xv,
            lambda x: np.stack([np.sin(x), np.cos(x)], axis=1),
            lambda x: sincos_jac(x, True),
        ),
        Reference(
            "mat_to_vec",
            mat_to_vec,
            xm,
            lambda x: np.concatenate([np.sin(x).ravel(), np.cos(x).ravel()]),
            lambda x: sincos_jac(x, False),
        ),
        Reference(
            "mat_to_mat",
            mat_to_mat,
            xm,
            lambda x: np.stack([np.sin(x).ravel(), np.cos(x).ravel()], axis=1),
            lambda x: sincos_jac(x, True),
        ),
        Reference("diff_square", diff_square, xv, lambda x: np.diff(x) ** 2, lambda x: diffs(x, 2)[1]),
        Reference("diff_cube", diff_cube, xv, lambda x: np.diff(x) ** 3, lambda x: diffs(x, 3)[1]),
        Reference(
            "sum_diff_cube",
            sum_diff_cube,
            xv,
            lambda x: np.sum(np.diff(x) ** 3),
            lambda x: np.sum(diffs(x, 3)[1], axis=0)[None, :],
            hess=lambda x: sum(6 * d * np.outer(v, v) for d, v in zip(np.diff(x), np.diff(np.eye(x.size), axis=0))),
        ),
        Reference(
            "banded_times_square", banded_times_square, xv, lambda x: _BANDED @ x**2, lambda x: _BANDED * (2 * x)
        ),
        Reference(
            "quadratic_form",
            quadratic_form,
            xv,
            lambda x: (x**2) @ _BANDED @ (x**2),
            lambda x: (2 * x * (sym @ x**2))[None, :],
            hess=lambda x: np.diag(2 * sym @ x**2) + 4 * np.outer(x, x) * sym,
        ),
    ]
    return refs


# -- variants: contexts, caches, closures, two-argument functions ------------------------------


def _with_constant(f: Callable[..., Any]) -> Callable[..., Any]:
    def with_constant(x: NumericArray, c: NumericArray) -> Any:
        return c[0] * f(x) + c[1]

    return with_constant


def _with_cache(f: Callable[..., Any]) -> Callable[..., Any]:
    def with_cache(x: NumericArray, cache: Any) -> Any:
        xp = array_namespace(x)
        cache[...] = x
        return f(xp.asarray(cache))

    return with_cache


def _closure_over_buffer(f: Callable[..., Any], buffer: Any) -> Callable[..., Any]:
    def over_buffer(x: NumericArray) -> Any:
        xp = array_namespace(x)
        buffer[...] = x
        return f(xp.asarray(buffer))

    return over_buffer


def _closure_scalar(buffer: Any) -> Callable[..., Any]:
    # The example of contract section 7: derivative 2 (1 + x) on every call, with the buffer unchanged.
    def accumulate(x: NumericArray) -> Any:
        buffer[0] = 1.0
        buffer[0] += x
        return buffer[0] ** 2

    return accumulate


def _write_then(f: Callable[..., Any]) -> Callable[..., Any]:
    def write_then(x: NumericArray, buffer: Any) -> Any:
        xp = array_namespace(x)
        buffer[...] = x
        return f(xp.asarray(buffer))

    return write_then


class _Buffered:
    """A callable object that writes x into a buffer attribute before computing from it."""

    def __init__(self, f: Callable[..., Any], buffer: Any) -> None:
        self.f, self.buffer = f, buffer

    def __call__(self, x: NumericArray) -> Any:
        xp = array_namespace(x)
        self.buffer[...] = x
        return self.f(xp.asarray(self.buffer))


def _nested(f: Callable[..., Any], buffer: Any) -> Callable[..., Any]:
    inner = _closure_over_buffer(f, buffer)

    def nested(x: NumericArray) -> Any:  # captures a function that captures the buffer
        return inner(x)

    return nested


def _reads_captured(f: Callable[..., Any], weights: NumericArray) -> Callable[..., Any]:
    def reads(x: NumericArray) -> Any:  # only reads its captured array: 3 f(x) + 0.5
        return weights[0] * f(x) + weights[1]

    return reads


def _writes_input(f: Callable[..., Any]) -> Callable[..., Any]:
    def writes_input(x: NumericArray) -> Any:  # doubles its input in place (numpy, torch, MLX; a rebinding
        x *= 2.0  # on immutable arrays), then reads it back halved: f's value and derivatives are f's
        return f(x / 2.0)

    return writes_input


def _in_place(f: Callable[..., Any]) -> Callable[..., Any]:
    def in_place(y: Any, x: NumericArray) -> Any:
        y[...] = f(x)

    return in_place


# -- families and dtypes ------------------------------------------------------------------------


def default_scenarios(
    family: str = "numpy", dtype: DTypeLike = np.float64, *, include: tuple[Any, ...] = OPERATORS
) -> list[Scenario]:
    """The reference catalogue: every applicable operator on every reference function, with variants.

    Then the structured scenarios (``_structured_scenarios``: dicts, tuples, lists, namedtuples and
    nestings as x and f(x)), the scenarios through custom rules (``_rule_scenarios``: an opaque rule and an array-API
    rule, their arguments active and constant in turn), for the first-order operators.

    Variants: a batch of two tangents, a ``Constant`` context, a ``Cache`` context, a closure writing
    into a captured buffer, and a two-argument ``f(y, x)``; for one reference function per operator,
    the closure variants of contract section 7 (a buffer written through ``functools.partial``, a callable
    object and a nested closure, and a captured array only read) and an ``f`` that writes into its input
    (contract section 4). Arrays are of ``family`` ("numpy", "jax"
    or "torch") and ``dtype``; references are numpy. jax arrays are float32 unless the user enabled
    ``jax_enable_x64``, so the jax family is float32 then, as a jax user's arrays would be.
    """
    if family == "jax" and np.dtype(dtype) == np.float64:
        import jax

        if not jax.config.read("jax_enable_x64"):
            dtype = np.float32  # jax arrays are float32 unless the user enabled x64
    dtype = np.dtype(dtype)
    scenarios: list[Scenario | list[Scenario]] = []
    closure_variants: set = set()  # the operators that already have the closure variants
    for ref in _references():
        scenarios += _scenarios_of(ref, family, dtype, include, closure_variants)
    scenarios.append(_closure_scalar_scenarios(family, dtype, include))
    # through custom rules (_rule_scenarios): first order; the context and in-place variants for
    # one function (they test the backends more than the rules)
    first = tuple(op for op in include if op in FIRST_ORDER)
    for ref in rule_references():
        for s in _scenarios_of(ref, family, dtype, first, set(OPERATORS)):
            variant = s.name.count("/") > 1
            if not variant or (ref.name == "rule_opaque_both_active" and not s.name.endswith(("/batched", "/closure"))):
                scenarios.append(s)
    scenarios.append(sparse_scenarios(family, dtype, include))
    scenarios.append(structured_scenarios(family, dtype, include))
    scenarios.append(complex_scenarios(family, dtype, include))
    return [s for group in scenarios for s in (group if isinstance(group, list) else [group])]


def sparse_scenarios(
    family: str = "numpy", dtype: DTypeLike = np.float64, include: tuple[Any, ...] = OPERATORS
) -> list:
    """The sparse problems of issue 16 (``_sparse_problems``) at small sizes, run through
    ``AutoSparse(backend)`` with the closed forms as references (densified by the harness): a
    tridiagonal and a Brusselator Jacobian, an arrowhead and a banded Hessian."""
    from . import _sparse_problems as sp

    rng = np.random.default_rng(161)
    cases = [
        ("diffusion", "jacobian", sp.diffusion, rng.uniform(-1, 1, 12), sp.diffusion_jacobian),
        ("brusselator", "jacobian", sp.brusselator, sp.brusselator_x0(4) + 0.1, sp.brusselator_jacobian),
        ("arrowhead", "hessian", sp.arrowhead, rng.uniform(-1, 1, 9), sp.arrowhead_hessian),
        ("banded", "hessian", sp.banded, rng.uniform(-1, 1, 9), sp.banded_hessian),
    ]
    out = []
    for name, op, f, x, reference in cases:
        if op not in include:
            continue
        value = np.asarray(f(x))
        first = reference(x).toarray() if op == "jacobian" else _gradient_of(f, x)
        second = reference(x).toarray() if op == "hessian" else None
        out.append(
            Scenario(
                op,
                f,
                convert(x, family, dtype),
                value=value,
                first=first,
                second=second,
                name=f"sparse/{name}/{op}",
                prep_x=convert(x + 0.25, family, dtype),
                sparse=True,
            )
        )
    return out


def _gradient_of(f: Callable[..., Any], x: np.ndarray) -> np.ndarray:
    """The gradient of the sparse Hessian problems, in closed form."""
    from . import _sparse_problems as sp

    if f is sp.arrowhead:
        g = x.copy()
        s = -np.sin(x[0] + x[1:])
        g[0] += s.sum()
        g[1:] += s
        return g
    w = np.asarray(sp.WEIGHTS)
    c = np.cos(w[0] * x[:-2] + w[1] * x[1:-1] + w[2] * x[2:])
    g = x**3 / 3
    for i in range(3):
        g[i : i + x.size - 2] += w[i] * c
    return g


def _scenarios_of(
    ref: Reference, family: str, dtype: DTypeLike, include: tuple[Any, ...], closure_variants: set
) -> list[Scenario]:
    x = np.asarray(ref.x, dtype=np.float64)
    y_value = np.asarray(ref.value(x))
    jac = np.asarray(ref.jac(x))
    scalar_in, scalar_out = x.shape == (), y_value.shape == ()
    out: list[Scenario] = []

    def conv(v: ArrayLike) -> Any:
        return convert(v, family, dtype)

    def refs(op: str, scale: float = 1.0, shift: float = 0.0, tangent: tuple[np.ndarray, ...] = ()) -> Any:
        """References for ``op`` at x, for ``scale * f + shift``."""
        value = scale * y_value + shift
        jac_full = scale * np.reshape(jac, y_value.shape + x.shape)
        if op in ("derivative", "jacobian"):
            return value, jac_full, None
        if op == "gradient":
            return value, np.reshape(scale * jac, x.shape), None
        if op == "pushforward":
            res = tuple(np.reshape(scale * jac @ np.ravel(t), y_value.shape) for t in tangent)
            return value, res, None
        if op == "pullback":
            res = tuple(np.reshape(scale * np.ravel(t) @ jac, x.shape) for t in tangent)
            return value, res, None
        if op == "second_derivative":
            assert ref.der2 is not None, ref.name  # scalar inputs have one
            return value, jac_full, scale * np.asarray(ref.der2(x))
        grad = np.reshape(scale * jac, x.shape)
        assert ref.hess is not None, ref.name  # scalar outputs have one
        hess = scale * np.asarray(ref.hess(x))
        if op == "hessian":
            return value, grad, np.reshape(hess, x.shape + x.shape)
        res = tuple(np.reshape(hess @ np.ravel(t), x.shape) for t in tangent)
        return None, grad, res

    applicable = ["pushforward", "pullback", "jacobian"]
    if scalar_in:
        applicable += ["derivative", "second_derivative"]
    if scalar_out:
        applicable += ["gradient", "hessian", "hvp"]
    for op in [o for o in OPERATORS if o in applicable and o in include]:
        tshape = y_value.shape if op == "pullback" else x.shape
        for batched in (False, True) if op in ("pushforward", "pullback", "hvp") else (False,):
            ts = (_tangent(tshape, 0), _tangent(tshape, 1)) if batched else (_tangent(tshape, 0),)
            tangent = (
                tuple(conv(t) for t in ts)
                if batched
                else conv(ts[0])
                if op in ("pushforward", "pullback", "hvp")
                else None
            )
            prep_tangent = (
                None
                if tangent is None
                else (tuple(conv(np.ones(tshape)) for _ in ts) if batched else conv(np.ones(tshape)))
            )

            def unbatch(res: Array | tuple[Array, ...] | None) -> Any:
                return res if batched or not isinstance(res, tuple) else res[0]

            value, first, second = refs(op, tangent=ts)
            tag = f"{op}/{ref.name}" + ("/batched" if batched else "")
            base: dict[str, Any] = dict(
                operator=op,
                x=conv(x) if not scalar_in or family != "numpy" else convert(float(x), family, dtype),
                tangent=tangent,
                prep_tangent=prep_tangent,
            )
            base["prep_x"] = conv(np.zeros(x.shape)) if not isinstance(base["x"], float) else 0.0
            out.append(Scenario(f=ref.f, value=value, first=unbatch(first), second=unbatch(second), name=tag, **base))
            if batched:
                continue
            # a Constant context: 3 f(x) + 0.5, prepared with 1 f(x) + 0
            value, first, second = refs(op, 3.0, 0.5, tangent=ts)
            out.append(
                Scenario(
                    f=_with_constant(ref.f),
                    contexts=(Constant((3.0, 0.5)),),
                    prep_contexts=(Constant((1.0, 0.0)),),
                    value=value,
                    first=unbatch(first),
                    second=unbatch(second),
                    name=tag + "/constant",
                    **base,
                )
            )
            # a Cache context that f writes x into before computing from it
            value, first, second = refs(op, tangent=ts)
            cache = convert(np.full(x.shape, 7.0), _mutable_family(family), dtype)
            out.append(
                Scenario(
                    f=_with_cache(ref.f),
                    contexts=(Cache(cache),),
                    value=value,
                    first=unbatch(first),
                    second=unbatch(second),
                    name=tag + "/cache",
                    **base,
                )
            )
            # a closure writing into a captured numpy buffer (the user's buffer must stay as it was)
            buffer = np.full(x.shape, 5.0, dtype=dtype)
            out.append(
                Scenario(
                    f=_closure_over_buffer(ref.f, buffer),
                    value=value,
                    first=unbatch(first),
                    second=unbatch(second),
                    name=tag + "/closure",
                    state=(buffer,),
                    **base,
                )
            )
            # the closure variants of contract section 7, once per operator: a buffer passed by
            # functools.partial, held by a callable object, captured through a nested closure, and
            # a captured array that f only reads (the alias path of _closures/plan.py)
            wanted = {
                "derivative": True,
                "second_derivative": True,
                "gradient": not scalar_in,
                "hvp": not scalar_in,
                "hessian": not scalar_in,
            }.get(op, not scalar_in and not scalar_out)  # arrays where they can be
            if op not in closure_variants and wanted:
                closure_variants.add(op)
                makers: list[tuple[str, Callable[[np.ndarray], Callable[..., Any]]]] = [
                    ("partial", lambda b: functools.partial(_write_then(ref.f), buffer=b)),
                    ("object", lambda b: _Buffered(ref.f, b)),
                    ("nested", lambda b: _nested(ref.f, b)),
                ]
                for name, make in makers:
                    buffer = np.full(x.shape, 5.0, dtype=dtype)
                    out.append(
                        Scenario(
                            f=make(buffer),
                            value=value,
                            first=unbatch(first),
                            second=unbatch(second),
                            name=f"{tag}/closure_{name}",
                            state=(buffer,),
                            **base,
                        )
                    )
                weights = np.array([3.0, 0.5], dtype=dtype)
                value_w, first_w, second_w = refs(op, 3.0, 0.5, tangent=ts)
                out.append(
                    Scenario(
                        f=_reads_captured(ref.f, weights),
                        value=value_w,
                        first=unbatch(first_w),
                        second=unbatch(second_w),
                        name=f"{tag}/closure_reads",
                        state=(weights,),
                        **base,
                    )
                )
                # f writes into its input (contract section 4: the user's x, tangents and a prep's own
                # seeds stay as they were, where a dual tensor or an MLX array shares their memory)
                out.append(
                    Scenario(
                        f=_writes_input(ref.f),
                        value=value,
                        first=unbatch(first),
                        second=unbatch(second),
                        name=f"{tag}/writes_input",
                        **base,
                    )
                )
            # a two-argument f(y, x) writing its output into y
            if op in ("pushforward", "pullback", "derivative", "jacobian") and not scalar_out:
                y = convert(np.full(y_value.shape, 3.0), _mutable_family(family), dtype)
                out.append(
                    Scenario(
                        f=_in_place(ref.f),
                        y=y,
                        value=value,
                        first=unbatch(first),
                        second=unbatch(second),
                        name=tag + "/in_place",
                        **base,
                    )
                )
    return out


def _closure_scalar_scenarios(family: str, dtype: DTypeLike, include: tuple[Any, ...]) -> list[Scenario]:
    x = 0.3
    value, der = (1 + x) ** 2, 2 * (1 + x)
    out = []
    for op in ("derivative", "second_derivative", "gradient", "hessian", "pushforward", "pullback", "hvp"):
        if op not in include:
            continue
        buffer = np.full(3, 9.0, dtype=dtype)
        xin = convert(x, family, dtype)
        t = 0.5
        tangent = convert(t, family, dtype) if op in ("pushforward", "pullback", "hvp") else None
        first = {"pushforward": der * t, "pullback": der * t}.get(op, der)
        second = {"hvp": 2.0 * t}.get(op, 2.0)
        out.append(
            Scenario(
                operator=op,
                f=_closure_scalar(buffer),
                x=xin,
                tangent=tangent,
                value=None if op == "hvp" else value,
                first=np.asarray(first),
                second=np.asarray(second) if op in SECOND_ORDER else None,
                name=f"{op}/closure_accumulate",
                prep_x=convert(0.0, family, dtype),
                prep_tangent=None if tangent is None else convert(1.0, family, dtype),
                state=(buffer,),
            )
        )
    return out


def available_families() -> list[str]:
    """The array families whose library is importable here (numpy always)."""
    import importlib.util

    return ["numpy"] + [f for f in ("jax", "torch") if f in sys.modules or importlib.util.find_spec(f) is not None]
