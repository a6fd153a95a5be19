"""OpenTelemetry tracing for helix-agents (the ``otel`` extra: ``pip install helix-agents[otel]``).

Give an executor (or an ``AgentServer``) an :class:`OtelTracer` to get a span
per run, model call, tool call and sub-agent call, linked into one trace
across processes (``specs/otel.md``)::

    from helix_agents.otel import OtelTracer

    executor = AgentExecutor(store, agents, tracer=OtelTracer())

Importing this package needs ``opentelemetry-api``; nothing else in
helix-agents imports OpenTelemetry.
"""

from __future__ import annotations

from .tracer import OtelTracer as OtelTracer

__all__ = ["OtelTracer"]
