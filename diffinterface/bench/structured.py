"""``python -m diffinterface bench --table structured`` (issue 17): the price of a structured ``x``.

- gradient rows: a prepared gradient of ``f(p) = sum over the leaves of sum(sin(leaf)**2)`` with
  respect to a dict of ``leaves`` arrays (the engine's own arrays, ``n`` elements in all), interleaved
  against (1) the same prepared gradient of the same ``f`` given one flat array, which ``f`` cuts into
  the dict itself (slices of the vector: what a user wrote before structures were accepted), and
  (2) the engine's own gradient of the dict (``jax.jit(jax.grad(f))``; ``torch.autograd.grad`` over
  the leaves; ``autograd.grad``); and the engine's own gradient of the dict against its own of the
  vector (what a structure costs the engine itself). Budget (issue 17): (1) at most 1.1 for 10
  arrays of 1e4 in all.
- XLA rows (JAX only): the engine's own price of returning ``k`` arrays: ``jax.jit`` of the same
  elementwise arithmetic (the gradient of ``sin(v)**2``) over ``k`` arrays of ``n/k`` elements, against
  one array of ``n``. No library code runs in them: they are the floor under the JAX gradient rows, since
  a gradient of a dict of ``k`` arrays is a program with ``k`` outputs.
- flatten rows: one prepared call's check and flattening of a dict of 10 arrays by each tree tool
  (``Structure.checked``, the walk the library uses; ``jax.tree_util``, ``optree`` and
  ``torch.utils._pytree`` flattening with a comparison of the tree definitions), where installed.
"""

from __future__ import annotations

import importlib.util
import timeit
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from array_api_compat import array_namespace

if TYPE_CHECKING:
    import types
    from collections.abc import Mapping

    from .._core.types import NumericArray
    from ._timing import Timing

COLUMNS = [
    "case",
    "backend",
    "inputs",
    "n",
    "leaves",
    "ours_s",
    "baseline",
    "baseline_s",
    "ratio",
    "min",
    "max",
    "steady",
    "within_1.1",
]

NOTES = (
    "gradient rows: f(p) = sum of sum(sin(leaf)**2) over the leaves of a dict (the engine's own arrays, n "
    "elements in all); 'flat array' is the prepared gradient of the same f given one vector that f cuts into "
    "the dict by slices; 'engine' is the engine's own gradient of the dict (`jax.jit(jax.grad(f))`, "
    "`torch.autograd.grad` over the leaves, `autograd.grad`); 'the engine's own gradient' rows: the engine's own gradient of the dict over its own gradient of the vector. 'XLA, k outputs' rows: `jax.jit` of 2*sin(v)*cos(v) over k arrays of n/k elements over the same over one array of n (no diffinterface code: the engine's floor under a gradient of k leaves). flatten rows: one check-and-flatten of a dict of "
    "10 arrays (best of 7 runs of 20000), the tree definitions compared where the tool has them. Budget (issue "
    "17): the 'flat array' ratio at most 1.1 for 10 arrays of 1e4 in all."
)


def _loss(p: Mapping[str, NumericArray]) -> Any:
    total = 0.0
    for v in p.values():
        xp = array_namespace(v)
        total = total + xp.sum(xp.sin(v) ** 2)
    return total


def _cutter(keys: list[str], size: int) -> Callable[[Any], Any]:
    def from_vector(x: NumericArray) -> Any:  # the user's own cutting of one vector into the dict
        return _loss({k: x[i * size : (i + 1) * size] for i, k in enumerate(keys)})

    return from_vector


def _native(name: str, f: Callable[[Any], Any], p: Any) -> Callable[[], Any] | None:
    """The engine's own gradient of ``f`` at ``p`` (a dict of arrays, or one array)."""
    if name == "jax":
        import jax

        g = jax.jit(jax.grad(f))
        return lambda: jax.block_until_ready(g(p))
    if name == "torch":
        import torch

        if isinstance(p, dict):
            leaves, keys = list(p.values()), list(p)

            def grad() -> Any:
                xs = [v.detach().requires_grad_() for v in leaves]
                return torch.autograd.grad(f(dict(zip(keys, xs))), xs)

            return grad

        def grad_flat() -> Any:
            x = p.detach().requires_grad_()
            return torch.autograd.grad(f(x), x)

        return grad_flat
    if name == "autograd":
        import autograd

        # autograd ships no types: its decorator (unary_to_nary) hides grad's signature, grad(fun, argnum=0)
        g = autograd.grad(f)  # pyright: ignore[reportCallIssue]
        return lambda: g(p)
    return None


def _xla_outputs(n: int, k: int) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """``jax.jit`` of the gradient's arithmetic over ``k`` arrays of ``n/k`` elements, and over one of ``n``."""
    import jax
    import jax.numpy as jnp

    values = np.linspace(-1.0, 1.0, n, dtype=np.float32)
    parts = [jnp.asarray(values[j * n // k : (j + 1) * n // k]) for j in range(k)]
    whole = jnp.asarray(values)
    many = jax.jit(lambda vs: [2 * jnp.sin(v) * jnp.cos(v) for v in vs])
    one = jax.jit(lambda v: 2 * jnp.sin(v) * jnp.cos(v))
    np.testing.assert_allclose(np.concatenate([np.asarray(v) for v in many(parts)]), np.asarray(one(whole)), rtol=1e-6)
    return (lambda: jax.block_until_ready(many(parts))), (lambda: jax.block_until_ready(one(whole)))


def flatten_rows() -> list[dict[str, Any]]:
    from .._core.structure import Structure

    p = {f"layer{i}": np.ones(1000) for i in range(10)}
    structure = Structure.of(p, "x")
    tools: list[tuple[str, Callable[[], Any]]] = [
        ("Structure.leaves (diffinterface: the walk)", lambda: structure.leaves(p)),
        ("Structure.checked (the walk, each leaf's type, shape and dtype compared)", lambda: structure.checked(p)),
    ]
    if importlib.util.find_spec("jax") is not None:
        import jax

        treedef: Any = jax.tree_util.tree_structure(p)
        tools.append(("jax.tree_util", lambda: jax.tree_util.tree_flatten(p)[1] == treedef))
    if importlib.util.find_spec("optree") is not None:
        import optree

        spec: Any = optree.tree_structure(p)  # type: ignore[arg-type]
        tools.append(("optree", lambda: optree.tree_flatten(p)[1] == spec))  # type: ignore[arg-type]
    if importlib.util.find_spec("torch") is not None:
        import torch.utils._pytree as pytree

        torch_spec = pytree.tree_structure(p)
        tools.append(("torch.utils._pytree", lambda: pytree.tree_flatten(p)[1] == torch_spec))
    rows = []
    for label, fn in tools:
        seconds = min(timeit.repeat(fn, number=20000, repeat=7)) / 20000
        rows.append({"case": "flatten a dict of 10 arrays", "backend": label, "leaves": 10, "ours_s": seconds})
    return rows


def structured(
    engines: list[str], full: bool, timing: Timing, progress: Callable[..., Any], bench: types.ModuleType
) -> list[dict[str, Any]]:
    """The rows of the table (``bench`` is ``diffinterface.bench``: its engines, configs and timing)."""
    from .. import gradient, prepare_gradient

    sizes = (100, 10_000, 1_000_000) if full else (10_000,)
    plan = [(name, n) for name in engines for n in sizes if bench.engine(name).allows("gradient", n)]
    rows = flatten_rows()
    for i, (name, n) in enumerate(plan):
        progress(i, len(plan), f"structured {name} {n}")
        eng, backend = bench.engine(name), bench.config(name)
        leaves = 10
        size = n // leaves
        keys = [f"layer{k}" for k in range(leaves)]
        flat_np = np.linspace(-1.0, 1.0, n)
        p = {k: eng.array(flat_np[j * size : (j + 1) * size]) for j, k in enumerate(keys)}
        flat = eng.array(flat_np)
        from_vector = _cutter(keys, size)
        p_struct, p_flat = prepare_gradient(backend, _loss, p), prepare_gradient(backend, from_vector, flat)
        expected = np.sin(2 * flat_np)  # d/dx sin(x)**2
        rtol = 1e-5 if str(np.asarray(flat).dtype) == "float32" else 1e-6
        got = gradient(backend, _loss, p, prep=p_struct)
        np.testing.assert_allclose(np.concatenate([np.asarray(got[k]) for k in keys]), expected, rtol=rtol, atol=rtol)
        np.testing.assert_allclose(
            np.asarray(gradient(backend, from_vector, flat, prep=p_flat)), expected, rtol=rtol, atol=rtol
        )

        def ours() -> Any:
            return eng.ready(gradient(backend, _loss, p, prep=p_struct))

        # (case, the timed call's backend, its leaves, the timed call, the baseline's label, the baseline)
        ours_backend = repr(backend)
        flat_call = lambda: eng.ready(gradient(backend, from_vector, flat, prep=p_flat))  # noqa: E731
        pairs = [("gradient", ours_backend, leaves, ours, "flat array", flat_call)]
        native, native_flat = _native(name, _loss, p), _native(name, from_vector, flat)
        if native is not None and native_flat is not None:
            pairs.append(("gradient", ours_backend, leaves, ours, "engine", native))
            # the engine's own price of a structure: its gradient of the dict over that of one vector
            pairs.append(("the engine's own gradient", ours_backend, leaves, native, "engine, flat array", native_flat))
        if name == "jax":  # the engine's floor: its own price of k outputs (XLA runs more than 8 kernels
            # concurrently when a buffer exceeds 512 bytes, which costs more than it saves on 2 cores)
            for k in (2, 8, leaves):
                many, one = _xla_outputs(n, k)
                pairs.append((f"XLA, {k} outputs", "jax.jit", k, many, "XLA, 1 output", one))
        for case, timed_backend, timed_leaves, timed, baseline_label, baseline in pairs:
            r = bench.ratio(timed, baseline, timing)
            rows.append(
                {
                    "case": case,
                    "backend": timed_backend,
                    "inputs": eng.inputs,
                    "n": n,
                    "leaves": timed_leaves,
                    "ours_s": r["ours_s"],
                    "baseline": baseline_label,
                    "baseline_s": r["native_s"],
                    "ratio": r["ratio"],
                    "min": r["ratio_min"],
                    "max": r["ratio_max"],
                    "steady": "yes" if r["steady"] else "NO",
                    "within_1.1": r["ratio"] <= 1.1 if (case, baseline_label) == ("gradient", "flat array") else "",
                }
            )
    progress(len(plan), len(plan), "structured")
    return rows
