"""Adapters, one module per engine, installed as ``diffinterface.backends``.

Each module defines ``Adapter``, a subclass of ``diffinterface._adapters.contract.Adapter``, and is imported
the first time its backend config is used, so that ``import diffinterface`` imports no engine.
"""
