"""Structured inputs and outputs: ``x``, tangents and ``f(x)`` as dicts, lists, tuples and nestings.

**How.** A structure is flattened into its leaves, and the leaves into one vector: every adapter
differentiates the vector function ``v -> ravel(f(unravel(v)))`` and the results are cut back into
the structures that ``jax.jacobian`` gives (the ``results`` of each operator's record,
``_core.operators``). One mechanism for every backend, operator, mode and second order; an engine
that runs the cut inside its own compiled program (JAX, ``structures_inside``) receives the leaves
and returns leaves, so a prepared call adds no array operation outside it.

**Which nodes.** Plain containers (``dict``, ``list``, ``tuple``, namedtuples; ``None`` as an empty
node, as JAX and optree treat it) are walked here, on every backend, keeping the order of dict keys.
Any other object is flattened by the tree registry of the engine that owns it: ``jax.tree_util`` (a
class a JAX user registered, ``flax.struct`` dataclasses, ...) or ``torch.utils._pytree`` (the registry
``torch.func`` uses), whichever is imported and knows it. Anything else is an error naming its path.
Measured on a dict of 10 arrays (2-core CPU VM, Python 3.11, ``benchmarks/results/structured.md``,
2026-11-24): this walk takes 0.6 us (2.0 us with each leaf's type, shape and dtype compared, as a
prepared call does), ``jax.tree_util.tree_flatten`` with a treedef comparison 1.0 us, optree 2.7 us
and ``torch.utils._pytree`` 3.8 us.

**Leaves.** Arrays of one family and one precision (the flat vector has it; mixed dtypes are
refused with the two paths, rather than promoted and silently cast back). ``f(x)`` may mix dtypes:
its vector has the promoted dtype and each result leaf is cast back to its own.

**Complex leaves** take two stretches of the real vector, the real part then the imaginary part,
and ``f`` receives ``re + 1j * im``: every engine differentiates real numbers only, so the results
follow one convention (torch's: the gradient of a real ``f`` is ``df/da + i df/db``; a pullback is
``J^H ty``) whatever the engine's own. A Jacobian block of a complex x leaf is taken from the real
part's columns: ``dy/dz`` for a holomorphic ``f``, which the frontend makes the user say.

Size: over 400 lines in one module, because the walk, the layout and the structured runners share one
representation of a structure (its spec, paths, shapes and offsets).
"""

from __future__ import annotations

import sys
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .arrays import (
    JAX,
    NUMPY,
    TENSORFLOW,
    TORCH,
    as_input,
    complex_dtype,
    describe,
    dtype_name,
    dtype_str,
    family,
    output_like,
    real_floating_dtype,
    to_family,
)
from .errors import PreparationMismatchError, StructuredOutputError
from .operators import Operator

if TYPE_CHECKING:
    from collections.abc import Hashable
    from typing import TypeAlias

    from .contexts import Contexts
    from .types import Array, DType

    Tangent: TypeAlias = "Array | tuple[Array, ...] | None"  # one tangent, a batch of them, or none

LEAF, NONE, DICT, SEQ, JAX_NODE, TORCH_NODE = range(6)


class Mismatch(Exception):
    """A value that does not fit a structure: where, what the structure has there, what was found."""

    def __init__(self, path: str, made: str, got: str) -> None:
        super().__init__(path, made, got)
        self.path, self.made, self.got = path, made, got


def _key(k: Hashable) -> str:
    return f"[{k!r}]"


def _registered(value: Any) -> tuple[int, Any, list[Any], list[str]] | None:
    """``(tool, treedef, leaves, paths)`` from the tree registry of an imported engine that knows
    ``value``'s type (JAX first, then torch), or None."""
    jax = sys.modules.get("jax")
    if jax is not None:
        tu = jax.tree_util
        with_path, treedef = tu.tree_flatten_with_path(value)
        if not (treedef.num_leaves == 1 and with_path and with_path[0][1] is value):
            return JAX_NODE, treedef, [v for _, v in with_path], [tu.keystr(p) for p, _ in with_path]
    pytree = sys.modules.get("torch.utils._pytree")
    if pytree is not None and type(value) in pytree.SUPPORTED_NODES:
        flat, spec = pytree.tree_flatten(value)
        return TORCH_NODE, spec, flat, [f"<leaf {i}>" for i in range(len(flat))]
    return None


class Structure:
    """The shape of a structured value: its nodes (``spec``), and for each leaf its path, shape,
    dtype and place in the flat vector. A single array is the ``trivial`` structure (one leaf, no
    node), which ravels and unravels to itself."""

    __slots__ = (
        "spec",
        "paths",
        "shapes",
        "dtypes",
        "types",
        "sizes",
        "offsets",
        "size",
        "trivial",
        "mixed",
        "complex",
        "pieces",
        "vectors",
    )

    def __init__(self, spec: Any, leaves: list[Any], paths: list[str]) -> None:
        self.spec, self.paths = spec, paths
        self.shapes = [tuple(getattr(v, "shape", ())) for v in leaves]
        self.dtypes = [getattr(v, "dtype", None) for v in leaves]
        self.types = [type(v) for v in leaves]
        # a complex leaf takes two stretches of the real vector: its real part, then its imaginary part
        self.complex = [d is not None and complex_dtype(d) for d in self.dtypes]
        self.sizes = [int(np.prod(s, dtype=np.int64)) for s in self.shapes]
        self.pieces = [piece for n, c in zip(self.sizes, self.complex) for piece in ((n, n) if c else (n,))]
        spans = [2 * n if c else n for n, c in zip(self.sizes, self.complex)]
        self.offsets = list(np.cumsum([0] + spans[:-1]).tolist()) if leaves else []
        self.size = sum(spans)
        self.trivial = spec[0] == LEAF and not any(self.complex)
        self.vectors = [len(shape) == 1 for shape in self.shapes]  # 1-D leaves need no reshape (torch: 1 us each)
        self.mixed = len({str(d) for d in self.dtypes}) > 1

    # -- building ------------------------------------------------------------------------------

    @classmethod
    def of(cls, value: Any, what: str) -> Structure:
        """The structure of ``value`` (``what`` names it in errors: ``x``, ``f(x)``)."""
        leaves: list[Any] = []
        paths: list[str] = []
        spec = _spec(value, "", leaves, paths, what)
        return cls(spec, leaves, paths)

    def leaves(self, value: Any) -> list[Any]:
        """The leaves of ``value``, which must have this structure (else :class:`Mismatch`)."""
        if self.spec[0] == LEAF:
            if value is None or isinstance(value, (dict, list, tuple)):
                raise Mismatch("", "an array", type(value).__name__)
            return [value]
        out: list[Any] = []
        _collect(self.spec, value, "", out)
        return out

    def checked(self, value: Any, strict: bool = True) -> list[Any]:
        """:meth:`leaves`, each of the prepared shape and, with ``strict``, family and dtype (else
        :class:`Mismatch`; a numpy scalar and a 0-d array are alike). Shapes are always checked:
        leaves of other shapes but the same total size would be cut at the wrong places."""
        out = self.leaves(value)
        for i, (v, kind, shape, dtype) in enumerate(zip(out, self.types, self.shapes, self.dtypes)):
            if getattr(v, "shape", ()) == shape and (
                not strict
                or (type(v) is kind and getattr(v, "dtype", None) == dtype)
                or (family(v) == _family_of(kind) and _dtype_name(v) == _dtype_name(dtype, kind))
            ):
                continue
            raise Mismatch(self.paths[i], leaf_repr(kind, shape, dtype), describe(v))
        return out

    def build(self, leaves: list[Any]) -> Any:
        """The structure with these leaves (in order)."""
        if self.trivial:
            return leaves[0]
        return _build(self.spec, iter(leaves))

    # -- the flat vector ---------------------------------------------------------------------------

    def ravel(self, leaves: list[Any]) -> Any:
        """The leaves as one real vector (the engine's arrays or traced values; a complex leaf as its
        real part then its imaginary part): the leaf itself for a trivial structure."""
        if self.trivial:
            return leaves[0]
        parts = []
        for v, c, vector in zip(leaves, self.complex, self.vectors):
            flat = v if vector else _reshape(v, (-1,))
            parts += _real_imag(flat) if c else [flat]
        return parts[0] if len(parts) == 1 else _concat(parts)

    def unravel(self, flat: Any, result: bool = False) -> list[Any]:
        """The leaves of a vector made by :meth:`ravel` (views where the engine has them; a complex
        leaf ``re + 1j * im``, which each engine differentiates as the real pair it is). ``result``:
        a computed result, not an input of ``f`` (nothing writes into its leaves)."""
        if self.trivial:
            return [flat]
        if family(flat) == TORCH and (result or (flat.is_leaf and flat.requires_grad)):
            # one split, whose backward is one concatenation (slices would each add a zero-filled
            # full-size gradient). Its views refuse writes, as a leaf that requires grad does anyway:
            # torch's adapter then runs f on a copy of the vector (not a leaf), cut into slices that
            # take writes.
            parts = iter(flat.split(self.pieces))
        else:
            starts = np.cumsum([0] + self.pieces[:-1]).tolist()
            parts = iter([flat[o : o + n] for o, n in zip(starts, self.pieces)])
        out = []
        for shape, c, vector in zip(self.shapes, self.complex, self.vectors):
            part = next(parts)
            if c:
                part = _complex(part, next(parts))
            out.append(part if vector else _reshape(part, shape))  # a 1-D leaf: its part as it is
        return out

    @property
    def has_complex(self) -> bool:
        return any(self.complex)

    @property
    def trivial_shape(self) -> bool:
        """One array, not a container (it may be complex)."""
        return self.spec[0] == LEAF


def _dtype_name(value: Any, kind: Any = None) -> str:
    """The dtype of a leaf (or a dtype, with the leaf's type ``kind``) by name: float64 for Python floats."""
    dtype = value if kind is not None else getattr(value, "dtype", None)
    if dtype is None:
        kind = kind if kind is not None else type(value)
        return "float64" if issubclass(kind, float) else "complex128" if issubclass(kind, complex) else ""
    return dtype_str(dtype)


def leaf_repr(kind: type, shape: tuple[Any, ...], dtype: DType | None) -> str:
    """What :func:`describe` says of a leaf of this type, shape and dtype."""
    if issubclass(kind, float) and not issubclass(kind, np.generic):
        return "Python float"
    fam = _family_of(kind)
    return f"{fam} {dtype_str(dtype)} {shape}"


def _spec(value: Any, path: str, leaves: list[Any], paths: list[str], what: str) -> Any:
    if family(value) is not None:
        leaves.append(value)
        paths.append(path)
        return (LEAF,)
    if value is None:
        return (NONE,)
    kind = type(value)
    if kind in (dict, OrderedDict, defaultdict):  # dicts whose items are all there is to them
        keys = tuple(value)
        children = tuple(_spec(value[k], path + _key(k), leaves, paths, what) for k in keys)
        return (DICT, kind, keys, frozenset(keys), children)
    if kind is list or kind is tuple or (isinstance(value, tuple) and hasattr(value, "_fields")):
        children = tuple(_spec(v, f"{path}[{i}]", leaves, paths, what) for i, v in enumerate(value))
        return (SEQ, kind, len(value), children)
    registered = _registered(value)
    if registered is not None:
        tool, treedef, flat, flat_paths = registered
        for v, p in zip(flat, flat_paths):
            if family(v) is None:
                raise TypeError(f"{what}{path}{p} is a {type(v).__name__}; the leaves of a structure must be arrays")
            leaves.append(v)
            paths.append(path + p)
        return (tool, treedef, len(flat))
    raise TypeError(
        f"{what}{path} is a {kind.__name__}, which is neither an array nor a container diffinterface can walk: "
        f"use dicts, lists, tuples or namedtuples of arrays, or register the class with "
        f"jax.tree_util.register_pytree_node (JAX arrays) or torch.utils._pytree.register_pytree_node (tensors)"
    )


def _collect(spec: Any, value: Any, path: str, out: list[Any]) -> None:
    tag = spec[0]
    if tag == LEAF:  # an array, or an engine's traced value (an autograd box)
        if value is None or isinstance(value, (dict, list, tuple)):
            raise Mismatch(path, "an array", type(value).__name__)
        out.append(value)
    elif tag == DICT:
        _, kind, keys, keyset, children = spec
        if type(value) is not kind or value.keys() != keyset:
            got = (
                f"a {type(value).__name__} with keys {list(value)}" if isinstance(value, dict) else type(value).__name__
            )
            raise Mismatch(path, f"a {kind.__name__} with keys {list(keys)}", got)
        for k, child in zip(keys, children):
            if child[0] == LEAF:
                out.append(value[k])
            else:
                _collect(child, value[k], path + _key(k), out)
    elif tag == SEQ:
        _, kind, n, children = spec
        if type(value) is not kind or len(value) != n:
            got = (
                f"a {type(value).__name__} of {len(value)}"
                if isinstance(value, (list, tuple))
                else type(value).__name__
            )
            raise Mismatch(path, f"a {kind.__name__} of {n}", got)
        for i, (v, child) in enumerate(zip(value, children)):
            if child[0] == LEAF:
                out.append(v)
            else:
                _collect(child, v, f"{path}[{i}]", out)
    elif tag == NONE:
        if value is not None:
            raise Mismatch(path, "None", type(value).__name__)
    else:
        registered = _registered(value)
        if registered is None or registered[0] != tag or registered[1] != spec[1]:
            raise Mismatch(path, f"the registered structure {spec[1]}", type(value).__name__)
        out.extend(registered[2])


def _build(spec: Any, leaves: Any) -> Any:
    tag = spec[0]
    if tag == LEAF:
        return next(leaves)
    if tag == NONE:
        return None
    if tag == DICT:
        _, kind, keys, _, children = spec
        mapping = {k: _build(c, leaves) for k, c in zip(keys, children)}
        if kind is dict:
            return mapping
        return kind(mapping) if kind is OrderedDict else defaultdict(None, mapping)
    if tag == SEQ:
        _, kind, _, children = spec
        items = [_build(c, leaves) for c in children]
        if kind is list:
            return items
        return tuple(items) if kind is tuple else kind(*items)
    values = [next(leaves) for _ in range(spec[2])]
    if tag == JAX_NODE:
        return spec[1].unflatten(values)
    return sys.modules["torch.utils._pytree"].tree_unflatten(values, spec[1])


def _reshape(value: Any, shape: tuple[Any, ...]) -> Any:
    if hasattr(value, "reshape"):
        return value.reshape(shape)
    namespace = getattr(value, "__array_namespace__", None)  # an array with no method (TensorFlow's tensors)
    if namespace is not None:
        return namespace().reshape(value, shape)
    fam = family(value)
    if fam not in (None, NUMPY):  # outside the engine's call (the user's x, a result): through numpy
        return to_family(np.reshape(to_family(value, NUMPY), shape), fam)
    return np.reshape(value, shape)


def _complex(re: Any, im: Any) -> Any:
    """``re + 1j * im``; for arrays whose real parts do not promote to complex by themselves (TensorFlow's
    tensors: no ``.real``, an array API namespace), both cast to the complex dtype first."""
    if family(re) != TENSORFLOW:
        return re + 1j * im
    dtype = np.complex64 if np.dtype(dtype_name(re)) == np.float32 else np.complex128
    if hasattr(re, "__array_namespace__"):  # inside the engine's call, where f's arrays have a namespace
        xp = re.__array_namespace__()
        return xp.astype(re, dtype) + 1j * xp.astype(im, dtype)
    fam = family(re)  # a computed result: through numpy, back to its family
    both = np.asarray(to_family(re, NUMPY), dtype) + 1j * np.asarray(to_family(im, NUMPY), dtype)
    return to_family(both, fam)


def _real_imag(value: Any) -> list[Any]:
    """``[real, imaginary]`` parts of an array or traced value (a real one: its imaginary part zero)."""
    if not complex_dtype(getattr(value, "dtype", None)):
        return [value, value * 0]
    tracer = sys.modules.get("autograd.tracer")
    if tracer is not None and isinstance(value, tracer.Box):  # autograd's boxes have no .real
        anp = sys.modules["autograd.numpy"]
        return [anp.real(value), anp.imag(value)]
    if family(value) == TENSORFLOW:  # no .real: by their namespace inside a call, else through numpy
        if hasattr(value, "__array_namespace__"):
            xp = value.__array_namespace__()
            return [xp.real(value), xp.imag(value)]
        fam, array = family(value), np.asarray(to_family(value, NUMPY))
        return [
            to_family(np.ascontiguousarray(np.real(array)), fam),
            to_family(np.ascontiguousarray(np.imag(array)), fam),
        ]
    return [value.real, value.imag]


def _concat(parts: list[Any]) -> Any:
    """One vector from 1-D parts of one engine (arrays or traced values), by the engine's own concatenate."""
    fam = family(parts[0])
    if fam == NUMPY:
        return np.concatenate(parts)
    if fam == TORCH:
        return sys.modules["torch"].cat(parts)
    if fam == JAX:
        return sys.modules["jax.numpy"].concatenate(parts)
    tracer = sys.modules.get("autograd.tracer")
    if tracer is not None and any(isinstance(p, tracer.Box) for p in parts):
        return sys.modules["autograd.numpy"].concatenate(parts)
    if fam == TENSORFLOW and not hasattr(parts[0], "__array_namespace__"):  # outside the adapter's call
        return to_family(np.concatenate([np.asarray(to_family(p, NUMPY)) for p in parts]), fam)
    from array_api_compat import array_namespace

    return array_namespace(*parts).concat(parts)


def _cast(value: Any, dtype: DType | None) -> Any:
    if value.dtype == dtype:
        return value
    if family(value) == TORCH:
        return value.to(dtype)
    if family(value) == TENSORFLOW:  # no .astype: by their namespace inside a call, else through numpy
        if hasattr(value, "__array_namespace__"):
            return value.__array_namespace__().astype(value, dtype)
        return to_family(
            np.asarray(to_family(value, NUMPY)).astype(np.dtype(_dtype_name(dtype, type(value)))), family(value)
        )
    return value.astype(dtype)


class Layout:
    """How one prep maps its structures onto the flat problem: ``xs`` for ``x`` (and tangents shaped
    like it), ``ys`` for ``f(x)``, learnt from the first evaluation of ``f`` (:meth:`ravel_output`)."""

    __slots__ = ("xs", "ys", "call")
    xs: Structure
    ys: Structure | None
    call: str

    def __init__(self, xs: Structure, call: str) -> None:
        self.xs, self.ys, self.call = xs, None, call

    def tangent(self, operator: Operator) -> Structure | None:
        """The structure of ``operator``'s tangent: ``xs`` (pushforward, hvp), ``ys`` (pullback), or None."""
        like = operator.tangent_of
        return None if like is None else self.xs if like == "x" else self.ys

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` as the flat problem's function: a vector in, a vector (or f's own array) out. It
        also takes the list of x's leaves (JAX's pytree transforms pass that: see backends/jax.py)."""
        xs, ravel = self.xs, self.ravel_output
        if xs.trivial:
            return lambda v, *contexts: ravel(fn(v[0] if type(v) is list else v, *contexts))
        unravel, build = xs.unravel, xs.build
        return lambda v, *contexts: ravel(fn(build(v if type(v) is list else unravel(v)), *contexts))

    def ravel_output(self, y: Any) -> Any:
        ys = self.ys
        if ys is None:  # the first evaluation, at preparation
            ys = self.ys = Structure.of(y, "f(x)")
            if not ys.trivial:
                for i, v in enumerate(ys.types):
                    if not hasattr(v, "shape") and not issubclass(v, float):
                        raise TypeError(f"{self.call}: f(x){ys.paths[i]} is a {v.__name__}; return arrays")
        if ys.trivial:
            if isinstance(y, (dict, list, tuple)):
                raise StructuredOutputError(
                    f"{self.call}: f returned a {type(y).__name__} where it returned one array at preparation"
                )
            return y
        try:
            leaves = ys.checked(y, False)  # shapes too: other shapes of one total size would be cut wrongly
        except Mismatch as m:
            raise ValueError(
                f"{self.call}: f(x){m.path} is {m.got} where it was {m.made} at preparation; "
                f"f must return the same structure at every point"
            ) from None
        return ys.ravel(leaves)

    # -- results ---------------------------------------------------------------------------------

    def cut(self, kind: str, result: Any) -> Any:
        """A flat result of ``kind`` (see ``Operator.results``) as the list of its leaves (for ``*`` kinds,
        a tuple of lists), by array operations that engines trace (slices and reshapes)."""
        if kind[0] == "*":
            return tuple(self.cut(kind[1], r) for r in result)
        if kind == "s":
            return [result]
        if kind == "x":
            return self.xs.unravel(result, True)
        ys = self.ys
        assert ys is not None
        if kind == "y":
            leaves = ys.unravel(result, True)
            return [_cast(v, d) for v, d in zip(leaves, ys.dtypes)] if ys.mixed else leaves
        rows, cols = (ys, self.xs) if kind == "J" else (self.xs, self.xs)
        matrix = _reshape(result, (rows.size, cols.size))
        out = []
        for ro, rn, rshape, rdtype, rc in zip(rows.offsets, rows.sizes, rows.shapes, rows.dtypes, rows.complex):
            for co, cn, cshape in zip(cols.offsets, cols.sizes, cols.shapes):
                # a complex x leaf: the columns of its real part, d/dz of a holomorphic f (the frontend
                # asks for holomorphic=True); a complex f(x) leaf: its real rows + 1j * its imaginary rows
                block = matrix[ro : ro + rn, co : co + cn]
                if rc:
                    block = _complex(block, matrix[ro + rn : ro + 2 * rn, co : co + cn])
                block = _reshape(block, rshape + cshape)
                out.append(_cast(block, rdtype) if rows.mixed or rc else block)
        return out

    def cut_all(self, operator: Operator, value: bool, results: Any) -> Any:
        """Every result of one runner call (the value form's tuple, or the plain result), cut."""
        kinds = operator.results
        if value:
            return tuple(self.cut(k, r) for k, r in zip(kinds, results))
        return self.cut(kinds[-1], results)

    def build(self, kind: str, leaves: Any, like: Array, batched: bool) -> Any:
        """The user's result of ``kind`` from its leaves, each in the family of ``like`` (a leaf of x)."""
        if kind[0] == "*":
            out = tuple(self.build(kind[1], ls, like, False) for ls in leaves)
            return out if batched else out[0]
        leaves = [output_like(v, like) for v in leaves]
        if kind == "s":
            return leaves[0]
        if kind == "x":
            xs = self.xs
            if float in xs.types:  # a Python float leaf of x: its result a numpy float64, as for a float x
                leaves = [v[()] if t is float and isinstance(v, np.ndarray) else v for v, t in zip(leaves, xs.types)]
            return xs.build(leaves)
        ys = self.ys
        assert ys is not None
        if kind == "y":
            return ys.build(leaves)
        rows, cols = (ys, self.xs) if kind == "J" else (self.xs, self.xs)
        n = len(cols.shapes)
        return rows.build([cols.build(leaves[i * n : (i + 1) * n]) for i in range(len(rows.shapes))])


def real_dtype_name(dtype: DType | None) -> str:
    """``float64`` for float64 and complex128, ``float32`` for float32 and complex64 (by name)."""
    name = dtype_str(dtype)
    return {"complex128": "float64", "complex64": "float32"}.get(name, name)


def check_leaves(structure: Structure, what: str, call: str) -> None:
    """The leaves of ``x``: arrays (or Python floats) of one family, real or complex floating of one
    precision, and (torch) on one device."""
    if not structure.paths:
        raise ValueError(f"{call}: {what} has no array leaves: there is nothing to differentiate")
    first = None
    for path, kind, dtype, is_complex in zip(structure.paths, structure.types, structure.dtypes, structure.complex):
        python_float = issubclass(kind, float) and not issubclass(kind, np.generic)
        if not python_float and not is_complex and not real_floating_dtype(dtype):
            raise TypeError(
                f"{call}: {what}{path} has dtype {dtype_str(dtype)}; derivatives need floating "
                f"leaves (real or complex): pass floats (e.g. a.astype(float))"
            )
        fam, name = (NUMPY, "float64") if python_float else (_family_of(kind), real_dtype_name(dtype))
        if first is None:
            first = (path, fam, name)
        elif fam != first[1]:
            raise TypeError(
                f"{call}: {what}{first[0]} is a {first[1]} array and {what}{path} a {fam} one; the leaves of "
                f"a structure must be arrays of one library"
            )
        elif name != first[2]:
            raise TypeError(
                f"{call}: {what}{first[0]} has precision {first[2]} and {what}{path} {name}; the leaves of a "
                f"structure are differentiated as one real vector and must share one precision: cast them"
            )


def check_devices(leaves: list[Any], paths: list[str], what: str, call: str) -> None:
    if family(leaves[0]) != TORCH:  # numpy arrays are on the CPU, jax moves its arrays itself
        return
    devices = [v.device for v in leaves]
    for path, dev in zip(paths, devices):
        if dev != devices[0]:
            raise ValueError(
                f"{call}: {what}{paths[0]} is on {devices[0]} and {what}{path} on {dev}; the leaves of a "
                f"structure must be on one device"
            )


def _family_of(kind: type) -> Any:
    from .arrays import family_of_type

    return family_of_type(kind)


def tangent_leaves(tangent: Tangent, structure: Structure, like: Array) -> tuple[tuple[list[Any], ...], bool]:
    """The leaves of a tangent shaped like ``structure``, or of each of a tuple of them (``batched``),
    in the family of ``like`` (a leaf of x); :class:`Mismatch` with the path (``[i]...`` in a batch)."""
    items: tuple[list[Any], ...]
    try:
        items, batched = (structure.checked(tangent, False),), False
    except Mismatch:
        if type(tangent) is not tuple or not tangent:
            raise
        items, batched = (), True
        for i, t in enumerate(tangent):
            try:
                items += (structure.checked(t, False),)
            except Mismatch as m:
                raise Mismatch(f"[{i}]{m.path}", m.made, m.got) from None
    for k, leaves in enumerate(items):  # a complex tangent of a real leaf would be cast to its real part
        for v, is_complex, path in zip(leaves, structure.complex, structure.paths):
            if not is_complex and (type(v) is complex or complex_dtype(getattr(v, "dtype", None))):
                where = f"[{k}]{path}" if batched else path
                raise Mismatch(where, "a real tangent (x there is real)", describe(v))
    fam = family(like)
    converted = tuple(
        [v if family(v) == fam and type(v) is not float else to_family(as_input(v), fam, like=like) for v in t]
        for t in items
    )
    return converted, batched


class StructuredRunners:
    """The runners of a prep with a structured ``x`` or ``f(x)``, around the adapter's runners of the
    flat problem: ``run(value, x, tangent, contexts)`` checks and flattens ``x`` and the tangent (one,
    or a tuple of them: a batch), runs the adapter, and builds the results' structures in the family
    of ``x``. ``inside``: the adapter takes and returns leaves (``structures_inside``)."""

    __slots__ = ("inner", "layout", "operator", "inside", "call", "strict", "tangent", "numpy_x")

    def __init__(self, inner: Any, layout: Layout, operator: Operator, inside: bool, call: str, strict: bool) -> None:
        self.inner, self.layout, self.operator, self.inside = inner, layout, operator, inside
        self.call, self.strict = call, strict
        self.tangent = layout.tangent(operator)
        self.numpy_x = _family_of(layout.xs.types[0]) == NUMPY

    def _mismatch(self, name: str, m: Mismatch) -> PreparationMismatchError:
        return PreparationMismatchError(
            f"{self.call}: {name}{m.path}: prepared for {m.made}; got {m.got}. Prepare again with these "
            f"arguments, or pass arguments of the structure, shapes and dtypes the prep was made for"
        )

    def x_leaves(self, x: Array) -> list[Any]:
        try:
            leaves = self.layout.xs.checked(x, self.strict)
        except Mismatch as m:
            raise self._mismatch("x", m) from None
        if self.numpy_x:  # Python floats as 0-d arrays, numpy arrays of another byte order as native ones
            leaves = [as_input(v) for v in leaves]
        return leaves

    def run(self, value: bool, x: Array, tangent: Tangent, contexts: Contexts) -> Any:
        layout, operator = self.layout, self.operator
        leaves = self.x_leaves(x)
        like = leaves[0]
        batched = False
        tangents: tuple[Any, ...] = ()
        if self.tangent is not None:
            try:
                tangents, batched = tangent_leaves(tangent, self.tangent, like)
            except Mismatch as m:
                raise self._mismatch(operator.tangent or "", m) from None
        inner = self.inner.value if value else self.inner.plain
        if self.inside:
            results = inner(leaves, tangents, contexts)
        else:
            structure = self.tangent
            flat_ts = tuple(structure.ravel(t) for t in tangents) if structure is not None else ()
            results = layout.cut_all(operator, value, inner(layout.xs.ravel(leaves), flat_ts, contexts))
        kinds = operator.results
        if not value:
            out = layout.build(kinds[-1], results, like, batched)
            return out[()] if type(x) is complex and type(out) is np.ndarray and out.ndim == 0 else out
        out = tuple(layout.build(k, r, like, batched) for k, r in zip(kinds, results))
        if type(x) is complex:  # as a Python float x gives np.float64: 0-d results as numpy scalars
            out = tuple(v[()] if type(v) is np.ndarray and v.ndim == 0 else v for v in out)
        return out

    def plain(self, x: Array, tangent: Tangent, contexts: Contexts) -> Any:
        return self.run(False, x, tangent, contexts)

    def value(self, x: Array, tangent: Tangent, contexts: Contexts) -> Any:
        return self.run(True, x, tangent, contexts)
