"""The finite_differences table: ``f``-evaluation counts and errors against the analytic derivative."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import numpy as np
from array_api_compat import array_namespace

from ._engines import approx_derivative, sin_times_sum, sum_sin2


class _Count:
    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls = 0


def finite_differences(progress: Callable[..., Any]) -> list[dict[str, Any]]:
    """Evaluation counts and errors on smooth functions with analytic derivatives: AutoFiniteDiff
    (its three real methods) against ``scipy.optimize.approx_derivative`` and ``numdifftools``."""
    from .. import AutoFiniteDiff, gradient, jacobian

    approx = approx_derivative()

    n = 20
    x = np.linspace(0.3, 1.7, n)
    functions = [
        ("gradient of sum(sin(x)^2)", sum_sin2, lambda x: np.sin(2 * x), True),
        (
            "gradient of sum(exp(x)/x)",
            lambda x: array_namespace(x).sum(array_namespace(x).exp(x) / x),
            lambda x: np.exp(x) * (x - 1) / x**2,
            True,
        ),
        (
            "jacobian of sin(x)*sum(x)",
            sin_times_sum,
            lambda x: np.diag(np.cos(x) * np.sum(x)) + np.sin(x)[:, None] * np.ones(n)[None, :],
            False,
        ),
    ]
    nd: Any = importlib.import_module("numdifftools") if importlib.util.find_spec("numdifftools") is not None else None
    rows = []
    for i, (name, f, exact, scalar) in enumerate(functions):
        progress(i, len(functions), f"finite differences {name}")
        want = exact(x)
        methods: list[tuple[str, Callable]] = []
        for method in ("forward", "central", "complex"):
            backend = AutoFiniteDiff(method=method)
            op = gradient if scalar else jacobian
            methods.append((f"AutoFiniteDiff(method={method!r})", lambda g, b=backend, op=op: op(b, g, x)))
        for method in ("2-point", "3-point", "cs"):
            methods.append((f"scipy approx_derivative({method!r})", lambda g, m=method: approx(g, x, method=m)))
        if nd is not None:
            for method in ("central", "complex"):
                cls = nd.Gradient if scalar else nd.Jacobian
                methods.append(
                    (f"numdifftools {cls.__name__}({method!r})", lambda g, c=cls, m=method: c(g, method=m)(x))
                )
        for label, run in methods:
            count = _Count()  # not state (a list would be duplicated for each evaluation, as contract section 7 says)

            def counted(z, f=f, count=count):
                count.calls += 1
                return f(z)

            try:
                got = np.asarray(run(counted))
                err = float(np.max(np.abs(got.reshape(want.shape) - want)) / np.max(np.abs(want)))
                rows.append({"function": name, "method": label, "f_evaluations": count.calls, "max_rel_error": err})
            except Exception as e:  # noqa: BLE001 - a method that cannot run is a row saying so
                rows.append(
                    {
                        "function": name,
                        "method": label,
                        "f_evaluations": count.calls,
                        "max_rel_error": float("nan"),
                        "error": f"{type(e).__name__}: {e}",
                    }
                )
    if nd is None:
        rows.append(
            {
                "function": "-",
                "method": "numdifftools",
                "f_evaluations": 0,
                "max_rel_error": float("nan"),
                "error": "not installed (pip install numdifftools)",
            }
        )
    progress(len(functions), len(functions), "finite differences")
    return rows
