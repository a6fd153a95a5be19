"""Agents and checks for the tracing tests (``test_tracing.py``, ``test_otel_traces.py``).

- :func:`recording` gives an :class:`~helix_agents.otel.OtelTracer` on a
  private ``TracerProvider`` whose spans land in an ``InMemorySpanExporter``
  (no global provider is set, so tests never leak spans into each other);
- a **leaf** calls ``lookup`` and ``broken`` (which raises) in one turn,
  then finishes; a **mid** delegates to one sub-agent tool, then finishes;
  a **root** delegates likewise and answers with text;
- :func:`assert_trace_follows_tree` checks that the spans of a run form one
  trace whose shape is the agent tree the logs record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from pydantic import BaseModel

from helix_agents import (
    AgentConfig,
    RemoteAgentTransport,
    ToolContext,
    create_remote_sub_agent_tool,
    create_sub_agent_tool,
    define_agent,
    define_tool,
)
from helix_agents.agents import RemoteSubAgentTool, SubAgentTool
from helix_agents.events import Event
from helix_agents.log import project_state
from helix_agents.messages import AssistantMessage, ToolResultMessage
from helix_agents.models import LLMRequest, ScriptedLLM, ScriptStep, TokenUsage
from helix_agents.otel import OtelTracer

__all__ = [
    "Out",
    "Query",
    "assert_trace_follows_tree",
    "failed_tools",
    "leaf",
    "local_tool",
    "mid",
    "recording",
    "remote_tool",
    "root",
    "runs_of",
]


class Query(BaseModel):
    """A delegation's, and ``lookup``'s, input."""

    query: str


class Out(BaseModel):
    """What the leaf and the mid finish with."""

    answer: str


def recording() -> tuple[OtelTracer, InMemorySpanExporter]:
    """A tracer whose finished spans the returned exporter holds."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OtelTracer(provider), exporter


def _lookup(value: Query, ctx: ToolContext) -> dict[str, str]:
    return {"found": value.query}


def _broken(value: Query, ctx: ToolContext) -> None:
    raise RuntimeError("disk on fire")


lookup = define_tool("lookup", "Look something up.", Query, _lookup)
broken = define_tool("broken", "Always fails.", Query, _broken)

USAGE = TokenUsage(input_tokens=11, output_tokens=7)
"""Every scripted turn reports this usage."""


def _turn(request: LLMRequest) -> int:
    return sum(1 for message in request.messages if isinstance(message, AssistantMessage))


def _results(request: LLMRequest) -> str:
    seen = sorted(
        f"{message.tool_name}={message.content}"
        for message in request.messages
        if isinstance(message, ToolResultMessage)
    )
    return "; ".join(seen)


def leaf(name: str = "leaf") -> AgentConfig:
    """Calls ``lookup`` and ``broken`` in one turn, then finishes with what it saw."""

    def script(request: LLMRequest) -> ScriptStep:
        if _turn(request) == 0:
            return ScriptStep(
                text=f"{name} looks",
                tool_calls=[
                    ScriptedLLM.call("lookup", {"query": "x"}),
                    ScriptedLLM.call("broken", {"query": "y"}),
                ],
                usage=USAGE,
            )
        step = ScriptedLLM.finish({"answer": _results(request)})
        return ScriptStep(tool_calls=step.tool_calls, usage=USAGE)

    return define_agent(name, tools=[lookup, broken], output_schema=Out, llm=ScriptedLLM(script))


def _delegating(name: str, tool: str, *, final: bool) -> Any:
    def script(request: LLMRequest) -> ScriptStep:
        if _turn(request) == 0:
            return ScriptStep(
                text=f"{name} delegates",
                tool_calls=[ScriptedLLM.call(tool, {"query": f"from {name}"})],
                usage=USAGE,
            )
        if final:
            return ScriptStep(text=f"{name} got: {_results(request)}", usage=USAGE)
        step = ScriptedLLM.finish({"answer": f"{name}({_results(request)})"})
        return ScriptStep(tool_calls=step.tool_calls, usage=USAGE)

    return script


def mid(tool: SubAgentTool[Any] | RemoteSubAgentTool[Any], name: str = "mid") -> AgentConfig:
    """Delegates to ``tool`` once, then finishes with the child's result."""
    return define_agent(
        name,
        tools=[tool],
        output_schema=Out,
        llm=ScriptedLLM(_delegating(name, tool.name, final=False)),
    )


def root(tool: SubAgentTool[Any] | RemoteSubAgentTool[Any], name: str = "root") -> AgentConfig:
    """Delegates to ``tool`` once, then answers with text."""
    return define_agent(
        name, tools=[tool], llm=ScriptedLLM(_delegating(name, tool.name, final=True))
    )


def local_tool(agent: AgentConfig) -> SubAgentTool[Query]:
    """``subagent__<agent>``, run in the same executor."""
    return create_sub_agent_tool(agent, Query)


def remote_tool(name: str, transport: RemoteAgentTransport) -> RemoteSubAgentTool[Query]:
    """``subagent__<name>``: the agent ``name`` served over ``transport``."""
    return create_remote_sub_agent_tool(
        name,
        description=f"{name} (remote)",
        input_schema=Query,
        output_schema=Out,
        transport=transport,
        remote_agent_type=name,
        stream_retry_base=0.05,
    )


# --- checks ------------------------------------------------------------------------


def runs_of(spans: Sequence[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    """The ``invoke_agent`` spans, by session id, in start order."""
    runs: dict[str, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        if span.name.startswith("invoke_agent "):
            runs.setdefault(str(_attrs(span)["helix.session.id"]), []).append(span)
    return runs


def _attrs(span: ReadableSpan) -> Mapping[str, Any]:
    return span.attributes or {}


def assert_trace_follows_tree(
    spans: Sequence[ReadableSpan], logs: Mapping[str, Sequence[Event]]
) -> None:
    """The spans are one trace shaped like the agent tree of ``logs`` (every session's log).

    The root session's ``start_session`` span is the trace's root, and the
    parent of each of its runs. Each session has a run span per run; a child's run hangs under its
    parent's ``execute_tool`` span for the call that made it, which hangs
    under the parent's run; each model call and tool call hangs under a run
    of its own session; the counts match the logs.
    """
    assert spans, "no spans were recorded"
    assert len({span.context.trace_id for span in spans}) == 1, "the spans are not one trace"
    by_id = {span.context.span_id: span for span in spans}
    runs = runs_of(spans)
    assert set(runs) == set(logs)
    run_ids = {sid: {span.context.span_id for span in spans_} for sid, spans_ in runs.items()}
    for session_id, log in logs.items():
        state = project_state(list(log))
        for run in runs[session_id]:
            assert _attrs(run)["gen_ai.agent.name"] == state.agent_type
            assert _attrs(run)["gen_ai.operation.name"] == "invoke_agent"
            if state.parent_session_id is None:
                # begun outside any trace: the root session's start_session span is the root
                assert run.parent is not None, session_id
                start = by_id[run.parent.span_id]
                assert start.name == f"start_session {state.agent_type}"
                assert start.parent is None
                continue
            assert run.parent is not None, session_id
            call = by_id[run.parent.span_id]
            assert call.name.startswith("execute_tool subagent__"), call.name
            assert _attrs(call)["helix.sub_session.id"] == session_id
            assert _attrs(call)["gen_ai.tool.call.id"] == state.parent_tool_call_id
            assert call.parent is not None
            assert call.parent.span_id in run_ids[state.parent_session_id]
        # every model call and tool call of the session hangs under one of its runs
        chats = tools = 0
        for span in spans:
            if (
                _attrs(span).get("gen_ai.conversation.id") != session_id
                or span in runs[session_id]
                or span.name.startswith("start_session ")
            ):
                continue
            assert span.parent is not None
            assert span.parent.span_id in run_ids[session_id], span.name
            if span.name.startswith("chat"):
                chats += 1
            elif span.name.startswith("execute_tool "):
                tools += 1
        turns = [m for m in state.messages if isinstance(m, AssistantMessage)]
        assert chats == len(turns), session_id
        calls = [c for m in turns for c in m.tool_calls if c.name != "__finish__"]
        assert tools == len(calls), session_id


def failed_tools(spans: Sequence[ReadableSpan]) -> dict[str, str | None]:
    """The ``execute_tool`` spans with status error: tool name -> description."""
    return {
        str(_attrs(span)["gen_ai.tool.name"]): span.status.description
        for span in spans
        if span.name.startswith("execute_tool ") and span.status.status_code is StatusCode.ERROR
    }
