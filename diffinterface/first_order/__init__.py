"""First-order operators: pushforward (JVP), pullback (VJP), derivative, gradient, jacobian."""

from .derivative import derivative, prepare_derivative, value_and_derivative
from .gradient import gradient, prepare_gradient, value_and_gradient
from .jacobian import jacobian, prepare_jacobian, value_and_jacobian
from .pullback import prepare_pullback, pullback, value_and_pullback
from .pushforward import prepare_pushforward, pushforward, value_and_pushforward

__all__ = [
    "derivative",
    "prepare_derivative",
    "value_and_derivative",
    "gradient",
    "prepare_gradient",
    "value_and_gradient",
    "jacobian",
    "prepare_jacobian",
    "value_and_jacobian",
    "prepare_pullback",
    "pullback",
    "value_and_pullback",
    "prepare_pushforward",
    "pushforward",
    "value_and_pushforward",
]
