"""Soak: a 5-host fleet on a 3-node cluster runs many 3-deep trees while 2 hosts and a node die.

Three nats-server nodes (loopback, JetStream, the stream and the lease and
hosts buckets at 3 replicas) and five ``helix-agents host`` processes serving
``soak_app``: ``soak_root`` delegates to ``soak_mid``, which delegates to
``soak_leaf``, each call over NATS, so a tree spans hosts. This process
starts :data:`SESSIONS` roots through the NATS transport, at most
:data:`CONCURRENCY` at once, and follows every root's stream live (re-opened
from the last sequence held when it drops, as a client does).

A seeded schedule (``HELIX_SOAK_SEED``, printed) SIGKILLs two distinct hosts
and one NATS node, by PID, each once a seeded number of roots has completed
(plus a seeded fraction of a second): the moments fall inside the run, and a
run repeats with its seed. Killed hosts stay dead; the node stays dead (two of
three keep the quorum). The hosts' sessions are taken over by the survivors
once their leases lapse.

Checked afterwards, from the event store: every root, mid and leaf session
exists and completed, with the right output; each log's seqs run 1..n; every
stream a client read equals its log's stream (no gap, no duplicate, in
order), and every parent forwarded each of its child's chunks once; each run
that was cut (a ``run_started`` with no end before the next ``run_started``)
was claimed by exactly one ``host_claimed`` (one more only if the claimer was
itself killed before resuming it), and no live run was claimed; the kills cut
runs (orphans exist, and were taken over).

Bounded: a watchdog stops a run in which no root completes for
:data:`STALL` seconds, and reports where this process's streams and the
hosts' sub-agent calls wait (``soak_app`` dumps a host's tasks on SIGUSR1).

``HELIX_SOAK_SESSIONS`` sets the number of roots (default: 200 in CI's run, 500 in the
long run, ``HELIX_BUDGET=long``: tests/budgets.py).
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import sys
import time
from collections import Counter
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import nats
import pytest
from anyio.abc import Process
from budgets import budget
from nats.aio.client import Client as NatsClient
from nats_cluster import NODES, NatsCluster
from soak_app import NATS_ENV, await_chain, expected_output
from test_nats_cluster import _connect_r3
from test_nats_fleet import _process

from helix_agents.errors import AgentServerError, TransportError
from helix_agents.events import (
    Aborted,
    ChildChunkForwarded,
    Completed,
    Event,
    Failed,
    HostClaimed,
    Interrupted,
    RunStarted,
    Suspended,
)
from helix_agents.log import project_state, project_stream
from helix_agents.protocol import ChunkEvent, EndEvent, ErrorEvent, RemoteStartRequest
from helix_agents.server.fleet.host import ANNOUNCE_EVERY
from helix_agents.server.fleet.leases import LEASE_BUCKET, lease_key
from helix_agents.stores import JetStreamEventStore
from helix_agents.transports.nats import HOSTS_BUCKET, NatsRemoteAgentTransport

pytestmark = [pytest.mark.slow, pytest.mark.nats]

SESSIONS = int(os.environ.get("HELIX_SOAK_SESSIONS", str(budget(ci=200, long=500))))
SEED = int(os.environ.get("HELIX_SOAK_SEED", str(random.SystemRandom().randrange(10**6))))
HOSTS = 5
CONCURRENCY = 24  # roots in flight at once
TTL = 2.0  # the hosts' lease TTL: a dead host's sessions are claimed within about 1.5 TTL
LIMIT = 300  # the whole test, bounded
RUN_LIMIT = 200  # the roots' part of it
STALL = 60  # seconds without a root completing: stuck (a takeover needs a few)
START_TRIES = 20  # a start answered 503 UNAVAILABLE is tried again, this many times at most
STREAM_DROPS = 30  # a root's stream may drop this many times in a row (a node died)
TARGET = "tests.integration.soak_app:agents"
_RUNS = re.compile(r"host (\S+) (?:runs|takes over session) ")
_ENDS = (Completed, Failed, Interrupted, Aborted, Suspended)


@dataclass
class Kill:
    """One scheduled SIGKILL: what, and after how many completed roots (plus a delay)."""

    what: str  # "host N" or a node's name
    after: int
    delay: float
    at: float | None = None  # seconds into the run when it was done
    done: anyio.Event = field(default_factory=anyio.Event)


def schedule(rng: random.Random, sessions: int) -> list[Kill]:
    """Two distinct hosts and one node, each killed at a seeded point of the run."""
    hosts = rng.sample(range(HOSTS), 2)
    node = rng.choice(NODES)
    span = max(sessions, 10)
    kills = [
        Kill(f"host {hosts[0]}", rng.randint(span // 10, span * 4 // 10), rng.uniform(0, 0.5)),
        Kill(f"host {hosts[1]}", rng.randint(span * 3 // 10, span * 7 // 10), rng.uniform(0, 0.5)),
        Kill(node, rng.randint(span * 2 // 10, span * 6 // 10), rng.uniform(0, 0.5)),
    ]
    return sorted(kills, key=lambda kill: kill.after)


class Progress:
    """Completed roots, and a way to wait for a count."""

    def __init__(self) -> None:
        self.completed = 0
        self._grew = anyio.Event()

    def one_more(self) -> None:
        self.completed += 1
        self._grew.set()
        self._grew = anyio.Event()

    async def reach(self, count: int) -> None:
        while self.completed < count:
            await self._grew.wait()


async def _run_root(
    remote: NatsRemoteAgentTransport,
    root: str,
    read: dict[str, list[ChunkEvent]],
    late_starts: list[str],
    unavailable: list[str],
) -> EndEvent | ErrorEvent:
    """Start ``root`` and follow its stream to its end, re-opening it after each drop."""
    request = RemoteStartRequest(session_id=root, agent_type="soak_root", message=root)
    for attempt in range(1, START_TRIES + 1):
        try:
            await remote.start(request)
            break
        except AgentServerError as exc:
            if exc.code == "ALREADY_COMPLETED":
                # The transport retried a start whose answer was lost (a node died
                # under it) and the session, ours, has ended since: its stream says how.
                late_starts.append(root)
                break
            if exc.code != "UNAVAILABLE" or attempt == START_TRIES:
                raise
            # 503: a retried start met the lease of the host that took the first
            # try, and that host did not answer in time. Try again, as for any 5xx.
            unavailable.append(root)
            await anyio.sleep(0.5)
    chunks = read[root] = []
    drops = 0
    while True:
        held = chunks[-1].sequence if chunks else 0
        try:
            async for event in remote.stream(root, held):
                if isinstance(event, ChunkEvent):
                    chunks.append(event)
                else:
                    return event
        except (TransportError, AgentServerError) as exc:
            if isinstance(exc, AgentServerError) and exc.code != "UNAVAILABLE":
                raise
        # Dropped (a node died under the tail): only drops without progress count.
        drops = 1 if chunks and chunks[-1].sequence > held else drops + 1
        assert drops <= STREAM_DROPS, f"{root}: its stream keeps dropping"
        await anyio.sleep(min(0.1 * drops, 1.0))


def _render(log: list[Event]) -> str:
    """A log in one line: each event's seq and type (a run's mode, a claim's host)."""
    parts = []
    for event in log:
        what = type(event).__name__
        if isinstance(event, RunStarted):
            what += f"({event.mode})"
        elif isinstance(event, HostClaimed):
            what += f"({event.host_id})"
        parts.append(f"{event.seq}:{what}")
    return " ".join(parts)


def _cut_runs(session: str, log: list[Event], killed_ids: set[str]) -> tuple[int, int]:
    """Check one log's runs and claims; return (cut runs, claims).

    A run is cut when a ``run_started`` follows it without an end between. Each
    cut run is claimed by exactly one ``host_claimed`` before the next run,
    except that a claimer killed before resuming it is followed by one more
    claim; a claim never lands on a run that ended.
    """
    cut = claims = 0
    open_run = False
    window: list[HostClaimed] = []
    for event in log:
        if isinstance(event, RunStarted):
            if open_run:
                cut += 1
                assert window, f"{session}: seq {event.seq} begins a run beside a live one: " + (
                    _render(log)
                )
                assert all(c.host_id in killed_ids for c in window[:-1]), (
                    f"{session}: claimed {len(window)} times before seq {event.seq}: {window}"
                )
            window = []
            open_run = True
        elif isinstance(event, HostClaimed):
            assert open_run, f"{session}: seq {event.seq} claims a run that had ended"
            window.append(event)
            claims += 1
        elif isinstance(event, _ENDS):
            assert not window, f"{session}: claimed at {window} but the run then ended"
            open_run = False
    assert not window, f"{session}: claimed at the end of its log, never resumed"
    return cut, claims


async def _stuck(
    store: JetStreamEventStore, nc: NatsClient, pending: list[str], host_logs: list[Path]
) -> str:
    """Where unfinished trees stand (status, last events, lease, host lines); the hosts' logs."""
    lines: list[str] = []
    leases = await nc.jetstream().key_value(LEASE_BUCKET)
    texts = [path.read_text(errors="replace").splitlines() for path in host_logs]
    for root in pending[:5]:
        for session in (root, f"{root}-remote-c1", f"{root}-remote-c1-remote-c1"):
            try:
                log = await store.read(session)
            except Exception as exc:
                lines.append(f"{session}: unreadable: {exc!r}")
                continue
            status = project_state(log).status if log else "absent"
            tail = [type(event).__name__ for event in log[-6:]]
            try:
                holder = (await leases.get(lease_key(session))).value
            except Exception as exc:
                holder = repr(exc)
            lines.append(f"{session}: {status}, {len(log)} events, last {tail}, lease {holder}")
            for n, text in enumerate(texts):
                lines.extend(f"  host{n}: {line}" for line in text if f" {session}" in line)
    # Where this process's root tasks wait.
    for task in asyncio.all_tasks():
        chain = await_chain(task)
        ends_in = (" _run_root", " pump", " _tail", " stream_session")
        if any(line.endswith(ends_in) for line in chain):
            lines.append("\n  ".join(["client task:", *chain]))
    # The client store's own watch (a client stream that never ends); its
    # internals, read for this report only, may change: best effort.
    try:
        notifier, watch = store._notifier, store._watch.consumer
        lines.append(
            f"client store: watch {watch is not None}, polling {notifier._polling}, "
            f"idle {len(notifier._idle)}, watched {len(notifier.watched())}, "
            f"reconnects {store._nc.stats['reconnects']}, connected to {store._nc.connected_url}"
        )
        if watch is not None:
            info = await watch.consumer_info()
            lines.append(f"  consumer {info.name}: {info.num_pending} pending, {info.delivered}")
    except Exception as exc:
        lines.append(f"client store: {exc!r}")
    for path in host_logs:
        text = path.read_text(errors="replace").splitlines()
        interesting = [line for line in text if "WARNING" in line or "ERROR" in line]
        lines.append(f"--- {path.name}: " + "\n".join([*interesting[-15:], *text[-8:]]))
    return "\n".join(lines)


async def _buckets_r3(nc: NatsClient) -> None:
    """Create the lease and hosts buckets at 3 replicas, as the hosts would, within a bound.

    A host creates them itself (``--replicas 3``) when missing, but on a
    loaded machine a fresh cluster can take longer to place them than a
    host's start allows; made here, the hosts only open them.
    """
    js = nc.jetstream(timeout=10.0)
    with anyio.fail_after(60):
        for bucket, ttl in ((LEASE_BUCKET, TTL), (HOSTS_BUCKET, 3 * ANNOUNCE_EVERY)):
            while True:
                try:
                    await js.create_key_value(bucket=bucket, ttl=ttl, replicas=3)
                    break
                except Exception:  # no suitable peers yet, or a timeout: again
                    await anyio.sleep(0.25)


async def _read_all(store: JetStreamEventStore, sessions: list[str]) -> dict[str, list[Event]]:
    logs: dict[str, list[Event]] = {}
    limiter = anyio.Semaphore(32)

    async def one(session: str) -> None:
        async with limiter:
            logs[session] = await store.read(session)

    async with anyio.create_task_group() as tg:
        for session in sessions:
            tg.start_soon(one, session)
    return logs


async def test_a_fleet_finishes_every_tree_while_hosts_and_a_node_are_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(SEED)
    kills = schedule(rng, SESSIONS)
    print(f"\nsoak: seed {SEED} (HELIX_SOAK_SEED), {SESSIONS} roots, kills {kills}")
    roots = [f"soak-{n:04d}" for n in range(SESSIONS)]
    read: dict[str, list[ChunkEvent]] = {}
    ends: dict[str, EndEvent | ErrorEvent] = {}
    late_starts: list[str] = []
    unavailable: list[str] = []
    progress = Progress()
    logs_dir = tmp_path / "logs"
    logs_dir.mkdir()
    host_logs = [logs_dir / f"host{n}.log" for n in range(HOSTS)]
    load_before = os.getloadavg()
    with NatsCluster.start(tmp_path / "nats") as cluster, anyio.fail_after(LIMIT):
        monkeypatch.setenv(NATS_ENV, cluster.url)  # the hosts' own remote calls
        setup = await _connect_r3(cluster.url)  # the stream, at 3 replicas
        nc = await nats.connect(
            servers=cluster.url.split(","), allow_reconnect=True, max_reconnect_attempts=-1
        )
        try:
            await _buckets_r3(nc)
            host_args = [
                *("host", TARGET, "--nats", cluster.url),
                *("--lease-ttl", str(TTL), "--replicas", "3"),
            ]
            async with AsyncExitStack() as stack:
                hosts: list[Process] = []
                for log in host_logs:
                    hosts.append(
                        await stack.enter_async_context(
                            _process(host_args, log, "helix-agents: hosting")
                        )
                    )
                remote = NatsRemoteAgentTransport(
                    nc, setup, timeout=5.0, max_retries=6, retry_base_delay=0.2
                )
                started = time.monotonic()

                async def kill_on_schedule(kill: Kill) -> None:
                    await progress.reach(kill.after)
                    await anyio.sleep(kill.delay)
                    kill.at = time.monotonic() - started
                    if kill.what.startswith("host "):
                        hosts[int(kill.what.split()[1])].kill()  # SIGKILL, by PID
                    else:
                        await anyio.to_thread.run_sync(cluster.kill, kill.what)
                    kill.done.set()

                limiter = anyio.Semaphore(CONCURRENCY)

                async def root_task(root: str) -> None:
                    async with limiter:
                        ends[root] = await _run_root(remote, root, read, late_starts, unavailable)
                        progress.one_more()

                stuck: list[str] = []

                async def watchdog(scope: anyio.CancelScope) -> None:
                    """No root done for STALL seconds: report where things wait, then stop."""
                    last, since = -1, time.monotonic()
                    while True:
                        await anyio.sleep(1)
                        if progress.completed != last:
                            last, since = progress.completed, time.monotonic()
                        elif time.monotonic() - since > STALL:
                            break
                    for host in hosts:
                        if host.returncode is None:
                            host.send_signal(signal.SIGUSR1)  # soak_app dumps its tasks
                    await anyio.sleep(2)
                    pending = [root for root in roots if root not in ends]
                    stuck.append(
                        f"seed {SEED}: {len(pending)} roots unfinished, none done for {STALL} s; "
                        f"kills {kills}; hosts' exit codes {[h.returncode for h in hosts]}\n"
                        f"{await _stuck(setup, nc, pending, host_logs)}"
                    )
                    scope.cancel()

                with anyio.move_on_after(RUN_LIMIT) as run_scope:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(watchdog, run_scope)
                        for kill in kills:
                            tg.start_soon(kill_on_schedule, kill)
                        async with anyio.create_task_group() as roots_tg:
                            for root in roots:
                                roots_tg.start_soon(root_task, root)
                        with anyio.fail_after(5):  # every kill point lies inside the run
                            for kill in kills:
                                await kill.done.wait()
                        tg.cancel_scope.cancel()  # the watchdog
                took = time.monotonic() - started
                if stuck:
                    pytest.fail(stuck[0])
                assert not run_scope.cancelled_caught, f"seed {SEED}: not done in {RUN_LIMIT} s"
                # The fleet, quiet: a fresh store on the two surviving nodes reads every log.
                reader = await JetStreamEventStore.connect(cluster.url)
                try:
                    sessions = await reader.list_sessions()
                    logs = await _read_all(reader, sessions)
                finally:
                    await reader.close()
                exit_codes = [host.returncode for host in hosts]
        finally:
            await nc.close()
            await setup.close()
    load_after = os.getloadavg()

    # --- what the logs say ----------------------------------------------------------
    killed = [int(kill.what.split()[1]) for kill in kills if kill.what.startswith("host ")]
    host_ids: list[set[str]] = [
        set(_RUNS.findall(path.read_text(errors="replace"))) for path in host_logs
    ]
    killed_ids = set().union(*(host_ids[n] for n in killed))
    for n in range(HOSTS):
        assert len(host_ids[n]) <= 1, host_ids[n]  # one id per host process
        assert (exit_codes[n] == -9) == (n in killed), exit_codes  # the others left cleanly
    tails = ("", "-remote-c1", "-remote-c1-remote-c1")
    tree = {f"{root}{tail}" for root in roots for tail in tails}
    unfinished = {
        session: (state.status, state.error)
        for session in sessions
        if (state := project_state(logs[session])).status != "completed"
    }
    assert not unfinished, f"seed {SEED}: {unfinished}"
    assert set(sessions) == tree
    cut_runs = claims = 0
    orphans: list[str] = []
    claimers: Counter[str] = Counter()
    for session in sorted(tree):
        log = logs[session]
        assert [event.seq for event in log] == list(range(1, len(log) + 1)), session
        state = project_state(log)
        assert state.status == "completed", (session, state.status, state.error)
        cut, claimed = _cut_runs(session, log, killed_ids)
        if cut:
            orphans.append(session)
        cut_runs += cut
        claims += claimed
        claimers.update(e.host_id for e in log if isinstance(e, HostClaimed))
        # Each parent forwarded every chunk of its child once, in order.
        child = f"{session}-remote-c1"
        if child in tree:
            forwarded = [
                e.child_seq
                for e in log
                if isinstance(e, ChildChunkForwarded) and e.child_session_id == child
            ]
            assert forwarded == [item.sequence for item in project_stream(logs[child])], child
    for root in roots:
        end = ends[root]
        assert isinstance(end, EndEvent), (root, end)
        assert end.output == expected_output(root)
        # What the client read live, through the kills, is the log's stream exactly.
        live = [(chunk.sequence, chunk.chunk) for chunk in read[root]]
        assert live == [(item.sequence, item.chunk) for item in project_stream(logs[root])], root
    assert cut_runs > 0  # the kills caught runs
    assert not claimers.keys() - set().union(*host_ids)
    figures = (
        f"soak: seed {SEED}: {SESSIONS} roots ({len(tree)} sessions) in {took:.1f} s; "
        f"kills {[(kill.what, kill.after, round(kill.at or 0, 1)) for kill in kills]}; "
        f"{cut_runs} cut runs in {len(orphans)} sessions, {claims} claims "
        f"({dict(claimers)}); {len(late_starts)} late starts, "
        f"{len(unavailable)} starts answered 503; "
        f"stream reads {sum(len(c) for c in read.values())} chunks; "
        f"load {load_before[0]:.1f} -> {load_after[0]:.1f}"
    )
    print(figures)
    sys.stdout.flush()
