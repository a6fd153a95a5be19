"""What a durable engine's workflow and its steps hand each other: small, plain, JSON-able.

A workflow (Temporal's, DBOS's) decides only from these: every value in
them comes out of a step, so an engine that records step results (Temporal's
history, DBOS's step table) replays the workflow to the same decisions.
Plain dataclasses of strings, numbers and lists, so every engine's default
serializer carries them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from helix_agents.runtime.decide import JobKind

__all__ = [
    "CallJob",
    "ChildOpened",
    "JobDone",
    "Plan",
    "Round",
    "RoundEnd",
    "RunInput",
    "round_end",
    "StepInput",
    "StopInput",
    "ToolPolicy",
    "ToolRound",
    "shared_policy",
    "TOOL_TIMEOUT",
]


TOOL_TIMEOUT = 600.0
"""Seconds one attempt of a tool's step may take when its policy sets no timeout."""

Next = Literal["step", "round", "stop", "pause", "end"]
"""What a workflow runs next, from :func:`~helix_agents.runtime.decide.next_action`:
``step`` (the model step, which also carries out a completion or the step
limit's failure), ``round`` (a round of calls), ``stop`` (the stop step),
``pause`` (wait for a resume), ``end`` (the run is over)."""


@dataclass
class RunInput:
    """A run of session ``session_id`` whose log ends at ``seq`` (its ``run_started``)."""

    session_id: str
    seq: int


@dataclass
class StepInput:
    """One step of session ``session_id``: the log ended at ``seq`` when it was scheduled.

    ``call_id``: the tool call a call's step is about (empty for the others).
    """

    session_id: str
    seq: int
    call_id: str = ""
    trace: dict[str, str] = field(default_factory=dict)
    """The run's span (a W3C carrier, from ``begin``): the step's spans are its children."""


@dataclass
class ToolPolicy:
    """How a tool call's durable step is retried and bounded (set per tool on the worker).

    Args:
        max_attempts: attempts in all (1: never retried; a crash then fails the call).
        initial_interval: seconds before the first retry.
        backoff: each later wait is the one before times this.
        max_interval: the longest wait between attempts, in seconds.
        timeout: the longest one attempt may take, in seconds (None: the tool's own
            ``timeout`` plus a margin, or ten minutes).
        local: whether the tool's round may run on the worker running the workflow:
            on Temporal as a local activity (no task-queue round trip, but a dead
            worker is noticed at the workflow task's timeout, not the heartbeat's),
            on DBOS inside the model step that asked for it (its first attempt: one
            checkpoint for the turn and its calls). False for a tool that runs long
            (``specs/temporal.md``, "Steps per agent step"; ``specs/dbos.md``).
    """

    max_attempts: int = 5
    initial_interval: float = 1.0
    backoff: float = 2.0
    max_interval: float = 30.0
    timeout: float | None = None
    local: bool = True


@dataclass
class Plan:
    """Where a session stands after a step, and what its workflow does next.

    ``next``: the step due (:data:`Next`, decided by ``next_action``, never by
    the workflow); ``status`` is the session's (``running``, ``paused``,
    ``completed``, ``failed``, ``interrupted``), the workflow's result;
    ``stop``/``stop_reason``: the stop request a ``stop`` is for;
    ``expires_at``: a paused root's earliest open entry with ``expires_in``
    expires then (Unix time): its workflow's durable timer wakes it for the
    ``expire`` step.
    """

    session_id: str
    seq: int
    status: str
    next: Next = "end"
    stop: str | None = None
    stop_reason: str | None = None
    trace: dict[str, str] = field(default_factory=dict)
    """``begin``'s: the run's span as a W3C carrier (empty when not traced)."""
    expires_at: float | None = None
    round: Round | None = None
    """With ``next == "round"``: the round, already opened by the step that made the
    plan (its calls routed, the inline ones recorded), so no step of its own opens it."""
    tried: str | None = None
    """With ``next == "round"``: the error of the round's first attempt, made inside the
    step that opened it (:meth:`~helix_agents.engines.durable.steps.DurableSteps.turn`);
    the round's own step has the rest of its policy's attempts."""


@dataclass
class CallJob:
    """One call of a round that runs as a durable step of its own (or a child run)."""

    call_id: str
    name: str
    kind: JobKind
    policy: ToolPolicy = field(default_factory=ToolPolicy)


@dataclass
class Round:
    """A round opened: the calls that run on their own, and those that wait for people.

    The round's inline calls (``__finish__``, unknown tools, approval gates,
    client tools) are recorded by the step that opened it.
    """

    seq: int
    jobs: list[CallJob] = field(default_factory=list)
    client: list[str] = field(default_factory=list)
    approval: list[str] = field(default_factory=list)


def shared_policy(opened: Round) -> ToolPolicy | None:
    """The one policy of a round whose jobs are all tool calls sharing it; None otherwise.

    Such a round runs whole in one step (:class:`ToolRound`): its calls, then its close.
    """
    if not opened.jobs or any(job.kind != "tool" for job in opened.jobs):
        return None
    first = opened.jobs[0].policy
    return first if all(job.policy == first for job in opened.jobs) else None


@dataclass
class ToolRound:
    """A round of tool calls that share a policy, run and closed in one step."""

    session_id: str
    opened: Round
    trace: dict[str, str] = field(default_factory=dict)


@dataclass
class ChildOpened:
    """A local child call opened: its session, and the run of it to launch (if one is due)."""

    seq: int
    child_session_id: str
    open: bool
    launch_seq: int | None = None


@dataclass
class JobDone:
    """A call's step ended: the parent's log end, and the child that suspended (if it did).

    ``client``/``approval``/``children``: what a companion call left waiting for
    people (as a round's own calls do).
    """

    seq: int
    call_id: str
    suspended_child: str | None = None
    client: list[str] = field(default_factory=list)
    approval: list[str] = field(default_factory=list)
    children: dict[str, str] = field(default_factory=dict)


@dataclass
class RoundEnd:
    """What a round's closing step needs: what waits for people, and which children."""

    session_id: str
    seq: int
    client: list[str] = field(default_factory=list)
    approval: list[str] = field(default_factory=list)
    children: dict[str, str] = field(default_factory=dict)


def round_end(session_id: str, opened: Round, done: list[JobDone]) -> RoundEnd:
    """What a round's closing step gets: the log's end, and everything left waiting.

    What the round's routing left waiting (``opened``), the children that
    suspended, and what companion calls left waiting, in the jobs' order.
    """
    seq = max([opened.seq, *(job.seq for job in done)])
    children = {job.suspended_child: job.call_id for job in done if job.suspended_child}
    client, approval = list(opened.client), list(opened.approval)
    for job in done:
        client.extend(job.client)
        approval.extend(job.approval)
        children.update(job.children)
    return RoundEnd(session_id, seq, client, approval, children)


@dataclass
class StopInput:
    """A stop of session ``session_id``'s run: ``interrupt`` or ``abort``.

    ``run_seq`` is the seq of the ``run_started`` of the run the stop was for
    (0: whichever run the log has): a stop that reaches its step after a
    later run began (a paused run stopped, then resumed) is that later run's
    business no more, and records nothing.
    """

    session_id: str
    kind: str
    reason: str | None = None
    run_seq: int = 0
