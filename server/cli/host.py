"""``helix-agents host``: run agents as one host of a NATS fleet (``specs/nats.md``)."""

from __future__ import annotations

import argparse
import logging
from typing import Any

import anyio

from helix_agents.server.agent_server import AgentServer
from helix_agents.server.cli.options import add_log_level, replica_count
from helix_agents.server.cli.serve import exporting_tracer
from helix_agents.server.cli.target import load_target, server_agents
from helix_agents.server.fleet.leases import DEFAULT_LEASE_TTL
from helix_agents.server.webhooks import WebhookSettings
from helix_agents.server.webhooks.options import add_webhook_arguments, webhook_settings

__all__ = ["add_host_command", "host_command", "run_host"]


async def run_host(
    spec: str,
    *,
    nats_url: str,
    lease_ttl: float = DEFAULT_LEASE_TTL,
    replicas: int = 1,
    log_level: str = "info",
    otel: bool = False,
    webhooks: WebhookSettings | None = None,
) -> None:
    """Run ``spec``'s agents as one host of the fleet on ``nats_url`` until SIGINT/SIGTERM.

    ``nats_url`` may list several servers of one cluster, comma-separated;
    ``replicas``: the copies of each message, if this host creates the stream.
    The host's log (stderr) shows records at ``log_level`` and above.
    ``otel``: trace the runs it hosts, exported over OTLP (as ``serve --otel``);
    the spans are flushed when it stops. ``webhooks``: deliver the webhooks of the
    fleet's sessions (every host may: a compare-and-append claims each attempt).
    """
    import signal

    from helix_agents.server.fleet.host import NatsAgentHost
    from helix_agents.server.fleet.runtime import NatsRuntime
    from helix_agents.stores.jetstream.store import JetStreamEventStore

    # A host's log on stderr: which sessions it runs, takes over, or fails to lease.
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("helix_agents").addHandler(handler)
    logging.getLogger("helix_agents").setLevel(log_level.upper())
    agents = server_agents(load_target(spec), spec)
    exporting = exporting_tracer() if otel else None
    store = await JetStreamEventStore.connect(nats_url, replicas=replicas)
    # One connection for the host's requests and its store's appends: they go out
    # in the same writes to the server.
    nc = store.connection
    try:
        # No wholesale recovery in a fleet: the other hosts' sessions are
        # running, on them; taking over is decided per session (specs/nats.md).
        tracer = exporting.tracer if exporting is not None else None
        fleet = NatsRuntime(nc, lease_ttl=lease_ttl, replicas=replicas)
        server = AgentServer(
            agents, store, recover=False, tracer=tracer, runtime=fleet, webhooks=webhooks
        )
        async with NatsAgentHost(server, run_schedules=True):
            print(
                f"helix-agents: hosting {', '.join(server.agent_types)} on {nats_url}",
                flush=True,
            )
            if exporting is not None:
                print(f"helix-agents: tracing to {exporting.destination}", flush=True)
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    break
    finally:
        await store.close()
        if exporting is not None:
            with anyio.move_on_after(10):  # the spans of the last runs leave before we do
                await anyio.to_thread.run_sync(exporting.flush, abandon_on_cancel=True)


def host_command(args: argparse.Namespace) -> int:
    """Run a parsed ``host`` command line; its exit status."""
    anyio.run(
        lambda: run_host(
            args.target,
            nats_url=args.nats,
            lease_ttl=args.lease_ttl,
            replicas=args.replicas,
            log_level=args.log_level,
            otel=args.otel,
            webhooks=webhook_settings(args),
        )
    )
    return 0


def add_host_command(commands: Any) -> None:
    """Add ``host`` and its arguments to the CLI's subcommands."""
    host = commands.add_parser(
        "host",
        help="run agents as one host of a NATS fleet",
        description="Run MODULE:ATTR's agents as a host of the fleet on --nats (specs/nats.md): "
        "session logs in JetStream, requests shared with the other hosts in a queue group.",
    )
    host.add_argument("target", metavar="MODULE:ATTR", help="the agents to host (as for serve)")
    host.add_argument(
        "--nats",
        metavar="URL",
        required=True,
        help="the NATS server (several servers of one cluster: comma-separated; required; "
        "credentials go in the URL, nats://user:password@host:4222)",
    )
    host.add_argument(
        "--replicas",
        type=replica_count,
        default=1,
        metavar="N",
        help="copies JetStream keeps of each message (1-5), if this host creates the stream "
        "(specs/nats.md, 'Durability'; default: %(default)s)",
    )
    host.add_argument(
        "--lease-ttl",
        type=float,
        default=DEFAULT_LEASE_TTL,
        metavar="SECONDS",
        help="how long a dead host's sessions wait before another host takes them over "
        "(default: %(default)s)",
    )
    add_log_level(host)
    host.add_argument(
        "--otel",
        action="store_true",
        help="trace the runs this host runs with OpenTelemetry, as serve --otel does "
        "(OTLP/HTTP to $OTEL_EXPORTER_OTLP_ENDPOINT; the otel extra; default: off)",
    )
    add_webhook_arguments(host)
    host.set_defaults(handler=host_command)
