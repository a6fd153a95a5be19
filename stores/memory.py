"""``MemoryEventStore``: session logs in a dict, for tests, demos and ephemeral runs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from helix_agents.errors import ConcurrencyConflict, StoreClosedError
from helix_agents.events import Event
from helix_agents.ids import validate_session_id
from helix_agents.log.search import IndexedSession, MemorySessionIndex, SessionQuery

from .common import AppendNotifier, check_batch, page_of, tail_events
from .memory_items import InMemoryMemoryStore

__all__ = ["MemoryEventStore"]


class MemoryEventStore:
    """An in-process :class:`~helix_agents.EventStore`; nothing survives the process.

    Appends are atomic because they never await between check and write.
    It is a :class:`~helix_agents.log.search.SessionIndex` too: each append
    updates a :class:`~helix_agents.log.search.MemorySessionIndex` (words,
    metadata, times) in the same step.
    """

    def __init__(self) -> None:
        self._logs: dict[str, list[Event]] = {}
        self._index = MemorySessionIndex()
        self._notifier = AppendNotifier()
        self._closed = False
        self._memory: InMemoryMemoryStore | None = None

    def memory_store(self) -> InMemoryMemoryStore:
        """Its memory store (``helix_agents.memory``): in this process too, closed with it."""
        if self._memory is None:
            self._memory = InMemoryMemoryStore()
        return self._memory

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._logs)} sessions"
        return f"<MemoryEventStore {state}>"

    def _ensure_open(self) -> None:
        if self._closed:
            raise StoreClosedError()

    async def append(self, session_id: str, events: Sequence[Event], expected_seq: int) -> int:
        """Append ``events`` if the log ends at ``expected_seq`` (see ``EventStore.append``)."""
        self._ensure_open()
        _, decoded = check_batch(session_id, events, expected_seq)
        log = self._logs.get(session_id)
        actual = len(log) if log is not None else 0
        if actual != expected_seq:
            raise ConcurrencyConflict(session_id, expected_seq, actual)
        if log is None:
            log = self._logs[session_id] = []
        # Keep the decoded copies: what a reader gets is what the wire carries,
        # as with every other store.
        log.extend(decoded)
        self._index.add(decoded)
        self._notifier.publish(session_id, decoded)
        return len(log)

    async def read(self, session_id: str, from_seq: int = 0) -> list[Event]:
        """Return the events with seq > ``from_seq``."""
        self._ensure_open()
        validate_session_id(session_id)
        log = self._logs.get(session_id)
        if not log:
            return []
        # seq n sits at index n - 1, so the events after from_seq start at index from_seq.
        return log[max(from_seq, 0) :]

    async def read_page(
        self, session_id: str, from_seq: int, max_bytes: int
    ) -> tuple[list[Event], bool]:
        """The events after ``from_seq``, about ``max_bytes`` of them, and whether more follow."""
        self._ensure_open()
        validate_session_id(session_id)
        return page_of(self._logs.get(session_id) or [], max(from_seq, 0), max_bytes)

    def tail(
        self,
        session_id: str,
        from_seq: int = 0,
        *,
        kinds: tuple[type[Event], ...] | None = None,
    ) -> AsyncIterator[Event]:
        """Yield the events after ``from_seq`` (of ``kinds``, if given), then new ones."""
        return tail_events(
            self.read_page,
            self._notifier,
            session_id,
            from_seq,
            is_closed=lambda: self._closed,
            closed_error=StoreClosedError,
            kinds=kinds,
        )

    async def list_sessions(self) -> list[str]:
        """Return every session id, sorted."""
        self._ensure_open()
        return sorted(self._logs)

    async def session_heads(self) -> dict[str, int]:
        """Return every session's last seq, by id."""
        self._ensure_open()
        return {session_id: log[-1].seq for session_id, log in self._logs.items() if log}

    async def search_sessions(
        self, query: SessionQuery, *, before: tuple[float, str] | None, limit: int
    ) -> list[IndexedSession]:
        """The sessions matching ``query``, newest first (see ``SessionIndex``)."""
        self._ensure_open()
        return self._index.search(query, before=before, limit=limit)

    async def delete(self, session_id: str) -> bool:
        """Delete a session's log; return whether it existed."""
        self._ensure_open()
        validate_session_id(session_id)
        existed = self._logs.pop(session_id, None) is not None
        self._index.drop(session_id)
        if existed:
            self._notifier.publish(session_id, [])
        return existed

    async def close(self) -> None:
        """Mark the store closed and wake every tail (which then raises StoreClosedError)."""
        self._closed = True
        self._notifier.close()
        if self._memory is not None:
            await self._memory.close()

    async def __aenter__(self) -> MemoryEventStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
