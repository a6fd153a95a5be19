"""``helix-agents serve``: agents (or a NATS fleet's gateway) over HTTP+SSE.

Declares the command's arguments and runs it; the uvicorn server it runs
under is built in ``serve_uvicorn.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import anyio

from helix_agents.auth import Auth
from helix_agents.errors import UsageError
from helix_agents.log.pricing import Prices
from helix_agents.server.agent_server import AgentServer
from helix_agents.server.cli.options import (
    LOOPS,
    TOKEN_ENV,
    add_auth_arguments,
    add_log_level,
    bounded_number,
    check_origin,
    loop_options,
    port_number,
    read_tokens,
    replica_count,
    resolve_loop,
    serve_auth,
    store_url,
)
from helix_agents.server.cli.serve_uvicorn import (
    ServeLimits,
    ServeOptions,
    bounded_server,
    check_address,
)
from helix_agents.server.cli.target import TargetError, agents_of, load_target
from helix_agents.server.cli.worker import RuntimeFactory, runtime_factory
from helix_agents.server.gateway.app import create_http_app
from helix_agents.server.serving.allocator import fix_mmap_threshold
from helix_agents.server.serving.collector import tune_collector
from helix_agents.server.serving.limits import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_GRACE,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_KEEP_ALIVE,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_STREAMS,
    DEFAULT_WRITE_TIMEOUT,
)
from helix_agents.server.webhooks.options import add_webhook_arguments, webhook_settings
from helix_agents.stores import open_store

if TYPE_CHECKING:
    from nats.aio.client import Client as NatsClient

    from helix_agents.mcp import MCPOptions
    from helix_agents.otel.export import ExportingTracer

__all__ = [
    "add_serve_command",
    "exporting_tracer",
    "run_serve",
    "serve_command",
    "serve_limits",
    "serve_options",
    "serve_tokens",
]


async def run_serve(
    spec: str | None,
    *,
    host: str,
    port: int,
    url: str,
    heartbeat: float,
    nats_url: str | None,
    limits: ServeLimits | None = None,
    tokens: list[str] | None = None,
    auth: Auth | None = None,
    replicas: int = 1,
    options: ServeOptions | None = None,
    make_runtime: RuntimeFactory | None = None,
) -> None:
    """Serve ``spec`` (an AgentServer, or agents run on the store at ``url``) under uvicorn.

    With ``nats_url`` and no ``spec``, the gateway has no agents of its own: it
    fronts the fleet of ``helix-agents host`` processes on that NATS server
    (``replicas``: the copies of each message, if it creates the stream).
    ``limits`` bounds connections, header and keep-alive times, open streams
    and the shutdown (:class:`ServeLimits`). ``tokens``: the accepted bearer
    tokens (every route but ``/health`` then needs one); ``auth``: what to
    authenticate with instead (``serve_auth``: identities, JWTs; specs/auth.md);
    ``options``: the CORS
    origins and the log level (:class:`ServeOptions`). ``make_runtime``: the
    runtime the sessions run on (``serve --temporal``, ``--dbos``; unset: the
    built-in one).
    """
    limits = limits or ServeLimits()
    options = options or ServeOptions()
    if auth is None and tokens:
        auth = list(tokens)
    if nats_url is not None:
        if spec is not None:
            raise TargetError("serve takes MODULE:ATTR or --nats, not both")
        if options.otel:
            raise UsageError(
                "--otel traces runs; a fleet's gateway runs none: trace its hosts (host --otel)"
            )
        if options.mcp:
            raise TargetError("--mcp serves the agents of MODULE:ATTR, not a fleet (--nats)")
        if options.webhooks is not None:
            raise UsageError("a fleet's hosts deliver its webhooks: give them --webhook-secret")
        await _serve_fleet(
            nats_url,
            host=host,
            port=port,
            heartbeat=heartbeat,
            limits=limits,
            auth=auth,
            replicas=replicas,
            options=options,
        )
        return
    if replicas != 1:
        raise UsageError("--replicas is for --nats (the fleet's stream)")
    if spec is None:
        raise TargetError("serve needs MODULE:ATTR, or --nats URL to front a fleet")
    target = load_target(spec)
    if options.otel and isinstance(target, AgentServer):
        raise UsageError(
            f"--otel traces agents served on --store; {spec} is an AgentServer of your own: "
            "give it tracer=OtelTracer() (specs/otel.md)"
        )
    check_address(host, port)  # before the store is opened (a SQLite file created)
    exporting = exporting_tracer() if options.otel else None
    if isinstance(target, AgentServer):
        server = target
        if options.webhooks is not None and server.webhooks is None:
            server.deliver_webhooks(options.webhooks)
    else:
        agents = agents_of(target, spec)
        # The server owns the store, so the app's lifespan closes it: uvicorn
        # re-raises SIGTERM after a graceful shutdown, so code after serve()
        # would never run.
        tracer = exporting.tracer if exporting is not None else None
        store = await open_store(url)
        runtime = make_runtime() if make_runtime is not None else None
        # Traced on Temporal, the gateway begins each session's trace; its workers' continue it.
        server = AgentServer(
            agents,
            store,
            owns_store=True,
            tracer=tracer,
            runtime=runtime,
            webhooks=options.webhooks,
        )
    server.fire_schedules()  # POST /crons's ticks start here (specs/server.md, "Schedules")
    app = create_http_app(
        server,
        auth=auth,
        heartbeat_interval=heartbeat,
        mcp=_mcp_options(options),
        prices=options.prices,
    )
    print(
        f"helix-agents: serving {', '.join(server.agent_types)} on http://{host}:{port}"
        + _access(auth, options)
    )
    print(f"helix-agents: inspector at {_inspector(host, port, auth)}")
    if options.mcp:
        print(f"helix-agents: MCP endpoint at http://{host}:{port}/mcp")
    if exporting is not None:
        print(f"helix-agents: tracing to {exporting.destination}")
    tune_collector()  # many live sessions: see server/serving/collector.py
    fix_mmap_threshold()  # memory freed by streams that end returns: serving/allocator.py
    flush = exporting.flush if exporting is not None else None
    await bounded_server(
        app, host=host, port=port, limits=limits, agents=server, options=options, on_exit=flush
    ).serve()


def exporting_tracer() -> ExportingTracer:
    """``--otel``'s tracer for ``serve`` and ``host`` (the ``otel`` extra, imported only then).

    Raises:
        UsageError: OpenTelemetry or its OTLP exporter is not installed.
    """
    try:
        from helix_agents.otel.export import exporting_tracer as make
    except ImportError as exc:
        raise UsageError("--otel needs OpenTelemetry: pip install 'helix-agents[otel]'") from exc
    return make()


def _mcp_options(options: ServeOptions) -> MCPOptions | None:
    """``serve --mcp``: the agents as MCP tools at ``/mcp`` (specs/mcp.md), else None."""
    if not options.mcp:
        return None
    try:
        from helix_agents.mcp import MCPOptions
    except ImportError as exc:
        raise TargetError(
            f"--mcp needs the mcp extra (pip install 'helix-agents[mcp]'): {exc}"
        ) from exc
    return MCPOptions(allowed_origins=options.cors_origins)


def _inspector(host: str, port: int, auth: Auth | None) -> str:
    """The inspector's address; with a token, the ``#token=`` form, at a terminal only.

    The fragment never reaches a server; a log (stdout not a terminal) gets a
    placeholder instead, so a token is never written to a file by accident.
    """
    address = f"http://{host}:{port}/ui"
    if not auth:
        return address
    if sys.stdout.isatty():
        first = next(iter(auth), None) if isinstance(auth, list | dict) else None
        if isinstance(first, str):
            return f"{address}#token={quote(first, safe='')}"
    return f"{address}#token=YOUR_TOKEN"


def _access(auth: Auth | None, options: ServeOptions) -> str:
    """What the startup line says about auth and CORS (never a token itself)."""
    said = " (bearer token required)" if auth else ""
    if options.cors_origins:
        said += f" (CORS: {', '.join(options.cors_origins)})"
    return said


async def _serve_fleet(
    nats_url: str,
    *,
    host: str,
    port: int,
    heartbeat: float,
    limits: ServeLimits,
    auth: Auth | None,
    replicas: int,
    options: ServeOptions,
) -> None:
    from helix_agents.stores.jetstream.store import JetStreamEventStore
    from helix_agents.transports.nats import NatsRemoteAgentTransport

    check_address(host, port)
    store = await JetStreamEventStore.connect(nats_url, replicas=replicas)
    nc = await _connect_nats(nats_url)
    try:
        app = create_http_app(
            NatsRemoteAgentTransport(nc, store),
            auth=auth,
            heartbeat_interval=heartbeat,
            prices=options.prices,
        )
        print(
            f"helix-agents: serving the fleet on {nats_url} at http://{host}:{port}"
            + _access(auth, options)
        )
        print(f"helix-agents: inspector at http://{host}:{port}/ui")
        await bounded_server(
            app, host=host, port=port, limits=limits, agents=None, options=options
        ).serve()
    finally:
        await nc.close()
        await store.close()


async def _connect_nats(nats_url: str) -> NatsClient:
    """Connect to every server ``nats_url`` lists (comma-separated), reconnecting for ever."""
    import nats

    from helix_agents.stores.jetstream.store import nats_servers

    return await nats.connect(
        servers=nats_servers(nats_url), allow_reconnect=True, max_reconnect_attempts=-1
    )


def serve_limits(args: argparse.Namespace) -> ServeLimits:
    """The :class:`ServeLimits` of a parsed ``serve`` command line."""
    return ServeLimits(
        max_connections=args.max_connections,
        header_timeout=args.header_timeout,
        body_timeout=args.body_timeout,
        max_header_bytes=args.max_header_bytes,
        write_timeout=args.write_timeout,
        keep_alive=args.keep_alive,
        max_streams=args.max_streams,
        grace=args.grace,
        loop=resolve_loop(args.loop),
    )


def serve_tokens(args: argparse.Namespace) -> list[str] | None:
    """The bearer tokens serve accepts: ``--token`` (or ``$HELIX_TOKEN``) and ``--token-file``'s.

    None when neither is given (no auth).
    """
    tokens = [args.token] if args.token else []
    tokens += read_tokens(args.token_file) or []
    return tokens or None


def serve_options(args: argparse.Namespace) -> ServeOptions:
    """The :class:`ServeOptions` of a parsed ``serve`` command line."""
    return ServeOptions(
        cors_origins=tuple(args.cors_origins),
        log_level=args.log_level,
        otel=args.otel,
        mcp=args.mcp,
        prices=Prices.from_file(args.prices) if args.prices else None,
        webhooks=webhook_settings(args, runs_sessions=args.nats is None),
    )


def serve_command(args: argparse.Namespace) -> int:
    """Run a parsed ``serve`` command line; its exit status."""
    url = store_url(args.store)
    auth = serve_auth(serve_tokens(args), args)  # a bad token line or JWT option: refused now
    limits = serve_limits(args)
    options = serve_options(args)  # a bad --prices file is refused before anything starts
    anyio.run(
        lambda: run_serve(
            args.target,
            host=args.host,
            port=args.port,
            url=url,
            heartbeat=args.heartbeat,
            nats_url=args.nats,
            limits=limits,
            auth=auth,
            replicas=args.replicas,
            options=options,
            make_runtime=runtime_factory(args),
        ),
        backend_options=loop_options(limits.loop),
    )
    return 0


def add_serve_command(commands: Any, store_help: str) -> None:
    """Add ``serve`` and its arguments to the CLI's subcommands."""
    serve = commands.add_parser(
        "serve",
        help="serve agents over HTTP+SSE",
        description="Serve MODULE:ATTR over the HTTP+SSE protocol (specs/http.md). ATTR is an "
        "AgentServer, or agents (a dict, a list, or one) run on --store.",
    )
    serve.add_argument(
        "target",
        metavar="MODULE:ATTR",
        nargs="?",
        help="the agents to serve: an AgentServer, an agent, or a dict or list of agents",
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default: %(default)s)"
    )
    serve.add_argument(
        "--port",
        type=port_number,
        default=4000,
        help="the TCP port to listen on, 1-65535 (default: %(default)s)",
    )
    serve.add_argument("--store", metavar="URL", help=store_help)
    serve.add_argument(
        "--token",
        metavar="TOKEN",
        default=os.environ.get(TOKEN_ENV) or None,
        help=f"require 'Authorization: Bearer TOKEN' on every route but /health (default: "
        f"${TOKEN_ENV}, else no auth; prefer the variable: arguments show in ps)",
    )
    serve.add_argument(
        "--cors-origin",
        metavar="ORIGIN",
        dest="cors_origins",
        action="append",
        type=check_origin,
        default=[],
        help="let browser pages from ORIGIN (https://app.example.com, or * for any) call the "
        "API; repeat for several (default: none, CORS off)",
    )
    add_log_level(serve)
    serve.add_argument(
        "--mcp",
        action="store_true",
        help="also serve each agent as an MCP tool at /mcp (streamable HTTP, behind the same "
        "token; needs the mcp extra; specs/mcp.md)",
    )
    serve.add_argument(
        "--otel",
        action="store_true",
        help="trace every run with OpenTelemetry, sent over OTLP/HTTP to "
        "$OTEL_EXPORTER_OTLP_ENDPOINT (default http://localhost:4318) or to the configured "
        "TracerProvider; needs the otel extra (default: off)",
    )
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
        "(several servers of one cluster: comma-separated; default: serve MODULE:ATTR)",
    )
    add_auth_arguments(serve)
    serve.add_argument(
        "--token-file",
        metavar="PATH",
        help="accept the bearer tokens in this file (one a line: TOKEN, or TOKEN user=U "
        "tenant=T roles=R1,R2 for an identity; specs/auth.md): every route but /health "
        "then needs 'Authorization: Bearer TOKEN' (also in front of a fleet; with --token, "
        "either is accepted; default: none)",
    )
    serve.add_argument(
        "--replicas",
        type=replica_count,
        default=1,
        metavar="N",
        help="with --nats: copies JetStream keeps of each message (1-5), if this creates "
        "the stream (specs/nats.md, 'Durability'; default: %(default)s)",
    )
    serve.add_argument(
        "--max-connections",
        type=bounded_number(int, 1),
        default=DEFAULT_MAX_CONNECTIONS,
        metavar="N",
        help="open connections at most; beyond, the one waiting longest for its request's "
        "headers is closed, or the newcomer is answered 503 (default: %(default)s, lowered "
        "to fit the open-file limit)",
    )
    serve.add_argument(
        "--header-timeout",
        type=bounded_number(float, 0.001),
        default=DEFAULT_HEADER_TIMEOUT,
        metavar="SECONDS",
        help="time a connection has to send a request's headers (default: %(default)s)",
    )
    serve.add_argument(
        "--max-header-bytes",
        type=bounded_number(int, 256),
        default=DEFAULT_MAX_HEADER_BYTES,
        metavar="BYTES",
        help="bytes a request's head (request line and headers) may take; each line at most "
        "8 KiB; beyond, 431 and the connection closed (default: %(default)s)",
    )
    serve.add_argument(
        "--write-timeout",
        type=bounded_number(float, 0.001),
        default=DEFAULT_WRITE_TIMEOUT,
        metavar="SECONDS",
        help="time a response may wait for its client to take any bytes (a reader of a "
        "stream that stopped reading); then the connection is cut (default: %(default)s)",
    )
    serve.add_argument(
        "--body-timeout",
        type=bounded_number(float, 0.001),
        default=DEFAULT_BODY_TIMEOUT,
        metavar="SECONDS",
        help="time a request's body has to arrive once its headers have; then the "
        "connection is closed (default: %(default)s)",
    )
    serve.add_argument(
        "--keep-alive",
        type=bounded_number(int, 1),
        default=DEFAULT_KEEP_ALIVE,
        metavar="SECONDS",
        help="how long an idle keep-alive connection stays open (default: %(default)s)",
    )
    serve.add_argument(
        "--max-streams",
        type=bounded_number(int, 1),
        default=DEFAULT_MAX_STREAMS,
        metavar="N",
        help="open /sse streams at most; beyond, 503 with Retry-After (default: %(default)s)",
    )
    serve.add_argument(
        "--grace",
        type=bounded_number(float, 0),
        default=DEFAULT_GRACE,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT, how long runs and connections may go on before the runs are "
        "interrupted (resumed on restart); a second signal interrupts at once "
        "(default: %(default)s)",
    )
    serve.add_argument(
        "--prices",
        metavar="FILE.json",
        help="what tokens cost, for the inspector's cost per node: "
        '{"models": {"gpt-4o-mini": {"inputPerMillion": 0.15, "outputPerMillion": 0.6}}, '
        '"agents": {AGENT: PRICE}} in USD per million tokens; built-in defaults for a few '
        "OpenAI models fill the gaps (specs/ui.md)",
    )
    serve.add_argument(
        "--loop",
        choices=LOOPS,
        default="auto",
        help="the event loop: uvloop (with the httptools parser) or asyncio (with h11); "
        "auto is uvloop where it is installed (default: %(default)s)",
    )
    add_webhook_arguments(serve)
    serve.set_defaults(handler=serve_command)
