"""The engines' adapters, one leaf per engine, installed as ``diffinterface.backends``.

This folder stands at the repository's root, beside the package: nothing in ``diffinterface`` imports it.
Each engine's config names its adapter by dotted path (``AutoJAX.adapter = "diffinterface.backends.jax:Adapter"``),
imported the first time the backend is used, so that ``import diffinterface`` imports no engine. The modules
here import nothing of diffinterface but ``diffinterface.extend``, the kit any outside package can use:

- ``<engine>.py``: the adapter (``Adapter``, a subclass of ``diffinterface.extend.Adapter``);
- ``<engine>_rules.py``: custom rules (``diffinterface.rules``) inside the engine, registered by array type;
- ``<engine>_bench.py``: the engine's own best calls, what ``python -m diffinterface bench`` compares with.
"""
