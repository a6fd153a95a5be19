"""A state machine over random companion calls, child outcomes and restarts.

The parent's model plays a plan: each action is a follow-up message ``act N``
to the parent, whose model then makes the planned companion call (spawn,
send, wait, terminate, list, status) and ends its turn. Children are a
``critic`` (blocking, answers at once), a ``worker`` (non-blocking) and a
``slow`` one (blocking); both wait on a gate per message, opened by a rule
(the child's outcome: done or failed, chosen when the message was sent). The
parent's executor is crashed (its task cancelled) and recovered between
actions and in the middle of a blocking spawn.

After every step: no outcome is delivered twice (one ``completion_delivered``
at most per turn of a child, and only after its end), at most one live child
per name, and no session the parent does not know. At the end every gate
opens, the parent takes one more turn, and every outcome has been delivered
exactly once. It runs with the children in the parent's executor and, a
second time, behind HTTP (an ``AgentServer`` on real uvicorn), where a restart
of the parent leaves them running on their host.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any

import anyio
from anyio.from_thread import start_blocking_portal
from companion_hosts import children_of
from companion_kit import Verdict, call, critic, finish, tool_results
from hypothesis import event as note, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from helix_agents import AgentConfig, AgentExecutor, define_agent
from helix_agents.events import (
    CompletionDelivered,
    Event,
    SubSessionFinished,
    SubSessionResumed,
    SubSessionStarted,
)
from helix_agents.log import project_state
from helix_agents.messages import AssistantMessage, UserMessage
from helix_agents.models import LLMRequest, ScriptedLLM
from helix_agents.models.scripted import ScriptItem
from helix_agents.stores import MemoryEventStore

PARENT = "lead"
STEP_LIMIT = 20.0
NAMES = st.sampled_from(["a", "b", "worker-1", "critic-1", "slow-1"])
_ACT = re.compile(r"act (\d+)")


class Gates:
    """A gate per message; ``all_open`` opens every gate, present and future."""

    def __init__(self) -> None:
        self.gates: dict[str, anyio.Event] = {}
        self.all_open = False

    def gate(self, name: str) -> anyio.Event:
        event = self.gates.setdefault(name, anyio.Event())
        if self.all_open:
            event.set()
        return event


def gated(name: str, gates: Gates) -> AgentConfig:
    async def script(request: LLMRequest) -> ScriptItem:
        last = [m.content for m in request.messages if isinstance(m, UserMessage)][-1]
        await gates.gate(last).wait()
        if last.startswith("fail"):
            return ScriptedLLM.fail(f"{name} failed on {last}")
        return finish({"verdict": "pass", "notes": last})

    return define_agent(name, output_schema=Verdict, llm=ScriptedLLM(script))


def turns(log: Sequence[Event]) -> dict[str, list[list[Event]]]:
    """Per child, its turns as the parent's log records them (each opened by start/resume)."""
    found: dict[str, list[list[Event]]] = {}
    for event in log:
        if isinstance(event, SubSessionStarted | SubSessionResumed):
            found.setdefault(event.sub_session_id, []).append([event])
        elif isinstance(event, SubSessionFinished | CompletionDelivered):
            found[event.sub_session_id][-1].append(event)
    return found


async def _hosted(make: Callable[[], Any], *, task_status: Any) -> None:
    with anyio.CancelScope() as scope:
        async with make() as held:
            task_status.started((held, scope))
            await anyio.sleep_forever()


class CompanionMachine(RuleBasedStateMachine):
    """Random companion calls, child outcomes and parent restarts; exactly-once delivery."""

    KIND = "local"
    """Where the children run (``companion_hosts.children_of``)."""

    def __init__(self) -> None:
        super().__init__()
        self._resources = ExitStack()
        self.portal = self._resources.enter_context(start_blocking_portal("asyncio"))
        self.store = MemoryEventStore()
        self.gates = Gates()
        self.plan: dict[int, list[Any]] = {}
        self.messages: list[str] = []
        self.restarts = 0
        children = [critic(), gated("worker", self.gates), gated("slow", self.gates)]
        self.kids = self._resources.enter_context(
            self.portal.wrap_async_context_manager(
                children_of(self.KIND, self.store, children, None)  # type: ignore[arg-type]
            )
        )
        self.lead = define_agent(
            PARENT,
            llm=ScriptedLLM(self._script),
            max_steps=50,
            persistent_agents=[
                self.kids.entry(children[0], "blocking"),
                self.kids.entry(children[1], "non-blocking"),
                self.kids.entry(children[2], "blocking"),
            ],
        )
        self.host: tuple[Any, Any, Any] | None = None
        self._start()
        self._act([])  # the conversation's first turn

    def teardown(self) -> None:
        try:
            if self.host is not None:
                self._crash()
        finally:
            self._resources.close()

    # --- the parent's model plays the plan ----------------------------------------------

    def _script(self, request: LLMRequest) -> ScriptItem:
        acts = [
            (i, int(m.group(1)))
            for i, message in enumerate(request.messages)
            if isinstance(message, UserMessage) and (m := _ACT.fullmatch(message.content))
        ]
        if not acts:
            return "hello"
        index, number = acts[-1]
        answered = any(isinstance(m, AssistantMessage) for m in request.messages[index + 1 :])
        if answered or not self.plan[number]:
            return f"done {number}"
        return [
            call(name, args, id=f"a{number}-{k}")
            for k, (name, args) in enumerate(self.plan[number])
        ]

    # --- the parent's process -------------------------------------------------------------

    def _start(self) -> None:
        def make() -> Any:
            return AgentExecutor(self.store, [self.lead])

        future, (executor, scope) = self.portal.start_task(_hosted, make)
        self.host = (future, executor, scope)
        self._call(executor.recover)

    def _crash(self) -> None:
        assert self.host is not None
        future, _, scope = self.host
        self.host = None
        self.portal.call(scope.cancel)
        future.exception(timeout=STEP_LIMIT)

    @property
    def executor(self) -> AgentExecutor:
        assert self.host is not None
        return self.host[1]  # type: ignore[no-any-return]

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        async def bounded() -> Any:
            with anyio.fail_after(STEP_LIMIT):
                return await fn(*args)

        return self.portal.call(bounded)

    def _act(self, calls: list[Any], *, wait: bool = True) -> int:
        number = len(self.plan)
        self.plan[number] = calls

        async def send() -> None:
            handle = (
                await self.executor.send_message(PARENT, f"act {number}")
                if number
                else (await self.executor.execute(self.lead, "act 0", session_id=PARENT))
            )
            if wait:
                await handle.result()

        self._call(send)
        return number

    def _message(self, fail: bool) -> str:
        text = f"{'fail' if fail else 'ok'}-{len(self.messages)}"
        self.messages.append(text)
        return text

    def _log(self, session_id: str = PARENT) -> list[Event]:
        return self._call(self.store.read, session_id)  # type: ignore[no-any-return]

    # --- rules ----------------------------------------------------------------------------

    @rule(
        agent=st.sampled_from(["critic", "worker"]),
        name=st.none() | NAMES,
        fail=st.booleans(),
    )
    def spawn(self, agent: str, name: str | None, fail: bool) -> None:
        args: dict[str, Any] = {"agent": agent, "initialMessage": self._message(fail)}
        if agent == "critic":
            args["initialMessage"] = "Review " + args["initialMessage"]
        if name is not None:
            args["name"] = name
        self._act([("companion__spawnAgent", args)])

    @rule(name=NAMES, fail=st.booleans())
    def send(self, name: str, fail: bool) -> None:
        self._act([("companion__sendMessage", {"name": name, "message": self._message(fail)})])

    @rule(name=NAMES)
    def wait(self, name: str) -> None:
        self._act([("companion__waitForResult", {"name": name, "timeout": 5})])

    @rule(name=NAMES)
    def terminate(self, name: str) -> None:
        self._act([("companion__terminateChild", {"name": name})])

    @rule(name=NAMES)
    def status(self, name: str) -> None:
        self._act([("companion__getChildStatus", {"name": name}), ("companion__listChildren", {})])

    @rule(pick=st.integers(0, 50))
    def child_outcome(self, pick: int) -> None:
        closed = [m for m in self.messages if not self.gates.gate(m).is_set()]
        if closed:
            gate = self.gates.gate(closed[pick % len(closed)])
            self.portal.call(gate.set)

    @rule()
    def restart(self) -> None:
        self._crash()
        self.restarts += 1
        self._start()

    @rule(fail=st.booleans())
    def restart_mid_blocking_spawn(self, fail: bool) -> None:
        """Crash the parent while a blocking spawn follows its child; recover; let it end."""
        message = self._message(fail)
        number = self._act(
            [("companion__spawnAgent", {"agent": "slow", "initialMessage": message})],
            wait=False,
        )
        log = self._call(self._until_called, number)
        if log is None:
            return  # the name was refused: nothing runs
        self._crash()
        self.restarts += 1
        self._start()
        self.portal.call(self.gates.gate(message).set)
        self._call(self._until_answered, number)

    async def _until_called(self, number: int) -> list[Event] | None:
        """The parent's log once its call ``a{number}-0`` opened a child (None: refused)."""
        call_id = f"a{number}-0"
        async for _ in self.store.tail(PARENT, 0):
            log = await self.store.read(PARENT)
            if call_id in tool_results(log):
                return None
            if any(isinstance(e, SubSessionStarted) and e.tool_call_id == call_id for e in log):
                return log
        return None

    async def _until_answered(self, number: int) -> None:
        call_id = f"a{number}-0"
        log = await self.store.read(PARENT)
        async for _ in self.store.tail(PARENT, 0):
            log = await self.store.read(PARENT)
            state = project_state(log)
            if call_id in tool_results(log) and state.status != "running":
                return
        raise AssertionError(f"call {call_id} never answered")

    # --- what must hold -------------------------------------------------------------------

    @invariant()
    def check(self) -> None:
        """After each step: no duplicate delivery, unique live names, no orphan session."""
        log = self._log()
        state = project_state(log)
        assert state.status != "failed", state.error
        for sid, child_turns in turns(log).items():
            for turn in child_turns:
                kinds = [type(e).__name__ for e in turn]
                assert kinds.count("CompletionDelivered") <= 1, (sid, kinds)
                if "CompletionDelivered" in kinds:
                    assert "SubSessionFinished" in kinds[: kinds.index("CompletionDelivered")]
        live: dict[str, int] = {}
        for ref in state.sub_sessions.values():
            assert (ref.remote is not None) == (self.KIND != "local"), ref
            assert ref.name is not None
            assert re.fullmatch(
                rf"{PARENT}-agent-{re.escape(ref.name)}(\.\d+)?", ref.sub_session_id
            )
            if ref.status in ("running", "paused_awaiting_client"):
                live[ref.name] = live.get(ref.name, 0) + 1
        assert all(n == 1 for n in live.values()), live
        sessions = set(self._call(self.store.list_sessions))
        sessions |= set(self._call(self.kids.store.list_sessions))
        assert sessions <= {PARENT, *state.sub_sessions}, sessions - set(state.sub_sessions)

    def end(self) -> None:
        """Every gate opens; after one more turn every outcome was delivered exactly once."""
        self.gates.all_open = True
        for gate in list(self.gates.gates.values()):
            self.portal.call(gate.set)
        state = project_state(self._log())
        for sid in state.sub_sessions:
            self._call(self._child_ended, sid)
        self._act([])
        log = self._log()
        state = project_state(log)
        for sid, ref in state.sub_sessions.items():
            assert ref.status not in ("running", "paused_awaiting_client"), (sid, ref.status)
            assert ref.completion_delivered, sid
        note(f"children: {min(len(state.sub_sessions), 4)}")
        vias = [e.via for e in log if isinstance(e, CompletionDelivered)]
        note(f"pushed: {min(vias.count('push'), 3)}")
        note(f"pulled: {min(vias.count('pull'), 3)}")
        note(f"restarts: {min(self.restarts, 2)}")
        for sid, child_turns in turns(log).items():
            for n, turn in enumerate(child_turns, start=1):
                kinds = [type(e).__name__ for e in turn]
                if "SubSessionFinished" in kinds:
                    assert kinds.count("CompletionDelivered") == 1, (sid, kinds)
                else:  # a message queued into its run: the turn goes on in the next one
                    assert n < len(child_turns), (sid, kinds)

    async def _child_ended(self, session_id: str) -> None:
        store = self.kids.store
        async for _ in store.tail(session_id, 0):
            log = await store.read(session_id)
            if log and project_state(log).status != "running":
                return


class CompanionMachineToTheEnd(CompanionMachine):
    """The machine, with the end-of-run checks."""

    def teardown(self) -> None:
        try:
            if self.host is not None:
                self.end()
        finally:
            super().teardown()


class CompanionMachineOverHttp(CompanionMachineToTheEnd):
    """The same, with the children behind HTTP (an ``AgentServer`` on real uvicorn)."""

    KIND = "http"


CompanionMachineToTheEnd.TestCase.settings = settings(
    max_examples=25, stateful_step_count=12, deadline=None
)
CompanionMachineOverHttp.TestCase.settings = settings(
    max_examples=15, stateful_step_count=12, deadline=None
)
TestCompanionMachine = CompanionMachineToTheEnd.TestCase
TestCompanionMachineOverHttp = CompanionMachineOverHttp.TestCase
