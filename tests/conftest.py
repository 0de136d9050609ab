"""Shared parametrisation: array families, skipped with a reason (and the install line) when missing."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os

import pytest

# PyTensor compiles every new graph; its full C compilation (FAST_RUN, PyTensor's default) takes
# seconds per graph on these machines, and the shared tests build thousands. The suite runs
# AutoPyTensor() in PyTensor's FAST_COMPILE mode (its configured mode, set before it is imported);
# tests/test_pytensor.py runs FAST_RUN explicitly on one scenario per operator.
os.environ.setdefault("PYTENSOR_FLAGS", "mode=FAST_COMPILE")


def _name_jax_enable_x64() -> None:
    """JAX before 0.5 has its float64 context as ``jax.experimental.enable_x64`` only (pyproject.toml
    admits 0.4.35, which ``nox -s tests-oldest`` installs): the tests write ``jax.enable_x64``, as the
    library reaches either through ``extend.jax_enable_x64``; on such a JAX the name is given to it."""
    try:  # the installed version, read without importing JAX (every run and worker would pay its import)
        major, minor = (int(part) for part in importlib.metadata.version("jax").split(".")[:2])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return
    if (major, minor) >= (0, 5):
        return
    import jax

    if not hasattr(jax, "enable_x64"):
        from diffinterface.extend import jax_enable_x64

        jax.enable_x64 = jax_enable_x64()


MODES = [None, "forward", "reverse"]  # the modes of the AD backends (contract section 2)
MODE_IDS = ["mode=None", "forward", "reverse"]


@pytest.fixture
def walk_visits(monkeypatch):
    """What the closure walker visits during the test (``Walker.visit`` recorded, by qualified name:
    nothing of the test is kept alive): empty where every function met was checked by its summary
    instead of walked (``clear()`` it to count from a later point)."""
    from diffinterface._closures import walk

    visited: list[str] = []
    real = walk.Walker.visit

    def recorded(self, obj, where):
        visited.append(getattr(obj, "__qualname__", type(obj).__name__))
        return real(self, obj, where)

    monkeypatch.setattr(walk.Walker, "visit", recorded)
    return visited


def first_calls_are_checked_not_walked(helper, walk_visits, check):
    """A stateless ``helper`` keeps its closure walk's summary, and a new lambda around it at each of
    three first calls (``check(lambda z: helper(z))``, which asserts the derivative) is checked by
    that summary, not walked (``walk_visits``: the fixture)."""
    from diffinterface._closures import summaries
    from diffinterface._closures.plan import StatePlan

    def make():
        return lambda z: helper(z)

    assert StatePlan(make()).empty and summaries.summary_of(helper) is not None
    walk_visits.clear()  # from here: checked, not walked
    for _ in range(3):
        check(make())
    assert walk_visits == []


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


# The AD engines the contract's tests are parametrised over: (config class name in diffinterface,
# engine module, extra). An engine joins every shared test by one line here.
AD_ENGINES = [
    ("AutoJAX", "jax", "jax"),
    ("AutoTorch", "torch", "torch"),
    ("AutoAutograd", "autograd", "autograd"),
    ("AutoMLX", "mlx", "mlx"),
    ("AutoPyTensor", "pytensor", "pytensor"),
    ("AutoTensorFlow", "tensorflow", "tensorflow"),
]


def engine_marks(module: str, extra: str) -> tuple:
    """A skip with the install line when ``module`` is missing, else nothing."""
    if installed(module):
        return ()
    return (pytest.mark.skip(reason=f'{module} is not installed: pip install "diffinterface[{extra}]"'),)


def ad_configs(modes=(None,)) -> list:
    """``(id, config)`` for every installed AD engine and mode (for lists that are not pytest parameters)."""
    import diffinterface as di

    return [
        (name if modes == (None,) else f"{name}-{mode}", getattr(di, name)(mode=mode))
        for name, module, _ in AD_ENGINES
        if installed(module)
        for mode in modes
    ]


def backend_params(modes=(None,), *, finite_diff: bool = False) -> list:
    """pytest parameters: every AD engine in each of ``modes`` (id ``AutoJAX``, or ``AutoJAX-forward``
    with several modes), skipped with the install line where missing; ``AutoFiniteDiff`` first if asked."""
    import diffinterface as di

    out = [pytest.param(di.AutoFiniteDiff(), id="AutoFiniteDiff")] if finite_diff else []
    for name, module, extra in AD_ENGINES:
        for mode in modes:
            ident = name if modes == (None,) else f"{name}-{mode}"
            out.append(pytest.param(getattr(di, name)(mode=mode), marks=engine_marks(module, extra), id=ident))
    return out


def covering(scenarios: list) -> list:
    """The scenarios that add an (operator, function) or an (operator, variant) pair not seen yet: a
    family's or a mode's run of the catalogue where what it adds (conversion in and out, the dtype
    kept) shows on each operator with each function kind and each closure or context variant once."""
    seen, out = set(), []
    for s in scenarios:
        operator, function, *variant = s.name.split("/")
        keys = {(operator, function), (operator, "/".join(variant))}
        if not keys <= seen:
            seen |= keys
            out.append(s)
    return out


def family_params(families=("numpy", "jax", "torch")) -> list:
    out = []
    for fam in families:
        marks = ()
        if fam != "numpy" and not installed(fam):
            marks = pytest.mark.skip(reason=f'{fam} is not installed: pip install "diffinterface[{fam}]"')
        out.append(pytest.param(fam, marks=marks, id=fam))
    return out


def family_dtype_params(pairs) -> list:
    """(family, dtype) parameters, each skipped with its install line when its library is missing."""
    import numpy as np

    out = []
    for fam, dtype in pairs:
        marks = (
            ()
            if fam == "numpy" or installed(fam)
            else pytest.mark.skip(reason=f'{fam} is not installed: pip install "diffinterface[{fam}]"')
        )
        out.append(pytest.param(fam, dtype, marks=marks, id=f"{fam}-{np.dtype(dtype)}"))
    return out


# -- counts of the outside catalogues, printed at the end of the run -----------------------------

CATALOGUE_COUNTS: dict = {}  # catalogue name -> collections.Counter of outcomes


def catalogue_count(catalogue: str, outcome: str) -> None:
    """Records one case of an outside catalogue (``outcome``: "agree", or why it is unsupported)."""
    from collections import Counter

    CATALOGUE_COUNTS.setdefault(catalogue, Counter())[outcome] += 1


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto`` (pyproject's addopts): one worker per core, at most 4 (each imports the engines)."""
    import os

    return max(1, min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1, 4))


def pytest_sessionfinish(session) -> None:
    """A worker of pytest-xdist hands its catalogue counts to the controller (``_WorkerCounts``)."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["catalogue_counts"] = {name: dict(counts) for name, counts in CATALOGUE_COUNTS.items()}


class _WorkerCounts:
    """On the controller of pytest-xdist: the counts of each worker, added up as it finishes."""

    def pytest_testnodedown(self, node, error) -> None:
        from collections import Counter

        for name, counts in getattr(node, "workeroutput", {}).get("catalogue_counts", {}).items():
            CATALOGUE_COUNTS.setdefault(name, Counter()).update(counts)


def pytest_configure(config) -> None:
    _name_jax_enable_x64()
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_WorkerCounts(), "diffinterface-worker-counts")


def pytest_terminal_summary(terminalreporter) -> None:
    for catalogue, counts in sorted(CATALOGUE_COUNTS.items()):
        terminalreporter.write_sep("-", f"{catalogue}: {sum(counts.values())} outcomes")
        for outcome, n in counts.most_common():
            terminalreporter.write_line(f"{n:7d}  {outcome}")
