"""``python -m diffinterface bench``: what diffinterface costs against each engine's own best call.

Tables (CSV and markdown with the machine, versions and date, in ``--out``, by default
``benchmarks/results``), and PNG plots of time against size:

- ``overhead``: per backend, operator and size, the prepared call, the unprepared call and the
  preparation against the engine's own best direct call on the same input type. Calls are timed
  in alternating batches (:func:`ratio`): the ratio is the median of the per-round ratios, with
  the smallest and largest round. The preparation is compared with the native's first call
  (which pays JAX's compilation).
- ``cheap_gradient``: the prepared gradient over ``f`` itself.
- ``mode_choice``: jacobians of tall and wide maps, ``mode=None`` against the better of
  ``"forward"`` and ``"reverse"``.
- ``finite_differences``: ``f``-evaluation counts and errors against the analytic derivative, for
  ``AutoFiniteDiff``, ``scipy.optimize.approx_derivative`` and ``numdifftools`` (when installed).
- ``closures``: ``closure="duplicated"`` against ``closure="const"``.
- ``rules``: a prepared gradient through a ``custom_rule`` against the same through the engine's
  own registration written by hand (``rule_by_hand`` of the bench records).
- ``catalogue``: :func:`diffinterface.testing.benchmark_differentiation` over the scenario
  catalogue (prepared, unprepared and preparation times, and ``f``-evaluation counts).

The quick default (a subset of sizes and fewer rounds) takes under two minutes; ``--full`` runs
every size with 21 rounds of about 30 ms per call kind.
"""

from __future__ import annotations

import csv
import datetime
import importlib.util
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass
from importlib import metadata
from typing import Any

import numpy as np
from array_api_compat import array_namespace

from ._backends import AbstractBackend
from ._closure import declare_modules

# The functions below stand for user code: their captured state is walked and duplicated as a
# user's would be (the diffinterface namespace is a library to the walker, see _closure.py).
declare_modules(__name__, walk=True)

# -- timing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """How long to time: ``rounds`` interleaved rounds of batches of about ``seconds``, after
    ``warmup`` seconds of both calls; the preparation ``prep_repeat`` times; ``slow_f``: how long
    the expensive ``f`` of the distributed table takes per evaluation."""

    rounds: int = 21
    seconds: float = 0.03
    warmup: float = 0.5
    prep_repeat: int = 3
    slow_f: float = 0.05


QUICK = Timing(rounds=9, seconds=0.01, warmup=0.2, prep_repeat=1)
FULL = Timing()


def batch_size(fn: Callable[[], Any], seconds: float) -> int:
    """How many calls make a timed batch of about ``seconds``."""
    fn()
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    return max(1, int(seconds / max(once, 1e-7)))


def ratio(ours: Callable[[], Any], native: Callable[[], Any], timing: Timing = FULL) -> dict[Any, Any]:
    """Time ``ours`` and ``native`` in alternating batches; per-round ratios, their median and spread.

    Interleaving makes both see the same machine state (frequency, cache, other load), so the ratio
    is steadier than either time alone. Each call has its own batch size (a slow unprepared call
    is not repeated as often as a fast native one)."""
    n_ours, n_native = batch_size(ours, timing.seconds), batch_size(native, timing.seconds)
    warm_until = time.perf_counter() + timing.warmup
    while time.perf_counter() < warm_until:
        for _ in range(n_ours):
            ours()
        for _ in range(n_native):
            native()
    times_ours, times_native, ratios = [], [], []

    def batch(fn: Callable[[], Any], number: int) -> float:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        return (time.perf_counter() - start) / number

    for i in range(timing.rounds):
        if i % 2:  # which goes first alternates: neither always runs on the other's leftovers
            t_native, t_ours = batch(native, n_native), batch(ours, n_ours)
        else:
            t_ours, t_native = batch(ours, n_ours), batch(native, n_native)
        times_ours.append(t_ours)
        times_native.append(t_native)
        ratios.append(t_ours / t_native)
    return {
        "ours_s": statistics.median(times_ours),
        "native_s": statistics.median(times_native),
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
    }


def once(fn: Callable[[], Any], repeat: int, single_over: float | None = None) -> float:
    """The median time of ``repeat`` single calls (a preparation, a first call); with
    ``single_over``, one call where the first takes longer than that many seconds."""
    samples: list[float] = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
        if single_over is not None and samples[0] > single_over:
            break
    return statistics.median(samples)


def machine(
    packages: tuple[Any, ...] = ("numpy", "scipy", "jax", "jaxlib", "torch", "autograd", "numdifftools", "distributed"),
) -> dict[Any, Any]:
    """The machine, Python, library versions and date a table was measured with."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    versions = {}
    for name in ("diffinterface",) + packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.system()} {platform.machine()}, {cpu}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "versions": ", ".join(f"{k} {v}" for k, v in versions.items()),
    }


def _cell(column: str, value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if column.endswith("_s"):
            return f"{value * 1e3:.2f} ms" if value >= 1e-3 else f"{value * 1e6:.1f} us"
        if column.endswith("_us"):
            return f"{value:+.1f} us"
        return f"{value:.3g}" if column.endswith("error") else f"{value:.3f}"
    return str(value)


def write_table(
    path: str, title: str, info: dict[Any, Any], rows: list[dict], columns: list[str], notes: str = ""
) -> None:
    """``path.csv`` (every field of ``rows``) and ``path.md`` (``columns``, with the machine record)."""
    if not rows:
        return
    fields = list(dict.fromkeys(k for row in rows for k in row))
    with open(path + ".csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        f"# {title}",
        "",
        f"- date: {info['date']}",
        f"- machine: {info['machine']}",
        f"- python {info['python']}; {info['versions']}",
        "",
    ]
    if notes:
        lines += [notes, ""]
    lines.append("| " + " | ".join(columns) + " |")
    lines.append("|" + "---|" * len(columns))
    for row in rows:
        lines.append("| " + " | ".join(_cell(c, row.get(c, "")) for c in columns) + " |")
    with open(path + ".md", "w") as fh:
        fh.write("\n".join(lines) + "\n")


# -- the engines: inputs and native calls ------------------------------------------------------
# Each backend config names its record (``bench = "package.module:Class"``, a subclass of Engine):
# nothing here knows an engine by name.


def _benchable() -> dict[str, type[AbstractBackend]]:
    from ._backends import registered_backends

    return {name: cls for name, cls in registered_backends().items() if cls.bench}


def engine_names() -> list[str]:
    """The registered backends that name a bench record."""
    return list(_benchable())


def installed_engines(names: list[str] | None = None) -> list[str]:
    from ._backends import check_available

    configs = _benchable()
    return [e for e in (names or list(configs)) if e in configs and check_available(configs[e]())]


def config_class(engine: str) -> type[AbstractBackend]:
    """The config class of the backend named ``engine``."""
    return _benchable()[engine]


def config(engine: str, **options: Any) -> Any:
    """The config of the backend named ``engine``, with ``options``."""
    return _benchable()[engine](**options)


def has_modes(engine: str) -> bool:
    """Whether the backend's config has a ``mode`` field (forward or reverse mode to choose)."""
    cls = _benchable()[engine]
    return is_dataclass(cls) and any(f.name == "mode" for f in fields(cls))


def sum_sin2(x):
    xp = array_namespace(x)
    return xp.sum(xp.sin(x) ** 2)


def sin_times_sum(x):
    xp = array_namespace(x)
    return xp.sin(x) * xp.sum(x)


class Engine:
    """One engine's record for the benchmarks (public as ``diffinterface.extend.BenchEngine``): its
    inputs (its own array type) and its best direct calls, each ``() -> result`` with the result
    ready (JAX: blocked on). A backend config names it with ``bench = "package.module:Class"``.

    - ``inputs``: a label for the tables; ``array(a)``: a numpy array in the engine's type;
      ``ready(value)``: ``value`` once computed;
    - ``native(operator, f, x, t, A)``: the engine's own call for ``operator`` (``gradient``,
      ``hvp``, ``hessian``, ``pushforward``, ``pullback``, ``jacobian tall``/``wide`` with
      ``f(x) = sin(A @ x)``), or None where it has none; ``native_first``: its cold call, what
      preparation is compared with (JAX: a fresh jit, compiled);
    - ``compiled(f)``: ``f`` as the engine's users run it (JAX: ``jax.jit(f)``);
    - ``limits``: the largest size per operator worth timing (finite differences cost an evaluation
      of ``f`` per coordinate), or None for every size;
    - ``costs``: per operator, the work the adapter does beyond the native call and why (shown in the
      overhead table next to the measured split of a row over budget);
    - ``rule_by_hand(primal, vjp)``: an opaque NumPy function of one array (``primal(a)``, an array of
      a's shape; ``vjp(a, dy)``) registered with the engine's own mechanism as its users write it by
      hand, what the rules table compares a ``custom_rule`` with; None where the engine has none.
    """

    inputs = "numpy float64"
    limits: dict[str, int] | None = None
    costs: dict[str, str] = {}

    def array(self, a: np.ndarray) -> Any:
        return a

    def ready(self, value: Any) -> Any:
        return value

    def native(self, operator: str, f: Callable[..., Any], x: Any, t: Any, A: Any) -> Callable[[], Any] | None:
        raise NotImplementedError(
            f"{type(self).__name__}: a bench record implements native(operator, f, x, t, A), the engine's own call"
        )

    def native_first(self, operator: str, f: Callable[..., Any], x: Any, t: Any, A: Any) -> Callable[[], Any] | None:
        return self.native(operator, f, x, t, A)

    def compiled(self, f: Callable[..., Any]) -> Callable[..., Any]:
        return f

    def rule_by_hand(self, primal: Callable[..., Any], vjp: Callable[..., Any]) -> Callable[..., Any] | None:
        return None

    def allows(self, operator: str, size: int) -> bool:
        """Whether ``operator`` at ``size`` is within :attr:`limits`."""
        return self.limits is None or size <= self.limits.get(operator, -1)


def approx_derivative() -> Callable[..., Any]:
    """``scipy.optimize.approx_derivative``: the differencing behind SciPy's ``least_squares`` and
    ``minimize``, exported from ``scipy.optimize._numdiff`` (not from ``scipy.optimize`` in 1.17)."""
    try:
        from scipy.optimize import approx_derivative
    except ImportError:
        from scipy.optimize._numdiff import approx_derivative
    return approx_derivative


def engine(name: str) -> Engine:
    """The bench record of the backend named ``name`` (its module imported here)."""
    path = _benchable()[name].bench or ""
    module, _, cls = path.partition(":")
    return getattr(importlib.import_module(module), cls)()


# -- the overhead table --------------------------------------------------------------------------

OPERATORS = ("gradient", "hvp", "hessian", "pushforward", "pullback", "jacobian tall", "jacobian wide")
# sizes "where they make sense": the length of x (the long side of a jacobian, whose short side is 10)
SIZES = {
    "quick": {
        "gradient": (10, 100_000),
        "hvp": (10, 100_000),
        "hessian": (10,),
        "pushforward": (100_000,),
        "pullback": (100_000,),
        "jacobian tall": (1_000,),
        "jacobian wide": (1_000,),
    },
    "full": {
        "gradient": (10, 1_000, 100_000, 1_000_000),
        "hvp": (10, 1_000, 100_000, 1_000_000),
        "hessian": (10, 1_000),
        "pushforward": (10, 1_000, 100_000, 1_000_000),
        "pullback": (10, 1_000, 100_000, 1_000_000),
        "jacobian tall": (10, 1_000, 100_000),
        "jacobian wide": (10, 1_000, 100_000),
    },
}


def budget(size: int) -> float:
    """contract section 11: prepared at most 1.05x native at n >= 1e4, 1.25x below."""
    return 1.05 if size >= 10_000 else 1.25


def _case(name: str, eng: Engine, operator: str, size: int) -> dict[Any, Any] | None:
    """The arrays, f and our three calls for one row; None where the engine has no native."""
    import diffinterface as di

    rng = np.random.default_rng(size)
    backend = config(name)
    A = None
    f: Callable[..., Any]
    if operator.startswith("jacobian"):
        shape = (size, 10) if operator.endswith("tall") else (10, size)
        A = eng.array(rng.normal(size=shape) / np.sqrt(shape[1]))
        x = eng.array(rng.normal(size=shape[1]))

        def f(z: Any, A: Any = A) -> Any:
            return array_namespace(z).sin(A @ z)
    else:
        x = eng.array(rng.normal(size=size))
        f = sin_times_sum if operator in ("pushforward", "pullback") else sum_sin2
    t = eng.array(rng.normal(size=size)) if operator in ("hvp", "pushforward", "pullback") else None
    native = eng.native(operator, f, x, t, A)
    if native is None:
        return None
    name_ = "jacobian" if operator.startswith("jacobian") else operator
    plain, prepare = getattr(di, name_), getattr(di, f"prepare_{name_}")
    args = (x, t) if t is not None else (x,)
    prep = prepare(backend, f, *args)
    ready = eng.ready
    runner, tangents = prep.plain, ((t,) if t is not None else ())
    return {
        "prepared": lambda: ready(plain(backend, f, *args, prep=prep)),
        "runner": lambda: ready(runner(x, tangents, ())),  # the adapter's runner, without the frontend
        "unprepared": lambda: ready(plain(backend, f, *args)),
        "prepare": lambda: prepare(backend, f, *args),
        "native": native,
        "native_first": eng.native_first(operator, f, x, t, A),
        "shape": f"{A.shape[0]}x{A.shape[1]}" if A is not None else str(size),
    }


def overhead(engines: list[str], sizes: dict[Any, Any], timing: Timing, progress: Callable[..., Any]) -> list[dict]:
    records = {name: engine(name) for name in engines}
    plan = [(name, op, n) for name in engines for op in OPERATORS for n in sizes[op] if records[name].allows(op, n)]
    rows = []
    for i, (name, operator, size) in enumerate(plan):
        progress(i, len(plan), f"overhead {name} {operator} {size}")
        eng = records[name]
        case = _case(name, eng, operator, size)
        if case is None:
            continue
        prepared = ratio(case["prepared"], case["native"], timing)
        unprepared = ratio(case["unprepared"], case["native"], timing)
        prep_s = once(case["prepare"], timing.prep_repeat)
        first_s = once(case["native_first"], timing.prep_repeat)
        within = prepared["ratio"] <= budget(size)
        split = {"frontend_us": "", "adapter_us": "", "reason": ""}
        if not within:  # where the time goes: the frontend (check, dispatch) and the adapter's runner
            frontend = ratio(case["prepared"], case["runner"], timing)
            adapter = ratio(case["runner"], case["native"], timing)
            split = {
                "frontend_us": (frontend["ours_s"] - frontend["native_s"]) * 1e6,
                "adapter_us": (adapter["ours_s"] - adapter["native_s"]) * 1e6,
                "reason": eng.costs.get(operator, ""),
            }
        rows.append(
            {
                "backend": repr(config(name)),
                "operator": operator,
                "size": size,
                "shape": case["shape"],
                "inputs": eng.inputs,
                "prepared_s": prepared["ours_s"],
                "native_s": prepared["native_s"],
                "prepared_ratio": prepared["ratio"],
                "prepared_min": prepared["ratio_min"],
                "prepared_max": prepared["ratio_max"],
                "unprepared_s": unprepared["ours_s"],
                "unprepared_ratio": unprepared["ratio"],
                "unprepared_min": unprepared["ratio_min"],
                "unprepared_max": unprepared["ratio_max"],
                "prepare_s": prep_s,
                "native_first_s": first_s,
                "prepare_ratio": prep_s / first_s,
                "budget": budget(size),
                "within_budget": "yes" if within else "NO",
                **split,
            }
        )
    progress(len(plan), len(plan), "overhead")
    return rows


def cheap_gradient(
    engines: list[str], sizes: tuple[Any, ...], timing: Timing, progress: Callable[..., Any]
) -> list[dict]:
    """The prepared gradient over ``f`` itself (JAX: ``jax.jit(f)``), per backend and size."""
    from . import gradient, prepare_gradient

    rows = []
    records = {name: engine(name) for name in engines}
    plan = [(name, n) for name in engines for n in sizes if records[name].allows("gradient", n)]
    for i, (name, n) in enumerate(plan):
        progress(i, len(plan), f"cheap gradient {name} {n}")
        eng, backend = records[name], config(name)
        x = eng.array(np.random.default_rng(n).normal(size=n))
        f = eng.compiled(sum_sin2)
        prep = prepare_gradient(backend, sum_sin2, x)
        r = ratio(lambda: eng.ready(gradient(backend, sum_sin2, x, prep=prep)), lambda: eng.ready(f(x)), timing)
        rows.append(
            {
                "backend": repr(backend),
                "size": n,
                "inputs": eng.inputs,
                "gradient_s": r["ours_s"],
                "f_s": r["native_s"],
                "gradient_over_f": r["ratio"],
                "min": r["ratio_min"],
                "max": r["ratio_max"],
            }
        )
    progress(len(plan), len(plan), "cheap gradient")
    return rows


def mode_choice(engines: list[str], sizes: tuple[Any, ...], timing: Timing, progress: Callable[..., Any]) -> list[dict]:
    """Jacobians of ``sin(A @ x)``, tall (size x 10) and wide (10 x size): ``mode=None`` against the
    better of forward and reverse."""
    from . import jacobian, prepare_jacobian

    rows = []
    plan = [(name, kind, n) for name in engines if has_modes(name) for kind in ("tall", "wide") for n in sizes]
    for i, (name, kind, n) in enumerate(plan):
        progress(i, len(plan), f"mode choice {name} {kind} {n}")
        eng = engine(name)
        rng = np.random.default_rng(n)
        shape = (n, 10) if kind == "tall" else (10, n)
        A = eng.array(rng.normal(size=shape) / np.sqrt(shape[1]))
        x = eng.array(rng.normal(size=shape[1]))

        def f(z, A=A):
            return array_namespace(z).sin(A @ z)

        calls = {}
        for mode in (None, "forward", "reverse"):
            backend = config(name, mode=mode)
            prep = prepare_jacobian(backend, f, x)
            calls[mode] = lambda b=backend, p=prep: eng.ready(jacobian(b, f, x, prep=p))
        fwd = ratio(calls["forward"], calls["reverse"], timing)
        better = "forward" if fwd["ratio"] <= 1 else "reverse"
        r = ratio(calls[None], calls[better], timing)
        rows.append(
            {
                "backend": repr(config(name)),
                "shape": f"{shape[0]}x{shape[1]}",
                "kind": kind,
                "auto_s": r["ours_s"],
                "better": better,
                "better_s": r["native_s"],
                "forward_over_reverse": fwd["ratio"],
                "auto_over_better": r["ratio"],
                "min": r["ratio_min"],
                "max": r["ratio_max"],
                "within_1.1": "yes" if r["ratio"] <= 1.1 else "NO",
            }
        )
    progress(len(plan), len(plan), "mode choice")
    return rows


class _Count:
    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls = 0


def finite_differences(progress: Callable[..., Any]) -> list[dict]:
    """Evaluation counts and errors on smooth functions with analytic derivatives: AutoFiniteDiff
    (its three real methods) against ``scipy.optimize.approx_derivative`` and ``numdifftools``."""
    from . import AutoFiniteDiff, gradient, jacobian

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


def closures(engines: list[str], sizes: tuple[Any, ...], timing: Timing, progress: Callable[..., Any]) -> list[dict]:
    """``closure="duplicated"`` against ``"const"``: a prepared gradient (reverse mode; the
    pushforward too: forward mode) of a function capturing a float, one reading a captured
    array, and one writing a captured buffer (against the same arithmetic without the buffer)."""
    from . import gradient, prepare_gradient, prepare_pushforward, pushforward

    plan = [(name, n) for name in engines for n in sizes]
    rows = []
    for i, (name, n) in enumerate(plan):
        progress(i, len(plan), f"closures {name} {n}")
        eng = engine(name)
        scale, a, buf = 3.0, np.linspace(0.5, 1.5, n), np.zeros(n)

        def captures_float(x):
            xp = array_namespace(x)
            return scale * xp.sum(xp.sin(x) ** 2)

        def reads_array(x):
            xp = array_namespace(x)
            return xp.sum(xp.sin(xp.asarray(a) * x) ** 2)

        def writes_buffer(x):
            xp = array_namespace(x)
            buf[...] = 2 * x
            return xp.sum(xp.asarray(buf) * x)

        def without_buffer(x):
            return array_namespace(x).sum((2 * x) * x)

        x, t = np.linspace(-1.0, 1.0, n), np.linspace(0.5, 1.5, n)
        duplicated, const = config(name), config(name, closure="const")
        for label, f_dup, f_const in [
            ("captures a float", captures_float, captures_float),
            ("reads a captured array", reads_array, reads_array),
            ("writes a captured buffer", writes_buffer, without_buffer),
        ]:
            for operator in ("gradient", "pushforward"):
                if not eng.allows(operator, n):
                    continue
                if operator == "gradient":
                    pd, pc = prepare_gradient(duplicated, f_dup, x), prepare_gradient(const, f_const, x)
                    ours = lambda f=f_dup, p=pd: eng.ready(gradient(duplicated, f, x, prep=p))  # noqa: E731
                    native = lambda f=f_const, p=pc: eng.ready(gradient(const, f, x, prep=p))  # noqa: E731
                else:
                    pd, pc = prepare_pushforward(duplicated, f_dup, x, t), prepare_pushforward(const, f_const, x, t)
                    ours = lambda f=f_dup, p=pd: eng.ready(pushforward(duplicated, f, x, t, prep=p))  # noqa: E731
                    native = lambda f=f_const, p=pc: eng.ready(pushforward(const, f, x, t, prep=p))  # noqa: E731
                r = ratio(ours, native, timing)
                rows.append(
                    {
                        "backend": repr(duplicated),
                        "function": label,
                        "operator": operator,
                        "size": n,
                        "duplicated_s": r["ours_s"],
                        "const_s": r["native_s"],
                        "ratio": r["ratio"],
                        "min": r["ratio_min"],
                        "max": r["ratio_max"],
                    }
                )
    progress(len(plan), len(plan), "closures")
    return rows


def _one_argument_rule(b: Any) -> Any:
    """``cumsum(x * b**2)`` as a rule of x alone, its bodies closing over ``b``, as a hand-written
    registration does (a rule made here holds a closure: it pickles by value, not by reference). Its
    reverse pass needs no tape, as the hand-written VJP needs only its input: no augmented primal."""
    from .rules import custom_rule

    @custom_rule(opaque=True)
    def cumsum_scaled(a: Any) -> Any:
        return np.cumsum(a * b**2)

    @cumsum_scaled.def_reverse
    def _reverse(tape: Any, dy: Any, a: Any) -> Any:
        return np.cumsum(np.asarray(dy)[::-1])[::-1] * b**2

    return cumsum_scaled


def rules(engines: list[str], sizes: tuple[Any, ...], timing: Timing, progress: Callable[..., Any]) -> list[dict]:
    """A prepared gradient through a ``custom_rule`` against the same through the engine's own
    registration written by hand (``rule_by_hand``), both through the engine's backend: the price of
    writing the rule once. The function is opaque NumPy code, ``cumsum(x * b**2)`` with ``b``
    captured, as a rule of x alone whose bodies close over b (like for like with the hand-written
    registration) and as ``diffinterface.testing``'s two-argument ``cumsum_weighted(x, b)``, its b a
    ``Const`` that the engine's registration passes along (through JAX's host callbacks)."""
    from . import gradient, prepare_gradient
    from .testing._rule_scenarios import cumsum_weighted

    records = {name: engine(name) for name in engines}
    plan = [
        (name, n, kind)
        for name in engines
        if records[name].rule_by_hand(np.cumsum, np.cumsum) is not None
        for n in sizes
        for kind in ("x alone, b closed over", "x and b, b a Const")
    ]
    rows = []
    for i, (name, n, kind) in enumerate(plan):
        progress(i, len(plan), f"rules {name} {n} {kind}")
        eng, backend = records[name], config(name, closure="const")  # the closures table prices duplicates
        b = np.linspace(0.5, 1.5, n)

        def primal(a: Any) -> Any:  # the rule's arithmetic, written for x alone
            return np.cumsum(a * b**2)

        def vjp(a: Any, dy: Any) -> Any:
            return np.cumsum(np.asarray(dy)[::-1])[::-1] * b**2

        by_hand: Any = eng.rule_by_hand(primal, vjp)
        one = _one_argument_rule(b)

        def with_rule(x: Any) -> Any:
            if kind.startswith("x alone"):
                return array_namespace(x).sum(one(x))
            return array_namespace(x).sum(cumsum_weighted(x, b))

        def with_hand(x: Any) -> Any:
            return array_namespace(x).sum(by_hand(x))

        # the engine's own inputs (JAX: float32, its default; a float64 host callback of a large input
        # fails under JAX's thread-local x64 context, which a hand-written registration cannot help)
        x = eng.array(np.linspace(-1.0, 1.0, n))
        expected = np.cumsum(np.ones(n)[::-1])[::-1] * b**2
        rtol = 1e-12 if np.asarray(x).dtype == np.float64 else 1e-5
        p_rule, p_hand = prepare_gradient(backend, with_rule, x), prepare_gradient(backend, with_hand, x)
        for f, p in ((with_rule, p_rule), (with_hand, p_hand)):  # both right before both are timed
            np.testing.assert_allclose(np.asarray(gradient(backend, f, x, prep=p)), expected, rtol=rtol)
        r = ratio(
            lambda: eng.ready(gradient(backend, with_rule, x, prep=p_rule)),
            lambda: eng.ready(gradient(backend, with_hand, x, prep=p_hand)),
            timing,
        )
        rows.append(
            {
                "backend": repr(backend),
                "rule": kind,
                "inputs": eng.inputs,
                "size": n,
                "rule_s": r["ours_s"],
                "by_hand_s": r["native_s"],
                "ratio": r["ratio"],
                "min": r["ratio_min"],
                "max": r["ratio_max"],
                "within_1.1": r["ratio"] <= 1.1,
            }
        )
    progress(len(plan), len(plan), "rules")
    return rows


def catalogue(engines: list[str], full: bool, progress: Callable[..., Any]) -> list[dict]:
    """``benchmark_differentiation`` over the catalogue (numpy float64 inputs); quick: one scenario
    per operator."""
    from .testing import benchmark_differentiation, default_scenarios

    scenarios = default_scenarios("numpy", np.float64)
    if not full:
        scenarios = list({s.operator: s for s in reversed(scenarios)}.values())
    backends = [config(name) for name in engines]
    total = len(backends) * len(scenarios)
    return benchmark_differentiation(
        backends,
        scenarios,
        repeat=5 if full else 2,
        progress=lambda i, n, row: progress(i, total, f"catalogue {row['backend']} {row['scenario']}"),
    )


# -- plots ---------------------------------------------------------------------------------------


def plot_overhead(rows: list[dict], out: str) -> list[str]:
    """One PNG per operator: prepared time (solid) and native time (dashed) against size, per backend."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    paths = []
    for operator in dict.fromkeys(r["operator"] for r in rows):
        fig, ax = plt.subplots(figsize=(6, 4))
        for k, backend in enumerate(dict.fromkeys(r["backend"] for r in rows if r["operator"] == operator)):
            sel = sorted(
                (r for r in rows if r["operator"] == operator and r["backend"] == backend), key=lambda r: r["size"]
            )
            sizes = [r["size"] for r in sel]
            color = f"C{k}"
            ax.plot(sizes, [r["prepared_s"] for r in sel], "o-", color=color, label=f"{backend} prepared")
            ax.plot(sizes, [r["native_s"] for r in sel], "x--", color=color, label=f"{backend}: native")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("size (length of x; of the long side for a jacobian)")
        ax.set_ylabel("seconds per call")
        ax.set_title(f"{operator}: diffinterface (solid) and the engine's own call (dashed)")
        ax.title.set_fontsize(9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(out, f"overhead_{operator.replace(' ', '_')}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


# -- the command ----------------------------------------------------------------------------------

TABLES = (
    "overhead",
    "cheap_gradient",
    "mode_choice",
    "finite_differences",
    "closures",
    "rules",
    "sparse",
    "structured",
    "distributed",
    "catalogue",
)

_COLUMNS = {
    "overhead": [
        "backend",
        "operator",
        "shape",
        "inputs",
        "prepared_s",
        "native_s",
        "prepared_ratio",
        "prepared_min",
        "prepared_max",
        "unprepared_ratio",
        "prepare_s",
        "native_first_s",
        "prepare_ratio",
        "within_budget",
        "frontend_us",
        "adapter_us",
        "reason",
    ],
    "cheap_gradient": ["backend", "size", "inputs", "gradient_s", "f_s", "gradient_over_f", "min", "max"],
    "mode_choice": [
        "backend",
        "shape",
        "auto_s",
        "better",
        "better_s",
        "forward_over_reverse",
        "auto_over_better",
        "min",
        "max",
        "within_1.1",
    ],
    "finite_differences": ["function", "method", "f_evaluations", "max_rel_error", "error"],
    "closures": ["backend", "function", "operator", "size", "duplicated_s", "const_s", "ratio", "min", "max"],
    "rules": ["backend", "rule", "inputs", "size", "rule_s", "by_hand_s", "ratio", "min", "max", "within_1.1"],
    "sparse": [],  # diffinterface.sparse._bench.COLUMNS, filled below
    "structured": [],  # diffinterface._bench_structured.COLUMNS, filled below
    "distributed": [],  # diffinterface._bench_distributed.COLUMNS, filled below
    "catalogue": [
        "backend",
        "scenario",
        "prepared_s",
        "unprepared_s",
        "prepare_s",
        "prepared_calls",
        "unprepared_calls",
        "prepare_calls",
        "error",
    ],
}

_TITLES = {
    "overhead": "Overhead: diffinterface against each engine's own best call",
    "cheap_gradient": "Cheap gradient: prepared gradient / f",
    "mode_choice": "Mode choice: jacobian with mode=None / the better of forward and reverse",
    "finite_differences": "Finite differences: f evaluations and errors against the analytic derivative",
    "closures": "Closures: closure='duplicated' / closure='const'",
    "rules": "Rules: a prepared gradient through a custom_rule / through the engine's registration written by hand",
    "sparse": "Sparse Jacobians and Hessians: AutoSparse on the issue 16 problems",
    "structured": "Structured x: a prepared gradient of a dict of arrays / of one flat array, and the flattening",
    "distributed": "Distributed finite differences: a Jacobian of an expensive f, serial and on executors",
    "catalogue": "The scenario catalogue, through benchmark_differentiation",
}


def _notes(table: str, timing: Timing) -> str:
    how = (
        f"Interleaved timing: {timing.rounds} rounds of batches of about {timing.seconds * 1e3:.0f} ms of each "
        f"call, after {timing.warmup} s of warm-up; a ratio is the median of the per-round ratios, min and max "
        f"the smallest and largest round."
    )
    return {
        "overhead": how + " Natives: JAX `jax.jit` of `grad`, `jvp(grad)`, `hessian`, `jvp`, `vjp`, `jacfwd` (tall) "
        "and `jacrev` (wide); torch eager autograd (`autograd.grad`, double backward, forward-mode dual tensors, "
        "`autograd.functional.jacobian/hessian(vectorize=True)`); autograd `grad`, `make_jvp(grad)`, `hessian`, "
        "`make_jvp`, `make_vjp`, one `make_jvp` per column (tall) and `jacobian` (wide); finite differences "
        "`scipy.optimize.approx_derivative('3-point')` and a central difference along t. The preparation is "
        "compared with the native's first call (a fresh `jax.jit`, compiled). Budget (contract section 11): the prepared "
        "ratio at most 1.05 at sizes >= 1e4, 1.25 below. f: `sum(sin(x)**2)` (gradient, hvp, hessian), "
        "`sin(x) * sum(x)` (pushforward, pullback), `sin(A @ x)` with A captured (jacobians). For a row over budget, "
        "two more interleaved measurements split the difference: `frontend_us`, the public call over the adapter's "
        "runner called directly (the prep check, dispatch, result conversion), and `adapter_us`, the runner over the "
        "native call; `reason` is the work the backend's bench record documents for that operator.",
        "cheap_gradient": how + " f: `sum(sin(x)**2)`; JAX's f is `jax.jit(f)`.",
        "mode_choice": how + " f: `sin(A @ x)`; forward_over_reverse < 1 means forward mode is faster.",
        "finite_differences": "x: 20 points in [0.3, 1.7]; error: max |derivative - analytic| / max |analytic|.",
        "closures": how + " 'ratio' is the price of the duplicates: duplicated / const.",
        "rules": how + " f: `sum(rule(x))`, `rule` an opaque NumPy `cumsum(x * b**2)` with b captured: a rule of x "
        "alone whose bodies close over b (like for like), and `diffinterface.testing`'s two-argument "
        "`cumsum_weighted(x, b)`, b a `Const` argument; by hand: the same NumPy primal and VJP of x alone (b closed "
        "over) as a `jax.custom_vjp` over "
        "`jax.pure_callback`, a `torch.autograd.Function`, an autograd `primitive` with `defvjp`. Both are "
        "`prepare_gradient` calls of the engine's backend with closure='const' (the closures table prices the "
        "duplicates); both results are checked before timing. Budget "
        "(issue 15): at most 1.1 at n = 1e4.",
        "sparse": how + " " + _sparse_bench().NOTES,
        "structured": how + " " + _structured_bench().NOTES,
        "distributed": _distributed_bench().NOTES,
        "catalogue": "Median of the timed batches (`time_call`); `*_calls`: evaluations of f by each call.",
    }[table]


def _sparse_bench() -> Any:
    from .sparse import _bench as sparse_bench

    return sparse_bench


def _structured_bench() -> Any:
    from . import _bench_structured

    return _bench_structured


def _distributed_bench() -> Any:
    from . import _bench_distributed

    return _bench_distributed


def run(
    engines: list[str] | None = None,
    full: bool = False,
    out: str = os.path.join("benchmarks", "results"),
    tables: list[str] | None = None,
    progress: Callable[..., Any] | None = None,
    plots: bool = True,
    timing: Timing | None = None,
) -> dict[Any, Any]:
    """Run the benchmarks and write their tables; returns ``{"results": {table: rows}, "written":
    paths, "machine": record}``. ``timing`` overrides the rounds of ``QUICK`` or ``FULL``."""
    engines = installed_engines(engines)
    timing = timing or (FULL if full else QUICK)
    kind = "full" if full else "quick"
    progress = progress or (lambda i, n, label: None)
    os.makedirs(out, exist_ok=True)
    info = machine()
    results: dict[Any, Any] = {}
    written: list[str] = []
    for table in tables or TABLES:
        if table == "overhead":
            rows = overhead(engines, SIZES[kind], timing, progress)
        elif table == "cheap_gradient":
            rows = cheap_gradient(
                engines, (10, 1_000, 100_000, 1_000_000) if full else (1_000, 100_000), timing, progress
            )
        elif table == "mode_choice":
            rows = mode_choice(engines, (100, 10_000) if full else (1_000,), timing, progress)
        elif table == "finite_differences":
            rows = finite_differences(progress) if "finitediff" in engines else []
        elif table == "closures":
            rows = closures(engines, (100, 10_000, 1_000_000) if full else (10_000,), timing, progress)
        elif table == "rules":
            rows = rules(engines, (100, 10_000, 1_000_000) if full else (10_000,), timing, progress)
        elif table == "sparse":
            rows = _sparse_bench().sparse(engines, full, timing, progress, sys.modules[__name__])
            _COLUMNS["sparse"] = _sparse_bench().COLUMNS
        elif table == "structured":
            rows = _structured_bench().structured(engines, full, timing, progress, sys.modules[__name__])
            _COLUMNS["structured"] = _structured_bench().COLUMNS
        elif table == "distributed":  # finite differences on numpy: no engine needed
            rows = _distributed_bench().distributed(full, timing, progress) if "finitediff" in engines else []
            _COLUMNS["distributed"] = _distributed_bench().COLUMNS
        elif table == "catalogue":
            rows = catalogue(engines, full, progress)
        else:
            raise ValueError(f"unknown table {table!r}; choose from {', '.join(TABLES)}")
        results[table] = rows
        path = os.path.join(out, table)
        title = _TITLES[table] + (" (quick)" if not full else "")
        write_table(path, title, info, rows, _COLUMNS[table], _notes(table, timing))
        if rows:
            written += [path + ".csv", path + ".md"]
        if table == "overhead" and plots and rows:
            written += plot_overhead(rows, out)
    return {"results": results, "written": written, "machine": info}
