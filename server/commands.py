"""The CLI commands that serve or re-run agents: ``serve``, ``openapi``, ``replay --rerun``.

Kept apart from ``cli.py`` (which reads logs) because these load user code
(``MODULE:ATTR``) and run servers.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import math
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from helix_agents import (
    AgentConfig,
    AgentExecutor,
    AgentRegistry,
    MemoryWorkspaceProvider,
    RemoteStartRequest,
    ReplayLLM,
    SessionCreated,
    WorkspaceProvider,
    project_state,
)
from helix_agents.stores import MemoryEventStore, open_store

from .agent_server import AgentServer
from .http_app import create_http_app
from .limits import (
    DEFAULT_GRACE,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_KEEP_ALIVE,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_STREAMS,
    LISTEN_BACKLOG,
    StreamLimit,
    bounded_http_protocol,
    fit_descriptor_limit,
    quiet_accept_errors,
)
from .openapi import openapi_document

if TYPE_CHECKING:
    from nats.aio.client import Client as NatsClient

    from .graceful import GracefulServer

__all__ = [
    "ServeLimits",
    "TargetError",
    "add_commands",
    "load_target",
    "rerun_lines",
    "run_host",
    "run_openapi",
    "run_serve",
    "serve_limits",
    "uvicorn_config",
]


@dataclass(frozen=True)
class ServeLimits:
    """The bounds ``serve`` runs under (``specs/cli.md``); the defaults are the flags' defaults."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    keep_alive: int = DEFAULT_KEEP_ALIVE
    max_streams: int = DEFAULT_MAX_STREAMS
    grace: float = DEFAULT_GRACE


class TargetError(Exception):
    """``MODULE:ATTR`` could not be loaded or is not agents / an AgentServer."""


def load_target(spec: str) -> Any:
    """Import ``MODULE:ATTR`` (the working directory is importable) and return the attribute."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise TargetError(f"expected MODULE:ATTR, not {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TargetError(f"cannot import {module_name!r}: {exc}") from exc
    target = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise TargetError(f"{module_name!r} has no attribute {attr!r}") from None
    return target


def _agents(target: Any, spec: str) -> list[AgentConfig]:
    if isinstance(target, AgentConfig):
        return [target]
    if isinstance(target, Mapping):
        values: Iterable[Any] = target.values()
    elif isinstance(target, list | tuple):
        values = target
    else:
        raise TargetError(f"{spec} is not an AgentServer, an agent, or a dict/list of agents")
    agents = list(values)
    if not agents or not all(isinstance(agent, AgentConfig) for agent in agents):
        raise TargetError(f"{spec} must hold agents built with define_agent")
    return agents


async def run_serve(
    spec: str | None,
    *,
    host: str,
    port: int,
    url: str,
    heartbeat: float,
    nats_url: str | None,
    limits: ServeLimits | None = None,
) -> None:
    """Serve ``spec`` (an AgentServer, or agents run on the store at ``url``) under uvicorn.

    With ``nats_url`` and no ``spec``, the gateway has no agents of its own: it
    fronts the fleet of ``helix-agents host`` processes on that NATS server.
    ``limits`` bounds connections, header and keep-alive times, open streams
    and the shutdown (:class:`ServeLimits`).
    """
    limits = limits or ServeLimits()
    if nats_url is not None:
        if spec is not None:
            raise TargetError("serve takes MODULE:ATTR or --nats, not both")
        await _serve_fleet(nats_url, host=host, port=port, heartbeat=heartbeat, limits=limits)
        return
    if spec is None:
        raise TargetError("serve needs MODULE:ATTR, or --nats URL to front a fleet")
    target = load_target(spec)
    if isinstance(target, AgentServer):
        server = target
    else:
        agents = _agents(target, spec)
        # The server owns the store, so the app's lifespan closes it: uvicorn
        # re-raises SIGTERM after a graceful shutdown, so code after serve()
        # would never run.
        server = AgentServer(agents, await open_store(url), owns_store=True)
    app = create_http_app(server, heartbeat_interval=heartbeat)
    print(f"helix-agents: serving {', '.join(server.agent_types)} on http://{host}:{port}")
    await _bounded(app, host=host, port=port, limits=limits, agents=server).serve()


def _bounded(
    app: Any, *, host: str, port: int, limits: ServeLimits, agents: AgentServer | None
) -> GracefulServer:
    """uvicorn for ``app``, under ``limits``."""
    from .graceful import GracefulServer

    quiet_accept_errors()
    config = uvicorn_config(
        StreamLimit(app, max_streams=limits.max_streams),
        host=host,
        port=port,
        http=bounded_http_protocol(
            fit_descriptor_limit(limits.max_connections), limits.header_timeout
        ),
        timeout_keep_alive=limits.keep_alive,
        backlog=LISTEN_BACKLOG,
        timeout_graceful_shutdown=None,  # the grace bounds the drain
    )
    return GracefulServer(config, grace=limits.grace, agents=agents)


def uvicorn_config(app: Any, **options: Any) -> Any:
    """``uvicorn.Config`` as ``serve`` uses it (imported late: uvicorn is only for serving).

    helix-agents' own log records (``helix_agents.*``: recoveries, damaged
    stores, shutdowns) go where uvicorn's go, at INFO.
    """
    import copy

    import uvicorn
    from uvicorn.config import LOGGING_CONFIG

    log_config = copy.deepcopy(LOGGING_CONFIG)
    log_config["loggers"]["helix_agents"] = {
        "handlers": ["default"],
        "level": "INFO",
        "propagate": False,
    }
    return uvicorn.Config(
        app, log_level="info", log_config=log_config, lifespan="on", ws="none", **options
    )


async def _serve_fleet(
    nats_url: str, *, host: str, port: int, heartbeat: float, limits: ServeLimits
) -> None:
    from helix_agents.stores.jetstream import JetStreamEventStore
    from helix_agents.transports.nats import NatsRemoteAgentTransport

    store = await JetStreamEventStore.connect(nats_url)
    nc = await _connect_nats(nats_url)
    try:
        app = create_http_app(NatsRemoteAgentTransport(nc, store), heartbeat_interval=heartbeat)
        print(f"helix-agents: serving the fleet on {nats_url} at http://{host}:{port}")
        await _bounded(app, host=host, port=port, limits=limits, agents=None).serve()
    finally:
        await nc.close()
        await store.close()


async def _connect_nats(nats_url: str) -> NatsClient:
    """Connect to every server ``nats_url`` lists (comma-separated), reconnecting for ever."""
    import nats

    from helix_agents.stores.jetstream import nats_servers

    return await nats.connect(
        servers=nats_servers(nats_url), allow_reconnect=True, max_reconnect_attempts=-1
    )


async def run_host(spec: str, *, nats_url: str, lease_ttl: float = 10.0) -> None:
    """Run ``spec``'s agents as one host of the fleet on ``nats_url`` until SIGINT/SIGTERM.

    ``nats_url`` may list several servers of one cluster, comma-separated.
    """
    import signal

    from helix_agents.stores.jetstream import JetStreamEventStore

    from .nats_host import NatsAgentHost

    # A host's log on stderr: which sessions it runs, takes over, or fails to lease.
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("helix_agents").addHandler(handler)
    logging.getLogger("helix_agents").setLevel(logging.INFO)
    target = load_target(spec)
    agents = (
        [target.executor.registry.get(name) for name in target.agent_types]
        if isinstance(target, AgentServer)
        else _agents(target, spec)
    )
    store = await JetStreamEventStore.connect(nats_url)
    nc = await _connect_nats(nats_url)
    try:
        # No wholesale recovery in a fleet: the other hosts' sessions are
        # running, on them; taking over is decided per session (specs/nats.md).
        server = AgentServer([agent for agent in agents if agent is not None], store, recover=False)
        async with NatsAgentHost(server, nc, lease_ttl=lease_ttl):
            print(
                f"helix-agents: hosting {', '.join(server.agent_types)} on {nats_url}",
                flush=True,
            )
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    break
    finally:
        await nc.close()
        await store.close()


def run_openapi() -> None:
    """Print the protocol's OpenAPI document (what ``specs/openapi.json`` holds)."""
    sys.stdout.write(json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n")


async def rerun_lines(url: str, session_id: str, spec: str) -> list[str]:
    """Re-run a recorded session offline with the agents of ``spec``; describe the difference.

    The model's answers come from the recording (:class:`ReplayLLM`), the
    tools are the ones ``spec`` defines now, the store is a scratch memory
    store (the recording is not touched), and every workspace kind is a fresh
    memory provider (the real workspaces are not touched either: a file the
    session read without writing it first is missing in the re-run). Only
    the session's first run is re-run.
    """
    target = load_target(spec)
    agents = target.executor.registry if isinstance(target, AgentServer) else _agents(target, spec)
    recorded_store = await open_store(url)
    try:
        recorded = await recorded_store.read(session_id)
        if not recorded:
            raise TargetError(f"session {session_id!r} not found in {url}")
        replay = await ReplayLLM.from_store(recorded_store, session_id)
    finally:
        await recorded_store.close()
    created = recorded[0]
    assert isinstance(created, SessionCreated)
    scratch = MemoryEventStore()
    registry = agents if isinstance(agents, AgentRegistry) else AgentRegistry(agents)
    sandbox: dict[str, WorkspaceProvider] = {}
    for name in registry.names():
        agent = registry.get(name)
        for workspace in agent.workspaces if agent is not None else ():
            sandbox[workspace.kind] = MemoryWorkspaceProvider()
    async with AgentExecutor(
        scratch,
        registry,
        llm_override=replay,
        workspace_providers=sandbox,
        workspace_provider_kinds=sandbox,
    ) as executor:
        await executor.service.start(
            RemoteStartRequest(
                session_id=session_id,
                agent_type=created.agent_type,
                message=list(created.messages),
                state=created.initial_state or None,
                metadata=created.metadata or None,
                input=created.input,
            )
        )
        await executor.wait_idle(session_id)
        rerun = await executor.state(session_id)
    before = project_state(recorded)
    encode = msgspec.json.encode
    same = (
        not replay.divergences
        and before.status == rerun.status
        and encode(before.output) == encode(rerun.output)
    )
    lines = [
        f"re-ran {session_id} with the recorded model answers and the agents of {spec}",
        f"  recorded: {before.status}  output={encode(before.output).decode()}",
        f"  re-run:   {rerun.status}  output={encode(rerun.output).decode()}",
    ]
    if before.error or rerun.error:
        lines.append(f"  errors:   recorded={before.error!r} re-run={rerun.error!r}")
    lines.append(f"  divergences: {len(replay.divergences) or 'none'}")
    for divergence in replay.divergences:
        lines.append(
            f"    {divergence.session_id} turn {divergence.turn + 1}, message "
            f"{divergence.index + 1}:\n      recorded {divergence.recorded}\n"
            f"      re-run   {divergence.actual}"
        )
    lines.append("  same: yes" if same else "  same: no")
    return lines


def _bounded_number(kind: Callable[[str], float], least: float) -> Callable[[str], Any]:
    """An argparse type: a finite ``kind`` (int or float) of at least ``least``."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, not {text!r}") from None
        if not math.isfinite(value) or value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least:g}, not {text}")
        return value

    return parse


def serve_limits(args: argparse.Namespace) -> ServeLimits:
    """The :class:`ServeLimits` of a parsed ``serve`` command line."""
    return ServeLimits(
        max_connections=args.max_connections,
        header_timeout=args.header_timeout,
        keep_alive=args.keep_alive,
        max_streams=args.max_streams,
        grace=args.grace,
    )


def add_commands(commands: Any, store_help: str) -> None:
    """Add ``serve`` and ``openapi`` to the CLI's subcommands."""
    serve = commands.add_parser(
        "serve",
        help="serve agents over HTTP+SSE",
        description="Serve MODULE:ATTR over the HTTP+SSE protocol (specs/http.md). ATTR is an "
        "AgentServer, or agents (a dict, a list, or one) run on --store.",
    )
    serve.add_argument("target", metavar="MODULE:ATTR", nargs="?")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=4000)
    serve.add_argument("--store", metavar="URL", help=store_help)
    serve.add_argument(
        "--heartbeat",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="seconds between :heartbeat comments on /sse (default: %(default)s)",
    )
    serve.add_argument(
        "--nats",
        metavar="URL",
        help="front the fleet of hosts on this NATS server instead "
        "(several servers of one cluster: comma-separated)",
    )
    serve.add_argument(
        "--max-connections",
        type=_bounded_number(int, 1),
        default=DEFAULT_MAX_CONNECTIONS,
        metavar="N",
        help="open connections at most; beyond, the one waiting longest for its request's "
        "headers is closed, or the newcomer is answered 503 (default: %(default)s, lowered "
        "to fit the open-file limit)",
    )
    serve.add_argument(
        "--header-timeout",
        type=_bounded_number(float, 0.001),
        default=DEFAULT_HEADER_TIMEOUT,
        metavar="SECONDS",
        help="time a connection has to send a request's headers (default: %(default)s)",
    )
    serve.add_argument(
        "--keep-alive",
        type=_bounded_number(int, 1),
        default=DEFAULT_KEEP_ALIVE,
        metavar="SECONDS",
        help="how long an idle keep-alive connection stays open (default: %(default)s)",
    )
    serve.add_argument(
        "--max-streams",
        type=_bounded_number(int, 1),
        default=DEFAULT_MAX_STREAMS,
        metavar="N",
        help="open /sse streams at most; beyond, 503 with Retry-After (default: %(default)s)",
    )
    serve.add_argument(
        "--grace",
        type=_bounded_number(float, 0),
        default=DEFAULT_GRACE,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT, how long runs and connections may go on before the runs are "
        "interrupted (resumed on restart); a second signal interrupts at once "
        "(default: %(default)s)",
    )
    host = commands.add_parser(
        "host",
        help="run agents as one host of a NATS fleet",
        description="Run MODULE:ATTR's agents as a host of the fleet on --nats (specs/nats.md): "
        "session logs in JetStream, requests shared with the other hosts in a queue group.",
    )
    host.add_argument("target", metavar="MODULE:ATTR")
    host.add_argument(
        "--nats",
        metavar="URL",
        required=True,
        help="the NATS server (several servers of one cluster: comma-separated)",
    )
    host.add_argument(
        "--lease-ttl",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long a dead host's sessions wait before another host takes them over",
    )
    commands.add_parser(
        "openapi", help="print the protocol's OpenAPI document", description=run_openapi.__doc__
    )
