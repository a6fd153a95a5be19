"""A tail followed into a list, for tests that wait until a tail has yielded N events."""

from __future__ import annotations

import anyio

from helix_agents import EventStore
from helix_agents.events import Event


class Followed(list[Event]):
    """The events a tail yielded so far; :meth:`reach` waits for more."""

    def __init__(self) -> None:
        super().__init__()
        self.grew = anyio.Event()

    def add(self, event: Event) -> None:
        self.append(event)
        self.grew.set()
        self.grew = anyio.Event()

    async def reach(self, count: int) -> None:
        while len(self) < count:
            await self.grew.wait()


async def follow(store: EventStore, session_id: str, into: Followed) -> None:
    """Tail the session into ``into``."""
    tail = store.tail(session_id)
    try:
        async for event in tail:
            into.add(event)
    finally:
        await tail.aclose()  # type: ignore[attr-defined]
