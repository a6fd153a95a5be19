"""Forking a session (and its tree) at a sequence: ``AgentExecutor.fork``.

The branch is a new session (a new tree) whose logs begin with the origin's
events copied up to the fork point, ids mapped, edits applied, then a
``session_forked`` marker; the origin's logs are only read. What runs after
the marker is live: the branch's root is resumed (a ``running`` prefix) the
way a session a crashed process left behind is, so nothing recorded before
the point is called again (specs/branches.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import msgspec

from helix_agents.agents.define import AgentRegistry
from helix_agents.branches.copy import FORKED_FROM_KEY, branch_log
from helix_agents.branches.tree import (
    ForkPlan,
    child_point,
    parent_point,
    plan_children,
    renamed,
    top_of,
)
from helix_agents.errors import AgentServerError, ConcurrencyConflict, InvalidSessionIdError
from helix_agents.events import (
    DecideApproval,
    Event,
    ForkEdit,
    RemoteRef,
    SessionCreated,
    SessionForked,
    UseAgent,
)
from helix_agents.ids import validate_session_id
from helix_agents.log.projections import project_state
from helix_agents.log.search import SessionQuery
from helix_agents.log.session_list import MAX_PAGE_SIZE, SessionCatalog
from helix_agents.log.store import EventStore
from helix_agents.models.names import check_model, session_model
from helix_agents.protocol import RemoteResumeRequest, RemoteStartResponse, SubmitResponse

__all__ = [
    "APPEND_BATCH",
    "ForkRequest",
    "ForkResult",
    "ForksSessions",
    "ForkService",
    "Forks",
    "RemoteFork",
    "fork_executor_session",
    "fork_session",
    "forks_of",
    "remote_forker",
]

APPEND_BATCH = 1000
"""Events per append when a branch's log is written (a long prefix is several appends)."""


class ForkResult(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """What a fork made: the branch of the session asked for, its tree, and what runs now."""

    session_id: str
    """The branch of the session forked (its log: the prefix, then ``session_forked``)."""
    root_session_id: str
    """The branch tree's root (a client reads the branch from it, as any tree)."""
    origin_session_id: str
    origin_seq: int
    sessions: dict[str, str] = {}
    """Every session forked: origin id -> branch id (children reused as recorded are not here)."""
    status: str = "running"
    """The branch's status once written, before any live run (``running``, ``paused``...)."""
    run_id: str | None = None
    """The live run the fork started at the branch's root (None: nothing was left to run)."""
    copied_events: int = 0
    """How many recorded events the fork copied, over the whole tree."""


class ForkRequest(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``POST /fork``'s body (and ``helix-agents fork``'s): the arguments of ``AgentExecutor.fork``.

    ``id_map``: set by a server forking its remote child: the ids of the
    caller's tree already forked (origin -> branch); the child is forked
    alone, its parent's ids mapped (no climb to a root this server lacks).
    """

    session_id: str
    at_seq: int | None = None
    edits: list[ForkEdit] = []
    new_session_id: str | None = None
    run: bool = True
    id_map: dict[str, str] | None = None


@runtime_checkable
class ForksSessions(Protocol):
    """A transport that can fork a session on its server (``HttpTransport``: ``POST /fork``)."""

    async def fork(self, request: ForkRequest) -> ForkResult:
        """Fork ``request.session_id`` on the server the transport reaches."""
        ...


class ForkService(Protocol):
    """What a fork needs of the executor's service: resume the branch, decide approvals."""

    async def resume(self, request: RemoteResumeRequest) -> RemoteStartResponse:
        """Resume the branch's root (``ExecutorService.resume``)."""
        ...

    async def submit_approval(
        self, session_id: str, tool_call_id: str, approved: bool, reason: str | None = None
    ) -> SubmitResponse:
        """Decide an approval the branch holds open (``ExecutorService.submit_approval``)."""
        ...


class Forks(Protocol):
    """What ``AgentExecutor.fork`` uses of its executor: the store and the service."""

    @property
    def store(self) -> EventStore:
        """Where the origin's logs are, and the branch's go."""
        ...

    @property
    def service(self) -> ForkService:
        """The executor's service (resumes the branch)."""
        ...

    @property
    def registry(self) -> AgentRegistry:
        """The agents, whose remote sub-agent tools' transports fork remote children."""
        ...


async def fork_executor_session(
    self: Forks,
    session_id: str,
    at_seq: int | None = None,
    *,
    edits: Sequence[ForkEdit] = (),
    new_session_id: str | None = None,
    run: bool = True,
) -> ForkResult:
    """Fork ``session_id`` (and its tree) at ``at_seq``: a new session, live after the point.

    ``AgentExecutor.fork`` (specs/branches.md). The branch's logs hold the
    origin's events 1..``at_seq`` (default: all of them) copied, its ids
    mapped, ``edits`` applied, then ``session_forked``; the origin is only
    read. Nothing recorded is called again: the branch is resumed (``run``)
    as a session a crashed process left behind, so only what comes after the
    point runs live. A paused prefix stays paused with its open entries (a
    ``DecideApproval`` edit answers one); a completed one takes a follow-up.

    Raises:
        AgentServerError: ``NOT_FOUND`` (no such session), ``INVALID_REQUEST``
            (a point outside the log, a bad or taken new id, an edit that
            names nothing in the prefix); nothing is written then.
    """
    return await fork_session(
        self.store,
        self.service,
        session_id,
        at_seq,
        edits=edits,
        new_session_id=new_session_id,
        run=run,
        remote_fork=remote_forker(self.registry),
    )


def remote_forker(registry: AgentRegistry) -> RemoteFork:
    """Forks a remote child through the transport of the sub-agent tool that reaches it.

    The transport is the one whose kind and url the child's ``RemoteRef``
    names; it must fork (``ForksSessions``: the HTTP transport's ``POST /fork``).
    The child's branch is written, not run: the branch parent's resume
    re-opens the call and resumes it there.
    """

    async def fork_remote(
        ref: RemoteRef, origin: str, at_seq: int, wanted: str, ids: Mapping[str, str]
    ) -> str:
        for name in registry.names():
            agent = registry.get(name)
            for tool in agent.tools if agent is not None else ():
                transport = getattr(tool, "transport", None)
                if (
                    isinstance(transport, ForksSessions)
                    and type(transport).__name__ == ref.transport
                    and getattr(transport, "url", None) == ref.url
                ):
                    request = ForkRequest(
                        session_id=origin,
                        at_seq=at_seq,
                        new_session_id=wanted,
                        run=False,
                        id_map=dict(ids),
                    )
                    return (await transport.fork(request)).session_id
        raise AgentServerError(
            "INVALID_REQUEST",
            f"remote child {origin!r} ({ref.transport} {ref.url}) is open at the fork point "
            "and no transport here can fork it (the HTTP transport can)",
        )

    return fork_remote


RemoteFork = Callable[[RemoteRef, str, int, str, Mapping[str, str]], Awaitable[str]]
"""Forks a remote child: (its ref, origin id, point, wanted branch id, ids so far) -> branch id."""


async def _log(store: EventStore, session_id: str) -> list[Event]:
    try:
        validate_session_id(session_id)
    except InvalidSessionIdError as exc:
        raise AgentServerError("INVALID_REQUEST", str(exc)) from None
    events = await store.read(session_id)
    if not events:
        raise AgentServerError("NOT_FOUND", f"session {session_id!r} not found")
    return events


async def fork_session(
    store: EventStore,
    service: ForkService | None,
    session_id: str,
    at_seq: int | None = None,
    *,
    edits: Sequence[ForkEdit] = (),
    new_session_id: str | None = None,
    run: bool = True,
    id_map: Mapping[str, str] | None = None,
    remote_fork: RemoteFork | None = None,
) -> ForkResult:
    """Fork ``session_id`` at ``at_seq`` (default: its last event): as ``AgentExecutor.fork``.

    ``service`` None (a store alone, ``helix-agents fork --store``): the branch
    is written, not run, and an approval edit is refused (it is submitted live).
    """
    if service is None and any(isinstance(e, DecideApproval) for e in edits):
        raise AgentServerError(
            "INVALID_REQUEST", "an approval edit is decided live: fork through a server"
        )
    origin_log = await _log(store, session_id)
    point = len(origin_log) if at_seq is None else at_seq
    if not isinstance(point, int) or not 1 <= point <= len(origin_log):
        raise AgentServerError(
            "INVALID_REQUEST",
            f"at_seq {at_seq!r}: session {session_id!r} has events 1..{len(origin_log)}",
        )
    created = origin_log[0]
    assert isinstance(created, SessionCreated)
    # --- the path from the top of the tree (its root, when its log is here) down
    ids: dict[str, str] = dict(id_map or {})
    logs: dict[str, list[Event]] = {session_id: origin_log}
    if id_map is None:
        for ancestor in created.ancestors:
            found = await store.read(ancestor)
            if found:
                logs[ancestor] = found
    path = top_of(created, logs)
    points = {session_id: point}
    for parent, child in reversed(list(itertools.pairwise(path))):
        child_log = logs[child]
        points[parent] = parent_point(
            logs[parent], child, points[child], child_log[points[child] - 1].ts
        )
    top = path[0]
    # a remote child forked for its parent's server: its tree's root lives there
    origin_root = (created.root_session_id or top) if id_map is not None else top
    root_seq = points[top] if origin_root == top else None
    wanted = new_session_id if top == session_id else None
    if new_session_id is not None and top != session_id:
        ids[session_id] = _checked_new(new_session_id)
    ids[top] = _checked_new(wanted) if wanted else ids.get(top) or renamed(top, ids)
    for child in path[1:]:
        ids.setdefault(child, renamed(child, ids))
    # --- the edits, by the session they apply to
    by_session: dict[str, list[ForkEdit]] = {}
    for edit in edits:
        target = edit.session_id or session_id
        by_session.setdefault(target, []).append(msgspec.structs.replace(edit, session_id=None))
        if isinstance(edit, UseAgent) and edit.model is not None:
            try:
                check_model(session_model(edit.model))
            except Exception as exc:  # a malformed name, an unknown provider, a missing key
                raise AgentServerError("INVALID_REQUEST", f"agent edit: {exc}") from None
    # --- plan the tree top-down, assigning every forked id before any copy
    plans: list[ForkPlan] = []
    queue = [ForkPlan(origin=top, at_seq=points[top], branch=ids[top])]
    while queue:
        plan = queue.pop(0)
        if plan.remote is None:
            plan.log = (logs.get(plan.origin) or await _log(store, plan.origin))[: plan.at_seq]
            plan.edits = by_session.pop(plan.origin, [])
            for child, remote, forced in plan_children(plan, ids, points):
                if remote is not None:
                    state = project_state(plan.log)
                    held = state.sub_sessions[child].last_child_seq
                    queue.append(
                        ForkPlan(
                            origin=child,
                            at_seq=forced or max(held, 1),
                            branch=ids[child],
                            remote=remote,
                            parent=plan.origin,
                        )
                    )
                    continue
                child_log = logs.get(child) or await _log(store, child)
                logs[child] = child_log
                at = forced or child_point(plan.log, child, child_log)
                queue.append(ForkPlan(origin=child, at_seq=at, branch=ids[child]))
        plans.append(plan)
    if by_session:
        raise AgentServerError(
            "INVALID_REQUEST",
            f"edits name sessions this fork does not copy: {sorted(by_session)}",
        )
    # --- write: deepest first, the root last (the tree exists once its root does)
    copied = 0
    for plan in reversed(plans):
        if plan.remote is not None:
            if remote_fork is None:
                raise AgentServerError(
                    "INVALID_REQUEST",
                    f"remote child {plan.origin!r} is open at the fork point and this "
                    "executor cannot fork it on its server",
                )
            ids[plan.origin] = await remote_fork(
                plan.remote, plan.origin, plan.at_seq, plan.branch, dict(ids)
            )
            continue
        marker = SessionForked(
            origin_session_id=plan.origin,
            origin_seq=plan.at_seq,
            edits=plan.edits,
            origin_root_session_id=origin_root,
            root_origin_seq=root_seq,
            session_map=dict(ids),
        )
        await _write(store, plan.branch, branch_log(plan.log, ids, plan.edits, marker))
        copied += plan.at_seq
    root = ids[top]
    state = project_state(await store.read(root))
    result = ForkResult(
        session_id=ids[session_id],
        root_session_id=root,
        origin_session_id=session_id,
        origin_seq=point,
        sessions={p.origin: ids[p.origin] for p in plans},
        status=state.status,
        copied_events=copied,
    )
    return await _go_live(service, result, edits, run)


def _checked_new(session_id: str) -> str:
    try:
        return validate_session_id(session_id)
    except InvalidSessionIdError as exc:
        raise AgentServerError("INVALID_REQUEST", str(exc)) from None


async def _write(store: EventStore, session_id: str, events: list[Event]) -> None:
    try:
        done = 0
        for start in range(0, len(events), APPEND_BATCH):
            batch = events[start : start + APPEND_BATCH]
            done = await store.append(session_id, batch, done)
    except ConcurrencyConflict:
        # The same fork again (a retried request): the branch it wrote is the answer.
        marker = next(e for e in events if isinstance(e, SessionForked))
        there = await store.read(session_id, marker.seq - 1)
        if not (there and _same_fork(there[0], marker)):
            raise AgentServerError(
                "INVALID_REQUEST", f"session {session_id!r} already exists: give another new id"
            ) from None


def _same_fork(event: Event, marker: SessionForked) -> bool:
    return (
        isinstance(event, SessionForked)
        and event.seq == marker.seq
        and (event.origin_session_id, event.origin_seq, event.edits)
        == (marker.origin_session_id, marker.origin_seq, marker.edits)
    )


async def _go_live(
    service: ForkService | None, result: ForkResult, edits: Sequence[ForkEdit], run: bool
) -> ForkResult:
    if not run or service is None:
        return result
    run_id: str | None = None
    decisions = [e for e in edits if isinstance(e, DecideApproval)]
    if result.status == "running":
        try:
            started = await service.resume(RemoteResumeRequest(session_id=result.root_session_id))
            run_id = started.run_id
        except AgentServerError as exc:  # a repeated fork: its branch already runs, or ran
            if exc.code not in ("ALREADY_RUNNING", "ALREADY_COMPLETED"):
                raise
    for edit in decisions:
        await service.submit_approval(
            result.root_session_id, edit.tool_call_id, edit.approved, edit.reason
        )
    return msgspec.structs.replace(result, run_id=run_id)


async def forks_of(store: EventStore, session_id: str) -> list[str]:
    """The ids of the branches forked from ``session_id`` (its ``metadata.forked_from``), sorted.

    The origin's log is never written: its forks are found by the metadata
    each branch's ``session_created`` carries (an indexed search on a store
    with a session index; the same query as ``GET /sessions?metadata.forked_from=S``).
    """
    catalog = SessionCatalog(store)
    query = SessionQuery.build(metadata=[(FORKED_FROM_KEY, session_id)])
    found: list[str] = []
    cursor: str | None = None
    while True:
        page = await catalog.page(query=query, cursor=cursor, limit=MAX_PAGE_SIZE)
        found.extend(entry.session_id for entry in page.sessions)
        if page.next_cursor is None:
            return sorted(found)
        cursor = page.next_cursor
