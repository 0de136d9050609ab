"""Contexts: the extra arguments after ``x`` (and the tangent) that ``f`` receives, in order."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Context(Generic[T]):
    __slots__ = ("value",)
    value: T

    def __init__(self, value: T) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value!r})"


# the extra arguments after x as adapters and runners receive them: Constant and Cache wrappers
Contexts = tuple[Context[Any], ...]


class Constant(Context[T]):
    """Read-only data passed to ``f``; not differentiated.

    A prep made with ``Constant(a)`` runs correctly with ``Constant(b)`` of the same shape.
    ``value`` may be an array, a Python scalar, or a tuple, list or dict of them.

    Example:

        >>> f = lambda x, c: c * (x ** 2).sum()
        >>> print(di.gradient(di.AutoFiniteDiff(), f, np.array([1.0, 2.0]), di.Constant(3.0)).round(6))
        [ 6. 12.]
    """

    __slots__ = ()


class Cache(Context[T]):
    """Scratch space whose initial content does not matter; ``f`` may write into it.

    Every call (and, for finite differences, every evaluation of ``f``) gets a fresh working copy,
    so the object passed in is never modified and nothing leaks from one call into the next.

    Example:

        >>> def f(x, work):  # work: a buffer f writes into; each call gets a fresh copy
        ...     work[:] = x ** 2
        ...     return work.sum()
        >>> print(di.gradient(di.AutoFiniteDiff(), f, np.array([1.0, 2.0]), di.Cache(np.zeros(2))).round(6))
        [2. 4.]
    """

    __slots__ = ()


def check_contexts(contexts: tuple[Any, ...], call: str) -> None:
    for i, c in enumerate(contexts):
        if not isinstance(c, Context):
            raise TypeError(
                f"{call}: extra argument {i} after x is a {type(c).__name__}; wrap it as Constant(value) "
                f"for read-only data or Cache(value) for scratch space f writes into"
            )


def context_values(contexts: tuple[Any, ...], duplicate: Any, constant: Any = None) -> list[Any]:
    """What ``f`` receives for ``contexts``: Cache values duplicated, Constant values as they are or,
    with ``constant``, converted by it (to the engine's arrays)."""
    if constant is None:
        return [duplicate(c.value) if type(c) is Cache else c.value for c in contexts]
    return [duplicate(c.value) if type(c) is Cache else constant(c.value) for c in contexts]
