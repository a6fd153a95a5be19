"""Agents: what an agent is, how one is defined, and the tools it may call.

``config`` (``AgentConfig``, hooks, model settings, companion entries),
``define`` (``define_agent`` and the registry), ``tools`` (``Tool``,
``define_tool``, the tool context). May import models and the log; never the
runtime.
"""
