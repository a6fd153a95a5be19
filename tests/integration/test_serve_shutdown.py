"""``helix-agents serve`` shuts down within ``--grace``, interrupting runs; a restart resumes them.

The server is the real command on a loopback port and a SQLite file, running
``sleeper`` sessions that wait in a tool for an hour. On SIGTERM it stops
listening at once (connections are refused, ``/health`` included), lets the
runs go on for ``--grace`` seconds, then records an interrupt in each log
and exits; the next ``serve`` on that store resumes them. A second signal
interrupts at once.
"""

from __future__ import annotations

import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from _serve_process import ServeProcess
from _served_agents import read_sse
from anyio.abc import TaskStatus

from helix_agents.events import Interrupted, InterruptRequested
from helix_agents.log import project_state
from helix_agents.protocol import EndEvent
from helix_agents.server.serving.graceful import SHUTDOWN_REASON
from helix_agents.stores import SqliteEventStore
from helix_agents.transports.sse import SSEParser

pytestmark = pytest.mark.slow

SLOW = "tests.integration.slow_app:agents"
TIMEOUT = 60  # seconds; generous, the machine is shared
SESSIONS = ["nap-1", "nap-2"]


@asynccontextmanager
async def running(server: ServeProcess) -> AsyncIterator[ServeProcess]:
    try:
        await server.start()
        yield server
    finally:
        with anyio.CancelScope(shield=True):
            await server.stop()


async def start_sessions(url: str) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        for session_id in SESSIONS:
            response = await client.post(
                f"{url}/start",
                json={"sessionId": session_id, "agentType": "sleeper", "message": session_id},
            )
            assert response.status_code == 200, response.text
        for session_id in SESSIONS:  # each is waiting in its tool (its tool_start is logged)
            async with client.stream(
                "GET", f"{url}/sse", params={"sessionId": session_id}
            ) as stream:
                async for data in stream.aiter_text():
                    if "tool_start" in data:
                        break


async def follow(
    client: httpx.AsyncClient,
    url: str,
    session_id: str,
    into: list[str],
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Read the session's ``/sse`` stream to its end, its event kinds into ``into``."""
    parser = SSEParser()
    async with client.stream("GET", f"{url}/sse", params={"sessionId": session_id}) as response:
        assert response.status_code == 200
        task_status.started()
        async for data in response.aiter_bytes():
            into.extend(message.event for message in parser.feed(data))


async def refused(url: str) -> None:
    """Wait until connections to ``url`` are refused (the server stopped listening)."""
    async with httpx.AsyncClient(timeout=2) as client:
        while True:
            try:
                await client.get(f"{url}/health")
            except httpx.ConnectError:
                return
            except (httpx.ReadError, httpx.RemoteProtocolError):
                pass  # accepted as the listener closed, then dropped: stopping, not stopped
            await anyio.sleep(0.05)  # polling is the only signal a subprocess gives


async def stored_logs(db: Path) -> dict[str, list[object]]:
    async with SqliteEventStore(db) as store:
        return {session_id: list(await store.read(session_id)) for session_id in SESSIONS}


async def test_sigterm_interrupts_runs_after_the_grace_and_restart_resumes_them(
    tmp_path: Path,
) -> None:
    grace = 1.5
    server = ServeProcess(tmp_path, SLOW, "--grace", str(grace))
    with anyio.fail_after(TIMEOUT):
        async with running(server):
            await start_sessions(server.url)
            streamed: list[str] = []
            async with httpx.AsyncClient(timeout=30) as client, anyio.create_task_group() as tg:
                await tg.start(follow, client, server.url, SESSIONS[0], streamed)
                signalled = time.perf_counter()
                server.signal(signal.SIGTERM)
                await refused(server.url)
                assert time.perf_counter() - signalled < grace  # at once, not after the drain
                code = await server.wait()
            elapsed = time.perf_counter() - signalled
    assert code in (0, -signal.SIGTERM), server.output()
    assert grace <= elapsed < grace + 20, elapsed
    # The open stream ended with the interrupt, as a recoverable error.
    assert streamed[-1] == "error", streamed
    assert streamed.count("error") == 1
    logs = await stored_logs(server.db)
    for session_id, events in logs.items():
        requests = [event for event in events if isinstance(event, InterruptRequested)]
        assert [event.reason for event in requests] == [SHUTDOWN_REASON], session_id
        assert isinstance(events[-1], Interrupted), events[-1]
        assert project_state(events).status == "interrupted"  # type: ignore[arg-type]

    # Restarted on the same store (its tool no longer waits): both are resumed and complete.
    again = ServeProcess(tmp_path, SLOW, port=server.port, env={"SLOW_APP_QUICK": "1"})
    with anyio.fail_after(TIMEOUT):
        async with running(again), httpx.AsyncClient(timeout=30) as client:
            for session_id in SESSIONS:
                events = await read_sse(client, again.url, session_id)
                assert isinstance(events[-1], EndEvent), events[-1]
                status = await client.get(f"{again.url}/status", params={"sessionId": session_id})
                assert status.json()["status"] == "completed"
    assert "resumed 2 session(s) the last shutdown interrupted" in again.output()


async def test_a_second_signal_interrupts_at_once(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path, SLOW, "--grace", "600")
    with anyio.fail_after(TIMEOUT):
        async with running(server):
            await start_sessions(server.url)
            server.signal(signal.SIGTERM)
            await refused(server.url)
            server.signal(signal.SIGINT)
            code = await server.wait()
    assert code in (0, -signal.SIGTERM), server.output()
    for events in (await stored_logs(server.db)).values():
        assert isinstance(events[-1], Interrupted), events[-1]


async def test_without_runs_sigterm_exits_without_waiting_for_the_grace(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path, SLOW, "--grace", "600")
    with anyio.fail_after(TIMEOUT):
        async with running(server):
            server.signal(signal.SIGTERM)
            code = await server.wait()
    assert code in (0, -signal.SIGTERM), server.output()


async def test_ctrl_c_after_a_clean_drain_exits_0_quietly(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path, SLOW, "--grace", "600")
    with anyio.fail_after(TIMEOUT):
        async with running(server):
            server.signal(signal.SIGINT)
            code = await server.wait()
    assert code == 0, server.output()
    assert "error" not in server.output().lower()
    assert "interrupted" not in server.output()


async def test_a_second_ctrl_c_forces_the_stop_with_130(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path, SLOW, "--grace", "600")
    with anyio.fail_after(TIMEOUT):
        async with running(server):
            await start_sessions(server.url)
            server.signal(signal.SIGINT)
            await refused(server.url)
            server.signal(signal.SIGINT)
            code = await server.wait()
    assert code == 130, server.output()
    assert "helix-agents: interrupted" in server.output()
    assert "error: interrupted" not in server.output()
    for events in (await stored_logs(server.db)).values():
        assert isinstance(events[-1], Interrupted), events[-1]


PAUSED = "tests.integration.hitl_app:paused_agents"


async def test_a_stream_of_a_paused_session_ends_at_once_with_a_recoverable_error(
    tmp_path: Path,
) -> None:
    """SIGTERM with a long grace: the paused session's stream ends now, not after the grace."""
    server = ServeProcess(tmp_path, PAUSED, "--grace", "600")
    frames: list[tuple[str, str]] = []
    with anyio.fail_after(TIMEOUT):
        async with running(server), httpx.AsyncClient(timeout=30) as client:
            started = await client.post(
                f"{server.url}/start",
                json={"sessionId": "asks", "agentType": "asker", "message": "pick"},
            )
            assert started.status_code == 200, started.text
            parser = SSEParser()
            async with client.stream(
                "GET", f"{server.url}/sse", params={"sessionId": "asks"}
            ) as stream:
                chunks = stream.aiter_bytes()  # one iterator, read on after the signal
                async for data in chunks:
                    frames.extend((m.event, m.data) for m in parser.feed(data))
                    if any("tool_start" in text and "ask_user" in text for _, text in frames):
                        break  # paused: the client tool was handed out
                signalled = time.perf_counter()
                server.signal(signal.SIGTERM)
                async for data in chunks:
                    frames.extend((m.event, m.data) for m in parser.feed(data))
            ended_after = time.perf_counter() - signalled
            code = await server.wait()
    assert ended_after < 10, ended_after  # not the 600 s grace
    event, data = frames[-1]
    assert event == "error", frames[-3:]
    assert '"recoverable":true' in data
    assert code in (0, -signal.SIGTERM), server.output()
