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
"""

from __future__ import annotations

import base64
import binascii
import logging
from typing import get_args

import msgspec

from helix_agents.errors import DamagedLogError, LogError, UsageError
from helix_agents.log.projections import project_state
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

    def __repr__(self) -> str:
        return f"<SessionCatalog of {self.store!r}: {len(self._known)} summaries held>"

    async def _summary(self, session_id: str, head: int) -> SessionListEntry | None:
        known = self._known.get(session_id)
        if known is not None and known.latest_sequence == head:
            return known
        try:
            log_ = await self.store.read(session_id)
            if not log_:
                return None
            state = project_state(log_)
        except (LogError, DamagedLogError) as exc:
            log.warning("session list: %s left out: %s", session_id, exc)
            self._known.pop(session_id, None)
            return None
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
    ) -> SessionListPage:
        """The sessions after ``cursor`` (newest first) that pass the filters, at most ``limit``.

        Args:
            status: only sessions with this status (``running``, ``completed``,
                ``failed``, ``interrupted``, ``paused``).
            agent_type: only sessions of this agent type.
            top_level: only sessions without a parent (no sub-agents).
            limit: 1 to ``MAX_PAGE_SIZE`` (500) sessions per page.
            cursor: a page's ``next_cursor``, to continue after it.

        Raises:
            UsageError: an unknown status, a limit out of range, a malformed cursor.
        """
        if status is not None and status not in _STATUSES:
            raise UsageError(f"unknown status {status!r}: use one of {', '.join(_STATUSES)}")
        if isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE_SIZE:
            raise UsageError(f"limit must be 1 to {MAX_PAGE_SIZE}, not {limit}")
        after = None if cursor is None else _decode_cursor(cursor)
        heads = await self.store.session_heads()
        for gone in set(self._known) - set(heads):
            del self._known[gone]
        chosen: list[SessionListEntry] = []
        for session_id, head in heads.items():
            summary = await self._summary(session_id, head)
            if summary is None:
                continue
            if status is not None and summary.status != status:
                continue
            if agent_type is not None and summary.agent_type != agent_type:
                continue
            if top_level and summary.parent_session_id is not None:
                continue
            if after is not None and _key(summary) >= after:
                continue
            chosen.append(summary)
        chosen.sort(key=_key, reverse=True)
        page = chosen[:limit]
        more = len(chosen) > limit
        return SessionListPage(
            sessions=page, next_cursor=_encode_cursor(page[-1]) if more else None
        )
