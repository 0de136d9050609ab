"""diffinterface: one API for derivatives across automatic-differentiation engines.

``gradient(backend, f, x)`` and the other operators take a backend config (``AutoFiniteDiff()``,
``AutoJAX()``, ``AutoTorch()``, ``AutoAutograd()``) first; switching engines is a one-word change.
Importing this package imports no engine: an adapter is loaded the first time its backend is used.
"""

from ._closures.namespaces import declare_modules as declare_modules
from ._core.configs import AutoAutograd as AutoAutograd
from ._core.configs import AutoFiniteDiff as AutoFiniteDiff
from ._core.configs import AutoJAX as AutoJAX
from ._core.configs import AutoMLX as AutoMLX
from ._core.configs import AutoPyTensor as AutoPyTensor
from ._core.configs import AutoTensorFlow as AutoTensorFlow
from ._core.configs import AutoTorch as AutoTorch
from ._core.configs import Backend as Backend
from ._core.configs import SecondOrder as SecondOrder
from ._core.configs import check_available as check_available
from ._core.contexts import Cache as Cache
from ._core.contexts import Constant as Constant
from ._core.errors import BackendNotAvailableError as BackendNotAvailableError
from ._core.errors import EvaluationError as EvaluationError
from ._core.errors import LostDerivativeError as LostDerivativeError
from ._core.errors import PreparationMismatchError as PreparationMismatchError
from ._frontend.prep import Prep as Prep
from ._frontend.reuse import PrepCache as PrepCache
from ._frontend.reuse import prep_cache as prep_cache
from .first_order import (
    derivative,
    gradient,
    jacobian,
    prepare_derivative,
    prepare_gradient,
    prepare_jacobian,
    prepare_pullback,
    prepare_pushforward,
    pullback,
    pushforward,
    value_and_derivative,
    value_and_gradient,
    value_and_jacobian,
    value_and_pullback,
    value_and_pushforward,
)
from .rules.differentiate_with import DifferentiateWith as DifferentiateWith
from .second_order import (
    gradient_and_hvp,
    hessian,
    hvp,
    prepare_hessian,
    prepare_hvp,
    prepare_second_derivative,
    second_derivative,
    value_derivative_and_second_derivative,
    value_gradient_and_hessian,
)
from .sparse import AutoSparse as AutoSparse
from .sparse import JaxprSparsityDetector as JaxprSparsityDetector
from .sparse import KnownSparsity as KnownSparsity
from .sparse import LocalSparsityDetector as LocalSparsityDetector
from .sparse import TracerSparsityDetector as TracerSparsityDetector

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "AutoAutograd",
    "AutoMLX",
    "AutoFiniteDiff",
    "AutoJAX",
    "AutoPyTensor",
    "AutoTensorFlow",
    "AutoTorch",
    "SecondOrder",
    "AutoSparse",
    "JaxprSparsityDetector",
    "KnownSparsity",
    "LocalSparsityDetector",
    "TracerSparsityDetector",
    "check_available",
    "Cache",
    "Constant",
    "declare_modules",
    "DifferentiateWith",
    "BackendNotAvailableError",
    "EvaluationError",
    "LostDerivativeError",
    "PreparationMismatchError",
    "Prep",
    "PrepCache",
    "prep_cache",
    "derivative",
    "value_and_derivative",
    "prepare_derivative",
    "second_derivative",
    "value_derivative_and_second_derivative",
    "prepare_second_derivative",
    "gradient",
    "value_and_gradient",
    "prepare_gradient",
    "jacobian",
    "value_and_jacobian",
    "prepare_jacobian",
    "hessian",
    "value_gradient_and_hessian",
    "prepare_hessian",
    "pushforward",
    "value_and_pushforward",
    "prepare_pushforward",
    "pullback",
    "value_and_pullback",
    "prepare_pullback",
    "hvp",
    "gradient_and_hvp",
    "prepare_hvp",
]
