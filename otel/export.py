"""Exporting traces from a process of its own: what ``helix-agents serve --otel`` sets up.

A library user configures OpenTelemetry as they like and gives an executor an
:class:`~helix_agents.otel.OtelTracer`. A ``serve`` process has no code of
the user's to do that, so :func:`exporting_tracer` does the usual thing: the
global SDK ``TracerProvider`` if one is set (``opentelemetry-instrument``, a
``sitecustomize``), else a provider of its own that batches spans to an OTLP
collector over HTTP, configured by the standard ``OTEL_*`` variables
(``OTEL_EXPORTER_OTLP_ENDPOINT``, default ``http://localhost:4318``;
``OTEL_SERVICE_NAME``, default ``helix-agents``; ``OTEL_RESOURCE_ATTRIBUTES``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from helix_agents.errors import UsageError

from .tracer import OtelTracer

__all__ = ["DEFAULT_OTLP_ENDPOINT", "ExportingTracer", "exporting_tracer", "otlp_traces_endpoint"]

DEFAULT_OTLP_ENDPOINT = "http://localhost:4318"
"""Where OTLP/HTTP goes when no variable says (a collector on this machine)."""


@dataclass(frozen=True)
class ExportingTracer:
    """A tracer, where its spans go (for the startup line), and how to flush them at exit."""

    tracer: OtelTracer
    destination: str
    flush: Callable[[], object]
    """Blocks until the spans are sent (or the exporter's timeout); call it once, at exit."""


def otlp_traces_endpoint() -> str:
    """The URL spans are posted to, from the standard variables (as the exporter reads them)."""
    specific = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if specific:
        return specific
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or DEFAULT_OTLP_ENDPOINT
    return base.rstrip("/") + "/v1/traces"


def exporting_tracer() -> ExportingTracer:
    """A tracer whose spans leave the process: the global SDK provider's, else OTLP/HTTP.

    Raises:
        UsageError: the OTLP exporter is not installed (``pip install 'helix-agents[otel]'``).
    """
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):  # configured already: use it as it is
        return ExportingTracer(OtelTracer(), "the configured TracerProvider", current.force_flush)
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise UsageError(
            "--otel sends spans over OTLP/HTTP: pip install 'helix-agents[otel]'"
        ) from exc
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "helix-agents"}
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return ExportingTracer(
        OtelTracer(tracer_provider=provider), f"OTLP {otlp_traces_endpoint()}", provider.shutdown
    )
