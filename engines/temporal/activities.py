"""The activities of :class:`~helix_agents.engines.temporal.workflow.AgentWorkflow`: steps.

Each activity is one :class:`~helix_agents.engines.durable.DurableSteps` step; the
long ones (a model call, a tool, a child followed) heartbeat every
``beat_every`` seconds, which is also how Temporal's cancellation reaches
them. Errors are translated at this edge into Temporal's terms: a step that
can never succeed, a lost ownership and a remote agent that has definitively
failed are non-retryable; a :class:`~helix_agents.errors.StreamDropError`
is retryable and carries the remote session id and the last sequence held.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from helix_agents.engines.durable.kit import no_beat
from helix_agents.engines.durable.plan import (
    ChildOpened,
    JobDone,
    Plan,
    Round,
    RoundEnd,
    StepInput,
    StopInput,
    ToolRound,
)
from helix_agents.engines.durable.reading import StepFailed
from helix_agents.engines.durable.steps import DurableSteps
from helix_agents.errors import OwnershipLost, RemoteAgentFailedError, StreamDropError

__all__ = ["HelixActivities"]

T = TypeVar("T")


def _beat(progress: Any) -> None:
    if progress is None:
        activity.heartbeat()
    else:
        activity.heartbeat(progress)


async def _translated(step: Callable[[], Awaitable[T]]) -> T:
    try:
        return await step()
    except StepFailed as exc:
        raise ApplicationError(str(exc), type="StepFailed", non_retryable=True) from exc
    except OwnershipLost as exc:
        raise ApplicationError(str(exc), type="OwnershipLost", non_retryable=True) from exc
    except RemoteAgentFailedError as exc:
        raise ApplicationError(
            str(exc),
            exc.remote_session_id,
            exc.remote_error,
            type="RemoteAgentFailedError",
            non_retryable=True,
        ) from exc
    except StreamDropError as exc:
        activity.logger.info("%s: retrying the step from seq %d", exc, exc.last_sequence)
        raise ApplicationError(
            str(exc), exc.remote_session_id, exc.last_sequence, type="StreamDropError"
        ) from exc


def _held_seq(details: Sequence[Any]) -> int:
    """The child seq a heartbeat carried (0: none, or not a seq)."""
    if not details:
        return 0
    first = details[0]
    return first if isinstance(first, int) and not isinstance(first, bool) and first > 0 else 0


class HelixActivities:
    """The workflow's activities over ``steps`` (register :meth:`all` with the worker)."""

    def __init__(self, steps: DurableSteps) -> None:
        self.steps = steps

    def all(self) -> list[Callable[..., Any]]:
        """Every activity, for ``Worker(..., activities=...)``."""
        return [
            self.begin,
            self.model_step,
            self.round_open,
            self.tool_call,
            self.tool_round,
            self.tool_failed,
            self.child_open,
            self.child_follow,
            self.remote_child,
            self.companion_call,
            self.round_close,
            self.stopped,
            self.run_failed,
            self.expire,
        ]

    @activity.defn(name="helix_begin")
    async def begin(self, step: StepInput) -> Plan:
        """A run begins (its start hook) and says what is due."""
        return await _translated(lambda: self.steps.begin(step))

    @activity.defn(name="helix_model_step")
    async def model_step(self, step: StepInput) -> Plan:
        """One model call (heartbeating)."""
        return await _translated(lambda: self.steps.model_step(step, _beat))

    @activity.defn(name="helix_round_open")
    async def round_open(self, step: StepInput) -> Round:
        """A turn's calls routed; the inline ones recorded."""
        return await _translated(lambda: self.steps.round_open(step))

    @activity.defn(name="helix_tool_call")
    async def tool_call(self, step: StepInput) -> JobDone:
        """One regular tool call (heartbeating; its retry policy is the tool's)."""
        return await _translated(lambda: self.steps.calls.tool_call(step, _beat))

    @activity.defn(name="helix_tool_round")
    async def tool_round(self, work: ToolRound) -> Plan:
        """A round of tool calls sharing a policy, run and closed (a local activity when the
        policy allows: no heartbeat then)."""
        beat = no_beat if activity.info().is_local else _beat
        return await _translated(lambda: self.steps.tool_round(work, beat))

    @activity.defn(name="helix_tool_failed")
    async def tool_failed(self, step: StepInput, error: str) -> JobDone:
        """A tool call whose attempts are spent, recorded as an error result."""
        return await _translated(lambda: self.steps.calls.tool_failed(step, error))

    @activity.defn(name="helix_child_open")
    async def child_open(self, step: StepInput) -> ChildOpened:
        """A local child call opened; its run is launched by the workflow."""
        return await _translated(lambda: self.steps.calls.child_open(step))

    @activity.defn(name="helix_child_follow")
    async def child_follow(self, step: StepInput) -> JobDone:
        """A local child followed to its end, its chunks forwarded (heartbeating)."""
        return await _translated(lambda: self.steps.calls.child_follow(step, _beat))

    @activity.defn(name="helix_remote_child")
    async def remote_child(self, step: StepInput) -> JobDone:
        """The seeds' executeRemoteSubAgentCall (heartbeat: the last child seq held).

        A retried attempt resumes the child's stream from the last seq its
        previous attempt's heartbeat carried, or from the parent's log if that
        holds more.
        """
        held = _held_seq(activity.info().heartbeat_details)
        if held:
            activity.logger.info(
                "remote call %s resumes; last heartbeat held child seq %d", step.call_id, held
            )
        return await _translated(lambda: self.steps.calls.remote_child(step, _beat, held))

    @activity.defn(name="helix_companion_call")
    async def companion_call(self, step: StepInput) -> JobDone:
        """A companion tool call (a blocking spawn follows its child, heartbeating)."""
        return await _translated(lambda: self.steps.calls.companion_call(step, _beat))

    @activity.defn(name="helix_round_close")
    async def round_close(self, end: RoundEnd) -> Plan:
        """A round ends: completion, suspension, or the next step."""
        return await _translated(lambda: self.steps.round_close(end))

    @activity.defn(name="helix_stopped")
    async def stopped(self, request: StopInput) -> Plan:
        """An interrupt or abort recorded, once the children acknowledged."""
        return await _translated(lambda: self.steps.stopped(request))

    @activity.defn(name="helix_run_failed")
    async def run_failed(self, step: StepInput, error: str) -> Plan:
        """A run whose step's retries are spent, failed in the log."""
        return await _translated(lambda: self.steps.run_failed(step, error))

    @activity.defn(name="helix_expire")
    async def expire(self, step: StepInput) -> Plan:
        """A paused root's entries past their ``expires_in`` answered as expired."""
        return await _translated(lambda: self.steps.expire(step))
