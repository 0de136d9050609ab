"""Second-order operators: second derivative, Hessian-vector product, Hessian."""

from .hessian import hessian, prepare_hessian, value_gradient_and_hessian
from .hvp import gradient_and_hvp, hvp, prepare_hvp
from .second_derivative import prepare_second_derivative, second_derivative, value_derivative_and_second_derivative

__all__ = [
    "hessian",
    "prepare_hessian",
    "value_gradient_and_hessian",
    "gradient_and_hvp",
    "hvp",
    "prepare_hvp",
    "prepare_second_derivative",
    "second_derivative",
    "value_derivative_and_second_derivative",
]
