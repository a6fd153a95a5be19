"""``helix-agents chat [MODULE:ATTR [AGENT]] [--model NAME]``: talk to an agent at the terminal.

Each line typed is a turn of one session: the first starts it (or, for an
existing ``--session``, is a follow-up), every later one is a follow-up
message (``send_message``: a new turn with the conversation's memory). The
reply streams live on one ``AGENT> `` line; tool calls, sub-agents and
companions show as indented lines beside it. A failed turn is reported in
one line and the conversation goes on in a new session (a failed session
takes no more turns; its log stays in the store). ``--model`` chats with a
real model without writing a module (``openai:gpt-4o-mini``), or runs
MODULE:ATTR's agents on it. At a terminal, lines are edited with readline:
up-arrow brings back an earlier line.
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

from helix_agents import AgentConfig, AgentExecutor, AgentHandle, define_agent
from helix_agents.errors import AgentServerError
from helix_agents.events import OutputChunk, TextDelta
from helix_agents.ids import validate_session_id
from helix_agents.models.base import LLMAdapter
from helix_agents.models.names import model_from_name
from helix_agents.server.cli.options import ask_terminal, store_url
from helix_agents.server.cli.target import TargetError, chat_agents
from helix_agents.server.cli.timeline import StreamPrinter
from helix_agents.stores import open_store

__all__ = [
    "EXIT_WORDS",
    "ChatError",
    "add_chat_command",
    "chat_command",
    "model_agent",
    "run_chat",
]

Ask = Callable[[str], Awaitable[str | None]]
"""Show a prompt and return the line typed (None at the end of input)."""

Write = Callable[[str], None]
"""Write text as it is (no newline added): the model's text streams in pieces."""

EXIT_WORDS = ("/exit", "/quit")
"""Lines that end the conversation (as does the end of input)."""

MODEL_AGENT = "assistant"
"""The agent ``chat --model NAME`` talks to when no MODULE:ATTR is given."""


class ChatError(Exception):
    """The conversation cannot start (no such agent, or several and none chosen)."""


def model_agent(llm: LLMAdapter) -> AgentConfig[Any]:
    """The plain agent ``chat --model`` talks to: no tools, a short system prompt."""
    return define_agent(
        MODEL_AGENT, system_prompt="You are a helpful assistant. Answer briefly.", llm=llm
    )


def _choose(agents: list[AgentConfig[Any]], agent_type: str | None) -> AgentConfig[Any]:
    names = ", ".join(sorted(candidate.name for candidate in agents))
    if agent_type is None:
        if len(agents) == 1:
            return agents[0]
        raise ChatError(f"the target holds several agents; name one: {names}")
    agent = next((candidate for candidate in agents if candidate.name == agent_type), None)
    if agent is None:
        raise ChatError(f"no agent {agent_type!r} in the target (it has: {names})")
    return agent


async def run_chat(
    agents: list[AgentConfig[Any]],
    agent_type: str | None,
    *,
    store_url: str,
    session_id: str | None,
    ask: Ask,
    write: Write,
    llm_override: LLMAdapter | None = None,
) -> str:
    """Talk to ``agent_type`` until the end of input or an exit word; return the session id.

    ``agent_type`` may be None when ``agents`` holds one agent;
    ``llm_override``: a model every agent of the tree uses instead of its own.

    Raises:
        ChatError: the agent type is not among ``agents``, or is None while
            there are several.
    """
    agent = _choose(agents, agent_type)
    session_id = session_id or _new_session()
    store = await open_store(store_url)
    try:
        async with AgentExecutor(store, agents, llm_override=llm_override) as executor:
            exists = bool(await store.read(session_id))
            write(f"chat with {agent.name}: session {session_id} in {store_url}\n")
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
                    if exc.code != "SESSION_FAILED":
                        write(f"(the message was refused: {exc})\n")
                        continue
                    # A session that failed before this chat (--session): go on anew.
                    session_id = _new_session()
                    write(f"(that session has failed; this one is new: {session_id})\n")
                    handle = await executor.execute(agent, text, session_id=session_id)
                if not await _print_turn(handle, write):
                    session_id, exists = _new_session(), False
                    write(f"(the conversation goes on in a new session: {session_id})\n")
    finally:
        await store.close()
    return session_id


def _new_session() -> str:
    return f"chat-{uuid.uuid4().hex[:8]}"


async def _print_turn(handle: AgentHandle, write: Write) -> bool:
    """Print a turn's stream live, the reply once; False when the turn failed."""
    printer = StreamPrinter(handle.session_id)
    root = handle.session_id
    in_text = False
    said = ""
    async for item in handle.stream():
        chunk = item.chunk
        if isinstance(chunk, TextDelta) and chunk.agent_id == root:
            if not in_text:
                write(f"{chunk.agent_type}> ")
                in_text = True
            write(chunk.delta)
            said += chunk.delta
            continue
        if in_text:
            write("\n")
            in_text = False
        if isinstance(chunk, OutputChunk) and chunk.agent_id == root:
            if not (isinstance(chunk.output, str) and chunk.output.strip() in said):
                write(f"{chunk.agent_type}> {_shown(chunk.output)}\n")
            continue
        line = printer.format(item)
        if line is not None:
            write(line + "\n")
    if in_text:
        write("\n")
    result = await handle.result()
    if result.status == "failed":
        write(f"(the turn failed: {result.error})\n")
        return False
    if result.status != "completed":
        write(f"({result.status}{': ' + result.error if result.error else ''})\n")
    return True


def _shown(value: object) -> str:
    if isinstance(value, str):
        return value
    return msgspec.json.encode(value).decode()


async def _ask_with_history(prompt: str) -> str | None:
    """Ask with ``input()`` (readline: line editing, up-arrow history); None at the end."""

    def read() -> str | None:
        try:
            return input(prompt) + "\n"
        except EOFError:
            return None

    return await anyio.to_thread.run_sync(read, abandon_on_cancel=True)


def _terminal_ask() -> Callable[[str], Awaitable[str | None]]:
    """Readline's ``input()`` at a terminal; plain line reads otherwise (a pipe, a file)."""
    if not sys.stdin.isatty():
        return ask_terminal
    try:
        import readline  # noqa: F401  (imported for its effect on input())
    except ImportError:  # a Python built without it: no history, still a chat
        return ask_terminal
    return _ask_with_history


def chat_command(args: argparse.Namespace) -> int:
    """Run a parsed ``chat`` command line at the terminal; its exit status."""
    if args.session is not None:
        validate_session_id(args.session)
    llm = model_from_name(args.model) if args.model is not None else None
    if args.target is None:
        if llm is None:
            raise TargetError("chat needs MODULE:ATTR, or --model NAME (e.g. openai:gpt-4o-mini)")
        if args.agent is not None:
            raise TargetError("AGENT names an agent of MODULE:ATTR; give MODULE:ATTR too")
        agents, override = [model_agent(llm)], None
    else:
        agents, override = chat_agents(args.target), llm

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
            ask=_terminal_ask(),
            write=write,
            llm_override=override,
        )
    )
    return 0


def add_chat_command(commands: Any, store_help: str) -> None:
    """Add ``chat`` and its arguments to the CLI's subcommands."""
    chat = commands.add_parser(
        "chat",
        help="talk to an agent at the terminal, one session, turn after turn",
        description="Talk to AGENT of MODULE:ATTR (AGENT may be left out when ATTR is one "
        "agent), or with --model alone to a plain assistant on that model: each line typed "
        "is a turn of one session (the first starts it, the others are follow-up messages "
        "that keep its memory), the reply streamed live. A failed turn is reported and the "
        "chat goes on in a new session. Ends at /exit, /quit or the end of input.",
        epilog="examples:\n  helix-agents chat --model openai:gpt-4o-mini\n"
        "  helix-agents chat myapp:agents researcher --model openai:gpt-4o-mini",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    chat.add_argument(
        "target", metavar="MODULE:ATTR", nargs="?", help="the agents (default: --model's)"
    )
    chat.add_argument(
        "agent", metavar="AGENT", nargs="?", help="the agent type (default: ATTR's only agent)"
    )
    chat.add_argument(
        "--model",
        metavar="NAME",
        help="a model by name, e.g. openai:gpt-4o-mini ($OPENAI_API_KEY) or "
        "openai-compatible:llama3.2 ($OPENAI_BASE_URL): alone, chat with it; with "
        "MODULE:ATTR, run its agents on it (default: the agents' own models)",
    )
    chat.add_argument("--store", metavar="URL", help=store_help)
    chat.add_argument(
        "--session",
        metavar="SESSION_ID",
        help="the session (default: a new one); an existing one goes on where it stopped",
    )
    chat.set_defaults(handler=chat_command)
