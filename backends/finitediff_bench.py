"""SciPy's ``approx_derivative`` and a central difference along ``t``: what ``AutoFiniteDiff`` is benchmarked against.

The record is a leaf of its own: the adapter does not import it, and ``python -m diffinterface bench`` loads
it through the config's ``bench`` path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from diffinterface.extend import BenchEngine

if TYPE_CHECKING:
    from collections.abc import Callable


class Bench(BenchEngine):
    """SciPy's ``approx_derivative`` (gradient, jacobians) and a central difference along ``t``."""

    # an evaluation of f per coordinate: the sizes where that stays reasonable
    limits = {"gradient": 1_000, "jacobian tall": 100_000, "jacobian wide": 1_000, "pushforward": 1_000_000}
    costs = {
        "pushforward": "per-coordinate steps r*max(1, |x_i|) (SciPy's rule, 6e-8 of error at x = [100, -0.5] where "
        "the hand-written difference's one scale, max|x|, gives 6e-4): |x|, a maximum, |t|, a division and a maximum "
        "over n, a block of 65536 at a time (1.3 ms at n = 1e6); at n = 10, the prep check, the point recipes "
        "and the evaluator's checks of f(x)",
    }

    def native(self, operator: str, f: Callable[..., Any], x: np.ndarray, t: np.ndarray, A: np.ndarray) -> Any:
        import scipy.optimize
        from scipy.optimize import _numdiff

        # exported from scipy.optimize only in newer releases
        approx_derivative = getattr(scipy.optimize, "approx_derivative", _numdiff.approx_derivative)

        if operator in ("gradient", "jacobian tall", "jacobian wide"):
            return lambda: approx_derivative(f, x, method="3-point")
        if operator == "pushforward":  # central difference along t, with the step AutoFiniteDiff takes
            r = np.finfo(x.dtype).eps ** (1 / 3)

            def central() -> Any:
                h = r * max(1.0, float(np.max(np.abs(x)))) / float(np.max(np.abs(t)))
                return (f(x + h * t) - f(x - h * t)) / (2 * h)

            return central
        return None
