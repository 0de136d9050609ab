"""The prepared fast path does a fixed, small amount of work (issue: prepared calls at the engines'
own speed): each prepared call is profiled and the calls into diffinterface's own functions (the
frontend, the prep check, the adapters' runners, their helpers) are counted. A change that adds
work to the path (a conversion, a lookup, another wrapper) raises a count and fails here; a change
that removes work lowers the table below.

The counts exclude ``f`` and the engines' own code; finite differences evaluate ``f`` once or
twice per coordinate, so their counts grow with ``n`` (here 4).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest
from array_api_compat import array_namespace

import diffinterface as di

N = 4


def sum_sin2(x: Any) -> Any:
    xp = array_namespace(x)
    return xp.sum(xp.sin(x) ** 2)


def sin_times_sum(x: Any) -> Any:
    xp = array_namespace(x)
    return xp.sin(x) * xp.sum(x)


OPERATORS = {  # operator: (f, takes a tangent)
    "gradient": (sum_sin2, False),
    "pushforward": (sin_times_sum, True),
    "pullback": (sin_times_sum, True),
    "jacobian": (sin_times_sum, False),
    "hvp": (sum_sin2, True),
    "hessian": (sum_sin2, False),
}

# The most calls into diffinterface's functions that one prepared call makes (measured 2026-11-23;
# finite differences again after their points became recipes that an executor's workers build
# (issue 18): a few calls per call, and one per coordinate and tangent or pair for the steps of an
# hvp or a Hessian). torch and autograd again on 2026-11-24 after issue 38: torch's calls pass through
# the watch of values read into Python (item 2: 3 to 4 calls, no check unless f read one), autograd's
# results through the NaN check of its rules (item 4: 2 to 5 calls, one pass over the result).
# Again on 2026-11-25 after items 9 and 11: torch's and autograd's reverse-first operators pass
# through the DirectionFallback too (it switches both ways now: one call), and torch's forward passes
# read torch's forward-mode level first (``_dual_level``: one call). Finite differences on 2026-11-25:
# the steps of a call's points follow the accuracy of x's family (``family``, ``family_accuracy`` and
# the record's hook: MLX's float64 is float32-accurate, float64 steps gave Hessians 0.36 off): 4 calls.
# Lowered on 2026-11-27: finite differences' values of x's own array type skip the family lookups
# (pushforward, pullback, jacobian), autograd's prepared path lost its generators and a shape call.
# torch's runs of f enter the watch's context inline (no _watching or _under call): 2 less each.
BUDGET = {
    "finitediff": {"gradient": 62, "pushforward": 20, "pullback": 53, "jacobian": 46, "hvp": 108, "hessian": 202},
    "jax": {"gradient": 4, "pushforward": 4, "pullback": 4, "jacobian": 4, "hvp": 4, "hessian": 4},
    "torch": {"gradient": 11, "pushforward": 15, "pullback": 13, "jacobian": 16, "hvp": 14, "hessian": 12},
    "autograd": {"gradient": 18, "pushforward": 21, "pullback": 20, "jacobian": 36, "hvp": 19, "hessian": 20},
}


def _jax_asarray(a: Any) -> Any:
    import jax.numpy as jnp

    return jnp.asarray(a)


def _torch_asarray(a: Any) -> Any:
    import torch

    return torch.as_tensor(a)


CASES = [  # name, backend, the engine's own array type for x and the tangent
    ("finitediff", di.AutoFiniteDiff(), np.asarray),
    ("jax", di.AutoJAX(), _jax_asarray),
    ("torch", di.AutoTorch(), _torch_asarray),
    ("autograd", di.AutoAutograd(), np.asarray),
]


def _backends() -> list[Any]:
    return [
        pytest.param(
            name,
            backend,
            asarray,
            id=name,
            marks=[] if di.check_available(backend) else [pytest.mark.skip(reason=f"{name} is not installed")],
        )
        for name, backend, asarray in CASES
    ]


def library_calls(call: Any) -> dict[str, int]:
    """The calls into diffinterface's functions made by ``call()`` (after one warm-up call), by function."""
    counts: dict[str, int] = {}

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            module = frame.f_globals.get("__name__", "")
            if module.startswith("diffinterface"):
                key = f"{module}.{frame.f_code.co_qualname}"
                counts[key] = counts.get(key, 0) + 1

    call()
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return counts


@pytest.mark.parametrize("operator", list(OPERATORS))
@pytest.mark.parametrize(("name", "backend", "asarray"), _backends())
def test_a_prepared_call_does_no_more_work_than_measured(name: str, backend: Any, asarray: Any, operator: str) -> None:
    f, tangent = OPERATORS[operator]
    x = asarray(np.linspace(-1.0, 1.0, N))
    args = (x, asarray(np.linspace(0.5, 1.5, N))) if tangent else (x,)
    prep = getattr(di, f"prepare_{operator}")(backend, f, *args)
    run = getattr(di, operator)
    counts = library_calls(lambda: run(backend, f, *args, prep=prep))
    total = sum(counts.values())
    budget = BUDGET[name][operator]
    detail = "\n".join(f"  {n}: {c}" for n, c in sorted(counts.items(), key=lambda kv: -kv[1]))
    assert total <= budget, (
        f"a prepared {operator} on {backend!r} made {total} calls into diffinterface, the budget is {budget}:\n{detail}"
    )
