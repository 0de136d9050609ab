"""``Prep``: what ``prepare_*`` computed once, and the strict check of the arguments it meets later."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._core.arrays import as_input, describe, dtype_str, family_of_type, is_native, key_attribute
from .._core.contexts import Context
from .._core.errors import PreparationMismatchError
from .._core.operators import Operator
from .sparse_results import SparsePlan

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._adapters.target import Target
    from .._core.configs import Backend


def signature(value: Any) -> Any:
    """What a prep depends on in an argument: its type, shape and dtype (never its values)."""
    shape = getattr(value, "shape", None)
    if shape is not None:
        return (type(value), tuple(shape), value.dtype)
    if isinstance(value, Context):
        return (type(value), signature(value.value))
    if isinstance(value, (tuple, list)):
        return (type(value), tuple(signature(v) for v in value))
    if isinstance(value, dict):
        return (dict, tuple((k, signature(v)) for k, v in value.items()))
    return type(value)


def _native_numpy(args: tuple[Any, ...]) -> bool:
    """Whether ``args`` are one or two numpy arrays of native byte order (x, and a tangent)."""
    n = len(args)
    if n == 1:
        x = args[0]
        return type(x) is np.ndarray and x.dtype.isnative
    if n == 2:
        x, t = args
        return type(x) is np.ndarray and type(t) is np.ndarray and x.dtype.isnative and t.dtype.isnative
    return False


def describe_arg(value: Any) -> str:
    if isinstance(value, Context):
        return f"{type(value).__name__}({describe_arg(value.value)})"
    if isinstance(value, list):
        return "[" + ", ".join(describe_arg(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(describe_arg(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {describe_arg(v)}" for k, v in value.items()) + "}"
    return describe(value)


def describe_signature(sig: Any) -> str:
    """:func:`describe_arg` of a value, from its :func:`signature` alone (a prep keeps signatures, not
    the arrays it was made with): ``numpy float64 (3,)``, ``Python float``, ``Constant([numpy ...])``."""
    if type(sig) is tuple and len(sig) == 3:  # an array: (type, shape, dtype)
        kind, dims, dtype = sig
        fam = family_of_type(kind)
        return kind.__name__ if fam is None else f"{fam} {dtype_str(dtype)} {dims}"
    if type(sig) is tuple:  # (Context type, signature), (sequence type, signatures) or (dict, items)
        kind, inner = sig
        if issubclass(kind, Context):
            return f"{kind.__name__}({describe_signature(inner)})"
        if kind is dict:
            return "{" + ", ".join(f"{k!r}: {describe_signature(v)}" for k, v in inner) + "}"
        if issubclass(kind, list):
            return "[" + ", ".join(describe_signature(v) for v in inner) + "]"
        return "(" + ", ".join(describe_signature(v) for v in inner) + ("," if len(inner) == 1 else "") + ")"
    if isinstance(sig, type) and issubclass(sig, (float, int, complex)) and not issubclass(sig, np.generic):
        return f"Python {sig.__name__}"
    return sig.__name__ if isinstance(sig, type) else str(sig)


def same_function(f: Callable[..., Any], g: Any) -> bool:
    """Identity, except that bound methods (a new object at every attribute access) compare by value."""
    return f is g or (isinstance(f, types.MethodType) and f == g)


class Prep:
    """The result of ``prepare_<operator>``: pass it as ``prep=`` to run only the fast path.

    Valid for the same ``f`` and backend and for arguments of the same family, shape and dtype;
    with ``strict=True`` a call whose arguments differ raises :class:`PreparationMismatchError`.

    Example:

        >>> f = lambda x: (x ** 2).sum()
        >>> prep = di.prepare_gradient(di.AutoFiniteDiff(), f, np.zeros(3))  # once
        >>> for k in (1.0, 2.0):  # then only the fast path
        ...     print(di.gradient(di.AutoFiniteDiff(), f, np.full(3, k), prep=prep).round(6))
        [2. 2. 2.]
        [4. 4. 4.]
    """

    __slots__ = (
        "operator",
        "backend",
        "f",
        "adapter",
        "data",
        "target",
        "names",
        "_described",
        "signature",
        "strict",
        "plain",
        "one",
        "structured",
        "holomorphic",
        "_arrays",
        "fast_key",
        "key_attr",
        "sparse",
        "result_type",
        "to_numpy",
        "has_aux",
        "aux_signature",
        "aux_description",
        "aux_first",
        "slots",
        "__weakref__",  # a prep shared by a code's new functions is found through a weak reference (reuse)
    )
    operator: Operator  # GRADIENT, HVP, ... (its str() is the name)
    backend: Any  # the config it was made for
    f: Callable[..., Any]
    adapter: Any  # the backend's adapter
    data: Any  # what the adapter's prepare returned (its runners)
    target: Any  # f as adapters call it (_adapters.target.Target)
    names: tuple[str, ...]  # the argument names, for messages
    _described: tuple[str, ...] | None  # a structured prep's descriptions, made at preparation (else: args)
    signature: tuple[Any, ...]  # what a later call's arguments are compared with
    strict: bool
    plain: Callable[..., Any]  # the plain runner, (x, tangents, contexts) -> result
    one: Callable[..., Any] | None  # a tangent operator's fast runner of one tangent, (x, t) -> result, or None
    structured: bool  # x or f(x) a structure: data is a _core.structure runner, which checks x and the tangent
    holomorphic: bool  # made with holomorphic=True (jacobian, derivative of a complex x)
    _arrays: tuple[Any, ...] | None
    fast_key: tuple[Any, ...] | None
    key_attr: str | None  # what fast_key holds of each array for shape and dtype (JAX's aval), or None
    sparse: bool  # an AutoSparse prep: its results are sparse matrices
    # a numpy x's results, when the engine computes another dense array type: that type and the one
    # function that converts it (what finish does for it), remembered at the first call
    result_type: type | None
    to_numpy: Callable[[Any], Any] | None
    has_aux: bool  # made with has_aux=True: f returns (y, aux)
    aux_signature: Any  # the structure of aux at preparation (compared at each strict call)
    aux_description: str  # for messages
    aux_first: Any  # a one-shot prep's aux, computed at preparation at the call's own x (used once)
    # a kept prep's (prep_cache): what f's slots held besides state when it was made, checked before each
    # call it serves (_closures.slots); None for any other prep
    slots: Any

    def __init__(
        self,
        operator: Operator,
        backend: Backend,
        f: Callable[..., Any],
        adapter: Any,
        data: Any,
        target: Target,
        names: Any,
        args: Any,
        strict: Any,
        oneshot: Any = False,
        structured: bool = False,
        has_aux: bool = False,
    ) -> None:
        self.operator, self.backend, self.f, self.adapter = operator, backend, f, adapter
        self.structured = structured
        self.holomorphic = False
        self.data, self.target, self.names, self.strict = data, target, names, strict
        self.sparse = isinstance(getattr(data, "data", None), SparsePlan)
        self.result_type = self.to_numpy = None
        self.has_aux, self.aux_signature, self.aux_description, self.aux_first = has_aux, None, "", None
        self.slots = None
        if oneshot:
            # made for one unprepared call (pipeline._execute runs data's runners): never checked, and
            # no fast path to bind (a first call of a new function makes one)
            self.signature, self._described, self.plain, self._arrays, self.fast_key = (), None, data.plain, None, None
            self.one = self.key_attr = None
            return
        (self.plain, self.one), self.key_attr = _fast_runners(data, operator), None
        # the descriptions for messages (args) are made from the signature when a message needs them
        self._described = None
        if not structured and not has_aux and _native_numpy(args):
            # numpy x (and its tangent) in native byte order, the common case: the signature and the fast
            # key below without the general walk of the arguments (with pipeline._tangents' and the finite
            # differences adapter's numpy paths: a prepare_pushforward at n = 10, 44.5 -> 38.3 us, measured
            # 2026-11-28 on a 2-core x86_64 VM under load, thread time)
            x = args[0]
            shape, dtype = x.shape, x.dtype
            if len(args) == 1:
                self.signature = self._arrays = ((np.ndarray, shape, dtype),)
                self.fast_key = (operator, backend, f, np.ndarray, shape, dtype)
            else:
                t = args[1]
                self.signature = self._arrays = ((np.ndarray, shape, dtype), (np.ndarray, t.shape, t.dtype))
                self.fast_key = (operator, backend, f, np.ndarray, shape, dtype, np.ndarray, t.shape, t.dtype)
            return
        self.signature = tuple(signature(a) for a in args)
        if structured and self.signature:  # x and the tangent: checked leaf by leaf as they are flattened
            self._described = tuple(describe_arg(a) for a in args)
            held = 2 if names[1:2] in (("tx",), ("ty",)) else 1
            self.signature = (None,) * held + self.signature[held:]
        if args and not is_native(args[0]):  # x of non-native byte order: converted on every call
            plain = data.plain
            self.plain, self.one = lambda x, tangents, contexts: plain(as_input(x), tangents, contexts), None
        # (type, shape, dtype) of each argument when all are arrays: compared inline on the fast path
        # (a has_aux prep takes the full check, which compares aux too)
        arrays = bool(self.signature) and all(
            type(s) is tuple and len(s) == 3 and hasattr(a, "shape") for s, a in zip(self.signature, args)
        )
        self._arrays = self.signature if arrays and not has_aux else None
        # the prepared fast path's test in one tuple comparison (run_prepared, run_prepared_tangent):
        # (operator, backend, f, then each argument's type, shape and dtype); None where check decides
        self.fast_key = (operator, backend, f, *(v for s in self._arrays for v in s)) if self._arrays else None
        self.key_attr = attr = key_attribute(args) if self._arrays else None
        if attr is not None:  # each argument's type and key attribute (JAX's aval) in place of shape and dtype
            self.fast_key = (operator, backend, f, *(v for a in args for v in (type(a), getattr(a, attr))))

    @property
    def args(self) -> tuple[str, ...]:
        """A description of each argument the prep was made for (``numpy float64 (3,)``), for messages."""
        if self._described is not None:
            return self._described
        return tuple(describe_signature(s) for s in self.signature)

    def _sparse(self, what: str) -> Any:
        if not self.sparse:
            raise AttributeError(
                f"prep.{what}: this prep is for {self.operator} with {self.backend!r}; the sparsity pattern and "
                f"its coloring belong to jacobian and hessian preps of AutoSparse backends"
            )
        return self.data.data

    @property
    def sparsity(self) -> Any:
        """The detected sparsity pattern (a boolean ``scipy.sparse.csr_array``; AutoSparse only)."""
        return self._sparse("sparsity").sparsity

    @property
    def colors(self) -> Any:
        """The color of each column (forward), row (reverse) or index (Hessian); ``(column_colors,
        row_colors)`` for a bicoloring (-1: in no seed); AutoSparse only."""
        return self._sparse("colors").colors

    @property
    def ncolors(self) -> int:
        """The products one call makes (pushforwards plus pullbacks, or Hessian-vector products); AutoSparse only."""
        return self._sparse("ncolors").n_colors

    @property
    def sparse_mode(self) -> str:
        """How the sparse derivative is evaluated: "columns" (pushforwards), "rows" (pullbacks),
        "bidirectional" (both; ``colors`` is then ``(column_colors, row_colors)``), "star" or
        "acyclic" (Hessian-vector products; acyclic: recovered by substitution); AutoSparse only."""
        return self._sparse("sparse_mode").mode

    def __repr__(self) -> str:
        made = ", ".join(f"{n}: {a}" for n, a in zip(self.names, self.args))
        return f"Prep({self.operator}, {self.backend!r}, made for {made})"

    def call(self, operator: Operator, backend: Backend) -> str:
        """The call as the user wrote it, for messages: ``pushforward(AutoJAX(), f, x, tx)``."""
        args = ["f"] + [n if n != "y" else "y=y" for n in self.names if not n.startswith("contexts")]
        return f"{operator}({backend!r}, {', '.join(args)})"

    def serves(
        self, operator: Operator, backend: Backend, f: Callable[..., Any], args: tuple[Any, ...], holomorphic: bool
    ) -> bool:
        """Whether this prep serves a call with these arguments without a has_aux, by identity and the
        arrays' types, shapes and dtypes alone (no message is formatted, nothing raises): False where it
        cannot tell that way (then :meth:`check` says). What :meth:`check`'s inline path accepts, for
        ``prep_cache``'s latest-hit lookup."""
        arrays = self._arrays
        if (
            arrays is None
            or operator is not self.operator
            or backend is not self.backend
            or f is not self.f
            or self.has_aux
            or holomorphic != self.holomorphic
            or len(args) != len(arrays)
        ):
            return False
        for a, (kind, shape, dtype) in zip(args, arrays):
            if type(a) is not kind or a.shape != shape or not (a.dtype is dtype or a.dtype == dtype):
                return False
        return True

    def unserved(self) -> Callable[..., Any]:
        """The plain runner, bound from now on where the adapter's ``fast`` one raised ``Unserved``
        (a call it cannot serve as compiled; see ``extend.Runners``)."""
        self.plain, self.one = self.data.plain, None
        return self.plain

    def check(
        self, operator: Operator, backend: Backend, f: Callable[..., Any], args: tuple[Any, ...], has_aux: bool = False
    ) -> None:
        """Raise if this prep cannot serve the call; with ``strict`` also compare every argument.

        This is on the prepared fast path: messages are formatted only on failure (a has_aux prep
        takes the full check: ``_arrays`` is None for it).
        """
        arrays = self._arrays
        if arrays is not None and operator is self.operator and backend is self.backend and f is self.f and not has_aux:
            if len(args) == 1 == len(arrays):  # gradient, jacobian, ...: x alone, compared inline
                x, (kind, shape, dtype) = args[0], arrays[0]
                if type(x) is kind and x.shape == shape and (x.dtype is dtype or x.dtype == dtype):
                    return
            elif len(args) == 2 == len(arrays):  # x and one tangent, unrolled
                x, t = args
                (kx, sx, dx), (kt, st, dt) = arrays
                if (
                    type(x) is kx
                    and type(t) is kt
                    and x.shape == sx
                    and t.shape == st
                    and x.dtype == dx
                    and t.dtype == dt
                ):
                    return
        if self.operator != operator:
            raise PreparationMismatchError(
                f"{self.call(operator, backend)}: prep was made by prepare_{self.operator}; use prepare_{operator} for {operator}"
            )
        if backend is not self.backend and backend != self.backend:
            raise PreparationMismatchError(
                f"{self.call(operator, backend)}: prep was made for backend {self.backend!r}, got {backend!r}; "
                "prepare again for this backend"
            )
        if f is not self.f and not same_function(f, self.f):
            raise PreparationMismatchError(
                f"{self.call(operator, backend)}: prep was made for function {_fname(self.f)}, got {_fname(f)}; "
                "a prep serves the function object it was made for: pass that object, or prepare again"
            )
        if has_aux != self.has_aux:
            raise PreparationMismatchError(
                f"{self.call(operator, backend)}: has_aux={has_aux}, but prep was made with has_aux={self.has_aux}; "
                f"pass has_aux={self.has_aux} to the call, or prepare_{operator} with has_aux={has_aux}"
            )
        if not self.strict:
            return
        expected = self.signature
        if len(args) == len(expected):
            for a, s in zip(args, expected):
                if s is None:  # a structured x or tangent (see __init__)
                    continue
                # arrays (the common case) compare field by field, without building a signature
                if type(s) is tuple and len(s) == 3 and type(a) is s[0] and hasattr(a, "shape"):
                    if a.shape == s[1] and a.dtype == s[2]:
                        continue
                    break
                if signature(a) != s:
                    break
            else:
                return
        lines = []
        got = [describe_arg(a) for a in args]
        for i in range(max(len(got), len(self.args))):
            name = self.names[i] if i < len(self.names) else f"contexts[{i - len(self.names)}]"
            made = self.args[i] if i < len(self.args) else "(nothing)"
            now = got[i] if i < len(got) else "(nothing)"
            same = i < len(args) and self.signature[i] in (None, signature(args[i]))
            if made == now and not same and i < len(args):  # same description, other Python type
                kind = self.signature[i][0] if type(self.signature[i]) is tuple else self.signature[i]
                made = f"{made} as {getattr(kind, '__qualname__', kind)}"
                now = f"{now} as {type(args[i]).__qualname__}"
            mark = "" if made == now and same else "   <- differs"
            lines.append(f"  {name}: prepared for {made}; got {now}{mark}")
        raise PreparationMismatchError(
            f"{self.call(operator, backend)}: the arguments differ from the ones the prep was made for:\n"
            + "\n".join(lines)
            + f"\nPrepare again with these arguments (prepare_{operator}), or pass strict=False to "
            "prepare_* if you know the prep still applies."
        )


def _fast_runners(data: Any, operator: Operator) -> tuple[Callable[..., Any], Callable[..., Any] | None]:
    """The runners a prep's fast path calls, ``(plain, one)``: the adapter's ``fast`` one where it offers
    it (the compiled function itself, see ``extend.Runners``) in place of ``plain``, or for an operator
    with a tangent as ``one``, its runner of one tangent."""
    fast = getattr(data, "fast", None)
    if operator.tangent is not None:
        return data.plain, fast
    return (data.plain if fast is None else fast), None


def _fname(f: Callable[..., Any]) -> str:
    return f"{getattr(f, '__qualname__', type(f).__name__)} at {id(f):#x}"
