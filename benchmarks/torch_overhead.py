"""AutoTorch prepared calls against PyTorch's own best calls, measured as interleaved ratios.

    python benchmarks/torch_overhead.py          # writes benchmarks/results/torch_overhead.{md,csv}

The natives, each given what ours is given (float64 tensors, or numpy arrays converted with
``torch.from_numpy`` and back with ``.numpy()``):

- gradient: eager ``torch.autograd.grad`` on a detached copy that requires grad, and
  ``torch.func.grad``; the budget is against the faster (eager, at every size measured here);
- hvp: double backward (eager reverse over reverse) and ``torch.func``'s ``jvp(grad)``;
- pushforward: dual tensors (``torch.autograd.forward_ad``);
- jacobian with a captured matrix, tall (forward) and wide (reverse): ``torch.func.jacfwd`` /
  ``jacrev`` and ``torch.autograd.functional.jacobian(vectorize=True)``; ours duplicates the
  captured matrix at every call (the default ``closure="duplicated"``), and a ``closure="const"``
  row shows what that costs;
- ``compile=True``: eager ``torch.autograd.grad`` through ``torch.compile(f)``.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.autograd.forward_ad as fwAD

sys.path.insert(0, os.path.dirname(__file__))
from _common import prepared_jacobians, run_and_write  # noqa: E402

import diffinterface as di  # noqa: E402


def sum_sin2(x):
    return torch.sum(torch.sin(x) ** 2)


def eager_grad(f):
    def grad(x):
        xt = x.detach().requires_grad_()
        return torch.autograd.grad(f(xt), xt)[0]

    return grad


def eager_hvp(f):
    def hvp(x, t):
        xt = x.detach().requires_grad_()
        (g,) = torch.autograd.grad(f(xt), xt, create_graph=True)
        return torch.autograd.grad(g, xt, t)[0]

    return hvp


def eager_jvp(f):
    def jvp(x, t):
        with fwAD.dual_level():
            return fwAD.unpack_dual(f(fwAD.make_dual(x, t))).tangent

    return jvp


def cases(quick: bool) -> list:
    """(operator, size, inputs, ours, native); every callable binds what it uses as default arguments."""
    gen = torch.Generator().manual_seed(0)
    tb = di.AutoTorch()
    out = []
    sizes = (10, 10_000) if quick else (10, 10_000, 1_000_000)
    grad, func_grad = eager_grad(sum_sin2), torch.func.grad(sum_sin2)
    hvp, func_hvp = eager_hvp(sum_sin2), (lambda x, t: torch.func.jvp(torch.func.grad(sum_sin2), (x,), (t,))[1])
    for n in sizes:
        x = torch.randn(n, dtype=torch.float64, generator=gen)
        t = torch.randn(n, dtype=torch.float64, generator=gen)
        prep = di.prepare_gradient(tb, sum_sin2, x)
        ours = lambda x=x, p=prep: di.gradient(tb, sum_sin2, x, prep=p)  # noqa: E731
        out.append(("gradient", n, "vs autograd.grad", ours, lambda x=x: grad(x)))
        out.append(("gradient", n, "vs torch.func.grad", ours, lambda x=x: func_grad(x)))
        xn = x.numpy()
        prep_np = di.prepare_gradient(tb, sum_sin2, xn)
        out.append(
            (
                "gradient",
                n,
                "numpy in, vs autograd.grad",
                lambda x=xn, p=prep_np: di.gradient(tb, sum_sin2, x, prep=p),
                lambda x=xn: grad(torch.from_numpy(x)).numpy(),
            )
        )
        prep_h = di.prepare_hvp(tb, sum_sin2, x, t)
        ours_h = lambda x=x, t=t, p=prep_h: di.hvp(tb, sum_sin2, x, t, prep=p)  # noqa: E731
        out.append(("hvp", n, "vs double backward", ours_h, lambda x=x, t=t: hvp(x, t)))
        if n <= 10_000:
            out.append(("hvp", n, "vs torch.func jvp(grad)", ours_h, lambda x=x, t=t: func_hvp(x, t)))
        f_vec = lambda z: torch.sin(z) * torch.sum(z)  # noqa: E731
        jvp = eager_jvp(f_vec)
        prep_p = di.prepare_pushforward(tb, f_vec, x, t)
        out.append(
            (
                "pushforward",
                n,
                "vs forward_ad",
                lambda x=x, t=t, p=prep_p, f=f_vec: di.pushforward(tb, f, x, t, prep=p),
                lambda x=x, t=t: jvp(x, t),
            )
        )
        compiled = di.AutoTorch(compile=True)
        prep_c = di.prepare_gradient(compiled, sum_sin2, x)
        native_c = eager_grad(torch.compile(sum_sin2, dynamic=False))
        out.append(
            (
                "gradient compile=True",
                n,
                "vs autograd.grad(compile(f))",
                lambda x=x, p=prep_c: di.gradient(compiled, sum_sin2, x, prep=p),
                lambda x=x: native_c(x),
            )
        )
    for (m, n), direction in [((1000, 10), "forward"), ((10, 1000), "reverse")]:
        A = torch.randn(m, n, dtype=torch.float64, generator=gen)
        x = torch.randn(n, dtype=torch.float64, generator=gen)

        def f(z, A=A):
            return torch.sin(A @ z)

        name = "jacobian tall" if direction == "forward" else "jacobian wide"
        func_jac = (torch.func.jacfwd if direction == "forward" else torch.func.jacrev)(f)
        strategy = "forward-mode" if direction == "forward" else "reverse-mode"
        for label, ours in prepared_jacobians(di.AutoTorch, f, x):
            out.append((name, f"{m}x{n}", f"vs torch.func{label}", ours, lambda x=x, j=func_jac: j(x)))
            out.append(
                (
                    name,
                    f"{m}x{n}",
                    f"vs autograd.functional{label}",
                    ours,
                    lambda x=x, f=f, s=strategy: torch.autograd.functional.jacobian(f, x, vectorize=True, strategy=s),
                )
            )
    return out


def main(quick: bool = False, runs: int = 3) -> list[dict]:
    return run_and_write("torch_overhead", "AutoTorch prepared call / PyTorch's own call", cases(quick), runs)


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
