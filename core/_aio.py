"""Small async helpers shared inside core."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Generic, TypeVar

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

T = TypeVar("T")

__all__ = ["Prefetched", "closing_iter", "prefetch"]


@asynccontextmanager
async def closing_iter(iterator: AsyncIterator[T]) -> AsyncIterator[AsyncIterator[T]]:
    """Use an async iterator and close it on exit, if it can be closed (generators can).

    Protocols return plain ``AsyncIterator``; their implementations are async
    generators, whose cleanup (closing a tail, a connection) must run promptly.
    """
    try:
        yield iterator
    finally:
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()


class Prefetched(Generic[T]):
    """The consuming side of :func:`prefetch`."""

    def __init__(self, receive: MemoryObjectReceiveStream[T]) -> None:
        self._receive = receive
        self.error: Exception | None = None

    async def batches(self, max_batch: int = 512) -> AsyncIterator[list[T]]:
        """Yield lists of the items that have arrived: waits for one, takes what else is there.

        Raises the source's exception, unwrapped, after the items it produced.
        """
        async for first in self._receive:
            batch = [first]
            while len(batch) < max_batch:
                try:
                    batch.append(self._receive.receive_nowait())
                except (anyio.WouldBlock, anyio.EndOfStream):
                    break
            yield batch
        if self.error is not None:
            raise self.error


@asynccontextmanager
async def prefetch(
    iterator: AsyncIterator[T], *, buffer: int = 512
) -> AsyncIterator[Prefetched[T]]:
    """Read ``iterator`` in a task of its own into a bounded buffer.

    The consumer takes what has arrived as one batch (one append, one send)
    instead of paying per item, while a lone item still goes through at once.
    Leaving the block cancels the reader and closes the iterator.
    """
    send, receive = anyio.create_memory_object_stream[T](buffer)
    prefetched = Prefetched(receive)

    async def pump() -> None:
        try:
            async for item in iterator:
                await send.send(item)
        except Exception as exc:  # handed to the consumer, unwrapped, after the items
            prefetched.error = exc
        finally:
            send.close()
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    await aclose()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(pump)
            try:
                with receive:
                    yield prefetched
            finally:
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The caller's own exception (raised in the block) comes back wrapped
        # by the task group: hand it back as it was raised.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
