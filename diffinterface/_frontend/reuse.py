"""Preparation that users never write: the cache behind every call made without ``prep=``.

Most users call ``gradient(backend, f, x)`` in a loop and never read about ``prepare_*``. JAX's own
``jit`` caches a compiled function by the function object; this does the same for a whole preparation:

- the key is what makes a preparation valid (contract section 4): the function object, held weakly;
  the operator; the backend config (compared by value: ``AutoJAX()`` written anew in each call is
  the same backend); and each argument's type, shape and dtype (x, the tangent or the tuple of
  tangents, ``y``, the contexts), as :func:`diffinterface._frontend.prep.signature` describes them;
- the first two calls with a key run as an unprepared call always ran (a one-shot preparation, no
  compilation), and only count: a function called once or twice, or a fresh lambda in each
  iteration of a loop, is never charged for a compilation it would not reuse. Two, not one: a JAX
  compilation costs about a hundred eager calls at small sizes, and code that calls a function
  exactly twice (a check, a test, a value at two points) is common, where a loop shows itself by
  its third call (measured: a test harness's two calls of each scenario under JAX, 25 ms one-shot,
  313 ms when the second compiled);
- the third call prepares (``prepare_<operator>`` with ``strict=True``) and keeps the preparation;
  from then on a call runs the prepared fast path, whose strict check still runs;
- the entries of a function are held by the function itself, so they die with it (a preparation
  holds its function: a cache beside it would keep every function alive), and the cache holds at
  most ``max_functions`` functions and ``max_keys`` keys per function (the oldest go first); only
  Python functions (``def``, ``lambda``, closures) are kept, other callables run unprepared. A
  function's first call leaves only its key on the function (:class:`_First`: nothing registered,
  nothing evicted), so a loop that writes a new lambda at every call pays one dict store for it;
- the state ``f`` captures is read at every call, as on any prepared path (contract section 7), so a
  rebound global array or a written buffer is seen; what else ``f``'s slots hold (the helpers it calls,
  flags: what a tracing engine compiled, what torch's watch judged) is checked before a kept prep
  serves a call (``Prep.slots``, :mod:`diffinterface._closures.slots`): where one was rebound, the prep
  is dropped (``stale``) and the key counted anew, and the calls counted are of ``f`` as it is (a loop
  that rebinds a helper at every call runs unprepared);
- a new function of a code already seen shares the preparation its code was given (:meth:`PrepCache.shared`):
  where the closure walk's summary of the code holds for it (the very same objects in its closure cells,
  defaults and the globals its code reads) and is ``closed`` (no user module, class or object among them),
  the function is the one an earlier function of that code was, as far as any call can tell, so the
  prep made for that one serves it. Such calls are counted by code and key as a function's calls
  are: the first new function's walk makes the code's summary, the next two run unprepared, the one
  after prepares (for a private copy of itself, :meth:`PrepCache.shared_copy`: cells and defaults of
  its own, which no later rebinding of the original's reaches) and the cache keeps that prep, and
  later new functions of the code take the prepared path: a lambda written anew at each iteration of
  a loop (``gradient(backend, lambda x: loss(x), x)``) runs at the prepared call's speed from its
  fourth iteration, where JAX's own ``jit`` of a new lambda traces and compiles again. A function served
  this way is not marked (its next call is served the same way, a summary check and one dict read
  more than a kept prep's fast path). The preps shared by code are held by the cache (with the
  function each was made for: at most ``max_functions`` keys of codes, the oldest go first);
- a new function with state of its own (``lambda p: loss(p, batch)`` written for each batch: no
  summary, its walk found state) shares its code's preparation *over state* (:meth:`PrepCache.over_state`):
  counted by code, key and the objects its cells and defaults hold besides state (``own_objects``; a
  code's first function by a mark on its code's record, so a code met once costs no entry), the
  third prepares for a private copy (``Prep.slots`` made for it), and each
  later one is run by :meth:`PrepCache.serve_over_state`, which puts its cell contents and defaults
  into the copy, checks that the copy's slots then hold what they held besides state, and runs the
  prep under the entry's lock (the copy is one; a thread that finds it busy runs unprepared). Only for
  a code that stores nothing and reaches no user's object (``Slots.closed``), and for plain calls
  (``run`` runs them: no value form, ``out=``, contexts or has_aux);
- it is off for a backend config built with ``reuse_prep=False``, and process-wide with
  ``diffinterface.prep_cache.enabled = False`` (or the environment variable
  ``DIFFINTERFACE_REUSE_PREP=0`` at import).

``diffinterface.prep_cache`` counts what happened (``hits``, ``misses``, ``builds``; ``shared_hits``: the hits of
a new function served by its code's prep; ``stale``: the kept preps dropped for a rebound slot) for tests
and for users who want to know; ``clear()`` forgets everything.

Size: over 400 lines in one module, because one cache: a function's own preparations and the ones its
code shares are found, counted, bounded and cleared together, under one lock and one token.
"""

from __future__ import annotations

import functools
import os
import threading
import types
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from .._closures import summaries
from .._closures.code import RECORDS as CODE_RECORDS
from .._closures.code import code_record
from .._closures.slots import Slots, own_objects, slots_of
from .prep import Prep, signature

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._core.configs import Backend
    from .._core.operators import Operator

_HELD = "__diffinterface_preps__"  # the attribute of a function that holds its kept preparations
# the key of a code's summary (``Summary.learned``) that holds the prep its new functions shared last,
# for ``PrepCache.serving``: ``(the cache's token, a weak reference)``; the prep is held by the cache
# (``_shared``), and a clear() makes a new token
_LAST_SHARED = "diffinterface: the prep the code's new functions shared last"


class _Entry:
    """One key of one function: how many calls ran without a prep, and its prep once made; for a code's
    shared prep (:meth:`PrepCache.shared`), the summary of the code its functions were checked by. ``slots``:
    what the function's slots held at the calls counted (:meth:`PrepCache.seen`)."""

    __slots__ = ("prep", "calls", "summary", "slots")

    def __init__(self, summary: summaries.Summary | None = None) -> None:
        self.prep: Prep | None = None
        self.calls = 1
        self.summary = summary
        self.slots: Slots | None = None


class _OverState:
    """A code's prep shared by its new functions over other state (:meth:`PrepCache.over_state`): how many
    calls counted, the prep once made, the private copy of a function it was made for (whose cells and
    defaults take each served function's at its call), and the lock a served call holds (the copy is
    one). ``prep`` is False where the code cannot share (it writes a captured name, or reaches a user's
    object). The lock is made with the prep (:meth:`PrepCache.keep_over_state`): an entry that only counts
    has none."""

    __slots__ = ("calls", "prep", "copy", "lock")

    def __init__(self) -> None:
        self.calls = 1
        self.prep: Prep | None | bool = None
        self.copy: types.FunctionType | None = None
        self.lock: threading.Lock | None = None


class _CodeOverState:
    """A code's :class:`_OverState` entries by (key, objects held besides state), with a weak reference
    to the code that drops them from the cache's table with it (``PrepCache._over_state``, by the
    code's id): a code never run again leaves nothing that outlives it."""

    __slots__ = ("owner", "entries")

    def __init__(self, code: types.CodeType, table: dict[int, _CodeOverState]) -> None:
        self.owner = weakref.ref(code, functools.partial(_drop_code, table, id(code)))
        self.entries: dict[Any, _OverState] = {}


def _drop_code(table: dict[int, _CodeOverState], key: int, owner: weakref.ref[types.CodeType]) -> None:
    """A code's entries leave the over-state table with it (a weak reference's callback: one dict
    operation, no lock: it may run while the cache's lock is held, by a collection inside it)."""
    kept = table.get(key)
    if kept is not None and kept.owner is owner:
        table.pop(key, None)


NOT_SERVED = object()  # what PrepCache.serve_over_state returns where it did not run the call


class NoSummary:
    """The type of :data:`NO_SUMMARY`."""

    __slots__ = ()


NO_SUMMARY = NoSummary()  # what PrepCache.shared returns for a function no summary of its code holds for


class _First(tuple[Any, ...]):
    """``(owner, key, token)``: the key of a function's first call without ``prep=``, left on the
    function itself (``f.__dict__``) and nowhere else: it dies with ``f``, and a second call turns it
    into a :class:`_Held`. ``owner`` is ``id(f)``: a wrapper that ``functools.wraps`` gave a copy of
    ``f.__dict__`` has another id (it lives while ``f`` does), so it does not count ``f``'s call.
    ``token`` is the cache's at the time (:meth:`PrepCache.clear` makes a new one: the marks it
    cannot reach are forgotten all the same, and another cache's are not its own). A tuple: made at
    every new function's first call, without a Python ``__init__``."""

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Held, (None,))  # as a held cache pickles: empty, counting nothing


class _Held:
    """The keys and preparations of one function, held by the function itself (``f.__dict__``).

    A preparation holds ``f`` (its target calls it, its compiled program closes over it), so a cache
    outside ``f`` would keep every function alive; held by ``f``, they form one cycle that the garbage
    collector frees with ``f``. ``owner`` tells the function it was made for (``functools.wraps`` copies
    a function's ``__dict__`` into its wrapper), and a held cache pickles as an empty one (a function
    sent to a process pool or a Dask worker carries no compiled program)."""

    __slots__ = ("owner", "keys", "last", "__weakref__")

    def __init__(self, owner: Any) -> None:
        self.owner = weakref.ref(owner) if owner is not None else None
        self.keys: OrderedDict[Any, _Entry] = OrderedDict()
        self.last: Prep | None = None  # the prep of the latest hit or build: tried first (PrepCache.latest)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Held, (None,))


def _detach(held: _Held) -> None:
    """Forget ``held``: its keys, and its place on its function."""
    held.keys.clear()
    held.last = None
    owner = held.owner() if held.owner is not None else None
    if owner is not None and owner.__dict__.get(_HELD) is held:
        del owner.__dict__[_HELD]


def _fast_match(
    prep: Prep, operator: Operator, backend: Backend, f: Any, x: Any, tangent: Any, holomorphic: bool
) -> bool:
    """Whether ``prep`` serves a call of ``f`` with ``x`` alone, or with one tangent of ``x``'s own array
    type, by its ``fast_key`` (operator, backend, ``f``, the arrays' types, shapes and dtypes: one tuple
    comparison), a flat prep for the same ``holomorphic``."""
    key, attr = prep.fast_key, prep.key_attr
    kind = type(x)
    if key is None or kind is not key[3] or prep.structured or prep.holomorphic != holomorphic:
        return False
    if attr is not None:  # each array's key attribute (JAX's aval) in place of its shape and dtype
        if tangent is None:
            return (operator, backend, f, kind, getattr(x, attr)) == key
        return (
            type(tangent) is kind
            and (operator, backend, f, kind, getattr(x, attr), kind, getattr(tangent, attr)) == key
        )
    if tangent is None:
        return (operator, backend, f, kind, x.shape, x.dtype) == key
    return type(tangent) is kind and (
        (operator, backend, f, kind, x.shape, x.dtype, kind, tangent.shape, tangent.dtype) == key
    )


class PrepCache:
    """The preparations of calls made without ``prep=``; the process has one, :data:`prep_cache`.

    They are kept by function and by what a preparation depends on (see the module's docstring).

    Example:

        >>> f = lambda x: (x ** 2).sum()
        >>> di.prep_cache.clear()
        >>> for k in range(4):  # two one-shot calls, then prepared and kept, then reused
        ...     g = di.gradient(di.AutoFiniteDiff(), f, np.full(3, float(k)))
        >>> (di.prep_cache.misses, di.prep_cache.builds, di.prep_cache.hits)
        (3, 1, 1)
    """

    def __init__(self, max_functions: int = 256, max_keys: int = 8, after: int = 2) -> None:
        self.enabled = os.environ.get("DIFFINTERFACE_REUSE_PREP", "1") not in ("0", "false", "False", "no")
        self.max_functions, self.max_keys = max_functions, max_keys
        self.after = after  # one-shot calls with a key before the next one prepares
        self.hits = self.misses = self.builds = self.shared_hits = self.stale = 0
        self._lock = threading.Lock()
        self._token = object()  # what this cache's first-call marks (_First) carry; new at clear()
        self._held: OrderedDict[int, weakref.ref[_Held]] = OrderedDict()  # every function's, oldest first
        # (the summary of a code, key) -> its new functions' calls and the prep they share (shared)
        self._shared: OrderedDict[tuple[summaries.Summary, Any], _Entry] = OrderedDict()
        # id(a code) -> its entries by (the call's key, the objects its functions hold besides state): the
        # prep its new functions over other state share (over_state), dropped with the code
        self._over_state: OrderedDict[int, _CodeOverState] = OrderedDict()

    def __repr__(self) -> str:
        return (
            f"PrepCache(enabled={self.enabled}, functions={self.functions}, preparations={len(self)}, "
            f"hits={self.hits}, misses={self.misses}, builds={self.builds}, shared_hits={self.shared_hits}, "
            f"stale={self.stale})"
        )

    def _alive(self) -> list[_Held]:
        return [h for h in (ref() for ref in list(self._held.values())) if h is not None]

    @property
    def functions(self) -> int:
        """The number of functions with kept keys (alive): those called twice or more without ``prep=``
        (a first call leaves its key on the function alone, :class:`_First`)."""
        return len(self._alive())

    def __len__(self) -> int:
        """The number of preparations held (a function's own, and those its code's new functions share)."""
        own = sum(1 for held in self._alive() for e in list(held.keys.values()) if e.prep is not None)
        over_state = sum(
            1
            for kept in list(self._over_state.values())
            for o in list(kept.entries.values())
            if isinstance(o.prep, Prep)
        )
        return own + sum(1 for e in list(self._shared.values()) if e.prep is not None) + over_state

    def clear(self) -> None:
        """Forget every preparation and reset the counters."""
        with self._lock:
            for held in self._alive():
                _detach(held)
            self._held.clear()
            self._shared.clear()
            self._over_state.clear()
            self._token = object()
            self.hits = self.misses = self.builds = self.shared_hits = self.stale = 0

    @staticmethod
    def key(operator: Operator, backend: Backend, args: tuple[Any, ...], holomorphic: Any) -> Any:
        """What a preparation of ``operator`` depends on besides ``f``; None where it cannot be told
        (an argument whose description is not hashable). ``holomorphic`` stands for the call's options:
        the flag, or ``(holomorphic, has_aux)`` for a has_aux call."""
        key: Any
        if len(args) == 1:  # x alone, the common case: no signature tuple built
            x = args[0]
            shape = getattr(x, "shape", None)
            if shape is not None:
                key = (operator, backend, holomorphic, type(x), shape, x.dtype)
            else:
                key = (operator, backend, holomorphic, signature(x))
        elif len(args) == 2 and hasattr(args[0], "shape") and hasattr(args[1], "shape"):  # x and one tangent
            x, t = args
            key = (operator, backend, holomorphic, type(x), x.shape, x.dtype, type(t), t.shape, t.dtype)
        else:
            key = (operator, backend, holomorphic, tuple(signature(a) for a in args))
        try:
            hash(key)
        except TypeError:
            return None
        return key

    @staticmethod
    def _held_by(f: Callable[..., Any]) -> _Held | None:
        held = f.__dict__.get(_HELD) if type(f) is types.FunctionType else None
        if type(held) is not _Held or held.owner is None or held.owner() is not f:
            return None
        return held

    def latest(
        self,
        operator: Operator,
        backend: Backend,
        f: Callable[..., Any],
        args: tuple[Any, ...],
        holomorphic: bool,
        has_aux: bool = False,
    ) -> Prep | None | bool:
        """The prep of ``f``'s latest hit (a Python function), where it serves these arguments as they
        are (the same operator, backend object and options, arrays of its types, shapes and dtypes:
        ``Prep.serves``); ``False`` where ``f`` holds nothing of this cache (its first call without
        ``prep=``: nothing to find, :meth:`seen` leaves its mark); else None. A loop that calls ``f``
        the same way finds its prep here without building a key (2-3 us of a 7 us JAX gradient at
        n = 10); any other call looks it up by key (:meth:`find`), a has_aux call always."""
        held = f.__dict__.get(_HELD)
        if held is None:
            return False
        if has_aux or type(held) is not _Held or held.owner is None or held.owner() is not f:
            return None
        last = held.last
        if last is None or not last.serves(operator, backend, f, args, holomorphic) or not self._holds(f, last):
            return None
        self.hits += 1
        return last

    def serving(
        self, operator: Operator, backend: Backend, f: Callable[..., Any], x: Any, tangent: Any, holomorphic: bool
    ) -> Prep | None:
        """The prep of ``f``'s latest hit where it serves a call with ``x`` alone, or with one tangent
        of ``x``'s own array type, by its ``fast_key`` (the prepared fast path's one tuple comparison:
        operator, backend, ``f``, the arrays' types, shapes and dtypes), a flat prep for the same
        ``holomorphic``; else None (:meth:`latest` decides, for any other call). A kept prep's
        backend allows reuse (``reusable``: configs are frozen, and equal ones answer alike); the
        process-wide switch is read here. A loop that calls
        ``f`` the same way: one dict read and one comparison (0.5 us of a PyTensor gradient's 4.5 at
        n = 10 before, through :meth:`latest`)."""
        if type(f) is not types.FunctionType or not self.enabled:
            return None
        held = f.__dict__.get(_HELD)
        if held is None:  # a new function: its code's latest shared prep, where it serves it (shared)
            return self._serving_shared(operator, backend, f, x, tangent, holomorphic)
        if type(held) is not _Held:
            return None
        last = held.last
        if last is None or held.owner is None or held.owner() is not f:
            return None
        if not _fast_match(last, operator, backend, f, x, tangent, holomorphic) or not self._holds(f, last):
            return None
        self.hits += 1
        return last

    def _serving_shared(
        self, operator: Operator, backend: Backend, f: types.FunctionType, x: Any, tangent: Any, holomorphic: bool
    ) -> Prep | None:
        """:meth:`serving` for a new function: the latest prep its code shared (:meth:`shared`), by
        the same fast key (the function aside: the prep's is the code's private copy), where the
        code's summary holds for ``f`` and ``f`` reads the same module globals. A loop that writes a
        new lambda at every call: a dict read, a weak reference, one comparison and the summary's
        check of ``f``'s slots."""
        code = f.__code__
        record = CODE_RECORDS.get(id(code))  # (its owner is checked below, as the summary's)
        summary = record.summary if record is not None else None
        if summary is None:
            return None
        found = summary.learned.get(_LAST_SHARED)  # (the cache's token, a weak reference to the prep)
        if found is None or found[0] is not self._token:  # none, or left before a clear()
            return None
        last = found[1]()
        if last is None or summary.owner() is not code:
            return None
        made_for = last.f
        if not _fast_match(last, operator, backend, made_for, x, tangent, holomorphic):
            return None
        if made_for.__globals__ is not f.__globals__ or not summary.holds(f, set()):
            return None
        self.hits += 1
        self.shared_hits += 1
        return last

    @staticmethod
    def new_function(f: types.FunctionType) -> bool:
        """Whether ``f`` holds nothing of any cache: its first call without ``prep=`` (or a function
        its code's shared prep served, which it leaves unmarked: see :meth:`shared`)."""
        return _HELD not in f.__dict__

    def first(self, f: types.FunctionType, key: Any) -> bool:
        """For a new function (:meth:`new_function`), its mark (:class:`_First`) with the call's
        ``key`` (:meth:`key`), and True: the call runs one-shot, with nothing to look up. False where
        another thread's first call marked it meanwhile: :meth:`latest`, :meth:`find` and
        :meth:`seen` decide. What a new lambda in a loop costs the cache (a first call made four
        before)."""
        if key is None:
            return True  # a key that does not hash: never kept (as seen() would not)
        with self._lock:
            if _HELD in f.__dict__:  # another thread's first call meanwhile: the long way
                return False
            self.misses += 1
            f.__dict__[_HELD] = _First((id(f), key, self._token))
        return True

    def shared(self, f: types.FunctionType, key: Any) -> Prep | _Entry | NoSummary | None:
        """For a new function (no mark of its own): the prep its code keeps for ``key``, where the code's
        summary holds for ``f``, is closed and stores nothing (see the module docstring), and ``f``
        reads the module globals the prep's function reads; else None, after counting the call for
        the code, or the code's entry where this is the third new function with ``key`` (the caller
        prepares for :meth:`shared_copy` of ``f`` and calls :meth:`keep_shared`). :data:`NO_SUMMARY`
        where no summary of its code holds for ``f`` (state, or one made for other objects: the caller
        may share over state, :meth:`over_state`)."""
        summary = summaries.summary_of(f)
        if summary is None or not summary.holds(f, set()):
            return NO_SUMMARY  # not a function of a code seen stateless over these same objects
        if not summary.closed or summary.stores:
            return None  # one that reaches a user's object, or writes
        where = (summary, key)
        with self._lock:
            shared = self._shared
            entry = shared.get(where)
            if entry is None:
                shared[where] = _Entry(summary)
                if len(shared) > self.max_functions:  # the oldest code's first
                    shared.popitem(last=False)
                return None
            prep = entry.prep
            if prep is not None:
                # made for a private copy of a function of this code over these objects (shared_copy: its
                # cells and defaults are its own, unchanged), reading the same module globals
                if prep.f.__globals__ is f.__globals__:
                    self.hits += 1
                    self.shared_hits += 1
                    summary.learned[_LAST_SHARED] = (self._token, weakref.ref(prep))  # for serving
                    return prep
                return None  # the same code run in another module's globals: its own calls
            if entry.calls >= self.after:
                self.misses += 1
                return entry
            entry.calls += 1
            return None

    def over_state(self, f: types.FunctionType, key: Any) -> _OverState | None:
        """For a new function with state (``lambda p: loss(p, batch)`` written anew for each batch, the
        batch in a closure cell, a default or a module global): the entry of its code and
        ``key`` where it holds a prep (the caller runs it with :meth:`serve_over_state`) or where this
        is the third new function of the code with ``key`` (the caller prepares for
        :meth:`shared_copy` of ``f`` and calls :meth:`keep_over_state`); else None, after counting the call.

        Kept by the code's identity, held weakly (:class:`_CodeOverState`): a code's entries go with it,
        so a code run once (a function of a new code) leaves nothing that outlives it. A code's first
        function is counted in its code's record (:func:`code_record`, which the closure walk reads
        of every function it walks and keeps while the code lives), not by an entry: a code met once
        costs none; the code's next new function makes its entries, that count first."""
        code = f.__code__
        own = own_objects(f)  # the functions of one code around other helpers: entries of their own
        if own is None:
            return None
        where = (key, own)
        with self._lock:
            kept = self._over_state.get(id(code))
            if kept is None or kept.owner() is not code:
                record = code_record(code)
                mark = record.mark
                if type(mark) is not tuple or mark[0] is not self._token:  # its first function (this cache's)
                    record.mark = (self._token, where)
                    return None
                record.mark = None
                kept = self._over_state[id(code)] = _CodeOverState(code, self._over_state)
                if len(self._over_state) > self.max_functions:  # the code met least recently first
                    self._over_state.popitem(last=False)
                kept.entries[mark[1]] = _OverState()  # the first function's count
            else:
                self._over_state.move_to_end(id(code))  # a code in use stays (every new code is counted here)
            entries = kept.entries
            over = entries.get(where)
            if over is None:
                entries[where] = _OverState()
                if len(entries) > self.max_keys:  # the oldest key first
                    del entries[next(iter(entries))]
                return None
            if over.prep is False:
                return None
            if over.prep is not None:
                return over
            if over.calls >= self.after:
                over.calls = -1  # one caller prepares (another thread meanwhile: unprepared)
                self.misses += 1
                return over
            if over.calls >= 0:
                over.calls += 1
            return None

    def keep_over_state(self, over: _OverState, copy: types.FunctionType, prep: Prep | None) -> None:
        """Keep ``prep``, made for ``copy``, for the new functions of its code (None: the code cannot
        share, see :class:`_OverState`)."""
        with self._lock:
            if prep is None:
                over.prep = False
                return
            over.lock = threading.Lock()  # before the prep: a call that finds the prep finds its lock
            over.prep, over.copy = prep, copy
            self.builds += 1

    def serve_over_state(self, over: _OverState, f: types.FunctionType, run: Callable[[Prep], Any]) -> Any:
        """``run(prep)`` with the code's shared prep over ``f``'s state: the prep's function (a private
        copy) takes ``f``'s cell contents and defaults, and the call runs where what its slots then hold
        is what they held at preparation besides state (``Prep.slots``: the same helpers, flags and
        module globals, by identity; state in place of state, read by the prep at the call). Under the
        entry's lock, held for the call: a thread that finds it held, or an ``f`` whose slots differ,
        gets :data:`NOT_SERVED` (its call runs unprepared)."""
        prep, copy, lock = over.prep, over.copy, over.lock
        if not isinstance(prep, Prep) or copy is None or lock is None or copy.__globals__ is not f.__globals__:
            return NOT_SERVED
        if not lock.acquire(blocking=False):
            return NOT_SERVED
        try:
            for own, cell in zip(copy.__closure__ or (), f.__closure__ or ()):
                try:
                    own.cell_contents = cell.cell_contents
                except ValueError:  # an empty cell
                    return NOT_SERVED
            copy.__defaults__ = f.__defaults__
            if not prep.slots.holds():
                return NOT_SERVED
            self.hits += 1
            self.shared_hits += 1
            return run(prep)
        finally:
            lock.release()

    def forget_over_state(self, prep: Prep) -> None:
        """Drop a prep shared over state that no longer serves (``OutputShapeChanged``): counted anew."""
        with self._lock:
            for over in [o for kept in list(self._over_state.values()) for o in list(kept.entries.values())]:
                if over.prep is prep:
                    over.prep, over.copy, over.calls = None, None, 1

    @staticmethod
    def shared_copy(f: types.FunctionType) -> types.FunctionType:
        """``f`` as its code's shared prep is made for: a copy with cells of its own (holding what
        ``f``'s hold now) and ``f``'s defaults, which no one else can rebind, reading ``f``'s module
        globals (whose slots :meth:`shared` checks, by the code's summary, in each new function)."""
        cells = f.__closure__
        if cells:
            own = []
            for cell in cells:
                try:
                    own.append(types.CellType(cell.cell_contents))
                except ValueError:  # an empty cell
                    own.append(types.CellType())
            cells = tuple(own)
        copy = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, cells)
        copy.__qualname__, copy.__module__ = f.__qualname__, f.__module__
        return copy

    def keep_shared(self, entry: _Entry, prep: Prep) -> Prep:
        """Keep ``prep`` as its code's, for ``entry`` (:meth:`shared`), where the summary its entry
        was checked by holds for the copy it was made for (a cell rebound meanwhile, by another
        thread: the prep serves its own call alone); the one kept first where two threads prepared at once."""
        summary, made_for = entry.summary, prep.f
        if summary is None or type(made_for) is not types.FunctionType or not summary.holds(made_for, set()):
            return prep
        with self._lock:
            if entry.prep is None:
                entry.prep = prep
                self.builds += 1
            else:
                prep = entry.prep
            summary.learned[_LAST_SHARED] = (self._token, weakref.ref(prep))  # for serving
            return prep

    def find(self, f: Callable[..., Any], key: Any) -> Prep | None:
        """The prep kept for ``f`` and ``key``, or None: then the call runs unprepared, and
        :meth:`seen` says whether to prepare it."""
        held = self._held_by(f)
        if held is not None:
            entry = held.keys.get(key)
            if entry is not None and entry.prep is not None and self._holds(f, entry.prep):
                self.hits += 1
                held.last = entry.prep
                return entry.prep
        return None

    def _holds(self, f: Callable[..., Any], prep: Prep) -> bool:
        """Whether ``f``'s slots hold what they held when its kept ``prep`` was made (``Prep.slots``: the
        same objects besides state, see ``_closures.slots``); where one changed, the prep is dropped
        and its key counted anew, so that a loop that rebinds a helper at every call runs unprepared
        (it would compile at every call) and one that rebound it once prepares again for ``f`` as it is."""
        slots = prep.slots
        if slots is None or slots.holds():
            return True
        with self._lock:
            held = self._held_by(f)
            if held is not None:
                for entry in held.keys.values():
                    if entry.prep is prep:
                        entry.prep, entry.calls, entry.slots = None, 1, None
                if held.last is prep:
                    held.last = None
        self.stale += 1
        return False

    def seen(self, f: Callable[..., Any], key: Any) -> bool:
        """Record a call of ``f`` with ``key`` that had no prep; True when ``after`` calls with it ran
        one-shot before (the caller prepares and calls :meth:`keep`). Only Python functions are kept (a lambda, a ``def``,
        a closure); a bound method is a new object at every attribute access, and a callable object's
        attributes are the user's: their calls run unprepared, as before."""
        if type(f) is not types.FunctionType:
            return False
        with self._lock:
            self.misses += 1
            held = self._held_by(f)
            if held is None:
                mark = f.__dict__.get(_HELD)
                if type(mark) is not _First or mark[0] != id(f) or mark[2] is not self._token:
                    f.__dict__[_HELD] = _First((id(f), key, self._token))  # the first call: its key alone, on f
                    return False
                held = _Held(f)  # the second call: f's keys are held from now on, its first one too
                held.keys[mark[1]] = _Entry()
                f.__dict__[_HELD] = held
                self._held[id(held)] = weakref.ref(held)
                while len(self._held) > self.max_functions:
                    _, old = self._held.popitem(last=False)
                    evicted = old()
                    if evicted is not None:
                        _detach(evicted)
            keys = held.keys
            entry = keys.get(key)
            if entry is not None:
                keys.move_to_end(key)
                # the calls counted are of f as it is: where a helper or a flag it holds was rebound since
                # the last one, counted anew (a loop that rebinds one at every call never prepares)
                slots = entry.slots
                if slots is None or not slots.holds():
                    entry.slots = slots_of(f)
                    if slots is not None:
                        entry.calls = 1
                        return False
                if entry.calls >= self.after:
                    return True
                entry.calls += 1
                return False
            keys[key] = entry = _Entry()
            entry.slots = slots_of(f)
            while len(keys) > self.max_keys:
                _, dropped = keys.popitem(last=False)
                if dropped.prep is not None and dropped.prep is held.last:
                    held.last = None
            return False

    def forget(self, f: Callable[..., Any], prep: Prep) -> None:
        """Drop ``prep``, kept for ``f``, that no longer serves it (what ``f`` captures changed shape:
        ``OutputShapeChanged``): its key is prepared again at its next call, for the state as it is."""
        with self._lock:
            for entry in self._shared.values():
                if entry.prep is prep:
                    entry.prep = None
                    summary = summaries.summary_of(prep.f)
                    if summary is not None:
                        summary.learned.pop(_LAST_SHARED, None)
            held = self._held_by(f)
            if held is None:
                return
            for entry in held.keys.values():
                if entry.prep is prep:
                    entry.prep = None
            if held.last is prep:
                held.last = None

    def keep(self, f: Callable[..., Any], key: Any, prep: Prep) -> None:
        with self._lock:
            held = self._held_by(f)
            if held is None:
                return
            entry = held.keys.get(key)
            if entry is None:
                entry = held.keys[key] = _Entry()
            if entry.prep is None:
                entry.prep = prep
                self.builds += 1
            held.last = entry.prep


prep_cache = PrepCache()
"""The process's :class:`PrepCache`: ``prep_cache.enabled = False`` turns reuse off, ``clear()`` forgets
every preparation, ``hits``, ``misses`` and ``builds`` count what happened."""


# backend config -> whether it allows reuse (configs are frozen: the answer stays), asked at every call
# without prep= (four attribute reads with defaults: 1.5 us, where a dict read of the config is 0.1)
_REUSABLE: dict[Any, bool] = {}


def reusable(backend: Backend) -> bool:
    """Whether calls with ``backend`` may reuse preparations (``reuse_prep=False`` turns it off; a
    SecondOrder needs both of its backends to allow it)."""
    if not prep_cache.enabled:
        return False
    try:
        return _REUSABLE[backend]
    except (KeyError, TypeError):  # not met yet, or a config that does not hash
        pass
    answer = _allows_reuse(backend)
    try:
        if len(_REUSABLE) >= 256:
            _REUSABLE.clear()
        _REUSABLE[backend] = answer
    except TypeError:
        pass
    return answer


def _allows_reuse(backend: Backend) -> bool:
    inner, outer = getattr(backend, "inner", None), getattr(backend, "outer", None)
    if inner is not None and outer is not None:
        return _allows_reuse(outer) and _allows_reuse(inner)
    dense = getattr(backend, "dense", None)
    if dense is not None and not _allows_reuse(dense):
        return False
    return getattr(backend, "reuse_prep", True) is not False
