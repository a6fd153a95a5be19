"""``helix-agents worker APP --temporal ADDRESS`` and ``serve APP --temporal ADDRESS``.

The worker runs APP's agents as Temporal workflows (``helix_agents.temporal``,
the ``temporal`` extra), appending every event to ``--store``; ``serve
--temporal`` is the gateway starting those workflows, with the HTTP routes
unchanged. Give both the same store, task queue and namespace
(``specs/temporal.md``).
"""

from __future__ import annotations

import argparse
import signal
from collections.abc import Callable
from typing import Any

import anyio

from helix_agents.agents.config import AgentConfig
from helix_agents.errors import UsageError
from helix_agents.log.store import EventStore
from helix_agents.runtime import Runtime
from helix_agents.server.cli.options import store_url
from helix_agents.server.cli.target import TargetError, chat_agents
from helix_agents.stores import open_store
from helix_agents.tracing import Tracer

__all__ = ["RuntimeFactory", "add_temporal_commands", "runtime_factory", "worker_command"]

RuntimeFactory = Callable[[], Runtime]
"""How ``serve`` makes the runtime its server runs the sessions on (one per server)."""


def _temporal_options(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument(
        "--temporal",
        metavar="ADDRESS",
        required=required,
        help="run the sessions as Temporal workflows, on the Temporal frontend at host:port"
        + ("" if required else " (workers: helix-agents worker; default: the built-in runtime)"),
    )
    parser.add_argument(
        "--task-queue",
        default="helix-agents",
        help="with --temporal: the task queue (default: %(default)s)",
    )
    parser.add_argument(
        "--namespace",
        default="default",
        help="with --temporal: the Temporal namespace (default: %(default)s)",
    )


def _dbos_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dbos",
        metavar="URL",
        help="run the sessions as DBOS workflows in this process, DBOS's system database at "
        "URL (sqlite:///FILE, or postgresql://... shared with more workers; default: none, "
        "serve runs the built-in runtime and worker needs this or --temporal)",
    )


def _heartbeat_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="a worker silent this long is presumed dead and its sessions move on: Temporal, "
        "a step's heartbeat timeout (give the gateway and the workers the same); DBOS on "
        "Postgres, the silence after which a live worker takes its workflows over "
        "(default: 2)",
    )


def add_temporal_commands(commands: Any, store_help: str) -> None:
    """Add ``worker`` to the CLI, and ``--temporal``/``--dbos`` to ``serve``."""
    _temporal_options(commands.choices["serve"], required=False)
    _dbos_option(commands.choices["serve"])
    _heartbeat_option(commands.choices["serve"])
    worker = commands.add_parser(
        "worker",
        help="run agents as Temporal or DBOS workflows",
        description="Run MODULE:ATTR's agents as Temporal workflows (the temporal extra) or "
        "DBOS workflows (the dbos extra), appending to --store; start them with "
        "'helix-agents serve MODULE:ATTR --temporal' (or --dbos).",
    )
    worker.add_argument("target", metavar="MODULE:ATTR", help="the agents (as for serve)")
    worker.add_argument("--store", metavar="URL", help=store_help)
    _temporal_options(worker, required=False)
    _dbos_option(worker)
    _heartbeat_option(worker)
    worker.add_argument(
        "--otel",
        action="store_true",
        help="trace the runs' steps this worker runs with OpenTelemetry, as serve --otel does "
        "(OTLP/HTTP to $OTEL_EXPORTER_OTLP_ENDPOINT; the otel extra; default: off)",
    )
    worker.set_defaults(handler=worker_command)


def _options(args: argparse.Namespace) -> Any:
    try:
        from helix_agents.temporal import TemporalOptions
    except ImportError as exc:
        raise UsageError(
            f"--temporal needs the temporal extra: pip install 'helix-agents[temporal]' ({exc})"
        ) from exc
    beat = _heartbeat_timeout(args)
    return TemporalOptions(
        address=args.temporal,
        namespace=args.namespace,
        task_queue=args.task_queue,
        heartbeat_timeout=TemporalOptions.heartbeat_timeout if beat is None else beat,
    )


def _heartbeat_timeout(args: argparse.Namespace) -> float | None:
    """``--heartbeat-timeout`` (None: the engine's default); above 0 or a ``UsageError``."""
    beat: float | None = getattr(args, "heartbeat_timeout", None)
    if beat is not None and not beat > 0:
        raise UsageError("--heartbeat-timeout must be above 0")
    return beat


def _dbos_options(args: argparse.Namespace) -> Any:
    try:
        from helix_agents.dbos import DbosOptions
    except ImportError as exc:
        raise UsageError(
            f"--dbos needs the dbos extra: pip install 'helix-agents[dbos]' ({exc})"
        ) from exc
    if not args.dbos.startswith(("sqlite:///", "postgresql://", "postgres://")):
        raise UsageError("--dbos takes sqlite:///FILE or postgresql://...")
    if args.namespace != "default":
        raise UsageError("--namespace is Temporal's, not --dbos's")
    beat = _heartbeat_timeout(args)
    if not args.dbos.startswith("sqlite:///"):
        # Postgres: a worker silent this long is presumed dead; a live one takes over.
        after = DbosOptions.takeover_after if beat is None else beat
        return DbosOptions(system_database=args.dbos, queue=args.task_queue, takeover_after=after)
    if beat is not None:
        raise UsageError("--heartbeat-timeout with --dbos is for Postgres (SQLite is one process)")
    return DbosOptions(system_database=args.dbos, queue=args.task_queue)


def runtime_factory(args: argparse.Namespace) -> RuntimeFactory | None:
    """For ``serve --temporal``/``--dbos``: the runtime of the gateway's server (None without)."""
    if getattr(args, "dbos", None) is not None:
        if args.temporal is not None or args.nats is not None:
            raise TargetError("serve takes one of --dbos, --temporal and --nats")
        dbos = _dbos_options(args)

        def dbos_runtime() -> Runtime:
            from helix_agents.dbos import DbosRuntime

            return DbosRuntime(dbos)

        return dbos_runtime
    if args.temporal is None:
        if getattr(args, "heartbeat_timeout", None) is not None:
            raise UsageError("--heartbeat-timeout is for --temporal or --dbos postgresql://...")
        return None
    if args.nats is not None:
        raise TargetError("serve takes --temporal or --nats, not both")
    options = _options(args)

    def temporal_runtime() -> Runtime:
        from helix_agents.temporal import TemporalRuntime

        return TemporalRuntime(options)

    return temporal_runtime


def worker_command(args: argparse.Namespace) -> int:
    """Run a parsed ``worker`` command line until SIGINT or SIGTERM; its exit status."""
    url = store_url(args.store)
    if (args.temporal is None) == (args.dbos is None):
        raise UsageError("worker takes --temporal ADDRESS or --dbos URL (one of them)")
    if args.dbos is not None:
        dbos = _dbos_options(args)
        agents = chat_agents(args.target)

        def dbos_worker(store: EventStore, tracer: Tracer | None) -> Any:
            from helix_agents.dbos import DbosWorker

            return DbosWorker(agents, store, dbos, tracer=tracer)

        where = f"DBOS queue {dbos.queue!r}"
        return _work(url, agents, dbos_worker, where, otel=args.otel)
    options = _options(args)
    agents = chat_agents(args.target)

    def temporal_worker(store: EventStore, tracer: Tracer | None) -> Any:
        from helix_agents.temporal import TemporalWorker

        return TemporalWorker(agents, store, options, tracer=tracer)

    where = f"task queue {options.task_queue!r} at {options.address}"
    return _work(url, agents, temporal_worker, where, otel=args.otel)


def _work(
    url: str,
    agents: list[AgentConfig],
    make: Callable[[EventStore, Tracer | None], Any],
    where: str,
    *,
    otel: bool,
) -> int:
    """Run the worker ``make`` builds until SIGINT or SIGTERM, then leave cleanly."""
    exporting = None
    if otel:
        try:
            from helix_agents.otel.export import exporting_tracer
        except ImportError as exc:
            raise UsageError(
                "--otel needs OpenTelemetry: pip install 'helix-agents[otel]'"
            ) from exc
        exporting = exporting_tracer()

    async def work() -> None:
        store = await open_store(url)
        try:
            tracer = exporting.tracer if exporting is not None else None
            async with make(store, tracer):
                names = ", ".join(sorted(agent.name for agent in agents))
                print(f"helix-agents: worker for {names} on {where}", flush=True)
                if exporting is not None:
                    print(f"helix-agents: tracing to {exporting.destination}", flush=True)
                await _signalled()
        finally:
            await store.close()
            if exporting is not None:
                with anyio.move_on_after(10):  # the last steps' spans leave before we do
                    await anyio.to_thread.run_sync(exporting.flush, abandon_on_cancel=True)

    anyio.run(work)
    return 0


async def _signalled() -> None:
    """Return on SIGINT or SIGTERM."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            return
