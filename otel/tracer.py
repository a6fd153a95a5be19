"""``OtelTracer``: the :class:`~helix_agents.tracing.Tracer` seam on the OpenTelemetry API."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version

try:
    from opentelemetry import context as otel_context, trace
    from opentelemetry.context import Context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without the extra
    raise ImportError(
        "helix_agents.otel needs OpenTelemetry: pip install 'helix-agents[otel]'"
    ) from exc

from helix_agents.tracing import AttributeValue, Span, SpanKind

__all__ = ["OtelTracer"]

INSTRUMENTATION_NAME = "helix_agents"
"""The instrumentation scope's name on every span."""

_KINDS = {
    "internal": trace.SpanKind.INTERNAL,
    "client": trace.SpanKind.CLIENT,
    "server": trace.SpanKind.SERVER,
}


def _version() -> str | None:
    try:
        return version("helix-agents")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return None


def _clean(attributes: Mapping[str, AttributeValue | None]) -> dict[str, AttributeValue]:
    """The attributes OpenTelemetry accepts: ``None`` values dropped, sequences as lists."""
    cleaned: dict[str, AttributeValue] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        cleaned[key] = value if isinstance(value, str | bool | int | float) else list(value)
    return cleaned


class _OtelSpan:
    """A recording OpenTelemetry span behind the core :class:`Span` protocol."""

    def __init__(self, span: trace.Span) -> None:
        self._span = span

    def set_attributes(self, attributes: Mapping[str, AttributeValue | None]) -> None:
        """Add attributes; ``None`` values are skipped."""
        self._span.set_attributes(_clean(attributes))

    def fail(self, message: str, error_type: str) -> None:
        """Status error with ``message``; ``error.type`` = ``error_type``."""
        self._span.set_attribute("error.type", error_type)
        self._span.set_status(trace.Status(trace.StatusCode.ERROR, message))


class OtelTracer:
    """Spans through OpenTelemetry; W3C trace context in and out.

    Args:
        tracer_provider: where spans go; by default the global provider
            (``opentelemetry.trace.set_tracer_provider``), looked up when a span
            starts, so the provider may be set after this tracer is made.
    """

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer(
            INSTRUMENTATION_NAME, _version(), tracer_provider=tracer_provider
        )
        self._propagator = TraceContextTextMapPropagator()

    def __repr__(self) -> str:
        return f"OtelTracer({self._tracer!r})"

    @contextmanager
    def span(
        self,
        name: str,
        attributes: Mapping[str, AttributeValue | None],
        *,
        kind: SpanKind = "internal",
        parent: Mapping[str, str] | None = None,
    ) -> Iterator[Span]:
        """A span, current inside the block; an exception (not cancellation) marks it failed.

        ``parent``: ``None`` for the current span; a W3C carrier for exactly
        that parent (empty, or unreadable: a new trace).
        """
        context: Context | None = None
        if parent is not None:
            context = self._propagator.extract(dict(parent), context=Context())
        with self._tracer.start_as_current_span(
            name, context=context, kind=_KINDS[kind], attributes=_clean(attributes)
        ) as span:
            wrapped = _OtelSpan(span)
            try:
                yield wrapped
            except Exception as exc:  # recorded as an exception event by OpenTelemetry too
                wrapped.fail(f"{type(exc).__name__}: {exc}", type(exc).__qualname__)
                raise

    def trace_context(self) -> dict[str, str]:
        """The current span's context as ``traceparent`` / ``tracestate``; ``{}`` if none."""
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier)
        return carrier

    @contextmanager
    def attached(self, carrier: Mapping[str, str]) -> Iterator[None]:
        """Inside the block, ``carrier``'s span is the current parent (empty: no change)."""
        if not carrier:
            yield
            return
        token = otel_context.attach(self._propagator.extract(dict(carrier), context=Context()))
        try:
            yield
        finally:
            otel_context.detach(token)
