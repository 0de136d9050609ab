"""AutoTensorFlow: the catalogue in every mode and family, stand-ins, lost derivatives, errors."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's oneDNN log lines, in this test process only

import numpy as np
import pytest

import diffinterface as di
from conftest import MODE_IDS, MODES, installed
from diffinterface.testing import default_scenarios, test_differentiation

pytestmark = pytest.mark.skipif(
    not installed("tensorflow"), reason='tensorflow is not installed: pip install "diffinterface[tensorflow]"'
)


def _failures(outcomes):
    return [f"{o.scenario}: {o.error}" for o in outcomes if not o.passed]


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_catalogue_float64_numpy(mode):
    outcomes = test_differentiation([di.AutoTensorFlow(mode=mode)], default_scenarios("numpy", np.float64))
    assert len(outcomes) > 300
