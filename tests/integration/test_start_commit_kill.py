"""SIGKILL a served process around a start: a 200 means durable, a retry finds one run.

The start's events go into the store with the run's first batch (they are
committed alone when the window closes on a slow run). ``helix-agents
serve`` (a subprocess on a SQLite file) runs the slow ``researcher``:

- killed right after answering 200, that is between the start's commit and
  the run's later batches: the session is there after a restart, recovery
  resumes it, and it completes;
- killed at a random moment while the start is in flight: a start answered
  200 is there after the restart; whether or not it was, the same start
  sent again is answered and the session completes, with one
  ``session_created`` and a log that reads back whole (no gap, no break in
  its checksums).

The kill delays are random; the seed is printed and in every failure message,
and ``HELIX_KILL_SEED=<seed>`` replays them.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import anyio
import httpx
import pytest
from _served_agents import ServedAgents, read_sse
from remote_app import expected_report

from helix_agents.events import RunStarted, SessionCreated
from helix_agents.protocol import EndEvent
from helix_agents.stores import SqliteEventStore

pytestmark = pytest.mark.slow

TIMEOUT = 90  # seconds for the whole scenario; generous, nothing else is timed
SEED = int(os.environ.get("HELIX_KILL_SEED") or random.SystemRandom().randrange(2**32))
ROUNDS = 4


def _start_body(session_id: str) -> dict[str, object]:
    return {"sessionId": session_id, "agentType": "researcher", "message": "tides"}


async def _finishes(client: httpx.AsyncClient, server: ServedAgents, session_id: str) -> None:
    """Read the session's stream to its end; it must end completed with the researcher's report."""
    events = await read_sse(client, server.url, session_id)
    assert isinstance(events[-1], EndEvent), events[-3:]
    assert events[-1].output == expected_report("tides")


async def _one_run_and_whole(db: Path, session_id: str, context: str) -> list[str]:
    """The log reads back whole (the read checks seqs and checksums); its run modes."""
    async with SqliteEventStore(db) as store:
        log = await store.read(session_id)
    assert sum(isinstance(event, SessionCreated) for event in log) == 1, context
    return [event.mode for event in log if isinstance(event, RunStarted)]


async def test_a_start_answered_200_survives_a_kill_right_after(tmp_path: Path) -> None:
    db = tmp_path / "served.db"
    server = ServedAgents(db, tmp_path / "server.log")
    try:
        with anyio.fail_after(TIMEOUT):
            await server.start()
            async with httpx.AsyncClient(timeout=10) as client:
                response = await client.post(f"{server.url}/start", json=_start_body("k1"))
                assert response.status_code == 200, response.text
                await server.kill()  # the run has streamed little or nothing since
                await server.start()  # recovers the session left running
                status = await client.get(f"{server.url}/status", params={"sessionId": "k1"})
                assert status.status_code == 200, status.text
                await _finishes(client, server, "k1")
            await server.stop()
    finally:
        with anyio.CancelScope(shield=True):
            await server.stop()
    modes = await _one_run_and_whole(db, "k1", server.output())
    assert modes == ["start", "resume"], server.output()


async def test_a_kill_during_a_start_leaves_nothing_half_made(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    db = tmp_path / "served.db"
    server = ServedAgents(db, tmp_path / "server.log")
    context = f"seed {SEED} (HELIX_KILL_SEED={SEED})"
    print(context)
    try:
        with anyio.fail_after(TIMEOUT):
            await server.start()
            async with httpx.AsyncClient(timeout=10) as client:
                for round_ in range(ROUNDS):
                    session_id = f"inflight-{round_}"
                    delay = rng.uniform(0, 0.006)
                    answers: list[int] = []

                    async def start(sid: str = session_id, got: list[int] = answers) -> None:
                        try:
                            response = await client.post(
                                f"{server.url}/start", json=_start_body(sid)
                            )
                        except httpx.TransportError:
                            return  # the kill cut it: no answer
                        got.append(response.status_code)

                    async with anyio.create_task_group() as tg:
                        tg.start_soon(start)
                        await anyio.sleep(delay)
                        await server.kill()
                    await server.start()
                    here = f"{context}: round {round_}, kill after {delay * 1000:.2f} ms"
                    status = await client.get(
                        f"{server.url}/status", params={"sessionId": session_id}
                    )
                    print(f"{here}: answered {answers}, then {status.status_code}")
                    if answers == [200]:
                        assert status.status_code == 200, (here, status.text)
                    else:
                        assert status.status_code in (200, 404), (here, status.text)
                    # The client's retry: answered, and the session completes.
                    again = await client.post(f"{server.url}/start", json=_start_body(session_id))
                    assert again.status_code == 200, (here, again.text)
                    await _finishes(client, server, session_id)
                    modes = await _one_run_and_whole(db, session_id, here)
                    assert modes[0] == "start", (here, modes)
                    assert set(modes[1:]) <= {"resume"}, (here, modes)
            await server.stop()
    finally:
        with anyio.CancelScope(shield=True):
            await server.stop()
