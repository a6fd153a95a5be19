"""``WaitSteps``: ``companion__waitForResult`` as steps around an engine's durable wait.

An engine that can sleep durably (DBOS: ``DBOS.recv`` with a timeout, whose
end survives a crash) does not wait inside a step. ``begin`` looks once and
fixes the call's deadline (its result is checkpointed, so a recovered
workflow keeps the first deadline); the workflow then sleeps until a notice
(the child's run ended: :func:`waits_on` tells its notifier whom to wake) or
the deadline, and ``look`` looks again, answering the call once the child's
turn ended, it waits for people, or the deadline passed. A remote child
(another server's; no notice comes from it) is followed inside ``look``, at
most until the deadline (``specs/dbos.md``).
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from helix_agents.companions.parent import Companions
from helix_agents.companions.refs import latest_child
from helix_agents.companions.tools import WAIT_FOR_RESULT, check_arguments
from helix_agents.engines.durable.kit import StepKit, StopWatch, no_beat
from helix_agents.engines.durable.plan import JobDone, StepInput
from helix_agents.engines.durable.reading import goes_on, unanswered
from helix_agents.log.state import SessionState, SubSessionRef
from helix_agents.messages import ToolCall
from helix_agents.runtime.decide import unanswered_calls
from helix_agents.runtime.writer import SessionWriter
from helix_agents.tracing import tool_span

__all__ = ["WaitLook", "WaitSteps", "waits_on"]


@dataclass
class WaitLook:
    """A ``waitForResult`` call after a look: answered (``done``), or waiting on ``child``.

    ``deadline``: seconds since the epoch (None: no timeout); ``remote``: the
    child is another server's (followed inside the next look).
    """

    done: JobDone
    waiting: bool = False
    child: str = ""
    remote: bool = False
    deadline: float | None = None


class WaitSteps:
    """The steps of a durable ``waitForResult``, over ``kit``."""

    def __init__(self, kit: StepKit) -> None:
        self.kit = kit

    async def begin(self, step: StepInput) -> WaitLook:
        """Look once; if the child still runs, fix the call's deadline (now + its timeout).

        The call's span covers this first look (its wait is the engine's).
        """
        return await self._look(step, None, first=True)

    async def look(self, step: StepInput, deadline: float | None) -> WaitLook:
        """Look again (after a notice or the deadline): answer the call, or go on waiting."""
        return await self._look(step, deadline, first=False)

    async def _look(self, step: StepInput, deadline: float | None, *, first: bool) -> WaitLook:
        stop = StopWatch()
        agent, writer, _log = await self.kit.open(step.session_id, stop)
        call = unanswered(writer.state, step.call_id)
        companions = self.kit.companions(agent, writer)
        if call is None or companions is None or not goes_on(writer.state):
            return WaitLook(JobDone(writer.last_seq, step.call_id))
        if first:
            args, _ = check_arguments(call.name, call.arguments, agent)
            timeout = args.timeout if args is not None else None
            deadline = time.time() + timeout if timeout is not None else None
            tracer = self.kit.executor.env.tracer
            span: AbstractContextManager[Any] = tool_span(
                tracer, agent.name, writer.session_id, call
            )
        else:
            span = nullcontext()
        with self.kit.traced(step), span:
            ref = await self._looked(writer, stop, companions, call, deadline, first=first)
        done = JobDone(writer.last_seq, step.call_id)
        if ref is None:
            return WaitLook(done)
        return WaitLook(
            done,
            waiting=True,
            child=ref.sub_session_id,
            remote=ref.remote is not None,
            deadline=deadline,
        )

    async def _looked(
        self,
        writer: SessionWriter,
        stop: StopWatch,
        companions: Companions,
        call: ToolCall,
        deadline: float | None,
        *,
        first: bool,
    ) -> SubSessionRef | None:
        """The child the call still waits on after this look (None: answered, or stopped)."""
        final = deadline is not None and time.time() >= deadline
        ref = await companions.wait_look(call, final=final)
        if ref is None or ref.remote is None or first:
            return ref
        # Another server's child: no notice comes from it; follow its stream here.
        within = None if deadline is None else max(0.0, deadline - time.time())
        followed = ref
        await self.kit.guarded(
            writer, stop, lambda: companions.follow_turn(followed, within), no_beat
        )
        if not goes_on(writer.state):
            return None
        return await companions.wait_look(call, final=True)


def waits_on(state: SessionState, child: str) -> int:
    """How many of ``state``'s unanswered ``waitForResult`` calls wait on child ``child``."""
    count = 0
    for call in unanswered_calls(state):
        if call.name != WAIT_FOR_RESULT or not isinstance(call.arguments, dict):
            continue
        name = call.arguments.get("name")
        ref = latest_child(state, name) if isinstance(name, str) else None
        if ref is not None and ref.sub_session_id == child:
            count += 1
    return count
