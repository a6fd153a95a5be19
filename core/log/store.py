"""The ``EventStore`` seam: where session logs live.

Implementations (``helix_agents.stores``): memory, SQLite, NATS JetStream.
They do not inherit from this Protocol; they match it structurally.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol, runtime_checkable

from helix_agents.events import Event

__all__ = ["EventStore", "ReadsPages", "WaitsOutOutages"]


class EventStore(Protocol):
    """An append-only store of session logs with compare-and-append.

    Every method validates the session id and raises
    :class:`~helix_agents.errors.InvalidSessionIdError` for a bad one, and
    :class:`~helix_agents.errors.StoreClosedError` after :meth:`close`.
    """

    async def append(self, session_id: str, events: Sequence[Event], expected_seq: int) -> int:
        """Append ``events`` atomically if the log ends at ``expected_seq``; return the last seq.

        The events must belong to ``session_id`` and carry the seqs
        ``expected_seq + 1, expected_seq + 2, ...``; anything else is a
        :class:`~helix_agents.errors.UsageError` and writes nothing. Raises
        :class:`~helix_agents.errors.ConcurrencyConflict` (writing nothing)
        when the log does not end at ``expected_seq``. On return the events
        are durable. Appending ``SessionCreated`` at ``expected_seq=0`` is how
        a session is created exactly once. If the call is cancelled, the
        batch may or may not have been written: read the log to find out.
        """
        ...

    async def read(self, session_id: str, from_seq: int = 0) -> list[Event]:
        """Return the events with seq > ``from_seq``, in order (empty for an unknown session)."""
        ...

    def tail(
        self,
        session_id: str,
        from_seq: int = 0,
        *,
        kinds: tuple[type[Event], ...] | None = None,
    ) -> AsyncIterator[Event]:
        """Yield the events with seq > ``from_seq``, then each new one as it is appended.

        Never ends by itself; the caller stops it by leaving the loop (or
        cancelling). Each event is yielded exactly once, in order. With
        ``kinds``, only events of those types are yielded (a run's watcher
        wants only stop requests), and a store may then spare the tail the
        wake-ups of everything else.
        """
        ...

    async def list_sessions(self) -> list[str]:
        """Return the ids of every session with at least one event, sorted."""
        ...

    async def session_heads(self) -> dict[str, int]:
        """Return every session's last seq, by id: one call, however many sessions there are.

        What a session list needs to see which logs moved without reading each one.
        """
        ...

    async def delete(self, session_id: str) -> bool:
        """Delete a session's whole log; return whether it existed."""
        ...

    async def close(self) -> None:
        """Release the store's resources; waits for appends already under way."""
        ...


@runtime_checkable
class ReadsPages(Protocol):
    """A store that reads a log a page at a time (every store of ``helix_agents.stores``).

    A stream reads the log this way, each page once its reader has taken the
    one before (:func:`~helix_agents.log.streaming.read_page`): a reader that
    stops reading holds a page, not the log. A store without it is read whole.
    """

    async def read_page(
        self, session_id: str, from_seq: int, max_bytes: int
    ) -> tuple[list[Event], bool]:
        """The events with seq > ``from_seq``, in order, about ``max_bytes`` of them; more?

        At least one event when any follows, however large; the page ends
        with the event (SQLite, memory) or the batch (JetStream) that brings
        the bytes stored to ``max_bytes``. The flag is False when the page
        reaches the log's end as the read found it, True when more may
        follow (read on from the page's last seq). A ``max_bytes`` that is not
        an int >= 1 is a ``UsageError``.
        """
        ...


@runtime_checkable
class WaitsOutOutages(Protocol):
    """A store whose appends wait out a lost connection (JetStream), and say since when.

    A session's ``/status`` shows the wait while a run of it executes here
    (``RemoteStatusResponse.waiting``).
    """

    @property
    def outage_since(self) -> float | None:
        """When the store became unreachable (seconds since the epoch); None while it is not."""
        ...
