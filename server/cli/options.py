"""Argument types and helpers the CLI's commands share (store URL, port, loop, tokens).

Each command module declares its own arguments with these; the command line's
rules are in ``specs/cli.md``.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio

from helix_agents.errors import UsageError
from helix_agents.stores import DEFAULT_STORE_URL

if TYPE_CHECKING:
    from helix_agents.auth import Auth, Authenticator

__all__ = [
    "LOG_LEVELS",
    "LOOPS",
    "STORE_URL_ENV",
    "TOKEN_ENV",
    "add_log_level",
    "ask_terminal",
    "bounded_number",
    "check_origin",
    "loop_options",
    "port_number",
    "add_auth_arguments",
    "jwt_authenticator",
    "read_tokens",
    "serve_auth",
    "replica_count",
    "resolve_loop",
    "store_url",
]

STORE_URL_ENV = "HELIX_STORE_URL"
TOKEN_ENV = "HELIX_TOKEN"
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
MAX_PORT = 65535

LOOPS = ("auto", "asyncio", "uvloop")
"""``serve --loop`` choices; ``auto`` is uvloop where it is installed, else asyncio."""


def store_url(given: str | None) -> str:
    """The store URL to use: ``--store``, else ``$HELIX_STORE_URL``, else ``sqlite:///helix.db``."""
    return given or os.environ.get(STORE_URL_ENV) or DEFAULT_STORE_URL


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


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 1-65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, not {text!r}") from None
    if not 1 <= value <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"a port is 1-{MAX_PORT}, not {value}")
    return value


def bounded_number(kind: Callable[[str], float], least: float) -> Callable[[str], Any]:
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


def replica_count(text: str) -> int:
    """An argparse type: a stream's replica count, 1 to 5."""
    if not text.isdigit() or not 1 <= int(text) <= 5:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to 5, not {text!r}")
    return int(text)


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


def add_log_level(parser: argparse.ArgumentParser) -> None:
    """Add ``--log-level`` to a command that logs to stderr."""
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default="info",
        help="the least severe log records shown on stderr (default: %(default)s)",
    )


async def ask_terminal(prompt: str) -> str | None:
    """Ask at the terminal (a worker thread reads standard input); None at its end.

    The output is left at the start of a line. At a terminal the prompt comes
    first and the person's Enter ends its line. From a pipe or a file, the
    prompt is written with the line read after it (``you> hello``), as a
    transcript, and nothing at the end of input: never a prompt left open for
    the next output to run into.
    """

    def read() -> str | None:
        if not sys.stdin.isatty():
            line = sys.stdin.readline()
            if line:
                print(prompt + line.rstrip("\r\n"), flush=True)
            return line or None
        print(prompt, end="", flush=True)
        line = sys.stdin.readline()
        if not line:
            print(flush=True)  # ^D after the prompt: end its line
        return line or None

    return await anyio.to_thread.run_sync(read, abandon_on_cancel=True)


def add_auth_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``serve``'s JWT arguments (``specs/auth.md``): ``--jwt-key``, ``--jwks``, checks."""
    parser.add_argument(
        "--jwt-key",
        metavar="FILE",
        help="accept bearer JWTs verified with the key in FILE: a shared secret (HS256/384/512) "
        "or a PEM public key (RS, PS, ES, EdDSA); needs the jwt extra (specs/auth.md; "
        "default: no JWTs)",
    )
    parser.add_argument(
        "--jwks",
        metavar="URL",
        help="accept bearer JWTs verified with the keys of this JWKS (fetched, cached); "
        "needs the jwt extra (default: no JWTs)",
    )
    parser.add_argument(
        "--jwt-issuer", metavar="ISS", help="the iss a JWT must carry (default: unchecked)"
    )
    parser.add_argument(
        "--jwt-audience",
        metavar="AUD",
        help="the aud a JWT must carry (default: none; a JWT with an aud is then refused)",
    )
    parser.add_argument(
        "--jwt-claims",
        metavar="MAP",
        default="user=sub,tenant=tenant,roles=roles",
        help="the claims naming a JWT's identity, as user=C,tenant=C,roles=C (a dotted C "
        "reaches into an object; default: %(default)s)",
    )


def jwt_authenticator(args: argparse.Namespace) -> Authenticator | None:
    """The ``JwtAuthenticator`` of ``serve``'s ``--jwt-key`` or ``--jwks``; None without either.

    Raises:
        UsageError: both given, a JWT option without either, a malformed ``--jwt-claims``,
            an unreadable key file, or no jwt extra.
    """
    key_file, jwks = getattr(args, "jwt_key", None), getattr(args, "jwks", None)
    if key_file and jwks:
        raise UsageError("give --jwt-key or --jwks, not both")
    if not key_file and not jwks:
        if getattr(args, "jwt_issuer", None) or getattr(args, "jwt_audience", None):
            raise UsageError("--jwt-issuer and --jwt-audience need --jwt-key or --jwks")
        return None
    claims = {"user": "sub", "tenant": "tenant", "roles": "roles"}
    for part in args.jwt_claims.split(","):
        name, sep, claim = part.strip().partition("=")
        if not sep or name not in claims or not claim:
            raise UsageError(
                f"--jwt-claims: {part!r} is not user=CLAIM, tenant=CLAIM or roles=CLAIM"
            )
        claims[name] = claim
    try:
        from helix_agents.auth import JwtAuthenticator

        return JwtAuthenticator(
            key_file=key_file,
            jwks_url=jwks,
            issuer=args.jwt_issuer,
            audience=args.jwt_audience,
            user_claim=claims["user"],
            tenant_claim=claims["tenant"],
            roles_claim=claims["roles"],
        )
    except ImportError as exc:
        raise UsageError(
            f"JWTs need the jwt extra (pip install 'helix-agents[jwt]'): {exc}"
        ) from exc


def serve_auth(token_lines: list[str] | None, args: argparse.Namespace) -> Auth | None:
    """What ``serve`` authenticates with: its token lines (``TOKEN [user=U] [tenant=T]
    [roles=R,..]``, each an identity; a bare token is the old every-permission one) and
    its JWT options; None when neither is given (no auth)."""
    from helix_agents.auth import FirstOf, StaticTokens, parse_token_line

    tokens = dict(parse_token_line(line) for line in token_lines or ())
    verifier = jwt_authenticator(args)
    if verifier is None:
        return tokens or None
    if not tokens:
        return verifier
    return FirstOf(StaticTokens(tokens), verifier)
