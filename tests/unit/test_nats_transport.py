"""``NatsRemoteAgentTransport.stream``: store failures (no server; streams come from the store)."""

from __future__ import annotations

from typing import Any

import pytest

from helix_agents.errors import StoreClosedError, StoreError, TransportError
from helix_agents.events import Event
from helix_agents.stores import MemoryEventStore
from helix_agents.transports.nats import NatsRemoteAgentTransport


class _FailingStore(MemoryEventStore):
    def __init__(self, error: StoreError) -> None:
        super().__init__()
        self.error = error

    async def read(self, session_id: str, from_seq: int = 0) -> list[Event]:
        raise self.error

    async def read_page(
        self, session_id: str, from_seq: int, max_bytes: int
    ) -> tuple[list[Event], bool]:
        raise self.error  # a stream reads the log a page at a time


def _transport(store: MemoryEventStore) -> NatsRemoteAgentTransport:
    nc: Any = None  # control calls are not made here
    return NatsRemoteAgentTransport(nc, store)


async def test_a_store_failure_while_streaming_is_a_dropped_stream() -> None:
    # E.g. the store's NATS node died or the stream is electing a leader: the
    # caller re-opens the stream from its last sequence, as after a dropped connection.
    transport = _transport(_FailingStore(StoreError("no response from stream")))
    with pytest.raises(TransportError, match="no response from stream"):
        async for _ in transport.stream("s-1"):
            pass


async def test_a_closed_store_is_not_taken_for_a_dropped_stream() -> None:
    transport = _transport(_FailingStore(StoreClosedError()))
    with pytest.raises(StoreClosedError):
        async for _ in transport.stream("s-1"):
            pass
