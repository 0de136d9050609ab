"""Scenarios with structured inputs and outputs: dicts, tuples, lists, namedtuples and nestings.

Each reference function is written on its leaves with the array API and comes with its value and
its Jacobian (and Hessian) in closed form as flat matrices over the leaves in the order written
here; the expected results are cut from them into the structures ``jax.jacobian`` gives (the
Jacobian: ``f(x)``'s structure holding ``x``'s structures of blocks ``y_leaf.shape + x_leaf.shape``;
the Hessian: ``x``'s holding ``x``'s). The cutting below walks the structures itself, independently
of ``diffinterface._core.structure``.

Size: over 400 lines in one module, because catalogue data: one builder per function kind, each beside
its analytic derivatives.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from array_api_compat import array_namespace, device

from .._closures.namespaces import declare_modules
from .._core.contexts import Constant
from ._reference import OPERATORS, SECOND_ORDER, Scenario, _mutable_family, _tangent, convert

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence
    from typing import TypeAlias

    from numpy.typing import ArrayLike, DTypeLike

    from .._core.types import Array, NumericArray

    # a structured x or f(x): arrays (or numbers) in dicts, lists, tuples and named tuples
    Tree: TypeAlias = "NumericArray | complex | Mapping[str, Tree] | Sequence[Tree]"

declare_modules(__name__, walk=True)

Layer = collections.namedtuple("Layer", ["A", "c"])


def _leaves(s: Tree) -> list[Any]:
    if isinstance(s, dict):
        return [leaf for v in s.values() for leaf in _leaves(v)]
    if isinstance(s, (list, tuple)):
        return [leaf for v in s for leaf in _leaves(v)]
    return [s]


def _rebuild(template: Tree, leaves: Iterator[Any]) -> Any:
    """``template``'s structure around the next leaves of the iterator ``leaves``."""
    if isinstance(template, dict):
        return {k: _rebuild(v, leaves) for k, v in template.items()}
    if isinstance(template, tuple) and hasattr(template, "_fields"):
        return type(template)(*[_rebuild(v, leaves) for v in template])
    if isinstance(template, (list, tuple)):
        return type(template)(_rebuild(v, leaves) for v in template)
    return next(leaves)


def _map(template: Tree, fn: Callable[[Any], Any]) -> Any:
    return _rebuild(template, iter([fn(v) for v in _leaves(template)]))


def _blocks(matrix: np.ndarray, rows: Tree, cols: Tree) -> Any:
    """A flat ``(rows size, cols size)`` matrix as ``rows``' structure of ``cols``' structures."""
    row_leaves, col_leaves = [np.asarray(v) for v in _leaves(rows)], [np.asarray(v) for v in _leaves(cols)]
    out, r = [], 0
    for rl in row_leaves:
        c, inner = 0, []
        for cl in col_leaves:
            inner.append(np.reshape(matrix[r : r + rl.size, c : c + cl.size], rl.shape + cl.shape))
            c += cl.size
        out.append(_rebuild(cols, iter(inner)))
        r += rl.size
    return _rebuild(rows, iter(out))


def _flat(s: Tree) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(v, dtype=np.float64)) for v in _leaves(s)])


@dataclasses.dataclass(frozen=True)
class StructuredReference:
    """``f`` on a structure ``x`` with closed forms over its leaves (flat, in the order written):
    ``value(x)`` (a structure), ``jac(x)`` ``(f(x) size, x size)``, ``hess(x)`` for scalar outputs,
    ``der2(x)`` (a structure like f(x)) for a scalar x."""

    name: str
    f: Callable[..., Any]
    x: Any
    value: Callable[..., Any]
    jac: Callable[..., Any]
    hess: Callable[..., Any] | None = None
    der2: Callable[..., Any] | None = None


# -- reference functions (array API, on the leaves) ----------------------------------------------


def dict_to_num(p: Mapping[str, NumericArray]) -> Any:
    xp = array_namespace(p["w"])
    return xp.sum(xp.sin(p["w"]) * p["b"]) + p["b"] ** 3 / 3


def tuple_to_dict(p: tuple[NumericArray, NumericArray]) -> Any:
    a, M = p
    xp = array_namespace(a)
    return {"u": M @ a, "n": xp.sum(M * M) + a[0]}


def nested_to_tuple(p: Mapping[str, Any]) -> Any:  # {"layer": Layer(A, c), "s": s}
    layer, s = p["layer"], p["s"]
    xp = array_namespace(layer.A)
    return (xp.tanh(layer.A @ layer.c) * s, layer.A * s)


def nested_to_num(p: Sequence[Any]) -> Any:  # [a, (b, c)]
    a, (b, c) = p
    xp = array_namespace(a)
    return xp.sum(a * a) * c + xp.sum(xp.exp(b)) * c**2


def vec_to_dict(x: NumericArray) -> Any:
    xp = array_namespace(x)
    return {"sin": xp.sin(x), "sq": xp.sum(x * x)}


def num_to_tuple(x: NumericArray) -> Any:
    xp = array_namespace(x)
    return (xp.sin(xp.asarray([1.0, 2.0], dtype=x.dtype, device=device(x)) * x), x**3)


def _dict_to_num_refs() -> StructuredReference:
    def value(p: Mapping[str, np.ndarray]) -> Any:
        w, b = p["w"], p["b"]
        return np.asarray(np.sum(np.sin(w) * b) + b**3 / 3)

    def jac(p: Mapping[str, np.ndarray]) -> Any:
        w, b = p["w"], p["b"]
        return np.concatenate([np.cos(w) * b, [np.sum(np.sin(w)) + b**2]])[None, :]

    def hess(p: Mapping[str, np.ndarray]) -> Any:
        w, b = p["w"], p["b"]
        h = np.zeros((4, 4))
        h[:3, :3] = np.diag(-np.sin(w) * b)
        h[:3, 3] = h[3, :3] = np.cos(w)
        h[3, 3] = 2 * b
        return h

    x = {"w": np.array([0.3, -0.5, 0.8]), "b": np.asarray(0.7)}
    return StructuredReference("dict_to_num", dict_to_num, x, value, jac, hess)


def _tuple_to_dict_refs() -> StructuredReference:
    def value(p: tuple[np.ndarray, np.ndarray]) -> Any:
        a, M = p
        return {"u": M @ a, "n": np.asarray(np.sum(M * M) + a[0])}

    def jac(p: tuple[np.ndarray, np.ndarray]) -> Any:
        a, M = p
        j = np.zeros((3, 6))
        j[:2, :2] = M
        for i in range(2):
            j[i, 2 + 2 * i : 4 + 2 * i] = a  # du_i/dM_il = a_l
        j[2, 0] = 1.0
        j[2, 2:] = 2 * M.ravel()
        return j

    x = (np.array([0.4, -1.1]), np.array([[0.5, 1.2], [-0.3, 0.9]]))
    return StructuredReference("tuple_to_dict", tuple_to_dict, x, value, jac)


def _nested_to_tuple_refs() -> StructuredReference:
    def value(p: Mapping[str, Any]) -> Any:
        A, c, s = p["layer"].A, p["layer"].c, p["s"]
        return (np.tanh(A @ c) * s, A * s)

    def jac(p: Mapping[str, Any]) -> Any:
        A, c, s = p["layer"].A, p["layer"].c, float(p["s"])
        z = A @ c
        d = 1 - np.tanh(z) ** 2
        j = np.zeros((6, 7))  # rows: v (2), W (4); columns: A (4), c (2), s
        for i in range(2):
            j[i, 2 * i : 2 * i + 2] = d[i] * c * s
            j[i, 4:6] = d[i] * A[i] * s
            j[i, 6] = np.tanh(z[i])
        j[2:, :4] = s * np.eye(4)
        j[2:, 6] = A.ravel()
        return j

    x = {"layer": Layer(np.array([[0.2, -0.4], [0.7, 0.1]]), np.array([1.5, -0.5])), "s": np.asarray(1.3)}
    return StructuredReference("nested_to_tuple", nested_to_tuple, x, value, jac)


def _nested_to_num_refs() -> StructuredReference:
    def value(p: Sequence[Any]) -> Any:
        a, (b, c) = p
        return np.asarray(np.sum(a * a) * c + np.sum(np.exp(b)) * c**2)

    def jac(p: Sequence[Any]) -> Any:
        a, (b, c) = p
        return np.concatenate([2 * a * c, np.exp(b) * c**2, [np.sum(a * a) + 2 * np.sum(np.exp(b)) * c]])[None, :]

    def hess(p: Sequence[Any]) -> Any:
        a, (b, c) = p
        h = np.zeros((6, 6))  # a (2), b (3), c
        h[:2, :2] = 2 * c * np.eye(2)
        h[:2, 5] = h[5, :2] = 2 * a
        h[2:5, 2:5] = np.diag(np.exp(b) * c**2)
        h[2:5, 5] = h[5, 2:5] = 2 * np.exp(b) * c
        h[5, 5] = 2 * np.sum(np.exp(b))
        return h

    x = [np.array([0.6, -0.2]), (np.array([0.1, -0.3, 0.5]), np.asarray(0.9))]
    return StructuredReference("nested_to_num", nested_to_num, x, value, jac, hess)


def _vec_to_dict_refs() -> StructuredReference:
    def value(x: np.ndarray) -> Any:
        return {"sin": np.sin(x), "sq": np.asarray(np.sum(x * x))}

    def jac(x: np.ndarray) -> Any:
        return np.vstack([np.diag(np.cos(x)), 2 * x[None, :]])

    return StructuredReference("vec_to_dict", vec_to_dict, np.array([0.2, -0.7, 1.1]), value, jac)


def _num_to_tuple_refs() -> StructuredReference:
    k = np.array([1.0, 2.0])

    def value(x: np.ndarray) -> Any:
        return (np.sin(k * x), np.asarray(x**3))

    def jac(x: np.ndarray) -> Any:
        return np.concatenate([np.cos(k * x) * k, [3 * x**2]])[:, None]

    def der2(x: np.ndarray) -> Any:
        return (-np.sin(k * x) * k**2, np.asarray(6 * x))

    return StructuredReference("num_to_tuple", num_to_tuple, np.asarray(0.4), value, jac, der2=der2)


def structured_references() -> list[StructuredReference]:
    return [
        _dict_to_num_refs(),
        _tuple_to_dict_refs(),
        _nested_to_tuple_refs(),
        _nested_to_num_refs(),
        _vec_to_dict_refs(),
        _num_to_tuple_refs(),
    ]


# -- scenarios -----------------------------------------------------------------------------------


def _with_constant(f: Callable[..., Any]) -> Callable[..., Any]:
    def with_constant(x: Tree, c: Mapping[str, Any]) -> Any:
        return _map(f(x), lambda v: v * c["scale"] + c["shift"][0])

    return with_constant


def _over_buffer(f: Callable[..., Any], buffers: dict[str, Any]) -> Callable[..., Any]:
    def over_buffer(p: Tree) -> Any:  # writes a leaf of x into a captured buffer, then reads it back
        key = next(iter(buffers))
        buffers[key][...] = _leaves(p)[0]
        return f(_rebuild(p, iter([buffers[key] * 1.0] + _leaves(p)[1:])))

    return over_buffer


def structured_scenarios(family: str, dtype: DTypeLike, include: tuple[Any, ...]) -> list[Any]:
    """The structured catalogue: every applicable operator on each reference above, a batch of two
    tangents for the tangent operators and, once per operator, a structured ``Constant`` context
    (``3 f(x) + 0.5``) and a closure that writes a leaf of ``x`` into a captured buffer."""

    out = []
    seen: set[tuple[str, str]] = set()
    for ref in structured_references():
        x = ref.x
        y = ref.value(x)
        jac = np.asarray(ref.jac(x))
        scalar_in = not isinstance(x, (dict, list, tuple)) and np.ndim(x) == 0
        scalar_out = not isinstance(y, (dict, list, tuple)) and np.ndim(y) == 0
        applicable = ["pushforward", "pullback", "jacobian"]
        applicable += ["derivative", "second_derivative"] if scalar_in else []
        applicable += ["gradient", "hvp", "hessian"] if scalar_out else []

        def conv(s: Tree) -> Any:
            return _map(s, lambda v: convert(np.asarray(v, dtype=np.float64), family, dtype))

        def tangent_like(s: Tree, k: int) -> Any:
            return _map(s, lambda v: _tangent(np.shape(v), k))

        for op in [o for o in OPERATORS if o in applicable and o in include]:
            like = y if op == "pullback" else x
            for batched in (False, True) if op in ("pushforward", "pullback", "hvp") else (False,):
                ts = [tangent_like(like, k) for k in range(2 if batched else 1)]
                for scale, shift, variant in ((1.0, 0.0, ""), (3.0, 0.5, "/constant"), (1.0, 0.0, "/closure")):
                    if variant and (batched or op in SECOND_ORDER and variant == "/constant" or (op, variant) in seen):
                        continue
                    seen.add((op, variant))  # each variant once per operator (the suite's time)

                    def ys(v: np.ndarray, scale: float = scale) -> Any:  # a flat vector like f(x), scaled
                        return _rebuild(y, iter(_split(scale * v, y)))

                    results = _results(op, ref, x, y, jac, ts, scale, ys)
                    value, first, second = results
                    value = _map(value, lambda v: scale * np.asarray(v) + shift)
                    if op == "hvp":
                        value = None
                    tangent: Any = None
                    prep_tangent: Any = None
                    if op in ("pushforward", "pullback", "hvp"):
                        tangent = tuple(conv(t) for t in ts) if batched else conv(ts[0])
                        ones = [_map(like, lambda v: np.ones(np.shape(v))) for _ in ts]
                        prep_tangent = tuple(conv(t) for t in ones) if batched else conv(ones[0])
                    f, prep_contexts = ref.f, None
                    contexts: tuple[Any, ...] = ()
                    state: tuple[Any, ...] = ()
                    if variant == "/constant":
                        f = _with_constant(ref.f)
                        contexts = (Constant({"scale": convert(scale, family, dtype), "shift": (shift,)}),)
                        prep_contexts = (Constant({"scale": convert(1.0, family, dtype), "shift": (0.0,)}),)
                    elif variant == "/closure":
                        first_leaf = _leaves(x)[0]
                        buffer = convert(np.full(np.shape(first_leaf), 5.0), _mutable_family(family), dtype)
                        f, state = _over_buffer(ref.f, {"leaf": buffer}), (buffer,)
                    out.append(
                        Scenario(
                            operator=op,
                            f=f,
                            x=conv(x),
                            tangent=tangent,
                            contexts=contexts,
                            value=value,
                            first=first,
                            second=second,
                            name=f"structured/{op}/{ref.name}" + ("/batched" if batched else "") + variant,
                            prep_x=conv(_map(x, lambda v: np.asarray(v) + 0.25)),
                            prep_tangent=prep_tangent,
                            prep_contexts=prep_contexts,
                            state=state,
                            structured=True,
                        )
                    )
    return out


def _results(
    op: str,
    ref: StructuredReference,
    x: Tree,
    y: Tree,
    jac: np.ndarray,
    ts: list[Any],
    scale: float,
    ys: Callable[[np.ndarray], Any],
) -> tuple[Any, Any, Any]:
    """``(value, first, second)`` for ``op``: ``first`` the first-order result (the gradient for
    hvp and hessian), ``second`` the second-order one; tangent results a tuple for a batch."""
    batched = len(ts) > 1

    def one(results: list[Any]) -> Any:
        return tuple(results) if batched else results[0]

    if op == "pushforward":
        return y, one([ys(jac @ _flat(t)) for t in ts]), None
    if op == "pullback":
        return y, one([_rebuild(x, iter(_split(scale * (_flat(t) @ jac), x))) for t in ts]), None
    if op == "jacobian":
        return y, _blocks(scale * jac, y, x), None
    if op == "derivative":
        return y, ys(jac[:, 0]), None
    if op == "second_derivative":
        assert ref.der2 is not None
        return y, ys(jac[:, 0]), _map(ref.der2(x), lambda v: scale * np.asarray(v))
    grad = _rebuild(x, iter(_split(scale * jac[0], x)))
    assert ref.hess is not None
    hess = scale * np.asarray(ref.hess(x))
    if op == "gradient":
        return y, grad, None
    if op == "hessian":
        return y, grad, _blocks(hess, x, x)
    return y, grad, one([_rebuild(x, iter(_split(hess @ _flat(t), x))) for t in ts])  # hvp


def _split(v: np.ndarray, template: Tree) -> list[np.ndarray]:
    leaves = [np.asarray(u) for u in _leaves(template)]
    parts = np.split(v, np.cumsum([u.size for u in leaves])[:-1])
    return [np.reshape(p, u.shape) for p, u in zip(parts, leaves)]


# -- complex inputs ------------------------------------------------------------------------------
# Conventions (docs/complex.md): the gradient of a real f of z = a + ib is df/da + i df/db
# (torch's, the steepest-ascent direction; JAX's grad is its conjugate); a pushforward is the
# derivative along a complex tangent; a pullback its adjoint for the real inner product Re<u, v>
# (J^H ty for a holomorphic f); an hvp the pushforward of the gradient; jacobian and derivative of a
# complex x need holomorphic=True and give dy/dz.

_W = np.array([1.0, 2.0, 0.5])


def abs2(z: NumericArray) -> Any:
    xp = array_namespace(z)
    return xp.sum(_const_like(z, _W) * (xp.real(z) ** 2 + xp.imag(z) ** 2))


def square(z: NumericArray) -> Any:
    return z * z


def exp(z: NumericArray) -> Any:
    return array_namespace(z).exp(z)


def cube(z: NumericArray) -> Any:
    return z**3


def abs2_weighted(p: Mapping[str, NumericArray]) -> Any:
    xp = array_namespace(p["r"])
    z = p["z"]
    return xp.sum((xp.real(z) ** 2 + xp.imag(z) ** 2) * p["r"])


def _const_like(z: Array, value: np.ndarray) -> Any:
    """A real constant in the family, real precision and device of the complex ``z``."""
    xp = array_namespace(z)
    return xp.asarray(value, dtype=xp.real(z).dtype, device=device(z))


def _complex_cases() -> list[tuple[str, Callable[..., Any], Any, dict[str, Any]]]:
    """``(name, f, z, closed forms)``: each closed form ``(z, t) -> result`` (t the tangent)."""
    w = _W
    z3 = np.array([1.0 + 2.0j, -0.5 + 0.3j, 0.2 - 1.1j])
    z2 = np.array([0.3 - 0.4j, -1.2 + 0.5j])
    zr = {"z": np.array([0.7 + 0.1j, -0.4 - 0.9j]), "r": np.array([1.5, -0.5])}
    return [
        (
            "abs2",
            abs2,
            z3,
            {
                "value": lambda z, t: np.asarray(np.sum(w * np.abs(z) ** 2)),
                "gradient": lambda z, t: 2 * w * z,
                "hvp": lambda z, t: 2 * w * t,
                "pushforward": lambda z, t: np.asarray(np.sum(2 * w * np.real(np.conj(z) * t))),
                "pullback": lambda z, t: 2 * w * z * t,
            },
        ),
        (
            "square",
            square,
            z2,
            {
                "value": lambda z, t: z * z,
                "jacobian": lambda z, t: np.diag(2 * z),
                "pushforward": lambda z, t: 2 * z * t,
                "pullback": lambda z, t: np.conj(2 * z) * t,
            },
        ),
        (
            "exp",
            exp,
            z2,
            {
                "value": lambda z, t: np.exp(z),
                "jacobian": lambda z, t: np.diag(np.exp(z)),
                "pushforward": lambda z, t: np.exp(z) * t,
                "pullback": lambda z, t: np.conj(np.exp(z)) * t,
            },
        ),
        (
            "cube",
            cube,
            np.asarray(0.5 + 1.0j),
            {
                "value": lambda z, t: z**3,
                "derivative": lambda z, t: 3 * z**2,
                "pushforward": lambda z, t: 3 * z**2 * t,
            },
        ),
        (
            "abs2_weighted",
            abs2_weighted,
            zr,
            {
                "value": lambda p, t: np.asarray(np.sum(np.abs(p["z"]) ** 2 * p["r"])),
                "gradient": lambda p, t: {"z": 2 * p["z"] * p["r"], "r": np.abs(p["z"]) ** 2},
                "hvp": lambda p, t: {
                    "z": 2 * t["z"] * p["r"] + 2 * p["z"] * t["r"],
                    "r": 2 * np.real(np.conj(p["z"]) * t["z"]),
                },
                "pushforward": lambda p, t: np.asarray(
                    np.sum(2 * np.real(np.conj(p["z"]) * t["z"]) * p["r"] + np.abs(p["z"]) ** 2 * t["r"])
                ),
                "pullback": lambda p, t: {"z": 2 * p["z"] * p["r"] * t, "r": np.abs(p["z"]) ** 2 * t},
            },
        ),
    ]


def complex_scenarios(family: str, dtype: DTypeLike, include: tuple[Any, ...]) -> list[Any]:
    """Complex x, each operator its closed form above (holomorphic=True for jacobian and derivative),
    one tangent and a batch of two, prepared at another point."""

    cdtype = np.complex64 if np.dtype(dtype) == np.float32 else np.complex128

    def conv(s: Tree) -> Any:
        def leaf(v: ArrayLike) -> Any:
            arr = np.asarray(v, dtype=cdtype if np.iscomplexobj(v) else dtype)
            if family == "torch":
                import torch

                return torch.from_numpy(arr.copy())
            if family == "jax":
                import jax.numpy as jnp

                return jnp.asarray(arr)
            if family == "tensorflow":
                import tensorflow as tf

                return tf.convert_to_tensor(arr)
            return arr

        return _map(s, leaf)

    def tangent(like: Tree, k: int) -> Any:
        def leaf(v: ArrayLike) -> Any:
            t = _tangent(np.shape(v), k)
            return t + 0.5j * np.flip(t) if np.iscomplexobj(v) else t

        return _map(like, leaf)

    out = []
    for name, f, z, forms in _complex_cases():
        value = forms["value"](z, None)
        for op in [o for o in ("gradient", "jacobian", "derivative", "pushforward", "pullback", "hvp") if o in forms]:
            if op not in include:
                continue
            like = value if op == "pullback" else z
            for batched in (False, True) if op in ("pushforward", "pullback", "hvp") else (False,):
                ts = [tangent(like, k) for k in range(2 if batched else 1)]
                results = (
                    [forms[op](z, t) for t in ts] if op in ("pushforward", "pullback", "hvp") else [forms[op](z, None)]
                )
                result = tuple(results) if batched else results[0]
                first, second = result, None
                if op == "hvp":
                    first, second = forms["gradient"](z, None), result
                tangent_arg = prep_tangent = None
                if op in ("pushforward", "pullback", "hvp"):
                    tangent_arg = tuple(conv(t) for t in ts) if batched else conv(ts[0])
                    ones = _map(like, lambda v: np.ones(np.shape(v), dtype=np.asarray(v).dtype))
                    prep_tangent = tuple(conv(ones) for _ in ts) if batched else conv(ones)
                out.append(
                    Scenario(
                        operator=op,
                        f=f,
                        x=conv(z),
                        tangent=tangent_arg,
                        value=None if op == "hvp" else value,
                        first=first,
                        second=second,
                        name=f"complex/{op}/{name}" + ("/batched" if batched else ""),
                        prep_x=conv(_map(z, lambda v: np.asarray(v) + (0.25 - 0.5j if np.iscomplexobj(v) else 0.25))),
                        prep_tangent=prep_tangent,
                        structured=True,
                        holomorphic=op in ("jacobian", "derivative"),
                    )
                )
    return out
