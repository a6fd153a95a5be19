"""The session list: every session of a store, newest first, filtered and paged.

``SessionCatalog(store).page(...)`` serves ``GET /sessions`` (``specs/http.md``)
and ``helix-agents sessions``. Order: newest first by the ``session_created``
timestamp, ties broken by session id (descending), so the order is total and
stable. The cursor is opaque: the (timestamp, id) of the last session of a
page; the next page holds the sessions after it in that order, so sessions
created between two requests never shift a page (keyset paging).

Each session's summary is folded from its log and kept with the log's last
seq. A page asks the store for every session's last seq in one call
(``session_heads``) and reads and folds again only the sessions that moved,
so a page of a store whose sessions are at rest reads no log. A log that does
not fold (damaged) is left out; ``helix-agents check`` names it.

Search (``query``, a :class:`~helix_agents.log.search.SessionQuery`): a store
that implements :class:`~helix_agents.log.search.SessionIndex` names the
matching sessions itself, a batch at a time in list order, and only those are
summarised (the status filter is checked on the summary). Any other store is
served by folding every log, as without a query, and matching each session's
:class:`~helix_agents.log.search.SessionDoc`.
"""

from __future__ import annotations

import base64
import binascii
import logging
from typing import get_args

import msgspec

from helix_agents.errors import DamagedLogError, LogError, UsageError
from helix_agents.events import Principal
from helix_agents.ids import is_schedule_log
from helix_agents.log.projections import project_state
from helix_agents.log.search import SessionDoc, SessionIndex, SessionQuery
from helix_agents.log.state import SessionStatus
from helix_agents.log.store import EventStore

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "SessionCatalog",
    "SessionListPage",
    "SessionListEntry",
]

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
_MAX_BATCH = 1000  # sessions asked of an index at once
_MAX_HELD = 100_000  # summaries held; beyond, the cache starts over

log = logging.getLogger("helix_agents.sessions")

_STATUSES: tuple[str, ...] = get_args(SessionStatus)
_cursor_type = tuple[float, str]


class SessionListEntry(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One session in the list: who, how it stands, when (seconds since the epoch)."""

    session_id: str
    agent_type: str
    status: SessionStatus
    parent_session_id: str | None = None
    root_session_id: str
    created_ts: float
    updated_ts: float
    latest_sequence: int
    step_count: int = 0
    error: str | None = None
    owner: Principal | msgspec.UnsetType = msgspec.UNSET
    """Who owns the session (specs/auth.md); absent when it has no owner."""


class SessionListPage(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A page of the list; ``next_cursor`` fetches the next one (None: this was the last)."""

    sessions: list[SessionListEntry]
    next_cursor: str | None = None


def _encode_cursor(summary: SessionListEntry) -> str:
    raw = msgspec.json.encode([summary.created_ts, summary.session_id])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        ts, session_id = msgspec.json.decode(raw, type=_cursor_type)
    except (binascii.Error, ValueError, msgspec.DecodeError) as exc:
        raise UsageError(f"invalid cursor {cursor[:40]!r}: pass a nextCursor as given") from exc
    return ts, session_id


def _key(summary: SessionListEntry) -> tuple[float, str]:
    return summary.created_ts, summary.session_id


class SessionCatalog:
    """Lists the sessions of ``store`` (see the module); keeps each summary until its log moves."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self._known: dict[str, SessionListEntry] = {}
        self._docs: dict[str, SessionDoc] = {}  # by a scan (a store without an index)

    def __repr__(self) -> str:
        return f"<SessionCatalog of {self.store!r}: {len(self._known)} summaries held>"

    async def _summary(
        self, session_id: str, head: int, *, with_doc: bool = False
    ) -> SessionListEntry | None:
        known = self._known.get(session_id)
        fresh = known is not None and known.latest_sequence == head
        if known is not None and fresh and (not with_doc or session_id in self._docs):
            return known
        try:
            log_ = await self.store.read(session_id)
            if not log_:
                return None
            state = project_state(log_)
        except (LogError, DamagedLogError) as exc:
            log.warning("session list: %s left out: %s", session_id, exc)
            self._known.pop(session_id, None)
            self._docs.pop(session_id, None)
            return None
        if with_doc:
            doc = SessionDoc.start(log_[0])
            doc.add(log_)
            self._docs[session_id] = doc
        else:
            self._docs.pop(session_id, None)
        summary = SessionListEntry(
            session_id=state.session_id,
            agent_type=state.agent_type,
            status=state.status,
            parent_session_id=state.parent_session_id,
            root_session_id=state.root_session_id,
            created_ts=state.created_ts,
            updated_ts=state.updated_ts,
            latest_sequence=state.last_seq,
            step_count=state.step_count,
            error=state.error,
            owner=msgspec.UNSET if state.owner is None else state.owner,
        )
        self._known[session_id] = summary
        return summary

    async def page(
        self,
        *,
        status: str | None = None,
        agent_type: str | None = None,
        top_level: bool = False,
        limit: int = DEFAULT_PAGE_SIZE,
        cursor: str | None = None,
        query: SessionQuery | None = None,
        tenant: str | msgspec.UnsetType | None = msgspec.UNSET,
    ) -> SessionListPage:
        """The sessions after ``cursor`` (newest first) that pass the filters, at most ``limit``.

        Args:
            status: only sessions with this status (``running``, ``completed``,
                ``failed``, ``interrupted``, ``paused``).
            agent_type: only sessions of this agent type.
            top_level: only sessions without a parent (no sub-agents).
            limit: 1 to ``MAX_PAGE_SIZE`` (500) sessions per page.
            cursor: a page's ``next_cursor``, to continue after it.
            query: text, metadata and time filters (with ``agent_type`` and
                ``top_level`` merged into it when given here too).
            tenant: only sessions that have an owner in this tenant (``None``: an
                owner without a tenant); unset, every session (specs/auth.md).

        Raises:
            UsageError: an unknown status, a limit out of range, a malformed cursor.
        """
        if status is not None and status not in _STATUSES:
            raise UsageError(f"unknown status {status!r}: use one of {', '.join(_STATUSES)}")
        if isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE_SIZE:
            raise UsageError(f"limit must be 1 to {MAX_PAGE_SIZE}, not {limit}")
        after = None if cursor is None else _decode_cursor(cursor)
        query = _merged(query, agent_type, top_level)
        if len(self._known) > _MAX_HELD:
            self._known.clear()
            self._docs.clear()
        chosen: list[SessionListEntry] | None = None
        if isinstance(self.store, SessionIndex):
            chosen = await self._indexed(self.store, query, status, after, limit, tenant)
        if chosen is None:
            chosen = await self._scanned(query, status, after, tenant)
        page = chosen[:limit]
        more = len(chosen) > limit
        return SessionListPage(
            sessions=page, next_cursor=_encode_cursor(page[-1]) if more else None
        )

    async def _indexed(
        self,
        index: SessionIndex,
        query: SessionQuery,
        status: str | None,
        after: tuple[float, str] | None,
        limit: int,
        tenant: str | msgspec.UnsetType | None,
    ) -> list[SessionListEntry] | None:
        """Up to ``limit + 1`` sessions, from the store's index a batch at a time.

        None when the store says it has no index to answer from.
        """
        chosen: list[SessionListEntry] = []
        batch = limit + 1
        while True:
            found = await index.search_sessions(query, before=after, limit=batch)
            if found is None:
                return None
            for hit in found:
                if is_schedule_log(hit.session_id):
                    continue  # the schedules' log is no session
                summary = await self._summary(hit.session_id, hit.last_seq)
                if summary is not None and _passes(summary, query, status, tenant):
                    chosen.append(summary)
                    if len(chosen) > limit:
                        return chosen
            if len(found) < batch:
                return chosen
            after = (found[-1].created_ts, found[-1].session_id)
            batch = min(batch * 2, _MAX_BATCH)

    async def _scanned(
        self,
        query: SessionQuery,
        status: str | None,
        after: tuple[float, str] | None,
        tenant: str | msgspec.UnsetType | None,
    ) -> list[SessionListEntry]:
        """Every session that passes, newest first: each log folded (once per move)."""
        with_doc = bool(query.terms or query.metadata)
        heads = await self.store.session_heads()
        for gone in set(self._known) - set(heads):
            del self._known[gone]
            self._docs.pop(gone, None)
        chosen: list[SessionListEntry] = []
        for session_id, head in heads.items():
            if is_schedule_log(session_id):
                continue  # the schedules' log is no session
            summary = await self._summary(session_id, head, with_doc=with_doc)
            if summary is None or not _passes(summary, query, status, tenant):
                continue
            if after is not None and _key(summary) >= after:
                continue
            if with_doc and not self._docs[session_id].matches(query):
                continue
            chosen.append(summary)
        chosen.sort(key=_key, reverse=True)
        return chosen


def _merged(query: SessionQuery | None, agent_type: str | None, top_level: bool) -> SessionQuery:
    query = query or SessionQuery()
    if agent_type is not None and query.agent_type not in (None, agent_type):
        raise UsageError("two different agent types asked for")
    return msgspec.structs.replace(
        query,
        agent_type=agent_type or query.agent_type,
        top_level=top_level or query.top_level,
    )


def _passes(
    summary: SessionListEntry,
    query: SessionQuery,
    status: str | None,
    tenant: str | msgspec.UnsetType | None = msgspec.UNSET,
) -> bool:
    """The filters a summary itself answers (an index checked them too, maybe a moment ago)."""
    owner = summary.owner
    if tenant is not msgspec.UNSET and (owner is msgspec.UNSET or owner.tenant != tenant):
        return False
    return (
        (status is None or summary.status == status)
        and (query.agent_type is None or summary.agent_type == query.agent_type)
        and not (query.top_level and summary.parent_session_id is not None)
        and query.matches_times(summary.created_ts, summary.updated_ts)
    )
