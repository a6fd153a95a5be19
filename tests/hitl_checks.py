"""Checks shared by the human-in-the-loop tests: a tree's logs, its root's stream, its answers.

A tree may span several stores (a remote child lives on its server's), so
:func:`tree_logs` walks the root's ``sub_sessions`` through every store it is
given. :func:`assert_every_chunk_once` is the stream property every test
ends with: the root's stream has strictly increasing sequences and holds
each chunk of every session of the tree exactly once (a forwarded chunk
keeps its origin's session id and seq), and every parent forwarded exactly
its child's whole stream, in order.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import anyio
import httpx
import msgspec

from helix_agents import EventStore, PendingInput
from helix_agents._aio import closing_iter
from helix_agents.events import (
    ApprovalGiven,
    ApprovalRequested,
    ChildChunkForwarded,
    ClientToolPending,
    ClientToolResultSubmitted,
    Event,
)
from helix_agents.log import encode_event, project_state, project_stream, stream_item
from helix_agents.transports.sse import SSEParser

__all__ = [
    "SSEReader",
    "answers_in",
    "assert_answered_once",
    "assert_entry",
    "assert_every_chunk_once",
    "input_required_of",
    "log_bytes",
    "tree_logs",
    "until",
]


async def _read(stores: Sequence[EventStore], session_id: str) -> list[Event]:
    for store in stores:
        log = await store.read(session_id)
        if log:
            return list(log)
    raise AssertionError(f"session {session_id!r} is in none of the stores")


async def tree_logs(root_id: str, stores: Sequence[EventStore]) -> dict[str, list[Event]]:
    """Every session of the tree under ``root_id``: its log, found in whichever store holds it."""
    logs: dict[str, list[Event]] = {}
    todo = [root_id]
    while todo:
        session_id = todo.pop()
        log = await _read(stores, session_id)
        logs[session_id] = log
        todo.extend(project_state(log).sub_sessions)
    return logs


def _own_chunks(log: Iterable[Event]) -> list[tuple[str, int]]:
    return [
        (event.session_id, event.seq)
        for event in log
        if stream_item(event) is not None and not isinstance(event, ChildChunkForwarded)
    ]


def assert_every_chunk_once(logs: dict[str, list[Event]], root_id: str) -> None:
    """The root's stream: no gap in order, no duplicate, every chunk of the tree (see module)."""
    stream = project_stream(logs[root_id])
    sequences = [item.sequence for item in stream]
    assert all(a < b for a, b in itertools.pairwise(sequences)), sequences
    origins = [(item.chunk.session_id, item.chunk.seq) for item in stream]
    twice = [key for key, count in Counter(origins).items() if count > 1]
    assert not twice, f"chunks on the root's stream twice: {twice}"
    expected = {key for log in logs.values() for key in _own_chunks(log)}
    assert set(origins) == expected, (
        f"missing: {sorted(expected - set(origins))}; foreign: {sorted(set(origins) - expected)}"
    )
    for session_id, log in logs.items():
        for child_id in project_state(log).sub_sessions:
            forwarded = [
                event.child_seq
                for event in log
                if isinstance(event, ChildChunkForwarded) and event.child_session_id == child_id
            ]
            whole = [item.sequence for item in project_stream(logs[child_id])]
            assert forwarded == whole, f"{session_id} forwarded {forwarded} of {child_id}: {whole}"


def answers_in(log: Iterable[Event], tool_call_id: str) -> list[Event]:
    """The answers (tool results submitted, approval decisions) a log records for an entry."""
    return [
        event
        for event in log
        if isinstance(event, ClientToolResultSubmitted | ApprovalGiven)
        and event.tool_call_id == tool_call_id
    ]


def assert_answered_once(logs: dict[str, list[Event]]) -> int:
    """Every entry of the tree is answered exactly once in its owner's log; the count of entries.

    And every session that routed it (its ownership record) recorded the
    forwarded answer at most once, with the owner's value.
    """
    entries = 0
    for session_id, log in logs.items():
        for event in log:
            if isinstance(event, ClientToolPending | ApprovalRequested):
                entries += 1
                answers = answers_in(log, event.tool_call_id)
                assert len(answers) == 1, (session_id, event.tool_call_id, answers)
                owner_answer = _answer_value(answers[0])
                for other_id, other in logs.items():
                    if other_id == session_id:
                        continue
                    forwarded = answers_in(other, event.tool_call_id)
                    assert len(forwarded) <= 1, (other_id, forwarded)
                    assert all(_answer_value(a) == owner_answer for a in forwarded)
    return entries


def _answer_value(event: Event) -> Any:
    return msgspec.structs.replace(event, session_id="", seq=0, ts=0.0)  # type: ignore[type-var]


def assert_entry(
    entry: PendingInput,
    *,
    kind: str,
    tool_name: str,
    arguments: Any,
    owner: str,
    path: list[str],
    logs: dict[str, list[Event]] | None = None,
) -> None:
    """One pending input's fields; with ``logs``, its id is the owner's recorded call."""
    assert (entry.kind, entry.tool_name, entry.arguments) == (kind, tool_name, arguments), entry
    assert entry.owner_session_id == owner, entry
    assert entry.path == path, entry
    assert entry.path[-1] == owner
    if logs is not None:
        recorded = ClientToolPending if kind == "client_tool" else ApprovalRequested
        ids = [e.tool_call_id for e in logs[owner] if isinstance(e, recorded)]
        assert entry.tool_call_id in ids, (entry.tool_call_id, ids)


async def log_bytes(stores: Sequence[EventStore]) -> list[list[bytes]]:
    """Every log of every store, encoded: equal before and after means nothing changed."""
    data: list[list[bytes]] = []
    for store in stores:
        for session_id in sorted(await store.list_sessions()):
            data.append([encode_event(event) for event in await store.read(session_id)])
    return data


async def until(store: EventStore, session_id: str, predicate: Any, limit: float = 20) -> None:
    """Wait, on the log itself, until ``predicate(state)`` holds for the session."""
    with anyio.fail_after(limit):
        log = list(await store.read(session_id))
        if log and predicate(project_state(log)):
            return
        events: AsyncIterator[Event] = store.tail(session_id, log[-1].seq if log else 0)
        async with closing_iter(events) as tail:
            async for event in tail:
                log.append(event)
                if predicate(project_state(log)):
                    return


class SSEReader:
    """One ``GET /sse`` connection, as a browser reads it.

    Run :meth:`read` in a task; :meth:`until` takes the events it delivered up
    to one that matches (all are kept in ``events``, as ``(kind, payload)``);
    :meth:`close` when done. Cancel the reading task to drop the connection.
    """

    def __init__(self) -> None:
        self.events: list[Any] = []
        self._send, self._receive = anyio.create_memory_object_stream[Any](100)

    def close(self) -> None:
        """Stop taking events."""
        self._receive.close()

    async def read(self, url: str, session_id: str, from_sequence: int = 0) -> None:
        """Read ``GET /sse`` from ``from_sequence`` until its ``end``/``error`` (then stop)."""
        parser = SSEParser()
        params = {"sessionId": session_id, "fromSequence": str(from_sequence)}
        async with (
            self._send,
            httpx.AsyncClient(timeout=10) as client,
            client.stream("GET", f"{url}/sse", params=params) as response,
        ):
            assert response.status_code == 200
            async for data in response.aiter_bytes():
                for message in parser.feed(data):
                    payload = json.loads(message.data)
                    if message.event == "chunk":
                        assert message.id == str(payload["sequence"])
                    await self._send.send((message.event, payload))
                    if message.event != "chunk":
                        return

    async def until(self, predicate: Any) -> tuple[str, Any]:
        """The next events up to the first for which ``predicate(kind, payload)`` holds."""
        async for kind, payload in self._receive:
            self.events.append((kind, payload))
            if predicate(kind, payload):
                return kind, payload
        raise AssertionError(f"the stream ended first: {self.events[-3:]}")


def input_required_of(session_id: str) -> Any:
    """An SSE predicate: the ``input_required`` chunk of ``session_id`` itself."""

    def matches(kind: str, payload: Any) -> bool:
        chunk = payload.get("chunk", {}) if kind == "chunk" else {}
        return chunk.get("type") == "input_required" and chunk.get("agentId") == session_id

    return matches
