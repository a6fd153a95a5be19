"""``GET /snapshot``: a session tree as it was at a sequence of the root's log.

Everything comes from the store: the root's log cut at ``at`` gives the view
(:func:`~.view.fold_view` of its stream) and the root's status; each node's
own usage comes from its own log, cut where the root's log stood at ``at``,
and its cost from that usage at the server's prices (``specs/ui.md``, "The
snapshot", "Cost").
"""

from __future__ import annotations

import msgspec

from helix_agents import EventStore
from helix_agents.errors import AgentServerError
from helix_agents.events import (
    ApprovalGiven,
    ChildChunkForwarded,
    Event,
    InputRequired,
    PendingInput,
    RequestMade,
    SubSessionFinished,
    SubSessionStarted,
)
from helix_agents.log.pricing import Prices
from helix_agents.log.projections import project_state, project_stream, status_of
from helix_agents.log.state import StatusSnapshot, UsageTotals

from .view import Decision, TreeView, fold_view, user_turns

__all__ = ["Snapshot", "decisions_of", "take_snapshot"]


class Snapshot(msgspec.Struct, kw_only=True, rename="camel"):
    """The answer of ``GET /snapshot``: the view at ``view.at``, and where the log is now."""

    session_id: str
    at: int
    latest_sequence: int
    status: StatusSnapshot
    view: TreeView


async def _own_usage(
    store: EventStore, session_id: str, cut: int | None, found: dict[str, UsageTotals | None]
) -> None:
    """Fill ``found`` with the usage of ``session_id`` (its log up to ``cut``) and its children."""
    if session_id in found:
        return
    log = await store.read(session_id)
    if not log:
        found[session_id] = None  # a remote child: its log is in another store
        return
    prefix = log if cut is None else log[:cut]
    found[session_id] = project_state(prefix).usage if prefix else UsageTotals()
    children: list[str] = []
    finished: set[str] = set()
    last_seq: dict[str, int] = {}
    for event in prefix:
        match event:
            case SubSessionStarted():
                children.append(event.sub_session_id)
            case SubSessionFinished():
                finished.add(event.sub_session_id)
            case ChildChunkForwarded():
                last_seq[event.child_session_id] = event.child_seq
    for child in children:
        # A child this log saw finish counts whole; a running one up to the last
        # of its events this log had forwarded: where the parent stood at the cut.
        child_cut = None if child in finished else last_seq.get(child, 0)
        await _own_usage(store, child, child_cut, found)


async def take_snapshot(
    store: EventStore, session_id: str, at: int | None, prices: Prices | None = None
) -> Snapshot:
    """The tree of ``session_id`` as of seq ``at`` (``None``: the latest; past the end: the end).

    Each node's cost is its usage at ``prices`` (``None``: the built-in defaults only).

    Raises:
        AgentServerError: ``NOT_FOUND`` when the session has no log here.
    """
    log = await store.read(session_id)
    if not log:
        raise AgentServerError("NOT_FOUND", f"session {session_id!r} not found")
    latest = log[-1].seq
    cut = latest if at is None else min(at, latest)
    prefix = log[:cut]
    state = project_state(prefix)
    status = status_of(state)
    view = fold_view(session_id, state.agent_type, project_stream(prefix), user_turns(prefix))
    view.at = cut
    view.agents[session_id].status = status.status  # the root's own, from its log
    usages: dict[str, UsageTotals | None] = {}
    await _own_usage(store, session_id, cut, usages)
    prices = Prices() if prices is None else prices
    for agent_id, node in view.agents.items():
        node.usage = usages.get(agent_id)
        if node.usage is not None:
            node.cost = prices.cost(node.usage, node.agent_type)
    view.decisions = decisions_of(prefix)
    view.owner = state.owner
    view.requests = [event for event in prefix if isinstance(event, RequestMade)]
    return Snapshot(session_id=session_id, at=cut, latest_sequence=latest, status=status, view=view)


def decisions_of(log: list[Event]) -> list[Decision]:
    """The approvals decided in a root's log, each with what was asked (when it was listed)."""
    asked: dict[str, PendingInput] = {}
    decided: list[Decision] = []
    for event in log:
        if isinstance(event, InputRequired):
            asked.update((entry.tool_call_id, entry) for entry in event.pending)
        elif isinstance(event, ApprovalGiven):
            request = asked.get(event.tool_call_id)
            decided.append(
                Decision(
                    tool_call_id=event.tool_call_id,
                    tool_name=request.tool_name if request is not None else None,
                    arguments=request.arguments if request is not None else None,
                    owner_session_id=request.owner_session_id if request is not None else None,
                    approved=event.approved,
                    expired=event.expired,
                    reason=event.reason,
                    decided_by=event.decided_by,
                    ts=event.ts,
                    seq=event.seq,
                )
            )
    return decided
