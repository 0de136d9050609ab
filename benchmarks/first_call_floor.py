"""The first call of a new function on the eager engines, split into what it cannot avoid and the rest.

    python benchmarks/first_call_floor.py          # writes benchmarks/results/first_call_floor.{md,csv}
    python benchmarks/first_call_floor.py --quick  # n = 10 only

New functions' first calls are timed against the engine's own call, interleaved (the calls of a row
alternate, one of each per round, and each column is the median over the rounds; the overhead
table's ``first_call_ratio`` times three single calls of new code). A row's calls run in two groups,
each interleaved on its own (``GROUPS``): a new function of a seen code with the native and its floor,
and new code with the native of new code and its floor. With numpy inputs (torch), the engine's calls
convert as a NumPy user's do: the arrays into tensors at the call, the result back with ``np.asarray``.

- ``ours_us``: a new function at every call, of one code (``gradient(backend, lambda *a: f(*a),
  x)`` in a loop): what holds for its code over the same objects is reused, the closure walk's
  summary, what the adapter learned there (torch's watch verdict) and, for a stateless ``f`` whose
  slots reach no user object, the preparation its code shares (``prep_cache.shared_hits``; the
  Jacobians' ``f`` holds an array default: state, nothing shared);
- ``unshared_us``: the same under a config with ``reuse_prep=False`` (no preparation reused or shared: a one-shot call
  of a new function of a seen code, what ``ours`` was before the code's preparation was shared);
- ``new_code_us``: a function of a code never seen (a new code object at every call): the first call
  of a script, which pays the whole walk and, on torch, the watch. It is measured against
  ``native_new_us``, the engine's own call of such a function (made the same way at every call: the
  engine runs code never run before too, and the harness's making of the function is on both sides).

Beside them, what a first call must do before it differentiates, measured on its own:

- ``mode_us`` (torch): the native call with ``f`` evaluated under an empty
  ``torch.overrides.TorchFunctionMode``. A tensor's value read into Python (``.item()``,
  ``float(t)``, ``.tolist()``) drops its derivative without an error; torch tells it only through
  its function mode, which calls back into Python at every torch operation of ``f``, so the first
  evaluation of new code runs under it (later calls, and new functions of that code over the same
  objects, do not, where ``f`` read no value);
  ``mode_new_us`` the same on a function of new code (``native_new_us`` under the mode);
- ``walk_us``: what the closure walk costs a new function of a seen code (its summary checked, where
  it has one), and ``walk_new_us`` the walk of new code (``StatePlan``, contract section 7; less the
  making of the function, timed on its own): what a function captures is duplicated at each call, so
  it is found before the first evaluation;
- ``copy_us`` (torch's pushforward): the native call over copies of ``x`` and ``t`` made at the call, what
  the adapter's primal and tangent are below 1e4 elements: a dual tensor shares their memory and ``f``
  may write into its input, which writes into both and must not change the user's ``x`` or ``t`` (the
  native passes them as they are; the copy of ``t`` since 2026-12-08). Its cost,
  ``copy_us - native_us``, is part of both floors (3 to 4 us of a 31 us pushforward at n = 10,
  measured 2026-12-07: a clone of x in place costs 2.6 us there, and a guarded alias of x instead
  cost more, 1.55x the native where the copy's call took 1.42x).

``floor_ratio`` is new code's floor, ``(mode_new_us or native_new_us) + walk_new_us`` (+ the copy) over
``native_new_us``; ``rest_ratio`` is what ``unshared`` adds beyond ``native_us + walk_us`` (+ the copy; the
mode is not on its path, where a function of its code read no value; the Jacobians' ``f`` holds an array
default, state, and has no summary: there ``mode_us + walk_us``) over ``native_us``, and ``new_code_rest_ratio`` what ``new_code``
adds beyond its floor over ``native_new_us``: the first-call budget (1.3x the engine's own first call, issue 39)
leaves 0.3 of the native for it, on top of the floor where the floor alone is over 1.3.
"""

from __future__ import annotations

import functools
import gc
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import arguments, save  # noqa: E402

from diffinterface._closures.plan import StatePlan  # noqa: E402
from diffinterface.bench._engines import engine  # noqa: E402
from diffinterface.bench.overhead import _case, _new_code  # noqa: E402

ENGINES = ("torch", "autograd", "finitediff")
OPERATORS = ("gradient", "hvp", "pushforward", "pullback", "jacobian tall", "jacobian wide")


@functools.cache
def _empty_mode() -> type:
    """An empty torch function mode's class, made once: a class made at every call of ``_under_mode``
    cost ``mode_new_us`` about 16 us."""
    import torch

    class Empty(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            return func(*args, **(kwargs or {}))

    return Empty


def _under_mode(f: Callable[..., Any]) -> Callable[..., Any]:
    """``f`` evaluated under an empty torch function mode (torch's own dispatch, and nothing else)."""
    empty = _empty_mode()

    def watched(*args: Any) -> Any:
        with empty():
            return f(*args)

    return watched


def _interleaved(calls: dict[str, Callable[[], Any]], seconds: float) -> dict[str, float]:
    """The median time of each call over rounds of one call each, in turn (the order shuffled at each
    round), for about ``seconds``."""
    for call in calls.values():  # warm-up
        for _ in range(5):
            call()
    start = time.perf_counter()
    for call in calls.values():
        call()
    per_round = time.perf_counter() - start
    rounds = max(15, min(2000, int(seconds / max(per_round, 1e-7))))
    samples: dict[str, list[float]] = {name: [] for name in calls}
    order = list(calls.items())
    shuffle = random.Random(0).shuffle
    for _ in range(rounds):
        # each round in a new order (seeded): every call follows every other about as often. The call
        # right after another's meets caches and the allocator as that one left them: 20 to 25 us of a
        # torch Jacobian's 230, measured, for the call after the native. Rotating one order each round
        # kept who follows whom (the runs before 2026-11-27 21:40 put ours after the native)
        shuffle(order)
        for name, call in order:
            t0 = time.perf_counter()
            call()
            samples[name].append(time.perf_counter() - t0)
    return {name: statistics.median(s) for name, s in samples.items()}


def calls(
    name: str, operator: str, size: int, numpy_inputs: bool
) -> tuple[dict[str, str], dict[str, Callable[[], Any]]]:
    """A row's labels (``shape``, ``inputs``) and calls: ``native`` (the engine's own first call),
    ``ours`` (a new function's first call), ``unshared`` (the same, reuse_prep=False), ``new_code``, ``mode``
    (torch: the native with f under an empty function mode) and ``walk`` (the walk of a new function's
    captured state); no calls where the engine has no native for the row."""
    eng = engine(name)
    case = _case(name, eng, operator, size, numpy_inputs) if eng.allows(operator, size) else None
    if case is None:
        return {}, {}
    f, fresh = case["f"], case["fresh"]

    out = {
        "native": case["native_first"],
        "ours": fresh,
        "unshared": case["fresh_unshared"],
        "new_code": case["new_code"],
    }
    out["native_new"] = case["native_new_code"]
    if numpy_inputs:  # the engine's cold call as a NumPy user writes it: converted in and out at every call
        out["native"] = lambda: _cold_numpy(eng, operator, f, case["arrays"])
        out["native_new"] = lambda: _cold_numpy(eng, operator, _new_code(lambda *a: f(*a)), case["arrays"])
    if name == "torch":
        if numpy_inputs:
            out["mode"] = lambda: _cold_numpy(eng, operator, _under_mode(f), case["arrays"])
            out["mode_new"] = lambda: _cold_numpy(
                eng, operator, _under_mode(_new_code(lambda *a: f(*a))), case["arrays"]
            )
        else:
            out["mode"] = eng.native_first(operator, _under_mode(f), *case["arrays"])
            out["mode_new"] = lambda: eng.native_first(
                operator, _under_mode(_new_code(lambda *a: f(*a))), *case["arrays"]
            )()
    if name == "torch" and operator == "pushforward":
        # the native over copies of x and t, made at the call: the adapter's primal and tangent below 1e4
        # elements (a dual tensor shares their memory and f may write into its input, which writes into both:
        # the user's x and t are never modified; the copy of t since 2026-12-08, when the adapter's began)
        # (built as native_first builds it, at the call: before 2026-12-07 (evening) this called
        # native_first(...)() on x.detach().clone(), a wrapper more and a detach the adapter does not make
        # for an x without grad, which put 5.4 us for a copy that costs 2.6 in the floor, measured at n = 10)
        def on_copy() -> Any:
            arrays = eng.arrays(*case["arrays"]) if numpy_inputs else case["arrays"]
            result = eng.native(operator, f, arrays[0].clone(), arrays[1].clone(), *arrays[2:])()
            return np.asarray(result) if numpy_inputs else result

        out["copy"] = on_copy
    out["walk"] = lambda: StatePlan(lambda *a: f(*a))
    out["walk_new"] = lambda: StatePlan(_new_code(lambda *a: f(*a)))
    out["harness"] = lambda: _new_code(lambda *a: f(*a))  # what the new-code calls spend making their function
    # whether a new function of a seen code shares what was learned for it (Target.learned): a
    # stateless f, whose closure walk keeps a summary (the Jacobians' f holds an array default)
    shares = StatePlan(lambda *a: f(*a)).summary is not None
    return {"shape": case["shape"], "inputs": case["inputs"], "shares": shares}, out


def _cold_numpy(eng: Any, operator: str, f: Callable[..., Any], arrays: tuple[Any, ...]) -> Any:
    """The engine's cold call (``native_first``) on numpy arrays as a NumPy user writes it: each array
    converted to the engine's at the call, the result brought back with ``np.asarray`` (what the overhead
    table's ``native_numpy`` does for the warm call; before 2026-12-07 the cold call of a numpy row took
    arrays converted once, outside the timing, and its result as the engine's)."""
    first = eng.native_first(operator, f, *eng.arrays(*arrays))
    return np.asarray(first())


# The calls of a row, in two groups interleaved apart: a new function of a seen code (and its floor), and
# new code (and its). New code's calls run the whole walk and make code objects: interleaved with the
# others, each call after one of them met the processor's caches as that call left them, which slowed the
# calls that run more Python the most (measured 2026-12-07, torch pushforward at n = 10 on a 2-core AMD
# EPYC VM: ours 44.7 -> 51.5 us and the native 31.3 -> 33.5 us, with new code's calls in the rounds)
GROUPS = (
    ("native", "ours", "unshared", "mode", "copy", "walk"),
    ("native_new", "new_code", "mode_new", "walk_new", "harness"),
)


def row(name: str, operator: str, size: int, numpy_inputs: bool, seconds: float) -> dict[str, Any] | None:
    labels, row_calls = calls(name, operator, size, numpy_inputs)
    if not row_calls:
        return None
    t: dict[str, float] = {}
    for group in GROUPS:
        t.update(_interleaved({k: row_calls[k] for k in group if k in row_calls}, seconds))
    del row_calls
    gc.collect()
    native, native_new = t["native"], t["native_new"]
    shares = labels.pop("shares")
    # new code's: the engine's first call of it (under the mode on torch) and the walk of new code, whose
    # making of the function is already in the engine's call
    copy = t["copy"] - native if "copy" in t else 0.0  # what the copy of x adds to the native (torch's pushforward)
    floor = t.get("mode_new", native_new) + t["walk_new"] - t["harness"] + copy
    ours_floor = (native if shares else t.get("mode", native)) + t["walk"] + copy  # torch: the watch's verdict shared
    return {
        "engine": name,
        "operator": operator,
        "size": size,
        **labels,
        "native_us": native * 1e6,
        "ours_us": t["ours"] * 1e6,
        "first_call_ratio": t["ours"] / native,
        "unshared_us": t["unshared"] * 1e6,
        "unshared_ratio": t["unshared"] / native,
        "native_new_us": native_new * 1e6,
        "new_code_us": t["new_code"] * 1e6,
        "new_code_ratio": t["new_code"] / native_new,
        "mode_us": t["mode"] * 1e6 if "mode" in t else "",
        "copy_us": t["copy"] * 1e6 if "copy" in t else "",
        "mode_new_us": t["mode_new"] * 1e6 if "mode_new" in t else "",
        "walk_us": t["walk"] * 1e6,
        "walk_new_us": (t["walk_new"] - t["harness"]) * 1e6,
        "floor_ratio": floor / native_new,
        "rest_us": (t["unshared"] - ours_floor) * 1e6,
        "rest_ratio": (t["unshared"] - ours_floor) / native,
        "new_code_rest_ratio": (t["new_code"] - floor) / native_new,
    }


COLUMNS = [
    "engine",
    "operator",
    "shape",
    "inputs",
    "native_us",
    "ours_us",
    "first_call_ratio",
    "unshared_us",
    "unshared_ratio",
    "rest_us",
    "rest_ratio",
    "native_new_us",
    "new_code_us",
    "new_code_ratio",
    "mode_us",
    "mode_new_us",
    "copy_us",
    "walk_us",
    "walk_new_us",
    "floor_ratio",
    "new_code_rest_ratio",
]


def main() -> None:
    args = arguments(__doc__, "n = 10 only")
    sizes = (10,) if args.quick else (10, 1000)
    rows = []
    for name in ENGINES:
        numpy_kinds = (False, True) if engine(name).numpy_dtype is not None else (False,)
        for operator in OPERATORS:
            for numpy_inputs in numpy_kinds:
                for size in sizes:
                    r = row(name, operator, size, numpy_inputs, args.seconds)
                    if r is None:
                        continue
                    rows.append(r)
                    print(
                        f"{name:>10} {operator:>14} {r['shape']:>8} {r['inputs']:>14}: native {r['native_us']:8.1f} us"
                        f"  ours {r['ours_us']:8.1f} us  ratio {r['first_call_ratio']:.2f}"
                        f"  unshared {r['unshared_ratio']:.2f} (rest {r['rest_ratio']:.2f})"
                        f"  new code {r['new_code_ratio']:.2f} (floor {r['floor_ratio']:.2f},"
                        f" rest {r['new_code_rest_ratio']:.2f})",
                        flush=True,
                    )
    notes = (
        "A new function's first call against the engine's own call, interleaved (one call of each per round, "
        f"medians over the rounds, about {args.seconds:g} s for each of a row's two groups: a new function of a seen code, "
        "the native and their floor; new code, the native of new code and their floor). With numpy inputs the "
        "engine's own calls convert in and out at the call, as a NumPy user's do. `ours_us`: a new lambda of one code at every call (what "
        "holds for its code over the same objects is reused: the closure walk's summary, torch's watch verdict, "
        "and for a stateless f the preparation its code shares; the Jacobians' f holds an array default: nothing "
        "shared); `unshared_us`: the same under a config with reuse_prep=False (a one-shot call); "
        "`new_code_us`: a function of a code never seen (a new code object at every call), against `native_new_us`, "
        "the engine's own call of such a function (made the same way). `mode_us` / `mode_new_us` (torch): "
        "the native (of new code) with f evaluated under an empty TorchFunctionMode, the dispatch a watch for "
        "values read out of tensors needs; `walk_us` / `walk_new_us`: the walk of a new function's captured state "
        "(contract section 7), for a seen code (its summary checked) / a new one (less the making of the "
        "function); `copy_us` (torch's pushforward): the native over copies of x and t made at the call, the "
        "adapter's primal and tangent below 1e4 elements (f may write into its input, which writes into both "
        "through a dual tensor; the user's x and t are never modified), its cost "
        "(copy - native) in both floors; `floor_ratio`: new code's floor, (mode_new or native_new) + walk_new "
        "(+ the copy), over native_new; "
        "`rest_us`: what unshared adds beyond native + walk (+ the copy; mode + walk for the torch Jacobians, whose f holds "
        "an array default: no summary, watched), and `rest_ratio` that over native; `new_code_rest_ratio`: what "
        "new code adds beyond its floor, over native_new. Budget (issue "
        "39): first_call_ratio <= 1.3, i.e. rest_ratio <= 0.3 (on top of the floor where the floor alone is over 1.3)."
    )
    save(
        "first_call_floor",
        "First call of a new function on the eager engines: the floor and the rest",
        rows,
        COLUMNS,
        notes,
    )


if __name__ == "__main__":
    main()
