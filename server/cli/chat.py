"""``helix-agents chat [MODULE:ATTR [AGENT]] [--model NAME]``: talk to an agent at the terminal.

Each line typed is a turn of one session: the first starts it (or, for an
existing ``--session``, is a follow-up), every later one is a follow-up
message (``send_message``: a new turn with the conversation's memory). The
reply streams live on one ``AGENT> `` line; tool calls, sub-agents and
companions show as indented lines beside it. A failed turn is reported in
one line; a failed session takes no more turns (``SESSION_FAILED``), so the
next message goes on in a new session that starts with the conversation so
far (a transcript of the failed session's messages) and names it in its
metadata (``continues``). ``--model`` chats with a real model without
writing a module (``openai:gpt-4o-mini``), or runs MODULE:ATTR's agents on
it. At a terminal, lines are edited with readline: up-arrow brings back an
earlier line; from a pipe, each line read is written after its prompt, so
the output reads as a transcript. The exit status is 1 when turns were taken
and none succeeded.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import msgspec

from helix_agents import AgentConfig, AgentExecutor, AgentHandle, define_agent
from helix_agents.errors import AgentServerError
from helix_agents.events import OutputChunk, TextDelta
from helix_agents.ids import validate_session_id
from helix_agents.log import project_state
from helix_agents.log.store import EventStore
from helix_agents.messages import AssistantMessage, Message, UserMessage
from helix_agents.models.base import FINISH_TOOL_NAME, LLMAdapter
from helix_agents.models.names import model_from_name
from helix_agents.server.cli.options import ask_terminal, store_url
from helix_agents.server.cli.target import TargetError, chat_agents
from helix_agents.server.cli.timeline import StreamPrinter
from helix_agents.stores import open_store

__all__ = [
    "CONTINUES",
    "EXIT_WORDS",
    "ChatError",
    "ChatSummary",
    "add_chat_command",
    "chat_command",
    "model_agent",
    "run_chat",
    "transcript",
]

Ask = Callable[[str], Awaitable[str | None]]
"""Show a prompt and return the line typed (None at the end of input), leaving the
output at the start of a line."""

Write = Callable[[str], None]
"""Write text as it is (no newline added): the model's text streams in pieces."""

EXIT_WORDS = ("/exit", "/quit")
"""Lines that end the conversation (as does the end of input)."""

MODEL_AGENT = "assistant"
"""The agent ``chat --model NAME`` talks to when no MODULE:ATTR is given."""


CONTINUES = "continues"
"""The metadata key of a session a chat started after a failed one: the failed one's id."""


class ChatError(Exception):
    """The conversation cannot start (no such agent, or several and none chosen), or no turn
    of it succeeded."""


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


@dataclass
class ChatSummary:
    """How a chat went: the session it ended in, the turns taken, those that succeeded."""

    session_id: str
    turns: int = 0
    """Messages sent: each a turn, a failed or refused one included."""
    succeeded: int = 0
    """Turns that did not fail (completed, or paused for an answer)."""
    last_error: str | None = None
    """Why the last turn that did not succeed did not."""


async def run_chat(
    agents: list[AgentConfig[Any]],
    agent_type: str | None,
    *,
    store_url: str,
    session_id: str | None,
    ask: Ask,
    write: Write,
    llm_override: LLMAdapter | None = None,
) -> ChatSummary:
    """Talk to ``agent_type`` until the end of input or an exit word; say how it went.

    ``agent_type`` may be None when ``agents`` holds one agent;
    ``llm_override``: a model every agent of the tree uses instead of its own.
    After a failed turn (the session failed: it takes no more turns), the next
    message starts a new session that carries the conversation over.

    Raises:
        ChatError: the agent type is not among ``agents``, or is None while
            there are several.
    """
    agent = _choose(agents, agent_type)
    summary = ChatSummary(session_id=session_id or _new_session())
    store = await open_store(store_url)
    try:
        async with AgentExecutor(store, agents, llm_override=llm_override) as executor:
            chat = _Chat(executor, store, agent, summary, write)
            chat.exists = bool(await store.read(summary.session_id))
            write(f"chat with {agent.name}: session {summary.session_id} in {store_url}\n")
            write(f"type a message; {' or '.join(EXIT_WORDS)} or end of input to stop\n")
            while True:
                line = await ask("you> ")
                if line is None:
                    break
                text = line.strip()
                if text in EXIT_WORDS:
                    break
                if text:
                    await chat.turn(text)
    finally:
        await store.close()
    return summary


class _Chat:
    """One chat's turns: where the next message goes, and what a failed session leaves."""

    def __init__(
        self,
        executor: AgentExecutor,
        store: EventStore,
        agent: AgentConfig[Any],
        summary: ChatSummary,
        write: Write,
    ) -> None:
        self.executor, self.store, self.agent = executor, store, agent
        self.summary, self.write = summary, write
        self.exists = False
        self.carried: str | None = None  # the failed session the next start goes on from

    async def turn(self, text: str) -> None:
        """Send ``text`` as the next turn and print it; the summary counts it."""
        self.summary.turns += 1
        try:
            handle = await self._send(text)
        except AgentServerError as exc:
            if exc.code != "SESSION_FAILED":
                self._refused(f"the message was refused: {exc}")
                return
            # A session that failed before this chat (--session): go on from it.
            self._moved_on("failed before")
            handle = await self._send(text)
        error = await _print_turn(handle, self.write)
        if error is None:
            self.summary.succeeded += 1
            return
        self.summary.last_error = error
        self._moved_on("failed")

    async def _send(self, text: str) -> AgentHandle:
        session_id = self.summary.session_id
        if self.exists:
            return await self.executor.send_message(session_id, text)
        messages = [*await self._conversation(), UserMessage(content=text)]
        metadata = {CONTINUES: self.carried} if self.carried else None
        handle = await self.executor.execute(
            self.agent, messages, session_id=session_id, metadata=metadata
        )
        self.exists, self.carried = True, None
        return handle

    def _refused(self, why: str) -> None:
        self.summary.last_error = why
        self.write(f"({why})\n")

    def _moved_on(self, how: str) -> None:
        """The session failed: the next message starts a new one, carrying the conversation."""
        failed = self.summary.session_id
        self.summary.session_id, self.exists, self.carried = _new_session(), False, failed
        self.write(
            f"(session {failed} {how} and takes no more turns; the chat goes on in session "
            f"{self.summary.session_id}, which starts with the conversation so far)\n"
        )

    async def _conversation(self) -> list[UserMessage]:
        """The carried session's conversation as one message (none when nothing was said)."""
        if self.carried is None:
            return []
        said = transcript(project_state(await self.store.read(self.carried)).messages, self.agent)
        if not said:
            return []
        heading = f"(The conversation so far, carried over from session {self.carried}:)"
        return [UserMessage(content="\n".join([heading, *said]))]


def transcript(messages: list[Message], agent: AgentConfig[Any]) -> list[str]:
    """What was said in ``messages``, a line each: ``user: ...`` and ``AGENT: ...``.

    The agent's text, or its output when it finished with ``output_schema``
    (as JSON); tool calls and results, and system prompts, are left out.
    """
    lines: list[str] = []
    for message in messages:
        if isinstance(message, UserMessage):
            lines.append(f"user: {message.content}")
        elif isinstance(message, AssistantMessage):
            finish = [call for call in message.tool_calls if call.name == FINISH_TOOL_NAME]
            for said in [message.content.strip(), *(_shown(call.arguments) for call in finish)]:
                if said:
                    lines.append(f"{agent.name}: {said}")
    return lines


def _new_session() -> str:
    return f"chat-{uuid.uuid4().hex[:8]}"


async def _print_turn(handle: AgentHandle, write: Write) -> str | None:
    """Print a turn's stream live, the reply once; its error when the turn failed."""
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
        return result.error or "failed"
    if result.status != "completed":
        write(f"({result.status}{': ' + result.error if result.error else ''})\n")
    return None


def _shown(value: object) -> str:
    if isinstance(value, str):
        return value
    return msgspec.json.encode(value).decode()


async def _ask_with_history(prompt: str) -> str | None:
    """Ask with ``input()`` (readline: line editing, up-arrow history); None at the end."""

    def read() -> str | None:
        try:
            return input(prompt) + "\n"
        except EOFError:  # ^D after the prompt: end its line
            print(flush=True)
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
    """Run a parsed ``chat`` command line at the terminal; its exit status.

    Raises:
        ChatError: no turn succeeded (turns were taken): exit status 1.
    """
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

    summary = anyio.run(
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
    if summary.turns and not summary.succeeded:
        raise ChatError(
            f"no turn of the chat succeeded ({summary.turns} tried; the last: {summary.last_error})"
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
        "chat goes on in a new session that starts with the conversation so far. Ends at "
        "/exit, /quit or the end of input; exit status 1 when turns were taken and none "
        "succeeded.",
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
