"""Conversation messages: what the LLM sees, recorded in the log by ``MessageAppended``."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
    "AssistantMessage",
    "Message",
    "ReasoningPart",
    "SystemMessage",
    "ToolCall",
    "ToolResultMessage",
    "UserMessage",
]

FINISH_TOOL_NAME = "__finish__"
"""The tool an agent with an output schema calls with its output (``helix_agents.models``)."""


class ToolCall(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One tool call requested by the LLM; ``id`` is also the tool's idempotency key."""

    id: str
    name: str
    arguments: Any = None


class _MessageBase(msgspec.Struct, frozen=True, kw_only=True, tag_field="role", rename="camel"):
    """Shared configuration of the message union (tagged by ``role``)."""


class SystemMessage(_MessageBase, tag="system", frozen=True):
    """A system prompt."""

    content: str


class UserMessage(_MessageBase, tag="user", frozen=True):
    """Input from the user (or, for a sub-agent, from its parent)."""

    content: str


class ReasoningPart(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A model's reasoning (thinking) kept with its turn, for the provider that needs it back.

    ``text`` is what the model showed of its reasoning (may be a summary or
    empty); ``provider`` names the API that produced it (``anthropic``,
    ``google``, ``openai-responses``), and ``data`` is that API's opaque part
    to send back as it came (Anthropic's ``signature`` or redacted block,
    Gemini's thought signature, OpenAI's reasoning item with its encrypted
    content). Another provider ignores parts that are not its own.
    """

    text: str = ""
    provider: str | None = None
    data: dict[str, Any] = {}


class AssistantMessage(_MessageBase, tag="assistant", frozen=True):
    """The LLM's reply: text, and the tool calls it asked for (and its kept reasoning)."""

    content: str = ""
    tool_calls: list[ToolCall] = []
    reasoning: list[ReasoningPart] | msgspec.UnsetType = msgspec.UNSET
    """The turn's kept reasoning; unset (and absent on the wire) when there is none."""


class ToolResultMessage(_MessageBase, tag="tool", frozen=True):
    """The result of one tool call, as text the LLM reads."""

    tool_call_id: str
    tool_name: str
    content: str
    is_error: bool = False


Message = SystemMessage | UserMessage | AssistantMessage | ToolResultMessage
"""Any conversation message."""
