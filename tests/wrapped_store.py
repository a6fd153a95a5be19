"""``WrappedStore``: an ``EventStore`` that hands every call to another, for tests to watch.

A test subclasses it and overrides the calls it counts or holds up; the rest
go to ``inner`` unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from helix_agents import EventStore
from helix_agents.events import Event

__all__ = ["WrappedStore"]


class WrappedStore:
    """Delegates every ``EventStore`` call to ``inner``."""

    def __init__(self, inner: EventStore) -> None:
        self.inner = inner

    @property
    def shares_start_commit(self) -> bool:
        """``inner.shares_start_commit`` (False when it does not say)."""
        return bool(getattr(self.inner, "shares_start_commit", False))

    async def append(self, session_id: str, events: Sequence[Event], expected_seq: int) -> int:
        """``inner.append``."""
        return await self.inner.append(session_id, events, expected_seq)

    async def read(self, session_id: str, from_seq: int = 0) -> list[Event]:
        """``inner.read``."""
        return await self.inner.read(session_id, from_seq)

    def tail(
        self,
        session_id: str,
        from_seq: int = 0,
        *,
        kinds: tuple[type[Event], ...] | None = None,
    ) -> AsyncIterator[Event]:
        """``inner.tail``."""
        return self.inner.tail(session_id, from_seq, kinds=kinds)

    async def list_sessions(self) -> list[str]:
        """``inner.list_sessions``."""
        return await self.inner.list_sessions()

    async def session_heads(self) -> dict[str, int]:
        """``inner.session_heads``."""
        return await self.inner.session_heads()

    async def delete(self, session_id: str) -> bool:
        """``inner.delete``."""
        return await self.inner.delete(session_id)

    async def close(self) -> None:
        """``inner.close``."""
        await self.inner.close()
