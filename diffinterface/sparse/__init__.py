"""Sparse Jacobians and Hessians (issue 16): sparsity detection, coloring, compressed evaluation.

``AutoSparse(dense, sparsity_detector=..., coloring=...)`` is a backend config like the others;
``jacobian``, ``hessian`` and their ``value_`` and ``prepare_`` forms return sparse matrices with it.
See :mod:`._config` for the contract, :mod:`._detectors`, :mod:`._coloring` and :mod:`._adapter`.
"""

from ._coloring import GreedyColoring as GreedyColoring
from ._config import AutoSparse as AutoSparse
from ._detectors import KnownSparsity as KnownSparsity
from ._detectors import LocalSparsityDetector as LocalSparsityDetector
from ._detectors import LocalSparsityWarning as LocalSparsityWarning
from ._detectors import Problem as Problem
from ._detectors import TracerSparsityDetector as TracerSparsityDetector
from ._jaxpr import JaxprSparsityDetector as JaxprSparsityDetector
from ._tracer import TracerError as TracerError

__all__ = [
    "AutoSparse",
    "GreedyColoring",
    "JaxprSparsityDetector",
    "KnownSparsity",
    "LocalSparsityDetector",
    "LocalSparsityWarning",
    "Problem",
    "TracerError",
    "TracerSparsityDetector",
]
