"""AutoAutograd prepared calls against autograd's own calls, measured as interleaved ratios.

    python benchmarks/autograd_overhead.py       # writes benchmarks/results/autograd_overhead.{md,csv}

The natives, on the same float64 numpy arrays: ``autograd.grad(f)`` for the gradient;
``make_jvp(grad(f), x)(t)`` (forward over reverse, the faster of the two orders here) for the hvp;
``make_jvp(f, x)(t)`` for the pushforward; ``autograd.jacobian(f)`` (reverse mode, autograd's only
Jacobian) for the tall and wide Jacobians of ``sin(A @ x)``, and for the tall one also ``x.size``
``make_jvp`` calls, the forward Jacobian ours builds for ``mode=None``.
"""

from __future__ import annotations

import os
import sys

import autograd
import autograd.numpy as anp
import numpy as np
from autograd.core import make_jvp

sys.path.insert(0, os.path.dirname(__file__))
from _common import prepared_jacobians, run_and_write  # noqa: E402

import diffinterface as di  # noqa: E402


def sum_sin2(x):
    return anp.sum(anp.sin(x) ** 2)


def cases(quick: bool) -> list:
    """(operator, size, inputs, ours, native); every callable binds what it uses as default arguments."""
    rng = np.random.default_rng(0)
    ab = di.AutoAutograd()
    out = []
    sizes = (10, 10_000) if quick else (10, 10_000, 1_000_000)
    grad = autograd.grad(sum_sin2)
    for n in sizes:
        x, t = rng.normal(size=n), rng.normal(size=n)
        prep = di.prepare_gradient(ab, sum_sin2, x)
        out.append(
            (
                "gradient",
                n,
                "vs autograd.grad",
                lambda x=x, p=prep: di.gradient(ab, sum_sin2, x, prep=p),
                lambda x=x: grad(x),
            )
        )
        prep_h = di.prepare_hvp(ab, sum_sin2, x, t)
        out.append(
            (
                "hvp",
                n,
                "vs make_jvp(grad(f))",
                lambda x=x, t=t, p=prep_h: di.hvp(ab, sum_sin2, x, t, prep=p),
                lambda x=x, t=t: make_jvp(grad, x)(t)[1],
            )
        )
        f_vec = lambda z: anp.sin(z) * anp.sum(z)  # noqa: E731
        prep_p = di.prepare_pushforward(ab, f_vec, x, t)
        out.append(
            (
                "pushforward",
                n,
                "vs make_jvp(f)",
                lambda x=x, t=t, p=prep_p, f=f_vec: di.pushforward(ab, f, x, t, prep=p),
                lambda x=x, t=t, f=f_vec: make_jvp(f, x)(t)[1],
            )
        )
    for m, n in [(1000, 10), (10, 1000)]:
        A = rng.normal(size=(m, n))
        x = rng.normal(size=n)

        def f(z, A=A):
            return anp.sin(A @ z)

        name = "jacobian tall" if m > n else "jacobian wide"
        native = autograd.jacobian(lambda z, A=A: anp.sin(A @ z))
        for label, ours in prepared_jacobians(di.AutoAutograd, f, x):
            out.append((name, f"{m}x{n}", f"vs autograd.jacobian{label}", ours, lambda x=x, j=native: j(x)))
            if m > n:
                eye = np.eye(n)

                def columns(x=x, f=f, eye=eye):
                    return np.stack([make_jvp(f, x)(e)[1] for e in eye], axis=1)

                out.append((name, f"{m}x{n}", f"vs make_jvp per column{label}", ours, columns))
    return out


def main(quick: bool = False, runs: int = 3) -> list[dict]:
    return run_and_write("autograd_overhead", "AutoAutograd prepared call / autograd's own call", cases(quick), runs)


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
