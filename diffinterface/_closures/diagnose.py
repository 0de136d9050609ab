"""The call's errors where ``f`` writes into, escapes with or misuses its captured state (contract section 7).

Each builder recognises its case from the values, never from a message: the traceback's frames and
what they hold (``frame.f_locals``: a traced value beside a foreign array, a writable stand-in in
library code), the captured leaves of ``f`` (``plan.StatePlan``), and the recogniser an adapter
passes (its engine's exception types). Discovery runs only on the way to an error, so calls that
succeed pay nothing for it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from .._core.arrays import is_array
from .namespaces import is_user_module
from .plan import ConstTracedWrite, StatePlan, any_leaf, const_guard
from .writable import StandInConversionError, WritableArray, take_conversion


def raised_by(error: BaseException, refused: Callable[[BaseException], bool]) -> bool:
    """Whether ``refused`` recognises ``error`` or an error it was raised from or during (an engine or
    this library may re-raise the guard's error with its own message in front)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if refused(current):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _frames(error: BaseException) -> list[Any]:
    """The frames of ``error``'s traceback, outermost first."""
    frames, tb = [], error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def innermost_frame(error: BaseException) -> Any:
    """The frame ``error`` was raised in (its traceback's last), or None without a traceback."""
    frames = _frames(error)
    return frames[-1] if frames else None


def _in_user_code(frame: Any) -> bool:
    return is_user_module(frame.f_globals.get("__name__"))


def _operator_frame(error: BaseException) -> Any:
    """The frame an operator raised ``error`` in, where that is a ``TypeError`` raised right in user
    code (the traceback's innermost frame is ``f``'s own, not a library's); None otherwise."""
    if not isinstance(error, TypeError):
        return None
    frame = innermost_frame(error)
    return frame if frame is not None and _in_user_code(frame) else None


def _first_line(error: BaseException | str) -> str:
    """The first line of an error's message, for the library's own message around it."""
    reason = str(error).strip()
    return reason.splitlines()[0].rstrip(".") if reason else type(error).__name__


def operand_error(error: BaseException, traced: Callable[[Any], bool]) -> bool:
    """Whether ``error`` is a ``TypeError`` that an operator raised right in user code (its innermost
    frame is ``f``'s own, not a library's) where that frame holds a traced value of the engine and an
    array of another library: ``buffer[0] += x`` with a torch ``buffer`` under JAX, whose error names
    only the two operand types. Recognised from the values, never from the message."""
    frame = _operator_frame(error)
    if frame is None:
        return False
    values = list(frame.f_locals.values())
    return any(traced(v) for v in values) and any(is_array(v) and not traced(v) for v in values)


def const_operand_error(target: Any, error: BaseException, engine: str, own: Callable[[Any], bool]) -> Exception | None:
    """Under ``closure="const"``, the error for ``f`` combining the engine's value with an array it
    captures from another library (``A @ u`` with a numpy ``A`` under torch): ``"const"`` passes the
    captured arrays as they are, and the engine's operator refuses the pair with a ``TypeError`` that
    names only the two types. Recognised from the values: the ``TypeError`` was raised right in user
    code, in a frame that holds one of the engine's values (``own``) and reads (a local, a closure
    cell or a global it names) a captured array that is not the engine's. None otherwise, and
    always with ``closure="duplicated"``, which converts the captured arrays."""
    frame = _operator_frame(error) if getattr(target, "closure", None) == "const" else None
    if frame is None:
        return None
    seen = list(frame.f_locals.values()) + [frame.f_globals[n] for n in frame.f_code.co_names if n in frame.f_globals]
    if not any(own(v) for v in seen):
        return None
    plan = StatePlan(target.user_f)
    foreign = [
        where
        for where, value in zip(plan.where(), plan.read())
        if is_array(value) and not own(value) and any(value is v for v in seen)
    ]
    if not foreign:
        return None
    return TypeError(
        f"{target.call}: with closure='const', f's captured arrays reach it as they are, and {engine} cannot "
        f"combine {', '.join(foreign)} with its own values ({_first_line(error)}). Use closure='duplicated' (the "
        f"default), which gives f each captured array as one of {engine}'s, or capture {engine}'s own arrays."
    )


def const_write_error(
    target: Any,
    error: BaseException | str,
    engine: str,
    leaked: Callable[[BaseException], bool] | None = None,
    kind: type | None = None,
) -> Exception | None:
    """Under ``closure="const"``, the error for ``f`` writing a value that depends on ``x`` into its
    own captured state (contract section 7): it names the captured arrays, lists and dicts and points to
    ``closure="duplicated"``. None when the closure is duplicated, when ``leaked(error)`` (the
    engine's recogniser: its error types, see each adapter) says the error is something else, or when
    ``f`` captures no such state. A ``str`` ``error`` is the adapter's own finding (no recogniser).
    Discovery runs only here, on the way to an error, so ``"const"`` costs nothing on calls that succeed."""
    if getattr(target, "closure", None) != "const":
        return None
    if not isinstance(error, str) and (leaked is None or not leaked(error)):
        return None
    plan = StatePlan(target.user_f)
    captured = [
        where for where, value in zip(plan.where(), plan.read()) if isinstance(value, (list, dict)) or is_array(value)
    ]
    if not captured:
        return None
    first_line = _first_line(error)
    if kind is None:
        kind = TypeError if isinstance(error, TypeError) else ValueError
    return kind(
        f"{target.call}: with closure='const', f writes into its own captured state ({', '.join(captured)}), "
        f"where {engine} cannot carry a value that depends on x ({first_line}); the derivative through it "
        f"would be lost. Use closure='duplicated' (the default): f then writes into duplicates that carry "
        f"derivatives, and your objects stay as they were."
    )


def _holds_standin(frame: Any) -> bool:
    return any(isinstance(v, WritableArray) for v in frame.f_locals.values())


def standin_error(target: Any, error: BaseException, engine: str) -> Exception | None:
    """The error for ``f`` passing a writable stand-in (what ``f`` gets for a captured array it
    writes into, a ``Cache`` or an output buffer under JAX and autograd) to a library function that
    wants the engine's own array: it names the captured arrays and says what to write instead.
    Recognised by mechanism, not message: a stand-in's conversion hook ran (``take_conversion``:
    this engine's mark only), its own ``StandInConversionError`` was raised, or a frame of library
    code (not ``f``'s, not this package's stand-in methods) in the traceback holds a stand-in. None
    otherwise."""
    converted = take_conversion(engine)
    if not converted and not raised_by(error, lambda e: isinstance(e, StandInConversionError)):
        frames = [
            fr
            for fr in _frames(error)
            if not _in_user_code(fr) and not fr.f_globals.get("__name__", "").startswith("diffinterface")
        ]
        if not any(_holds_standin(fr) for fr in frames):
            return None
    plan = getattr(target, "plan", None)
    captured = [where for where, value in zip(plan.where(), plan.read()) if is_array(value)] if plan is not None else []
    what = ", ".join(captured) if captured else "a Cache context or the output buffer y"
    first_line = _first_line(error)
    kind = TypeError if isinstance(error, TypeError) else ValueError
    return kind(
        f"{target.call}: f passes an array it writes into ({what}) to a function that needs a plain "
        f"{engine} array ({first_line}). Under {engine} such arrays reach f as writable stand-ins, "
        f"whose writes are functional updates. {_read_first(engine)}"
    )


def _read_first(engine: str) -> str:
    if engine == "JAX":  # a slice of a stand-in is a view (a stand-in too), as numpy's; JAX takes neither
        return (
            "Read the current value first: jnp.asarray(buf) or xp.asarray(buf) gives the JAX array "
            "(jnp.sin(jnp.asarray(buf))); a slice such as buf[1:3] is a view of buf, as in numpy, and is read "
            "the same way (jnp.asarray(buf[1:3])); arithmetic and @ take the stand-in as it is."
        )
    if engine == "autograd":  # numpy's functions reach autograd's through numpy's dispatch; this one has none
        return (
            "autograd.numpy's functions (anp.sin(buf)), numpy's, arithmetic and the array API namespace take "
            "the stand-in and keep its derivative; this function has no autograd version, so a value that "
            "depends on x cannot pass through it: write that part with autograd.numpy, or give it a custom "
            "rule (diffinterface.rules)."
        )
    return (
        f"Read the current value first: xp.asarray(buf) gives the {engine} array; arithmetic, indexing "
        f"and the array API namespace take the stand-in as it is."
    )


def _over_const_guards(
    target: Any,
    plan: StatePlan,
    values: list[Any],
    arrays: list[int],
    run: Callable[[], Any],
    rebinding: Callable[[Any], bool],
    engine: str,
) -> Callable[[], Any]:
    """``run`` with ``f`` rebuilt over :class:`ConstGuardView` s of its captured numpy arrays (the
    user's memory, and every other value as it is: ``plan.transparent``), put back afterwards: a
    write of ``f`` into one (an in-place operator, item assignment, ``out=``, ``np.copyto``) of the
    engine's value (``rebinding``: a traced value; any TensorFlow tensor or MLX array) raises the
    call's error."""
    where = plan.where()
    guarded = list(values)
    duplicated = (
        "Use closure='duplicated' (the default): f then writes into duplicates that carry derivatives, and "
        "your objects stay as they were."
    )
    for i in arrays:
        rebound = (
            f"{target.call}: with closure='const', f writes a {engine} value into its own captured array "
            f"({where[i]}) with {{how}}; numpy hands that to the {engine} value's own operator, which leaves "
            f"the array unchanged, so what f writes there, and the derivative through it, would be lost "
            f"without an error. {duplicated}"
        )
        written = (
            f"{target.call}: with closure='const', f writes into its own captured state ({where[i]}), where "
            f"{engine} cannot carry a value that depends on x ({{how}} of a {engine} value: numpy writes its "
            f"values alone); the derivative through it would be lost. {duplicated}"
        )
        guarded[i] = const_guard(values[i], rebinding, rebound, written)
    fn = plan.rebuild(guarded)

    def guarded_run() -> Any:
        user_f, f = target.user_f, target.f
        target.user_f, target.f = fn, target.over(fn)
        try:
            return run()
        except Exception as error:
            found: list[BaseException] = []

            def guards(e: BaseException) -> bool:
                if isinstance(e, ConstTracedWrite):
                    found.append(e)
                    return True
                return False

            if raised_by(error, guards):  # the call's error, as the other const errors
                kind = ValueError if cast("ConstTracedWrite", found[0]).rebound else TypeError
                raise kind(str(found[0])) from None
            raise
        finally:
            target.user_f, target.f = user_f, f

    return guarded_run


def const_trace_checked(
    target: Any,
    run: Callable[[], Any],
    traced: Callable[[Any], bool] | None,
    engine: str,
    rebinding: Callable[[Any], bool] | None = None,
) -> Any:
    """``run()`` (an engine's first trace of ``f``, at preparation) under ``closure="const"``, with
    the lists and dicts ``f`` captures checked afterwards: a traced value (a JAX tracer, an autograd
    box) that ``f`` wrote into one would outlive the call and fail later, far from its cause. Then
    their contents are put back and the error names them (contract section 7). Also put back when
    ``run`` raises (no check where ``traced`` is None: an engine whose values outlive no call).
    Its numpy arrays reach ``f`` in this trace as :class:`ConstGuardView` s, where ``f``'s functions
    allow it (``StatePlan.transparent``): a write of the engine's value into one (``rebinding``, the
    adapter's ``rebinding_operand``; its ``traced`` where it has none), by an in-place operator (which
    numpy hands to the value's own operator), item assignment, ``out=`` or ``np.copyto``, is the
    call's error, not a silent zero. Discovery runs at preparation only; prepared calls pay nothing."""
    plan = StatePlan(target.user_f)
    values = plan.read()
    containers = [(where, v) for where, v in zip(plan.where(), values) if isinstance(v, (list, dict))]
    arrays = [i for i, v in enumerate(values) if type(v) is np.ndarray]
    test = rebinding or traced
    if arrays and plan.transparent and test is not None:  # f over guards of its numpy arrays (ConstGuardView)
        run = _over_const_guards(target, plan, values, arrays, run, test, engine)
    if not containers or traced is None:
        return run()
    saved = [copy.copy(v) for _, v in containers]

    def restore() -> None:
        for (_, v), old in zip(containers, saved):
            if isinstance(v, list):
                v[:] = old
            else:
                v.clear()
                v.update(old)

    try:
        out = run()
    except BaseException:
        restore()
        raise
    leaked = [where for where, v in containers if any_leaf(v, traced)]
    if leaked:
        restore()
        raise ValueError(
            f"{target.call}: with closure='const', f writes a value that depends on x into its own captured "
            f"state ({', '.join(leaked)}), where a {engine} trace would outlive the call; your objects have been "
            f"put back as they were. Use closure='duplicated' (the default): f then writes into duplicates "
            f"that carry derivatives, and your objects stay as they were."
        )
    return out
