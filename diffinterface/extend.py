"""The extension kit: everything a package needs to add a backend, and what the built-in engines use.

The built-in engines (``diffinterface.backends``: the repository's root ``backends/`` folder) import
nothing of diffinterface but this module (a test checks it), so an outside package can write an
adapter of the same quality as ours from these names alone.

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
  results stay differentiable by an outer call of the same engine, as JAX's do). An engine whose
  ``f`` is written in its own operations, which the engine-free sparsity tracer cannot run, sets
  ``local_sparsity_fallback`` (TensorFlow, MLX, PyTensor): ``AutoSparse``'s default detector then
  detects such an ``f``'s pattern locally, with a warning, instead of raising. An engine whose
  results are coarser than x's dtype says so with ``accuracy(dtype)`` (by default its
  :class:`ArrayFamily`'s ``accuracy`` hook: MLX's float64), and an ``evaluates_only`` outer offers
  ``for_accuracy(eps)`` (finite differences: steps for that accuracy).

Register the config with :func:`register_backend` (or a ``diffinterface.backends`` entry point, so
that ``python -m diffinterface check`` finds it without an import), and check it on the whole
catalogue with ``diffinterface.testing.test_differentiation``. An engine with its own array type
also describes it once with :class:`ArrayFamily` and :func:`register_family`, and makes custom
rules (``diffinterface.rules``) work inside it with :func:`register_rules`, and names a
:class:`BenchEngine` (its own best calls) in ``bench`` for ``python -m diffinterface bench``. The worked
example is ``tests/test_extend.py``; the documented contract is the docstring of :class:`Adapter`'s module.

What an adapter method receives: ``target`` (:class:`Target`, the function as adapters call it:
``target.call`` is the user's call for messages; :meth:`Adapter.evaluate` runs ``f`` once over fresh
duplicates of its captured state; ``target.slots()`` what ``f`` holds besides state, for a cache of the
adapter's own found by ``f`` across preparations, reused only while its ``holds()``), ``x`` (an array of the user's family), tangents as a tuple,
``contexts`` (the ``Constant``/``Cache`` wrappers, passed on to ``evaluate``; :func:`context_values`
unwraps them), and ``info`` (:class:`Info`: the shape and dtype of ``f(x)``) at preparation.

The kit, by job:

- **the adapter contract and its fallbacks**: :class:`Adapter`, :class:`Info`, :class:`Runners` (with
  its optional ``fast`` runner and :class:`Unserved`, which sends a call it cannot serve to ``plain``),
  :class:`Target`, :func:`basis`, :func:`ones`, :func:`stack_jacobian`, :func:`contract_all`; its
  types: :class:`Runner` (``(x, tangents, contexts) -> result``), :class:`Prepared` (what
  ``Adapter.prepare`` returns: ``plain`` and ``value`` runners), :data:`Body` (an engine's native
  operator at one point, ``-> (primal, result)``), :data:`Build` (``build(forward) -> (plain,
  value)``), and :func:`value_form`, which packs a body's ``(primal, result)`` into the value form;
- **the operators as records** (what each is: its tangent, scalar input or output, order, value
  form, natural direction, second-order nesting): :class:`Operator`, one record per operator
  (:data:`PUSHFORWARD`, :data:`PULLBACK`, :data:`DERIVATIVE`, :data:`GRADIENT`, :data:`JACOBIAN`,
  :data:`HVP`, :data:`HESSIAN`, :data:`SECOND_DERIVATIVE`) and :data:`OPERATORS` by name;
- **array families** (recognise and convert an engine's arrays without importing it):
  :class:`ArrayFamily`, :func:`register_family`, :func:`families`, :func:`family`,
  :func:`family_accuracy` (a family's arithmetic coarser than its dtype: MLX's float64),
  :func:`family_of_type`, :func:`to_family`, :func:`is_array`, :func:`private_copy`, :func:`positive_strides` (a numpy array an engine that shares memory can take: ``x[::-1]`` copied), :func:`dtype_name`, :func:`shape_size`, :func:`complex_dtype`, :func:`jax_enable_x64`, and the
  built-in families' names ``NUMPY``, ``TORCH``;
- **contexts**: :class:`Cache`, :func:`context_values`, and the types :class:`Context` (``Constant`` and
  ``Cache``'s base) and :data:`Contexts` (the tuple of them a runner receives);
- **types**: :class:`Array`, an array of any family as code serving every family reads one (its
  ``shape``, ``dtype`` and ``ndim``); :class:`NumericArray`, an ``Array`` with its family's arithmetic; :data:`DType`, a dtype of the built-in families; :class:`Layout` (``info.layout``: how a prep maps a structured
  ``x`` and ``f(x)`` onto flat arrays, for an adapter that runs a structure inside its own program);
- **closures** (captured state duplicated per call, contract section 7): :func:`duplicate`,
  :func:`copy_leaf`, :func:`any_leaf` (a test through lists, tuples and dicts), :func:`read_only_alias` (a read-only numpy view whose in-place operators are
  refused writes whatever the operand), :func:`declare_modules`, the writable stand-in
  :class:`WritableArray`, whose basic slices are views that write it, as numpy's (:func:`unwrap`,
  :func:`note_conversion`, :func:`take_conversion`, :class:`StandInConversionError`);
- **diagnostics** (the call's errors where f writes, escapes or misuses state): the adapter's hook
  :meth:`Adapter.refused_write` (its engine refusing a write into a guarded alias, by the engine's
  exception types and attributes; the default recognises numpy's read-only views),
  :func:`raised_by`, :func:`innermost_frame`, :func:`operand_error`, :func:`const_operand_error`,
  :func:`const_write_error`, :func:`standin_error`, :func:`structured_output`, :func:`structured_output_error`, :class:`LostDerivativeError` with its
  ``LOST_CAUSES``, ``RUNS_ON_VALUES`` (what a tracing engine's error for an f that needs x's values offers),
  :func:`escaped_error` (a read out of the engine checked against central differences),
  :func:`lost_on_the_way` (its error, for a read the engine itself refused) and
  :func:`floating_value` (whether a result could have carried one), :class:`EvaluationError`, :class:`BackendNotAvailableError`;
- **host callbacks** (an opaque rule's body run by the engine, whose error the engine reports as its own):
  :func:`keep_host_error` in the callback (it raises the :class:`HostCallbackError` returned), :func:`host_error`
  where the engine's error surfaces (the body's own error, to raise instead), and :func:`note_host_callback` /
  :func:`host_callbacks` (whether tracing ``f`` met a host callback: only then do runners need the check);
- **custom rules inside the engine** (``diffinterface.rules``): :func:`register_rules`, :class:`Rule`,
  :class:`Active`, :func:`annotate`, :func:`cotangents`, :func:`cotangent_like`, :func:`prefer`,
  :func:`preferred`;
- **the registry**: :class:`BackendConfig`, :func:`register_backend`, :func:`registered_backends`,
  ``ENTRY_POINTS``;
- **benchmarks**: :class:`BenchEngine`.
"""

from __future__ import annotations

from ._adapters.bench_engine import BenchEngine as BenchEngine
from ._adapters.contract import Adapter as Adapter
from ._adapters.contract import Body as Body
from ._adapters.contract import Build as Build
from ._adapters.contract import Info as Info
from ._adapters.contract import Prepared as Prepared
from ._adapters.contract import Runner as Runner
from ._adapters.contract import Runners as Runners
from ._adapters.contract import Unserved as Unserved
from ._adapters.contract import basis as basis
from ._adapters.contract import contract_all as contract_all
from ._adapters.contract import ones as ones
from ._adapters.contract import stack_jacobian as stack_jacobian
from ._adapters.contract import value_form as value_form
from ._adapters.target import Target as Target
from ._closures.diagnose import const_operand_error as const_operand_error
from ._closures.diagnose import const_write_error as const_write_error
from ._closures.diagnose import innermost_frame as innermost_frame
from ._closures.diagnose import operand_error as operand_error
from ._closures.diagnose import raised_by as raised_by
from ._closures.diagnose import standin_error as standin_error
from ._closures.namespaces import declare_modules as declare_modules
from ._closures.plan import any_leaf as any_leaf
from ._closures.plan import copy_leaf as copy_leaf
from ._closures.plan import duplicate as duplicate
from ._closures.plan import read_only_alias as read_only_alias
from ._closures.writable import StandInConversionError as StandInConversionError
from ._closures.writable import WritableArray as WritableArray
from ._closures.writable import note_conversion as note_conversion
from ._closures.writable import take_conversion as take_conversion
from ._closures.writable import unwrap as unwrap
from ._core.arrays import NUMPY as NUMPY
from ._core.arrays import TORCH as TORCH
from ._core.arrays import ArrayFamily as ArrayFamily
from ._core.arrays import complex_dtype as complex_dtype
from ._core.arrays import dtype_name as dtype_name
from ._core.arrays import families as families
from ._core.arrays import family as family
from ._core.arrays import family_accuracy as family_accuracy
from ._core.arrays import family_of_type as family_of_type
from ._core.arrays import is_array as is_array
from ._core.arrays import jax_enable_x64 as jax_enable_x64
from ._core.arrays import positive_strides as positive_strides
from ._core.arrays import private_copy as private_copy
from ._core.arrays import register_family as register_family
from ._core.arrays import shape_size as shape_size
from ._core.arrays import to_family as to_family
from ._core.configs import ENTRY_POINTS as ENTRY_POINTS
from ._core.configs import AbstractBackend as BackendConfig
from ._core.configs import register_backend as register_backend
from ._core.configs import registered_backends as registered_backends
from ._core.contexts import Cache as Cache
from ._core.contexts import Context as Context
from ._core.contexts import Contexts as Contexts
from ._core.contexts import context_values as context_values
from ._core.errors import LOST_CAUSES as LOST_CAUSES
from ._core.errors import RUNS_ON_VALUES as RUNS_ON_VALUES
from ._core.errors import BackendNotAvailableError as BackendNotAvailableError
from ._core.errors import EvaluationError as EvaluationError
from ._core.errors import HostCallbackError as HostCallbackError
from ._core.errors import LostDerivativeError as LostDerivativeError
from ._core.errors import escaped_error as escaped_error
from ._core.errors import floating_value as floating_value
from ._core.errors import host_callbacks as host_callbacks
from ._core.errors import host_error as host_error
from ._core.errors import keep_host_error as keep_host_error
from ._core.errors import lost_on_the_way as lost_on_the_way
from ._core.errors import note_host_callback as note_host_callback
from ._core.errors import structured_output as structured_output
from ._core.errors import structured_output_error as structured_output_error
from ._core.operators import DERIVATIVE as DERIVATIVE
from ._core.operators import GRADIENT as GRADIENT
from ._core.operators import HESSIAN as HESSIAN
from ._core.operators import HVP as HVP
from ._core.operators import JACOBIAN as JACOBIAN
from ._core.operators import OPERATORS as OPERATORS
from ._core.operators import PULLBACK as PULLBACK
from ._core.operators import PUSHFORWARD as PUSHFORWARD
from ._core.operators import SECOND_DERIVATIVE as SECOND_DERIVATIVE
from ._core.operators import Operator as Operator
from ._core.structure import Layout as Layout
from ._core.types import Array as Array
from ._core.types import DType as DType
from ._core.types import NumericArray as NumericArray
from .rules import Active as Active
from .rules import Rule as Rule
from .rules import annotate as annotate
from .rules import cotangent_like as cotangent_like
from .rules import cotangents as cotangents
from .rules import prefer as prefer
from .rules import preferred as preferred
from .rules import register_rules as register_rules

__all__ = [
    # the adapter contract and its fallbacks
    "Adapter",
    "Body",
    "Build",
    "Info",
    "Prepared",
    "Runner",
    "Runners",
    "Target",
    "Unserved",
    "basis",
    "contract_all",
    "ones",
    "stack_jacobian",
    "value_form",
    # the operators as records
    "Operator",
    "OPERATORS",
    "PUSHFORWARD",
    "PULLBACK",
    "DERIVATIVE",
    "GRADIENT",
    "JACOBIAN",
    "HVP",
    "HESSIAN",
    "SECOND_DERIVATIVE",
    # array families
    "ArrayFamily",
    "NUMPY",
    "TORCH",
    "complex_dtype",
    "dtype_name",
    "families",
    "family",
    "family_accuracy",
    "family_of_type",
    "is_array",
    "jax_enable_x64",
    "positive_strides",
    "private_copy",
    "register_family",
    "shape_size",
    "to_family",
    # contexts
    "Cache",
    "Context",
    "Contexts",
    "context_values",
    # the types signatures share
    "Array",
    # closures
    "StandInConversionError",
    "WritableArray",
    "any_leaf",
    "copy_leaf",
    "declare_modules",
    "duplicate",
    "note_conversion",
    "read_only_alias",
    "take_conversion",
    "unwrap",
    # diagnostics
    "BackendNotAvailableError",
    "EvaluationError",
    "LOST_CAUSES",
    "LostDerivativeError",
    "RUNS_ON_VALUES",
    "const_operand_error",
    "const_write_error",
    "escaped_error",
    "floating_value",
    "lost_on_the_way",
    "innermost_frame",
    "operand_error",
    "raised_by",
    "standin_error",
    "structured_output",
    "structured_output_error",
    # a host callback's error, raised for the call the engine fails with it
    "HostCallbackError",
    "host_callbacks",
    "host_error",
    "keep_host_error",
    "note_host_callback",
    # custom rules inside the engine
    "Active",
    "Rule",
    "annotate",
    "cotangent_like",
    "cotangents",
    "prefer",
    "preferred",
    "register_rules",
    # the registry
    "BackendConfig",
    "ENTRY_POINTS",
    "register_backend",
    "registered_backends",
    # benchmarks
    "BenchEngine",
]
