"""Array families (numpy, jax, torch): recognised through ``sys.modules``, never by importing an engine.

A value's family decides the type results come back in: numpy in, numpy out, whichever engine
computed them. Python floats count as numpy.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import numpy as np

NUMPY, JAX, TORCH, AUTOGRAD = "numpy", "jax", "torch", "autograd"


def _is_jax(value: Any) -> bool:
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(value, jax.Array)


def _is_torch(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


_FAMILY_OF_TYPE: dict = {}  # type -> family, filled as types are met (on the prepared fast path)


def family(value: Any) -> str | None:
    """The family of an array (or Python float), or None for anything else."""
    kind = type(value)
    try:
        return _FAMILY_OF_TYPE[kind]
    except KeyError:
        pass
    if isinstance(value, (np.ndarray, np.generic, float, int, complex)):
        fam = NUMPY
    elif _is_torch(value):
        fam = TORCH
    elif _is_jax(value):
        fam = JAX
    else:
        return None  # not cached: jax or torch may be imported later and make this type an array
    _FAMILY_OF_TYPE[kind] = fam
    return fam


def family_of_type(kind: type) -> str | None:
    """The family whose arrays are of type ``kind``, or None."""
    if issubclass(kind, (np.ndarray, np.generic)):
        return NUMPY
    torch, jax = sys.modules.get("torch"), sys.modules.get("jax")
    if torch is not None and issubclass(kind, torch.Tensor):
        return TORCH
    if jax is not None and issubclass(kind, jax.Array):
        return JAX
    return None


def is_array(value: Any) -> bool:
    return isinstance(value, (np.ndarray, np.generic)) or _is_torch(value) or _is_jax(value)


def dtype_name(value: Any) -> str:
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return type(value).__name__
    return str(dtype).replace("torch.", "")


def describe(value: Any) -> str:
    """``numpy float64 (3,)``: the family, dtype and shape that error messages show."""
    fam = family(value)
    if fam is None:
        return type(value).__name__
    if isinstance(value, (float, int, complex)) and not isinstance(value, np.generic):
        return f"Python {type(value).__name__}"
    return f"{fam} {dtype_name(value)} {tuple(value.shape)}"


def shape(value: Any) -> tuple:
    if isinstance(value, (float, int, complex)) and not isinstance(value, np.generic):
        return ()
    return tuple(value.shape)


def shape_size(dims: tuple) -> int:
    """The number of elements of an array of shape ``dims`` (1 for ``()``)."""
    n = 1
    for d in dims:
        n *= d
    return n


def size(value: Any) -> int:
    return shape_size(shape(value))


def is_real_floating(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return True
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return False
    if _is_torch(value):
        return value.dtype.is_floating_point
    try:
        return np.issubdtype(np.dtype(dtype), np.floating)
    except TypeError:  # dtypes numpy does not know (bfloat16 from ml_dtypes) are floating if named so
        return "float" in str(dtype)


def as_input(value: Any) -> Any:
    """A Python float as the 0-d float64 numpy array that ``f`` and the engines receive; a numpy array
    of non-native byte order (``'>f8'`` on a little-endian machine, a valid float64 array that torch
    and JAX refuse) as a native copy."""
    if isinstance(value, float):
        return np.asarray(value, dtype=np.float64)
    if type(value) is np.ndarray and not value.dtype.isnative:
        return value.astype(value.dtype.newbyteorder("="))
    return value


def is_native(value: Any) -> bool:
    """False for a numpy array of non-native byte order (see :func:`as_input`)."""
    return not isinstance(value, np.ndarray) or value.dtype.isnative


def private_copy(value: Any) -> Any:
    """A copy of a mutable array (numpy, torch) that ``f`` may write into without touching the user's
    ``value``; a jax array (immutable) as it is."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if _is_torch(value):
        return value.detach().clone()
    return value


def to_family(value: Any, fam: str, like: Any = None) -> Any:
    """``value`` (an engine's array) converted to family ``fam``; zero-copy where the libraries allow it.

    ``like``, when given, is an array of the target family whose device the result should share.
    """
    src = family(value)
    if src == fam or fam is None:
        return value
    if fam == NUMPY:
        if src == TORCH:
            if value.requires_grad:
                value = value.detach()
            try:
                return value.numpy()  # a CPU tensor: zero-copy
            except TypeError:  # on a GPU
                return value.cpu().numpy()
        return np.asarray(value)
    if fam == TORCH:
        torch = sys.modules["torch"]
        if src == NUMPY:
            out = torch.from_numpy(value if value.flags.c_contiguous and value.flags.writeable else value.copy()) if isinstance(value, np.ndarray) else torch.as_tensor(value)
        else:
            out = torch.from_dlpack(value)
        if like is not None and out.device != like.device:
            out = out.to(like.device)
        return out
    if fam == JAX:
        jnp = importlib.import_module("jax.numpy")  # jax is imported already: value is a jax or torch array
        if src == TORCH:
            value = value.detach()
            if value.device.type == "cpu":
                return jnp.asarray(value.numpy())
            return sys.modules["jax"].dlpack.from_dlpack(value)
        return jnp.asarray(value)
    raise ValueError(f"unknown array family {fam!r}")


def output_like(value: Any, x: Any) -> Any:
    """A result of an operator, in the family of the user's ``x`` (a Python float ``x`` gives numpy)."""
    if type(value) is type(x):  # the fast path: the engine computed in the user's own array type
        return value
    fam = family(x)
    value = to_family(value, fam, like=x if fam == TORCH else None)
    if isinstance(x, float) and isinstance(value, np.ndarray) and value.ndim == 0:
        return value[()]  # np.float64, which is also a float
    return value
