"""Small async helpers shared inside core."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Generic, Protocol, TypeVar

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from helix_agents.errors import HelixError

T = TypeVar("T")

__all__ = [
    "Batched",
    "Prefetched",
    "api_error",
    "closing_iter",
    "collapsed_groups",
    "prefetch",
    "unwrap_group",
]


@asynccontextmanager
async def closing_iter(
    iterator: AsyncIterator[T], *, shield: bool = False
) -> AsyncIterator[AsyncIterator[T]]:
    """Use an async iterator and close it on exit, if it can be closed (generators can).

    Protocols return plain ``AsyncIterator``; their implementations are async
    generators, whose cleanup (closing a tail, a connection) must run promptly.
    ``shield`` lets the cleanup finish in a task being cancelled.
    """
    try:
        yield iterator
    finally:
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None and shield:
            with anyio.CancelScope(shield=True):
                await aclose()
        elif aclose is not None:
            await aclose()


def unwrap_group(error: BaseException, *, first_of_many: bool = False) -> BaseException:
    """``error`` without the exception groups of one member around it (nested ones too).

    A group of several stays a group, unless ``first_of_many``: then its first
    member is taken (for a report that can show only one error).
    """
    while isinstance(error, BaseExceptionGroup) and (first_of_many or len(error.exceptions) == 1):
        error = error.exceptions[0]
    return error


def api_error(error: BaseException) -> HelixError | None:
    """The library error to hand a caller for ``error``, or None if it is not one of ours.

    Unwrapped from exception groups of one; its traceback (the event loop's
    and our own frames) dropped, so the caller raising it again shows only
    their own call site; its cause (and the cause's own causes) kept, their
    tracebacks dropped too. Raise it outside the ``except`` block that caught
    ``error``, so that block's exception does not become its context.
    """
    found = unwrap_group(error)
    if not isinstance(found, HelixError):
        return None
    seen: set[int] = set()
    link: BaseException | None = found
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        link.__traceback__ = None
        # What a traceback print shows next: the cause, else an unsuppressed context.
        link = link.__cause__ or (None if link.__suppress_context__ else link.__context__)
    return found


@contextmanager
def collapsed_groups() -> Iterator[None]:
    """Re-raise an exception group of one exception as that exception, its cause kept.

    Task groups wrap what their tasks and their body raise; at an API the
    caller gets the one error that happened (as Starlette's ``collapse_excgroups``).
    """
    try:
        yield
    except BaseExceptionGroup as group:
        error = unwrap_group(group)
        if error is group:
            raise
        raise error from error.__cause__


class Batched(Protocol[T]):
    """What :func:`prefetch` hands over: the source's items, as batches."""

    def batches(self, max_batch: int = 512) -> AsyncIterator[list[T]]:
        """Yield lists of the items that have arrived."""
        ...


class _InPlace(Generic[T]):
    """A source read in the consumer's own task: each item a batch of one.

    An iterator object, not a generator: a consumer that stops early leaves
    nothing to finalize.
    """

    __slots__ = ("_iterator",)

    def __init__(self, iterator: AsyncIterator[T]) -> None:
        self._iterator = iterator

    def batches(self, max_batch: int = 512) -> AsyncIterator[list[T]]:
        """Each item as it comes, as a batch of one."""
        return self

    def __aiter__(self) -> _InPlace[T]:
        return self

    async def __anext__(self) -> list[T]:
        return [await anext(self._iterator)]


class Prefetched(Generic[T]):
    """The consuming side of :func:`prefetch` reading in a task of its own."""

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
    iterator: AsyncIterator[T], *, buffer: int = 512, in_task: bool = True
) -> AsyncIterator[Batched[T]]:
    """Read ``iterator`` in a task of its own into a bounded buffer.

    The consumer takes what has arrived as one batch (one append, one send)
    instead of paying per item, while a lone item still goes through at once.
    Leaving the block cancels the reader and closes the iterator.

    ``in_task=False`` reads it in the consumer's own task instead, an item at
    a time: no task and no hop per item, for a source that needs no task of
    its own and a consumer that hands each item on without waiting.
    """
    if not in_task:
        async with closing_iter(iterator, shield=True):
            yield _InPlace(iterator)
        return
    send, receive = anyio.create_memory_object_stream[T](buffer)
    prefetched = Prefetched(receive)

    async def pump() -> None:
        async with closing_iter(iterator, shield=True):
            try:
                async for item in iterator:
                    try:
                        # No checkpoint while there is room: items the source
                        # has at hand queue up and reach the consumer as one batch.
                        send.send_nowait(item)
                    except anyio.WouldBlock:
                        await send.send(item)
            except Exception as exc:  # handed to the consumer, unwrapped, after the items
                prefetched.error = exc
            finally:
                send.close()

    # The caller's own exception (raised in the block) comes back wrapped by
    # the task group: hand it back as it was raised.
    with collapsed_groups():
        async with anyio.create_task_group() as tg:
            tg.start_soon(pump)
            try:
                with receive:
                    yield prefetched
            finally:
                tg.cancel_scope.cancel()
