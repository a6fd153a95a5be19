"""``ToolMemory``: what ``ctx.memory`` gives a tool — its tenant's items, each access recorded.

A tool names namespaces relative to its session's tenant (``session_created.owner``'s,
:data:`~helix_agents.memory.base.DEFAULT_TENANT` when it names none), which is
prepended: a tool cannot name, read or write another tenant's items. Every
read appends ``memory_read`` (what was asked and what came back) and every
write ``memory_written`` to the session's log, so a replay, a fork and the
inspector see what a run read and wrote.

A write is idempotent per tool call: the call's n-th write carries the key
``(tool_call_id, n)``. A call run again after a crash (its ``tool_start`` is in
the log, not its result) finds its earlier writes recorded and gets their
recorded items back without writing; one that crashed between writing the
store and recording it finds the store's item carrying its token, and does not
write it again either.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio.from_thread

from helix_agents.errors import UsageError
from helix_agents.events import Event, MemoryRead, MemoryWritten
from helix_agents.memory.base import DEFAULT_TENANT, MemoryItem, MemoryStore, check_value
from helix_agents.runtime.writer import SessionWriter

__all__ = ["SyncToolMemory", "ToolMemory", "relative"]

Namespace = str | Sequence[str]
"""A namespace as a tool names it: a sequence of strings, or one string for one element."""


def _parts(namespace: Namespace) -> tuple[str, ...]:
    if isinstance(namespace, str):
        return (namespace,)
    if not isinstance(namespace, Sequence):
        raise UsageError(f"a namespace is a sequence of strings, not {namespace!r}")
    return tuple(namespace)


def relative(item: MemoryItem) -> MemoryItem:
    """``item`` with its namespace's first element (the tenant) taken off."""
    return MemoryItem(
        namespace=item.namespace[1:],
        key=item.key,
        value=item.value,
        version=item.version,
        created=item.created,
        updated=item.updated,
    )


class ToolMemory:
    """A tool call's view of the memory store (see the module).

    Args:
        store: the executor's memory store (None: it has none, and every use
            raises :class:`UsageError` saying so).
        writer: the calling session's writer (its tenant, its log).
        call_id: the tool call's id.
    """

    def __init__(self, store: MemoryStore | None, writer: SessionWriter, call_id: str) -> None:
        self._store = store
        self._writer = writer
        self._call_id = call_id
        self._writes = 0
        self._recorded: dict[int, MemoryWritten] | None = None

    @property
    def tenant(self) -> str:
        """The tenant whose items this call reaches: the session owner's."""
        owner = self._writer.state.owner
        return owner.tenant if owner is not None and owner.tenant is not None else DEFAULT_TENANT

    def _absolute(self, namespace: Namespace) -> tuple[str, ...]:
        return (self.tenant, *_parts(namespace))

    def _memory(self) -> MemoryStore:
        if self._store is None:
            raise UsageError(
                "no memory store: the executor's event store offers none; "
                "give AgentExecutor(..., memory=...)"
            )
        return self._store

    async def _record(self, *events: Event) -> None:
        await self._writer.append(*events)

    async def get(self, namespace: Namespace, key: str) -> MemoryItem | None:
        """The item at ``namespace`` / ``key`` (relative to the tenant), or None."""
        full = self._absolute(namespace)
        item = await self._memory().get(full, key)
        await self._record(
            MemoryRead(
                op="get",
                namespace=full,
                key=key,
                query=None,
                items=[] if item is None else [item],
                tool_call_id=self._call_id,
            )
        )
        return None if item is None else relative(item)

    async def search(
        self,
        namespace: Namespace = (),
        query: str | None = None,
        *,
        limit: int = 10,
        offset: int = 0,
    ) -> list[MemoryItem]:
        """The items under ``namespace`` whose key or value holds every term of ``query``.

        Newest first; ``limit`` (1-100) and ``offset`` page them. Without a query, a listing.
        """
        full = self._absolute(namespace)
        items = await self._memory().search(full, query=query, limit=limit, offset=offset)
        await self._record(
            MemoryRead(
                op="search",
                namespace=full,
                key=None,
                query=query,
                limit=limit,
                offset=offset,
                items=items,
                tool_call_id=self._call_id,
            )
        )
        return [relative(item) for item in items]

    async def list(
        self, namespace: Namespace = (), *, limit: int = 10, offset: int = 0
    ) -> list[MemoryItem]:
        """The items under ``namespace``, newest first (a search without a query)."""
        return await self.search(namespace, None, limit=limit, offset=offset)

    async def _earlier(self, write: int) -> MemoryWritten | None:
        """This call's ``write``-th write, if the log already records it (a rerun)."""
        if self._recorded is None:
            log = await self._writer.store.read(self._writer.session_id)
            self._recorded = {
                event.write: event
                for event in log
                if isinstance(event, MemoryWritten) and event.tool_call_id == self._call_id
            }
        return self._recorded.get(write)

    async def _write(
        self, namespace: Namespace, key: str, value: dict[str, Any] | None
    ) -> tuple[MemoryWritten, MemoryItem | None]:
        full = self._absolute(namespace)
        plain = None if value is None else check_value(value)
        store = self._memory()
        write, self._writes = self._writes, self._writes + 1
        earlier = await self._earlier(write)
        if earlier is not None and (earlier.namespace, earlier.key, earlier.value is None) == (
            full,
            key,
            plain is None,
        ):
            return earlier, None  # this call ran before (a crash, a fork): made already
        token = f"{self._writer.session_id}/{self._call_id}/{write}"
        if plain is None:
            was = await store.delete(full, key, token=token)
            event = MemoryWritten(
                namespace=full,
                key=key,
                value=None,
                version=0 if was is None else was.version + 1,
                tool_call_id=self._call_id,
                write=write,
            )
            if was is None:
                return event, None  # nothing was there: nothing written, nothing to record
        else:
            item = await store.put(full, key, plain, token=token)
            event = MemoryWritten(
                namespace=full,
                key=key,
                value=item.value,
                version=item.version,
                tool_call_id=self._call_id,
                write=write,
            )
            was = item
        await self._record(event)
        return event, was

    async def put(self, namespace: Namespace, key: str, value: dict[str, Any]) -> MemoryItem:
        """Write ``value`` (a JSON object) at ``namespace`` / ``key``; return the item written."""
        event, item = await self._write(namespace, key, value)
        if item is None:  # a rerun: the recorded write
            item = await self._memory().get(event.namespace, key)
            if item is None or item.version != event.version:
                return MemoryItem(
                    namespace=event.namespace[1:],
                    key=key,
                    value=event.value or {},
                    version=event.version,
                    created=event.ts,
                    updated=event.ts,
                )
        return relative(item)

    async def delete(self, namespace: Namespace, key: str) -> bool:
        """Delete the item at ``namespace`` / ``key``; return whether there was one."""
        event, _was = await self._write(namespace, key, None)
        return event.version > 0


class SyncToolMemory:
    """:class:`ToolMemory` for a synchronous ``execute`` (its worker thread): blocking calls."""

    def __init__(self, inner: ToolMemory) -> None:
        self._inner = inner

    @property
    def tenant(self) -> str:
        """The tenant whose items this call reaches."""
        return anyio.from_thread.run_sync(lambda: self._inner.tenant)

    def get(self, namespace: Namespace, key: str) -> MemoryItem | None:
        """See :meth:`ToolMemory.get` (blocking)."""
        return anyio.from_thread.run(self._inner.get, namespace, key)

    def put(self, namespace: Namespace, key: str, value: dict[str, Any]) -> MemoryItem:
        """See :meth:`ToolMemory.put` (blocking)."""
        return anyio.from_thread.run(self._inner.put, namespace, key, value)

    def delete(self, namespace: Namespace, key: str) -> bool:
        """See :meth:`ToolMemory.delete` (blocking)."""
        return anyio.from_thread.run(self._inner.delete, namespace, key)

    def search(
        self,
        namespace: Namespace = (),
        query: str | None = None,
        *,
        limit: int = 10,
        offset: int = 0,
    ) -> list[MemoryItem]:
        """See :meth:`ToolMemory.search` (blocking)."""
        return anyio.from_thread.run(
            lambda: self._inner.search(namespace, query, limit=limit, offset=offset)
        )

    def list(
        self, namespace: Namespace = (), *, limit: int = 10, offset: int = 0
    ) -> list[MemoryItem]:
        """See :meth:`ToolMemory.list` (blocking)."""
        return anyio.from_thread.run(
            lambda: self._inner.list(namespace, limit=limit, offset=offset)
        )
