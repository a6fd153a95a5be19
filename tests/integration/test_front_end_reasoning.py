"""Reasoning and typed output that streams, read by the real ``ai`` and ``@ag-ui/client``.

A real uvicorn server on 127.0.0.1 serves ``/sse?format=ai-sdk`` and
``?format=ag-ui`` of agents whose scripted models think aloud and write their
typed output in pieces (``tests/integration/reasoning_agents.py``); the node
scripts in ``tests/js`` read them with each library's own client and print
what it rebuilt: AI SDK reasoning parts and a ``data-output`` part updated in
place; AG-UI reasoning messages and the agent state's ``output`` built by
``STATE_DELTA`` patches. Reads cut mid-way and resumed with ``Last-Event-ID``
rebuild the same. Skipped without node and ``npm ci`` in ``tests/js``, unless
``HELIX_REQUIRE_JS=1``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
import pytest
from reasoning_agents import ANSWER, LEAD_ANSWER, LEAD_THOUGHT, THOUGHT, TRIP, agents, growing
from servers import serve

from helix_agents.protocol import RemoteStartRequest
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from tests.integration._durable_kit import Runtime

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("runtime", ["builtin"], indirect=True)]

LIMIT = 60
JS = Path(__file__).resolve().parents[1] / "js"
NODE = shutil.which("node")
_INSTALLED = (JS / "node_modules" / "ai").is_dir() and (JS / "node_modules" / "@ag-ui").is_dir()

if NODE is None or not _INSTALLED:
    if os.environ.get("HELIX_REQUIRE_JS") == "1":
        raise RuntimeError(f"node and `npm ci` in {JS} are required (HELIX_REQUIRE_JS=1)")
    pytest.skip(f"needs node and `npm ci` in {JS}", allow_module_level=True)

CHILD = "lead-1-sub-c1"


async def _node(script: str, *args: str) -> dict[str, Any]:
    assert NODE is not None
    done = await anyio.run_process([NODE, str(JS / script), *args], cwd=JS, check=False)
    assert done.returncode == 0, done.stderr.decode()
    result: dict[str, Any] = json.loads(done.stdout)
    return result


async def _started(runtime: Runtime, server: AgentServer, *sessions: tuple[str, str]) -> None:
    for session_id, agent_type in sessions:
        await server.start_agent(
            RemoteStartRequest(session_id=session_id, agent_type=agent_type, message="plan")
        )
        await runtime.settled(server, session_id)


def _ai_parts(message: dict[str, Any], kind: str) -> dict[str, str]:
    """The library's parts of ``kind`` (``text``, ``reasoning``), their text joined per agent."""
    joined: dict[str, str] = defaultdict(str)
    for part in message["parts"]:
        if part["type"] == kind:
            joined[part["providerMetadata"]["helix"]["agentId"]] += part["text"]
    return dict(joined)


def _ag_messages(messages: list[dict[str, Any]], role: str, root: str) -> dict[str, str]:
    """The agent's messages of ``role`` (``assistant``, ``reasoning``), joined per (sub)agent."""
    joined: dict[str, str] = defaultdict(str)
    for message in messages:
        if message["role"] == role and message.get("content"):
            joined[message.get("subagentRunId", root)] += message["content"]
    return dict(joined)


async def test_ai_sdk_client_reads_reasoning_parts_and_the_output_as_it_grows(
    runtime: Runtime,
) -> None:
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(agents(), MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
        ):
            await _started(runtime, server, ("think-1", "thinker"), ("lead-1", "lead"))
            thinker = await _node("read_ai_sdk.mjs", url, "think-1")
            lead = await _node("read_ai_sdk.mjs", url, "lead-1")
            cuts = [await _node("read_ai_sdk.mjs", url, "lead-1", str(cut)) for cut in (3, 9, 14)]

    assert thinker["errors"] == []
    message = thinker["message"]
    assert _ai_parts(message, "reasoning") == {"think-1": THOUGHT}
    assert _ai_parts(message, "text") == {"think-1": ANSWER}
    (reasoning,) = [part for part in message["parts"] if part["type"] == "reasoning"]
    assert reasoning["state"] == "done"
    kinds = [part["type"] for part in message["parts"]]
    assert kinds.index("reasoning") < kinds.index("text")
    assert message["metadata"]["output"] == ANSWER

    assert lead["errors"] == []
    message = lead["message"]
    assert _ai_parts(message, "reasoning") == {"lead-1": LEAD_THOUGHT, CHILD: THOUGHT}
    assert _ai_parts(message, "text") == {"lead-1": LEAD_ANSWER}
    # The child's output: one data-output part, updated in place as it grew.
    (output,) = [p for p in message["parts"] if p["type"] == "data-output" and p["id"] == CHILD]
    assert output["data"]["output"] == TRIP
    assert "partial" not in output["data"]  # the validated output replaced the partial ones
    held: list[dict[str, Any]] = []  # each different value of the child's part, in order
    for outputs in lead["outputsSeen"]:
        for data in outputs:
            if data["agentId"] == CHILD and (not held or held[-1] != data):
                held.append(data)
    *partials, final = held
    seen = [data["output"] for data in partials]
    assert len(seen) >= 3
    assert growing(seen, TRIP)
    assert all(data["partial"] is True for data in partials)
    assert (final["output"], final.get("partial")) == (TRIP, None)

    for cut in cuts:
        assert cut["errors"] == []
        assert _ai_parts(cut["message"], "reasoning") == {"lead-1": LEAD_THOUGHT, CHILD: THOUGHT}
        (after,) = [
            p for p in cut["message"]["parts"] if p["type"] == "data-output" and p["id"] == CHILD
        ]
        assert after["data"]["output"] == TRIP
        assert cut["message"]["metadata"] == message["metadata"]
    assert len({cut["lastEventId"] for cut in cuts}) == 3


async def test_ag_ui_client_reads_reasoning_messages_and_the_output_as_state(
    runtime: Runtime,
) -> None:
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(agents(), MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
        ):
            await _started(runtime, server, ("plan-1", "planner"), ("lead-1", "lead"))
            planner = await _node("read_ag_ui.mjs", url, "plan-1")
            lead = await _node("read_ag_ui.mjs", url, "lead-1")
            cuts = [await _node("read_ag_ui.mjs", url, "plan-1", str(cut)) for cut in (2, 8, 12)]

    # The root's output so far is the agent state's ``output``, patched as it grows.
    assert planner["failures"] == [None]  # the verifier accepted every event
    assert planner["runs"] == [{"outcome": "success", "result": TRIP}]
    assert planner["state"] == {"output": TRIP}
    seen = [state["output"] for state in planner["states"]]
    assert len(seen) >= 4
    assert growing(seen, TRIP)
    deltas = [event for event in planner["events"] if event["type"] == "STATE_DELTA"]
    assert len(deltas) == len(seen)
    assert any(op["op"] == "replace" for event in deltas[1:] for op in event["delta"])
    assert _ag_messages(planner["messages"], "reasoning", "plan-1") == {"plan-1": THOUGHT}
    assert "reasoning" not in json.dumps(planner["runs"])

    # A sub-agent's: its reasoning messages carry its subagentRunId; its output so far is
    # a helix.partial_output event (the state is the run's agent's).
    assert lead["failures"] == [None]
    assert _ag_messages(lead["messages"], "reasoning", "lead-1") == {
        "lead-1": LEAD_THOUGHT,
        CHILD: THOUGHT,
    }
    assert _ag_messages(lead["messages"], "assistant", "lead-1") == {"lead-1": LEAD_ANSWER}
    partial = [e for e in lead["events"] if e.get("name") == "helix.partial_output"]
    assert {e["subagentRunId"] for e in partial} == {CHILD}
    assert growing([e["value"]["output"] for e in partial], TRIP)
    assert lead["state"] == {}
    finished = [e for e in lead["events"] if e["type"] == "SUBAGENT_FINISHED"]
    assert [e["result"] for e in finished] == [TRIP]

    for cut in cuts:
        assert cut["failures"] == [None, None], cut["failures"]
        assert cut["state"] == {"output": TRIP}  # a resumed reader's state is patched whole
        assert _ag_messages(cut["messages"], "reasoning", "plan-1") == {"plan-1": THOUGHT}
        assert cut["runs"] == planner["runs"]
    assert len({cut["lastEventId"] for cut in cuts}) == 3
