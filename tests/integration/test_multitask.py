"""Messages that arrive mid-run: each ``multitask`` choice on each runtime (issue 38).

The root ``boss`` notes something in its state, then asks ``middle``, which
asks ``leaf``, whose ``nap`` blocks until the test releases it: a grandchild
is running when the second message arrives. The root's scripted model records
every conversation it is shown, so each test asserts what the model saw, the
log (its events, in order) and the projections (messages, state) after the
choice. Built-in, Temporal and DBOS (``tests/integration/_durable_kit.py``);
``reject`` also over HTTP (uvicorn on 127.0.0.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import httpx
import msgspec
import pytest
from pydantic import BaseModel
from servers import serve

from helix_agents import ToolContext, create_sub_agent_tool, define_agent, define_tool
from helix_agents.errors import AgentServerError
from helix_agents.events import (
    ChildChunkForwarded,
    Event,
    Interrupted,
    InterruptRequested,
    MessageQueued,
    RunStarted,
    RunSuperseded,
    Suspended,
    ToolStart,
)
from helix_agents.log import project_state
from helix_agents.messages import AssistantMessage, Message, ToolResultMessage, UserMessage
from helix_agents.models import LLMRequest, ScriptedLLM
from helix_agents.models.scripted import ScriptItem
from helix_agents.protocol import RemoteMessageRequest, RemoteStartRequest
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport
from tests.integration._durable_kit import Runtime
from tests.integration._temporal_kit import seqs_contiguous, stream_to_end, wait_for

pytestmark = pytest.mark.slow

LIMIT = 90
"""Seconds for one scenario, its gateway's start and stop included."""

RELEASED: set[str] = set()
"""Root sessions whose grandchild's nap may end."""

SEEN: dict[str, list[list[Message]]] = {}
"""Every conversation the root's model was shown, by root session."""


class _Empty(BaseModel):
    pass


class _Done(BaseModel):
    done: bool


async def _nap(value: _Empty, ctx: ToolContext) -> str:
    root = ctx.session_id.split("-sub-")[0]
    # A plain poll, not an anyio.Event: a durable step may run on another event loop.
    while root not in RELEASED:  # noqa: ASYNC110
        await anyio.sleep(0.02)
    return "rested"


async def _note(value: _Empty, ctx: ToolContext) -> str:
    await ctx.update_state({"noted": True})
    return "noted"


def _boss_script(request: LLMRequest) -> ScriptItem:
    assert request.session_id is not None
    SEEN.setdefault(request.session_id, []).append(list(request.messages))
    last = request.messages[-1]
    if isinstance(last, ToolResultMessage):
        if last.tool_call_id == "n0":
            return ScriptedLLM.call("subagent__middle", {}, id="m1")
        return ScriptedLLM.reply("first done")
    users = [m.content for m in request.messages if isinstance(m, UserMessage)]
    if users[-1] == "go":
        return ScriptedLLM.call("note", {}, id="n0")
    return ScriptedLLM.reply("second done: " + " | ".join(str(u) for u in users))


def _agents() -> list[Any]:
    leaf = define_agent(
        "leaf",
        tools=[define_tool("nap", "Nap until released.", _Empty, _nap)],
        output_schema=_Done,
        llm=ScriptedLLM([ScriptedLLM.call("nap", {}, id="z1"), ScriptedLLM.finish({"done": True})]),
    )
    middle = define_agent(
        "middle",
        tools=[create_sub_agent_tool(leaf, _Empty)],
        output_schema=_Done,
        llm=ScriptedLLM(
            [ScriptedLLM.call("subagent__leaf", {}, id="l1"), ScriptedLLM.finish({"done": True})]
        ),
    )
    boss = define_agent(
        "boss",
        tools=[
            define_tool("note", "Note it.", _Empty, _note),
            create_sub_agent_tool(middle, _Empty),
        ],
        llm=ScriptedLLM(_boss_script),
    )
    return [boss, middle, leaf]


GRANDCHILD = "{}-sub-m1-sub-l1"


async def _start_and_reach_the_grandchild(
    server: AgentServer, store: MemoryEventStore, session_id: str
) -> None:
    await server.start(RemoteStartRequest(session_id=session_id, agent_type="boss", message="go"))
    await wait_for(
        store,
        GRANDCHILD.format(session_id),
        lambda e: isinstance(e, ToolStart) and e.tool_name == "nap",
    )


def _shape(messages: Sequence[Message]) -> list[str]:
    """A conversation as short words: user text, ``call:<id>``, ``result:<id>``, reply text."""
    words: list[str] = []
    for message in messages:
        if isinstance(message, UserMessage):
            words.append(f"user:{message.content}")
        elif isinstance(message, AssistantMessage):
            words.extend(f"call:{c.id}" for c in message.tool_calls)
            if message.content:
                words.append(f"reply:{message.content}")
        elif isinstance(message, ToolResultMessage):
            words.append(f"result:{message.tool_call_id}" + ("!" if message.is_error else ""))
    return words


def _lifecycle(log: Sequence[Event]) -> list[str]:
    """The log's run-level events, in order (what the choices are about)."""
    kinds = (RunStarted, MessageQueued, InterruptRequested, Interrupted, RunSuperseded)
    names = []
    for event in log:
        if isinstance(event, kinds) or type(event).__name__ == "Completed":
            name = str(type(event).__struct_config__.tag)
            if isinstance(event, MessageQueued) and event.multitask is not None:
                name += f"({event.multitask})"
            names.append(name)
    return names


async def _second_turn(
    runtime: Runtime, session_id: str, multitask: str
) -> tuple[MemoryEventStore, Any, Any]:
    """Start ``boss``, send "second" with ``multitask`` while the grandchild naps, release
    the nap (for ``enqueue``: only now can the run end), read to the second turn's end."""
    store = MemoryEventStore()
    SEEN.pop(session_id, None)
    with anyio.fail_after(LIMIT):
        async with runtime.server(_agents(), store, heartbeat_timeout=2.0) as server:
            await _start_and_reach_the_grandchild(server, store, session_id)
            first = project_state(await store.read(session_id)).run_id
            answer = await server.send_message(
                RemoteMessageRequest(
                    session_id=session_id, message="second", message_id="q2", multitask=multitask
                )
            )
            assert answer.queued
            assert answer.run_id == first
            if multitask == "enqueue":
                log = await store.read(session_id)
                assert not any(isinstance(e, InterruptRequested) for e in log)
                assert project_state(log).status == "running"
            else:
                await wait_for(store, GRANDCHILD.format(session_id), _is(Interrupted))
            RELEASED.add(session_id)
            turn = await wait_for(
                store, session_id, lambda e: isinstance(e, RunStarted) and e.turn_of is not None
            )
            assert turn.run_id != first
            output = await stream_to_end(server, session_id, turn.seq)
            status = await server.get_status(session_id)
    return store, output, status


def _is(kind: type[Event]) -> Any:
    return lambda event: isinstance(event, kind)


async def test_enqueue_waits_for_the_run_then_takes_a_turn_of_its_own(runtime: Runtime) -> None:
    """``enqueue``: nothing stops; the run completes with its whole tree, then the message
    starts a turn of its own (``run_started(continue)`` naming its ``message_queued``)."""
    sid = f"enq-{runtime.name}"
    store, output, status = await _second_turn(runtime, sid, "enqueue")
    log = await store.read(sid)
    assert seqs_contiguous(log)
    assert _lifecycle(log) == [
        "run_started",
        "message_queued(enqueue)",
        "completed",
        "run_started",
        "completed",
    ]
    queued = next(e for e in log if isinstance(e, MessageQueued))
    turn = [e for e in log if isinstance(e, RunStarted)][-1]
    assert (turn.mode, turn.turn_of, turn.message_id) == ("continue", queued.seq, "q2")
    assert output == "second done: go | second"
    assert _shape(SEEN[sid][-1]) == [
        "user:go",
        "call:n0",
        "result:n0",
        "call:m1",
        "result:m1",
        "reply:first done",
        "user:second",
    ]
    assert status.status == "completed"
    assert status.state == {"noted": True}
    assert project_state(await store.read(GRANDCHILD.format(sid))).status == "completed"


async def test_interrupt_stops_the_tree_keeps_what_was_done_and_takes_a_turn(
    runtime: Runtime,
) -> None:
    """``interrupt``: the run stops as an interrupt stops it (the grandchild's nap too);
    what it did stays (the note, its state); the call cut short gets ``interrupted`` as its
    result, then the message's turn."""
    sid = f"int-{runtime.name}"
    store, output, status = await _second_turn(runtime, sid, "interrupt")
    log = await store.read(sid)
    assert seqs_contiguous(log)
    assert _lifecycle(log) == [
        "run_started",
        "message_queued(interrupt)",
        "interrupt_requested",
        "interrupted",
        "run_started",
        "completed",
    ]
    assert output == "second done: go | second"
    assert _shape(SEEN[sid][-1]) == [
        "user:go",
        "call:n0",
        "result:n0",
        "call:m1",
        "result:m1!",
        "user:second",
    ]
    assert status.status == "completed"
    assert status.state == {"noted": True}
    for child in (f"{sid}-sub-m1", GRANDCHILD.format(sid)):
        assert project_state(await store.read(child)).status == "interrupted"


async def test_rollback_supersedes_the_run_and_the_model_never_sees_it(runtime: Runtime) -> None:
    """``rollback``: the run stops (its tree too), a ``run_superseded`` names it and its
    seqs; its events stay in the log, but the conversation, the state and the model's next
    request skip it: the new turn starts from the session's beginning."""
    sid = f"rb-{runtime.name}"
    store, output, status = await _second_turn(runtime, sid, "rollback")
    log = await store.read(sid)
    assert seqs_contiguous(log)
    assert _lifecycle(log) == [
        "run_started",
        "message_queued(rollback)",
        "interrupt_requested",
        "interrupted",
        "run_superseded",
        "run_started",
        "completed",
    ]
    superseded = next(e for e in log if isinstance(e, RunSuperseded))
    interrupted = next(e for e in log if isinstance(e, Interrupted))
    assert (superseded.from_seq, superseded.to_seq) == (1, interrupted.seq)
    assert superseded.run_id == project_state(log[: superseded.seq - 1]).run_id
    assert output == "second done: second"
    assert _shape(SEEN[sid][-1]) == ["user:second"]
    state = project_state(log)
    assert _shape(state.messages) == ["user:second", "reply:second done: second"]
    assert state.custom_state == {}
    assert status.state == {}
    assert any(isinstance(e, ToolStart) and e.tool_name == "note" for e in log)  # still there
    for child in (f"{sid}-sub-m1", GRANDCHILD.format(sid)):
        assert project_state(await store.read(child)).status == "interrupted"


async def test_reject_answers_409_session_busy_and_writes_nothing(runtime: Runtime) -> None:
    """``reject`` (here the agent's default): ``409`` with the protocol's error shape, code
    ``SESSION_BUSY``, over HTTP; the log is unchanged and the run goes on to its end. A bad
    ``multitask`` is a ``400`` that writes nothing either."""
    sid = f"rej-{runtime.name}"
    store = MemoryEventStore()
    boss, *rest = _agents()
    strict = define_agent("boss", tools=list(boss.tools), llm=boss.llm, multitask="reject")
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server([strict, *rest], store, heartbeat_timeout=2.0) as server,
            serve(create_http_app(server)) as url,
            httpx.AsyncClient(base_url=url) as client,
        ):
            await _start_and_reach_the_grandchild(server, store, sid)
            before = await store.read(sid)
            busy = await client.post("/message", json={"sessionId": sid, "message": "second"})
            bad = await client.post(
                "/message", json={"sessionId": sid, "message": "second", "multitask": "later"}
            )
            after = await store.read(sid)
            # Written since: only what the running tree forwards, nothing of the requests.
            assert after[: len(before)] == before
            assert {type(e) for e in after[len(before) :]} <= {ChildChunkForwarded}
            # The HTTP transport (what a remote parent uses) carries the choice.
            async with HttpRemoteAgentTransport(url, retry_base_delay=0.001) as remote:
                with pytest.raises(AgentServerError) as refused:
                    await remote.send_message(
                        RemoteMessageRequest(session_id=sid, message="second", multitask="reject")
                    )
            assert refused.value.code == "SESSION_BUSY"
            after = await store.read(sid)
            assert {type(e) for e in after[len(before) :]} <= {ChildChunkForwarded}
            # The request's choice wins over the agent's default.
            steered = await client.post(
                "/message", json={"sessionId": sid, "message": "also", "multitask": "steer"}
            )
            RELEASED.add(sid)
            output = await stream_to_end(server, sid)
    assert busy.status_code == 409
    assert busy.json()["code"] == "SESSION_BUSY"
    assert isinstance(busy.json()["error"], str)
    assert bad.status_code == 400
    assert bad.json()["code"] == "INVALID_REQUEST"
    assert steered.status_code == 200
    assert steered.json()["queued"] is True
    assert output == "second done: go | also"  # the steered message, at the next step
    log = await store.read(sid)
    assert [e.messages[0].content for e in log if isinstance(e, MessageQueued)] == ["also"]


async def test_an_idle_session_takes_every_choice_as_a_new_turn() -> None:
    """A completed session: ``reject`` and the others start a turn, as ``/message`` always did."""
    store = MemoryEventStore()
    sid = "idle"
    RELEASED.add(sid)
    async with AgentServer(_agents(), store) as server:
        with anyio.fail_after(LIMIT):
            await server.start(RemoteStartRequest(session_id=sid, agent_type="boss", message="go"))
            assert await stream_to_end(server, sid) == "first done"
            for n, choice in enumerate(("reject", "rollback", "interrupt", "enqueue")):
                answer = await server.send_message(
                    RemoteMessageRequest(session_id=sid, message=f"m{n}", multitask=choice)  # type: ignore[arg-type]
                )
                assert not answer.queued
                await stream_to_end(server, sid, (await server.get_status(sid)).run_from_sequence)
            with pytest.raises(AgentServerError) as caught:
                await server.send_message(
                    RemoteMessageRequest(session_id=sid, message="x", multitask="soon")  # type: ignore[arg-type]
                )
    assert caught.value.code == "INVALID_REQUEST"
    log = await store.read(sid)
    assert not any(isinstance(e, MessageQueued | RunSuperseded) for e in log)
    assert [e.mode for e in log if isinstance(e, RunStarted)] == ["start", *["continue"] * 4]


# --- a paused run: nothing runs, so a stop takes effect at once ---------------------------


def _gate_script(request: LLMRequest) -> ScriptItem:
    assert request.session_id is not None
    SEEN.setdefault(request.session_id, []).append(list(request.messages))
    last = request.messages[-1]
    if isinstance(last, ToolResultMessage):
        return ScriptedLLM.reply("paid")
    users = [m.content for m in request.messages if isinstance(m, UserMessage)]
    if users[-1] == "go":
        return ScriptedLLM.call("pay", {}, id="p1")
    return ScriptedLLM.reply("second done: " + " | ".join(str(u) for u in users))


async def _pay(value: _Empty, ctx: ToolContext) -> str:
    return "paid"


def _gated() -> Any:
    pay = define_tool("pay", "Pay.", _Empty, _pay, requires_approval=True)
    return define_agent("gated", tools=[pay], llm=ScriptedLLM(_gate_script))


@pytest.mark.parametrize("multitask", ["enqueue", "interrupt", "rollback"])
async def test_a_paused_run_takes_the_choice_at_once(runtime: Runtime, multitask: str) -> None:
    """A run paused for an approval: ``interrupt``/``rollback`` end it in the message's own
    batch and its turn begins at once (no open call is left: an interrupted one gets
    ``interrupted``, a superseded one is forgotten with its pending approval);
    ``enqueue`` waits for the approval, the run's completion, then its turn."""
    sid = f"paused-{multitask}-{runtime.name}"
    store = MemoryEventStore()
    SEEN.pop(sid, None)
    with anyio.fail_after(LIMIT):
        async with runtime.server([_gated()], store) as server:
            await server.start(RemoteStartRequest(session_id=sid, agent_type="gated", message="go"))
            await wait_for(store, sid, _is(Suspended))
            first = project_state(await store.read(sid)).run_id
            answer = await server.send_message(
                RemoteMessageRequest(session_id=sid, message="second", multitask=multitask)  # type: ignore[arg-type]
            )
            assert answer.queued
            if multitask == "enqueue":
                assert (await server.get_status(sid)).status == "paused"
                await server.submit_approval(sid, "p1", True)
            turn = await wait_for(
                store, sid, lambda e: isinstance(e, RunStarted) and e.turn_of is not None
            )
            output = await stream_to_end(server, sid, turn.seq)
            status = await server.get_status(sid)
    log = await store.read(sid)
    assert seqs_contiguous(log)
    assert turn.run_id != first
    ending = {
        "enqueue": ["suspended", "approval_given", "run_started", "completed"],
        "interrupt": ["interrupt_requested", "interrupted"],
        "rollback": ["interrupt_requested", "interrupted", "run_superseded"],
    }[multitask]
    lifecycle = [n for n in _lifecycle(log) if n != "suspended"]
    expected = ["run_started", f"message_queued({multitask})", *ending, "run_started", "completed"]
    assert lifecycle == [n for n in expected if n not in ("suspended", "approval_given")]
    shapes = {
        "enqueue": ["user:go", "call:p1", "result:p1", "reply:paid", "user:second"],
        "interrupt": ["user:go", "call:p1", "result:p1!", "user:second"],
        "rollback": ["user:second"],
    }
    assert _shape(SEEN[sid][-1]) == shapes[multitask]
    assert output == "second done: " + " | ".join(
        w[5:] for w in shapes[multitask] if w.startswith("user:")
    )
    assert status.status == "completed"
    assert status.pending_inputs == []


async def test_recovery_begins_a_turn_a_dead_process_left_waiting() -> None:
    """A process died between a run's completion and its waiting turn's ``run_started``:
    recovery finds the turn due in the log and begins it."""
    from helix_agents import AgentExecutor
    from helix_agents.events import Completed, SessionCreated

    store = MemoryEventStore()
    events: list[Event] = [
        SessionCreated(agent_type="gated", run_id="r1", messages=[UserMessage(content="go")]),
        RunStarted(run_id="r1"),
        MessageQueued(messages=[UserMessage(content="second")], multitask="enqueue"),
        Completed(output="paid"),
    ]
    stamped = [
        msgspec.structs.replace(event, session_id="dead-1", seq=n, ts=0.0)
        for n, event in enumerate(events, start=1)
    ]
    await store.append("dead-1", stamped, expected_seq=0)
    SEEN.pop("dead-1", None)
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [_gated()]) as executor:
            assert await executor.recover() == ["dead-1"]
            await executor.runs.wait_idle("dead-1")
    log = await store.read("dead-1")
    turn = log[4]
    assert isinstance(turn, RunStarted)
    assert (turn.mode, turn.turn_of, turn.messages) == (
        "continue",
        3,
        [UserMessage(content="second")],
    )
    assert project_state(log).output == "second done: go | second"
    assert project_state(log).pending_turns == []


async def test_enqueued_messages_take_one_turn_each_in_order(runtime: Runtime) -> None:
    """Two ``enqueue`` messages while the tree runs: after the run, a turn for the first,
    then one for the second (each its own ``run_started``, naming its message)."""
    sid = f"enq2-{runtime.name}"
    store = MemoryEventStore()
    SEEN.pop(sid, None)
    with anyio.fail_after(LIMIT):
        async with runtime.server(_agents(), store, heartbeat_timeout=2.0) as server:
            await _start_and_reach_the_grandchild(server, store, sid)
            for text in ("second", "third"):
                await server.send_message(
                    RemoteMessageRequest(session_id=sid, message=text, multitask="enqueue")
                )
            RELEASED.add(sid)
            last = await wait_for(
                store,
                sid,
                lambda e: (
                    isinstance(e, RunStarted) and e.messages == [UserMessage(content="third")]
                ),
            )
            output = await stream_to_end(server, sid, last.seq)
    log = await store.read(sid)
    queued = [e.seq for e in log if isinstance(e, MessageQueued)]
    turns = [e for e in log if isinstance(e, RunStarted) and e.turn_of is not None]
    assert [t.turn_of for t in turns] == queued
    assert _lifecycle(log)[-4:] == ["run_started", "completed", "run_started", "completed"]
    assert [_shape(seen)[-3:] for seen in SEEN[sid][-2:]] == [
        ["result:m1", "reply:first done", "user:second"],
        ["user:second", "reply:second done: go | second", "user:third"],
    ]
    assert output == "second done: go | second | third"
