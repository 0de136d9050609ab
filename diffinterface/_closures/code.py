"""What the closure walk reads of a function's code: whether it writes captured state, and which
module globals it names (``walk.Walker`` asks :func:`code_facts` for every function it walks).
"""

from __future__ import annotations

import dis
import functools
import sys
import types
import weakref
from typing import Any

# Opcodes that rebind a captured name or write an attribute: a function with one of them may change
# its captured state even where every captured value is immutable. A function without any, whose
# captured values are all immutable, is called as it is (``StatePlan.read_only``: no duplicate, the
# prepared fast path of every engine); one with any is rebuilt over duplicates at every call.
#
# Why the compiled code is read, and not something else: Python keeps no other record of which
# captured names a function rebinds. ``co_freevars`` and ``co_names`` list the names a function
# reads and writes alike; ``nonlocal`` and ``global`` leave no flag on the code object;
# ``symtable`` needs the source, which lambdas, ``exec``'d code and notebooks lack or misreport;
# and the engines' own mechanisms (``jax.tree_util``, ``torch.func.functional_call``) see arrays
# in pytrees and modules, not Python cells and globals. The instructions are the compiler's own
# record of the writes, read through ``dis``, the standard library's documented interface to them
# (these six opnames exist under the same names from Python 3.10 on; their numbers come from
# ``dis.opmap``, and the code units of ``co_code`` are two bytes, the opcode first, so the opcodes
# are ``co_code[::2]``: a set test in C, 0.8 us where iterating ``dis.get_instructions`` took 250 us
# a function, measured 2026-11-25 on a 2-core x86_64 VM under load, and the same answer on 1,719
# code objects of the standard library and numpy). Without the scan, either
# every function capturing a number would be duplicated at every call (measured 2026-11-24 on a
# 2-core x86_64 VM, no GPU: a prepared gradient, n = 10, of an f capturing one float costs 1.95x
# on finite differences and 1.77x on torch), or a function that rebinds
# one (``nonlocal n; n += 1``) would change the user's cell, and finite differences would see a
# different ``f`` at each point.
#
# Its limit: a write that is a call, not an instruction, is not seen: ``setattr(module, "n", v)``,
# ``globals()["n"] = v``, ``vars(obj).update(...)`` on a captured number's holder. Such an ``f`` runs
# over the user's own state and the derivative of a finite difference through it is wrong (each
# point sees another ``n``); ``closure="duplicated"`` promises nothing for state reached that way.
_STORES = frozenset({"STORE_DEREF", "DELETE_DEREF", "STORE_GLOBAL", "DELETE_GLOBAL", "STORE_ATTR", "DELETE_ATTR"})
_STORE_OPCODES = frozenset(dis.opmap[name] for name in _STORES)


# The instructions that name a module global (``LOAD_NAME`` and its kin: class bodies and exec'd
# code), each with the shift of its argument: from Python 3.11 on, ``LOAD_GLOBAL``'s argument is the
# name's index times two (its low bit pushes a NULL), as ``dis``' documentation of it says.
# ``co_names`` alone also holds every attribute name (``np.sin``, ``model.w``): a global of the same
# name (``sin = pt.sin``, an array ``w``) was walked as if ``f`` read it, and where it was state,
# duplicated at every call.
_GLOBAL_OPS = {
    dis.opmap[name]: 1 if name == "LOAD_GLOBAL" and sys.version_info >= (3, 11) else 0
    for name in (
        "LOAD_GLOBAL",
        "STORE_GLOBAL",
        "DELETE_GLOBAL",
        "LOAD_NAME",
        "STORE_NAME",
        "DELETE_NAME",
        "LOAD_FROM_DICT_OR_GLOBALS",
    )
    if name in dis.opmap
}
_EXTENDED_ARG = dis.EXTENDED_ARG


# ``_GLOBAL_OPS`` as a ``bytes.translate`` table: 1 at a global-name opcode, 0 elsewhere
_GLOBAL_TABLE = bytes(1 if op in _GLOBAL_OPS else 0 for op in range(256))


def _code_names(code: types.CodeType) -> set[str]:
    """The module globals ``code`` (and the code nested in it: lambdas, comprehensions, inner
    functions) reads or writes (see :func:`_read`)."""
    names: set[str] = set()
    _read(code, names)
    return names


def _read(code: types.CodeType, names: set[str]) -> bool:
    """Whether ``code`` (or code nested in it) writes captured state (an opcode of ``_STORES``), the
    module globals it names added to ``names``: the arguments of its global-name instructions, read
    from ``co_code`` in one pass over its opcodes with the store test (two-byte code units,
    ``EXTENDED_ARG`` prefixes: ``dis``' own decoding without an ``Instruction`` per unit; the same
    names as ``dis`` on the standard library under Python 3.10 to 3.13, tested against it). A code
    without names has none to read; one without ``EXTENDED_ARG`` (a function of fewer than 256
    names, constants and jumps) is searched in C: its opcodes translated to marks of the global-name
    ones, found one by one (1.0 us a small function where a Python loop over its units took 4.8, and
    1.0 where it took 10.0 for ``json.dumps``; ``dis.get_instructions`` takes 37; measured 2026-11-28
    on a 2-core x86_64 VM, under load). One pass for both facts, not one each (a new lambda's record,
    2.5 -> 2.0 us, measured 2026-12-07 on a 2-core AMD EPYC VM)."""
    units = code.co_code
    ops = units[::2]
    stores = not _STORE_OPCODES.isdisjoint(ops)
    co_names = code.co_names
    if co_names:
        if _EXTENDED_ARG in ops:
            extended = 0
            for i in range(0, len(units), 2):
                op, arg = units[i], units[i + 1] | extended
                if op == _EXTENDED_ARG:
                    extended = arg << 8
                    continue
                extended = 0
                shift = _GLOBAL_OPS.get(op)
                if shift is not None:
                    names.add(co_names[arg >> shift])
        else:
            marks = ops.translate(_GLOBAL_TABLE)
            i = marks.find(1)
            while i >= 0:
                names.add(co_names[units[2 * i + 1] >> _GLOBAL_OPS[ops[i]]])
                i = marks.find(1, i + 1)
    for const in code.co_consts:
        if type(const) is types.CodeType:
            stores = _read(const, names) or stores
    return stores


# id(code object) -> its record: a weak reference to it and its facts (whether it stores, the global
# names it reads, sorted): what the walk reads of a function's code, kept because a loop that writes a
# lambda meets the same code at every call (1.5 us of a 5 us walk of a small function). Kept by
# identity, held weakly and dropped with the code: a code run once (exec'd code, a function of a new
# code at every call) leaves nothing behind, where a cache that held it kept its summary and the
# caches' entries for it alive too, objects that the garbage collector's full passes then walked
# (about 9 us a call in a loop of new codes with torch's heap, measured 2026-12-07 on a 2-core x86_64
# VM). Equal codes that are distinct objects (the same source exec'd twice, an unpickled function)
# each have their own. A record's ``mark`` is the prep cache's, which lives as long as the code
# (``PrepCache.over_state`` counts a code's first function there), and its ``summary`` the closure
# walk's (``summaries.Summary``), which goes with it.


class CodeRecord:
    """What is kept of one code object while it lives (see above)."""

    __slots__ = ("owner", "facts", "mark", "summary")

    def __init__(self, code: types.CodeType) -> None:
        self.owner = weakref.ref(code, functools.partial(_forget, id(code)))
        names: set[str] = set()
        stores = _read(code, names)
        self.facts = (stores, tuple(sorted(names)))
        self.mark: object = None
        # the closure walk's summary of the code's functions (``summaries.Summary``), where it keeps one:
        # it lives and goes with the record, under the record's weak reference to the code
        self.summary: Any = None


RECORDS: dict[int, CodeRecord] = {}


def _forget(key: int, owner: weakref.ref[types.CodeType]) -> None:
    """A code's record leaves the table with it (a weak reference's callback)."""
    kept = RECORDS.get(key)
    if kept is not None and kept.owner is owner:
        RECORDS.pop(key, None)


def code_record(code: types.CodeType) -> CodeRecord:
    """The record of ``code``, made at its first reading."""
    kept = RECORDS.get(id(code))
    if kept is not None and kept.owner() is code:
        return kept
    kept = RECORDS[id(code)] = CodeRecord(code)
    return kept


def code_facts(code: types.CodeType) -> tuple[bool, tuple[str, ...]]:
    """Whether ``code`` writes captured state (:func:`_read`), and the module globals it names, sorted."""
    kept = RECORDS.get(id(code))
    if kept is not None and kept.owner() is code:
        return kept.facts
    return code_record(code).facts
