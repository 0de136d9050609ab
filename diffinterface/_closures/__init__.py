"""The closure policy: each call differentiates its own copy of the state ``f`` captures. By job, from the
ground up: ``namespaces`` (which modules' functions are walked), ``code`` (what a function's code
writes and which globals it names), ``summaries`` (stateless functions checked, not walked again),
``walk`` (what ``f`` captures), ``slots`` (what else its slots hold, checked before a kept preparation serves a call),
``plan`` (``StatePlan``: the captured state rebuilt over duplicates or guarded aliases), ``diagnose``
(the call's errors where ``f`` writes into, escapes with or misuses its state), and ``writable`` (the
stand-in for a captured array that ``f`` writes into under an engine of immutable arrays). Adapters
call into this package; it calls into no adapter."""
