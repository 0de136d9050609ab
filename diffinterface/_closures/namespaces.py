"""Which functions the closure walker looks into: decided by **module name**, never by where a module
is installed (users' model code is usually an installed package).

Every function, callable object and bound method is walked unless its module belongs to a library
namespace -- the standard library (``sys.stdlib_module_names``), the engines and their array
libraries (numpy, scipy, jax, torch, autograd, tensorflow, pytensor, ...), diffinterface itself -- or
to a namespace declared one with :func:`declare_modules` (``declare_modules("mylib", walk=False)``).
``walk=True`` declares user code inside a library namespace (this package's own scenario catalogue).
The most specific declaration wins. Modules, classes and other objects are never walked.
"""

from __future__ import annotations

import sys
import types
from typing import Any

# Library namespaces whose functions are left as they are: the standard library, the engines, their
# array libraries and the scientific stack. Extended, or overridden for a sub-namespace, with
# declare_modules; the most specific prefix of a module's name decides.
_LIBRARIES = frozenset(getattr(sys, "stdlib_module_names", ())) | {
    "__future__",
    "builtins",
    "_pytest",
    "pytest",
    "hypothesis",
    "pluggy",
    "numpy",
    "scipy",
    "jax",
    "jaxlib",
    "torch",
    "functorch",
    "torchvision",
    "autograd",
    "tensorflow",
    "pytensor",
    "array_api_compat",
    "array_api_strict",
    "ml_dtypes",
    "opt_einsum",
    "numdifftools",
    "sympy",
    "pandas",
    "matplotlib",
    "sklearn",
    "numba",
    "cupy",
    "dask",
    "xarray",
    "flax",
    "optax",
    "equinox",
    "diffrax",
    "chex",
    "diffinterface",
}
_declared: dict[str, bool] = {}  # module-name prefix -> walk
_walk_cache: dict[str | None, bool] = {}
GENERATION = 0  # counts the changes of declarations (a summary made under others is walked again)


def declare_modules(*names: str, walk: bool) -> None:
    """Declare module namespaces for the closure walker (contract section 7).

    ``walk=False``: a library -- functions and callable objects defined in ``name`` or its
    submodules are called as they are, never looked into for captured state to duplicate.
    ``walk=True``: user code, also inside a library namespace (the walker looks into it as into a
    script's functions). The most specific declaration of a module's name wins::

        diffinterface.declare_modules("mylib", walk=False)      # a library f calls into
        diffinterface.declare_modules("mylib.models", walk=True)  # but this part is model code

    Example:

        >>> di.declare_modules("mylib", walk=False)  # functions of mylib are called as they are
    """
    for name in names:
        if not isinstance(name, str) or not name or name.startswith(".") or name.endswith("."):
            raise ValueError(
                f"declare_modules({name!r}, walk={walk!r}): expected a module name such as 'mylib' or 'mylib.models'"
            )
    if not isinstance(walk, bool):
        raise TypeError(f"declare_modules(..., walk={walk!r}): walk must be True or False")
    global GENERATION
    for name in names:
        _declared[name] = walk
    _walk_cache.clear()
    GENERATION += 1


def undeclare_modules(*names: str) -> None:
    """Forget the declarations of ``names`` (:func:`declare_modules`): their modules are decided by
    the default rule again (tests that declare a module undo it with this)."""
    global GENERATION
    for name in names:
        _declared.pop(name, None)
    _walk_cache.clear()
    GENERATION += 1


def is_user_module(name: str | None) -> bool:
    """Whether functions of the module named ``name`` are walked: by the name alone (see the module
    docstring). A function without a module (made by ``exec`` without ``__name__``) is user code."""
    try:
        return _walk_cache[name]
    except KeyError:
        pass
    walk = True
    if name:
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            prefix = ".".join(parts[:i])
            if prefix in _declared:
                walk = _declared[prefix]
                break
        else:
            walk = parts[0] not in _LIBRARIES
    _walk_cache[name] = walk
    return walk


def is_user_function(value: Any) -> bool:
    return isinstance(value, types.FunctionType) and is_user_module(value.__module__)
