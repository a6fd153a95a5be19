"""``helix-agents cron``: a server's schedules over HTTP (``/crons``; specs/server.md).

``cron create`` makes one (``--cron EXPR [--timezone ZONE]`` or ``--every
SECONDS``; ``--agent TYPE`` for a new session per tick or ``--session ID`` for
a new turn of one; ``--message``), ``cron list`` and ``cron get ID`` show them,
``cron pause|resume|delete ID`` change one. Each talks to ``--server``, its
bearer token from ``$HELIX_TOKEN``; a refusal is the server's error, exit 1.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import anyio
import httpx

from helix_agents.errors import AgentServerError, UsageError
from helix_agents.server.cli.options import TOKEN_ENV
from helix_agents.transports._http_wire import server_error

__all__ = ["DEFAULT_SERVER", "add_cron_command", "cron_body", "cron_command", "cron_lines"]

DEFAULT_SERVER = "http://127.0.0.1:8000"
"""The server ``cron`` talks to without ``--server`` (``serve``'s default address)."""


def _pair(raw: str) -> tuple[str, str]:
    key, sep, value = raw.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, not {raw!r}")
    return key, value


def _json_object(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def cron_body(args: argparse.Namespace) -> dict[str, Any]:
    """``cron create``'s options as a ``POST /crons`` body (the server checks the rest)."""
    if (args.agent is None) == (args.session is None):
        raise UsageError("cron create needs one of --agent (a new session) and --session (a turn)")
    body: dict[str, Any] = {"catchup": args.catchup}
    if args.id is not None:
        body["id"] = args.id
    if args.cron is not None:
        body["cron"] = args.cron
    if args.timezone is not None:
        body["timezone"] = args.timezone
    if args.every is not None:
        body["intervalSeconds"] = args.every
    if args.agent is not None:
        start: dict[str, Any] = {**(args.start_json or {}), "agentType": args.agent}
        start["message"] = args.message
        if args.metadata:
            start["metadata"] = {**start.get("metadata", {}), **dict(args.metadata)}
        body["start"] = start
    else:
        if args.metadata or args.start_json:
            raise UsageError("--metadata and --start-json are for --agent (a new session)")
        body["turn"] = {"sessionId": args.session, "message": args.message}
    return body


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def cron_lines(crons: list[dict[str, Any]], *, as_json: bool) -> list[str]:
    """The output of ``cron list``/``get``/...: one line a schedule, or JSON."""
    if as_json:
        return [json.dumps(cron, sort_keys=True) for cron in crons]
    lines = []
    for cron in crons:
        clock = (
            f"cron {cron['cron']!r} {cron['timezone']}"
            if cron.get("cron") is not None
            else f"every {cron['intervalSeconds']}s"
        )
        start = cron.get("start")
        what = f"agent {start['agentType']}" if start else f"turn of {cron['turn']['sessionId']}"
        state = "paused" if cron["paused"] else f"next {_when(cron['nextTickAt'])}"
        lines.append(
            f"{cron['id']}  {clock}  {what}  {state}  fired {cron['fired']}"
            f"  catch-up {cron['catchup']}"
        )
    return lines or ["(no schedules)"]


async def _call(server: str, method: str, path: str, body: Any = None) -> Any:
    token = os.environ.get(TOKEN_ENV)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=server.rstrip("/"), headers=headers, timeout=30) as http:
        try:
            answer = await http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise AgentServerError("UNAVAILABLE", f"cannot reach {server}: {exc}") from exc
    if answer.status_code != 200:
        raise server_error(answer)  # the server's code and message, as every client shows them
    return answer.json()


async def _run(args: argparse.Namespace) -> list[dict[str, Any]]:
    action: str = args.action
    if action == "create":
        return [await _call(args.server, "POST", "/crons", cron_body(args))]
    if action == "list":
        listed: list[dict[str, Any]] = (await _call(args.server, "GET", "/crons"))["crons"]
        return listed
    path = f"/crons/{args.cron_id}"
    if action == "get":
        return [await _call(args.server, "GET", path)]
    if action == "delete":
        await _call(args.server, "DELETE", path)
        return []
    return [await _call(args.server, "POST", f"{path}/{action}")]


def cron_command(args: argparse.Namespace) -> int:
    """Run a parsed ``cron`` command line; its exit status."""
    crons = anyio.run(_run, args)
    if args.action == "delete":
        print(f"deleted {args.cron_id}")
    else:
        print("\n".join(cron_lines(crons, as_json=args.json)))
    return 0


def add_cron_command(commands: Any) -> None:
    """Add ``cron`` and its actions to the CLI's subcommands."""
    cron = commands.add_parser(
        "cron",
        help="make, list, pause, resume and delete a server's schedules",
        description="A server's schedules (POST /crons; specs/server.md, 'Schedules'): each "
        "tick of a cron expression or an interval starts a session of an agent type, or a new "
        "turn of a session. Talks to --server, its bearer token from $HELIX_TOKEN.",
        epilog="examples:\n  helix-agents cron create --cron '0 9 * * 1-5' --timezone "
        "Europe/Paris --agent triage --message 'the morning queue'\n"
        "  helix-agents cron create --every 3600 --session s1 --message 'anything new?'\n"
        "  helix-agents cron list\n  helix-agents cron pause c1a2b3",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = cron.add_subparsers(dest="action", metavar="ACTION", required=True)
    parsers = []
    create = actions.add_parser("create", help="make a schedule")
    clock = create.add_mutually_exclusive_group(required=True)
    clock.add_argument(
        "--cron",
        metavar="EXPR",
        help="5 fields: minute hour day month weekday (default: --every)",
    )
    clock.add_argument(
        "--every", type=int, metavar="SECONDS", help="an interval, in seconds (default: --cron)"
    )
    create.add_argument(
        "--timezone", metavar="ZONE", help="the expression's IANA zone (default: UTC)"
    )
    create.add_argument(
        "--agent", metavar="TYPE", help="each tick starts a session of TYPE (default: --session)"
    )
    create.add_argument(
        "--session", metavar="ID", help="each tick is a new turn of session ID (default: --agent)"
    )
    create.add_argument("--message", required=True, help="the message each tick sends")
    create.add_argument(
        "--metadata",
        type=_pair,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="metadata of each session started (repeatable; default: none)",
    )
    create.add_argument(
        "--start-json",
        type=_json_object,
        metavar="JSON",
        help="more fields of each start, as POST /start takes them (e.g. state; default: none)",
    )
    create.add_argument(
        "--catchup",
        choices=("once", "skip"),
        default="once",
        help="ticks missed while no server ran: one run for them all, or none "
        "(default: %(default)s)",
    )
    create.add_argument("--id", help="the schedule's id (default: a new one)")
    parsers.append(create)
    parsers.append(actions.add_parser("list", help="the schedules within reach"))
    for name, what in (
        ("get", "show a schedule"),
        ("pause", "pause a schedule"),
        ("resume", "resume a schedule"),
        ("delete", "delete a schedule"),
    ):
        one = actions.add_parser(name, help=what)
        one.add_argument("cron_id", metavar="ID")
        parsers.append(one)
    for parser in parsers:
        parser.add_argument(
            "--server",
            metavar="URL",
            default=DEFAULT_SERVER,
            help="the server (default: %(default)s)",
        )
        parser.add_argument("--json", action="store_true", help="print each schedule as JSON")
    cron.set_defaults(handler=cron_command)
