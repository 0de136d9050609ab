"""A sparsity detector that reads the jaxpr of ``f`` (the approach of asdex): ``JaxprSparsityDetector``.

``f`` is traced by JAX once, as the JAX adapter traces it (its captured state and caches as
writable stand-ins, so module-global work buffers written with ``buf[...] = ...`` work, float64 kept),
and the equations of the jaxpr are interpreted over :class:`~._tracer.Tracer` values, whose namespace
already knows the dependencies of elementwise operations, reductions and products:

- *structural* primitives (reshape, broadcast, transpose, slice, reverse, concatenate, stack, pad, gather,
  scatter, dynamic slices, squeeze, expand_dims) are run by JAX itself on arrays of element
  positions: the output says which input element each output element is (so every indexing mode
  JAX has is followed exactly, with no rule written for it);
- equations whose inputs are all known values (index arithmetic, iota, constants) are evaluated;
- calls (``jit``, ``custom_jvp``, ``custom_vjp``, ``remat``, ``closed_call``) are entered, and
  ``cond`` takes the union of its branches (a global pattern);
- any other primitive raises ``TracerError`` naming it and the other detectors.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ._coloring import csr_pattern
from ._detectors import Problem, _call
from ._tracer import Trace, Tracer, TracerError, _broadcast, _lift, _or_none, _union

if TYPE_CHECKING:
    from scipy.sparse import csr_array

    from .._core.configs import Backend
    from .._core.types import Array

_STRUCTURAL = {
    "reshape",
    "broadcast_in_dim",
    "transpose",
    "slice",
    "rev",
    "concatenate",
    "stack",  # jnp.stack's own primitive (JAX 0.10; earlier JAX wrote it as broadcast_in_dim + concatenate)
    "pad",
    "gather",
    "scatter",
    "dynamic_slice",
    "dynamic_update_slice",
    "squeeze",
    "expand_dims",
}
_INDEX_OPERANDS: dict[str, tuple[int, ...] | None] = {
    "gather": (1,),
    "scatter": (1,),
    "dynamic_slice": None,  # every operand after the data ones
    "dynamic_update_slice": None,
}
_IDENTITY = {
    "convert_element_type",
    "copy",
    "copy_p",
    "reduce_precision",
    "neg",
    "real",
    "conj",
    "optimization_barrier",
}
_CONSTANT = {"sign", "floor", "ceil", "round", "is_finite", "argmax", "argmin", "iota", "stop_gradient"}
_CONSTANT |= {"eq", "ne", "lt", "le", "gt", "ge", "and", "or", "not", "xor", "shift_left", "shift_right_logical"}
_NONLINEAR_UNARY = {
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "exp",
    "exp2",
    "log",
    "log1p",
    "expm1",
    "sqrt",
    "rsqrt",
    "cbrt",
    "logistic",
    "erf",
    "erfc",
    "erf_inv",
    "lgamma",
    "digamma",
    "square",
}
_LINEAR_BINARY = {"add", "sub", "add_any", "max", "min"}
_NONLINEAR_BINARY = {"atan2", "rem", "nextafter", "pow", "igamma"}
_CALLS = ("jaxpr", "call_jaxpr", "fun_jaxpr")


@dataclasses.dataclass(frozen=True)
class JaxprSparsityDetector:
    """The global sparsity pattern read from the jaxpr of ``f`` (JAX must be installed).

    See the module docstring. For functions written with ``jax.numpy`` rather than the array API, and for
    module-global work buffers, which the JAX adapter turns into writable stand-ins.

    Example:

        >>> import jax.numpy as jnp
        >>> backend = di.AutoSparse(di.AutoJAX(), sparsity_detector=di.JaxprSparsityDetector())
        >>> prep = di.prepare_jacobian(backend, lambda x: jnp.sin(x[1:]) * x[:-1], np.ones(4))
        >>> print(prep.sparsity.toarray().astype(int))
        [[1 1 0 0]
         [0 1 1 0]
         [0 0 1 1]]
    """

    def _run(
        self, problem: Problem, x: Array, contexts: tuple[Any, ...], dense: Backend | None, hessian: bool
    ) -> tuple[Any, Any]:
        import scipy.sparse as sp

        from .._core.arrays import dtype_name, families
        from .._core.configs import AutoJAX, adapter_for

        target = problem.target
        if target is None:
            raise TypeError("JaxprSparsityDetector needs the call's target (diffinterface's AutoSparse passes it)")
        jax_backend = dense if isinstance(dense, AutoJAX) else AutoJAX(closure=target.closure)
        closed = adapter_for(jax_backend, "JaxprSparsityDetector").jaxpr(target, x, contexts)
        dtype = np.dtype(dtype_name(x))
        shape = tuple(np.shape(x))
        n = math.prod(shape)
        trace = Trace(n, hessian)
        tracer = Tracer(cast("csr_array", sp.eye_array(n, dtype=bool, format="csr")), shape, trace, dtype)
        try:
            with families()["jax"].computing(dtype):  # known values evaluated in x's precision
                (y,) = _interpret(closed.jaxpr, closed.consts, [tracer], trace)
        except TracerError as error:
            raise TracerError(f"{_call(problem)}{error}") from error
        return y, trace

    def jacobian_sparsity(
        self, problem: Problem, x: Array, contexts: tuple[Any, ...] = (), dense: Backend | None = None
    ) -> Any:
        y, trace = self._run(problem, x, contexts, dense, hessian=False)
        if not isinstance(y, Tracer):
            return csr_pattern(np.zeros((int(np.size(y)), trace.n), dtype=bool))
        return csr_pattern(y.rows())

    def hessian_sparsity(
        self, problem: Problem, x: Array, contexts: tuple[Any, ...] = (), dense: Backend | None = None
    ) -> Any:
        _, trace = self._run(problem, x, contexts, dense, hessian=True)
        return csr_pattern(trace.hessian)


def _literal(v: Any) -> bool:
    return type(v).__name__ == "Literal"


def _interpret(jaxpr: Any, consts: Any, args: list[Any], trace: Trace) -> list[Any]:
    env: dict[Any, Any] = {}

    def read(v: Any) -> Any:
        return v.val if _literal(v) else env[v]

    for v, c in zip(jaxpr.constvars, consts):
        env[v] = c
    for v, a in zip(jaxpr.invars, args):
        env[v] = a
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        outs = _apply(eqn, ins, trace)
        if not eqn.primitive.multiple_results:
            outs = [outs]
        for v, o in zip(eqn.outvars, outs):
            env[v] = o
    return [read(v) for v in jaxpr.outvars]


def _const(eqn: Any, i: int = 0, trace: Trace | None = None) -> Tracer:
    aval = eqn.outvars[i].aval
    assert trace is not None
    return Tracer(None, tuple(aval.shape), trace, _np_dtype(aval.dtype))


def _np_dtype(dtype: Any) -> Any:
    try:
        return np.dtype(dtype)
    except TypeError:
        return np.dtype(np.float64)


def _apply(eqn: Any, ins: list[Any], trace: Trace) -> Any:
    name = eqn.primitive.name
    params = eqn.params
    if not any(isinstance(a, Tracer) for a in ins):  # known values: evaluated (index arithmetic, iota)
        return eqn.primitive.bind(*ins, **params)
    ns = trace.namespace
    for key in _CALLS:
        sub = params.get(key)
        if sub is not None and name not in ("cond", "while", "scan"):
            if hasattr(sub, "jaxpr") and hasattr(sub, "consts"):  # a ClosedJaxpr
                return _interpret(sub.jaxpr, sub.consts, ins, trace)
            return _interpret(sub, [], ins, trace)
    if name == "cond":
        branches = [_interpret(b.jaxpr, b.consts, ins[1:], trace) for b in params["branches"]]
        return [_union_of(list(outs), trace) for outs in zip(*branches)]
    if name in _STRUCTURAL:
        return _structural(eqn, ins, trace)
    if name in _IDENTITY:
        a = _lift(ins[0], trace)
        return Tracer(a.deps, a.shape, trace, _np_dtype(eqn.outvars[0].aval.dtype))
    if name in _CONSTANT:
        return _const(eqn, 0, trace)
    if name in _NONLINEAR_UNARY:
        return ns.sin(ins[0])  # any nonlinear unary: the same dependence
    if name == "abs":
        return ns.abs(ins[0])
    if name == "integer_pow":
        return ns.pow(ins[0], params["y"])
    if name in _LINEAR_BINARY:
        return ns.add(ins[0], ins[1])
    if name == "mul":
        return ns.multiply(ins[0], ins[1])
    if name == "div":
        return ns.divide(ins[0], ins[1])
    if name in _NONLINEAR_BINARY:
        return ns.atan2(ins[0], ins[1])
    if name == "select_n":
        return _union_of(ins[1:], trace)  # lax's cases have the output's shape
    if name == "clamp":
        return _union_of([ins[1]], trace)
    if name in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod"):
        return ns._reduce(ins[0], tuple(params["axes"]), False, nonlinear=name == "reduce_prod")
    if name in ("cumsum", "cummax", "cummin", "cumprod", "cumlogsumexp"):
        a = _lift(ins[0], trace)
        axis, reverse = params["axis"], params.get("reverse", False)
        src = ns.flip(a, axis=axis) if reverse else a
        out = ns.cumulative_sum(src, axis=axis)
        out = ns.flip(out, axis=axis) if reverse else out
        if name in ("cumprod", "cumlogsumexp"):
            trace.nonlinear(out.deps)
        return out
    if name == "dot_general":
        return _dot_general(eqn, ins, trace)
    raise TracerError(
        f"the jaxpr sparsity detector does not follow the primitive {name!r}; use sparsity_detector="
        f"TracerSparsityDetector(), LocalSparsityDetector() or KnownSparsity(pattern) in AutoSparse"
    )


def _union_of(values: list[Any], trace: Trace) -> Tracer:
    """The union of the dependencies of ``values`` (broadcast), as ``where`` of the tracer takes it."""
    ts = [_lift(v, trace) for v in values]
    shape, rows = _broadcast(*ts)
    return Tracer(_union(rows), shape, trace, ts[0].dtype)


def _structural(eqn: Any, ins: list[Any], trace: Trace) -> Any:
    """Run the primitive on arrays of positions (traced operands, offset so that each has its own
    range; -1 for the values of known data operands; index operands as they are) and read which
    element of which operand each output element is."""
    import jax.numpy as jnp
    import scipy.sparse as sp

    name = eqn.primitive.name
    index_ops: tuple[int, ...] | None = _INDEX_OPERANDS.get(name, ())
    if index_ops is None:  # dynamic_slice(operand, *starts), dynamic_update_slice(operand, update, *starts)
        first = 1 if name == "dynamic_slice" else 2
        index_ops = tuple(range(first, len(ins)))
    data = [i for i in range(len(ins)) if i not in index_ops]
    for i in index_ops:
        if isinstance(ins[i], Tracer):
            raise TracerError(
                f"the jaxpr sparsity detector cannot follow {name} with indices computed from x "
                f"(value-dependent indexing); use LocalSparsityDetector() or KnownSparsity(pattern)"
            )
    offset, rows, operands = 0, [], list(ins)
    for i in data:
        t = ins[i]
        if isinstance(t, Tracer):
            operands[i] = jnp.asarray(np.arange(offset, offset + t.size, dtype=np.int32).reshape(t.shape))
            rows.append(t.rows())
            offset += t.size
        else:
            operands[i] = jnp.full(np.shape(t), -1, dtype=np.int32)
    params = dict(eqn.params)
    if "dtype" in params and name not in ("gather", "scatter"):
        params["dtype"] = np.int32
    out = np.asarray(eqn.primitive.bind(*operands, **params)).astype(np.int64)
    stacked = sp.vstack(rows + [sp.csr_array((1, trace.n), dtype=bool)], format="csr")  # last row: none
    picked = np.where(out.ravel() < 0, offset, out.ravel())
    return Tracer(_or_none(stacked.tocsr()[picked]), tuple(out.shape), trace, _np_dtype(eqn.outvars[0].aval.dtype))


def _dot_general(eqn: Any, ins: list[Any], trace: Trace) -> Tracer:
    """``dot_general`` without batch dimensions, operands of at most two dimensions, as a matrix
    product of the namespace (one traced operand, or two traced vectors)."""
    ns = trace.namespace
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    a, b = ins
    if lb or rb or _ndim(a) > 2 or _ndim(b) > 2 or len(lc) != 1:
        raise TracerError(
            "the jaxpr sparsity detector follows dot_general of matrices and vectors without batch dimensions; "
            "use LocalSparsityDetector() or KnownSparsity(pattern)"
        )
    a = _moved(a, lc[0], last=True, trace=trace)
    b = _moved(b, rc[0], last=False, trace=trace)
    return ns.matmul(a, b)


def _ndim(v: Any) -> int:
    return v.ndim if isinstance(v, Tracer) else int(np.ndim(v))


def _moved(v: Any, axis: int, last: bool, trace: Trace) -> Any:
    ndim = _ndim(v)
    if ndim < 2:
        return v
    want = ndim - 1 if last else 0
    if axis == want:
        return v
    if isinstance(v, Tracer):
        return trace.namespace.permute_dims(v, (1, 0))
    return np.asarray(v).T
