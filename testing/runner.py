"""``run_agent``: run an agent tree in a test, strict, answering its people; the fixture's kit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio

from helix_agents.agents.config import AgentConfig, OutputT
from helix_agents.log.state import SessionStatus
from helix_agents.log.store import EventStore
from helix_agents.models.base import LLMAdapter
from helix_agents.runtime.executor import AgentExecutor
from helix_agents.runtime.handle import AgentHandle, AgentResult
from helix_agents.stores import MemoryEventStore
from helix_agents.testing.answers import Answers, answer_for, give
from helix_agents.testing.report import RunReport, trajectory_of

__all__ = ["AgentTester", "run_agent", "run_agent_sync"]

DEFAULT_TIME_LIMIT = 60.0
"""Seconds a test's run may take before it is a ``TimeoutError`` (a hung test ends)."""


async def run_agent(
    agent: AgentConfig[OutputT],
    message_or_input: Any,
    *,
    answers: Answers | None = None,
    expect: SessionStatus | None = "completed",
    strict: bool = True,
    store: EventStore | None = None,
    executor: AgentExecutor | None = None,
    llm: LLMAdapter | None = None,
    session_id: str | None = None,
    state: dict[str, Any] | None = None,
    time_limit: float = DEFAULT_TIME_LIMIT,
) -> RunReport[OutputT]:
    """Run ``agent`` to its end in a test and report the result with its trajectory.

    Strict by default: the first tool error, unknown tool, failed child or
    rejected output anywhere in the tree fails the run, naming it. When the run
    pauses for a person, each pending entry is answered from ``answers``
    (keyed by call id or tool name: :func:`approve`, :func:`deny`,
    :func:`tool_result`) and the run goes on; an entry with no answer leaves
    the run ``paused`` (``report.pending`` lists what waits).

    Args:
        expect: the status the run must end with (``None``: any); another
            ending is an ``AssertionError`` naming the error or what waits.
        store: where the logs go (default: a fresh ``MemoryEventStore``).
        executor: an executor to run on (its store is used); default: one
            opened for this run on ``store``.
        llm: the default model for agents defined without one.
        time_limit: seconds the whole run may take (then ``TimeoutError``: a hung
            test ends).
    """
    with anyio.fail_after(time_limit):
        if executor is not None:
            return await _run(
                executor, agent, message_or_input, answers, expect, strict, session_id, state
            )
        async with AgentExecutor(store or MemoryEventStore(), [agent], llm=llm) as opened:
            return await _run(
                opened, agent, message_or_input, answers, expect, strict, session_id, state
            )


async def _run(
    executor: AgentExecutor,
    agent: AgentConfig[OutputT],
    message_or_input: Any,
    answers: Answers | None,
    expect: SessionStatus | None,
    strict: bool,
    session_id: str | None,
    state: dict[str, Any] | None,
) -> RunReport[OutputT]:
    handle: AgentHandle[OutputT] = await executor.execute(
        agent, message_or_input, session_id=session_id, state=state, strict=strict
    )
    result = await handle.result()
    while result.status == "paused" and answers:
        given = False
        for entry in await handle.pending_inputs():
            answer = answer_for(answers, entry)
            if answer is not None:
                await give(handle, entry, answer)
                given = True
        if not given:
            break
        result = await _after_answers(handle)
    report = RunReport(
        result=result,
        trajectory=await trajectory_of(executor.store, handle.session_id),
        pending=await handle.pending_inputs() if result.status == "paused" else [],
    )
    if expect is not None and report.status != expect:
        raise AssertionError(_unexpected(agent, report, expect))
    return report


async def _after_answers(handle: AgentHandle[OutputT]) -> AgentResult[OutputT]:
    """The result once the answered tree has gone on (it may pause again for the next entry)."""
    result = await handle.result()
    while result.status == "paused" and not await handle.pending_inputs():
        # Every entry is answered and the resume is on its way: wait for it.
        await anyio.sleep(0.01)
        result = await handle.result()
    return result


def _unexpected(agent: AgentConfig[Any], report: RunReport[Any], expect: str) -> str:
    how = f"the run of {agent.name!r} ({report.session_id}) ended {report.status}, not {expect}"
    if report.result.error:
        return f"{how}: {report.result.error}"
    if report.pending:
        waiting = ", ".join(f"{e.kind} {e.tool_name!r} ({e.tool_call_id})" for e in report.pending)
        return f"{how}: waiting for {waiting} (give answers={{...}} for them)"
    if report.problems:
        return f"{how}; its problems: " + "; ".join(p.describe() for p in report.problems)
    return how


def run_agent_sync(
    agent: AgentConfig[OutputT], message_or_input: Any, **options: Any
) -> RunReport[OutputT]:
    """:func:`run_agent` from synchronous code (a plain ``def test_...``); same options."""

    async def run() -> RunReport[OutputT]:
        return await run_agent(agent, message_or_input, **options)

    return anyio.run(run)


class AgentTester:
    """A test's kit (the ``helix`` fixture): a fresh store, strict runs, executors on it."""

    def __init__(
        self, store: EventStore | None = None, *, strict: bool = True, llm: LLMAdapter | None = None
    ) -> None:
        self.store: EventStore = store or MemoryEventStore()
        """Where every run of this test goes (read it, or ``trajectory_of`` a session)."""
        self.strict = strict
        self.llm = llm

    def __repr__(self) -> str:
        return f"<AgentTester on {type(self.store).__name__}, strict={self.strict}>"

    async def run(
        self, agent: AgentConfig[OutputT], message_or_input: Any, **options: Any
    ) -> RunReport[OutputT]:
        """:func:`run_agent` on this kit's store (``strict`` and ``llm`` default to the kit's)."""
        options.setdefault("strict", self.strict)
        options.setdefault("llm", self.llm)
        return await run_agent(agent, message_or_input, store=self.store, **options)

    def run_sync(
        self, agent: AgentConfig[OutputT], message_or_input: Any, **options: Any
    ) -> RunReport[OutputT]:
        """:meth:`run` from synchronous code."""

        async def run() -> RunReport[OutputT]:
            return await self.run(agent, message_or_input, **options)

        return anyio.run(run)

    def executor(self, agents: Sequence[AgentConfig[Any]] = (), **options: Any) -> AgentExecutor:
        """An executor on this kit's store, strict like the kit: ``async with`` it."""
        options.setdefault("strict", self.strict)
        options.setdefault("llm", self.llm)
        return AgentExecutor(self.store, agents, **options)
