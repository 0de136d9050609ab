"""The extension surface: what a package needs to add a backend, and nothing else.

A backend is two classes in one module of its own, and no change to diffinterface:

- a **config** (subclass :class:`BackendConfig`, a frozen dataclass) naming its adapter by dotted
  path (``adapter = "mypackage.backend:MyAdapter"``), the module of its engine (``engine``), a short
  ``name`` and the ``install`` line shown when the engine is missing; optionally
  ``tolerance(dtype, second_order)`` for the test harness;
- an **adapter** (subclass :class:`Adapter`) implementing at least ``value_and_pushforward`` or
  ``value_and_pullback``; every other operator, second order included, is derived by the base
  class, and the adapter overrides what its engine does better natively. Two class flags say how
  it serves as ``outer`` in ``SecondOrder(outer, inner)``: ``evaluates_only`` (it only evaluates
  what ``inner`` computes, as finite differences do: any ``inner``) and ``traceable_results`` (its
  results stay differentiable by an outer call of the same engine, as JAX's do).

Register the config with :func:`register_backend` (or a ``diffinterface.backends`` entry point, so
that ``python -m diffinterface check`` finds it without an import), and check it on the whole
catalogue with ``diffinterface.testing.test_differentiation``. An engine with its own array type
also describes it once with :class:`ArrayFamily` and :func:`register_family`, and makes custom
rules (``diffinterface.rules``) work inside it with :func:`register_rules`, and names a
:class:`BenchEngine` (its own best calls) in ``bench`` for ``python -m diffinterface bench``. The worked example is
``tests/test_extend.py``; the documented contract is ``diffinterface/_adapters/contract.py``'s docstring.

What an adapter method receives: ``target`` (the function as adapters call it: ``target.call`` is
the user's call for messages; :meth:`Adapter.evaluate` runs ``f`` once over fresh duplicates of its
captured state), ``x`` (an array of the user's family), tangents as a tuple, ``contexts`` (the
``Constant``/``Cache`` wrappers, passed on to ``evaluate``), and ``info`` (:class:`Info`: the shape
and dtype of ``f(x)``) at preparation.
"""

from __future__ import annotations

from ._adapters.contract import Adapter, Info, basis, contract_all, ones, stack_jacobian
from ._closures.state import declare_modules
from ._core.arrays import ArrayFamily, families, family, register_family, to_family
from .backends.configs import ENTRY_POINTS, register_backend, registered_backends
from .backends.configs import AbstractBackend as BackendConfig
from .bench import Engine as BenchEngine
from .rules import register_rules

__all__ = [
    "Adapter",
    "Info",
    "basis",
    "contract_all",
    "ones",
    "stack_jacobian",
    "ArrayFamily",
    "families",
    "family",
    "register_family",
    "to_family",
    "BackendConfig",
    "BenchEngine",
    "ENTRY_POINTS",
    "register_backend",
    "registered_backends",
    "declare_modules",
    "register_rules",
]
