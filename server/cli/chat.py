"""``helix-agents chat MODULE:ATTR AGENT``: a conversation with one agent at the terminal.

Each line typed is a turn of one session: the first starts it (or, for an
existing ``--session``, is a follow-up), every later one is a follow-up
message (``send_message``: a new turn with the conversation's memory). The
turn's stream is printed live: the model's text as it arrives, tool calls,
sub-agents and companions as lines; then its output. The session's log is in
the store, so a conversation can be replayed, exported, or taken up again
later with ``--session``. The model is whatever the agent uses (a scripted
one, ``OpenAIChatLLM``...).
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import anyio
import msgspec

from helix_agents import AgentConfig, AgentExecutor, AgentHandle
from helix_agents.errors import AgentServerError
from helix_agents.events import TextDelta
from helix_agents.ids import validate_session_id
from helix_agents.server.cli.options import ask_terminal, store_url
from helix_agents.server.cli.target import chat_agents
from helix_agents.server.cli.timeline import StreamPrinter
from helix_agents.stores import open_store

__all__ = ["EXIT_WORDS", "ChatError", "add_chat_command", "chat_command", "run_chat"]

Ask = Callable[[str], Awaitable[str | None]]
"""Show a prompt and return the line typed (None at the end of input)."""

Write = Callable[[str], None]
"""Write text as it is (no newline added): the model's text streams in pieces."""

EXIT_WORDS = ("/exit", "/quit")
"""Lines that end the conversation (as does the end of input)."""


class ChatError(Exception):
    """The conversation cannot go on (its session failed, or it refused a message)."""


async def run_chat(
    agents: list[AgentConfig],
    agent_type: str,
    *,
    store_url: str,
    session_id: str | None,
    ask: Ask,
    write: Write,
) -> str:
    """Talk to ``agent_type`` until the end of input or an exit word; return the session id.

    Raises:
        ChatError: the agent type is not among ``agents``, a turn failed (a
            failed session takes no more turns), or the session refused.
    """
    agent = next((candidate for candidate in agents if candidate.name == agent_type), None)
    if agent is None:
        names = ", ".join(sorted(candidate.name for candidate in agents))
        raise ChatError(f"no agent {agent_type!r} in the target (it has: {names})")
    session_id = session_id or f"chat-{uuid.uuid4().hex[:8]}"
    store = await open_store(store_url)
    try:
        async with AgentExecutor(store, agents) as executor:
            exists = bool(await store.read(session_id))
            write(f"chat with {agent_type}: session {session_id} in {store_url}\n")
            write(f"type a message; {' or '.join(EXIT_WORDS)} or end of input to stop\n")
            while True:
                line = await ask("you> ")
                if line is None:
                    write("\n")
                    break
                text = line.strip()
                if text in EXIT_WORDS:
                    break
                if not text:
                    continue
                try:
                    if exists:
                        handle = await executor.send_message(session_id, text)
                    else:
                        handle = await executor.execute(agent, text, session_id=session_id)
                        exists = True
                except AgentServerError as exc:
                    raise ChatError(f"session {session_id!r} refused the message: {exc}") from exc
                await _print_turn(handle, write)
    finally:
        await store.close()
    return session_id


async def _print_turn(handle: AgentHandle, write: Write) -> None:
    """Print a turn's stream live, then how it ended."""
    printer = StreamPrinter(handle.session_id)
    in_text = False
    async for item in handle.stream():
        chunk = item.chunk
        if isinstance(chunk, TextDelta) and chunk.agent_id == handle.session_id:
            if not in_text:
                write(f"{chunk.agent_type}> ")
                in_text = True
            write(chunk.delta)
            continue
        if in_text:
            write("\n")
            in_text = False
        line = printer.format(item)
        if line is not None:
            write(line + "\n")
    if in_text:
        write("\n")
    result = await handle.result()
    if result.status == "completed":
        shown = result.output if isinstance(result.output, str) else _json(result.output)
        write(f"= {shown}\n")
        return
    if result.status == "failed":
        raise ChatError(f"the turn failed: {result.error}")
    write(f"({result.status}{': ' + result.error if result.error else ''})\n")


def _json(value: object) -> str:
    return msgspec.json.encode(value).decode()


def chat_command(args: argparse.Namespace) -> int:
    """Run a parsed ``chat`` command line at the terminal; its exit status."""
    if args.session is not None:
        validate_session_id(args.session)
    agents = chat_agents(args.target)

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    anyio.run(
        partial(
            run_chat,
            agents,
            args.agent,
            store_url=store_url(args.store),
            session_id=args.session,
            ask=ask_terminal,
            write=write,
        )
    )
    return 0


def add_chat_command(commands: Any, store_help: str) -> None:
    """Add ``chat`` and its arguments to the CLI's subcommands."""
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
    chat.set_defaults(handler=chat_command)
