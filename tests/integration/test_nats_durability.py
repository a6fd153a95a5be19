"""What an acknowledged append survives: the shipped nats-server configurations.

``deploy/nats/`` holds a durable single node (``sync_interval: always``) and
a 3-node cluster; each must be a valid configuration. The single node is
started from its file (on a loopback ephemeral port and a temporary store
given on the command line instead of its own),
writers append to many sessions at once, and the server is SIGKILLed right
after a number of acknowledged appends, with appends still in flight. After a
restart on the same store every acknowledged append is there, each log is
gap-free, and it holds exactly what was written (an append in flight at the
kill may or may not have landed, but never partly).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio
import pytest
from conftest import fresh_stream_name
from nats_server import NatsServer, nats_server_binary

from helix_agents.errors import HelixError
from helix_agents.events import Event, RunStarted, SessionCreated
from helix_agents.stores import JetStreamEventStore

pytestmark = [pytest.mark.slow, pytest.mark.nats]

ROOT = Path(__file__).parents[2]
CONFIGS = sorted((ROOT / "deploy" / "nats").glob("*.conf"))
LIMIT = 90
WRITERS = 8
KILL_AFTER = 150  # acknowledged appends before the SIGKILL


@pytest.mark.parametrize("config", CONFIGS, ids=[c.name for c in CONFIGS])
def test_the_shipped_configurations_are_valid(config: Path) -> None:
    checked = subprocess.run(
        [nats_server_binary(), "-t", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr + checked.stdout
    assert "is valid" in checked.stderr + checked.stdout


def test_the_configurations_cover_a_durable_node_and_a_three_node_cluster() -> None:
    names = [config.name for config in CONFIGS]
    assert names == ["cluster-n1.conf", "cluster-n2.conf", "cluster-n3.conf", "single-durable.conf"]
    assert "sync_interval: always" in (ROOT / "deploy/nats/single-durable.conf").read_text()


def _events(session_id: str, first: int, count: int) -> list[Event]:
    events: list[Event] = []
    for seq in range(first, first + count):
        if seq == 1:
            events.append(
                SessionCreated(session_id=session_id, seq=1, ts=1.0, agent_type="a", run_id="r")
            )
        else:
            events.append(RunStarted(session_id=session_id, seq=seq, ts=1.0, run_id=f"r{seq}"))
    return events


async def test_a_sync_always_node_killed_after_acks_keeps_every_acknowledged_append(
    tmp_path: Path,
) -> None:
    # The shipped file, its store directory left to the test (one on the command line).
    shipped = (ROOT / "deploy/nats/single-durable.conf").read_text()
    config = tmp_path / "single-durable.conf"
    config.write_text(
        "\n".join(line for line in shipped.splitlines() if "store_dir" not in line) + "\n"
    )
    stream = fresh_stream_name()
    acked: dict[str, list[Event]] = {f"w{n}": [] for n in range(WRITERS)}
    acks = 0
    killed = anyio.Event()
    server = NatsServer.start(tmp_path / "store", config=config)
    try:
        with anyio.fail_after(LIMIT):
            # No outage wait: the server stays dead, an append in flight must give up.
            store = await JetStreamEventStore.connect(
                server.url, stream=stream, request_timeout=2.0, publish_attempts=1, outage_wait=0
            )
            try:

                async def writer(session_id: str) -> None:
                    nonlocal acks
                    last = 0
                    while not killed.is_set():
                        batch = _events(session_id, last + 1, 1 + last % 3)
                        try:
                            last = await store.append(session_id, batch, last)
                        except HelixError:
                            return  # the server is gone: this append's fate is unknown
                        acked[session_id].extend(batch)
                        acks += 1
                        if acks == KILL_AFTER:
                            server.kill()  # SIGKILL, the other writers mid-append
                            killed.set()

                async with anyio.create_task_group() as tg:
                    for session_id in acked:
                        tg.start_soon(writer, session_id)
            finally:
                with anyio.move_on_after(5, shield=True):
                    await store.close()
            assert server.process.returncode == -9
            restarted = NatsServer.start(tmp_path / "store", config=config)
            try:
                reader = await JetStreamEventStore.connect(restarted.url, stream=stream)
                try:
                    logs = {sid: await reader.read(sid) for sid in acked}
                finally:
                    await reader.close()
            finally:
                restarted.stop()
    finally:
        server.stop()
    assert acks >= KILL_AFTER
    for session_id, written in acked.items():
        log = logs[session_id]
        assert [event.seq for event in log] == list(range(1, len(log) + 1)), session_id
        assert log[: len(written)] == written, session_id  # every acknowledged append
        # Beyond them at most the one append in flight at the kill, whole.
        assert len(log) - len(written) <= 3, session_id
