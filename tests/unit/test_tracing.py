"""Tracing in one process (specs/otel.md): spans per run, model call, tool call, sub-agent call.

A 3-deep local tree gives one trace shaped like the agent tree; a failed tool
gives an error span; a run that fails marks its span failed; the trace
context is stored on ``session_created`` so a resumed or recovered run joins
the same trace; a span current around ``execute`` becomes the root's parent.
"""

from __future__ import annotations

import anyio
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, StatusCode
from otel_spans import (
    USAGE,
    Query,
    assert_trace_follows_tree,
    failed_tools,
    leaf,
    local_tool,
    mid,
    recording,
    root,
    runs_of,
)
from pydantic import BaseModel

from helix_agents import AgentExecutor, define_agent, define_tool
from helix_agents.errors import AgentServerError, UsageError
from helix_agents.events import SessionCreated
from helix_agents.messages import AssistantMessage
from helix_agents.models import LLMRequest, ScriptedLLM, ScriptStep
from helix_agents.protocol import RemoteStartRequest
from helix_agents.server import AgentServer
from helix_agents.stores import MemoryEventStore
from helix_agents.tracing import NO_TRACER, checked_trace_context, trace_context_from_headers

LIMIT = 20
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _ids(traceparent: str) -> tuple[int, int]:
    """(trace id, span id) of a traceparent."""
    _, trace_id, span_id, _ = traceparent.split("-")
    return int(trace_id, 16), int(span_id, 16)


async def test_a_three_deep_local_tree_is_one_trace_shaped_like_the_tree() -> None:
    tracer, exporter = recording()
    store = MemoryEventStore()
    top = root(local_tool(mid(local_tool(leaf()))))
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [top], tracer=tracer) as executor:
            handle = await executor.execute(top, "go", session_id="t3")
            result = await handle.result()
    assert result.status == "completed", result.error
    sessions = await store.list_sessions()
    assert sorted(sessions) == ["t3", "t3-sub-call_0_0", "t3-sub-call_0_0-sub-call_0_0"]
    logs = {sid: await store.read(sid) for sid in sessions}
    spans = exporter.get_finished_spans()
    assert_trace_follows_tree(spans, logs)
    # the failing tool's span is an error; its sibling is not
    assert failed_tools(spans) == {"broken": "RuntimeError: disk on fire"}
    (broken,) = [s for s in spans if s.name == "execute_tool broken"]
    assert broken.attributes is not None
    assert broken.attributes["error.type"] == "tool_error"
    assert broken.attributes["gen_ai.tool.call.id"] == "call_0_1"
    # model calls carry the GenAI attributes and the usage
    chats = [s for s in spans if s.name.startswith("chat")]
    assert len(chats) == 6
    for chat in chats:
        assert chat.kind is SpanKind.CLIENT
        assert chat.attributes is not None
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.usage.input_tokens"] == USAGE.input_tokens
        assert chat.attributes["gen_ai.usage.output_tokens"] == USAGE.output_tokens
        assert chat.attributes["gen_ai.response.model"] == "scripted"
    # each run records how it left its session
    for session_runs in runs_of(spans).values():
        (run,) = session_runs
        assert run.attributes is not None
        assert run.attributes["helix.session.status"] == "completed"
        assert run.attributes["helix.run.mode"] == "start"
        assert run.status.status_code is StatusCode.UNSET
        # two model calls of its own in each run (its children's are on their runs)
        assert run.attributes["gen_ai.usage.input_tokens"] == 2 * USAGE.input_tokens
        assert run.attributes["gen_ai.usage.output_tokens"] == 2 * USAGE.output_tokens


async def test_a_failed_run_and_a_failed_model_call_are_error_spans() -> None:
    tracer, exporter = recording()
    agent = define_agent("flaky", llm=ScriptedLLM([ScriptedLLM.fail("model down")]))
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(MemoryEventStore(), [agent], tracer=tracer) as executor:
            result = await (await executor.execute(agent, "go")).result()
    assert result.status == "failed"
    spans = exporter.get_finished_spans()
    (chat,) = [s for s in spans if s.name.startswith("chat")]
    assert chat.status.status_code is StatusCode.ERROR
    assert "model down" in (chat.status.description or "")
    assert chat.attributes is not None
    assert chat.attributes["error.type"] == "LLMError"
    assert [event.name for event in chat.events] == ["exception"]
    (run,) = [s for s in spans if s.name == "invoke_agent flaky"]
    assert run.status.status_code is StatusCode.ERROR
    assert run.attributes is not None
    assert run.attributes["helix.session.status"] == "failed"
    assert run.attributes["error.type"] == "run_failed"
    assert chat.parent is not None
    assert chat.parent.span_id == run.context.span_id


async def test_an_unknown_tool_is_an_error_span() -> None:
    tracer, exporter = recording()
    agent = define_agent(
        "lost", llm=ScriptedLLM([ScriptedLLM.call("nowhere", {}), ScriptedLLM.reply("ok")])
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(MemoryEventStore(), [agent], tracer=tracer) as executor:
            assert (await (await executor.execute(agent, "go")).result()).status == "completed"
    assert failed_tools(exporter.get_finished_spans()) == {"nowhere": "unknown tool 'nowhere'"}


class Color(BaseModel):
    """A client tool's answer."""

    color: str


async def test_a_resumed_run_joins_the_trace_stored_at_the_start() -> None:
    tracer, exporter = recording()
    ask = define_tool("ask", "Ask the user.", Color, "client")
    agent = define_agent(
        "asker",
        tools=[ask],
        llm=ScriptedLLM([ScriptedLLM.call("ask", {"color": "?"}), ScriptedLLM.reply("thanks")]),
    )
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [agent], tracer=tracer) as executor:
            await executor.service.start(
                RemoteStartRequest(
                    session_id="r1",
                    agent_type="asker",
                    message="go",
                    trace_context={"traceparent": PARENT, "tracestate": "k=v"},
                )
            )
            await executor.wait_idle("r1")
            assert (await executor.state("r1")).status == "paused"
            (entry,) = await executor.pending_inputs("r1")
            await executor.submit_tool_result("r1", entry.tool_call_id, {"color": "red"})
            await executor.wait_idle("r1")
            assert (await executor.state("r1")).status == "completed"
    created = (await store.read("r1"))[0]
    assert isinstance(created, SessionCreated)
    assert created.trace_context == {"traceparent": PARENT, "tracestate": "k=v"}
    first, second = runs_of(exporter.get_finished_spans())["r1"]
    trace_id, span_id = _ids(PARENT)
    for run in (first, second):
        assert run.context.trace_id == trace_id
        assert run.parent is not None
        assert run.parent.span_id == span_id
        assert run.parent.is_remote
    assert first.context.trace_state.get("k") == "v"
    assert first.attributes is not None
    assert second.attributes is not None
    assert (first.attributes["helix.run.mode"], second.attributes["helix.run.mode"]) == (
        "start",
        "resume",
    )
    assert first.attributes["helix.session.status"] == "paused"


async def test_a_recovered_run_joins_the_trace_of_the_run_that_died() -> None:
    tracer, exporter = recording()
    thinking = anyio.Event()

    async def stuck(request: LLMRequest) -> ScriptStep:
        thinking.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    store = MemoryEventStore()
    first = define_agent("a", llm=ScriptedLLM(stuck))
    with anyio.fail_after(LIMIT):
        with anyio.CancelScope() as crash:
            async with AgentExecutor(store, [first], tracer=tracer) as executor:
                await executor.execute(first, "go", session_id="c1")
                await thinking.wait()
                crash.cancel()  # the process "dies" mid-run
        again = define_agent("a", llm=ScriptedLLM([ScriptedLLM.reply("done")]))
        async with AgentExecutor(store, [again], tracer=tracer) as executor:
            assert await executor.recover() == ["c1"]
            await executor.wait_idle("c1")
            assert (await executor.state("c1")).status == "completed"
    spans = exporter.get_finished_spans()
    died, recovered = runs_of(spans)["c1"]
    # begun outside any trace: a start_session span is the trace's root, and each run's parent
    (start,) = [s for s in spans if s.name == "start_session a"]
    assert start.parent is None
    for run in (died, recovered):
        assert run.context.trace_id == start.context.trace_id
        assert run.parent is not None
        assert run.parent.span_id == start.context.span_id
    assert died.status.status_code is StatusCode.UNSET  # cancellation is not an error
    assert recovered.attributes is not None
    assert recovered.attributes["helix.run.mode"] == "resume"


async def test_a_span_current_around_execute_is_the_roots_parent() -> None:
    tracer, exporter = recording()
    agent = define_agent("a", llm=ScriptedLLM([ScriptedLLM.reply("hi")]))
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(MemoryEventStore(), [agent], tracer=tracer) as executor:
            with tracer.span("request", {}) as _:
                outer = tracer.trace_context()
                handle = await executor.execute(agent, "go")
            await handle.result()
    trace_id, span_id = _ids(outer["traceparent"])
    (run,) = runs_of(exporter.get_finished_spans())[handle.session_id]
    assert run.context.trace_id == trace_id
    assert run.parent is not None
    assert run.parent.span_id == span_id


async def test_without_a_tracer_nothing_is_recorded_and_no_context_is_stored() -> None:
    agent = define_agent("a", llm=ScriptedLLM([ScriptedLLM.reply("hi")]))
    store = MemoryEventStore()
    async with AgentExecutor(store, [agent]) as executor:
        assert executor.env.tracer is NO_TRACER
        handle = await executor.execute(agent, "go")
        await handle.result()
    created = (await store.read(handle.session_id))[0]
    assert isinstance(created, SessionCreated)
    assert created.trace_context == {}


@pytest.mark.parametrize(
    ("context", "problem"),
    [
        ({"traceparent": "not-a-traceparent"}, "not a W3C traceparent"),
        ({"traceparent": PARENT.upper()}, "not a W3C traceparent"),
        ({"tracestate": "k=v"}, "not a W3C traceparent"),
        ({"traceparent": PARENT, "baggage": "x"}, "unknown key"),
        ({"traceparent": PARENT, "tracestate": "k=\n"}, "tracestate"),
    ],
)
async def test_a_malformed_trace_context_is_refused_and_creates_nothing(
    context: dict[str, str], problem: str
) -> None:
    with pytest.raises(AgentServerError) as caught:
        checked_trace_context(context)
    assert caught.value.code == "INVALID_REQUEST"
    assert problem in str(caught.value)
    store = MemoryEventStore()
    agent = define_agent("a", llm=ScriptedLLM([ScriptedLLM.reply("hi")]))
    async with AgentExecutor(store, [agent]) as executor:
        with pytest.raises(AgentServerError) as refused:
            await executor.service.start(
                RemoteStartRequest(
                    session_id="bad", agent_type="a", message="go", trace_context=context
                )
            )
    assert refused.value.code == "INVALID_REQUEST"
    assert await store.list_sessions() == []


def test_an_over_long_tracestate_is_dropped_not_refused() -> None:
    assert checked_trace_context({"traceparent": PARENT, "tracestate": "x" * 513}) == {
        "traceparent": PARENT
    }
    assert checked_trace_context({"traceparent": PARENT, "tracestate": "x" * 512}) == {
        "traceparent": PARENT,
        "tracestate": "x" * 512,
    }
    assert checked_trace_context(None) == {}


def test_trace_headers_are_read_leniently() -> None:
    assert trace_context_from_headers({"TraceParent": PARENT, "tracestate": "a=1"}) == {
        "traceparent": PARENT,
        "tracestate": "a=1",
    }
    assert trace_context_from_headers({"traceparent": "garbage"}) is None
    assert trace_context_from_headers({"tracestate": "a=1"}) is None
    assert trace_context_from_headers(None) is None
    # a bad tracestate is dropped, the traceparent kept
    assert trace_context_from_headers({"traceparent": PARENT, "tracestate": "é"}) == {
        "traceparent": PARENT
    }


def test_an_agent_server_with_an_executor_of_its_own_refuses_a_tracer() -> None:
    tracer, _ = recording()
    agent = define_agent("a", llm=ScriptedLLM([ScriptedLLM.reply("hi")]))
    store = MemoryEventStore()
    executor = AgentExecutor(store, [agent])
    with pytest.raises(UsageError, match="give the tracer to the executor"):
        AgentServer([agent], store, executor=executor, tracer=tracer)
    assert AgentServer([agent], store, tracer=tracer).executor.env.tracer is tracer


async def test_spans_a_tool_or_a_model_makes_are_children_of_its_span() -> None:
    tracer, exporter = recording()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    own = provider.get_tracer("user code")  # another provider, the same exporter

    def sync_tool(value: Query, ctx: object) -> str:  # runs on a worker thread
        with own.start_as_current_span("in sync tool"):
            return "ok"

    async def async_tool(value: Query, ctx: object) -> str:
        with own.start_as_current_span("in async tool"):
            return "ok"

    async def model(request: LLMRequest) -> ScriptStep:
        with own.start_as_current_span("in model"):
            if not any(isinstance(m, AssistantMessage) for m in request.messages):
                return ScriptStep(
                    tool_calls=[
                        ScriptedLLM.call("sync", {"query": "q"}),
                        ScriptedLLM.call("async", {"query": "q"}),
                    ]
                )
            return ScriptStep(text="done")

    agent = define_agent(
        "user",
        tools=[
            define_tool("sync", "A sync tool.", Query, sync_tool),
            define_tool("async", "An async tool.", Query, async_tool),
        ],
        llm=ScriptedLLM(model),
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(MemoryEventStore(), [agent], tracer=tracer) as executor:
            assert (await (await executor.execute(agent, "go")).result()).status == "completed"
    spans = exporter.get_finished_spans()
    by_id = {span.context.span_id: span for span in spans}

    def parent_of(name: str) -> list[str]:
        return sorted(
            by_id[span.parent.span_id].name
            for span in spans
            if span.name == name and span.parent is not None
        )

    assert parent_of("in sync tool") == ["execute_tool sync"]
    assert parent_of("in async tool") == ["execute_tool async"]
    assert parent_of("in model") == ["chat", "chat"]
