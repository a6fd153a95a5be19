"""The CLI commands that serve or re-run agents: ``serve``, ``openapi``, ``replay --rerun``.

Kept apart from ``server/cli/main.py`` (which reads logs) because these load user code
(``MODULE:ATTR``) and run servers.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import importlib.util
import json
import logging
import math
import os
import socket
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio
import msgspec

from helix_agents import AgentConfig, AgentExecutor
from helix_agents.agents import AgentRegistry
from helix_agents.errors import UsageError
from helix_agents.events import SessionCreated
from helix_agents.log import project_state
from helix_agents.models import ReplayLLM
from helix_agents.protocol import RemoteStartRequest
from helix_agents.server.agent_server import AgentServer
from helix_agents.server.gateway.app import create_http_app
from helix_agents.server.gateway.openapi import openapi_document
from helix_agents.server.serving.collector import tune_collector
from helix_agents.server.serving.limits import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_GRACE,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_KEEP_ALIVE,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_STREAMS,
    StreamLimit,
    bounded_http_protocol,
    fit_descriptor_limit,
    fit_listen_backlog,
    quiet_accept_errors,
)
from helix_agents.stores import MemoryEventStore, open_store
from helix_agents.workspaces import MemoryWorkspaceProvider, WorkspaceProvider

if TYPE_CHECKING:
    from nats.aio.client import Client as NatsClient

    from helix_agents.server.serving.graceful import GracefulServer

__all__ = [
    "LOG_LEVELS",
    "TOKEN_ENV",
    "ServeLimits",
    "ServeOptions",
    "check_origin",
    "TargetError",
    "add_commands",
    "chat_agents",
    "check_address",
    "load_target",
    "loop_options",
    "port_number",
    "resolve_loop",
    "rerun_lines",
    "run_host",
    "run_openapi",
    "read_tokens",
    "run_serve",
    "serve_limits",
    "serve_options",
    "serve_tokens",
    "uvicorn_config",
]


@dataclass(frozen=True)
class ServeLimits:
    """The bounds ``serve`` runs under (``specs/cli.md``); the defaults are the flags' defaults."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    keep_alive: int = DEFAULT_KEEP_ALIVE
    max_streams: int = DEFAULT_MAX_STREAMS
    grace: float = DEFAULT_GRACE
    loop: str = "asyncio"
    """The event loop and HTTP parser: ``"asyncio"`` (with h11) or ``"uvloop"`` (with httptools)."""


MAX_PORT = 65535


TOKEN_ENV = "HELIX_TOKEN"
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


@dataclass(frozen=True)
class ServeOptions:
    """How ``serve`` answers browsers and logs: the CORS origins, the log level."""

    cors_origins: tuple[str, ...] = ()
    log_level: str = "info"


class TargetError(Exception):
    """``MODULE:ATTR`` could not be loaded or is not agents / an AgentServer, or cannot be served.

    ``code`` is the CLI's exit status: 2 for a bad command line (the default),
    1 for a failure found while starting (an address in use).
    """

    def __init__(self, message: str, *, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def _where(exc: BaseException) -> str:
    """``file:line`` of the user's code an import failed in (the deepest frame under cwd)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}:{exc.lineno}"
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not frame.filename.startswith("<") and frame.filename != __file__
    ]
    cwd = os.getcwd() + os.sep
    ours = [frame for frame in frames if os.path.abspath(frame.filename).startswith(cwd)]
    if not (ours or frames):
        return ""
    chosen = (ours or frames)[-1]
    return f"{chosen.filename}:{chosen.lineno}"


def _import_failure(module_name: str, exc: Exception) -> TargetError:
    """One line for a module that failed to import: where, and what."""
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if missing is not None and (module_name + ".").startswith(missing + "."):
        # The module, or a package on its path, is not there (not a dependency
        # the module imports, which keeps its file and line).
        return TargetError(f"cannot import {module_name!r}: no module named {missing!r}")
    what = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    where = _where(exc)
    place = f" ({where})" if where else ""
    return TargetError(
        f"cannot import {module_name!r}{place}: {type(exc).__name__}: {what}".rstrip(": ")
    )


def load_target(spec: str) -> Any:
    """Import ``MODULE:ATTR`` (the working directory is importable) and return the attribute.

    Raises:
        TargetError: a malformed spec, a missing attribute, or a module that
            fails to import (named with the file and line it failed at).
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise TargetError(f"expected MODULE:ATTR, not {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module may raise anything while importing
        raise _import_failure(module_name, exc) from exc
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
    tokens: list[str] | None = None,
    replicas: int = 1,
    options: ServeOptions | None = None,
) -> None:
    """Serve ``spec`` (an AgentServer, or agents run on the store at ``url``) under uvicorn.

    With ``nats_url`` and no ``spec``, the gateway has no agents of its own: it
    fronts the fleet of ``helix-agents host`` processes on that NATS server
    (``replicas``: the copies of each message, if it creates the stream).
    ``limits`` bounds connections, header and keep-alive times, open streams
    and the shutdown (:class:`ServeLimits`). ``tokens``: the accepted bearer
    tokens (every route but ``/health`` then needs one); ``options``: the CORS
    origins and the log level (:class:`ServeOptions`).
    """
    limits = limits or ServeLimits()
    options = options or ServeOptions()
    auth = list(tokens) if tokens else None
    if nats_url is not None:
        if spec is not None:
            raise TargetError("serve takes MODULE:ATTR or --nats, not both")
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
    check_address(host, port)  # before the store is opened (a SQLite file created)
    if isinstance(target, AgentServer):
        server = target
    else:
        agents = _agents(target, spec)
        # The server owns the store, so the app's lifespan closes it: uvicorn
        # re-raises SIGTERM after a graceful shutdown, so code after serve()
        # would never run.
        server = AgentServer(agents, await open_store(url), owns_store=True)
    app = create_http_app(server, auth=auth, heartbeat_interval=heartbeat)
    print(
        f"helix-agents: serving {', '.join(server.agent_types)} on http://{host}:{port}"
        + _access(auth, options)
    )
    print(f"helix-agents: inspector at http://{host}:{port}/ui")
    tune_collector()  # many live sessions: see server/serving/collector.py
    await _bounded(app, host=host, port=port, limits=limits, agents=server, options=options).serve()


def _access(auth: list[str] | None, options: ServeOptions) -> str:
    """What the startup line says about auth and CORS (never a token itself)."""
    said = " (bearer token required)" if auth else ""
    if options.cors_origins:
        said += f" (CORS: {', '.join(options.cors_origins)})"
    return said


def check_origin(text: str) -> str:
    """An argparse type: a CORS origin, ``scheme://host[:port]`` (no path), or ``*``."""
    if text == "*":
        return text
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path or parts.query:
        raise argparse.ArgumentTypeError(
            f"expected an origin such as https://app.example.com:8443 (or *), not {text!r}"
        )
    return text


def _with_cors(app: Any, origins: tuple[str, ...]) -> Any:
    """``app`` answering browsers from ``origins`` (preflights included, before any auth)."""
    if not origins:
        return app
    from starlette.datastructures import Headers
    from starlette.middleware.cors import CORSMiddleware
    from starlette.responses import Response

    class ProtocolCORS(CORSMiddleware):
        """Starlette's CORS, a refused preflight answered in the protocol's error shape."""

        def preflight_response(self, request_headers: Headers) -> Response:
            """Starlette's answer; its ``400`` (``text/plain``) as ``{"error", "code"}``."""
            answer = super().preflight_response(request_headers)
            if answer.status_code != 400:
                return answer
            reason = bytes(answer.body).decode()  # "Disallowed CORS origin, method"
            headers = {
                name: value
                for name, value in answer.headers.items()
                if name not in ("content-type", "content-length")
            }
            body = msgspec.json.encode({"error": reason, "code": "INVALID_REQUEST"})
            return Response(body, 400, headers, media_type="application/json")

    return ProtocolCORS(
        app,
        allow_origins=list(origins),
        allow_methods=["GET", "POST"],
        allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
        max_age=600,
    )


def check_address(host: str, port: int) -> None:
    """Fail early, in one line, if ``host:port`` cannot be listened on (in use, not local).

    Binds and releases a socket as uvicorn will (``SO_REUSEADDR``), so a port
    in TIME_WAIT is not mistaken for one in use.

    Raises:
        TargetError: exit status 1, naming the address and the reason.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise TargetError(f"cannot listen on {host}:{port}: {exc.strerror}", code=1) from exc
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            reason = "address already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
            raise TargetError(f"cannot listen on {host}:{port}: {reason}", code=1) from exc


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 1-65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, not {text!r}") from None
    if not 1 <= value <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"a port is 1-{MAX_PORT}, not {value}")
    return value


def _bounded(
    app: Any,
    *,
    host: str,
    port: int,
    limits: ServeLimits,
    agents: AgentServer | None,
    options: ServeOptions,
) -> GracefulServer:
    """uvicorn for ``app``, under ``limits``, with ``options``' CORS origins and log level."""
    from helix_agents.server.serving.graceful import GracefulServer

    quiet_accept_errors()
    connections = fit_descriptor_limit(limits.max_connections)
    config = uvicorn_config(
        _with_cors(StreamLimit(app, max_streams=limits.max_streams), options.cors_origins),
        log_level=options.log_level,
        host=host,
        port=port,
        http=bounded_http_protocol(
            connections,
            limits.header_timeout,
            body_timeout=limits.body_timeout,
            parser="httptools" if limits.loop == "uvloop" else "h11",
        ),
        timeout_keep_alive=limits.keep_alive,
        backlog=fit_listen_backlog(connections),
        timeout_graceful_shutdown=None,  # the grace bounds the drain
    )
    return GracefulServer(config, grace=limits.grace, agents=agents)


def uvicorn_config(app: Any, *, log_level: str = "info", **options: Any) -> Any:
    """``uvicorn.Config`` as ``serve`` uses it (imported late: uvicorn is only for serving).

    helix-agents' own log records (``helix_agents.*``: recoveries, damaged
    stores, shutdowns) go where uvicorn's go, at ``log_level`` (as uvicorn's).
    """
    import copy

    import uvicorn
    from uvicorn.config import LOGGING_CONFIG

    log_config = copy.deepcopy(LOGGING_CONFIG)
    log_config["loggers"]["helix_agents"] = {
        "handlers": ["default"],
        "level": log_level.upper(),
        "propagate": False,
    }
    return uvicorn.Config(
        app, log_level=log_level, log_config=log_config, lifespan="on", ws="none", **options
    )


async def _serve_fleet(
    nats_url: str,
    *,
    host: str,
    port: int,
    heartbeat: float,
    limits: ServeLimits,
    auth: list[str] | None,
    replicas: int,
    options: ServeOptions,
) -> None:
    from helix_agents.stores.jetstream import JetStreamEventStore
    from helix_agents.transports.nats import NatsRemoteAgentTransport

    check_address(host, port)
    store = await JetStreamEventStore.connect(nats_url, replicas=replicas)
    nc = await _connect_nats(nats_url)
    try:
        app = create_http_app(
            NatsRemoteAgentTransport(nc, store), auth=auth, heartbeat_interval=heartbeat
        )
        print(
            f"helix-agents: serving the fleet on {nats_url} at http://{host}:{port}"
            + _access(auth, options)
        )
        print(f"helix-agents: inspector at http://{host}:{port}/ui")
        await _bounded(
            app, host=host, port=port, limits=limits, agents=None, options=options
        ).serve()
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


async def run_host(
    spec: str,
    *,
    nats_url: str,
    lease_ttl: float = 10.0,
    replicas: int = 1,
    log_level: str = "info",
) -> None:
    """Run ``spec``'s agents as one host of the fleet on ``nats_url`` until SIGINT/SIGTERM.

    ``nats_url`` may list several servers of one cluster, comma-separated;
    ``replicas``: the copies of each message, if this host creates the stream.
    The host's log (stderr) shows records at ``log_level`` and above.
    """
    import signal

    from helix_agents.server.fleet.host import NatsAgentHost
    from helix_agents.stores.jetstream import JetStreamEventStore

    # A host's log on stderr: which sessions it runs, takes over, or fails to lease.
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("helix_agents").addHandler(handler)
    logging.getLogger("helix_agents").setLevel(log_level.upper())
    target = load_target(spec)
    agents = (
        [target.executor.registry.get(name) for name in target.agent_types]
        if isinstance(target, AgentServer)
        else _agents(target, spec)
    )
    store = await JetStreamEventStore.connect(nats_url, replicas=replicas)
    # One connection for the host's requests and its store's appends: they go out
    # in the same writes to the server.
    nc = store.connection
    try:
        # No wholesale recovery in a fleet: the other hosts' sessions are
        # running, on them; taking over is decided per session (specs/nats.md).
        server = AgentServer([agent for agent in agents if agent is not None], store, recover=False)
        async with NatsAgentHost(server, nc, lease_ttl=lease_ttl, replicas=replicas):
            print(
                f"helix-agents: hosting {', '.join(server.agent_types)} on {nats_url}",
                flush=True,
            )
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    break
    finally:
        await store.close()


def chat_agents(spec: str) -> list[AgentConfig]:
    """The agents of ``MODULE:ATTR`` for ``chat`` (an AgentServer's, or agents)."""
    target = load_target(spec)
    if isinstance(target, AgentServer):
        found = [target.executor.registry.get(name) for name in target.agent_types]
        return [agent for agent in found if agent is not None]
    return _agents(target, spec)


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


LOOPS = ("auto", "asyncio", "uvloop")
"""``serve --loop`` choices; ``auto`` is uvloop where it is installed, else asyncio."""


def resolve_loop(name: str) -> str:
    """``"asyncio"`` or ``"uvloop"`` for a ``--loop`` choice; ``UsageError`` if it cannot be had."""
    if name not in LOOPS:
        raise UsageError(f"--loop must be one of {', '.join(LOOPS)}, not {name!r}")
    fast = importlib.util.find_spec("uvloop") is not None
    fast = fast and importlib.util.find_spec("httptools") is not None
    if name == "uvloop" and not fast:
        raise UsageError(
            "--loop uvloop needs uvloop and httptools: pip install 'helix-agents[fast]'"
        )
    if name == "auto":
        return "uvloop" if fast else "asyncio"
    return name


def loop_options(loop: str) -> dict[str, Any]:
    """``anyio.run``'s backend options for ``loop`` (from :func:`resolve_loop`)."""
    return {"use_uvloop": True} if loop == "uvloop" else {}


def _replicas(text: str) -> int:
    """An argparse type: a stream's replica count, 1 to 5."""
    if not text.isdigit() or not 1 <= int(text) <= 5:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to 5, not {text!r}")
    return int(text)


def read_tokens(path: str | None) -> list[str] | None:
    """The bearer tokens in ``path`` (one a line; blank lines skipped); None without a path.

    Raises:
        UsageError: the file cannot be read, or holds no token.
    """
    if path is None:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the token file {path!r}: {exc}") from exc
    tokens = [line.strip() for line in text.splitlines() if line.strip()]
    if not tokens:
        raise UsageError(f"the token file {path!r} holds no token")
    return tokens


def serve_limits(args: argparse.Namespace) -> ServeLimits:
    """The :class:`ServeLimits` of a parsed ``serve`` command line."""
    return ServeLimits(
        max_connections=args.max_connections,
        header_timeout=args.header_timeout,
        body_timeout=args.body_timeout,
        keep_alive=args.keep_alive,
        max_streams=args.max_streams,
        grace=args.grace,
        loop=resolve_loop(args.loop),
    )


def _log_level(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default="info",
        help="the least severe log records shown on stderr (default: %(default)s)",
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
    )


def add_commands(commands: Any, store_help: str) -> None:
    """Add ``serve`` and ``openapi`` to the CLI's subcommands."""
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
    _log_level(serve)
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
    serve.add_argument(
        "--token-file",
        metavar="PATH",
        help="accept the bearer tokens in this file (one a line): every route but /health "
        "then needs 'Authorization: Bearer TOKEN' (also in front of a fleet; with --token, "
        "either is accepted; default: none)",
    )
    serve.add_argument(
        "--replicas",
        type=_replicas,
        default=1,
        metavar="N",
        help="with --nats: copies JetStream keeps of each message (1-5), if this creates "
        "the stream (specs/nats.md, 'Durability'; default: %(default)s)",
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
        "--body-timeout",
        type=_bounded_number(float, 0.001),
        default=DEFAULT_BODY_TIMEOUT,
        metavar="SECONDS",
        help="time a request's body has to arrive once its headers have; then the "
        "connection is closed (default: %(default)s)",
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
    serve.add_argument(
        "--loop",
        choices=LOOPS,
        default="auto",
        help="the event loop: uvloop (with the httptools parser) or asyncio (with h11); "
        "auto is uvloop where it is installed (default: %(default)s)",
    )
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
        type=_replicas,
        default=1,
        metavar="N",
        help="copies JetStream keeps of each message (1-5), if this host creates the stream "
        "(specs/nats.md, 'Durability'; default: %(default)s)",
    )
    host.add_argument(
        "--lease-ttl",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long a dead host's sessions wait before another host takes them over "
        "(default: %(default)s)",
    )
    _log_level(host)
    chat = commands.add_parser(
        "chat",
        help="talk to an agent at the terminal, one session, turn after turn",
        description="Talk to AGENT of MODULE:ATTR: each line typed is a turn of one session "
        "(the first starts it, the others are follow-up messages that keep its memory), its "
        "stream printed live. Ends at /exit, /quit or the end of input.",
    )
    chat.add_argument("target", metavar="MODULE:ATTR")
    chat.add_argument("agent", metavar="AGENT", help="the agent type to talk to")
    chat.add_argument("--store", metavar="URL", help=store_help)
    chat.add_argument(
        "--session",
        metavar="SESSION_ID",
        help="the session (default: a new one); an existing one goes on where it stopped",
    )
    commands.add_parser(
        "openapi", help="print the protocol's OpenAPI document", description=run_openapi.__doc__
    )
