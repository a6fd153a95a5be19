"""The ``Tracer`` seam: spans for runs, model calls, tool calls and sub-agent calls.

Core never imports OpenTelemetry. It talks to a :class:`Tracer` (a Protocol
with a no-op default, :data:`NO_TRACER`); ``helix_agents.otel.OtelTracer``
(the ``otel`` extra) implements it with the OpenTelemetry API. The span
names and attributes are decided here, once, after the OpenTelemetry GenAI
semantic conventions (``specs/otel.md``):

- ``invoke_agent {agent}``: one run of a session (its parent is the trace
  context stored in the session's ``session_created``, so every run of a
  session, resumed or recovered anywhere, lands in the same trace);
- ``chat {model}``: one model call;
- ``execute_tool {tool}``: one tool call, a sub-agent call included (the
  child's run is the child of that span, across HTTP and NATS too).

A trace context travels as a W3C carrier: ``{"traceparent": ..., "tracestate": ...}``.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Literal, Protocol

from helix_agents._aio import closing_iter
from helix_agents.errors import AgentServerError
from helix_agents.log.state import SessionState
from helix_agents.messages import ToolCall, ToolResultMessage
from helix_agents.models.base import LLMAdapter, LLMRequest, LLMResponse, LLMStreamEvent

__all__ = [
    "NO_TRACER",
    "TRACE_KEYS",
    "AttributeValue",
    "NoTracer",
    "Span",
    "SpanKind",
    "Tracer",
    "call_error",
    "checked_trace_context",
    "end_run_span",
    "end_tool_span",
    "run_span",
    "tokens_used",
    "session_trace_context",
    "stream_is_plain",
    "tool_span",
    "trace_context_from_headers",
    "traced_stream",
]

AttributeValue = str | bool | int | float | Sequence[str]
"""What a span attribute may hold (a subset of OpenTelemetry's)."""

SpanKind = Literal["internal", "client", "server"]
"""The OpenTelemetry span kinds helix-agents uses."""

TRACE_KEYS = ("traceparent", "tracestate")
"""The W3C trace context's two fields, as header names (lower case)."""

_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[ -~]*)?")
_TRACESTATE_MAX = 512  # W3C: a vendor may drop a longer tracestate


class Span(Protocol):
    """A span being recorded: attributes can be added and a failure marked."""

    def set_attributes(self, attributes: Mapping[str, AttributeValue | None]) -> None:
        """Add attributes; ``None`` values are skipped."""
        ...

    def fail(self, message: str, error_type: str) -> None:
        """Mark the span failed: status error with ``message``, attribute ``error.type``."""
        ...


class Tracer(Protocol):
    """Makes spans. An exception escaping a span's block marks it failed;
    cancellation does not."""

    def span(
        self,
        name: str,
        attributes: Mapping[str, AttributeValue | None],
        *,
        kind: SpanKind = "internal",
        parent: Mapping[str, str] | None = None,
    ) -> AbstractContextManager[Span]:
        """A span, current inside the block.

        Args:
            parent: ``None``: the current span is the parent. A W3C carrier:
                exactly that parent (an empty one starts a new trace).
        """
        ...

    def trace_context(self) -> dict[str, str]:
        """The current span's context as a W3C carrier; ``{}`` when there is none."""
        ...

    def attached(self, carrier: Mapping[str, str]) -> AbstractContextManager[None]:
        """Inside the block, the span of W3C ``carrier`` is the current parent (no span made).

        For work that continues a span another step (or process) made: a
        durable engine's steps continue their run's span. An empty carrier
        changes nothing.
        """
        ...


class _NoSpan:
    """The span of :class:`NoTracer`: records nothing."""

    def set_attributes(self, attributes: Mapping[str, AttributeValue | None]) -> None:
        """Record nothing."""

    def fail(self, message: str, error_type: str) -> None:
        """Record nothing."""


class NoTracer:
    """The default :class:`Tracer`: no spans, no trace context, no cost."""

    @contextmanager
    def span(
        self,
        name: str,
        attributes: Mapping[str, AttributeValue | None],
        *,
        kind: SpanKind = "internal",
        parent: Mapping[str, str] | None = None,
    ) -> Iterator[Span]:
        """A span that records nothing."""
        yield _NO_SPAN

    def trace_context(self) -> dict[str, str]:
        """Always ``{}``."""
        return {}

    @contextmanager
    def attached(self, carrier: Mapping[str, str]) -> Iterator[None]:
        """Nothing to attach."""
        yield


_NO_SPAN = _NoSpan()
NO_TRACER = NoTracer()
"""The tracer an executor uses unless it is given one."""


# --- trace context on the wire ---------------------------------------------------------


def checked_trace_context(value: Mapping[str, str] | None) -> dict[str, str]:
    """A start request's ``traceContext``, checked; ``INVALID_REQUEST`` when malformed.

    Only ``traceparent`` (W3C format) and ``tracestate`` (printable ASCII) are
    allowed; ``tracestate`` needs ``traceparent``. A ``tracestate`` over 512
    characters is dropped, as W3C lets a vendor do, not refused.
    """
    if not value:
        return {}
    unknown = sorted(set(value) - set(TRACE_KEYS))
    if unknown:
        raise AgentServerError(
            "INVALID_REQUEST", f"traceContext: unknown key(s) {unknown}; only {list(TRACE_KEYS)}"
        )
    parent = value.get("traceparent")
    if not isinstance(parent, str) or not _TRACEPARENT.fullmatch(parent):
        raise AgentServerError(
            "INVALID_REQUEST", f"traceContext.traceparent is not a W3C traceparent: {parent!r}"
        )
    state = value.get("tracestate")
    if state is None:
        return {"traceparent": parent}
    if not (isinstance(state, str) and state.isascii() and state.isprintable()):
        raise AgentServerError("INVALID_REQUEST", "traceContext.tracestate must be printable ASCII")
    if len(state) > _TRACESTATE_MAX:
        return {"traceparent": parent}
    return {"traceparent": parent, "tracestate": state}


def _valid_tracestate(state: object) -> bool:
    return (
        isinstance(state, str)
        and len(state) <= _TRACESTATE_MAX
        and state.isascii()
        and state.isprintable()
    )


def trace_context_from_headers(headers: Mapping[str, str] | None) -> dict[str, str] | None:
    """The W3C trace context in request headers; ``None`` when absent or malformed.

    As W3C asks of a receiver, a malformed ``traceparent`` is ignored (the
    request then starts a new trace), never refused; so is a bad ``tracestate``.
    """
    if not headers:
        return None
    lowered = {key.lower(): value for key, value in headers.items()}
    parent = lowered.get("traceparent", "").strip()
    if not _TRACEPARENT.fullmatch(parent):
        return None
    found = {"traceparent": parent}
    state = lowered.get("tracestate")
    if state is not None and _valid_tracestate(state.strip()):
        found["tracestate"] = state.strip()
    return found


# --- the spans of a run ---------------------------------------------------------------


def session_trace_context(
    tracer: Tracer, given: Mapping[str, str] | None, agent_name: str, session_id: str
) -> dict[str, str]:
    """The trace context to store on a new session's ``session_created``.

    The caller's (``given``, checked: ``INVALID_REQUEST`` when malformed), else
    the current span's; with neither, a ``start_session`` span begins a new
    trace for the session, so that every run of it (resumed or recovered,
    anywhere) lands in that one trace.
    """
    traced = checked_trace_context(given) or tracer.trace_context()
    if traced:
        return traced
    with tracer.span(
        f"start_session {agent_name}",
        {
            "gen_ai.agent.name": agent_name,
            "gen_ai.conversation.id": session_id,
            "helix.session.id": session_id,
        },
        parent={},
    ):
        return tracer.trace_context()


def run_span(
    tracer: Tracer,
    *,
    agent_name: str,
    session_id: str,
    run_id: str,
    mode: str,
    parent_session_id: str | None,
    root_session_id: str | None,
    model: str | None,
    trace_context: Mapping[str, str],
) -> AbstractContextManager[Span]:
    """The ``invoke_agent`` span of one run, a child of the session's stored trace context."""
    return tracer.span(
        f"invoke_agent {agent_name}",
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent_name,
            "gen_ai.conversation.id": session_id,
            "gen_ai.request.model": model,
            "helix.session.id": session_id,
            "helix.run.id": run_id,
            "helix.run.mode": mode,
            "helix.parent_session.id": parent_session_id,
            "helix.root_session.id": root_session_id or session_id,
        },
        parent=trace_context,
    )


def tokens_used(state: SessionState) -> tuple[int, int]:
    """The session's own (input, output) tokens so far."""
    return state.usage.input_tokens, state.usage.output_tokens


def end_run_span(span: Span, state: SessionState, tokens_before: tuple[int, int]) -> None:
    """Record how the run left its session, and the tokens its own model calls used.

    A failed session marks the span failed.
    """
    tokens_in, tokens_out = tokens_used(state)
    span.set_attributes(
        {
            "helix.session.status": state.status,
            "gen_ai.usage.input_tokens": tokens_in - tokens_before[0],
            "gen_ai.usage.output_tokens": tokens_out - tokens_before[1],
        }
    )
    if state.status == "failed":
        span.fail(state.error or "the run failed", "run_failed")


def tool_span(
    tracer: Tracer,
    agent_name: str,
    session_id: str,
    call: ToolCall,
    *,
    sub_session_id: str | None = None,
    remote: str | None = None,
) -> AbstractContextManager[Span]:
    """The ``execute_tool`` span of a tool call (a sub-agent call names its child session)."""
    return tracer.span(
        f"execute_tool {call.name}",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
            "gen_ai.agent.name": agent_name,
            "gen_ai.conversation.id": session_id,
            "helix.session.id": session_id,
            "helix.sub_session.id": sub_session_id,
            "helix.sub_session.transport": remote,
        },
    )


def call_error(state: SessionState, tool_call_id: str) -> str | None:
    """The error recorded as call ``tool_call_id``'s result; ``None`` if it has none (yet)."""
    for message in reversed(state.messages):
        if isinstance(message, ToolResultMessage) and message.tool_call_id == tool_call_id:
            return message.content if message.is_error else None
    return None


def end_tool_span(span: Span, error: str | None) -> None:
    """Mark a tool call's span failed when its result is an error."""
    if error is not None:
        span.fail(error, "tool_error")


def stream_is_plain(tracer: Tracer) -> bool:
    """Whether :func:`traced_stream` hands back the model's own stream (no span to keep)."""
    return type(tracer) is NoTracer


def traced_stream(
    tracer: Tracer, llm: LLMAdapter, request: LLMRequest
) -> AsyncIterator[LLMStreamEvent]:
    """``llm.stream(request)`` inside a ``chat`` span carrying the request and its usage.

    Read it in one task (``prefetch`` does): the span is current in the
    reading task while the stream lasts. With :data:`NO_TRACER` it is the
    model's stream itself: no span to keep, no generator between.
    """
    if stream_is_plain(tracer):
        return llm.stream(request)
    return _traced_stream(tracer, llm, request)


async def _traced_stream(
    tracer: Tracer, llm: LLMAdapter, request: LLMRequest
) -> AsyncIterator[LLMStreamEvent]:
    model = request.model
    with tracer.span(
        f"chat {model}" if model else "chat",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
            "gen_ai.request.temperature": request.temperature,
            "gen_ai.request.max_tokens": request.max_tokens,
            "gen_ai.agent.name": request.agent_type,
            "gen_ai.conversation.id": request.session_id,
        },
        kind="client",
    ) as span:
        answered = False
        part: LLMStreamEvent
        # Closed here, at once, when the reader stops (the adapter's connection with it).
        async with closing_iter(llm.stream(request), shield=True) as parts:
            async for part in parts:
                if isinstance(part, LLMResponse):
                    answered = True
                    usage = part.usage
                    span.set_attributes(
                        {
                            "gen_ai.response.model": part.model,
                            "gen_ai.response.finish_reasons": (
                                [part.finish_reason] if part.finish_reason else None
                            ),
                            "gen_ai.usage.input_tokens": usage.input_tokens if usage else None,
                            "gen_ai.usage.output_tokens": usage.output_tokens if usage else None,
                        }
                    )
                yield part
        if not answered:
            span.fail("the model's stream ended without a response", "no_response")
