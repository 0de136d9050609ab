"""A reference function of the catalogue: closed-form value and derivatives."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class Reference:
    """A function with closed-form value, Jacobian (flat: ``(y.size, x.size)``) and Hessian."""

    name: str
    f: Callable[..., Any]
    x: Any
    value: Callable[..., Any]
    jac: Callable[..., Any]
    hess: Callable[..., Any] | None = None  # (x.size, x.size), scalar outputs only
    der2: Callable[..., Any] | None = None  # d2f/dx2 shaped like f(x), scalar inputs only
