"""The closure policy: each call differentiates its own copy of the state ``f`` captures (``state``), and
a captured NumPy array that ``f`` writes into is stood in for by an array that carries derivatives
(``writable``). Adapters call into this package; it calls into no adapter."""
