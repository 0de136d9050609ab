"""The test harness: a public catalogue of scenarios with analytic answers, run on any backend."""

from ._benchmark import benchmark_differentiation as benchmark_differentiation
from ._harness import Outcome as Outcome
from ._harness import check_scenario as check_scenario
from ._harness import default_tolerance as default_tolerance
from ._harness import test_differentiation as test_differentiation
from ._scenarios import Scenario as Scenario
from ._scenarios import available_families as available_families
from ._scenarios import default_scenarios as default_scenarios

__all__ = [
    "Scenario",
    "default_scenarios",
    "available_families",
    "test_differentiation",
    "check_scenario",
    "default_tolerance",
    "Outcome",
    "benchmark_differentiation",
]
