"""Shared parametrisation: array families, skipped with a reason (and the install line) when missing."""

from __future__ import annotations

import importlib.util

import pytest

MODES = [None, "forward", "reverse"]  # the modes of the AD backends (SPEC section 2)
MODE_IDS = ["mode=None", "forward", "reverse"]


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def family_params(families=("numpy", "jax", "torch")) -> list:
    out = []
    for fam in families:
        marks = ()
        if fam != "numpy" and not installed(fam):
            marks = pytest.mark.skip(reason=f"{fam} is not installed: pip install \"diffinterface[{fam}]\"")
        out.append(pytest.param(fam, marks=marks, id=fam))
    return out


def family_dtype_params(pairs) -> list:
    """(family, dtype) parameters, each skipped with its install line when its library is missing."""
    import numpy as np

    out = []
    for fam, dtype in pairs:
        marks = () if fam == "numpy" or installed(fam) else pytest.mark.skip(reason=f'{fam} is not installed: pip install "diffinterface[{fam}]"')
        out.append(pytest.param(fam, dtype, marks=marks, id=f"{fam}-{np.dtype(dtype)}"))
    return out
