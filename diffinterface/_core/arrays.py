"""Array families (numpy, jax, torch, tensorflow): recognised through ``sys.modules``, never by importing an engine.

A value's family decides the type results come back in: numpy in, numpy out, whichever engine
computed them. Python floats count as numpy.

Size: over 400 lines in one module, because the families' registry, their recognition and the conversions
between them read one table; apart, a family's description and the code that reads it would drift.
"""

from __future__ import annotations

import abc
import builtins
import contextlib
import importlib
import sys
import types
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

if TYPE_CHECKING:
    import mlx.core
    import torch
    from numpy.typing import ArrayLike, DTypeLike

    from .types import Array, DType

_A = TypeVar("_A", bound="Array")  # an array, given back in its own type

NUMPY, JAX, TORCH, AUTOGRAD, MLX, PYTENSOR, TENSORFLOW = (
    "numpy",
    "jax",
    "torch",
    "autograd",
    "mlx",
    "pytensor",
    "tensorflow",
)


class ArrayFamily:
    """One array library, described once (public as ``diffinterface.extend.ArrayFamily``).

    - ``name``: what :func:`family` returns for its arrays (results come back in the family of ``x``);
    - ``array_type``: ``"module.Type"``, resolved through ``sys.modules`` only (a library that is not
      imported has no arrays to recognise, and nothing is imported to find out);
    - ``to_numpy(value)``: a numpy array (zero-copy where the library allows);
    - ``from_numpy(array, like)``: an array of the family from a numpy one, on the device of ``like``
      when given;
    - ``convert(value, source, like)`` (optional): a direct conversion from an array of another family
      named ``source`` (DLPack), or None to go through numpy;
    - ``private_copy(value)``: a copy ``f`` may write into (default: the value itself, for immutable arrays);
    - ``computing(dtype)``: a context manager in which the library keeps arrays of ``dtype`` in that
      dtype (JAX's ``enable_x64`` for float64 when x64 is off; default: no context);
    - ``copy_into(out, result)`` (optional): writes ``result`` (an array of the family) into the
      user's ``out=`` array; None for a library of immutable arrays (JAX), whose ``out=`` is refused;
    - ``module_type`` (optional): ``"module.Type"`` of the library's stateful callables (torch's
      ``nn.Module``), whose attributes the closure walker duplicates like a user object's, and
      ``children``: the attribute holding their submodules (a dict, each walked in turn);
    - ``accuracy(dtype)`` (optional): the relative accuracy of the library's arithmetic on arrays of
      ``dtype`` where it is coarser than ``dtype``'s machine epsilon, None where it is not (the
      default: None for every dtype). MLX's float64 ``exp``, ``sin``, ``cos``, ``erf`` are its float32
      approximations: its record answers float32's epsilon for float64. Whoever subtracts nearby values
      of ``f`` computed in the family sizes its steps with it (finite differences, directly or as
      ``SecondOrder``'s outer: :func:`family_accuracy`, ``Adapter.accuracy``), else the difference is
      mostly rounding noise.
    - ``constant_types`` (optional): ``"module.Type"`` of the library's constants that hold nothing of
      the user's and take no weak reference (torch's ``dtype`` and ``device``, MLX's ``Dtype``): a
      function that reads one (``DEVICE = torch.device("cpu")`` at module level) is checked by its
      closure walk's summary at later first calls instead of walked again (``_closures.summaries``),
      which holds such a constant itself.
    - ``key_attribute`` (optional): the name of an attribute of the family's arrays that stands for
      their shape and dtype and reads faster than both: two arrays whose attributes are equal have one
      shape and one dtype (JAX's ``aval``, its abstract value: shape, dtype and weak type, one object
      for arrays alike, so the comparison is by identity; a JAX array's ``shape`` and ``dtype`` are
      Python properties, 0.13 us the pair against 0.02). The prepared fast path compares it in place
      of the pair; arrays whose attributes differ take the full check, which compares shape and dtype.
    - ``ignores_numpy_read_only`` (optional, default False): the library makes writable arrays over a
      numpy array's memory, which numpy's read-only flag does not stop (torch's ``asarray``,
      ``as_tensor`` and ``from_numpy`` share it, with a warning once per process). Where ``x`` or a
      context is of such a family, ``f`` gets copies of its captured numpy arrays and ``Constant``
      contexts, not read-only views of the user's (``read_only_alias``, the eager adapters' guard
      against writes): ``torch.asarray(C).add_(1)`` in ``f`` would write the user's ``C`` past it.
    """

    __slots__ = (
        "name",
        "array_type",
        "to_numpy",
        "from_numpy",
        "convert",
        "private_copy",
        "computing",
        "copy_into",
        "module_type",
        "children",
        "accuracy",
        "constant_types",
        "key_attribute",
        "ignores_numpy_read_only",
        "_stateful_type",
    )
    name: str
    array_type: str
    to_numpy: Callable[[Any], Any]
    from_numpy: Callable[..., Any]
    convert: Callable[..., Any] | None
    private_copy: Callable[[Any], Any]
    computing: Callable[[Any], AbstractContextManager[Any]]
    copy_into: Callable[[Any, Any], Any] | None
    module_type: str | None
    children: str | None
    accuracy: Callable[[Any], float | None]
    constant_types: tuple[str, ...]
    key_attribute: str | None
    ignores_numpy_read_only: bool

    def __init__(
        self,
        name: str,
        array_type: str,
        to_numpy: Callable[[Any], Any],
        from_numpy: Callable[..., Any],
        convert: Callable[..., Any] | None = None,
        private_copy: Callable[[Any], Any] | None = None,
        computing: Callable[[Any], AbstractContextManager[Any]] | None = None,
        copy_into: Callable[[Any, Any], Any] | None = None,
        module_type: str | None = None,
        children: str | None = None,
        accuracy: Callable[[Any], float | None] | None = None,
        constant_types: tuple[str, ...] = (),
        key_attribute: str | None = None,
        ignores_numpy_read_only: bool = False,
    ) -> None:
        if isinstance(constant_types, str):
            raise TypeError(
                f"ArrayFamily({name!r}, constant_types={constant_types!r}): expected a tuple of 'module.Type' "
                f"strings, such as ({constant_types!r},)"
            )
        paths = [("array_type", array_type), ("module_type", module_type)]
        paths += [("constant_types", path) for path in constant_types]
        for field, path in paths:
            module, _, attr = (path or "x.x").rpartition(".")
            if not module or not attr:
                raise ValueError(f"ArrayFamily({name!r}, {field}={path!r}): expected 'module.Type'")
        self.name, self.array_type = name, array_type
        self.to_numpy, self.from_numpy, self.convert = to_numpy, from_numpy, convert
        self.private_copy = private_copy or _same
        self.computing = computing or _no_context
        self.copy_into = copy_into
        self.module_type, self.children = module_type, children
        self.accuracy = accuracy or _dtype_accuracy
        self.constant_types = tuple(constant_types)
        self.key_attribute = key_attribute
        self.ignores_numpy_read_only = ignores_numpy_read_only
        self._stateful_type: Any = None  # module_type once resolved (a loaded module stays loaded)

    def type(self) -> Any:
        """The array type, if its module is imported (None otherwise)."""
        return _loaded(self.array_type)

    def stateful_type(self) -> Any:
        """The type of :attr:`module_type`, if declared and its module is imported (None otherwise);
        resolved once found (the closure walk asks for every callable it meets)."""
        found = self._stateful_type
        if found is None and self.module_type and self.module_type.partition(".")[0] in sys.modules:
            found = self._stateful_type = _loaded(self.module_type)
        return found

    def __repr__(self) -> str:
        return f"ArrayFamily({self.name!r}, {self.array_type!r})"


def _loaded(path: str) -> Any:
    """``module.Type`` resolved through ``sys.modules`` only (None when the module is not imported)."""
    module, _, attr = path.rpartition(".")
    loaded = sys.modules.get(module)
    while loaded is None and "." in module:  # "torch.nn.Module": torch.nn may be reached from torch
        module, _, parent_attr = module.rpartition(".")
        attr = f"{parent_attr}.{attr}"
        loaded = sys.modules.get(module)
    for part in attr.split("."):
        loaded = getattr(loaded, part, None)
    return loaded


def stateful_object(obj: Any) -> ArrayFamily | None:
    """The family whose :attr:`ArrayFamily.module_type` ``obj`` is an instance of, or None.

    Kept per type of ``obj`` (the closure walk asks for every callable it meets, a function mostly):
    a type's bases do not change, and a subclass of a module type exists only once its library is
    imported, so a type's answer stays true; an abstract module type, whose virtual subclasses may
    be registered later, is asked every time. :func:`register_family` clears what is kept."""
    kind = type(obj)
    try:
        return _STATEFUL_OF_TYPE[kind]
    except KeyError:
        pass
    found, keep = None, True
    for record in _FAMILIES.values():
        module_type = record.stateful_type()
        if module_type is None:
            continue
        keep = keep and not isinstance(module_type, abc.ABCMeta)
        if isinstance(obj, module_type):
            found = record
            break
    if keep:
        _STATEFUL_OF_TYPE[kind] = found
    return found


def family_constant(value: Any) -> bool:
    """Whether ``value`` is a constant of a registered family (:attr:`ArrayFamily.constant_types`,
    resolved through ``sys.modules`` only: a library that is not imported has no constants to meet)."""
    for record in _FAMILIES.values():
        for path in record.constant_types:
            kind = _loaded(path)
            if isinstance(kind, type) and isinstance(value, kind):
                return True
    return False


def _same(value: Any) -> Any:
    return value


def _no_context(dtype: DType) -> AbstractContextManager[None]:
    return contextlib.nullcontext()


def _dtype_accuracy(dtype: Any) -> None:
    """The default :attr:`ArrayFamily.accuracy`: the dtype's own (None)."""
    return None


_FAMILIES: dict[str, ArrayFamily] = {}
_FAMILY_OF_TYPE: dict[Any, Any] = {}  # type -> family, filled as types are met (on the prepared fast path)
_STATEFUL_OF_TYPE: dict[Any, Any] = {}  # type -> the family whose module type it is, or None (stateful_object)
# how many families register_family has added: what the closure walk's summaries of objects that were
# neither arrays nor modules were found under (diffinterface._closures.walk)
FAMILIES_GENERATION = 0


def register_family(record: ArrayFamily) -> ArrayFamily:
    """Add an array library (see :class:`ArrayFamily`); a later record of the same name replaces it."""
    if not isinstance(record, ArrayFamily):
        raise TypeError(f"register_family({record!r}): expected a diffinterface.extend.ArrayFamily")
    global FAMILIES_GENERATION
    _FAMILIES[record.name] = record
    _FAMILY_OF_TYPE.clear()
    _STATEFUL_OF_TYPE.clear()
    FAMILIES_GENERATION += 1
    return record


def families() -> dict[str, ArrayFamily]:
    """The registered array families by name."""
    return dict(_FAMILIES)


def key_attribute(values: tuple[Any, ...]) -> str | None:
    """The attribute that stands for the shapes and dtypes of ``values`` (arrays) on the prepared fast
    path: their family's :attr:`ArrayFamily.key_attribute`, where all are of one family that declares
    one and have it; else None."""
    names = {family_of_type(type(v)) for v in values}
    record = _FAMILIES.get(names.pop()) if len(names) == 1 and None not in names else None  # type: ignore[arg-type]
    attr = None if record is None else record.key_attribute
    return attr if attr is not None and all(hasattr(v, attr) for v in values) else None


def ignores_numpy_read_only(value: Any) -> bool:
    """Whether ``value`` is an array of a family that writes through numpy's read-only flag
    (:attr:`ArrayFamily.ignores_numpy_read_only`): a call with one gives ``f`` no read-only views."""
    name = family_of_type(type(value))
    record = None if name is None else _FAMILIES.get(name)
    return record is not None and record.ignores_numpy_read_only


def family_accuracy(fam: str | None, dtype: Any) -> float | None:
    """The relative accuracy of family ``fam``'s arithmetic in ``dtype`` where it is coarser than
    ``dtype``'s epsilon (its record's :attr:`ArrayFamily.accuracy`), None where it is not or ``fam`` is
    not a registered family (None: numpy, for Python numbers)."""
    record = _FAMILIES.get(fam) if fam is not None else None
    return None if record is None else record.accuracy(dtype)


def _numpy_from(value: ArrayLike, like: Array | None = None) -> np.ndarray:
    return np.asarray(value)


def _torch_to_numpy(value: torch.Tensor) -> np.ndarray:
    if value.requires_grad:
        value = value.detach()
    try:
        return value.numpy()  # a CPU tensor: zero-copy
    except TypeError:  # on a GPU
        return value.cpu().numpy()


def positive_strides(value: np.ndarray) -> np.ndarray:
    """``value``, or a C-ordered copy of it where a stride is negative: ``x[::-1]``, ``np.flip(x)``, and
    a reversed axis of length 1, which numpy counts C-contiguous (``np.ascontiguousarray`` leaves it as
    it is). ``torch.from_numpy`` and MLX's import of a numpy array refuse negative strides with a
    ValueError; the engines that copy (JAX, TensorFlow) take them."""
    return value.copy() if value.ndim and min(value.strides) < 0 else value


def _torch_from_numpy(value: ArrayLike, like: torch.Tensor | None = None) -> torch.Tensor:
    torch = sys.modules["torch"]
    if isinstance(value, np.ndarray):
        flags = value.flags
        shared = flags.c_contiguous and flags.writeable and min(value.strides, default=0) >= 0
        out = torch.from_numpy(value if shared else value.copy())
    else:
        out = torch.as_tensor(value)
    if like is not None and out.device != like.device:
        out = out.to(like.device)
    return out


def _torch_convert(value: Array, source: str, like: torch.Tensor | None = None) -> torch.Tensor | None:
    if source == MLX:  # torch refuses MLX's DLPack capsule of a slice (a byte offset): through numpy
        return None
    out = sys.modules["torch"].from_dlpack(value)
    if like is not None and out.device != like.device:
        out = out.to(like.device)
    return out


def _jax_from_numpy(value: ArrayLike, like: Array | None = None) -> Any:
    """A numpy value as a jax array (jax is imported: a jax array is the target); a float64 value
    stays float64 where ``like`` is a float64 jax array, whatever the global x64 setting (a tangent of
    such an x, given as a Python number or a numpy array)."""
    asarray = importlib.import_module("jax.numpy").asarray
    dtype = getattr(like, "dtype", None)
    if dtype is None or getattr(value, "dtype", None) != np.float64:
        return asarray(value)
    with _jax_computing(dtype):
        return asarray(value)


def _jax_convert(value: Any, source: str, like: Any = None) -> Any:
    if source != TORCH:
        return None
    value = value.detach()
    if value.device.type == "cpu":
        return _jax_from_numpy(value.numpy(), like)
    return sys.modules["jax"].dlpack.from_dlpack(value)


def jax_enable_x64() -> Any:
    """JAX's thread-local float64 context: ``jax.enable_x64`` from JAX 0.5 on,
    ``jax.experimental.enable_x64`` (the same signature) before; pyproject.toml admits JAX 0.4.35."""
    jax = sys.modules["jax"]
    return jax.enable_x64 if hasattr(jax, "enable_x64") else importlib.import_module("jax.experimental").enable_x64


def _jax_computing(dtype: DTypeLike) -> AbstractContextManager[Any]:
    """float64 kept float64 inside :func:`jax_enable_x64` when the user's x64 setting is off."""
    if np.dtype(dtype) != np.float64 or sys.modules["jax"].config.read("jax_enable_x64"):
        return contextlib.nullcontext()
    return jax_enable_x64()(True)


def _torch_private_copy(value: torch.Tensor) -> torch.Tensor:
    return value.detach().clone()


def _numpy_copy_into(out: np.ndarray, result: ArrayLike) -> None:
    np.copyto(out, result, casting="same_kind")


def _torch_copy_into(out: torch.Tensor, result: torch.Tensor) -> None:
    out.copy_(result)


register_family(
    ArrayFamily(NUMPY, "numpy.ndarray", np.asarray, _numpy_from, private_copy=np.copy, copy_into=_numpy_copy_into)
)
register_family(
    ArrayFamily(
        TORCH,
        "torch.Tensor",
        _torch_to_numpy,
        _torch_from_numpy,
        _torch_convert,
        _torch_private_copy,
        copy_into=_torch_copy_into,
        module_type="torch.nn.Module",
        children="_modules",
        constant_types=("torch.dtype", "torch.device"),
        ignores_numpy_read_only=True,
    )
)
register_family(
    ArrayFamily(
        JAX,
        "jax.Array",
        np.asarray,
        _jax_from_numpy,
        _jax_convert,
        computing=_jax_computing,
        constant_types=("jax.Device",),
        key_attribute="aval",
    )
)


def _mlx_from_numpy(value: ArrayLike, like: Array | None = None) -> mlx.core.array:
    """A numpy value as an ``mlx.core.array`` of the same dtype (``mx.array`` of a float64 numpy array
    would give float32 without the explicit dtype); float64 is kept (MLX computes it on the CPU)."""
    mx = sys.modules["mlx.core"]
    value = positive_strides(np.asarray(value))
    dtype = getattr(mx, "bool_" if value.dtype == np.bool_ else value.dtype.name, None)
    return mx.array(value, dtype=dtype) if dtype is not None else mx.array(value)


def _mlx_private_copy(value: mlx.core.array) -> mlx.core.array:
    """A new ``mlx.core.array`` over the same data: MLX's item assignment replaces the written array's
    node, so a write into the copy leaves ``value`` as it was."""
    return sys.modules["mlx.core"].array(value)


def _mlx_copy_into(out: mlx.core.array, result: mlx.core.array) -> None:
    out[...] = result


def _mlx_computing(dtype: Any) -> Any:
    """The MLX adapter's context, in which ``f`` runs wherever diffinterface runs it on MLX arrays
    (finite differences, ``DifferentiateWith``'s primal, local sparsity detection) as it does under
    ``AutoMLX``: float64 on MLX's CPU stream (the only one computing it), the array API over
    ``mlx.core`` (``backends/mlx.py``, imported at first use: MLX itself is, as its arrays exist)."""
    return importlib.import_module("diffinterface.backends.mlx").computing(dtype)


def _mlx_accuracy(dtype: Any) -> float | None:
    """MLX computes float64 ``exp``, ``sin``, ``cos`` and ``erf`` on the CPU with its float32
    approximations (ml-explore/mlx issues 3047 and 4158; about 1e-7 relative error in mlx 0.32; the
    reason for ``AutoMLX.tolerance``): float64 arithmetic is float32-accurate, other dtypes their own."""
    name = dtype_str(dtype)
    if name.startswith("<"):  # a numpy scalar type (np.float64)
        name = np.dtype(dtype).name
    return float(np.finfo(np.float32).eps) if name == "float64" else None


register_family(
    ArrayFamily(
        MLX,
        "mlx.core.array",
        np.asarray,
        _mlx_from_numpy,
        None,
        _mlx_private_copy,
        computing=_mlx_computing,
        copy_into=_mlx_copy_into,
        accuracy=_mlx_accuracy,
        constant_types=("mlx.core.Dtype",),
    )
)


def _pytensor_to_numpy(value: Any) -> Any:
    """A PyTensor tensor's value: a shared variable's current one, a constant's data; a symbolic
    tensor (an input or what f computed from it) has none outside its compiled function."""
    get = getattr(value, "get_value", None)
    if get is not None:
        return np.asarray(get(borrow=True))
    data = getattr(value, "data", None)
    if data is not None:
        return np.asarray(data)
    raise TypeError(
        f"a symbolic PyTensor tensor ({value!r}) has no value outside the function compiled from its graph; "
        f"compute with pytensor.tensor, or compile it with pytensor.function"
    )


def _pytensor_from_numpy(value: ArrayLike, like: Array | None = None) -> Any:
    return importlib.import_module("pytensor.tensor").as_tensor_variable(np.asarray(value))


# PyTensor's arrays are numpy's; its own type is the symbolic tensor f receives (and the shared
# variables f may capture): recognised so that structured outputs and captured state see arrays
register_family(
    ArrayFamily(PYTENSOR, "pytensor.tensor.variable.TensorVariable", _pytensor_to_numpy, _pytensor_from_numpy)
)


def _tf_to_numpy(value: Any) -> Any:
    """An eager tensor or a ``tf.Variable`` as numpy (zero-copy for an eager tensor on the CPU)."""
    return value.numpy()


def _tf_from_numpy(value: Any, like: Any = None) -> Any:
    """A numpy value as an eager tensor of its own dtype (float64 stays float64), on ``like``'s device."""
    tf = sys.modules["tensorflow"]
    device = getattr(like, "device", None)
    if device:
        with tf.device(device):
            return tf.convert_to_tensor(value)
    return tf.convert_to_tensor(value)


def _tf_private_copy(value: Any) -> Any:
    """Eager tensors are immutable: as they are; a ``tf.Variable``'s current value as a tensor."""
    read = getattr(value, "read_value", None)
    return read() if read is not None else value


def _tf_computing(dtype: Any) -> Any:
    """The TensorFlow adapter's call scope (the array API on TensorFlow's tensors), wherever
    diffinterface runs ``f`` on tensors outside AutoTensorFlow (``backends/tensorflow.py``, imported at
    first use: TensorFlow itself is, as its tensors exist)."""
    return importlib.import_module("diffinterface.backends.tensorflow").computing(dtype)


# tf.Tensor (eager and symbolic) and tf.Variable share TensorFlow's base class of tensor-like values;
# tf.Module is the stateful callable whose variables the closure walker duplicates
register_family(
    ArrayFamily(
        TENSORFLOW,
        "tensorflow.python.types.core.Tensor",
        _tf_to_numpy,
        _tf_from_numpy,
        private_copy=_tf_private_copy,
        module_type="tensorflow.python.module.module.Module",
        computing=_tf_computing,
    )
)


_PYTHON_TYPES = frozenset(
    [v for v in vars(builtins).values() if isinstance(v, type)]
    + [type(None), types.FunctionType, types.MethodType, types.BuiltinFunctionType, types.ModuleType]
)


def family_of_type(kind: type) -> str | None:
    """The family whose arrays are of type ``kind`` (numpy for numpy scalars and Python numbers), or None."""
    try:
        return _FAMILY_OF_TYPE[kind]
    except KeyError:
        pass
    fam: str | None = None
    if issubclass(kind, (np.ndarray, np.generic, float, int, complex)):
        fam = NUMPY
    else:
        for record in _FAMILIES.values():
            array_type = record.type()
            if array_type is not None and issubclass(kind, array_type):
                fam = record.name
                break
    if fam is not None or kind in _PYTHON_TYPES:
        # None is cached for Python's own types only (str, None, containers: the keys and labels
        # captured beside arrays, met at every call): no array library's type, real or virtual, is
        # one of them. Another type may become an array type's virtual subclass later, or by value
        # (JAX's tracers), so its None is not kept; register_family clears the cache.
        _FAMILY_OF_TYPE[kind] = fam
    return fam


def family(value: Any) -> str | None:
    """The family of an array (or Python number), or None for anything else."""
    kind = type(value)
    try:
        return _FAMILY_OF_TYPE[kind]
    except KeyError:
        pass
    fam = family_of_type(kind)
    if fam is None and kind not in _FAMILY_OF_TYPE:  # not a builtin type known to be none
        for record in _FAMILIES.values():  # virtual subclasses (JAX's tracers are jax.Array)
            array_type = record.type()
            if array_type is not None and isinstance(value, array_type):
                _FAMILY_OF_TYPE[kind] = record.name
                return record.name
    return fam


def is_array(value: Any) -> bool:
    """An array of a registered family (numpy arrays and scalars included; Python numbers not)."""
    if isinstance(value, (np.ndarray, np.generic)):
        return True
    return not isinstance(value, (int, float, complex)) and family(value) is not None


def dtype_name(value: Any) -> str:
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return type(value).__name__
    return dtype_str(dtype)


_DTYPE_NAMES: dict[Any, str] = {}  # dtype -> name: numpy's str(dtype) costs 1.3 us, and a call asks twice


def dtype_str(dtype: Any) -> str:
    """A dtype (numpy's, torch's, MLX's, TensorFlow's) by name: ``float64``."""
    try:
        return _DTYPE_NAMES[dtype]
    except (KeyError, TypeError):  # not met yet, or a dtype that is not hashable
        pass
    if hasattr(dtype, "as_numpy_dtype"):  # TensorFlow's DType prints as "<dtype: 'float64'>"
        name = str(dtype.name)
    else:
        name = str(dtype).replace("torch.", "").replace("mlx.core.", "")
    try:
        _DTYPE_NAMES[dtype] = name
    except TypeError:
        pass
    return name


def describe(value: Any) -> str:
    """``numpy float64 (3,)``: the family, dtype and shape that error messages show."""
    fam = family(value)
    if fam is None:
        return type(value).__name__
    if isinstance(value, (float, int, complex)) and not isinstance(value, np.generic):
        return f"Python {type(value).__name__}"
    return f"{fam} {dtype_name(value)} {tuple(value.shape)}"


def shape(value: Array | complex) -> tuple[Any, ...]:
    if isinstance(value, (float, int, complex)) and not isinstance(value, np.generic):
        return ()
    return tuple(value.shape)


def shape_size(dims: tuple[Any, ...]) -> int:
    """The number of elements of an array of shape ``dims`` (1 for ``()``)."""
    n = 1
    for d in dims:
        n *= d
    return n


def size(value: Array | complex) -> int:
    return shape_size(shape(value))


def is_real_floating(value: Array | complex) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return True
    return real_floating_dtype(getattr(value, "dtype", None))


# dtype -> real_floating_dtype(dtype), as found (np.issubdtype costs 1-2 us, asked at every call's check of x)
_REAL_FLOATING: dict[Any, bool] = {}


def real_floating_dtype(dtype: DType | None) -> bool:
    """Whether ``dtype`` (numpy's, JAX's or torch's; None: no dtype) is real floating."""
    try:
        return _REAL_FLOATING[dtype]
    except (KeyError, TypeError):  # not seen yet, or a dtype that does not hash
        pass
    answer = _real_floating(dtype)
    try:
        _REAL_FLOATING[dtype] = answer
    except TypeError:
        pass
    return answer


def _real_floating(dtype: DType | None) -> bool:
    if dtype is None:
        return False
    flag = getattr(dtype, "is_floating_point", None)  # torch's dtypes say so themselves
    if isinstance(flag, bool):
        return flag
    mlx = sys.modules.get("mlx.core")
    if mlx is not None and isinstance(dtype, mlx.Dtype):
        return bool(mlx.issubdtype(dtype, mlx.floating))
    try:
        return bool(np.issubdtype(np.dtype(cast("DTypeLike", dtype)), np.floating))  # torch's and MLX's answered above
    except TypeError:  # dtypes numpy does not know (bfloat16 from ml_dtypes) are floating if named so
        return "float" in str(dtype)


# dtype -> complex_dtype(dtype), as found: np.issubdtype is a few microseconds, asked several times a call
_COMPLEX: dict[Any, bool] = {}


def complex_dtype(dtype: DType | None) -> bool:
    """Whether ``dtype`` (numpy's, JAX's or torch's) is complex."""
    try:
        return _COMPLEX[dtype]
    except (KeyError, TypeError):  # not seen yet, or a dtype that does not hash
        pass
    flag = getattr(dtype, "is_complex", None)  # torch.dtype
    if isinstance(flag, bool):
        answer = flag
    else:
        mlx = sys.modules.get("mlx.core")  # MLX's dtypes say so through mx.issubdtype (numpy does not know them)
        if mlx is not None and isinstance(dtype, mlx.Dtype):
            answer = bool(mlx.issubdtype(dtype, mlx.complexfloating))
        else:
            try:
                answer = bool(np.issubdtype(np.dtype(cast("DTypeLike", dtype)), np.complexfloating))
            except TypeError:
                answer = False
    try:
        _COMPLEX[dtype] = answer
    except TypeError:
        pass
    return answer


def as_input(value: Any) -> Any:
    """A Python float (complex) as the 0-d float64 (complex128) numpy array that ``f`` and the engines
    receive; a numpy array
    of non-native byte order (``'>f8'`` on a little-endian machine, a valid float64 array that torch
    and JAX refuse) as a native copy."""
    if isinstance(value, float):
        return np.asarray(value, dtype=np.float64)
    if type(value) is complex:
        return np.asarray(value, dtype=np.complex128)
    if type(value) is np.ndarray and not value.dtype.isnative:
        return value.astype(value.dtype.newbyteorder("="))
    return value


def is_native(value: Any) -> bool:
    """False for a numpy array of non-native byte order (see :func:`as_input`)."""
    return not isinstance(value, np.ndarray) or value.dtype.isnative


def private_copy(value: _A) -> _A:
    """A copy of a mutable array (numpy, torch) that ``f`` may write into without touching the user's
    ``value``; an immutable one (jax) as it is."""
    if isinstance(value, np.ndarray):
        return value.copy()
    fam = family(value)
    copy = _FAMILIES[fam].private_copy(value) if fam is not None and fam != NUMPY else value
    return cast("_A", copy)  # the family's copy is of value's type


def to_family(value: Array | ArrayLike, fam: str | None, like: Array | None = None) -> Any:
    """``value`` (an engine's array) converted to family ``fam``; zero-copy where the libraries allow it.

    ``like``, when given, is an array of the target family whose device the result should share.
    """
    src = family(value)
    if src == fam or fam is None:
        return value
    target = _FAMILIES.get(fam)
    if target is None:
        raise ValueError(f"unknown array family {fam!r}; register it with diffinterface.extend.register_family")
    source = _FAMILIES.get(src) if src not in (None, NUMPY) else None
    if fam == NUMPY:
        return source.to_numpy(value) if source is not None else np.asarray(value)
    if target.convert is not None and source is not None:
        out = target.convert(value, src, like)
        if out is not None:
            return out
    if source is not None:
        value = source.to_numpy(value)
    return target.from_numpy(value, like)


def output_like(value: Array, x: Array | complex) -> Any:
    """A result of an operator, in the family of the user's ``x`` (a Python float ``x`` gives numpy)."""
    if type(value) is type(x):  # the fast path: the engine computed in the user's own array type
        return value
    fam = family(x)
    like = cast("Array", x) if fam in (TORCH, JAX, TENSORFLOW) else None  # x is an engine's array there
    value = to_family(value, fam, like=like)  # JAX: float64 kept with x64 off
    if isinstance(x, float) and isinstance(value, np.ndarray) and value.ndim == 0:
        return value[()]  # np.float64, which is also a float
    return value
