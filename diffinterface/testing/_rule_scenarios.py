"""Scenarios through custom rules (:mod:`diffinterface.rules`), for every backend's catalogue run.

Two rules, written once:

- ``cumsum_weighted(a, b) = cumsum(a * b**2)``, opaque: its bodies are NumPy code the engines
  cannot trace (as SciPy or compiled code would be), with a forward rule and a reverse pass that
  returns nothing for a ``Const`` argument and needs no tape (no augmented primal);
- ``sin_product(a, b) = a * sin(b)``, not opaque: its bodies are array-API code that runs on each
  engine's own arrays.

Each is called with its arguments active and constant in turn (``f(x) = rule(x, B)``,
``rule(A, x)``, ``rule(x, x)``), B and A captured arrays; one scenario reduces to a scalar for
``gradient``. The references are closed forms: ``cumsum`` is the lower-triangular matrix of ones
``L``, so the Jacobian of ``cumsum(a * b**2)`` is ``L diag(b**2)`` in ``a`` and ``L diag(2 a b)``
in ``b``. The catalogue holds these scenarios for the first-order operators only: second
derivatives through a rule raise ``SecondOrderError`` on the AD engines (``tests/test_rules_native.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from array_api_compat import array_namespace

from .._closures.namespaces import declare_modules
from ..rules import Active, Duplicated, custom_rule
from ._reference import Reference

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._core.types import Array, NumericArray
    from ..rules import Const, Rule

    # a closed form of the references: (a, b) -> value or Jacobian block, on NumPy arrays
    Form = Callable[[np.ndarray, np.ndarray], np.ndarray]

declare_modules(__name__, walk=True)


@custom_rule(opaque=True)
def cumsum_weighted(a: np.ndarray, b: np.ndarray) -> Any:
    """``cumsum(a * b**2)`` on NumPy arrays (opaque to the engines)."""
    return np.cumsum(a * b**2)


@cumsum_weighted.def_forward
def _cumsum_weighted_forward(a: Const | Duplicated, b: Const | Duplicated) -> tuple[Any, Any]:
    y = np.cumsum(a.val * b.val**2)
    dy = np.zeros_like(y)
    if isinstance(a, Duplicated):
        dy = dy + np.cumsum(a.dval * b.val**2)
    if isinstance(b, Duplicated):
        dy = dy + np.cumsum(2 * a.val * b.val * b.dval)
    return y, dy


@cumsum_weighted.def_reverse  # no augmented primal: the reverse pass needs the arguments only
def _cumsum_weighted_reverse(tape: None, dy: np.ndarray, a: Const | Active, b: Const | Active) -> tuple[Any, Any]:
    av, bv = a.val, b.val  # tape is None
    back = np.cumsum(np.asarray(dy)[::-1])[::-1]  # the transpose of cumsum
    da = back * bv**2 if isinstance(a, Active) else None
    db = back * 2 * av * bv if isinstance(b, Active) else None
    return da, db


@custom_rule
def sin_product(a: NumericArray, b: NumericArray) -> Any:
    """``a * sin(b)`` in the array API (not opaque: runs on each engine's arrays)."""
    return a * array_namespace(a, b).sin(b)


@sin_product.def_forward
def _sin_product_forward(a: Const | Duplicated, b: Const | Duplicated) -> tuple[Any, Any]:
    xp = array_namespace(a.val, b.val)
    y = a.val * xp.sin(b.val)
    dy = None
    if isinstance(a, Duplicated):
        dy = a.dval * xp.sin(b.val)
    if isinstance(b, Duplicated):
        db = a.val * xp.cos(b.val) * b.dval
        dy = db if dy is None else dy + db
    return y, dy


@sin_product.def_augmented_primal
def _sin_product_augmented(a: Const | Active, b: Const | Active) -> tuple[Any, Any]:
    xp = array_namespace(a.val, b.val)
    return a.val * xp.sin(b.val), (a.val, b.val)


@sin_product.def_reverse
def _sin_product_reverse(
    tape: tuple[NumericArray, NumericArray], dy: NumericArray, a: Const | Active, b: Const | Active
) -> tuple[Any, Any]:
    av, bv = tape
    xp = array_namespace(av, bv)
    da = dy * xp.sin(bv) if isinstance(a, Active) else None
    db = dy * av * xp.cos(bv) if isinstance(b, Active) else None
    return da, db


# -- the functions of the scenarios: the captured arrays are NumPy for the opaque rule (as a SciPy
# matrix would be) and converted to x's family for the array-API rule --------------------------------


class _Captured:
    """A function of x calling ``rule`` with x and a captured array in the places ``where`` says."""

    def __init__(self, rule: Rule, where: str, captured: np.ndarray, name: str) -> None:
        self.rule, self.where, self.captured, self.__name__ = rule, where, captured, name

    def __call__(self, x: Array) -> Any:
        # in x's family and dtype (the closure policy may hand f the captured array as the engine's)
        c = array_namespace(x).asarray(self.captured, dtype=x.dtype)
        if self.where == "x,c":
            return self.rule(x, c)
        if self.where == "c,x":
            return self.rule(c, x)
        return self.rule(x, x)


class _Weighted:
    """``sum(w * cumsum_weighted(x, B))``: a scalar output, for gradient."""

    __name__ = "rule_opaque_sum"

    def __init__(self, w: np.ndarray, b: np.ndarray) -> None:
        self.w, self.b = w, b

    def __call__(self, x: Array) -> Any:
        xp = array_namespace(x)
        y = cumsum_weighted(x, xp.asarray(self.b, dtype=x.dtype))
        return xp.sum(y * xp.asarray(self.w, dtype=x.dtype))


def rule_references() -> list[Reference]:
    """The rule scenarios' reference functions."""
    x = np.array([0.6, 1.1, -0.4, 0.9, 1.3])
    A = np.array([1.5, -0.5, 2.0, 0.7, -1.2])
    B = np.array([0.8, -1.3, 0.4, 1.1, 0.6])
    W = np.array([0.3, -0.7, 1.1, 0.5, -0.2])
    L = np.tril(np.ones((x.size, x.size)))

    def refs_for(rule: Rule, name: str, value: Form, jac_a: Form, jac_b: Form) -> list[Reference]:
        return [
            Reference(f"{name}_active_const", _Captured(rule, "x,c", B, name), x, lambda z: value(z, B),
                      lambda z: jac_a(z, B)),
            Reference(f"{name}_const_active", _Captured(rule, "c,x", A, name), x, lambda z: value(A, z),
                      lambda z: jac_b(A, z)),
            Reference(f"{name}_both_active", _Captured(rule, "x,x", A, name), x, lambda z: value(z, z),
                      lambda z: jac_a(z, z) + jac_b(z, z)),
        ]  # fmt: skip

    out = refs_for(
        cumsum_weighted,
        "rule_opaque",
        lambda a, b: np.cumsum(a * b**2),
        lambda a, b: L * (b**2)[None, :],
        lambda a, b: L * (2 * a * b)[None, :],
    )
    out += refs_for(
        sin_product,
        "rule_array_api",
        lambda a, b: a * np.sin(b),
        lambda a, b: np.diag(np.sin(b)),
        lambda a, b: np.diag(a * np.cos(b)),
    )
    out.append(
        Reference(
            "rule_opaque_sum",
            _Weighted(W, B),
            x,
            lambda z: np.sum(W * np.cumsum(z * B**2)),
            lambda z: ((L.T @ W) * B**2)[None, :],
        )
    )
    return out
