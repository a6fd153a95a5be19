"""SIGKILL a process appending to a JetStream store: no acknowledged append is lost.

The JetStream variant of ``test_sqlite_kill.py``, with the same worker (given a
``nats://`` URL) and the same checks: every acknowledged event is in the
stream, every log is gap-free, decodes and projects, and holds only whole
batches (a batch is one message), at most one beyond the acknowledged ones.
``HELIX_KILL_SEED=<seed>`` replays the kill points.
"""

from __future__ import annotations

import random
import uuid

import pytest
from nats_server import NatsServer
from test_sqlite_kill import BASE_SEED, ROUNDS, _run_and_kill, check_logs_after_kill

from helix_agents.stores import JetStreamEventStore


@pytest.mark.slow
@pytest.mark.nats
@pytest.mark.parametrize(("round_no", "ack_range"), ROUNDS)
async def test_no_acknowledged_append_is_lost_when_a_jetstream_writer_is_killed(
    nats_server: NatsServer, round_no: int, ack_range: tuple[int, int]
) -> None:
    seed = BASE_SEED + round_no
    rng = random.Random(seed)
    target = rng.randint(*ack_range)
    extra_delay = rng.uniform(0, 0.05)
    context = (
        f"jetstream, seed {seed} (HELIX_KILL_SEED={BASE_SEED}), kill after {target} acks "
        f"+ {extra_delay * 1000:.1f} ms"
    )
    stream = f"KILL{uuid.uuid4().hex[:12]}"
    url = f"{nats_server.url}?stream={stream}"

    acks = await _run_and_kill(url, target, extra_delay, context)

    assert acks.count >= target, context
    async with await JetStreamEventStore.connect(nats_server.url, stream=stream) as store:
        await check_logs_after_kill(store, acks, context)
