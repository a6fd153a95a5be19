"""The companion tools (specs/companions.md), with the children local, behind HTTP and NATS.

Blocking and non-blocking spawns, naming and re-spawn rules, sendMessage,
listChildren, getChildStatus, terminateChild, waitForResult, the seed's
validation list, a child waiting for the client, and exactly-once delivery of
every child outcome (pull and push). A test that takes ``kind`` runs with its
children in the parent's executor (on each store), behind HTTP (real uvicorn
on 127.0.0.1) and behind NATS (a real nats-server): ``companion_hosts.py``.
Children's models wait on gates where a child must be live; every test is
bounded.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from companion_hosts import children_of
from companion_kit import (
    Gates,
    Report,
    call,
    critic,
    deliveries,
    finish,
    notices,
    outcomes,
    parent,
    settled,
    tool_results,
    user_texts,
    worker,
)
from pydantic import BaseModel

from helix_agents import (
    AgentConfig,
    AgentExecutor,
    EventStore,
    PersistentAgent,
    define_agent,
    define_tool,
    get_usage_rollup,
)
from helix_agents.events import RunStarted, SessionCreated, SubSessionStarted
from helix_agents.log import project_state
from helix_agents.messages import UserMessage
from helix_agents.models import LLMRequest, ScriptedLLM
from helix_agents.models.scripted import ScriptItem
from helix_agents.workspaces import MemoryWorkspaceProvider, Workspace

LIMIT = 60.0  # generous: a liveness bound on a shared machine

COMBOS = [
    pytest.param(("local", "memory"), id="local-memory"),
    pytest.param(("local", "sqlite"), id="local-sqlite"),
    pytest.param(("local", "nats"), id="local-nats", marks=pytest.mark.nats),
    pytest.param(("http", "sqlite"), id="http"),
    pytest.param(("nats", "sqlite"), id="nats", marks=pytest.mark.nats),
]
"""Where the children run, and the parent's store: local children on every store,
remote ones (HTTP, NATS) from a SQLite parent."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that takes ``kind`` runs with each; the others with local children only."""
    if "combo" in metafunc.fixturenames:
        local = [combo for combo in COMBOS if combo.values[0][0] == "local"]  # type: ignore[index]
        metafunc.parametrize("combo", COMBOS if "kind" in metafunc.fixturenames else local)


@pytest.fixture
def store_backend(combo: tuple[str, str]) -> str:
    return combo[1]


@pytest.fixture
def kind(combo: tuple[str, str]) -> str:
    return combo[0]


SPAWN = "companion__spawnAgent"
SEND = "companion__sendMessage"
LIST = "companion__listChildren"
STATUS = "companion__getChildStatus"
TERMINATE = "companion__terminateChild"
WAIT = "companion__waitForResult"


async def test_blocking_spawn_returns_the_typed_output_inline(store: EventStore) -> None:
    lead = parent(
        [
            call(SPAWN, {"agent": "critic", "name": "reviewer", "initialMessage": "Review v1"}),
            "thanks",
        ],
        [PersistentAgent(critic(), mode="blocking")],
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [lead]) as executor:
            handle = await executor.execute(lead, "go", session_id="p1")
            result = await handle.result()
    assert result.status == "completed"
    log = await store.read("p1")
    [spawned] = tool_results(log).values()
    assert spawned["name"] == "reviewer"
    assert spawned["status"] == "completed"
    assert spawned["output"]["verdict"] == "revise"
    ref = project_state(log).sub_sessions["p1-agent-reviewer"]
    assert (ref.mode, ref.name, ref.status) == ("persistent", "reviewer", "completed")
    assert deliveries(log) == {"p1-agent-reviewer": ["pull"]}
    child = project_state(await store.read("p1-agent-reviewer"))
    assert child.parent_session_id == "p1"
    assert child.output["verdict"] == "revise"


async def test_the_critic_loop_re_consults_the_same_critic_with_its_memory(
    store: EventStore,
) -> None:
    review = {"agent": "critic", "name": "reviewer"}

    def maker(request: LLMRequest) -> ScriptItem:
        verdicts = [m.content for m in request.messages if getattr(m, "tool_name", None) == SPAWN]
        if any('"pass"' in v for v in verdicts):
            return "final artifact v2"
        return call(SPAWN, {**review, "initialMessage": f"Review v{len(verdicts) + 1}"})

    lead = parent(maker, [PersistentAgent(critic(), mode="blocking")])
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [lead]) as executor:
            handle = await executor.execute(lead, "make it", session_id="mk")
            result = await handle.result()
    assert result.output == "final artifact v2"
    log = await store.read("mk")
    rounds = [r for r in tool_results(log).values() if isinstance(r, dict)]
    assert [r["output"]["verdict"] for r in rounds] == ["revise", "pass"]
    # Round 2 ran on the same session: the critic saw round 1.
    assert rounds[1]["output"]["notes"] == "round 2: seen ['Review v1', 'Review v2']"
    child_log = await store.read("mk-agent-reviewer")
    assert sum(isinstance(e, SessionCreated) for e in child_log) == 1
    assert [e.sub_session_id for e in log if isinstance(e, SubSessionStarted)] == [
        "mk-agent-reviewer",
        "mk-agent-reviewer",
    ]
    assert deliveries(log) == {"mk-agent-reviewer": ["pull", "pull"]}
    # The usage rollup counts the critic's session once, with both rounds.
    rollup = await get_usage_rollup(store, "mk")
    assert rollup.sessions == ["mk", "mk-agent-reviewer"]
    critic_usage = project_state(child_log).usage
    lead_usage = project_state(log).usage
    assert rollup.llm_calls == lead_usage.llm_calls + critic_usage.llm_calls
    assert critic_usage.llm_calls == 2


async def test_non_blocking_spawn_returns_at_once_and_pushes_the_outcome_once(
    store: EventStore,
) -> None:
    gates = Gates()
    seen: list[list[str]] = []

    def lead_script(request: LLMRequest) -> ScriptItem:
        seen.append(user_texts(request))
        turn = sum(1 for m in request.messages if type(m).__name__ == "AssistantMessage")
        if turn == 0:
            return call(SPAWN, {"agent": "worker", "initialMessage": "job A"})
        return f"reply {turn}"

    lead = parent(lead_script, [PersistentAgent(worker(gates), mode="non-blocking")])
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [lead]) as executor:
            handle = await executor.execute(lead, "start", session_id="nb")
            result = await handle.result()
            assert result.status == "completed"  # the child still runs
            log = await store.read("nb")
            assert tool_results(log)["call_0_0"] == {"name": "worker-1", "status": "running"}
            assert project_state(await store.read("nb-agent-worker-1")).status == "running"
            gates.open("job A")
            await settled(store, "nb-agent-worker-1")
            # The parent's next turn starts with the outcome, once.
            again = await executor.send_message("nb", "anything new?")
            await again.result()
            again = await executor.send_message("nb", "and now?")
            await again.result()
    log = await store.read("nb")
    assert notices(log) == [
        'Sub-agent \'worker-1\' completed with result: {"text":"done: job A (turn 1)"}'
    ]
    assert deliveries(log) == {"nb-agent-worker-1": ["push"]}
    assert outcomes(log) == {"nb-agent-worker-1": 1}
    # The model saw it at the start of the turn after the child ended, not before.
    assert all(notices(log)[0] not in texts for texts in seen[:2])
    assert notices(log)[0] in seen[2]


async def test_a_failed_child_is_pushed_as_a_failure_and_re_spawns_fresh(
    store: EventStore, kind: str, request: pytest.FixtureRequest
) -> None:
    gates = Gates()
    gates.open("fail please")
    gates.open("try again")
    script = [
        call(SPAWN, {"agent": "worker", "name": "w", "initialMessage": "fail please"}),
        "waiting",
        call(SPAWN, {"agent": "worker", "name": "w", "initialMessage": "try again"}),
        call(WAIT, {"name": "w"}),
        "done",
    ]
    work, judge = worker(gates), critic()
    with anyio.fail_after(LIMIT):
        async with children_of(kind, store, [work, judge], request) as kids:
            lead = parent(
                script,
                [
                    kids.entry(work, "non-blocking"),
                    kids.entry(judge, "blocking"),
                ],
            )
            async with AgentExecutor(store, [lead]) as executor:
                handle = await executor.execute(lead, "go", session_id="fr")
                await handle.result()
                await settled(kids.store, "fr-agent-w", "failed")
                again = await executor.send_message("fr", "next")
                await again.result()
            log = await store.read("fr")
            failure = notices(log)[0]
            assert failure.startswith("Sub-agent 'w' failed: ")
            results = tool_results(log)
            # Re-spawned fresh: a new session, the failed one kept.
            assert results["call_2_0"] == {"name": "w", "status": "running"}
            assert results["call_3_0"]["status"] == "completed"
            assert results["call_3_0"]["result"] == {"text": "done: try again (turn 1)"}
            # Each outcome once: the second by the wait, or pushed first if it was that fast.
            delivered = deliveries(log)
            assert delivered["fr-agent-w"] == ["push"]
            assert len(delivered["fr-agent-w.2"]) == 1
            assert len(notices(log)) == 1 + (delivered["fr-agent-w.2"] == ["push"])
            assert project_state(await kids.log("fr-agent-w")).status == "failed"


async def test_validation_errors_change_nothing(store: EventStore) -> None:
    bad: list[tuple[str, dict[str, Any], str]] = [
        (SPAWN, {"agent": "nobody", "initialMessage": "x"}, "Unknown persistent agent type"),
        (SPAWN, {"agent": "critic", "initialMessage": ""}, "initialMessage must be non-empty"),
        (SPAWN, {"agent": "critic", "initialMessage": "x", "name": ""}, "name must be non-empty"),
        (
            SPAWN,
            {"agent": "critic", "initialMessage": "x", "name": "n" * 129},
            "at most 128 characters",
        ),
        (SEND, {"name": "ghost", "message": "hi"}, "No child agent found"),
        (SEND, {"name": "ghost", "message": ""}, "message must be non-empty"),
        (SEND, {"message": "hi"}, "name must be a string"),
        (STATUS, {"name": "ghost"}, "No child agent found"),
        (TERMINATE, {"name": "ghost"}, "No child agent found"),
        (WAIT, {"name": "ghost"}, "No child agent found"),
        (WAIT, {"name": "ghost", "timeout": 0}, "timeout must be positive"),
        (WAIT, {"name": "ghost", "timeout": -5}, "timeout must be positive"),
        (WAIT, {"name": "ghost", "timeout": "soon"}, "timeout must be a number"),
        ("companion__nothing", {}, "unknown tool"),
    ]
    lead = parent(
        [[call(name, args, id=f"bad{i}") for i, (name, args, _) in enumerate(bad)], "ok"],
        [PersistentAgent(critic(), mode="blocking")],
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [lead]) as executor:
            handle = await executor.execute(lead, "go", session_id="v")
            await handle.result()
    log = await store.read("v")
    results = tool_results(log)
    for i, (_, _, expected) in enumerate(bad):
        assert expected in results[f"bad{i}"]["error"], (i, results[f"bad{i}"])
    assert project_state(log).sub_sessions == {}
    assert await store.list_sessions() == ["v"]


async def test_naming_auto_names_and_refuses_a_live_name(
    store: EventStore, kind: str, request: pytest.FixtureRequest
) -> None:
    gates = Gates()
    spawn_a = {"agent": "worker", "initialMessage": "a"}
    work = worker(gates)
    with anyio.fail_after(LIMIT):
        async with children_of(kind, store, [work], request) as kids:
            lead = parent(
                [
                    [call(SPAWN, spawn_a, id="s1"), call(SPAWN, spawn_a, id="s2")],
                    call(SPAWN, {**spawn_a, "name": "worker-1"}, id="s3"),
                    call(LIST, {}, id="l1"),
                    "ok",
                ],
                [kids.entry(work, "non-blocking")],
            )
            async with AgentExecutor(store, [lead]) as executor:
                handle = await executor.execute(lead, "go", session_id="nm")
                await handle.result()
                results = tool_results(await store.read("nm"))
                gates.open("a")
            assert {results["s1"]["name"], results["s2"]["name"]} == {"worker-1", "worker-2"}
            assert "already running" in results["s3"]["error"]
            assert results["l1"] == [
                {"name": results["s1"]["name"], "agent": "worker", "status": "running"},
                {"name": results["s2"]["name"], "agent": "worker", "status": "running"},
            ]


async def test_send_message_status_terminate_and_lazy_list(
    store: EventStore, kind: str, request: pytest.FixtureRequest
) -> None:
    gates = Gates()
    work = worker(gates)
    with anyio.fail_after(LIMIT):
        async with children_of(kind, store, [work], request) as kids:
            lead = parent(
                [
                    call(SPAWN, {"agent": "worker", "name": "w", "initialMessage": "one"}, id="sp"),
                    call(SEND, {"name": "w", "message": "two"}, id="send-running"),
                    call(STATUS, {"name": "w"}, id="st-running"),
                    "pause here",
                    call(LIST, {}, id="list-done"),
                    call(STATUS, {"name": "w"}, id="st-done"),
                    call(SEND, {"name": "w", "message": "three"}, id="send-done"),
                    call(TERMINATE, {"name": "w"}, id="term"),
                    call(TERMINATE, {"name": "w"}, id="term-again"),
                    call(SEND, {"name": "w", "message": "four"}, id="send-terminated"),
                    call(
                        SPAWN,
                        {"agent": "worker", "name": "w", "initialMessage": "five"},
                        id="again",
                    ),
                    "end",
                ],
                [kids.entry(work, "non-blocking")],
            )
            async with AgentExecutor(store, [lead]) as executor:
                handle = await executor.execute(lead, "go", session_id="sm")
                await handle.result()
                gates.open("one")
                gates.open("two")  # the queued message is the child's last word
                gates.open("five")
                await settled(kids.store, "sm-agent-w")
                again = await executor.send_message("sm", "continue")
                await again.result()
            log = await store.read("sm")
            results = tool_results(log)
            assert results["send-running"] == {"delivered": True}
            assert results["st-running"] == {"name": "w", "agent": "worker", "status": "running"}
            assert results["list-done"] == [{"name": "w", "agent": "worker", "status": "completed"}]
            done = results["st-done"]
            assert done["status"] == "completed"
            assert done["lastOutput"]["text"].startswith("done: two")
            assert results["send-done"] == {"delivered": True}
            assert results["term"] == {"name": "w", "terminated": True, "status": "terminated"}
            assert results["term-again"] == {
                "name": "w",
                "terminated": False,
                "status": "terminated",
            }
            assert "terminated" in results["send-terminated"]["error"]
            # Re-spawned fresh: a new session; the terminated one is kept.
            assert results["again"] == {"name": "w", "status": "running"}
            assert project_state(log).sub_sessions["sm-agent-w.2"].status in (
                "running",
                "completed",
            )
            fresh = await kids.log("sm-agent-w.2")
            assert [m.content for m in project_state(fresh).messages if isinstance(m, UserMessage)][
                :1
            ] == ["five"]
            child = project_state(await kids.log("sm-agent-w"))
            assert child.status == "failed"
            assert child.error is not None
            assert child.error.startswith("aborted")
            # Turn one ("one" then "two" queued) was pushed once; the terminated turn never.
            assert deliveries(log)["sm-agent-w"] == ["push", "pull"]
            assert len([n for n in notices(log) if "done: two" in n]) == 1


async def test_terminate_tells_the_truth_about_a_finished_child(
    store: EventStore, kind: str, request: pytest.FixtureRequest
) -> None:
    judge = critic()
    with anyio.fail_after(LIMIT):
        async with children_of(kind, store, [judge], request) as kids:
            lead = parent(
                [
                    call(
                        SPAWN, {"agent": "critic", "name": "c", "initialMessage": "Review"}, id="sp"
                    ),
                    call(TERMINATE, {"name": "c"}, id="term"),
                    "ok",
                ],
                [kids.entry(judge, "blocking")],
            )
            async with AgentExecutor(store, [lead]) as executor:
                handle = await executor.execute(lead, "go", session_id="tt")
                await handle.result()
            results = tool_results(await store.read("tt"))
            assert results["term"] == {"name": "c", "terminated": False, "status": "completed"}
            assert (
                project_state(await store.read("tt")).sub_sessions["tt-agent-c"].status
                == "completed"
            )


@pytest.mark.parametrize("wait_ms", [None, 60_000])
async def test_wait_for_result_pulls_once_and_the_push_skips_it(
    store: EventStore, wait_ms: int | None, kind: str, request: pytest.FixtureRequest
) -> None:
    gates = Gates()
    wait_args: dict[str, Any] = {"name": "w"}
    if wait_ms is not None:
        wait_args["timeout"] = wait_ms
    work, judge = worker(gates), critic()
    with anyio.fail_after(LIMIT):
        async with children_of(kind, store, [work, judge], request) as kids:
            script = [
                call(SPAWN, {"agent": "worker", "name": "w", "initialMessage": "job"}, id="sp"),
                call(WAIT, wait_args, id="wait"),
                call(WAIT, {"name": "w"}, id="wait-again"),
                "done",
                "more done",
            ]

            def lead_script(req: LLMRequest) -> ScriptItem:
                turn = sum(1 for m in req.messages if type(m).__name__ == "AssistantMessage")
                if turn == 1:
                    # The step has begun (its push found the child running): let it
                    # finish now, so it ends while the wait is on.
                    gates.open("job")
                return script[turn]

            lead = parent(
                lead_script, [kids.entry(work, "non-blocking"), kids.entry(judge, "blocking")]
            )
            async with AgentExecutor(store, [lead]) as executor:
                handle = await executor.execute(lead, "go", session_id="wr")
                await handle.result()
                again = await executor.send_message("wr", "more")
                await again.result()
            log = await store.read("wr")
            results = tool_results(log)
            assert results["wait"] == {
                "name": "w",
                "status": "completed",
                "result": {"text": "done: job (turn 1)"},
            }
            assert results["wait-again"] == results["wait"]
            assert deliveries(log) == {"wr-agent-w": ["pull"]}
            assert notices(log) == []


async def test_wait_for_result_times_out_and_the_child_keeps_running(
    store: EventStore, kind: str, request: pytest.FixtureRequest
) -> None:
    gates = Gates()
    work, judge = worker(gates), critic()
    with anyio.fail_after(LIMIT):
        async with children_of(kind, store, [work, judge], request) as kids:
            lead = parent(
                [
                    call(
                        SPAWN, {"agent": "worker", "name": "w", "initialMessage": "slow"}, id="sp"
                    ),
                    call(WAIT, {"name": "w", "timeout": 50}, id="wait"),
                    "done",
                ],
                [
                    kids.entry(work, "non-blocking"),
                    kids.entry(judge, "blocking"),
                ],
            )
            async with AgentExecutor(store, [lead]) as executor:
                handle = await executor.execute(lead, "go", session_id="to")
                await handle.result()
                assert tool_results(await store.read("to"))["wait"] == {
                    "name": "w",
                    "status": "timeout",
                }
                assert project_state(await kids.log("to-agent-w")).status == "running"
                gates.open("slow")
                await settled(kids.store, "to-agent-w")


async def test_companion_tools_are_offered_as_the_seed_says(store: EventStore) -> None:
    offered: list[list[str]] = []

    def record(request: LLMRequest) -> ScriptItem:
        offered.append(sorted(spec.name for spec in request.tools))
        return "ok"

    gates = Gates()
    only_background = parent(record, [PersistentAgent(worker(gates), mode="non-blocking")])
    with_blocking = parent(record, [PersistentAgent(critic(), mode="blocking")], name="lead2")
    plain = parent(record, [], name="lead3")
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [only_background, with_blocking, plain]) as executor:
            for n, agent in enumerate((only_background, with_blocking, plain)):
                await (await executor.execute(agent, "hi", session_id=f"o{n}")).result()
    five = sorted([SPAWN, SEND, LIST, STATUS, TERMINATE])
    assert offered == [five, sorted([*five, WAIT]), []]


class _Ask(BaseModel):
    question: str


def _asker() -> AgentConfig:
    """A child that asks the client a question, then reports the answer."""
    ask = define_tool("ask_user", "Ask the user.", _Ask, "client")

    def script(request: LLMRequest) -> ScriptItem:
        answers = [m.content for m in request.messages if getattr(m, "tool_name", "") == "ask_user"]
        if not answers:
            return call("ask_user", {"question": "color?"})
        return finish({"text": f"answer {answers[-1]}"})

    return define_agent("asker", output_schema=Report, tools=[ask], llm=ScriptedLLM(script))


async def test_a_blocking_child_waiting_for_the_client_pauses_the_parent(
    store: EventStore, kind: str, request: pytest.FixtureRequest
) -> None:
    asker = _asker()
    with anyio.fail_after(LIMIT):
        async with children_of(kind, store, [asker], request) as kids:
            lead = parent(
                [
                    call(SPAWN, {"agent": "asker", "name": "q", "initialMessage": "ask"}, id="sp"),
                    "ok",
                ],
                [kids.entry(asker, "blocking")],
            )
            async with AgentExecutor(store, [lead]) as executor:
                handle = await executor.execute(lead, "go", session_id="hq")
                assert (await handle.result()).status == "paused"
                [entry] = await executor.pending_inputs("hq")
                assert entry.owner_session_id == "hq-agent-q"
                assert entry.path == ["hq", "hq-agent-q"]
                answered = await executor.submit_tool_result("hq", entry.tool_call_id, "blue")
                assert answered.resumed
                await settled(store, "hq")
            log = await store.read("hq")
            assert tool_results(log)["sp"]["output"] == {"text": "answer blue"}
            assert deliveries(log) == {"hq-agent-q": ["pull"]}


async def test_send_message_is_refused_while_the_child_waits_for_the_client(
    store: EventStore, kind: str, request: pytest.FixtureRequest
) -> None:
    gates = Gates()
    asker, work = _asker(), worker(gates)
    with anyio.fail_after(LIMIT):
        async with children_of(kind, store, [asker, work], request) as kids:
            lead = parent(
                [
                    call(SPAWN, {"agent": "asker", "name": "q", "initialMessage": "ask"}, id="sp"),
                    "spawned",
                    call(SEND, {"name": "q", "message": "hurry"}, id="send"),
                    call(STATUS, {"name": "q"}, id="st"),
                    "refused",
                    "thanks",
                ],
                [
                    kids.entry(asker, "non-blocking"),
                    PersistentAgent(worker(gates), mode="blocking"),
                ],
            )
            async with AgentExecutor(store, [lead]) as executor:
                await (await executor.execute(lead, "go", session_id="rq")).result()
                await settled(kids.store, "rq-agent-q", "paused")
                await (await executor.send_message("rq", "try now")).result()
                child = project_state(await kids.log("rq-agent-q"))
                # A non-blocking child's client tool is answered at its own session.
                [entry] = (await kids.control(executor).get_status("rq-agent-q")).pending_inputs
                await kids.control(executor).submit_tool_result(
                    "rq-agent-q", entry.tool_call_id, "red"
                )
                await settled(kids.store, "rq-agent-q")
                await (await executor.send_message("rq", "news?")).result()
            log = await store.read("rq")
            results = tool_results(log)
            assert "unresolved client-tool calls" in results["send"]["error"]
            assert results["st"]["status"] == "paused_awaiting_client"
            assert child.queued_messages == []  # nothing was sent to it
            assert child.status == "paused"
            assert notices(log) == ['Sub-agent \'q\' completed with result: {"text":"answer red"}']
            assert deliveries(log) == {"rq-agent-q": ["push"]}


class _FailsBeforeTheMessage:
    """A transport over the executor that aborts a child just before a message reaches it.

    The race of the seed's ``delivered: false``: the parent saw the child
    running, and it failed before the send.
    """

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.inner: Any = None

    async def start(self, request: Any) -> Any:
        return await self.inner.start(request)

    async def resume(self, request: Any) -> Any:
        return await self.inner.resume(request)

    async def send_message(self, request: Any) -> Any:
        await self.inner.abort(request.session_id, "failed meanwhile")
        await settled(self.store, request.session_id, "failed")
        return await self.inner.send_message(request)

    def stream(self, session_id: str, from_sequence: int = 0) -> Any:
        return self.inner.stream(session_id, from_sequence)

    async def get_status(self, session_id: str) -> Any:
        return await self.inner.get_status(session_id)

    async def interrupt(self, session_id: str, reason: str | None = None) -> None:
        await self.inner.interrupt(session_id, reason)

    async def abort(self, session_id: str, reason: str | None = None) -> None:
        await self.inner.abort(session_id, reason)


async def test_send_message_to_a_child_that_failed_meanwhile_is_not_delivered(
    store: EventStore,
) -> None:
    gates = Gates()
    racing = _FailsBeforeTheMessage(store)
    work = worker(gates)
    lead = parent(
        [
            call(SPAWN, {"agent": "worker", "name": "w", "initialMessage": "job"}, id="sp"),
            call(SEND, {"name": "w", "message": "more"}, id="send"),
            "ok",
            "thanks",
        ],
        [PersistentAgent(work, mode="non-blocking", transport=racing)],  # type: ignore[arg-type]
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [lead, work]) as executor:
            racing.inner = executor.service
            await (await executor.execute(lead, "go", session_id="dl")).result()
            await (await executor.send_message("dl", "news?")).result()
    log = await store.read("dl")
    results = tool_results(log)
    assert results["send"] == {"delivered": False}
    child = project_state(await store.read("dl-agent-w"))
    assert child.status == "failed"
    assert [m.content for m in child.messages if isinstance(m, UserMessage)] == ["job"]
    # Its failure is an outcome like any: pushed once at the next turn.
    assert notices(log) == ["Sub-agent 'w' failed: aborted: failed meanwhile"]
    assert deliveries(log) == {"dl-agent-w": ["push"]}


async def test_an_interrupted_child_resumes_when_spawned_again(
    store: EventStore, kind: str, request: pytest.FixtureRequest
) -> None:
    gates = Gates()
    for text in ("second", "again", "fresh"):
        gates.open(text)
    spawn = {"agent": "worker", "name": "w"}
    work, judge = worker(gates), critic()
    with anyio.fail_after(LIMIT):
        async with children_of(kind, store, [work, judge], request) as kids:
            lead = parent(
                [
                    call(SPAWN, {**spawn, "initialMessage": "first"}, id="sp1"),
                    "spawned",
                    call(LIST, {}, id="list"),
                    call(SPAWN, {**spawn, "initialMessage": "second"}, id="sp2"),
                    call(WAIT, {"name": "w"}, id="wait2"),
                    call(SEND, {"name": "w", "message": "again"}, id="send"),
                    call(WAIT, {"name": "w"}, id="wait3"),
                    call(TERMINATE, {"name": "w"}, id="term"),
                    call(SPAWN, {**spawn, "initialMessage": "fresh"}, id="sp3"),
                    call(WAIT, {"name": "w"}, id="wait4"),
                    "done",
                ],
                [
                    kids.entry(work, "non-blocking"),
                    kids.entry(judge, "blocking"),
                ],
            )
            async with AgentExecutor(store, [lead]) as executor:
                await (await executor.execute(lead, "go", session_id="ir")).result()
                await kids.control(executor).interrupt("ir-agent-w", "someone stopped it")
                await settled(kids.store, "ir-agent-w", "interrupted")
                await (await executor.send_message("ir", "go on")).result()
            log = await store.read("ir")
            results = tool_results(log)
            assert results["list"] == [{"name": "w", "agent": "worker", "status": "interrupted"}]
            # Pushed once (a later turn may be pushed too if it ended before the next wait).
            assert notices(log)[0] == "Sub-agent 'w' was interrupted"
            assert len(deliveries(log)["ir-agent-w"]) == outcomes(log)["ir-agent-w"] == 4
            # Spawned again: the interrupted session resumes with the new message.
            assert results["sp2"] == {"name": "w", "status": "running"}
            assert results["wait2"]["result"] == {"text": "done: second (turn 2)"}
            assert results["send"] == {"delivered": True}
            assert results["wait3"]["result"] == {"text": "done: again (turn 3)"}
            # A completed child cannot be terminated; it ends for good only when live.
            assert results["term"] == {"name": "w", "terminated": False, "status": "completed"}
            assert results["sp3"] == {"name": "w", "status": "running"}
            assert results["wait4"]["result"] == {"text": "done: fresh (turn 4)"}
            runs = [e.mode for e in await kids.log("ir-agent-w") if isinstance(e, RunStarted)]
            assert runs == ["start", "resume", "continue", "continue"]


async def test_a_companion_with_inherit_workspace_reads_its_parents_files(
    store: EventStore,
) -> None:
    def reader_script(request: LLMRequest) -> ScriptItem:
        read = [
            m.content for m in request.messages if getattr(m, "tool_name", "") == "workspace_read"
        ]
        if not read:
            return call("workspace_read", {"path": "notes/a.md"})
        return finish({"text": json.loads(read[-1])["content"]})

    reader = define_agent("reader", output_schema=Report, llm=ScriptedLLM(reader_script))
    lead = define_agent(
        "lead",
        workspaces=[Workspace("notes", "memory")],
        persistent_agents=[PersistentAgent(reader, mode="blocking", inherit_workspace=True)],
        llm=ScriptedLLM(
            [
                call("workspace_write", {"path": "notes/a.md", "content": "from the parent"}),
                call(SPAWN, {"agent": "reader", "name": "r", "initialMessage": "read it"}, id="sp"),
                "ok",
            ]
        ),
    )
    providers = {"memory": MemoryWorkspaceProvider()}
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [lead], workspace_providers=providers) as executor:
            await (await executor.execute(lead, "go", session_id="ws")).result()
    results = tool_results(await store.read("ws"))
    assert results["sp"]["output"] == {"text": "from the parent"}
    created = (await store.read("ws-agent-r"))[0]
    assert isinstance(created, SessionCreated)
    assert created.workspace_session_id == "ws"


async def test_aborting_the_parent_terminates_its_live_companions(
    store: EventStore, kind: str, request: pytest.FixtureRequest
) -> None:
    gates = Gates()
    thinking = anyio.Event()

    async def lead_script(request: LLMRequest) -> ScriptItem:
        turn = sum(1 for m in request.messages if type(m).__name__ == "AssistantMessage")
        if turn == 0:
            return call(SPAWN, {"agent": "worker", "name": "w", "initialMessage": "forever"})
        thinking.set()
        await anyio.sleep_forever()  # the parent's model never answers: it is aborted
        raise AssertionError("unreachable")

    work = worker(gates)
    with anyio.fail_after(LIMIT):
        async with children_of(kind, store, [work], request) as kids:
            lead = parent(lead_script, [kids.entry(work, "non-blocking")])
            async with AgentExecutor(store, [lead]) as executor:
                handle = await executor.execute(lead, "go", session_id="ab")
                await thinking.wait()
                await executor.service.abort("ab", "stop everything")
                result = await handle.result()
            assert result.status == "failed"
            ref = project_state(await store.read("ab")).sub_sessions["ab-agent-w"]
            assert (ref.status, ref.completion_delivered) == ("terminated", True)
            assert ref.error == "its parent was aborted: stop everything"
            child = project_state(await kids.log("ab-agent-w"))
            assert child.status == "failed"
            assert child.error == "aborted: its parent was aborted: stop everything"
