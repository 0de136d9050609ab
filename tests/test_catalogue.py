"""The scenario catalogue on AutoFiniteDiff: every method, on numpy, jax and torch inputs, float64 and float32."""

from __future__ import annotations

import numpy as np
import pytest

import diffinterface as di
from conftest import covering, family_params, installed
from diffinterface.testing import check_scenario, default_scenarios, test_differentiation

SECOND = ("second_derivative", "hvp", "hessian")
NUMPY_SCENARIOS = {
    np.float64: default_scenarios("numpy", np.float64),
    np.float32: default_scenarios("numpy", np.float32),
}


def _ids(scenarios):
    return [s.name for s in scenarios]


@pytest.mark.parametrize("method", ["central", "forward", "backward", "complex"])
@pytest.mark.parametrize("scenario", NUMPY_SCENARIOS[np.float64], ids=_ids(NUMPY_SCENARIOS[np.float64]))
def test_numpy_float64(scenario, method):
    check_scenario(di.AutoFiniteDiff(method=method), scenario)


@pytest.mark.parametrize("method", ["central", "forward", "complex"])
@pytest.mark.parametrize("scenario", NUMPY_SCENARIOS[np.float32], ids=_ids(NUMPY_SCENARIOS[np.float32]))
def test_numpy_float32(scenario, method):
    check_scenario(di.AutoFiniteDiff(method=method), scenario)


@pytest.mark.parametrize("family", family_params(("jax", "torch")))
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_other_families(family, dtype):
    # One test per family and dtype; the failures are listed together. On jax arrays, whose every
    # operation f runs eagerly is a dispatch of its own, the scenarios that cover each operator with each
    # function kind and variant (195 of 468: the whole catalogue took 54 s in float64 and 33 s in
    # float32 of the suite on 2 cores, 2026-12-07); on torch tensors all of them (7 s)
    scenarios = default_scenarios(family, dtype)
    if family == "jax":
        scenarios = covering(scenarios)
    outcomes = test_differentiation([di.AutoFiniteDiff()], scenarios)
    assert len(outcomes) == len(scenarios) > 150


@pytest.mark.skipif(not installed("torch"), reason='torch is not installed: pip install "diffinterface[torch]"')
def test_torch_complex_step():
    # torch computes complex powers of negative numbers in polar form, about 1e-9 relative, so the
    # complex step is as exact as torch's complex arithmetic, not to 1e-10 as on numpy.
    for scenario in default_scenarios("torch", np.float64):
        tol = None if scenario.operator in SECOND else 1e-8
        check_scenario(di.AutoFiniteDiff(method="complex"), scenario, tol=tol)


def test_catalogue_covers_the_reference_functions_and_variants():
    names = _ids(NUMPY_SCENARIOS[np.float64])
    for fn in (
        "num_to_num",
        "num_to_vec",
        "num_to_mat",
        "vec_to_num",
        "mat_to_num",
        "vec_to_vec",
        "vec_to_mat",
        "mat_to_vec",
        "mat_to_mat",
        "diff_square",
        "diff_cube",
        "sum_diff_cube",
        "banded_times_square",
        "quadratic_form",
        "closure_accumulate",
        "rule_opaque_active_const",
        "rule_opaque_const_active",
        "rule_opaque_both_active",
        "rule_array_api_active_const",
        "rule_array_api_const_active",
        "rule_array_api_both_active",
        "rule_opaque_sum",
    ):
        assert any(f"/{fn}" in n for n in names), fn
    for variant in ("batched", "constant", "cache", "closure", "in_place"):
        assert any(n.endswith(f"/{variant}") for n in names), variant
    assert {s.operator for s in NUMPY_SCENARIOS[np.float64]} == {
        "pushforward",
        "pullback",
        "derivative",
        "gradient",
        "jacobian",
        "second_derivative",
        "hvp",
        "hessian",
    }


def test_harness_catches_a_wrong_derivative():
    # The harness must fail when a backend is wrong: a scenario whose reference is off by 1%.
    import dataclasses

    s = next(s for s in NUMPY_SCENARIOS[np.float64] if s.name == "gradient/vec_to_num")
    wrong = dataclasses.replace(s, first=s.first * 1.01)
    with pytest.raises(AssertionError, match="gradient .* max error"):
        check_scenario(di.AutoFiniteDiff(), wrong)


def test_harness_catches_a_modified_input():
    import dataclasses

    s = next(s for s in NUMPY_SCENARIOS[np.float64] if s.name == "gradient/vec_to_num")

    xs = s.x.copy()

    def mutating(x):  # writes into the scenario's own x, captured: the library now copies f's input
        xs[0] += 1e-3
        return s.f(x)

    with pytest.raises(AssertionError, match="x was modified"):  # const: captured state used as it is
        check_scenario(di.AutoFiniteDiff(closure="const"), dataclasses.replace(s, f=mutating, x=xs))
