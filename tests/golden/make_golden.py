"""Write the golden parent session: ``parent_session.jsonl`` and its folded state.

A coordinator delegates to a researcher (which itself calls a searcher), waits for a
client tool result and for an approval, then completes. The log is deterministic: run
this script again and the files come out byte-identical. Regenerate only on purpose:
the committed files are the record that old logs keep decoding and projecting the same.

    python tests/golden/make_golden.py               # the log and its state
    python tests/golden/make_golden.py --state-only  # re-project the committed log only

Prefer ``--state-only`` after a change to the projections: the committed log stands for
logs already written, so it should not be rewritten by newer code without reason.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import msgspec

from helix_agents.events import (
    ApprovalGiven,
    ApprovalRequested,
    ChildChunkForwarded,
    ClientToolOwnershipRecorded,
    ClientToolPending,
    ClientToolResultSubmitted,
    Completed,
    CustomChunk,
    Event,
    HostClaimed,
    MessageAppended,
    OutputChunk,
    RunStarted,
    SessionCreated,
    StateUpdated,
    StepStarted,
    SubAgentEnd,
    SubAgentStart,
    SubSessionFinished,
    SubSessionStarted,
    Suspended,
    TextDelta,
    ToolEnd,
    ToolStart,
    UsageRecorded,
)
from helix_agents.log import decode_jsonl, encode_jsonl, project_state
from helix_agents.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage

HERE = Path(__file__).parent
LOG_PATH = HERE / "parent_session.jsonl"
STATE_PATH = HERE / "parent_session.state.json"

PARENT = "golden-parent"
CHILD = f"{PARENT}-sub-call_research"
GRANDCHILD = f"{CHILD}-sub-call_search"
T0 = 1_700_000_000.0

FINDINGS = {"summary": "Lugdunum was founded in 43 BC.", "sources": ["wiki/Lyon"]}
OUTPUT = {"title": "Lyon in brief", "words": 200, "published": True}


def build_log() -> list[Event]:
    """The parent's log, event by event (seq = position, ts = T0 + seq / 8)."""
    events: list[Event] = []

    def add(cls: type[Any], **fields: Any) -> None:
        seq = len(events) + 1
        events.append(cls(session_id=PARENT, seq=seq, ts=T0 + seq / 8, **fields))

    def chunk(cls: type[Any], **fields: Any) -> None:
        add(cls, agent_id=PARENT, agent_type="coordinator", **fields)

    def child_chunk(child_seq: int, cls: type[Any], origin: str, **fields: Any) -> None:
        """A chunk of the researcher's stream (its seq ``child_seq``); ``origin`` emitted it."""
        origin_type = "researcher" if origin == CHILD else "searcher"
        origin_seq = child_seq if origin == CHILD else fields.pop("origin_seq")
        inner = cls(
            session_id=origin,
            seq=origin_seq,
            ts=T0 + child_seq / 16,
            agent_id=origin,
            agent_type=origin_type,
            **fields,
        )
        add(ChildChunkForwarded, child_session_id=CHILD, child_seq=child_seq, chunk=inner)

    add(
        SessionCreated,
        agent_type="coordinator",
        run_id="run-golden-1",
        messages=[UserMessage(content="Research Lyon's history and publish a short summary.")],
        input={"city": "Lyon"},
        initial_state={"notes": []},
        metadata={"tenant": "acme"},
    )
    add(RunStarted, run_id="run-golden-1", mode="start")
    add(HostClaimed, host_id="host-a")
    add(StepStarted, step=1)
    chunk(TextDelta, delta="Let me ask the researcher.")
    add(
        MessageAppended,
        message=AssistantMessage(
            content="Let me ask the researcher.",
            tool_calls=[
                ToolCall(
                    id="call_research", name="subagent__researcher", arguments={"topic": "Lyon"}
                )
            ],
        ),
    )
    add(UsageRecorded, kind="tokens", name="scripted", input_tokens=120, output_tokens=25)

    # --- the sub-agent call ------------------------------------------------------
    chunk(
        ToolStart,
        tool_call_id="call_research",
        tool_name="subagent__researcher",
        arguments={"topic": "Lyon"},
    )
    add(
        SubSessionStarted,
        sub_session_id=CHILD,
        agent_type="researcher",
        tool_call_id="call_research",
        mode="ephemeral",
        input={"topic": "Lyon"},
    )
    chunk(
        SubAgentStart,
        sub_agent_id=CHILD,
        sub_agent_type="researcher",
        tool_call_id="call_research",
        parent_session_id=PARENT,
        input={"topic": "Lyon"},
    )
    child_chunk(4, TextDelta, CHILD, delta="Searching sources.")
    child_chunk(
        6,
        ToolStart,
        CHILD,
        tool_call_id="call_search",
        tool_name="subagent__searcher",
        arguments={"q": "Lyon history"},
    )
    child_chunk(
        8,
        SubAgentStart,
        CHILD,
        sub_agent_id=GRANDCHILD,
        sub_agent_type="searcher",
        tool_call_id="call_search",
        parent_session_id=CHILD,
        input={"q": "Lyon history"},
    )
    child_chunk(9, TextDelta, GRANDCHILD, origin_seq=4, delta="3 hits for 'Lyon history'.")
    child_chunk(
        10, CustomChunk, GRANDCHILD, origin_seq=6, name="progress", data={"done": 3, "of": 3}
    )
    child_chunk(
        12,
        SubAgentEnd,
        CHILD,
        sub_agent_id=GRANDCHILD,
        sub_agent_type="searcher",
        tool_call_id="call_search",
        parent_session_id=CHILD,
        success=True,
        result=["wiki/Lyon"],
    )
    child_chunk(
        13,
        ToolEnd,
        CHILD,
        tool_call_id="call_search",
        tool_name="subagent__searcher",
        result=["wiki/Lyon"],
    )
    child_chunk(16, OutputChunk, CHILD, output=FINDINGS)
    add(SubSessionFinished, sub_session_id=CHILD, status="completed", output=FINDINGS)
    chunk(
        SubAgentEnd,
        sub_agent_id=CHILD,
        sub_agent_type="researcher",
        tool_call_id="call_research",
        parent_session_id=PARENT,
        success=True,
        result=FINDINGS,
    )
    chunk(ToolEnd, tool_call_id="call_research", tool_name="subagent__researcher", result=FINDINGS)
    add(UsageRecorded, kind="subagent", name="researcher", sub_session_id=CHILD)
    add(
        MessageAppended,
        message=ToolResultMessage(
            tool_call_id="call_research",
            tool_name="subagent__researcher",
            content=msgspec.json.encode(FINDINGS).decode(),
        ),
    )
    add(StateUpdated, state={"notes": [FINDINGS["summary"]]})

    # --- a client tool: the run suspends until the client answers -----------------
    add(StepStarted, step=2)
    add(
        MessageAppended,
        message=AssistantMessage(
            tool_calls=[
                ToolCall(id="call_ask", name="ask_user", arguments={"question": "How long?"})
            ]
        ),
    )
    add(UsageRecorded, kind="tokens", name="scripted", input_tokens=310, output_tokens=18)
    chunk(
        ToolStart,
        tool_call_id="call_ask",
        tool_name="ask_user",
        arguments={"question": "How long?"},
    )
    add(
        ClientToolPending,
        tool_call_id="call_ask",
        tool_name="ask_user",
        arguments={"question": "How long?"},
    )
    add(ClientToolOwnershipRecorded, tool_call_id="call_ask", owner_session_id=PARENT)
    add(Suspended, reason="client_tool", tool_call_ids=["call_ask"])
    add(ClientToolResultSubmitted, tool_call_id="call_ask", result={"words": 200})
    add(RunStarted, run_id="run-golden-2", mode="resume")
    chunk(ToolEnd, tool_call_id="call_ask", tool_name="ask_user", result={"words": 200})
    add(
        MessageAppended,
        message=ToolResultMessage(
            tool_call_id="call_ask", tool_name="ask_user", content='{"words":200}'
        ),
    )

    # --- a tool that needs approval ---------------------------------------------
    add(StepStarted, step=1)
    add(
        MessageAppended,
        message=AssistantMessage(
            tool_calls=[ToolCall(id="call_publish", name="publish", arguments={"words": 200})]
        ),
    )
    add(UsageRecorded, kind="tokens", name="scripted", input_tokens=350, output_tokens=12)
    add(
        ApprovalRequested,
        tool_call_id="call_publish",
        tool_name="publish",
        arguments={"words": 200},
    )
    add(Suspended, reason="approval", tool_call_ids=["call_publish"])
    add(ApprovalGiven, tool_call_id="call_publish", approved=True, reason="looks good")
    add(RunStarted, run_id="run-golden-3", mode="resume")
    chunk(ToolStart, tool_call_id="call_publish", tool_name="publish", arguments={"words": 200})
    chunk(ToolEnd, tool_call_id="call_publish", tool_name="publish", result={"url": "/lyon"})
    add(UsageRecorded, kind="tool", name="publish")
    add(UsageRecorded, kind="custom", name="cost_usd", value=0.125)
    add(
        MessageAppended,
        message=ToolResultMessage(
            tool_call_id="call_publish", tool_name="publish", content='{"url":"/lyon"}'
        ),
    )

    # --- the answer -------------------------------------------------------------
    add(StepStarted, step=1)
    chunk(TextDelta, delta="Published: Lyon in brief.")
    add(MessageAppended, message=AssistantMessage(content="Published: Lyon in brief."))
    add(UsageRecorded, kind="tokens", name="scripted", input_tokens=380, output_tokens=9)
    chunk(OutputChunk, output=OUTPUT)
    add(Completed, output=OUTPUT)
    return events


def render_state(events: list[Event]) -> bytes:
    """The folded state as pretty JSON, as committed."""
    return msgspec.json.format(msgspec.json.encode(project_state(events)), indent=2) + b"\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the golden parent session.")
    parser.add_argument(
        "--state-only",
        action="store_true",
        help="keep the committed log as it is; re-project it into the state file "
        "(after a deliberate change to the projection)",
    )
    args = parser.parse_args(argv)
    if args.state_only:
        events = decode_jsonl(LOG_PATH.read_bytes())
    else:
        events = build_log()
        LOG_PATH.write_bytes(encode_jsonl(events))
    STATE_PATH.write_bytes(render_state(events))
    print(f"{len(events)} events in {LOG_PATH.name}; wrote their state to {STATE_PATH.name}")


if __name__ == "__main__":
    main()
