"""SIGKILL a process appending to a SQLite store: no acknowledged append is lost.

The worker (``_sqlite_append_worker.py``) prints one line per append that
returned. We kill it at a random point, reopen the file, and check that every
acknowledged event is there, every log is gap-free, decodes and projects, and
holds only whole batches: at most the one batch per session that was in
flight (committed but not yet acknowledged) beyond the acknowledgements.

The kill points are random; the seed is in every failure message, and
``HELIX_KILL_SEED=<seed>`` replays the same choices.
"""

from __future__ import annotations

import importlib.util
import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from helix_agents import EventStore
from helix_agents.log import project_state
from helix_agents.stores import SqliteEventStore

WORKER_PATH = Path(__file__).with_name("_sqlite_append_worker.py")
TIMEOUT = 60  # seconds, per phase; generous, the machine is shared
BASE_SEED = int(os.environ.get("HELIX_KILL_SEED") or random.SystemRandom().randrange(2**32))


def _load_worker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_sqlite_append_worker", WORKER_PATH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


worker = _load_worker()


class Acks:
    """The acknowledgements read from the worker: each session's highest acknowledged seq."""

    def __init__(self) -> None:
        self.count = 0
        self.last: dict[str, int] = {}

    def record(self, line: bytes, context: str) -> None:
        session_id, _, seq_text = line.decode().partition(" ")
        seq = int(seq_text)
        assert seq > self.last.get(session_id, 0), f"{context}: acks went back: {line!r}"
        self.last[session_id] = seq
        self.count += 1


async def _read_acks(
    stream: BufferedByteReceiveStream, acks: Acks, until: int, context: str
) -> bool:
    """Record acknowledgements until ``acks.count`` reaches ``until``; False at end of output."""
    while acks.count < until:
        try:
            line = await stream.receive_until(b"\n", 1024)
        except anyio.IncompleteRead:
            return False
        acks.record(line, context)
    return True


async def _stderr_of(process: Process) -> str:
    assert process.stderr is not None
    chunks: list[bytes] = []
    with anyio.move_on_after(5):
        async for chunk in process.stderr:
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")[-3000:]


async def _run_and_kill(db: Path | str, target: int, extra_delay: float, context: str) -> Acks:
    """Run the worker, SIGKILL it after ``target`` acks and ``extra_delay`` s; return all acks.

    ``db`` is the SQLite file, or a store URL the worker opens instead.
    """
    acks = Acks()
    process = await anyio.open_process(
        [sys.executable, str(WORKER_PATH), str(db), str(TIMEOUT * 2)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        stream = BufferedByteReceiveStream(process.stdout)
        with anyio.fail_after(TIMEOUT):
            if not await _read_acks(stream, acks, target, context):
                await process.wait()
                pytest.fail(
                    f"{context}: the worker exited (rc={process.returncode}) after "
                    f"{acks.count} acks:\n{await _stderr_of(process)}"
                )
        await anyio.sleep(extra_delay)  # let the worker run on a little: a random kill point
        os.kill(process.pid, signal.SIGKILL)
        with anyio.fail_after(TIMEOUT):
            await process.wait()
            # Lines printed before the kill are acknowledgements too.
            assert not await _read_acks(stream, acks, sys.maxsize, context)
        assert process.returncode == -signal.SIGKILL, context
        assert not stream.buffer, f"{context}: torn acknowledgement line {stream.buffer!r}"
    finally:
        if process.returncode is None:
            os.kill(process.pid, signal.SIGKILL)
        with anyio.move_on_after(TIMEOUT, shield=True):
            await process.aclose()
    return acks


def _batch_boundaries(index: int, beyond: int) -> list[int]:
    """Where the worker's batches of session ``index`` end: 0, then each end past ``beyond``."""
    boundaries = [0]
    while boundaries[-1] <= beyond:
        boundaries.append(boundaries[-1] + worker.batch_size(index, len(boundaries) - 1))
    return boundaries


ROUNDS = [
    pytest.param(0, (1, 30), id="early"),
    pytest.param(1, (30, 200), id="middle"),
    pytest.param(2, (200, 600), id="late"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("round_no", "ack_range"), ROUNDS)
async def test_no_acknowledged_append_is_lost_when_the_writer_is_killed(
    tmp_path: Path, round_no: int, ack_range: tuple[int, int]
) -> None:
    seed = BASE_SEED + round_no
    rng = random.Random(seed)
    target = rng.randint(*ack_range)
    extra_delay = rng.uniform(0, 0.05)
    context = (
        f"seed {seed} (HELIX_KILL_SEED={BASE_SEED}), kill after {target} acks "
        f"+ {extra_delay * 1000:.1f} ms"
    )
    db = tmp_path / "events.db"

    acks = await _run_and_kill(db, target, extra_delay, context)

    assert acks.count >= target, context
    async with SqliteEventStore(db) as store:
        await check_logs_after_kill(store, acks, context)


async def check_logs_after_kill(store: EventStore, acks: Acks, context: str) -> None:
    """Every acknowledged append is in ``store``, logs are gap-free and hold only whole batches."""
    all_ids = [worker.session_id(index) for index in range(worker.SESSIONS)]
    sessions = await store.list_sessions()
    assert set(sessions) <= set(all_ids), context
    assert set(acks.last) <= set(sessions), context
    for index, session_id in enumerate(all_ids):
        where = f"{context}, session {session_id}"
        events = await store.read(session_id)  # read() decodes every event
        acked = acks.last.get(session_id, 0)
        assert len(events) >= acked, f"{where}: acknowledged seq {acked} lost"
        assert [event.seq for event in events] == list(range(1, len(events) + 1)), where
        assert (session_id in sessions) == bool(events), where

        # Only whole batches, and at most one beyond the acknowledged ones.
        boundaries = _batch_boundaries(index, beyond=len(events))
        assert acked in boundaries, f"{where}: ack {acked} is not a batch boundary"
        whole = boundaries.index(acked)
        assert len(events) in (boundaries[whole], boundaries[whole + 1]), (
            f"{where}: {len(events)} events, acknowledged {acked}: torn batch or too many"
        )
        assert events == worker.expected_log(index, boundaries.index(len(events))), where
        if events:
            state = project_state(events)
            assert (state.session_id, state.last_seq) == (session_id, len(events)), where
