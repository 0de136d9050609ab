"""AutoJAX prepared calls against JAX's own best calls, measured as interleaved ratios.

    python benchmarks/jax_overhead.py            # writes benchmarks/results/jax_overhead.{md,csv}
    python benchmarks/jax_overhead.py --x64      # x64 on for the process: jax float64 arrays,
                                                 # benchmarks/results/jax_overhead_x64.{md,csv}

The natives: ``jax.jit(jax.grad(f))`` for the gradient, ``jax.jit(jax.jacfwd/jacrev)`` for tall and
wide Jacobians, ``jax.jit`` of ``jvp(grad)`` for the hvp; each receives what ours receives (jax
float32 arrays, or numpy float64 arrays inside ``jax.enable_x64(True)``, returning numpy through
``np.asarray`` as ours does), and the captured matrix of the Jacobian cases as an argument, as our
duplicated closure passes it.
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import run_and_write  # noqa: E402

import diffinterface as di  # noqa: E402


def sum_sin2(x):
    return jnp.sum(jnp.sin(x) ** 2)


def _gradient_case(n: int, inputs: str, x, grad) -> tuple:
    """A prepared gradient on jax array ``x`` against the jitted ``grad``."""
    prep = di.prepare_gradient(di.AutoJAX(), sum_sin2, x)
    return (
        "gradient",
        n,
        inputs,
        lambda x=x, p=prep, b=prep.backend: di.gradient(b, sum_sin2, x, prep=p).block_until_ready(),
        lambda x=x, grad=grad: grad(x).block_until_ready(),
    )


def _hvp_case(n: int, inputs: str, x, t, native) -> tuple:
    """A prepared hvp on jax arrays ``x`` and ``t`` against the jitted ``jvp(grad)``."""
    prep = di.prepare_hvp(di.AutoJAX(), sum_sin2, x, t)
    return (
        "hvp",
        n,
        inputs,
        lambda x=x, t=t, p=prep, b=prep.backend: di.hvp(b, sum_sin2, x, t, prep=p).block_until_ready(),
        lambda x=x, t=t, native=native: native(x, t).block_until_ready(),
    )


def cases(quick: bool) -> list:
    """(operator, size, inputs, ours, native); every callable binds what it uses as default arguments."""
    rng = np.random.default_rng(0)
    jx = di.AutoJAX()
    out = []
    sizes = (10, 10_000) if quick else (10, 10_000, 1_000_000)
    grad = jax.jit(jax.grad(sum_sin2))
    hvp_native = jax.jit(lambda x, t: jax.jvp(jax.grad(sum_sin2), (x,), (t,))[1])
    for n in sizes:
        x64 = rng.normal(size=n)
        x32 = jnp.asarray(x64, dtype=jnp.float32)
        out.append(_gradient_case(n, "jax float32", x32, grad))
        prep64 = di.prepare_gradient(jx, sum_sin2, x64)

        def native64(x=x64, grad=grad):
            with jax.enable_x64(True):
                return np.asarray(grad(x))

        out.append(
            ("gradient", n, "numpy float64", lambda x=x64, p=prep64: di.gradient(jx, sum_sin2, x, prep=p), native64)
        )
        t32 = jnp.asarray(rng.normal(size=n), dtype=jnp.float32)
        if n <= 10_000:
            out.append(_hvp_case(n, "jax float32", x32, t32, hvp_native))
    for shape, name, transform in [
        ((1000, 10), "jacobian tall", jax.jacfwd),
        ((10, 1000), "jacobian wide", jax.jacrev),
    ]:
        A = rng.normal(size=shape).astype(np.float32)

        def f(x, A=A):
            return jnp.sin(A @ x)

        native = jax.jit(transform(lambda x, A: jnp.sin(A @ x)))
        x = jnp.asarray(rng.normal(size=shape[1]), dtype=jnp.float32)
        prep = di.prepare_jacobian(jx, f, x)
        out.append(
            (
                name,
                f"{shape[0]}x{shape[1]}",
                "jax float32",
                lambda x=x, p=prep, f=f: di.jacobian(jx, f, x, prep=p).block_until_ready(),
                lambda x=x, A=A, native=native: native(x, A).block_until_ready(),
            )
        )
    return out


def x64_cases(quick: bool) -> list:
    """The gradient and the hvp on jax float64 arrays with x64 on for the process (the setting a
    float64 user has), against the same natives: no context is entered by either call."""
    rng = np.random.default_rng(0)
    grad = jax.jit(jax.grad(sum_sin2))
    hvp_native = jax.jit(lambda x, t: jax.jvp(jax.grad(sum_sin2), (x,), (t,))[1])
    out = []
    for n in (10, 10_000) if quick else (10, 10_000, 1_000_000):
        x, t = jnp.asarray(rng.normal(size=n)), jnp.asarray(rng.normal(size=n))
        out.append(_gradient_case(n, "jax float64 (x64 on)", x, grad))
        if n <= 10_000:
            out.append(_hvp_case(n, "jax float64 (x64 on)", x, t, hvp_native))
    return out


def main(quick: bool = False, runs: int = 3, x64: bool = False) -> list[dict]:
    if x64:
        jax.config.update("jax_enable_x64", True)
        title = "AutoJAX prepared call / JAX's own best call, x64 on"
        return run_and_write("jax_overhead_x64", title, x64_cases(quick), runs)
    return run_and_write("jax_overhead", "AutoJAX prepared call / JAX's own best call", cases(quick), runs)


if __name__ == "__main__":
    main(quick="--quick" in sys.argv, x64="--x64" in sys.argv)
