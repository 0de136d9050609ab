"""A lambda written anew at each call of a loop, on every engine: what ``prep_cache`` shares by code.

    python benchmarks/fresh_lambda.py            # writes benchmarks/results/fresh_lambda.{md,csv}
    python benchmarks/fresh_lambda.py --quick    # the gradient at n = 10 only

``di.gradient(backend, lambda *a: f(*a), x)`` in a loop makes a new function at every call, of one
code, around the same ``f``: from its fourth call on it takes the preparation its code shares
(``prep_cache.shared_hits``; contract section 5). Each row times, on the engine's own arrays:

- ``native_us``: the engine's own best call, warm (JAX: its ``jit``, compiled once);
- ``native_new_us``: the engine's own call on a new lambda (``BenchEngine.native_first``: a compiling
  engine traces and compiles it again, an eager one runs it), the median of three single calls where
  it takes over 5 ms;
- ``prepared_us``: ours with ``prep=``; ``fresh_us``: ours on a new lambda at every call;
  ``unshared_us``: the same under a config with ``reuse_prep=False`` (a one-shot call: what a new lambda cost before
  its code's preparation was shared);
- ``fresh_state_us``: ours on a new lambda over a new number at every call (``lambda *a: scale * f(*a)``,
  state of its own, as ``lambda p: loss(p, batch)`` over a new batch), served from its code's third new
  function by the preparation the code shares over state (the copy takes each lambda's state at its call);
  ``unshared_state_us`` the same with ``reuse_prep=False``.

``fresh_over_prepared``, ``fresh_over_native`` and ``unshared_over_fresh`` are the ratios of those
times; the calls of a row are interleaved (one of each per round, medians over the rounds), as in
``first_call_floor.py``.
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
from _common import arguments, save  # noqa: E402
from first_call_floor import _interleaved  # noqa: E402

from diffinterface.bench._engines import engine, installed_engines  # noqa: E402
from diffinterface.bench.overhead import _case  # noqa: E402

ENGINES = ("jax", "torch", "autograd", "finitediff", "tensorflow", "mlx", "pytensor")
OPERATORS = ("gradient", "pushforward")
SLOW = 5e-3  # a native call on a new lambda slower than this (a compilation) is timed as single calls


def calls(name: str, operator: str, size: int) -> dict[str, Any] | None:
    """The row's calls: ``native``, ``native_new``, ``prepared``, ``fresh`` and ``unshared``; None where
    the engine has no native for the row."""
    eng = engine(name)
    case = _case(name, eng, operator, size) if eng.allows(operator, size) else None
    if case is None:
        return None
    fresh = case["fresh"]

    f = case["f"]
    x, t, A = case["arrays"]
    native_new = eng.native_first(operator, lambda *a: f(*a), x, t, A)  # a new lambda, built and called
    return {
        "native": case["native"],
        "native_new": lambda: eng.ready(native_new()),
        "prepared": case["prepared"],
        "fresh": fresh,
        "unshared": case["fresh_unshared"],
        "fresh_state": case["fresh_state"],
        "unshared_state": case["fresh_state_unshared"],
    }


def row(name: str, operator: str, size: int, seconds: float) -> dict[str, Any] | None:
    row_calls = calls(name, operator, size)
    if row_calls is None:
        return None
    native_new = row_calls["native_new"]
    start = time.perf_counter()
    native_new()
    if time.perf_counter() - start > SLOW:  # a compilation: three single calls, apart from the rounds
        slow = statistics.median(_once(native_new) for _ in range(3))
        del row_calls["native_new"]
    else:
        slow = None
    for _ in range(4):  # past the code's first new functions: from here on the shared preparation
        row_calls["fresh"]()
        row_calls["fresh_state"]()
    t = _interleaved(row_calls, seconds)
    if slow is not None:
        t["native_new"] = slow
    del row_calls
    gc.collect()
    return {
        "engine": name,
        "operator": operator,
        "size": size,
        "native_us": t["native"] * 1e6,
        "native_new_us": t["native_new"] * 1e6,
        "prepared_us": t["prepared"] * 1e6,
        "fresh_us": t["fresh"] * 1e6,
        "unshared_us": t["unshared"] * 1e6,
        "fresh_over_prepared": t["fresh"] / t["prepared"],
        "fresh_over_native": t["fresh"] / t["native"],
        "unshared_over_fresh": t["unshared"] / t["fresh"],
        "fresh_state_us": t["fresh_state"] * 1e6,
        "unshared_state_us": t["unshared_state"] * 1e6,
        "fresh_state_over_prepared": t["fresh_state"] / t["prepared"],
        "unshared_over_fresh_state": t["unshared_state"] / t["fresh_state"],
    }


def _once(call: Any) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


COLUMNS = [
    "engine",
    "operator",
    "size",
    "native_us",
    "native_new_us",
    "prepared_us",
    "fresh_us",
    "unshared_us",
    "fresh_over_prepared",
    "fresh_over_native",
    "unshared_over_fresh",
    "fresh_state_us",
    "unshared_state_us",
    "fresh_state_over_prepared",
    "unshared_over_fresh_state",
]


def main() -> None:
    args = arguments(__doc__, "the gradient at n = 10 only")
    sizes, operators = ((10,), ("gradient",)) if args.quick else ((10, 1000), OPERATORS)
    rows = []
    for name in installed_engines(list(ENGINES)):
        for operator in operators:
            for size in sizes:
                r = row(name, operator, size, args.seconds)
                if r is None:
                    continue
                rows.append(r)
                print(
                    f"{name:>10} {operator:>12} {size:>5}: native {r['native_us']:9.1f} us, on a new lambda "
                    f"{r['native_new_us']:9.1f} us; ours prepared {r['prepared_us']:8.1f}, fresh {r['fresh_us']:8.1f}"
                    f" ({r['fresh_over_prepared']:.2f} of prepared), unshared {r['unshared_us']:9.1f} us;"
                    f" over state {r['fresh_state_us']:8.1f} ({r['fresh_state_over_prepared']:.2f}), unshared"
                    f" {r['unshared_state_us']:9.1f} us",
                    flush=True,
                )
    notes = (
        "A new lambda of one code at every call (`lambda *a: f(*a)` in a loop), on the engine's own arrays, "
        "interleaved (one call of each per round, medians over the rounds, about 1.5 s a row). `native_us`: the "
        "engine's own best call, warm; `native_new_us`: its own call on a new lambda (a compiling engine traces and "
        "compiles again; median of three single calls where over 5 ms); `prepared_us`: ours with prep=; "
        "`fresh_us`: ours on a new lambda, which shares its code's preparation from its fourth call "
        "(prep_cache.shared_hits); `unshared_us`: the same under a config with reuse_prep=False (a one-shot call). "
        "`fresh_state_us`: a new lambda over a new number at every call (`lambda *a: scale * f(*a)`: state of its "
        "own), which shares its code's preparation over state from its third call; `unshared_state_us` the same "
        "with reuse_prep=False."
    )
    save("fresh_lambda", "A new lambda at every call: the preparation its code shares", rows, COLUMNS, notes)


if __name__ == "__main__":
    main()
