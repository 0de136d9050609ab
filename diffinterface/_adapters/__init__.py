"""The adapter contract: what an engine implements (``contract``: ``value_and_pushforward`` or
``value_and_pullback``, the rest derived), second order built from two first-order adapters
(``second_order``), and the function as adapters call it, with the closure setting and output
buffers handled once (``target``). The engines' adapters are in ``diffinterface.backends``."""
