"""``helix-agents sessions``: list a store's sessions, newest first (as ``GET /sessions``)."""

from __future__ import annotations

import argparse
import time
from typing import Any

import msgspec

from helix_agents.errors import UsageError
from helix_agents.log.search import SessionQuery, parse_time
from helix_agents.log.session_list import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    SessionCatalog,
    SessionListPage,
)
from helix_agents.stores import open_store

__all__ = ["add_sessions_command", "session_page", "session_query", "sessions_lines"]

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
