"""uvicorn as ``serve`` runs it: the bounds, CORS, log records and the bind check.

``serve.py`` decides what is served; this module builds the server that
serves it (``specs/cli.md``, "serve").
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from helix_agents.log.pricing import Prices
from helix_agents.server.agent_server import AgentServer
from helix_agents.server.cli.target import TargetError
from helix_agents.server.serving.descriptors import (
    fit_descriptor_limit,
    fit_listen_backlog,
    quiet_accept_errors,
)
from helix_agents.server.serving.limits import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_GRACE,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_KEEP_ALIVE,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_STREAMS,
    DEFAULT_WRITE_TIMEOUT,
    StreamLimit,
)
from helix_agents.server.serving.protocols import bounded_http_protocol
from helix_agents.server.webhooks import WebhookSettings

if TYPE_CHECKING:
    from helix_agents.server.serving.graceful import GracefulServer

__all__ = ["ServeLimits", "ServeOptions", "bounded_server", "check_address", "uvicorn_config"]


@dataclass(frozen=True)
class ServeLimits:
    """The bounds ``serve`` runs under (``specs/cli.md``); the defaults are the flags' defaults."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    write_timeout: float = DEFAULT_WRITE_TIMEOUT
    keep_alive: int = DEFAULT_KEEP_ALIVE
    max_streams: int = DEFAULT_MAX_STREAMS
    grace: float = DEFAULT_GRACE
    loop: str = "asyncio"
    """The event loop and HTTP parser: ``"asyncio"`` (with h11) or ``"uvloop"`` (with httptools)."""


@dataclass(frozen=True)
class ServeOptions:
    """How ``serve`` answers browsers, logs and traces: CORS origins, log level, ``--otel``."""

    cors_origins: tuple[str, ...] = ()
    log_level: str = "info"
    otel: bool = False
    """Trace the runs with OpenTelemetry, exported over OTLP (``helix_agents.otel.export``)."""
    mcp: bool = False
    """Also serve each agent as an MCP tool at ``/mcp`` (``helix_agents.mcp``, the mcp extra)."""
    prices: Prices | None = None
    """What tokens cost, for the inspector's cost per node (``--prices FILE.json``)."""
    webhooks: WebhookSettings | None = None
    """Deliver webhooks, signed with this secret (``--webhook-secret``; specs/server.md)."""


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


def bounded_server(
    app: Any,
    *,
    host: str,
    port: int,
    limits: ServeLimits,
    agents: AgentServer | None,
    options: ServeOptions,
    on_exit: Callable[[], object] | None = None,
) -> GracefulServer:
    """A graceful uvicorn for ``app`` under ``limits``, with ``options``' CORS and log level."""
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
            max_header_bytes=limits.max_header_bytes,
            write_timeout=limits.write_timeout,
            parser="httptools" if limits.loop == "uvloop" else "h11",
        ),
        h11_max_incomplete_event_size=limits.max_header_bytes,  # ours answers 431 first
        timeout_keep_alive=limits.keep_alive,
        backlog=fit_listen_backlog(connections),
        timeout_graceful_shutdown=None,  # the grace bounds the drain
    )
    streams = getattr(app, "streams", None)  # create_http_app's open GET /sse streams
    return GracefulServer(
        config, grace=limits.grace, agents=agents, on_exit=on_exit, streams=streams
    )


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
