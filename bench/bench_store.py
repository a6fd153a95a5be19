"""``store`` benchmark: SqliteEventStore group commit vs raw SQLite; fold throughput."""

from __future__ import annotations

import os
import sqlite3
import statistics
import tempfile
import time
from typing import Any

import anyio

from helix_agents.events import (
    ChildChunkForwarded,
    Event,
    MessageAppended,
    RunStarted,
    SessionCreated,
    StateUpdated,
    StepStarted,
    SubSessionStarted,
    TextDelta,
    ToolEnd,
    ToolStart,
)
from helix_agents.log import encode_event, project_state
from helix_agents.messages import AssistantMessage, ToolCall, UserMessage
from helix_agents.stores import SqliteEventStore

SESSIONS = 100


def _delta(session_id: str, seq: int) -> TextDelta:
    return TextDelta(
        session_id=session_id,
        seq=seq,
        ts=time.time(),
        agent_id=session_id,
        agent_type="writer",
        delta="The quick brown fox jumps over the lazy dog. ",
    )


def _created(session_id: str) -> SessionCreated:
    return SessionCreated(
        session_id=session_id,
        seq=1,
        ts=time.time(),
        agent_type="writer",
        run_id="run-1",
        messages=[UserMessage(content="write something")],
    )


def raw_sqlite_rows_per_s(path: str, rows: int) -> float:
    """Raw baseline: the same table, rows inserted 100 per transaction, WAL, NORMAL."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute(
        "CREATE TABLE helix_events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, "
        "type TEXT NOT NULL, ts REAL NOT NULL, data BLOB NOT NULL, "
        "PRIMARY KEY (session_id, seq)) WITHOUT ROWID"
    )
    data = encode_event(_delta("s-0", 1))
    ids = [f"bench-{i}" for i in range(SESSIONS)]
    start = time.perf_counter()
    for base in range(0, rows, 100):
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO helix_events VALUES (?, ?, ?, ?, ?)",
            [(ids[i % SESSIONS], base + i, "text_delta", 0.0, data) for i in range(100)],
        )
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return rows / elapsed


async def _append_events_per_s(path: str, per_session: int, synchronous: Any) -> float:
    store = SqliteEventStore(path, synchronous=synchronous)
    ids = [f"bench-{i}" for i in range(SESSIONS)]

    async def writer(session_id: str) -> None:
        await store.append(session_id, [_created(session_id)], 0)
        for seq in range(2, per_session + 2):
            await store.append(session_id, [_delta(session_id, seq)], seq - 1)

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for session_id in ids:
            tg.start_soon(writer, session_id)
    elapsed = time.perf_counter() - start
    await store.close()
    return SESSIONS * (per_session + 1) / elapsed


def build_log(n: int) -> list[Event]:
    """A realistic n-event parent log: steps, messages, state, deltas, forwarded child chunks."""
    sid = "fold-parent"
    events: list[Event] = [
        _created(sid),
        RunStarted(session_id=sid, seq=2, ts=0.0, run_id="run-1"),
        SubSessionStarted(
            session_id=sid,
            seq=3,
            ts=0.0,
            sub_session_id="child",
            agent_type="researcher",
            tool_call_id="c1",
        ),
    ]
    child_seq = 0
    seq = 3
    while seq < n:
        seq += 1
        kind = seq % 10
        event: Event
        if kind == 0:
            event = StepStarted(session_id=sid, seq=seq, ts=0.0, step=seq // 10)
        elif kind == 1:
            event = MessageAppended(
                session_id=sid,
                seq=seq,
                ts=0.0,
                message=AssistantMessage(
                    content="thinking", tool_calls=[ToolCall(id=f"t{seq}", name="search")]
                ),
            )
        elif kind == 2:
            event = StateUpdated(session_id=sid, seq=seq, ts=0.0, state={"count": seq})
        elif kind == 3:
            event = ToolStart(
                session_id=sid,
                seq=seq,
                ts=0.0,
                agent_id=sid,
                agent_type="writer",
                tool_call_id=f"t{seq}",
                tool_name="search",
            )
        elif kind == 4:
            event = ToolEnd(
                session_id=sid,
                seq=seq,
                ts=0.0,
                agent_id=sid,
                agent_type="writer",
                tool_call_id=f"t{seq}",
                tool_name="search",
                result={"hits": 3},
            )
        elif kind in (5, 6):
            child_seq += 1
            event = ChildChunkForwarded(
                session_id=sid,
                seq=seq,
                ts=0.0,
                child_session_id="child",
                child_seq=child_seq,
                chunk=_delta("child", child_seq),
            )
        else:
            event = _delta(sid, seq)
        events.append(event)
    return events


def fold_events_per_s(events: list[Event], repeats: int) -> float:
    """Best-of-``repeats`` throughput of project_state over ``events``."""
    best = min(_timed(lambda: project_state(events)) for _ in range(repeats))
    return len(events) / best


def _timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run_store(*, quick: bool = False) -> dict[str, Any]:
    """Run the store benchmark and print a human-readable report; return the summary."""
    per_session = 100 if quick else 400
    fold_n = 10_000 if quick else 100_000
    rounds = 1 if quick else 3
    raw: list[float] = []
    normal: list[float] = []
    full: list[float] = []
    with tempfile.TemporaryDirectory(prefix="helix-bench-") as tmp:
        for round_no in range(rounds):
            raw.append(
                raw_sqlite_rows_per_s(
                    os.path.join(tmp, f"raw{round_no}.db"), SESSIONS * (per_session + 1)
                )
            )
            normal.append(
                anyio.run(
                    _append_events_per_s,
                    os.path.join(tmp, f"normal{round_no}.db"),
                    per_session,
                    "NORMAL",
                )
            )
            full.append(
                anyio.run(
                    _append_events_per_s,
                    os.path.join(tmp, f"full{round_no}.db"),
                    per_session,
                    "FULL",
                )
            )
    raw_rate = statistics.median(raw)
    append_rate = statistics.median(normal)
    full_rate = statistics.median(full)
    log = build_log(fold_n)
    fold_rate = fold_events_per_s(log, repeats=5)
    print(f"raw sqlite, 100 rows/commit, NORMAL:      {raw_rate:>10,.0f} rows/s")
    print(f"SqliteEventStore.append x{SESSIONS}, NORMAL:    {append_rate:>10,.0f} events/s")
    print(f"SqliteEventStore.append x{SESSIONS}, FULL:      {full_rate:>10,.0f} events/s")
    print(f"append ratio (NORMAL vs raw):            {append_rate / raw_rate:>10.2f}")
    print(f"project_state on {len(log):,} events:      {fold_rate:>10,.0f} events/s")
    return {
        "bench": "store",
        "append_events_per_s": round(append_rate),
        "raw_sqlite_rows_per_s": round(raw_rate),
        "append_ratio": round(append_rate / raw_rate, 3),
        "append_full_sync_events_per_s": round(full_rate),
        "fold_events_per_s": round(fold_rate),
        "fold_log_events": len(log),
        "sessions": SESSIONS,
    }
