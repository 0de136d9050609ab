"""A backend added from outside, through diffinterface.extend only: the documented example.

``AutoCentral`` and ``CentralAdapter`` below are all a package writes to add a backend: a config
naming its adapter by dotted path, and an adapter with one core operator (a pushforward by central
differences along each tangent). Nothing in diffinterface knows them; the whole catalogue passes.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from typing import Any, ClassVar

import numpy as np
import pytest
from array_api_compat import array_namespace

import diffinterface as di
from diffinterface import extend
from diffinterface.testing import default_scenarios, test_differentiation


@dataclasses.dataclass(frozen=True, repr=False)
class AutoCentral(extend.BackendConfig):
    """Central differences along each tangent, written outside the package."""

    closure: str = "duplicated"
    name: ClassVar[str] = "central-example"
    engine: ClassVar[str | None] = None  # numpy only
    adapter: ClassVar[str] = f"{__name__}:CentralAdapter"
    bench: ClassVar[str | None] = f"{__name__}:CentralBench"  # what the benchmarks compare it with

    def tolerance(self, dtype: Any, second_order: bool) -> float:
        single = np.dtype(dtype) == np.float32
        return (3e-2 if second_order else 1e-2) if single else (2e-4 if second_order else 1e-6)


class CentralAdapter(extend.Adapter):
    """The one core operator; jacobians, gradients, pullbacks and the second order are derived."""

    def value_and_pushforward(self, data: Any, target: Any, x: Any, tangents: tuple, contexts: tuple) -> tuple:
        xp = array_namespace(x)
        finfo = np.finfo(np.dtype(str(x.dtype)) if not hasattr(x.dtype, "kind") else x.dtype)
        scale = max(1.0, float(xp.max(xp.abs(x)))) if x.ndim else max(1.0, abs(float(x)))
        out = []
        for t in tangents:
            size = float(xp.max(xp.abs(t))) if t.ndim else abs(float(t))
            h = float(finfo.eps) ** (1 / 3) * scale / max(1.0, size)
            up = self.evaluate(target, x + h * t, contexts)
            down = self.evaluate(target, x - h * t, contexts)
            out.append((up - down) / (2 * h))
        return self.evaluate(target, x, contexts), tuple(out)


class CentralBench(extend.BenchEngine):
    """The backend's bench record: a central difference along ``t`` written by hand."""

    limits = {"pushforward": 1_000}

    def native(self, operator, f, x, t, A):
        if operator != "pushforward":
            return None
        h = float(np.finfo(x.dtype).eps) ** (1 / 3) * max(1.0, float(np.max(np.abs(x))))
        return lambda: (f(x + h * t) - f(x - h * t)) / (2 * h)


extend.register_backend(AutoCentral)
SCENARIOS = default_scenarios()


def test_an_outside_backend_passes_the_whole_catalogue():
    outcomes = test_differentiation([AutoCentral()], SCENARIOS)
    assert len(outcomes) == len(SCENARIOS) > 300 and all(o.passed for o in outcomes)
    assert extend.registered_backends()["central-example"] is AutoCentral


def test_an_outside_backend_is_a_backend_like_the_others():
    x = np.array([0.3, -1.2, 2.0])
    g = di.gradient(AutoCentral(), lambda z: np.sum(np.sin(z) * z), x)
    assert np.allclose(g, np.cos(x) * x + np.sin(x), rtol=1e-8)
    h = di.hessian(di.SecondOrder(di.AutoFiniteDiff(), AutoCentral()), lambda z: np.sum(z**3), x)
    assert np.allclose(h, np.diag(6 * x), atol=1e-4)
    assert repr(AutoCentral()) == "AutoCentral()"


class OneShotCentral(CentralAdapter):
    """``CentralAdapter`` computing a one-shot pushforward whole (``oneshot_result``) from the
    ``f(x)`` its ``output_info`` kept, and counting the runners it prepares."""

    prepared: ClassVar[list[str]] = []

    def oneshot_result(self, operator, target, x, tangents, contexts, info):
        if operator is not extend.PUSHFORWARD:
            return None
        y = info.take_value()  # f(x), kept by the default output_info of a one-shot call
        out = []
        for t in tangents:
            h = float(np.finfo(x.dtype).eps) ** 0.5 * max(1.0, float(np.max(np.abs(x))))  # forward differences
            out.append((self.evaluate(target, x + h * t, contexts) - y) / h)
        return tuple(out)

    def prepare(self, operator, target, x, tangents, contexts, info):
        type(self).prepared.append(operator.name)
        return super().prepare(operator, target, x, tangents, contexts, info)


@dataclasses.dataclass(frozen=True, repr=False)
class AutoOneShot(AutoCentral):
    name: ClassVar[str] = "oneshot-example"
    adapter: ClassVar[str] = f"{__name__}:OneShotCentral"
    bench: ClassVar[str | None] = None


def test_an_adapter_may_compute_a_one_shot_calls_result_whole_without_runners():
    """``Adapter.oneshot_result``: a call without prep= that reuses nothing asks the adapter for its
    plain result from what output_info made, and prepares no runners where it gets one; the value
    form, a call with prep=, a structured x and an operator it leaves (None) prepare runners."""
    x, t = np.array([0.3, -1.2, 2.0]), np.array([1.0, 0.5, -2.0])

    def f(z):
        return np.sin(z) * z

    want = (np.cos(x) * x + np.sin(x)) * t
    backend, prepared = AutoOneShot(), OneShotCentral.prepared
    prepared.clear()
    for _ in range(3):  # a new function at each call: nothing reused
        dy = di.pushforward(backend, lambda z: f(z), x, t)  # forward differences: oneshot_result's
        np.testing.assert_allclose(dy, want, rtol=1e-5)
        (dy,) = di.pushforward(backend, lambda z: f(z), x, (t,))
        np.testing.assert_allclose(dy, want, rtol=1e-5)
    assert prepared == []
    y, dy = di.value_and_pushforward(backend, lambda z: f(z), x, t)
    np.testing.assert_allclose(dy, want, rtol=1e-8)  # central differences: the runner's
    grad = di.gradient(backend, lambda z: np.sum(f(z)), x)
    np.testing.assert_allclose(grad, np.cos(x) * x + np.sin(x), rtol=1e-8)
    prep = di.prepare_pushforward(backend, f, x, t)
    np.testing.assert_allclose(di.pushforward(backend, f, x, t, prep=prep), want, rtol=1e-8)
    structured = di.pushforward(backend, lambda d: {"y": f(d["a"])}, {"a": x}, {"a": t})
    np.testing.assert_allclose(structured["y"], want, rtol=1e-8)
    assert prepared == ["pushforward", "gradient", "pushforward", "pushforward"]


class FastCentral(CentralAdapter):
    """``CentralAdapter`` offering a fast runner (``extend.Runners.fast``) that records how it is
    called and declines (``extend.Unserved``) while ``decline`` is set."""

    calls: ClassVar[list[tuple[str, type]]] = []
    decline: ClassVar[bool] = False

    def prepare(self, operator, target, x, tangents, contexts, info):
        runners = super().prepare(operator, target, x, tangents, contexts, info)
        plain, calls, cls = runners.plain, type(self).calls, type(self)

        if operator.tangent is not None:  # one bare tangent in, its one result out

            def fast(x, t):
                calls.append((operator.name, type(t)))
                if cls.decline:
                    raise extend.Unserved("declined")
                (result,) = plain(x, (t,), ())
                return result
        else:  # the plain runner's signature

            def fast(x, tangents, contexts):
                calls.append((operator.name, type(tangents)))
                if cls.decline:
                    raise extend.Unserved("declined")
                return plain(x, tangents, contexts)

        return extend.Runners(plain, runners.value, runners.data, fast)


@dataclasses.dataclass(frozen=True, repr=False)
class AutoFast(AutoCentral):
    name: ClassVar[str] = "fast-example"
    adapter: ClassVar[str] = f"{__name__}:FastCentral"
    bench: ClassVar[str | None] = None


def test_an_adapters_fast_runner_serves_the_prepared_path_and_its_plain_one_takes_over_where_it_declines():
    """``extend.Runners.fast``: the prepared fast path (prep=, and a loop's kept prep) calls it in the
    plain runner's place; for an operator with a tangent, as ``fast(x, t)`` with one bare tangent (a
    tuple of tangents takes the plain runner). Where it raises ``extend.Unserved``, the plain runner
    serves that call and the later ones. Every result right."""
    x, t = np.array([0.3, -1.2, 2.0]), np.array([1.0, 0.5, -2.0])

    def f(z):
        return np.sin(z) * z

    def g(z):
        return np.sum(np.sin(z) * z)

    want_push, want_grad = (np.cos(x) * x + np.sin(x)) * t, np.cos(x) * x + np.sin(x)
    backend, calls = AutoFast(), FastCentral.calls
    FastCentral.decline = False
    calls.clear()
    push, grad = di.prepare_pushforward(backend, f, x, t), di.prepare_gradient(backend, g, x)
    np.testing.assert_allclose(di.pushforward(backend, f, x, t, prep=push), want_push, rtol=1e-8)
    np.testing.assert_allclose(di.gradient(backend, g, x, prep=grad), want_grad, rtol=1e-8)
    assert calls == [("pushforward", np.ndarray), ("gradient", tuple)]
    (dy,) = di.pushforward(backend, f, x, (t,), prep=di.prepare_pushforward(backend, f, x, (t,)))
    np.testing.assert_allclose(dy, want_push, rtol=1e-8)
    assert len(calls) == 2  # a tuple of tangents: the plain runner
    for _ in range(4):  # a loop without prep=: its kept prep's fast runner from the third call on
        np.testing.assert_allclose(di.pushforward(backend, f, x, t), want_push, rtol=1e-8)
    assert calls[2:] == [("pushforward", np.ndarray)] * 2
    FastCentral.decline = True
    for _ in range(2):
        np.testing.assert_allclose(di.pushforward(backend, f, x, t, prep=push), want_push, rtol=1e-8)
        np.testing.assert_allclose(di.gradient(backend, g, x, prep=grad), want_grad, rtol=1e-8)
    assert calls[4:] == [("pushforward", np.ndarray), ("gradient", tuple)]  # declined once each
    assert push.one is None and grad.plain is grad.data.plain
    FastCentral.decline = False


def test_an_outside_backend_is_benchmarked_through_its_bench_record(tmp_path):
    from diffinterface import bench

    assert "central-example" in bench.installed_engines()
    done = bench.run(
        ["central-example"],
        full=True,
        out=str(tmp_path),
        tables=["overhead"],
        plots=False,
        timing=bench.Timing(rounds=1, seconds=0.001, warmup=0.0, prep_repeat=1),
    )
    rows = done["results"]["overhead"]
    assert [(r["backend"], r["operator"], r["size"]) for r in rows] == [
        ("AutoCentral()", "pushforward", 10),
        ("AutoCentral()", "pushforward", 1_000),
    ]
    assert all(0 < r["prepared_ratio"] < 100 for r in rows)


def test_a_wrong_adapter_path_and_a_taken_name_are_errors_that_say_so():
    @dataclasses.dataclass(frozen=True, repr=False)
    class Broken(extend.BackendConfig):
        closure: str = "duplicated"
        name: ClassVar[str] = "broken-example"
        adapter: ClassVar[str] = f"{__name__}:NoSuchAdapter"

    with pytest.raises(
        di.BackendNotAvailableError, match=r"gradient\(Broken\(\), f, x\): .*has no class NoSuchAdapter"
    ):
        di.gradient(Broken(), lambda z: np.sum(z), np.ones(2))

    @dataclasses.dataclass(frozen=True, repr=False)
    class Taken(extend.BackendConfig):
        closure: str = "duplicated"
        name: ClassVar[str] = "jax"
        adapter: ClassVar[str] = f"{__name__}:CentralAdapter"

    with pytest.raises(ValueError, match="the name 'jax' is taken by diffinterface._core.configs.AutoJAX"):
        extend.register_backend(Taken)


def test_a_package_adds_a_backend_through_an_entry_point(tmp_path):
    """A distribution that declares ``[diffinterface.backends] central = module:Config`` is found by
    ``python -m diffinterface check`` in a fresh process, which imports nothing of it beforehand."""
    package = tmp_path / "site"
    package.mkdir()
    (package / "outside_backend.py").write_text(
        textwrap.dedent("""
        import dataclasses
        from typing import ClassVar

        import numpy as np

        from diffinterface import extend


        @dataclasses.dataclass(frozen=True, repr=False)
        class AutoOutside(extend.BackendConfig):
            closure: str = "duplicated"
            name: ClassVar[str] = "outside"
            adapter: ClassVar[str] = "outside_backend:OutsideAdapter"

            def tolerance(self, dtype, second_order):
                return 2e-4 if second_order else 1e-6


        class OutsideAdapter(extend.Adapter):
            def value_and_pushforward(self, data, target, x, tangents, contexts):
                h = 1e-5 * max(1.0, float(np.max(np.abs(x))))
                out = tuple((self.evaluate(target, x + h * t, contexts) - self.evaluate(target, x - h * t, contexts)) / (2 * h)
                            for t in tangents)
                return self.evaluate(target, x, contexts), out
    """)
    )
    info = package / "outside_backend-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: outside-backend\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[diffinterface.backends]\noutside = outside_backend:AutoOutside\n")
    env = {"PYTHONPATH": str(package)}
    import os

    done = subprocess.run(
        [sys.executable, "-m", "diffinterface", "check", "--backend", "outside", "--family", "numpy"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "AutoOutside()" in done.stdout and "FAIL" not in done.stdout


class Tagged:
    """An outside engine's traced value (a stand-in for one)."""

    def __init__(self, value: float) -> None:
        self.value = value


CALLS: list = []


def call(rule: Any, args: tuple, kwargs: dict) -> Any:
    """This module as the outside engine's rule registrar: record the call, run the forward rule."""
    CALLS.append(rule.__name__)
    (x,) = args
    y, dy = rule.forward(1.0, x.value)
    return Tagged(y + dy)


def test_an_outside_engine_registers_rules_through_the_extension_surface():
    from diffinterface.rules import custom_rule

    @custom_rule
    def cube(x):
        return x**3

    @cube.def_forward
    def _(dx, x):
        return x**3, 3 * x**2 * dx

    extend.register_rules(f"{__name__}.Tagged", __name__)
    assert cube(2.0) == 8.0 and not CALLS  # plain numbers: the primal
    assert cube(Tagged(2.0)).value == 8.0 + 12.0 and CALLS == ["cube"]
    with pytest.raises(ValueError, match="expected 'module.Type'"):
        extend.register_rules("Tagged", __name__)


def test_an_outside_familys_stateful_callables_are_walked_like_user_objects(tmp_path, monkeypatch):
    """``ArrayFamily(module_type=..., children=...)``: a library's stateful callable (torch's
    ``nn.Module`` is declared this way) gets its attributes and children duplicated per call, though
    its class lives in a library namespace the walker does not enter."""
    (tmp_path / "layerlib.py").write_text(
        textwrap.dedent("""
        import numpy as np

        class Array:  # the library's array type (never met here)
            pass

        class Layer:
            def __init__(self, scale, child=None):
                self.scale, self.cache = scale, np.zeros(1)
                self._children = {"inner": child} if child is not None else {}

            def __call__(self, x):
                self.cache[0] = self.scale  # a write into the layer's own buffer
                self.cache[0] += x[0]
                out = self.cache[0] ** 2
                for child in self._children.values():
                    out = out + child(x)
                return out
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import layerlib

    from diffinterface._closures import namespaces as _closure
    from diffinterface._core import arrays as _arrays

    di.declare_modules("layerlib", walk=False)  # a library: its functions and objects are not entered
    try:
        inner = layerlib.Layer(2.0)
        model = layerlib.Layer(1.0, inner)

        def f(x):
            return model(x)

        x = np.array([0.5])
        expected = 2 * (1.0 + 0.5) + 2 * (2.0 + 0.5)  # d/dx (1 + x)^2 + (2 + x)^2

        di.gradient(di.AutoFiniteDiff(), f, x)  # not declared: the layer's caches are written
        assert model.cache[0] != 0.0 and inner.cache[0] != 0.0
        model.cache[0] = inner.cache[0] = 0.0

        extend.register_family(
            extend.ArrayFamily(
                "layerlib",
                "layerlib.Array",
                np.asarray,
                lambda a, like=None: a,
                module_type="layerlib.Layer",
                children="_children",
            )
        )
        backends = [di.AutoFiniteDiff(), *(b for b in (di.AutoJAX(), di.AutoAutograd()) if di.check_available(b))]
        for backend in backends:
            grad = di.gradient(backend, f, x)
            assert np.allclose(np.asarray(grad), [expected], rtol=1e-6), backend
            assert model.cache[0] == 0.0 and inner.cache[0] == 0.0, backend  # the user's layers untouched
    finally:
        _arrays._FAMILIES.pop("layerlib", None)
        _arrays._FAMILY_OF_TYPE.clear()
        _arrays._STATEFUL_OF_TYPE.clear()
        _closure.undeclare_modules("layerlib")
    with pytest.raises(ValueError, match="module_type='Layer'"):
        extend.ArrayFamily("bad", "layerlib.Array", np.asarray, np.asarray, module_type="Layer")


def test_a_familys_constants_let_the_closure_walk_check_a_helper_that_reads_them(tmp_path, monkeypatch, walk_visits):
    """``ArrayFamily(constant_types=...)``: a library constant that takes no weak reference (torch's
    dtypes and devices) is held by the summary of a stateless helper that reads it, so that a new
    lambda around the helper is checked, not walked; undeclared, the helper has no summary (walked at
    every first call); another constant in the slot is walked again, and its derivative is right."""
    (tmp_path / "constlib.py").write_text(
        textwrap.dedent("""
        class Array:  # the library's array type (never met here)
            pass

        class Scale:  # a constant of the library: no __weakref__ slot, like torch.dtype
            __slots__ = ("factor",)

            def __init__(self, factor):
                self.factor = factor

        TWO, THREE = Scale(2.0), Scale(3.0)
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import constlib

    from diffinterface._closures import namespaces as _closure
    from diffinterface._closures import summaries
    from diffinterface._closures.plan import StatePlan
    from diffinterface._core import arrays as _arrays

    scale = constlib.TWO

    def helper(z):
        return scale.factor * np.sum(z**2)

    def make(h):
        return lambda z: h(z)

    di.declare_modules("constlib", walk=False)
    try:
        assert StatePlan(make(helper)).empty and summaries.summary_of(helper) is None  # not declared: no summary
        extend.register_family(
            extend.ArrayFamily(
                "constlib", "constlib.Array", np.asarray, lambda a, like=None: a, constant_types=("constlib.Scale",)
            )
        )
        assert StatePlan(make(helper)).empty and summaries.summary_of(helper) is not None
        walk_visits.clear()  # from here: checked, not walked
        for _ in range(3):
            assert StatePlan(make(helper)).empty  # a new lambda around the helper: checked, not walked
        assert walk_visits == []
        x = np.array([1.0, -2.0])
        np.testing.assert_allclose(di.gradient(di.AutoFiniteDiff(), make(helper), x), 4 * x, rtol=1e-7)
        scale = constlib.THREE  # another constant in the helper's cell: its summary does not hold
        assert StatePlan(make(helper)).empty and walk_visits
        np.testing.assert_allclose(di.gradient(di.AutoFiniteDiff(), make(helper), x), 6 * x, rtol=1e-7)
    finally:
        _arrays._FAMILIES.pop("constlib", None)
        _arrays._FAMILY_OF_TYPE.clear()
        _arrays._STATEFUL_OF_TYPE.clear()
        _arrays.FAMILIES_GENERATION += 1
        _closure.undeclare_modules("constlib")
    with pytest.raises(ValueError, match="constant_types='Scale'"):
        extend.ArrayFamily("bad", "constlib.Array", np.asarray, np.asarray, constant_types=("Scale",))
    with pytest.raises(TypeError, match=r"expected a tuple of 'module.Type' strings, such as \('constlib.Scale',\)"):
        extend.ArrayFamily("bad", "constlib.Array", np.asarray, np.asarray, constant_types="constlib.Scale")
