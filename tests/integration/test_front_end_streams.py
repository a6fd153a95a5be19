"""Front-end streams read by the real client libraries: ``ai`` and ``@ag-ui/client``, in node.

A real uvicorn server on 127.0.0.1 serves ``/sse?format=ai-sdk`` and
``/sse?format=ag-ui`` of a 3-deep tree (lead -> researcher -> checker) with
text, tool calls, a failing tool and a failing grandchild; node scripts in
``tests/js`` read them with each library's own client (``readUIMessageStream``
over ``DefaultChatTransport.reconnectToStream``; ``HttpAgent`` with its
verifier and reducer) and print what the library reconstructed, which the
tests check. Reads cut at several points and resumed with ``Last-Event-ID``
must rebuild the same content. ``.ci/run`` installs the packages (``npm ci``);
without node or the packages these tests skip, unless ``HELIX_REQUIRE_JS=1``
(set by ``.ci/run``), where they fail.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest
from hitl_app import worker
from pydantic import BaseModel
from servers import serve
from starlette.types import ASGIApp, Receive, Scope, Send

from helix_agents import ToolContext, create_sub_agent_tool, define_agent, define_tool
from helix_agents.events import (
    Completed,
    Event,
    Interrupted,
    RunStarted,
    SessionCreated,
    StepRestarted,
    TextDelta,
    ToolEnd,
)
from helix_agents.log import project_state
from helix_agents.messages import UserMessage
from helix_agents.models import ScriptedLLM, ScriptStep
from helix_agents.protocol import RemoteStartRequest
from helix_agents.server import AgentServer, create_http_app
from helix_agents.server.edge import MAX_JSON_DEPTH
from helix_agents.stores import MemoryEventStore
from tests.integration._durable_kit import Runtime

pytestmark = pytest.mark.slow

LIMIT = 60
JS = Path(__file__).resolve().parents[1] / "js"
NODE = shutil.which("node")
_INSTALLED = (JS / "node_modules" / "ai").is_dir() and (JS / "node_modules" / "@ag-ui").is_dir()

if NODE is None or not _INSTALLED:
    if os.environ.get("HELIX_REQUIRE_JS") == "1":
        raise RuntimeError(f"node and `npm ci` in {JS} are required (HELIX_REQUIRE_JS=1)")
    pytest.skip(f"needs node and `npm ci` in {JS}", allow_module_level=True)

ROOT = "tree-1"
RESEARCHER = f"{ROOT}-sub-c_research"
CHECKER = f"{RESEARCHER}-sub-c_check"
TEXTS = {
    ROOT: "Let me plan this.All done: the research is in.",
    RESEARCHER: "Researching now.Research finished despite failures.",
    CHECKER: "Checking the facts.",
}


class Query(BaseModel):
    query: str


class Topic(BaseModel):
    topic: str


class Report(BaseModel):
    summary: str


class Question(BaseModel):
    question: str


async def _lookup(value: Topic, ctx: ToolContext) -> dict[str, Any]:
    return {"topic": value.topic, "note": f"notes on {value.topic}"}


async def _broken(value: Topic, ctx: ToolContext) -> dict[str, Any]:
    raise RuntimeError(f"the {value.topic} archive is offline")


def _agents(gate: anyio.Event | None = None) -> list[Any]:
    """The test's agents; with ``gate``, the tree's lookups wait for it (a tree to watch live)."""
    say, call = ScriptStep, ScriptedLLM.call

    async def lookup_at_gate(value: Topic, ctx: ToolContext) -> dict[str, Any]:
        if gate is not None:
            await gate.wait()
        return await _lookup(value, ctx)

    lookup = define_tool("lookup", "Look a topic up", Topic, lookup_at_gate)
    broken = define_tool("broken", "An archive that is offline", Topic, _broken)
    checker = define_agent(
        "checker",
        tools=[lookup],
        output_schema=Report,
        llm=ScriptedLLM(
            [
                say(
                    text="Checking the facts.",
                    tool_calls=[call("lookup", {"topic": "facts"}, id="c_lookup")],
                ),
                ScriptedLLM.fail("the checker's model crashed"),
            ]
        ),
    )
    researcher = define_agent(
        "researcher",
        tools=[create_sub_agent_tool(checker, Query), broken],
        output_schema=Report,
        llm=ScriptedLLM(
            [
                say(
                    text="Researching now.",
                    tool_calls=[
                        call("subagent__checker", {"query": "facts"}, id="c_check"),
                        call("broken", {"topic": "old"}, id="c_broken"),
                    ],
                ),
                ScriptedLLM.finish(
                    {"summary": "partial"}, text="Research finished despite failures.", id="c_done"
                ),
            ]
        ),
    )
    lead = define_agent(
        "lead",
        tools=[create_sub_agent_tool(researcher, Query), lookup],
        llm=ScriptedLLM(
            [
                say(
                    text="Let me plan this.",
                    tool_calls=[
                        call("lookup", {"topic": "plan"}, id="c_lookup"),
                        call("subagent__researcher", {"query": "everything"}, id="c_research"),
                    ],
                ),
                say(text="All done: the research is in."),
            ]
        ),
    )
    doomed = define_agent("doomed", llm=ScriptedLLM([ScriptedLLM.fail("the model is down")]))
    clerk = define_agent(
        "clerk",
        tools=[define_tool("confirm", "Asks the user to confirm.", Question, "client")],
        output_schema=Report,
        llm=ScriptedLLM(
            [
                call("confirm", {"question": "file it?"}, id="c_confirm"),
                ScriptedLLM.finish({"summary": "filed"}, text="Filed.", id="c_filed"),
            ]
        ),
    )
    desk = define_agent(
        "desk",
        tools=[create_sub_agent_tool(clerk, Query)],
        llm=ScriptedLLM(
            [call("subagent__clerk", {"query": "file"}, id="c_clerk"), "The clerk filed it."]
        ),
    )
    chat = define_agent("chat", llm=ScriptedLLM(["Hello.", "Hello again."]))
    return [lead, researcher, checker, doomed, clerk, desk, chat]


async def _node(script: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    assert NODE is not None
    done = await anyio.run_process(
        [NODE, str(JS / script), *args], cwd=JS, env={**os.environ, **(env or {})}, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    result: dict[str, Any] = json.loads(done.stdout)
    return result


async def _started(runtime: Runtime, server: AgentServer, *sessions: tuple[str, str]) -> None:
    for session_id, agent_type in sessions:
        await server.start_agent(
            RemoteStartRequest(session_id=session_id, agent_type=agent_type, message="go")
        )
        await runtime.settled(server, session_id)


def _ai_texts(message: dict[str, Any]) -> dict[str, str]:
    """The text parts the library built, joined per agent."""
    texts: dict[str, str] = defaultdict(str)
    for part in message["parts"]:
        if part["type"] == "text":
            texts[part["providerMetadata"]["helix"]["agentId"]] += part["text"]
    return dict(texts)


def _ai_tools(message: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tool parts the library built, by tool call id (each must appear once)."""
    tools: dict[str, dict[str, Any]] = {}
    for part in message["parts"]:
        if part["type"].startswith("tool-"):
            assert part["toolCallId"] not in tools, part
            tools[part["toolCallId"]] = {
                "type": part["type"],
                "state": part["state"],
                "input": part.get("input"),
                "output": part.get("output"),
                "errorText": part.get("errorText"),
            }
    return tools


def _ag_texts(messages: list[dict[str, Any]], root: str = ROOT) -> dict[str, str]:
    """The assistant messages the agent holds, their text joined per (sub)agent."""
    texts: dict[str, str] = defaultdict(str)
    for message in messages:
        if message["role"] == "assistant" and message.get("content"):
            texts[message.get("subagentRunId", root)] += message["content"]
    return dict(texts)


def _ag_results(messages: list[dict[str, Any]]) -> dict[str, str]:
    return {m["toolCallId"]: m["content"] for m in messages if m["role"] == "tool"}


async def test_ai_sdk_client_rebuilds_a_three_deep_tree(runtime: Runtime) -> None:
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(_agents(), MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
        ):
            await _started(runtime, server, (ROOT, "lead"), ("doomed-1", "doomed"))
            read = await _node("read_ai_sdk.mjs", url, ROOT)
            failed = await _node("read_ai_sdk.mjs", url, "doomed-1")

    assert read["headers"]["x-vercel-ai-ui-message-stream"] == "v1"
    assert read["headers"]["content-type"].startswith("text/event-stream")
    message = read["message"]
    assert read["errors"] == []
    assert message["id"] == ROOT
    assert message["metadata"]["status"] == "completed"
    assert message["metadata"]["output"] == "All done: the research is in."
    assert _ai_texts(message) == TEXTS
    # The root's two model turns are two steps.
    assert sum(part["type"] == "step-start" for part in message["parts"]) == 2

    tools = _ai_tools(message)
    # The researcher finished by a __finish__ call (c_done): the log keeps it, the
    # stream shows its output instead (no tool part reaches the library).
    assert not [t for t in tools.values() if t["type"] == "tool-__finish__"], tools
    assert not any("c_done" in call_id for call_id in tools)
    outputs = [p["data"] for p in message["parts"] if p["type"] == "data-output"]
    assert {"summary": "partial"} in [data["output"] for data in outputs]
    assert tools["c_lookup"]["type"] == "tool-lookup"
    assert tools["c_lookup"]["output"] == {"topic": "plan", "note": "notes on plan"}
    assert tools["c_research"]["output"] == {"summary": "partial"}
    broken = tools[f"{RESEARCHER}:c_broken"]
    assert broken["state"] == "output-error"
    assert "the old archive is offline" in broken["errorText"]
    check = tools[f"{RESEARCHER}:c_check"]
    assert (check["type"], check["state"]) == ("tool-subagent__checker", "output-error")
    assert "the checker's model crashed" in check["errorText"]
    grandchild_lookup = tools[f"{CHECKER}:c_lookup"]
    assert grandchild_lookup["output"] == {"topic": "facts", "note": "notes on facts"}

    agents = {p["id"]: p["data"] for p in message["parts"] if p["type"] == "data-agent"}
    assert agents[RESEARCHER]["status"] == "completed"
    assert (agents[RESEARCHER]["depth"], agents[RESEARCHER]["parentAgentId"]) == (1, ROOT)
    assert agents[CHECKER]["status"] == "failed"
    assert (agents[CHECKER]["depth"], agents[CHECKER]["parentAgentId"]) == (2, RESEARCHER)
    assert "the checker's model crashed" in agents[CHECKER]["error"]
    checker_text = next(
        p for p in message["parts"] if p["type"] == "text" and "Checking" in p["text"]
    )
    assert checker_text["providerMetadata"]["helix"]["parentAgentId"] == RESEARCHER

    assert failed["message"]["metadata"]["status"] == "failed"
    assert any("the model is down" in error for error in failed["errors"])


async def test_ai_sdk_client_resumes_with_last_event_id(runtime: Runtime) -> None:
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(_agents(), MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
        ):
            await _started(runtime, server, (ROOT, "lead"))
            whole = await _node("read_ai_sdk.mjs", url, ROOT)
            cuts = [await _node("read_ai_sdk.mjs", url, ROOT, str(cut)) for cut in (1, 4, 9, 16)]
    ids = [int(cut["lastEventId"]) for cut in cuts]
    assert ids == sorted(set(ids)), ids  # four different cut points
    for cut in cuts:
        assert cut["errors"] == []
        assert _ai_texts(cut["firstMessage"]) != TEXTS  # the first read was cut short
        assert _ai_texts(cut["message"]) == TEXTS
        assert _ai_tools(cut["message"]) == _ai_tools(whole["message"])
        assert cut["message"]["metadata"] == whole["message"]["metadata"]


async def test_ag_ui_client_rebuilds_a_three_deep_tree(runtime: Runtime) -> None:
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(_agents(), MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
        ):
            await _started(runtime, server, (ROOT, "lead"), ("doomed-1", "doomed"))
            read = await _node("read_ag_ui.mjs", url, ROOT)
            failed = await _node("read_ag_ui.mjs", url, "doomed-1")

    assert read["failures"] == [None]  # the verifier accepted every event
    assert read["runs"] == [{"outcome": "success", "result": "All done: the research is in."}]
    messages = read["messages"]
    assert _ag_texts(messages) == TEXTS
    results = _ag_results(messages)
    assert json.loads(results["c_lookup"]) == {"topic": "plan", "note": "notes on plan"}
    assert "the old archive is offline" in results[f"{RESEARCHER}:c_broken"]
    assert "the checker's model crashed" in results[f"{RESEARCHER}:c_check"]
    calls = {
        call["id"]: (message.get("subagentRunId"), call["function"]["name"])
        for message in messages
        if message["role"] == "assistant"
        for call in message.get("toolCalls", [])
    }
    assert calls[f"{CHECKER}:c_lookup"] == (CHECKER, "lookup")
    assert calls["c_research"] == (None, "subagent__researcher")
    # The researcher's __finish__ call (c_done) never reaches the library.
    assert "__finish__" not in [name for _, name in calls.values()]
    assert not any("c_done" in call_id for call_id in calls)

    events = read["events"]
    assert not [e for e in events if e.get("toolCallName") == "__finish__"]
    assert not [e for e in events if "c_done" in str(e.get("toolCallId", ""))]
    started = {e["subagentRunId"]: e for e in events if e["type"] == "SUBAGENT_STARTED"}
    assert "parentSubagentRunId" not in started[RESEARCHER]
    assert started[RESEARCHER]["parentToolCallId"] == "c_research"
    assert started[CHECKER]["parentSubagentRunId"] == RESEARCHER
    assert started[CHECKER]["parentToolCallId"] == f"{RESEARCHER}:c_check"
    errors = [e for e in events if e["type"] == "SUBAGENT_ERROR"]
    assert [e["subagentRunId"] for e in errors] == [CHECKER]
    finished = [e for e in events if e["type"] == "SUBAGENT_FINISHED"]
    assert [e["subagentRunId"] for e in finished] == [RESEARCHER]
    assert finished[0]["result"] == {"summary": "partial"}
    steps = [(e["type"], e.get("subagentRunId"), e["stepName"]) for e in events if "stepName" in e]
    assert ("STEP_STARTED", None, "step-2") in steps
    assert sum(kind == "STEP_STARTED" for kind, _, _ in steps) == sum(
        kind == "STEP_FINISHED" for kind, _, _ in steps
    )

    assert failed["failures"] == [None]
    assert failed["runs"] == [{"error": "LLM call failed: the model is down", "code": "FAILED"}]


async def test_ag_ui_client_resumes_with_last_event_id(runtime: Runtime) -> None:
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(_agents(), MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
        ):
            await _started(runtime, server, (ROOT, "lead"))
            whole = await _node("read_ag_ui.mjs", url, ROOT)
            cuts = [await _node("read_ag_ui.mjs", url, ROOT, str(cut)) for cut in (1, 6, 14, 25)]
    ids = [int(cut["lastEventId"]) for cut in cuts]
    assert ids == sorted(set(ids)), ids
    for cut in cuts:
        assert cut["failures"] == [None, None], cut["failures"]
        assert _ag_texts(cut["messages"]) == TEXTS
        assert _ag_results(cut["messages"]) == _ag_results(whole["messages"])
        assert cut["runs"] == whole["runs"]


async def test_a_tree_waiting_for_a_person_is_an_interrupt_then_a_new_run(runtime: Runtime) -> None:
    clerk = "desk-1-sub-c_clerk"
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(_agents(), MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
        ):
            await _started(runtime, server, ("desk-1", "desk"))
            assert (await server.get_status("desk-1")).status == "paused"
            # The stream of a paused tree stays open: the client ends its run at the interrupt.
            paused = await _node(
                "read_ag_ui.mjs", url, "desk-1", env={"HELIX_STOP_AT_INTERRUPT": "1"}
            )
            status = await server.get_status("desk-1")
            (call_id,) = [entry.tool_call_id for entry in status.pending_inputs]
            async with httpx.AsyncClient() as client:
                answer = await client.post(
                    f"{url}/submit-tool-result",
                    json={"sessionId": "desk-1", "toolCallId": call_id, "result": "yes"},
                )
                assert answer.status_code == 200, answer.text
            await runtime.settled(server, "desk-1")
            assert (await server.get_status("desk-1")).status == "completed"
            after = await _node("read_ag_ui.mjs", url, "desk-1")
            ai = await _node("read_ai_sdk.mjs", url, "desk-1")

    # The client's own abort of the open stream shows as a RUN_ERROR coded "abort".
    (run,) = [run for run in paused["runs"] if run.get("code") != "abort"]
    assert run["outcome"] == "interrupt"
    (interrupt,) = run["interrupts"]
    assert (interrupt["id"], interrupt["toolCallId"]) == (call_id, call_id)
    assert interrupt["subagentRunId"] == clerk
    assert interrupt["metadata"]["kind"] == "client_tool"
    assert interrupt["metadata"]["toolName"] == "confirm"
    suspended = [e for e in paused["events"] if e["type"] == "SUBAGENT_FINISHED"]
    assert [e["outcome"] for e in suspended] == [{"type": "suspended", "interruptIds": [call_id]}]

    # Read whole afterwards: the interrupted run, then the run that goes on.
    assert after["failures"] == [None]
    assert [r["outcome"] for r in after["runs"]] == ["interrupt", "success"]
    run_ids = [e["runId"] for e in after["events"] if e["type"] == "RUN_STARTED"]
    assert run_ids == ["desk-1:run-1", "desk-1:run-2"]
    reopened = [e for e in after["events"] if e["type"] == "SUBAGENT_STARTED"]
    assert [e["subagentRunId"] for e in reopened] == [clerk, clerk]
    assert _ag_texts(after["messages"], "desk-1") == {
        clerk: "Filed.",
        "desk-1": "The clerk filed it.",
    }
    assert _ag_results(after["messages"])[f"{clerk}:{call_id}"] == "yes"

    message = ai["message"]
    (asked,) = [p["data"] for p in message["parts"] if p["type"] == "data-input-required"]
    assert [(p["kind"], p["toolCallId"], p["ownerSessionId"]) for p in asked["pending"]] == [
        ("client_tool", call_id, clerk)
    ]
    confirm = _ai_tools(message)[f"{clerk}:{call_id}"]
    assert (confirm["type"], confirm["state"], confirm["output"]) == (
        "tool-confirm",
        "output-available",
        "yes",
    )
    assert message["metadata"]["status"] == "completed"


async def _restarted_log(store: MemoryEventStore) -> None:
    """A log whose step was cut mid-text and re-done: ``step_restarted`` voids 2 deltas."""

    def text(delta: str) -> TextDelta:
        return TextDelta(agent_id="cut-1", agent_type="lead", delta=delta)

    events: list[Event] = [
        SessionCreated(agent_type="lead", run_id="r1"),
        RunStarted(run_id="r1"),
        text("half "),
        text("said"),
        RunStarted(run_id="r2", mode="continue"),
        StepRestarted(
            agent_id="cut-1",
            agent_type="lead",
            step=1,
            discard_from=2,
            discard_deltas=2,
            discard_chars=9,
        ),
        text("whole answer"),
        Completed(output="whole answer"),
    ]
    stamped = [
        msgspec.structs.replace(event, session_id="cut-1", seq=index, ts=0.0)
        for index, event in enumerate(events, start=1)
    ]
    await store.append("cut-1", stamped, expected_seq=0)


async def test_step_restarted_marks_the_void_text_for_both_clients(runtime: Runtime) -> None:
    store = MemoryEventStore()
    await _restarted_log(store)
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(_agents(), store) as server,
            serve(create_http_app(server)) as url,
        ):
            ai = await _node("read_ai_sdk.mjs", url, "cut-1")
            ag = await _node("read_ag_ui.mjs", url, "cut-1")

    texts = [p for p in ai["message"]["parts"] if p["type"] == "text"]
    assert [(p["text"], p["providerMetadata"]["helix"].get("discarded")) for p in texts] == [
        ("half said", True),
        ("whole answer", None),
    ]
    (restart,) = [p["data"] for p in ai["message"]["parts"] if p["type"] == "data-step-restarted"]
    assert (restart["discardDeltas"], restart["discardChars"]) == (2, 9)

    assert ag["failures"] == [None]
    (custom,) = [e for e in ag["events"] if e.get("name") == "helix.step_restarted"]
    void = custom["value"]["messageId"]
    kept = [m for m in ag["messages"] if m["role"] == "assistant" and m["id"] != void]
    assert [m["content"] for m in kept] == ["whole answer"]
    assert [m["content"] for m in ag["messages"] if m["id"] == void] == ["half said"]


async def test_bad_format_and_unknown_session_are_refused_before_streaming(
    runtime: Runtime,
) -> None:
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(_agents(), MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
            httpx.AsyncClient() as client,
        ):
            await _started(runtime, server, (ROOT, "lead"))
            bad = await client.get(f"{url}/sse", params={"sessionId": ROOT, "format": "vercel"})
            assert bad.status_code == 400
            assert bad.json()["code"] == "INVALID_REQUEST"
            assert "format must be one of helix, ai-sdk, ag-ui" in bad.json()["error"]
            for fmt in ("ai-sdk", "ag-ui"):
                missing = await client.get(
                    f"{url}/sse", params={"sessionId": "nobody-1", "format": fmt}
                )
                assert missing.status_code == 404
                assert missing.json()["code"] == "NOT_FOUND"
                head = await client.head(f"{url}/sse", params={"sessionId": ROOT, "format": fmt})
                assert head.status_code == 200
                assert head.content == b""
                assert head.headers["content-type"].startswith("text/event-stream")
            helix = await client.get(f"{url}/sse", params={"sessionId": ROOT, "format": "helix"})
            assert b"event: end" in helix.content


async def _frames(
    client: httpx.AsyncClient, url: str, fmt: str, last_event_id: str | None = None
) -> list[tuple[str | None, dict[str, Any]]]:
    """The raw frames of a stream: (its id, its JSON), the AI SDK's ``[DONE]`` left out."""
    headers = {} if last_event_id is None else {"Last-Event-ID": last_event_id}
    params = {"sessionId": ROOT, "format": fmt}
    answer = await client.get(f"{url}/sse", params=params, headers=headers)
    assert answer.status_code == 200
    frames: list[tuple[str | None, dict[str, Any]]] = []
    for block in answer.text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in lines and lines["data"] != "[DONE]":
            frames.append((lines.get("id"), json.loads(lines["data"])))
    return frames


class _CountStreams:
    """ASGI middleware: sets ``both`` once two ``GET /sse`` requests have arrived."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.seen = 0
        self.both = anyio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/sse" and scope["method"] == "GET":
            self.seen += 1
            if self.seen == 2:
                self.both.set()
        await self.app(scope, receive, send)


async def test_both_clients_read_a_running_tree_live(runtime: Runtime) -> None:
    gate = anyio.Event()
    reads: dict[str, dict[str, Any]] = {}

    async def read(script: str) -> None:
        reads[script] = await _node(script, url, ROOT)

    with anyio.fail_after(LIMIT):
        async with runtime.server(_agents(gate), MemoryEventStore()) as server:
            app = _CountStreams(create_http_app(server))
            async with serve(app) as url:
                await server.start_agent(
                    RemoteStartRequest(session_id=ROOT, agent_type="lead", message="go")
                )
                async with anyio.create_task_group() as tg:
                    tg.start_soon(read, "read_ai_sdk.mjs")
                    tg.start_soon(read, "read_ag_ui.mjs")
                    # The tree's lookups wait until both clients are reading: they read it live.
                    await app.both.wait()
                    assert (await server.get_status(ROOT)).status == "running"
                    gate.set()

    ai, ag = reads["read_ai_sdk.mjs"], reads["read_ag_ui.mjs"]
    assert ai["errors"] == []
    assert _ai_texts(ai["message"]) == TEXTS
    assert ai["message"]["metadata"]["status"] == "completed"
    assert ag["failures"] == [None]
    assert _ag_texts(ag["messages"]) == TEXTS
    assert ag["runs"] == [{"outcome": "success", "result": "All done: the research is in."}]


@pytest.mark.parametrize("fmt", ["ai-sdk", "ag-ui"])
async def test_every_resume_point_yields_the_later_ids_exactly_once(
    fmt: str, runtime: Runtime
) -> None:
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(_agents(), MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
            httpx.AsyncClient() as client,
        ):
            await _started(runtime, server, (ROOT, "lead"))
            whole = await _frames(client, url, fmt)
            ids = [int(frame_id) for frame_id, _ in whole if frame_id is not None]
            assert ids == sorted(set(ids))  # one id per chunk, increasing
            assert len(ids) > 20
            for cut in ids:
                resumed = await _frames(client, url, fmt, str(cut))
                later = [int(frame_id) for frame_id, _ in resumed if frame_id is not None]
                assert later == [i for i in ids if i > cut]
                # The same ending, once.
                assert resumed[-1][1] == whole[-1][1]


async def test_http_agent_runs_a_tree_then_answers_its_interrupt_by_post(runtime: Runtime) -> None:
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(_agents(), MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
        ):
            tree = await _node("run_ag_ui.mjs", url, ROOT, "lead")
            desk = await _node("run_ag_ui.mjs", url, "desk-1", "desk", '"yes"')
            chat = [await _node("run_ag_ui.mjs", url, "chat-1", "chat") for _ in range(2)]
            chat_state = project_state(await server.store.read("chat-1"))
            assert (await server.get_status(ROOT)).status == "completed"
            assert (await server.get_status("desk-1")).status == "completed"

    # The unmodified HttpAgent started the tree with its RunAgentInput and read the run.
    assert tree["failures"] == [None]
    assert tree["runs"] == [{"outcome": "success", "result": "All done: the research is in."}]
    assert _ag_texts(tree["messages"]) == TEXTS
    started = [e for e in tree["events"] if e["type"] == "RUN_STARTED"]
    assert [(e["threadId"], e["runId"]) for e in started] == [(ROOT, "client-run-1")]

    # The run ends at the interrupt; the next run answers it through `resume`.
    clerk = "desk-1-sub-c_clerk"
    assert desk["failures"] == [None, None]
    interrupted, finished = desk["runs"]
    assert interrupted["outcome"] == "interrupt"
    (interrupt,) = interrupted["interrupts"]
    assert finished == {"outcome": "success", "result": "The clerk filed it."}
    run_ids = [e["runId"] for e in desk["events"] if e["type"] == "RUN_STARTED"]
    assert run_ids == ["client-run-1", "client-run-2"]
    assert _ag_results(desk["messages"])[f"{clerk}:{interrupt['id']}"] == "yes"
    assert _ag_texts(desk["messages"], "desk-1") == {
        clerk: "Filed.",
        "desk-1": "The clerk filed it.",
    }

    # A finished thread takes the next run as a follow-up turn, with its memory.
    first, second = chat
    assert first["runs"] == [{"outcome": "success", "result": "Hello."}]
    assert second["failures"] == [None]
    assert second["runs"] == [{"outcome": "success", "result": "Hello again."}]
    turns = [e for e in second["events"] if e["type"] == "RUN_STARTED"]
    assert len(turns) == 1  # the second run streams only its own turn
    said = [(type(m).__name__, m.content) for m in chat_state.messages]
    assert said == [
        ("UserMessage", "go"),
        ("AssistantMessage", "Hello."),
        ("UserMessage", "go"),
        ("AssistantMessage", "Hello again."),
    ]


async def test_a_bad_run_request_is_refused_and_changes_nothing(runtime: Runtime) -> None:
    run = {
        "threadId": "new-1",
        "runId": "r",
        "messages": [{"id": "u", "role": "user", "content": "go"}],
    }
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(_agents(), MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
            httpx.AsyncClient() as client,
        ):
            refusals = [
                (f"{url}/sse", run, "INVALID_REQUEST", "needs format=ag-ui"),
                (f"{url}/sse?format=ag-ui", run, "NOT_FOUND", "agentType"),
                (f"{url}/sse?format=ag-ui&agentType=nobody", run, "NOT_FOUND", "nobody"),
                (
                    f"{url}/sse?format=ag-ui&agentType=chat",
                    {**run, "messages": []},
                    "INVALID_REQUEST",
                    "no user message",
                ),
                (
                    f"{url}/sse?format=ag-ui",
                    {**run, "resume": [{"interruptId": "x", "status": "resolved"}]},
                    "NOT_FOUND",
                    "new-1",
                ),
            ]
            said = {"id": "u", "role": "user", "parts": [{"type": "text", "text": "go"}]}
            refusals += [
                (
                    f"{url}/sse?format=ai-sdk",
                    {"id": "new-1", "messages": [said]},
                    "NOT_FOUND",
                    "agentType",
                ),
                (
                    f"{url}/sse?format=ai-sdk&agentType=chat",
                    {"id": "new-1", "messages": [{**said, "role": "assistant"}]},
                    "INVALID_REQUEST",
                    "no user message",
                ),
                (  # fits neither shape: the format's own error names what is missing
                    f"{url}/sse?format=ai-sdk&agentType=chat",
                    {"messages": [said]},
                    "INVALID_REQUEST",
                    "`id`",
                ),
                (
                    f"{url}/sse?format=ai-sdk&agentType=chat",
                    {"id": "new-1", "messages": [said], "trigger": "regenerate-message"},
                    "INVALID_REQUEST",
                    "only submit-message",
                ),
                (
                    f"{url}/sse?format=ai-sdk&agentType=chat",
                    {"id": "new 1", "messages": [said]},
                    "INVALID_REQUEST",
                    "id",
                ),
            ]
            for target, body, code, words in refusals:
                answer = await client.post(target, json=body)
                assert answer.json()["code"] == code, (target, answer.text)
                assert words in answer.json()["error"]
            assert (
                await client.get(f"{url}/status", params={"sessionId": "new-1"})
            ).status_code == 404

            await _started(runtime, server, ("desk-1", "desk"))
            before = await server.get_status("desk-1")
            (pending,) = before.pending_inputs
            stale = {
                **run,
                "threadId": "desk-1",
                "resume": [
                    {"interruptId": pending.tool_call_id, "status": "resolved", "payload": "ok"},
                    {"interruptId": "no-such-call", "status": "resolved"},
                ],
            }
            answer = await client.post(f"{url}/sse?format=ag-ui", json=stale)
            assert answer.status_code == 404
            assert "no-such-call" in answer.json()["error"]
            # Checked before any was sent: the first, valid answer was not submitted either.
            assert await server.get_status("desk-1") == before


async def test_chat_transport_runs_a_tree_and_answers_a_client_tool_by_post(
    runtime: Runtime,
) -> None:
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(_agents(), MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
        ):
            tree = await _node("chat_ai_sdk.mjs", url, ROOT, "lead")
            desk = await _node("chat_ai_sdk.mjs", url, "desk-1", "desk", '"yes"')
            hello = await _node("chat_ai_sdk.mjs", url, "chat-9", "chat")
            again = await _node("chat_ai_sdk.mjs", url, "chat-9", "chat")
            assert (await server.get_status("desk-1")).status == "completed"
            assert (await server.get_status("chat-9")).status == "completed"

    # useChat's transport started the tree with its messages and built the reply.
    (reply,) = tree["replies"]
    assert reply["errors"] == []
    assert reply["message"]["id"] == f"{ROOT}:0"
    assert reply["message"]["metadata"]["status"] == "completed"
    assert _ai_texts(reply["message"]) == TEXTS
    assert _ai_tools(reply["message"])[f"{RESEARCHER}:c_broken"]["state"] == "output-error"

    # The reply stops where the clerk's client tool waits; its output, sent back as
    # addToolResult leaves it, goes to the clerk and the reply goes on in the same message.
    clerk = "desk-1-sub-c_clerk"
    asked, answered = desk["replies"]
    assert asked["errors"] == answered["errors"] == []
    assert asked["message"]["metadata"]["status"] == "paused"
    (waiting,) = [
        p["data"] for p in asked["message"]["parts"] if p["type"] == "data-input-required"
    ]
    (entry,) = waiting["pending"]
    call_id = f"{clerk}:{entry['toolCallId']}"
    assert _ai_tools(asked["message"])[call_id]["state"] == "input-available"
    assert answered["message"]["id"] == asked["message"]["id"]
    confirm = _ai_tools(answered["message"])[call_id]
    assert (confirm["state"], confirm["output"]) == ("output-available", "yes")
    assert _ai_texts(answered["message"]) == {clerk: "Filed.", "desk-1": "The clerk filed it."}
    assert answered["message"]["metadata"]["status"] == "completed"

    # A finished chat takes the next message as a follow-up turn: a new reply.
    (first,) = hello["replies"]
    (followed,) = again["replies"]
    assert first["errors"] == followed["errors"] == []
    assert _ai_texts(first["message"]) == {"chat-9": "Hello."}
    assert _ai_texts(followed["message"]) == {"chat-9": "Hello again."}
    assert followed["message"]["metadata"]["status"] == "completed"
    assert followed["message"]["id"] != first["message"]["id"]


async def test_either_body_runs_under_either_format(runtime: Runtime) -> None:
    """``format`` picks the stream; the body is read as the shape it fits."""
    said = {"id": "u", "role": "user", "parts": [{"type": "text", "text": "go"}]}
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(_agents(), MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
            httpx.AsyncClient() as client,
        ):
            chat_body = {"id": "mixed-1", "messages": [said]}
            as_ag_ui = await client.post(f"{url}/sse?format=ag-ui&agentType=chat", json=chat_body)
            ag_ui_body = {
                "threadId": "mixed-2",
                "runId": "run-7",
                "messages": [{"id": "u", "role": "user", "content": "go"}],
            }
            as_ai_sdk = await client.post(
                f"{url}/sse?format=ai-sdk&agentType=chat", json=ag_ui_body
            )
    assert as_ag_ui.status_code == 200, as_ag_ui.text
    frames = [
        json.loads(line[5:]) for line in as_ag_ui.text.splitlines() if line.startswith("data:")
    ]
    kinds = [frame["type"] for frame in frames]
    assert (kinds[0], frames[0]["threadId"]) == ("RUN_STARTED", "mixed-1")
    assert kinds[-1] == "RUN_FINISHED"
    assert "Hello." in "".join(f.get("delta", "") for f in frames)

    assert as_ai_sdk.status_code == 200, as_ai_sdk.text
    assert as_ai_sdk.headers["x-vercel-ai-ui-message-stream"] == "v1"
    parts = [
        json.loads(line[5:])
        for line in as_ai_sdk.text.splitlines()
        if line.startswith("data:") and line != "data: [DONE]"
    ]
    assert (parts[0]["type"], parts[0]["messageId"]) == ("start", "run-7")
    assert "Hello." in "".join(p.get("delta", "") for p in parts)
    assert parts[-1]["type"] == "finish"
    assert (await server.get_status("mixed-1")).status == "completed"
    assert (await server.get_status("mixed-2")).status == "completed"


def _sse_data(text: str) -> list[dict[str, Any]]:
    """The JSON of each ``data:`` frame of a front-end stream (the AI SDK's ``[DONE]`` left out)."""
    return [
        json.loads(line[5:])
        for line in text.splitlines()
        if line.startswith("data:") and line != "data: [DONE]"
    ]


def _said(frames: list[dict[str, Any]]) -> str:
    """The text deltas of a stream, joined (AG-UI's ``delta`` and the AI SDK's alike)."""
    return "".join(
        frame.get("delta", "")
        for frame in frames
        if frame["type"] in ("TEXT_MESSAGE_CONTENT", "text-delta")
    )


def _blank(session_id: str, fmt: str) -> dict[str, Any]:
    """A front end's run on ``session_id`` whose user message has no text (in ``fmt``'s shape)."""
    if fmt == "ag-ui":
        return {
            "threadId": session_id,
            "runId": "again-1",
            "messages": [{"id": "u", "role": "user", "content": "  "}],
        }
    return {"id": session_id, "messages": [{"id": "u", "role": "user", "parts": []}]}


async def _interrupted_chat(store: MemoryEventStore) -> None:
    """A ``chat`` session interrupted mid-answer: ``Hel`` said, then ``interrupted``."""
    events: list[Event] = [
        SessionCreated(agent_type="chat", run_id="r1"),
        RunStarted(run_id="r1", messages=[UserMessage(content="go")]),
        TextDelta(agent_id="stop-1", agent_type="chat", delta="Hel"),
        Interrupted(reason="user pressed stop"),
    ]
    stamped = [
        msgspec.structs.replace(event, session_id="stop-1", seq=index, ts=0.0)
        for index, event in enumerate(events, start=1)
    ]
    await store.append("stop-1", stamped, expected_seq=0)


@pytest.mark.parametrize("fmt", ["ag-ui", "ai-sdk"])
async def test_no_text_on_a_finished_session_replays_its_last_run(
    fmt: str, runtime: Runtime
) -> None:
    """Completed or failed: the last run's stream again, to its end; nothing is run."""
    said = {"id": "u", "role": "user", "parts": [{"type": "text", "text": "go"}]}
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(_agents(), MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
            httpx.AsyncClient() as client,
        ):
            target = f"{url}/sse?format={fmt}&agentType=chat"
            first = await client.post(target, json={"id": "chat-1", "messages": [said]})
            before = await server.get_status("chat-1")
            second = await client.post(target, json={"id": "chat-1", "messages": [said]})
            after = await server.get_status("chat-1")
            assert after.run_from_sequence == before.latest_sequence
            again = await client.post(target, json=_blank("chat-1", fmt))
            assert again.status_code == 200, again.text
            assert await server.get_status("chat-1") == after  # nothing ran, nothing was logged
            await _started(runtime, server, ("doomed-1", "doomed"))
            failed_before = await server.get_status("doomed-1")
            failed = await client.post(f"{url}/sse?format={fmt}", json=_blank("doomed-1", fmt))
            assert await server.get_status("doomed-1") == failed_before

    assert _said(_sse_data(first.text)) == "Hello."
    replayed, original = _sse_data(again.text), _sse_data(second.text)
    assert _said(replayed) == _said(original) == "Hello again."  # that run only
    if fmt == "ag-ui":
        assert (replayed[0]["type"], replayed[0]["runId"]) == ("RUN_STARTED", "again-1")
        assert replayed[-1] == {**original[-1], "runId": "again-1"}
        assert replayed[-1]["type"] == "RUN_FINISHED"
    else:
        # The same message id as the reply it replays: the client replaces it in place.
        assert replayed == original
        assert replayed[-1]["type"] == "finish"
        assert again.text.endswith("data: [DONE]\n\n")
    assert failed.status_code == 200, failed.text
    ending = _sse_data(failed.text)[-1]
    if fmt == "ag-ui":
        assert ending["type"] == "RUN_ERROR"
        assert ending["message"].endswith("the model is down")
    else:
        assert ending["messageMetadata"]["status"] == "failed"


async def test_no_text_on_a_paused_session_streams_its_run_up_to_the_interrupt(
    runtime: Runtime,
) -> None:
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(_agents(), MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
            httpx.AsyncClient() as client,
        ):
            await _started(runtime, server, ("desk-1", "desk"))
            before = await server.get_status("desk-1")
            (pending,) = before.pending_inputs
            runs = {
                fmt: await client.post(f"{url}/sse?format={fmt}", json=_blank("desk-1", fmt))
                for fmt in ("ag-ui", "ai-sdk")
            }
            assert await server.get_status("desk-1") == before  # still waiting, unanswered

    ag_ui = _sse_data(runs["ag-ui"].text)
    assert runs["ag-ui"].status_code == 200, runs["ag-ui"].text
    assert ag_ui[0]["type"] == "RUN_STARTED"
    assert ag_ui[-1]["type"] == "RUN_FINISHED"
    assert ag_ui[-1]["outcome"]["type"] == "interrupt"
    assert [i["id"] for i in ag_ui[-1]["outcome"]["interrupts"]] == [pending.tool_call_id]
    ai_sdk = _sse_data(runs["ai-sdk"].text)
    assert runs["ai-sdk"].status_code == 200, runs["ai-sdk"].text
    (waiting,) = [p["data"] for p in ai_sdk if p["type"] == "data-input-required"]
    assert [p["toolCallId"] for p in waiting["pending"]] == [pending.tool_call_id]
    assert ai_sdk[-1]["messageMetadata"]["status"] == "paused"


@pytest.mark.parametrize("fmt", ["ag-ui", "ai-sdk"])
async def test_no_text_on_an_interrupted_session_resumes_it_with_no_message(
    fmt: str, runtime: Runtime
) -> None:
    store = MemoryEventStore()
    await _interrupted_chat(store)
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(_agents(), store) as server,
            serve(create_http_app(server)) as url,
            httpx.AsyncClient() as client,
        ):
            answer = await client.post(f"{url}/sse?format={fmt}", json=_blank("stop-1", fmt))
            assert answer.status_code == 200, answer.text
            await runtime.settled(server, "stop-1")
            assert (await server.get_status("stop-1")).status == "completed"

    frames = _sse_data(answer.text)
    assert _said(frames) == "Hello."  # the new run only: not the interrupted "Hel"
    assert frames[-1]["type"] == ("RUN_FINISHED" if fmt == "ag-ui" else "finish")
    # Resumed with no message: the conversation holds no empty user message.
    resumed = [e for e in await store.read("stop-1") if isinstance(e, RunStarted)][-1]
    assert resumed.mode == "resume"
    assert resumed.messages == []


async def test_no_text_on_a_running_session_streams_its_run_live_from_its_start(
    runtime: Runtime,
) -> None:
    """A front end reattaching: what the run said so far, then the rest as it comes."""
    gate = anyio.Event()
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(_agents(gate), MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
            httpx.AsyncClient() as client,
        ):
            await server.start_agent(
                RemoteStartRequest(session_id=ROOT, agent_type="lead", message="go")
            )
            frames: list[dict[str, Any]] = []
            body = _blank(ROOT, "ag-ui")
            async with client.stream("POST", f"{url}/sse?format=ag-ui", json=body) as answer:
                assert answer.status_code == 200
                async for line in answer.aiter_lines():
                    if line.startswith("data:"):
                        frames.append(json.loads(line[5:]))
                    # The tree waits at the gate: what it said so far came first.
                    if not gate.is_set() and "Let me plan this." in _said(frames):
                        assert (await server.get_status(ROOT)).status == "running"
                        gate.set()
            assert (await server.get_status(ROOT)).status == "completed"

    assert gate.is_set()
    assert frames[0] == {"type": "RUN_STARTED", "threadId": ROOT, "runId": "again-1"}
    assert frames[-1]["type"] == "RUN_FINISHED"
    assert frames[-1]["result"] == "All done: the research is in."
    by_agent: dict[str, str] = defaultdict(str)
    for frame in frames:
        if frame["type"] == "TEXT_MESSAGE_CONTENT":
            by_agent[frame.get("subagentRunId", ROOT)] += frame["delta"]
    assert dict(by_agent) == TEXTS


async def test_a_reloaded_http_agent_reattaches_with_no_text_and_answers_the_interrupt(
    runtime: Runtime,
) -> None:
    """An unmodified HttpAgent whose user message is empty gets the thread's current run."""
    reload = {"HELIX_MESSAGE": ""}
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(_agents(), MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
        ):
            await _started(runtime, server, (ROOT, "lead"), ("desk-1", "desk"))
            before = await server.get_status(ROOT)
            tree = await _node("run_ag_ui.mjs", url, ROOT, "lead", env=reload)
            assert await server.get_status(ROOT) == before
            desk = await _node("run_ag_ui.mjs", url, "desk-1", "desk", '"yes"', env=reload)
            assert (await server.get_status("desk-1")).status == "completed"

    # The finished tree: its run again, rebuilt whole by the client; nothing ran.
    assert tree["failures"] == [None]
    assert tree["runs"] == [{"outcome": "success", "result": "All done: the research is in."}]
    assert _ag_texts(tree["messages"]) == TEXTS
    # The paused tree: its run up to the interrupt, which the reloaded client then answers.
    assert desk["failures"] == [None, None]
    asked, finished = desk["runs"]
    assert asked["outcome"] == "interrupt"
    assert finished == {"outcome": "success", "result": "The clerk filed it."}
    assert _ag_texts(desk["messages"], "desk-1") == {
        "desk-1-sub-c_clerk": "Filed.",
        "desk-1": "The clerk filed it.",
    }


def _history(session_id: str, fmt: str, *said: tuple[str, str]) -> dict[str, Any]:
    """A front end's run on ``session_id`` with ``(role, text)`` messages, in ``fmt``'s shape."""
    if fmt == "ag-ui":
        messages = [
            {"id": f"m{index}", "role": role, "content": text}
            for index, (role, text) in enumerate(said)
        ]
        return {"threadId": session_id, "runId": "run-h", "messages": messages}
    messages = [
        {"id": f"m{index}", "role": role, "parts": [{"type": "text", "text": text}]}
        for index, (role, text) in enumerate(said)
    ]
    return {"id": session_id, "messages": messages}


@pytest.mark.parametrize("fmt", ["ag-ui", "ai-sdk"])
async def test_a_body_ending_in_the_reply_says_nothing_new_to_a_known_session(
    fmt: str, runtime: Runtime
) -> None:
    """A known session's new message is the body's last one, and only if the user said it.

    A body whose user message is followed by the assistant's reply is the
    conversation so far: the front end reattaches, and the question is not
    asked again as a new turn.
    """
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(_agents(), MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
            httpx.AsyncClient() as client,
        ):
            target = f"{url}/sse?format={fmt}&agentType=chat"
            first = await client.post(target, json=_history("chat-2", fmt, ("user", "go")))
            before = await server.get_status("chat-2")
            again = await client.post(
                target, json=_history("chat-2", fmt, ("user", "go"), ("assistant", "Hello."))
            )
            assert again.status_code == 200, again.text
            assert await server.get_status("chat-2") == before  # nothing ran, nothing was logged
            follow = await client.post(
                target,
                json=_history(
                    "chat-2", fmt, ("user", "go"), ("assistant", "Hello."), ("user", "and?")
                ),
            )
            assert follow.status_code == 200, follow.text

    assert _said(_sse_data(first.text)) == "Hello."
    assert _said(_sse_data(again.text)) == "Hello."  # the last run, replayed
    assert _said(_sse_data(follow.text)) == "Hello again."  # a new last user message: a turn
    runs = [e for e in await server.executor.store.read("chat-2") if isinstance(e, RunStarted)]
    assert len(runs) == 2  # the start's, then the follow-up's: "go" was not asked again
    assert [m.content for m in runs[1].messages] == ["and?"]


async def test_ag_ui_tool_messages_answer_the_pending_client_tool(runtime: Runtime) -> None:
    """AG-UI's frontend tool flow: the result comes back as a ``tool`` message in the next run.

    Its ``toolCallId`` is the stream's id of the call; a JSON object in
    ``content`` is the result decoded. The same body again answers nothing
    (the call is no longer pending): it reattaches, and nothing runs.
    """
    clerk = "desk-2-sub-c_clerk"
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(_agents(), MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
            httpx.AsyncClient() as client,
        ):
            await _started(runtime, server, ("desk-2", "desk"))
            (pending,) = (await server.get_status("desk-2")).pending_inputs
            stream_id = f"{clerk}:{pending.tool_call_id}"  # its TOOL_CALL_START's id
            messages = [
                {"id": "u", "role": "user", "content": "go"},
                {"id": "t", "role": "tool", "toolCallId": stream_id, "content": '{"ok": 1}'},
            ]
            body = {"threadId": "desk-2", "runId": "run-t", "messages": messages}
            answered = await client.post(f"{url}/sse?format=ag-ui", json=body)
            assert answered.status_code == 200, answered.text
            await runtime.settled(server, "desk-2")
            done = await server.get_status("desk-2")
            again = await client.post(f"{url}/sse?format=ag-ui", json=body)
            assert again.status_code == 200, again.text
            assert await server.get_status("desk-2") == done

    assert done.status == "completed"
    frames = _sse_data(answered.text)
    assert (frames[0]["type"], frames[0]["runId"]) == ("RUN_STARTED", "run-t")
    assert frames[-1]["type"] == "RUN_FINISHED"
    assert frames[-1].get("outcome", {}).get("type", "success") == "success"
    (result,) = [
        f for f in frames if f["type"] == "TOOL_CALL_RESULT" and f["toolCallId"] == stream_id
    ]
    assert json.loads(result["content"]) == {"ok": 1}
    assert _said(frames) == "Filed.The clerk filed it."
    (ended,) = [
        e
        for e in await server.executor.store.read(clerk)
        if isinstance(e, ToolEnd) and e.tool_call_id == pending.tool_call_id
    ]
    assert ended.result == {"ok": 1}
    assert _said(_sse_data(again.text)) == "Filed.The clerk filed it."  # the run replayed


async def test_malformed_tool_answers_answer_nothing(runtime: Runtime) -> None:
    """Tool parts or messages whose ``toolCallId`` is not a string, or ``parts`` not a list.

    They name no pending call, so they answer nothing: the front end
    reattaches to the paused tree (200, nothing submitted), never a 500.
    """
    asked = {"id": "u", "role": "user", "parts": [{"type": "text", "text": "go"}]}
    tool_part = {"type": "tool-confirm", "state": "output-available", "output": "yes"}
    bodies = [
        (
            "ai-sdk",
            {
                "id": "desk-4",
                "messages": [
                    asked,
                    {"id": "a", "role": "assistant", "parts": [{**tool_part, "toolCallId": ["x"]}]},
                ],
            },
        ),
        ("ai-sdk", {"id": "desk-4", "messages": [asked, {"role": "assistant", "parts": 5}]}),
        (
            "ag-ui",
            {
                "threadId": "desk-4",
                "runId": "r-4",
                "messages": [
                    {"id": "u", "role": "user", "content": "go"},
                    {"id": "t", "role": "tool", "toolCallId": {"id": 1}, "content": "yes"},
                ],
            },
        ),
    ]
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(_agents(), MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
            httpx.AsyncClient() as client,
        ):
            await _started(runtime, server, ("desk-4", "desk"))
            before = await server.get_status("desk-4")
            for fmt, body in bodies:
                answer = await client.post(f"{url}/sse?format={fmt}", json=body)
                assert answer.status_code == 200, answer.text
                assert await server.get_status("desk-4") == before  # still waiting, unanswered


async def test_two_different_answers_to_one_call_are_refused_and_change_nothing(
    runtime: Runtime,
) -> None:
    """One body answering a call twice, differently: ``400``, and neither answer is submitted.

    An AG-UI ``resume`` naming an interrupt twice, two ``tool`` messages for
    one call, two AI SDK tool parts for one call. (The first used to be
    submitted before the second was refused: the request changed the tree.)
    The same answer twice is one answer.
    """
    clerk = "desk-5-sub-c_clerk"
    asked = {"id": "u", "role": "user", "parts": [{"type": "text", "text": "go"}]}
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(_agents(), MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
            httpx.AsyncClient() as client,
        ):
            await _started(runtime, server, ("desk-5", "desk"))
            before = await server.get_status("desk-5")
            (pending,) = before.pending_inputs
            stream_id = f"{clerk}:{pending.tool_call_id}"

            def resume(*payloads: str) -> dict[str, Any]:
                entries = [
                    {"interruptId": pending.tool_call_id, "status": "resolved", "payload": p}
                    for p in payloads
                ]
                return {"threadId": "desk-5", "runId": "r-5", "messages": [], "resume": entries}

            def tool_messages(*contents: str) -> dict[str, Any]:
                said = [{"id": "u", "role": "user", "content": "go"}]
                told = [
                    {"id": f"t{n}", "role": "tool", "toolCallId": stream_id, "content": content}
                    for n, content in enumerate(contents)
                ]
                return {"threadId": "desk-5", "runId": "r-5", "messages": said + told}

            def tool_parts(*outputs: str) -> dict[str, Any]:
                parts = [
                    {
                        "type": "tool-confirm",
                        "toolCallId": stream_id,
                        "state": "output-available",
                        "output": output,
                    }
                    for output in outputs
                ]
                reply = {"id": "a", "role": "assistant", "parts": parts}
                return {"id": "desk-5", "messages": [asked, reply]}

            refused = [
                ("ag-ui", resume("yes", "no"), "resume"),
                ("ag-ui", tool_messages("yes", "no"), "messages"),
                ("ai-sdk", tool_parts("yes", "no"), "messages"),
            ]
            for fmt, body, field in refused:
                answer = await client.post(f"{url}/sse?format={fmt}", json=body)
                assert answer.status_code == 400, answer.text
                assert answer.json() == {
                    "error": f"{field}: two different answers to {pending.tool_call_id!r}",
                    "code": "INVALID_REQUEST",
                }
                assert await server.get_status("desk-5") == before  # nothing submitted

            answered = await client.post(f"{url}/sse?format=ag-ui", json=resume("yes", "yes"))
            assert answered.status_code == 200, answered.text
            await runtime.settled(server, "desk-5")
    assert (await server.get_status("desk-5")).status == "completed"
    (ended,) = [
        e
        for e in await server.executor.store.read(clerk)
        if isinstance(e, ToolEnd) and e.tool_call_id == pending.tool_call_id
    ]
    assert ended.result == "yes"


async def test_a_tool_message_whose_content_nests_too_deep_is_refused(runtime: Runtime) -> None:
    """A ``tool`` message's JSON content is held to a result's nesting limit (63 levels).

    Thousands deep, decoding it raised ``RecursionError`` (a 500); a little
    over the limit, it reached the log although the same result in a
    ``/submit-tool-result`` body (one level down) is refused. Either is a
    ``400`` naming the content, and nothing is submitted; at the limit it is
    the call's result.
    """
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(_agents(), MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
            httpx.AsyncClient() as client,
        ):
            await _started(runtime, server, ("desk-6", "desk"))
            before = await server.get_status("desk-6")
            (pending,) = before.pending_inputs
            stream_id = f"desk-6-sub-c_clerk:{pending.tool_call_id}"
            for depth in (MAX_JSON_DEPTH, 5000):
                content = "[" * depth + "]" * depth
                body = {
                    "threadId": "desk-6",
                    "runId": "r-6",
                    "messages": [
                        {"id": "u", "role": "user", "content": "go"},
                        {"id": "t", "role": "tool", "toolCallId": stream_id, "content": content},
                    ],
                }
                answer = await client.post(f"{url}/sse?format=ag-ui", json=body)
                assert answer.status_code == 400, answer.text
                assert answer.json() == {
                    "error": "messages: a tool message's content: JSON nested deeper than "
                    f"{MAX_JSON_DEPTH - 1} levels",
                    "code": "INVALID_REQUEST",
                }
                assert await server.get_status("desk-6") == before
            depth = MAX_JSON_DEPTH - 1
            body["messages"][-1]["content"] = "[" * depth + "]" * depth
            answered = await client.post(f"{url}/sse?format=ag-ui", json=body)
            assert answered.status_code == 200, answered.text
            await runtime.settled(server, "desk-6")
    assert (await server.get_status("desk-6")).status == "completed"


async def test_a_refused_result_beside_an_approval_submits_neither(runtime: Runtime) -> None:
    """AG-UI ``resume`` approving one call and answering a client tool with a bad result.

    The result fails the tool's ``output_schema``, which only the call's
    owner checks: results are submitted before approvals, so its ``400``
    comes before the approval was sent (it used to be recorded first).
    """
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server([worker("worker", ("rm", "ask_user"))], MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
            httpx.AsyncClient() as client,
        ):
            await _started(runtime, server, ("bench-1", "worker"))
            before = await server.get_status("bench-1")
            ids = {p.kind: p.tool_call_id for p in before.pending_inputs}
            entries = [
                {"interruptId": ids["approval"], "status": "resolved", "payload": True},
                {"interruptId": ids["client_tool"], "status": "resolved", "payload": {"hue": 1}},
            ]
            body = {"threadId": "bench-1", "runId": "r-1", "messages": [], "resume": entries}
            answer = await client.post(f"{url}/sse?format=ag-ui", json=body)
            assert answer.status_code == 400, answer.text
            assert answer.json()["code"] == "INVALID_REQUEST"
            assert "color" in answer.json()["error"]
            assert await server.get_status("bench-1") == before  # the approval was not sent
