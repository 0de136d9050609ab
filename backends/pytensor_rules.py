"""A :class:`diffinterface.rules.Rule` met inside a PyTensor graph: not supported yet, the call's error.

Registering a rule with PyTensor needs an ``OpFromGraph`` with overridden gradients (traceable rules)
or a ``pytensor.graph.op.Op`` running the NumPy primal and rules (opaque ones); neither is written
yet. Without this registrar an opaque rule would receive symbolic tensors as NumPy object arrays (an
obscure failure inside its body), and an array-API rule would be differentiated through its primal,
its own rules ignored. So a rule called on PyTensor variables raises :class:`RulesNotSupported`, which
the adapter turns into the call's ``TypeError`` naming the fix.
"""

from __future__ import annotations

from typing import Any

from diffinterface.extend import Rule


class RulesNotSupported(TypeError):
    """A custom rule called inside a graph ``AutoPyTensor`` builds (see the module docstring)."""


def call(rule: Rule, args: tuple[Any, ...], kwargs: dict[Any, Any]) -> Any:
    raise RulesNotSupported(
        f"{rule.__name__} has custom rules (diffinterface.rules), which are not supported inside PyTensor yet "
        f"(no OpFromGraph or Op registration); differentiate this f with AutoJAX(), AutoTorch(), AutoAutograd(), "
        f"AutoMLX() or AutoFiniteDiff()"
    )
