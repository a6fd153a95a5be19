"""The ``helix-agents`` command line: ``replay``, ``export``, ``check``, ``demo``, ``serve``...

Every bad input ends in one line on stderr, ``helix-agents: error: <message>``,
and a non-zero exit: 2 when the command line itself is wrong (unknown option,
invalid session id, bad store URL, ``--at`` below 1), 1 for everything found
while running (unknown session, unreadable file, malformed or corrupt log).
``specs/cli.md`` is the reference.
"""

from __future__ import annotations

import argparse
import difflib
import io
import os
import sys
from collections.abc import Callable
from functools import partial
from itertools import takewhile
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit

import anyio
import msgspec

from helix_agents._aio import unwrap_group
from helix_agents.errors import (
    CorruptLogError,
    DamagedStoreError,
    EventDecodeError,
    HelixError,
    UsageError,
)
from helix_agents.events import Event
from helix_agents.ids import validate_session_id
from helix_agents.log.codec import decode_jsonl, encode_jsonl
from helix_agents.log.diff import diff_logs
from helix_agents.log.projections import project_state
from helix_agents.log.store import EventStore
from helix_agents.server.cli.branches.diff_cmd import add_diff_command, diff_json, diff_lines
from helix_agents.server.cli.branches.eval_cmd import add_eval_command, run_eval_command
from helix_agents.server.cli.chat import ChatError, add_chat_command
from helix_agents.server.cli.crons import add_cron_command
from helix_agents.server.cli.demos.hitl import run_hitl_demo
from helix_agents.server.cli.demos.tree import run_demo
from helix_agents.server.cli.host import add_host_command
from helix_agents.server.cli.openapi_cmd import add_openapi_command
from helix_agents.server.cli.options import STORE_URL_ENV, ask_terminal, store_url
from helix_agents.server.cli.replay import replay_lines
from helix_agents.server.cli.rerun import rerun_lines
from helix_agents.server.cli.serve import add_serve_command
from helix_agents.server.cli.sessions import (
    add_fork_command,
    add_sessions_command,
    fork_lines,
    fork_request,
    fork_through,
    session_page,
    sessions_lines,
)
from helix_agents.server.cli.target import TargetError
from helix_agents.server.cli.worker import add_temporal_commands
from helix_agents.stores import DEFAULT_STORE_URL, StoreCheck, check_store, open_store

__all__ = ["DAMAGE_FOUND", "STORE_URL_ENV", "CliError", "main", "store_url"]

PROG = "helix-agents"
DAMAGE_FOUND = 3
"""``check``'s exit status when some session (or the store itself) is damaged."""


class CliError(Exception):
    """A bad input, reported as one ``helix-agents: error:`` line; ``code`` is the exit status."""

    def __init__(self, message: str, *, code: int = 1) -> None:
        self.message = message
        self.code = code
        super().__init__(message)


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line, not usage plus a message."""

    def error(self, message: str) -> NoReturn:
        """Raise the parse error as a :class:`CliError` with exit status 2."""
        raise CliError(message, code=2)


def _seq(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a sequence number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"sequence numbers start at 1, not {value}")
    return value


def _version() -> str:
    """The installed package's version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("helix-agents")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _sessions(args: argparse.Namespace) -> int:
    url = store_url(args.store)
    _check_store_exists(url)
    page = anyio.run(session_page, url, args)
    print("\n".join(sessions_lines(page, as_json=args.json)))
    return 0


def _fork(args: argparse.Namespace) -> int:
    request = fork_request(args)
    url = None
    if args.server is None:
        url = store_url(args.store)
        _check_store_exists(url)
    result = anyio.run(fork_through, url, args.server, request)
    print("\n".join(fork_lines(result, as_json=args.json)))
    return 0


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="helix-agents: run, serve, replay and export agent sessions.",
        epilog="Store URLs: sqlite:///relative.db, sqlite:////absolute.db, memory://. "
        f"Default: ${STORE_URL_ENV}, else {DEFAULT_STORE_URL}.",
    )
    parser.add_argument(
        "--version", action="version", version=f"{PROG} {_version()}", help="print the version"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    store_help = f"event store URL (default: ${STORE_URL_ENV} or {DEFAULT_STORE_URL})"

    replay = commands.add_parser(
        "replay",
        help="print a session's timeline and its projected state",
        description="Print a session's timeline (one line per event), a blank line,\n"
        "then the state projected from the log.",
        epilog="examples:\n  helix-agents replay --store sqlite:///helix.db SESSION_ID --at 12\n"
        "  helix-agents replay session.jsonl --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    replay.add_argument(
        "target",
        metavar="SESSION_ID|FILE.jsonl",
        help="a session id in the store; or, when --store is not given, a JSON Lines file "
        "if it ends in .jsonl or contains a '/' ('-' reads standard input)",
    )
    replay.add_argument("--store", metavar="URL", help=store_help)
    replay.add_argument(
        "--at",
        type=_seq,
        metavar="SEQ",
        help="show the log and state as they were at SEQ (default: the whole log)",
    )
    replay.add_argument(
        "--json", action="store_true", help="print only the state, as one JSON object"
    )
    replay.add_argument(
        "--rerun",
        metavar="MODULE:ATTR",
        help="re-run the session offline: the recorded model answers, the tools of these agents "
        "(default: replay the log only)",
    )
    replay.add_argument(
        "--live",
        metavar="TOOL",
        action="append",
        default=[],
        help="with --rerun: run this tool (or subagent__NAME, or a remote companion's type) for "
        "real instead of answering it from the recording (repeatable; default: none, every "
        "call is answered from the recording)",
    )

    export = commands.add_parser(
        "export",
        help="write a session's log as JSON Lines",
        description="Write a session's log as JSON Lines (one event per line, the wire "
        "encoding), to standard output or to FILE.",
    )
    export.add_argument("session_id", metavar="SESSION_ID")
    export.add_argument("--store", metavar="URL", help=store_help)
    export.add_argument(
        "-o", "--output", metavar="FILE", help="write to FILE (default: standard output)"
    )

    check = commands.add_parser(
        "check",
        help="check every session of a store for damage (an fsck)",
        description="Read every session's log whole: gaps, checksum chain breaks, "
        "undecodable events, logs that do not fold, and damage to the store itself "
        "(SQLite: commits lost since the high-water mark, the file's quick_check). "
        "Prints one line per damaged session, then a summary. Changes nothing.",
        epilog=f"exit status: 0 nothing damaged, {DAMAGE_FOUND} damage found, "
        "1 the store could not be checked, 2 a bad command line",
    )
    check.add_argument("--store", metavar="URL", help=store_help)

    demo = commands.add_parser(
        "demo",
        help="record a parent and sub-agent session (scripted LLM) and replay it",
        description="Record a session in which a parent agent delegates to a sub-agent, "
        "print its stream live, then replay it. The LLM is scripted: no model is called. "
        "Without --store, a fresh SQLite file in a temporary directory is used.",
    )
    demo.add_argument(
        "scenario",
        nargs="?",
        choices=["tree", "hitl"],
        default="tree",
        help="tree: a parent and a sub-agent (default); hitl: a grandchild's tool waits for "
        "your approval, typed at the terminal",
    )
    demo.add_argument("--store", metavar="URL", help="event store URL (default: a fresh file)")
    demo.add_argument(
        "--answer",
        choices=["approve", "deny"],
        help="hitl: answer without asking (default: ask on standard input)",
    )
    replay.set_defaults(handler=_replay)
    export.set_defaults(handler=_export)
    check.set_defaults(handler=_check)
    demo.set_defaults(handler=_demo)
    add_serve_command(commands, store_help)
    add_host_command(commands)
    add_chat_command(commands, store_help)
    add_openapi_command(commands)
    add_sessions_command(commands, store_help)
    commands.choices["sessions"].set_defaults(handler=_sessions)
    add_fork_command(commands, store_help)
    commands.choices["fork"].set_defaults(handler=_fork)
    add_temporal_commands(commands, store_help)
    add_cron_command(commands)
    add_diff_command(commands, store_help).set_defaults(handler=_diff)
    add_eval_command(commands, store_help).set_defaults(
        handler=partial(run_eval_command, check_store=_check_store_exists)
    )
    return parser


def _is_file_target(target: str) -> bool:
    return target == "-" or target.endswith(".jsonl") or "/" in target or os.sep in target


def _read_file(target: str) -> list[Event]:
    try:
        data = sys.stdin.buffer.read() if target == "-" else Path(target).read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {target}: {exc.strerror or exc}") from exc
    try:
        events = decode_jsonl(data)
    except EventDecodeError as exc:
        raise CliError(f"{target}: {exc}") from exc
    if not events:
        raise CliError(f"{target} holds no events")
    return events


def _check_store_exists(url: str) -> None:
    """Refuse to read from a SQLite file that does not exist (opening would create it)."""
    parts = urlsplit(url)
    if parts.scheme != "sqlite" or parts.netloc or not parts.path.startswith("/"):
        return  # open_store reports malformed URLs
    path = parts.path[1:]
    if path and not os.path.exists(path):
        raise CliError(f"no event store at {url}: {path} does not exist")


async def _read_session(url: str, session_id: str) -> list[Event]:
    store: EventStore = await open_store(url, read_only=True)
    try:
        return await store.read(session_id)
    finally:
        await store.close()


def _load_session(url: str, session_id: str) -> list[Event]:
    validate_session_id(session_id)
    _check_store_exists(url)
    try:
        events = anyio.run(_read_session, url, session_id)
    except EventDecodeError as exc:
        raise CliError(f"session {session_id!r} in {url}: undecodable event: {exc}") from exc
    if not events:
        hint = f" (to replay the file, write ./{session_id})" if os.path.isfile(session_id) else ""
        raise CliError(f"session {session_id!r} not found in {url}{hint}")
    return events


def _replay(args: argparse.Namespace) -> int:
    target: str = args.target
    if args.live and args.rerun is None:
        raise CliError("--live needs --rerun", code=2)
    if args.rerun is not None:
        validate_session_id(target)
        url = store_url(args.store)
        _check_store_exists(url)
        print("\n".join(anyio.run(rerun_lines, url, target, args.rerun, args.live)))
        return 0
    events, source = _events_of(target, args.store)
    last_seq = events[-1].seq
    total_seq: int | None = None
    if args.at is not None:
        if args.at > last_seq:
            raise CliError(f"--at {args.at} is beyond the end of {source} (last seq {last_seq})")
        events = list(takewhile(lambda event: event.seq <= args.at, events))
        total_seq = last_seq
    try:
        if args.json:
            _write_bytes(msgspec.json.encode(project_state(events)) + b"\n")
        else:
            print("\n".join(replay_lines(events, total_seq=total_seq)))
    except CorruptLogError as exc:
        raise CliError(f"corrupt log in {source}: {exc}") from exc
    return 0


def _events_of(target: str, store: str | None) -> tuple[list[Event], str]:
    """A log named on the command line (a session id, or a file without --store), and its name."""
    if store is None and _is_file_target(target):
        return _read_file(target), target
    url = store_url(store)
    return _load_session(url, target), f"session {target!r} in {url}"


def _diff(args: argparse.Namespace) -> int:
    # A session id never holds a '/': such a target is a file even with --store.
    a, source_a = _events_of(args.a, None if "/" in args.a else args.store)
    b, source_b = _events_of(args.b, None if "/" in args.b else args.store)
    try:
        diff = diff_logs(a, b)
    except CorruptLogError as exc:
        raise CliError(f"corrupt log in {source_a} or {source_b}: {exc}") from exc
    if args.json:
        _write_bytes(diff_json(diff) + b"\n")
    else:
        print("\n".join(diff_lines(diff, a, b)))
    return 0


def _export(args: argparse.Namespace) -> int:
    events = _load_session(store_url(args.store), args.session_id)
    data = encode_jsonl(events)
    if args.output is None:
        _write_bytes(data)
        return 0
    try:
        Path(args.output).write_bytes(data)
    except OSError as exc:
        raise CliError(f"cannot write {args.output}: {exc.strerror or exc}") from exc
    print(f"wrote {len(events)} events to {args.output}", file=sys.stderr)
    return 0


async def _check_url(url: str) -> StoreCheck:
    store: EventStore = await open_store(url, read_only=True)
    try:
        return await check_store(store)
    finally:
        await store.close()


def _check(args: argparse.Namespace) -> int:
    url = store_url(args.store)
    _check_store_exists(url)
    try:
        result = anyio.run(_check_url, url)
    except DamagedStoreError as exc:
        print(f"store: {exc}")
        print(f"could not check the sessions in {url}: the store itself is damaged")
        return DAMAGE_FOUND
    for problem in result.problems:
        print(f"store: {problem}")
    for _, line in sorted(result.damaged.items()):
        print(line)
    summary = f"checked {result.sessions} session(s) in {url}: {len(result.damaged)} damaged"
    if result.problems:
        summary += f", and the store itself ({len(result.problems)} problem(s))"
    print(summary)
    return 0 if result.ok else DAMAGE_FOUND


def _demo(args: argparse.Namespace) -> int:
    if args.scenario == "hitl":
        anyio.run(partial(run_hitl_demo, args.store, ask=ask_terminal, answer=args.answer))
        return 0
    if args.answer is not None:
        raise CliError("--answer is for 'demo hitl'")
    anyio.run(run_demo, args.store)
    return 0


def _write_bytes(data: bytes) -> None:
    sys.stdout.flush()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:
        sys.stdout.write(data.decode())
    else:
        buffer.write(data)
        buffer.flush()


def _fail(message: str, code: int) -> int:
    one_line = " ".join(message.split("\n"))
    print(f"{PROG}: error: {one_line}", file=sys.stderr)
    return code


def _run(args: argparse.Namespace) -> int:
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except TargetError as exc:
        raise CliError(str(exc), code=exc.code) from exc
    except ChatError as exc:
        raise CliError(str(exc)) from exc


def main(argv: list[str] | None = None) -> int:
    """Run the ``helix-agents`` command line; return the exit status."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        # A log may hold any text; never die on a terminal that cannot show it.
        sys.stdout.reconfigure(errors="backslashreplace")
    words = sys.argv[1:] if argv is None else argv
    parser = _build_parser()
    if not words:  # a bare command: what it can do
        parser.print_help()
        return 2
    try:
        try:
            _check_command(parser, words[0])
            return _run(parser.parse_args(words))
        except BaseExceptionGroup as group:
            # One line can show one error: the first, if the run failed in several places.
            raise unwrap_group(group, first_of_many=True) from None
    except CliError as exc:
        return _fail(exc.message, exc.code)
    except UsageError as exc:
        return _fail(str(exc), 2)
    except HelixError as exc:
        return _fail(str(exc), 1)
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except OSError as exc:
        return _fail(str(exc), 1)
    except KeyboardInterrupt:  # not an error: a person stopped it
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def _check_command(parser: argparse.ArgumentParser, word: str) -> None:
    """Refuse an unknown command in one line, with the nearest known one as a suggestion."""
    if word.startswith("-"):
        return
    names = [
        name
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    ]
    if word in names:
        return
    near = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    raise CliError(f"unknown command {word!r}{hint} (commands: {', '.join(names)})", code=2)


def _quiet_broken_pipe() -> int:
    """stdout's reader went away (``| head``): stop without a second error at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        pass
    return 1
