"""Which sessions of a tree a fork copies, and at which of their sequences.

A fork of session ``S`` at ``N`` is planned from the top of the path to ``S``
(its root, when the root's log is in the store) down:

- the path from the top to ``S`` is forked, each ancestor at the sequence
  that matches its child's point (:func:`parent_point`);
- below a forked session, a child whose outcome the prefix recorded (an
  ephemeral child, finished) is **reused**: the branch points at its log,
  which is never written again;
- a child still open at the fork point (running, paused, interrupted) and a
  persistent one (a companion the branch may consult again) are **forked**
  too, at their matching sequence (:func:`child_point`), and so on down.

Sequences match by what the parent's log holds of its child (the child's
sequences it forwarded) and by time (``ts``): the child's events up to the
parent's event at its fork point.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from helix_agents.errors import AgentServerError
from helix_agents.events import (
    ChildChunkForwarded,
    Event,
    ForkEdit,
    RemoteRef,
    SessionCreated,
    SubSessionFinished,
    SubSessionStarted,
)
from helix_agents.log.projections import project_state

__all__ = ["ForkPlan", "child_point", "parent_point", "plan_children", "renamed"]

_REUSED = ("completed", "failed", "terminated")


@dataclass
class ForkPlan:
    """One session of the tree to fork: its origin, its point, its branch id, its edits."""

    origin: str
    at_seq: int
    branch: str
    log: list[Event] = field(default_factory=list)
    """The origin's events 1 .. ``at_seq``."""
    edits: list[ForkEdit] = field(default_factory=list)
    remote: RemoteRef | None = None
    """Set for a remote child: forked by its own server (``POST /fork``)."""
    parent: str | None = None
    """The origin parent of a remote child."""


def renamed(origin: str, ids: Mapping[str, str]) -> str:
    """A branch id for ``origin``: its parent's id swapped (``{parent}-sub-{call}``,
    ``-remote-``, a companion's ``-agent-``), else ``{origin}-fork-{8 hex}``."""
    for old, new in ids.items():
        for infix in ("-sub-", "-remote-", "-agent-"):
            if origin.startswith(old + infix) and old != new:
                return new + origin[len(old) :]
    return f"{origin}-fork-{uuid.uuid4().hex[:8]}"


def child_point(parent_prefix: Sequence[Event], child_id: str, child_log: Sequence[Event]) -> int:
    """The child's sequence matching the end of ``parent_prefix``.

    At least the last of the child's sequences the parent forwarded; further,
    every child event no later (``ts``) than the parent's last one. Never 0.
    """
    forwarded = max(
        (
            e.child_seq
            for e in parent_prefix
            if isinstance(e, ChildChunkForwarded) and e.child_session_id == child_id
        ),
        default=0,
    )
    until = parent_prefix[-1].ts
    by_time = 0
    for event in child_log:
        if event.ts > until:
            break
        by_time = event.seq
    return max(forwarded, by_time, 1)


def parent_point(
    parent_log: Sequence[Event], child_id: str, child_seq: int, child_ts: float
) -> int:
    """The parent's sequence matching its child's point ``child_seq`` (an event at ``child_ts``).

    After the child's start, before the parent recorded its end or forwarded a
    later child event, and no later (``ts``) than the child's point.
    """
    started: int | None = None
    limit = len(parent_log) + 1
    for event in parent_log:
        if isinstance(event, SubSessionStarted) and event.sub_session_id == child_id:
            started = event.seq if started is None else started
        elif isinstance(event, SubSessionFinished) and event.sub_session_id == child_id:
            if started is not None:
                limit = min(limit, event.seq)
        elif (
            isinstance(event, ChildChunkForwarded)
            and event.child_session_id == child_id
            and event.child_seq > child_seq
        ):
            limit = min(limit, event.seq)
    if started is None:
        raise AgentServerError(
            "INVALID_REQUEST", f"the parent's log never started child {child_id!r}"
        )
    point = started
    for event in parent_log[started : limit - 1]:
        if event.ts <= child_ts:
            point = event.seq
    return point


def plan_children(
    plan: ForkPlan,
    ids: dict[str, str],
    forced: Mapping[str, int],
) -> list[tuple[str, RemoteRef | None, int | None]]:
    """The children of ``plan``'s prefix to fork: (origin id, remote ref, forced point or None).

    Assigns each one's branch id in ``ids`` (before any log is copied, so every
    copy maps every forked id).
    """
    state = project_state(plan.log)
    out: list[tuple[str, RemoteRef | None, int | None]] = []
    for ref in state.sub_sessions.values():
        child = ref.sub_session_id
        if child not in forced and (
            child in ids or (ref.mode == "ephemeral" and ref.status in _REUSED)
        ):
            continue  # reused: the branch points at the recorded child
        if child not in ids:
            ids[child] = renamed(child, ids)
        out.append((child, ref.remote, forced.get(child)))
    return out


def top_of(created: SessionCreated, known: Mapping[str, list[Event]]) -> list[str]:
    """The path from the highest ancestor whose log is ``known`` down to the session, root first."""
    path = [created.session_id]
    for ancestor in reversed(created.ancestors):
        if ancestor not in known:
            break
        path.insert(0, ancestor)
    return path
