"""The path of a call from the public operators to an adapter: checking arguments, preparing, running
and re-running prepared work (``pipeline``), the ``Prep`` a ``prepare_*`` returns (``prep``), and
sparse results built from compressed ones (``sparse_results``)."""
