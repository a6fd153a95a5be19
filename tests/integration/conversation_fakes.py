"""Every provider's fake, answering by conversation: one script, four wire formats.

Parent and child agents call one fake at once, their calls interleaved, and a
durable runtime may call again: a fake that plays replies in order cannot
serve them. Here a fake's reply is a function of the request alone. A
:data:`Script` reads the provider-neutral :class:`Conversation` (the system
prompt, the first user message, the tool results so far, the tools offered,
the opaque reasoning sent back) and says one :class:`Said` turn (reasoning,
text, calls, each streamed in pieces); :data:`WIRES` reads and writes each
API's own format with the builders of ``provider_fakes.py`` (Anthropic's
Messages, Gemini, OpenAI's chat completions) and ``responses_fake.py``
(OpenAI's Responses API)::

    fake = FakeAnthropic()
    fake.answer = answering("anthropic", script)

A call's id is its own on every wire but Gemini's, which, as Gemini does,
sends calls without one (the adapter makes the id up).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from provider_fakes import anthropic_turn, chat_turn, gemini_turn
from responses_fake import Turn, usage
from starlette.responses import Response

__all__ = ["WIRES", "Call", "Conversation", "Offered", "Said", "Script", "Wire", "answering"]


@dataclass(frozen=True)
class Offered:
    """A tool as a request offers it to the model."""

    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class Conversation:
    """What a request holds, whatever its wire format."""

    system: str
    """The system prompt (its texts joined by blank lines)."""
    user: str
    """The first user message's text."""
    results: list[str]
    """The tool results so far, in order, as the model reads them."""
    tools: dict[str, Offered]
    """The tools offered, by name."""
    kept: list[str] = field(default_factory=list)
    """The opaque reasoning sent back (Anthropic's thinking signatures, the Responses API's
    encrypted content, Gemini's thought signatures decoded)."""


@dataclass(frozen=True)
class Call:
    """A tool call the model makes; its JSON arguments stream in ``pieces`` pieces."""

    id: str
    name: str
    arguments: dict[str, Any]
    pieces: int = 2

    def split(self) -> list[str]:
        """The arguments' JSON text in ``pieces`` pieces (the last takes the rest)."""
        raw = json.dumps(self.arguments, separators=(",", ":"))
        size = max(1, len(raw) // self.pieces)
        cuts = [raw[i * size : (i + 1) * size] for i in range(self.pieces - 1)]
        return [*cuts, raw[size * (self.pieces - 1) :]]


@dataclass(frozen=True)
class Said:
    """One model turn: reasoning (with its opaque ``signature``), text, calls, in that order."""

    text: tuple[str, ...] = ()
    calls: tuple[Call, ...] = ()
    thinking: tuple[str, ...] = ()
    signature: str = "sig-fake"


Script = Callable[[Conversation], Said]
"""A model: the turn it says to a conversation."""


class Wire(NamedTuple):
    """One API's format: how a request reads, how a turn is written."""

    read: Callable[[dict[str, Any]], Conversation]
    write: Callable[[Said], Response]


def answering(wire: str, script: Script) -> Callable[[dict[str, Any]], Response]:
    """A fake's ``answer``: the request read on ``wire``, the script's turn written on it."""
    read, write = WIRES[wire]
    return lambda body: write(script(read(body)))


def _text(content: Any) -> str:
    """A message content's text: a string, or the texts of its parts."""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


# --- Anthropic's Messages API ----------------------------------------------------------


def _anthropic_blocks(body: dict[str, Any], role: str) -> Iterator[dict[str, Any]]:
    for message in body.get("messages", []):
        if message["role"] == role and isinstance(message["content"], list):
            yield from message["content"]


def _read_anthropic(body: dict[str, Any]) -> Conversation:
    system = body.get("system", "")
    users = [m["content"] for m in body.get("messages", []) if m["role"] == "user"]
    return Conversation(
        system=system if isinstance(system, str) else "\n\n".join(b["text"] for b in system),
        user=_text([b for b in users[0] if b.get("type") == "text"]) if users else "",
        results=[
            _text(block["content"])
            for block in _anthropic_blocks(body, "user")
            if block.get("type") == "tool_result"
        ],
        tools={
            tool["name"]: Offered(tool.get("description", ""), tool["input_schema"])
            for tool in body.get("tools", [])
        },
        kept=[
            block["signature"]
            for block in _anthropic_blocks(body, "assistant")
            if block.get("type") == "thinking"
        ],
    )


def _write_anthropic(said: Said) -> Response:
    calls = [(call.id, call.name, call.split()) for call in said.calls]
    turn = anthropic_turn(said.text, calls, thinking=said.thinking, signature=said.signature)
    return turn()


# --- the Gemini API --------------------------------------------------------------------


def _gemini_parts(body: dict[str, Any], role: str) -> Iterator[dict[str, Any]]:
    for content in body.get("contents", []):
        if content.get("role") == role:
            yield from content.get("parts", [])


def _read_gemini(body: dict[str, Any]) -> Conversation:
    system = body.get("systemInstruction") or {}
    user = next((p["text"] for p in _gemini_parts(body, "user") if "text" in p), "")
    declared = [d for tool in body.get("tools", []) for d in tool.get("functionDeclarations", [])]
    return Conversation(
        system=_text(system.get("parts", [])),
        user=user,
        results=[
            str(next(iter(part["functionResponse"]["response"].values())))
            for part in _gemini_parts(body, "user")
            if "functionResponse" in part
        ],
        tools={d["name"]: Offered(d.get("description", ""), _schema(d)) for d in declared},
        kept=[
            base64.b64decode(part["thoughtSignature"]).decode()
            for part in _gemini_parts(body, "model")
            if "thoughtSignature" in part
        ],
    )


def _schema(declaration: dict[str, Any]) -> dict[str, Any]:
    """A function declaration's parameters, under any of the names the SDK may send."""
    for key in ("parametersJsonSchema", "parameters_json_schema", "parameters"):
        if key in declaration:
            schema: dict[str, Any] = declaration[key]
            return schema
    return {}


def _write_gemini(said: Said) -> Response:
    calls = [(None, call.name, call.arguments) for call in said.calls]  # Gemini sends no ids
    signed = said.signature if said.thinking else None
    return gemini_turn(said.text, calls, thinking=said.thinking, thought_signature=signed)()


# --- OpenAI's Responses API ------------------------------------------------------------


def _read_responses(body: dict[str, Any]) -> Conversation:
    items = body.get("input", [])
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    system = [_text(i["content"]) for i in items if i.get("role") in ("system", "developer")]
    users = [_text(i["content"]) for i in items if i.get("role") == "user"]
    return Conversation(
        system="\n\n".join([body["instructions"], *system] if body.get("instructions") else system),
        user=users[0] if users else "",
        results=[i["output"] for i in items if i.get("type") == "function_call_output"],
        tools={
            tool["name"]: Offered(tool.get("description", ""), tool.get("parameters", {}))
            for tool in body.get("tools", [])
            if tool.get("type") == "function"
        },
        kept=[i["encrypted_content"] for i in items if i.get("type") == "reasoning"],
    )


def _write_responses(said: Said) -> Response:
    turn = Turn()
    if said.thinking:
        turn.reasoning(list(said.thinking), encrypted=said.signature)
    if said.text:
        turn.message(list(said.text))
    for call in said.calls:
        turn.call(call.id, call.name, call.split())
    return turn.completed(usage(reasoning=3 if said.thinking else 0)).reply()()


# --- OpenAI's chat completions -----------------------------------------------------------


def _read_chat(body: dict[str, Any]) -> Conversation:
    messages = body.get("messages", [])
    users = [_text(m["content"]) for m in messages if m["role"] == "user"]
    return Conversation(
        system="\n\n".join(_text(m["content"]) for m in messages if m["role"] == "system"),
        user=users[0] if users else "",
        results=[_text(m["content"]) for m in messages if m["role"] == "tool"],
        tools={
            f["name"]: Offered(f.get("description", ""), f.get("parameters", {}))
            for f in (tool["function"] for tool in body.get("tools", []))
        },
    )


def _write_chat(said: Said) -> Response:
    # No reasoning on this wire: what a chat-completions server thinks is not sent.
    return chat_turn(said.text, [(call.id, call.name, call.split()) for call in said.calls])()


WIRES: dict[str, Wire] = {
    "anthropic": Wire(_read_anthropic, _write_anthropic),
    "gemini": Wire(_read_gemini, _write_gemini),
    "responses": Wire(_read_responses, _write_responses),
    "chat": Wire(_read_chat, _write_chat),
}
"""Each API's format by name."""
