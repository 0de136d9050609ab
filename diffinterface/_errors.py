"""Exceptions raised by diffinterface, and the one helper that formats their messages."""

from __future__ import annotations


class BackendNotAvailableError(ImportError):
    """The engine behind a backend config is not installed."""


class PreparationMismatchError(ValueError):
    """A prepared call received arguments that differ from the ones the prep was made for."""


def call_repr(operator: str, backend: object, args: str = "f, x") -> str:
    """The prefix of every error message: the call as the user wrote it, e.g. ``gradient(AutoJAX(), f, x)``."""
    return f"{operator}({backend!r}, {args})"
