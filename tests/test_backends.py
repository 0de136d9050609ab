"""Backend configs (frozen, hashable, validated, terse repr) and lazy adapters (no engine imported)."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest

import diffinterface as di
from diffinterface.extend import registered_backends


def test_configs_are_frozen_hashable_values():
    assert di.AutoJAX() == di.AutoJAX() and hash(di.AutoJAX()) == hash(di.AutoJAX())
    assert di.AutoJAX(mode="forward") != di.AutoJAX()
    assert len({di.AutoFiniteDiff(), di.AutoFiniteDiff(), di.AutoTorch(), di.AutoAutograd()}) == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        di.AutoJAX().jit = False


def test_repr_shows_only_non_default_fields():
    assert repr(di.AutoJAX()) == "AutoJAX()"
    assert repr(di.AutoJAX(mode="reverse", jit=False)) == "AutoJAX(mode='reverse', jit=False)"
    assert (
        repr(di.AutoFiniteDiff(method="forward", rel_step=1e-6)) == "AutoFiniteDiff(method='forward', rel_step=1e-06)"
    )
    assert repr(di.AutoTorch(closure="const")) == "AutoTorch(closure='const')"
    assert (
        repr(di.SecondOrder(di.AutoFiniteDiff(), di.AutoJAX()))
        == "SecondOrder(outer=AutoFiniteDiff(), inner=AutoJAX())"
    )


@pytest.mark.parametrize(
    "make, match",
    [
        (
            lambda: di.AutoJAX(mode="backward"),
            r"AutoJAX\(mode='backward'\): mode must be one of None, 'forward', 'reverse'",
        ),
        (lambda: di.AutoTorch(compile="yes"), r"compile must be one of True, False"),
        (lambda: di.AutoAutograd(closure="copy"), r"closure must be one of 'duplicated', 'const'"),
        (
            lambda: di.AutoFiniteDiff(method="five-point"),
            r"method must be one of 'central', 'forward', 'backward', 'complex'",
        ),
        (lambda: di.AutoFiniteDiff(rel_step=-1.0), r"rel_step must be a positive float or None"),
    ],
)
def test_configs_validate_their_fields(make, match):
    with pytest.raises(ValueError, match=match):
        make()


_ENGINE_CONFIGS = [di.AutoJAX, di.AutoTorch, di.AutoAutograd, di.AutoMLX, di.AutoPyTensor, di.AutoTensorFlow]


@pytest.mark.parametrize("config", [*_ENGINE_CONFIGS, di.AutoFiniteDiff], ids=lambda c: c.__name__)
def test_every_config_validates_mode_closure_and_reuse_prep_alike(config):
    """The same validation, and the same messages, for every built-in config: ``mode`` (the engines'
    first field) checked first, the engine's own fields next, ``closure`` and ``reuse_prep`` (their last
    fields) after them; finite differences have no ``mode`` field (they always go forward)."""
    name = config.__name__
    fields = [f.name for f in dataclasses.fields(config)]
    assert fields[-2:] == ["closure", "reuse_prep"] or config is di.AutoFiniteDiff
    mode_error = f"{name}(mode='sideways'): mode must be one of None, 'forward', 'reverse'"
    closure_error = f"{name}(closure='copy'): closure must be one of 'duplicated', 'const'"
    if config is di.AutoFiniteDiff:
        assert "mode" not in fields and config.mode == "forward"
        with pytest.raises(TypeError, match="mode"):
            config(mode="forward")
    else:
        assert fields[0] == "mode" and config().mode is None
        assert [config(mode=m).mode for m in ("forward", "reverse")] == ["forward", "reverse"]
        assert config("reverse") == config(mode="reverse")  # positional: mode first, as before
        for bad in ("sideways", "backward", 1):
            with pytest.raises(ValueError, match=re.escape(f"{name}(mode={bad!r}): mode must be one of")):
                config(mode=bad)
        with pytest.raises(ValueError, match=re.escape(mode_error)):
            config(mode="sideways", closure="copy")  # mode before closure
        for option in (f.name for f in dataclasses.fields(config) if f.type == "bool" and f.name != "reuse_prep"):
            with pytest.raises(
                ValueError, match=re.escape(f"{name}({option}='no'): {option} must be one of True, False")
            ):
                config(closure="copy", **{option: "no"})  # the engine's own fields before closure
    assert config(closure="const").closure == "const" and config(reuse_prep=False).reuse_prep is False
    with pytest.raises(ValueError, match=re.escape(closure_error)):
        config(closure="copy")
    with pytest.raises(ValueError, match=re.escape(f"{name}(reuse_prep='yes'): reuse_prep must be one of True, False")):
        config(reuse_prep="yes")
    with pytest.raises(ValueError, match=re.escape(closure_error)):
        config(closure="copy", reuse_prep="yes")  # closure before reuse_prep


def test_the_engine_configs_are_every_registered_config_with_a_mode():
    """The list above is complete: every built-in config with a ``mode`` field is in it."""
    with_mode = {
        c
        for c in registered_backends().values()
        if c.__module__.startswith("diffinterface.") and "mode" in {f.name for f in dataclasses.fields(c)}
    }
    assert with_mode == set(_ENGINE_CONFIGS)


def test_second_order_takes_configs():
    with pytest.raises(TypeError, match=r"SecondOrder\(outer='jax'\): expected a backend config"):
        di.SecondOrder("jax", di.AutoJAX())


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def test_import_and_finite_differences_import_no_engine():
    out = _run(
        "import sys, numpy as np, diffinterface as di\n"
        "assert di.check_available(di.AutoFiniteDiff())\n"
        "di.check_available(di.AutoJAX()); di.check_available(di.AutoTorch()); di.check_available(di.AutoAutograd())\n"
        "g = di.gradient(di.AutoFiniteDiff(), lambda x: np.sum(x**2), np.arange(3.0))\n"
        "assert np.allclose(g, [0, 2, 4])\n"
        "print(sorted(m for m in ('jax', 'torch', 'autograd') if m in sys.modules))"
    )
    assert out == "[]"


def test_check_available_reports_a_missing_engine_without_importing(monkeypatch):
    import importlib.util

    from diffinterface._core import configs as _backends

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "jax" else real(name, *a))
    monkeypatch.setattr(_backends, "_adapters", {})  # as in a process that has not used AutoJAX yet
    assert di.check_available(di.AutoJAX()) is False
    assert di.check_available(di.SecondOrder(di.AutoFiniteDiff(), di.AutoJAX())) is False
    with pytest.raises(
        di.BackendNotAvailableError,
        match=r'gradient\(AutoJAX\(\), f, x\): AutoJAX needs jax, which is not installed; install it with: pip install "diffinterface\[jax\]"',
    ):
        di.gradient(di.AutoJAX(), sum, 1.0)
    with pytest.raises(ImportError):  # BackendNotAvailableError is an ImportError
        di.gradient(di.AutoJAX(), sum, 1.0)


def test_backends_package_is_installed_as_diffinterface_backends():
    import diffinterface.backends.finitediff as fd

    assert fd.Adapter.__module__ == "diffinterface.backends.finitediff"


_STATE_PROBE = r"""
import sys, warnings
import numpy as np

def state():
    out = {"filters": list(warnings.filters)}
    if "autograd" in sys.modules:
        from autograd.numpy.numpy_boxes import ArrayBox
        from autograd.tracer import Box
        out["ArrayBox"] = dict(vars(ArrayBox))
        out["boxes"] = dict(Box.type_mappings)  # the box autograd makes for each type
    return out


def same(before, after):  # the state as it was; the box registry may gain the adapter's own box class
    if "boxes" in after:
        added = {k: v for k, v in after["boxes"].items() if k not in before.get("boxes", {})}
        assert all(k is v and k.__module__ == "diffinterface.backends.autograd" for k, v in added.items()), added
        after = dict(after, boxes={k: v for k, v in after["boxes"].items() if k not in added})
    return after == before

engine = sys.argv[1]
__import__(engine)
if engine == "autograd":
    import autograd.numpy.numpy_boxes  # noqa: F401
before = state()
import diffinterface as di
import importlib
importlib.import_module("diffinterface.backends." + engine)
assert same(before, state()), ("import", engine)
backend = {"jax": di.AutoJAX(), "torch": di.AutoTorch(), "autograd": di.AutoAutograd()}[engine]
a = np.array([1.0, 2.0])

def f(x):
    from array_api_compat import array_namespace
    xp = array_namespace(x)
    return xp.sum(xp.asarray(a, dtype=x.dtype) * xp.sin(x))

g = di.gradient(backend, f, np.array([0.1, 0.2]))
assert np.allclose(np.asarray(g), a * np.cos([0.1, 0.2]))
assert same(before, state()), ("call", engine)
print("unchanged")
"""


@pytest.mark.parametrize("engine", ["jax", "torch", "autograd"])
def test_importing_and_using_an_adapter_changes_no_process_wide_state(engine):
    """Warning filters, autograd's ArrayBox and the box autograd makes for each type are the same
    before and after importing an adapter and after one call through it (torch's asarray warning is
    silenced around the call only; numpy's types are boxed in the adapter's ArrayBox subclass, which
    gives the array-API namespace, only while the adapter's traces run)."""
    import importlib.util

    if importlib.util.find_spec(engine) is None:
        pytest.skip(f'{engine} is not installed: pip install "diffinterface[{engine}]"')
    done = subprocess.run([sys.executable, "-c", _STATE_PROBE, engine], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "unchanged" in done.stdout, done.stderr[-3000:]
