"""A model's resources per event loop: its HTTP client, reused by every call, and its call limit.

An adapter keeps one client per running event loop in a :class:`ClientPool`:
every call on that loop reuses the client's connections (one TCP and TLS
handshake for a whole run, not one per step), and no connection crosses
event loops (``run_sync`` twice runs two loops, one after the other). A
client whose loop has ended is dropped the next time the pool meets a new
loop. An executor holds the pools of the models its runs call
(:class:`ModelHub`, the run's step calls :meth:`ModelHub.use`) and lets go of
them when it closes: the last holder on a loop closes that loop's client, so
two executors sharing a model on one loop never close it under each other.
Outside an executor, close an adapter with ``aclose()`` (or ``async with``).

:class:`CallLimit` caps the calls a model has in flight on a loop
(``max_concurrency=``): a call waits for a slot before it sends its request
and holds it until its stream is closed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable
from contextlib import aclosing
from typing import Any, Generic, Protocol, TypeVar

import anyio
import anyio.lowlevel
import httpx

from helix_agents.errors import UsageError

__all__ = [
    "CallLimit",
    "ClientPool",
    "HasClientPools",
    "ModelHub",
    "current_loop",
    "http_pool",
    "limited",
    "pools_of",
]

C = TypeVar("C")
T = TypeVar("T")


def current_loop() -> object:
    """The running event loop (asyncio's loop; under trio, anyio's token for the run)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return anyio.lowlevel.current_token()


def _ended(loop: object) -> bool:
    is_closed = getattr(loop, "is_closed", None)
    return bool(is_closed()) if callable(is_closed) else False


class _Slot(Generic[C]):
    __slots__ = ("holders", "value")

    def __init__(self) -> None:
        self.value: C | None = None
        self.holders = 0


class ClientPool(Generic[C]):
    """An adapter's clients: one per running event loop, made on first use there, then reused.

    Args:
        make: makes a client (an ``httpx.AsyncClient``, an SDK's client);
            called inside the loop that will use it.
        close: closes one (``httpx.AsyncClient.aclose``).
    """

    def __init__(self, make: Callable[[], C], close: Callable[[C], Awaitable[None]]) -> None:
        self._make = make
        self._close = close
        self._slots: dict[object, _Slot[C]] = {}
        self._lock = threading.Lock()  # loops in other threads may share the adapter

    def __repr__(self) -> str:
        open_ = sum(1 for slot in self._slots.values() if slot.value is not None)
        return f"<ClientPool {open_} open>"

    def _slot(self) -> _Slot[C]:
        loop = current_loop()
        slot = self._slots.get(loop)
        if slot is not None:
            return slot
        with self._lock:
            # A new loop: forget the clients of loops that have ended (their
            # connections died with them; there is no loop left to close them on).
            for ended in [other for other in self._slots if _ended(other)]:
                del self._slots[ended]
            return self._slots.setdefault(loop, _Slot())

    def client(self) -> C:
        """This loop's client, made now if it has none yet."""
        slot = self._slot()
        if slot.value is None:
            slot.value = self._make()
        return slot.value

    @property
    def open(self) -> int:
        """How many clients the pool holds open (across loops)."""
        return sum(1 for slot in self._slots.values() if slot.value is not None)

    def hold(self) -> None:
        """Count one more holder on this loop (an executor): the client stays open for it."""
        self._slot().holders += 1

    async def release(self) -> None:
        """Let go of one hold on this loop; the last one closes this loop's client."""
        slot = self._slot()
        slot.holders = max(slot.holders - 1, 0)
        if slot.holders == 0:
            await self.aclose()

    async def aclose(self) -> None:
        """Close this loop's client now (a later call makes a new one); idempotent."""
        loop = current_loop()
        with self._lock:
            slot = self._slots.pop(loop, None)
        if slot is not None and slot.value is not None:
            with anyio.CancelScope(shield=True):
                await self._close(slot.value)


def http_pool(timeout: httpx.Timeout) -> ClientPool[httpx.AsyncClient]:
    """A pool of ``httpx.AsyncClient`` s with ``timeout``, one per event loop."""
    return ClientPool(lambda: httpx.AsyncClient(timeout=timeout), httpx.AsyncClient.aclose)


class HasClientPools(Protocol):
    """A model that keeps clients: an adapter, or a wrapper naming its models' pools."""

    def client_pools(self) -> Iterable[ClientPool[Any]]:
        """The pools whose clients this model's calls use."""
        ...


def pools_of(llm: object) -> list[ClientPool[Any]]:
    """The client pools of ``llm`` (its ``client_pools()``), or none."""
    pools = getattr(llm, "client_pools", None)
    return list(pools()) if callable(pools) else []


class ModelHub:
    """The client pools of the models an executor's runs called, held until it closes."""

    def __init__(self) -> None:
        self._held: dict[int, ClientPool[Any]] = {}

    def __repr__(self) -> str:
        return f"<ModelHub holding {len(self._held)} pools>"

    def use(self, llm: object) -> None:
        """Hold ``llm``'s pools (each once) until :meth:`aclose`; called at each model step."""
        for pool in pools_of(llm):
            if id(pool) not in self._held:
                pool.hold()
                self._held[id(pool)] = pool

    async def aclose(self) -> None:
        """Let go of every pool held: each closes its client if no other executor holds it."""
        held, self._held = list(self._held.values()), {}
        with anyio.CancelScope(shield=True):
            for pool in held:
                await pool.release()


class CallLimit:
    """At most ``limit`` calls of a model in flight at once on an event loop.

    Raises:
        UsageError: ``limit`` is not a positive integer.
    """

    def __init__(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise UsageError(f"max_concurrency must be a positive integer, not {limit!r}")
        self.limit = limit
        self._slots: dict[object, anyio.Semaphore] = {}

    def __repr__(self) -> str:
        return f"<CallLimit {self.limit}>"

    def semaphore(self) -> anyio.Semaphore:
        """This loop's semaphore (made on first use)."""
        loop = current_loop()
        found = self._slots.get(loop)
        if found is None:
            for ended in [other for other in self._slots if _ended(other)]:
                del self._slots[ended]
            found = self._slots.setdefault(loop, anyio.Semaphore(self.limit))
        return found


async def limited(
    limit: CallLimit, open_stream: Callable[[], AsyncGenerator[T, None]]
) -> AsyncGenerator[T, None]:
    """Yield ``open_stream()``'s items, holding one of ``limit``'s slots while it is open."""
    async with limit.semaphore(), aclosing(open_stream()) as items:
        async for item in items:
            yield item
