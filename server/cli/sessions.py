"""``helix-agents sessions``: list a store's sessions, newest first (as ``GET /sessions``).

And ``helix-agents fork``: a branch of a session, in a store or through a server's ``POST /fork``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from helix_agents.branches.fork import ForkRequest, ForkResult, fork_session
from helix_agents.errors import UsageError
from helix_agents.events import (
    DecideApproval,
    ForkEdit,
    ReplaceState,
    ReplaceToolResult,
    ReplaceUserMessage,
    UseAgent,
)
from helix_agents.log.search import SessionQuery, parse_time
from helix_agents.log.session_list import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    SessionCatalog,
    SessionListPage,
)
from helix_agents.messages import UserMessage
from helix_agents.server.cli.options import TOKEN_ENV
from helix_agents.stores import open_store
from helix_agents.transports import HttpRemoteAgentTransport

__all__ = [
    "add_fork_command",
    "add_sessions_command",
    "fork_lines",
    "fork_request",
    "fork_through",
    "session_page",
    "session_query",
    "sessions_lines",
]

STATUSES = ("running", "completed", "failed", "interrupted", "paused")


def _page_size(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, not {text!r}") from None
    if not 1 <= value <= MAX_PAGE_SIZE:
        raise argparse.ArgumentTypeError(f"must be 1 to {MAX_PAGE_SIZE}, not {value}")
    return value


def add_sessions_command(commands: Any, store_help: str) -> None:
    """Add ``sessions`` to the CLI's subcommands."""
    sessions = commands.add_parser(
        "sessions",
        help="list a store's sessions, newest first",
        description="List the sessions of a store, newest first (the order and paging of "
        "GET /sessions, specs/http.md): created time (UTC), status, agent type, steps, "
        "session id, and the parent of a sub-agent's session.",
    )
    sessions.add_argument("--store", metavar="URL", help=store_help)
    sessions.add_argument(
        "--status", choices=STATUSES, help="only sessions with this status (default: any)"
    )
    sessions.add_argument(
        "--agent", metavar="TYPE", help="only sessions of this agent type (default: any)"
    )
    sessions.add_argument(
        "--top-level",
        action="store_true",
        help="only sessions without a parent (default: sub-agents' sessions too)",
    )
    sessions.add_argument(
        "--search",
        metavar="TEXT",
        help="only sessions whose messages or output have every word of TEXT, each as the "
        "start of a word, any case (default: no text search)",
    )
    sessions.add_argument(
        "--metadata",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only sessions whose metadata KEY equals VALUE; repeat for more keys, all must "
        "match (default: none)",
    )
    for flag, what in (
        ("--created-after", "created at or after"),
        ("--created-before", "created before"),
        ("--updated-after", "whose last event is at or after"),
        ("--updated-before", "whose last event is before"),
    ):
        sessions.add_argument(
            flag,
            metavar="TIME",
            help=f"only sessions {what} TIME: seconds since the epoch or ISO 8601 "
            "(no zone: UTC) (default: no bound)",
        )
    sessions.add_argument(
        "--limit",
        type=_page_size,
        default=DEFAULT_PAGE_SIZE,
        metavar="N",
        help=f"sessions per page, 1-{MAX_PAGE_SIZE} (default: %(default)s)",
    )
    sessions.add_argument(
        "--cursor",
        metavar="CURSOR",
        help="continue after a previous page (the cursor it printed; default: the first page)",
    )
    sessions.add_argument(
        "--json", action="store_true", help="print the page as one JSON object, as GET /sessions"
    )


def session_query(args: argparse.Namespace) -> SessionQuery:
    """The search ``args`` asks for (UsageError for a bad one)."""
    metadata: list[tuple[str, str]] = []
    for pair in args.metadata:
        key, equals, value = pair.partition("=")
        if not equals:
            raise UsageError(f"--metadata takes KEY=VALUE, not {pair[:40]!r}")
        metadata.append((key, value))

    def when(flag: str, raw: str | None) -> float | None:
        return None if raw is None else parse_time(flag, raw)

    return SessionQuery.build(
        text=args.search,
        metadata=metadata,
        created_after=when("--created-after", args.created_after),
        created_before=when("--created-before", args.created_before),
        updated_after=when("--updated-after", args.updated_after),
        updated_before=when("--updated-before", args.updated_before),
    )


async def session_page(url: str, args: argparse.Namespace) -> SessionListPage:
    """The page of sessions ``args`` asks for, from the store at ``url`` (closed after)."""
    query = session_query(args)
    store = await open_store(url, read_only=True)
    try:
        return await SessionCatalog(store).page(
            status=args.status,
            agent_type=args.agent,
            top_level=args.top_level,
            limit=args.limit,
            cursor=args.cursor,
            query=query,
        )
    finally:
        await store.close()


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts))


def sessions_lines(page: SessionListPage, *, as_json: bool) -> list[str]:
    """The output of ``sessions``: a table (or the JSON page), then where the next page starts."""
    if as_json:
        return [msgspec.json.encode(page).decode()]
    if not page.sessions:
        return ["no sessions"]
    agent_width = max(len("AGENT"), *(len(s.agent_type) for s in page.sessions))
    lines = [f"{'CREATED (UTC)':19}  {'STATUS':11}  {'AGENT':{agent_width}}  STEPS  SESSION"]
    for summary in page.sessions:
        child = f"  (child of {summary.parent_session_id})" if summary.parent_session_id else ""
        lines.append(
            f"{_when(summary.created_ts):19}  {summary.status:11}  "
            f"{summary.agent_type:{agent_width}}  {summary.step_count:5}  "
            f"{summary.session_id}{child}"
        )
    if page.next_cursor is not None:
        lines.append(f"more: --cursor {page.next_cursor}")
    return lines


# --- helix-agents fork ----------------------------------------------------------------


def add_fork_command(commands: Any, store_help: str) -> None:
    """Add ``fork`` to the CLI's subcommands (specs/branches.md)."""
    fork = commands.add_parser(
        "fork",
        help="fork a session (and its tree) at a sequence, with edits: a new branch",
        description="Fork SESSION_ID at SEQ: a new session holding its events up to SEQ "
        "(ids mapped, the edits applied), then live. With --server, through the server's "
        "POST /fork: the branch runs there at once. With a store only, the branch is "
        "written and not run (a server on the store resumes it: POST /resume, or serve's "
        "recovery). The origin's log is never changed.",
        epilog="examples:\n  helix-agents fork --server http://127.0.0.1:8000 s1 --at 12 "
        "--user-message 2='in French please'\n"
        "  helix-agents fork --store sqlite:///helix.db s1 --at 9 --tool-result "
        "call_0_0='{\"temp\": 3}' --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    fork.add_argument("session_id", metavar="SESSION_ID")
    fork.add_argument(
        "--at", type=int, metavar="SEQ", help="the last event the branch keeps (default: all)"
    )
    where = fork.add_mutually_exclusive_group()
    where.add_argument("--store", metavar="URL", help=store_help)
    where.add_argument(
        "--server",
        metavar="URL",
        help="fork through this server's POST /fork, its bearer token from $HELIX_TOKEN "
        "(default: in the store, written and not run)",
    )
    fork.add_argument("--new-id", metavar="ID", help="the branch's id (default: a new one)")
    fork.add_argument(
        "--user-message",
        action="append",
        default=[],
        metavar="SEQ=TEXT",
        help="replace the user message the event at SEQ carries (repeatable; default: none)",
    )
    fork.add_argument(
        "--tool-result",
        action="append",
        default=[],
        metavar="CALL_ID=JSON",
        help="replace (or give) tool call CALL_ID's result (repeatable; default: none)",
    )
    fork.add_argument(
        "--tool-error",
        action="append",
        default=[],
        metavar="CALL_ID=TEXT",
        help="make tool call CALL_ID's result an error (repeatable; default: none)",
    )
    fork.add_argument(
        "--state",
        metavar="JSON",
        help="replace the agent's state, a JSON object (default: as recorded)",
    )
    fork.add_argument(
        "--approve",
        action="append",
        default=[],
        metavar="CALL_ID",
        help="approve the approval of CALL_ID open at SEQ (server only; default: none)",
    )
    fork.add_argument(
        "--deny",
        action="append",
        default=[],
        metavar="CALL_ID[=REASON]",
        help="deny the approval of CALL_ID open at SEQ (server only; default: none)",
    )
    fork.add_argument(
        "--agent",
        metavar="TYPE",
        help="run on as this agent type, a new version (default: the same)",
    )
    fork.add_argument(
        "--model", metavar="PROVIDER:MODEL", help="run on with this model (default: the agent's)"
    )
    fork.add_argument(
        "--edits",
        metavar="FILE",
        help="more edits: a JSON list in POST /fork's shape, '-' reads standard input "
        "(default: none)",
    )
    fork.add_argument(
        "--no-run", action="store_true", help="write the branch, do not run it (server only)"
    )
    fork.add_argument("--json", action="store_true", help="print the answer as one JSON object")


def _pair(flag: str, raw: str) -> tuple[str, str]:
    key, equals, value = raw.partition("=")
    if not equals or not key:
        raise UsageError(f"{flag} takes KEY=VALUE, not {raw[:40]!r}")
    return key, value


def _json(flag: str, raw: str) -> Any:
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise UsageError(f"{flag}: not JSON: {exc}") from None


def fork_request(args: argparse.Namespace) -> ForkRequest:
    """The fork ``args`` asks for, its edits checked (UsageError for a bad one)."""
    edits: list[ForkEdit] = []
    for raw in args.user_message:
        seq, text = _pair("--user-message", raw)
        if not seq.isdigit():
            raise UsageError(f"--user-message takes SEQ=TEXT, not {raw[:40]!r}")
        edits.append(ReplaceUserMessage(seq=int(seq), message=UserMessage(content=text)))
    for raw in args.tool_result:
        call, value = _pair("--tool-result", raw)
        edits.append(ReplaceToolResult(tool_call_id=call, result=_json("--tool-result", value)))
    for raw in args.tool_error:
        call, text = _pair("--tool-error", raw)
        edits.append(ReplaceToolResult(tool_call_id=call, error=text or "error"))
    if args.state is not None:
        state = _json("--state", args.state)
        if not isinstance(state, dict):
            raise UsageError("--state takes a JSON object")
        edits.append(ReplaceState(state=state))
    edits += [DecideApproval(tool_call_id=call, approved=True) for call in args.approve]
    for raw in args.deny:
        call, _, reason = raw.partition("=")
        edits.append(DecideApproval(tool_call_id=call, approved=False, reason=reason or None))
    if args.agent is not None or args.model is not None:
        edits.append(UseAgent(agent_type=args.agent, model=args.model))
    if args.edits is not None:
        try:
            text = sys.stdin.read() if args.edits == "-" else Path(args.edits).read_text("utf-8")
            edits += msgspec.json.decode(text, type=list[ForkEdit])
        except OSError as exc:
            raise UsageError(f"cannot read {args.edits}: {exc.strerror or exc}") from None
        except msgspec.ValidationError as exc:
            raise UsageError(f"--edits {args.edits}: {exc}") from None
        except msgspec.DecodeError as exc:
            raise UsageError(f"--edits {args.edits}: not JSON: {exc}") from None
    return ForkRequest(
        session_id=args.session_id,
        at_seq=args.at,
        edits=edits,
        new_session_id=args.new_id,
        run=not args.no_run,
    )


async def fork_through(url: str | None, server: str | None, request: ForkRequest) -> ForkResult:
    """Fork through ``server``'s ``POST /fork``, else in the store at ``url`` (written, not run)."""
    if server is not None:
        token = os.environ.get(TOKEN_ENV)
        headers = {"Authorization": f"Bearer {token}"} if token else None
        async with HttpRemoteAgentTransport(server, headers=headers) as transport:
            return await transport.fork(request)
    assert url is not None
    store = await open_store(url)
    try:
        return await fork_session(
            store,
            None,
            request.session_id,
            request.at_seq,
            edits=request.edits,
            new_session_id=request.new_session_id,
            run=False,
        )
    finally:
        await store.close()


def fork_lines(result: ForkResult, *, as_json: bool) -> list[str]:
    """The output of ``fork``: what was made, and what runs."""
    if as_json:
        return [msgspec.json.encode(result).decode()]
    lines = [
        f"forked {result.origin_session_id} at seq {result.origin_seq} -> {result.session_id}"
        f" ({result.status}, {result.copied_events} events copied)"
    ]
    if result.root_session_id != result.session_id:
        lines.append(f"the branch's tree: read it from {result.root_session_id}")
    lines += [f"  {origin} -> {branch}" for origin, branch in result.sessions.items()][1:]
    lines.append(
        f"running: run {result.run_id}" if result.run_id else "not running (nothing was started)"
    )
    return lines
