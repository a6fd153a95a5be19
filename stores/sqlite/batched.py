"""``BatchedCalls``: concurrent calls of a blocking function, served in batches.

A store's blocking reads run on worker threads; one thread hop per read
(a limiter, a queue, a wake-up of the thread and of the loop, the GIL passed
back and forth) costs more than the read of a short log itself. When
hundreds of streams open at once, that hop was most of their CPU. Calls
made here are queued instead: a caller that finds a free *lane* leads a
batch, takes what is queued (up to ``max_batch`` calls, its own first) and
runs it in one hop (``run_batch``); the others wait for the leader to hand
them their result. When a lane frees up and calls are still queued, the
oldest of them is handed it, to lead the next batch. At most ``lanes`` batches
run at once, so a long read does not hold up the rest.

A lone call still goes out at once, in a batch of one. A caller cancelled
while its call is queued withdraws it; a batch once taken always runs to its
end (shielded), since other callers wait for it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel

__all__ = ["BatchedCall", "BatchedCalls"]


class BatchedCall:
    """One queued call: its arguments, then its result or error."""

    __slots__ = ("args", "done", "error", "lane", "result", "wake")

    def __init__(self, args: tuple[Any, ...]) -> None:
        self.args = args
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False
        self.lane = False  # it holds a lane: it leads a batch, or was handed one to
        self.wake = anyio.Event()

    def outcome(self) -> Any:
        """The result, or the error raised."""
        if self.error is not None:
            raise self.error
        return self.result


class BatchedCalls:
    """Serves concurrent calls in batches, ``lanes`` batches at most at once.

    ``run_batch(calls)`` runs every call given (setting each one's ``result``
    or ``error``); it is awaited shielded from cancellation.
    """

    __slots__ = ("_lanes", "_leaders", "_max_batch", "_queue", "_run_batch")

    def __init__(
        self,
        run_batch: Callable[[list[BatchedCall]], Awaitable[None]],
        *,
        lanes: int,
        max_batch: int,
    ) -> None:
        self._run_batch = run_batch
        self._lanes = lanes
        self._max_batch = max_batch
        self._queue: dict[BatchedCall, None] = {}  # queued calls, oldest first
        self._leaders = 0  # lanes taken (batches running, or about to)

    async def call(self, *args: Any) -> Any:
        """Queue a call, lead a batch when a lane is free, and return the call's result."""
        call = BatchedCall(args)
        self._queue[call] = None
        if self._leaders < self._lanes:
            self._leaders += 1
            call.lane = True
        else:
            await self._wait(call)  # until it is done, or handed a lane
            if call.done:
                if call.lane:  # taken by another batch after it was handed a lane
                    self._release(call)
                return call.outcome()
            call.wake = anyio.Event()  # the hand-over used it up
        try:
            # Let callers arriving in this turn of the loop queue up first.
            await anyio.lowlevel.checkpoint()
            if call in self._queue:
                del self._queue[call]
                batch = [call]
                while self._queue and len(batch) < self._max_batch:
                    taken = next(iter(self._queue))
                    del self._queue[taken]
                    batch.append(taken)
                try:
                    with anyio.CancelScope(shield=True):
                        await self._run_batch(batch)
                except BaseException as exc:  # the batch as a whole failed: each call did
                    for taken in batch:
                        taken.error = taken.error or exc
                    raise
                finally:
                    for taken in batch:
                        taken.done = True
                        taken.wake.set()
        except BaseException:
            self._queue.pop(call, None)  # cancelled before its batch was taken
            raise
        finally:
            self._release(call)
        if not call.done:  # another leader took it: that one hands the result over
            await self._wait(call)
        return call.outcome()

    async def _wait(self, call: BatchedCall) -> None:
        try:
            await call.wake.wait()
        except BaseException:
            self._queue.pop(call, None)
            if call.lane:  # cancelled once handed a lane: pass it on
                self._release(call)
            raise

    def _release(self, call: BatchedCall) -> None:
        """``call`` gives its lane up; the lanes free go to the oldest queued calls."""
        call.lane = False
        self._leaders -= 1
        for queued in self._queue:
            if self._leaders >= self._lanes:
                return
            if not queued.lane:
                queued.lane = True
                self._leaders += 1
                queued.wake.set()
