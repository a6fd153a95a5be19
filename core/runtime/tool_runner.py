"""Running one regular tool call, ``__finish__`` validation, and the tool context."""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
import msgspec
from pydantic import BaseModel, ValidationError

from helix_agents.agents.config import AgentConfig
from helix_agents.agents.tools import Tool
from helix_agents.events import (
    CustomChunk,
    Event,
    MessageAppended,
    StateUpdated,
    ToolEnd,
    ToolStart,
    UsageRecorded,
)
from helix_agents.log.state import SessionState
from helix_agents.memory.base import MemoryStore
from helix_agents.memory.tools import SyncToolMemory, ToolMemory
from helix_agents.messages import ToolCall, ToolResultMessage
from helix_agents.runtime.writer import SessionWriter

__all__ = [
    "InvalidArguments",
    "ToolOutcome",
    "decode_arguments",
    "encode_result",
    "run_tool_call",
    "validate_arguments",
    "validate_finish",
    "validation_message",
]

log = logging.getLogger("helix_agents")

ModelT = TypeVar("ModelT", bound=BaseModel)


class ToolOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What a tool call produced: a JSON-able result, or an error message."""

    result: Any = None
    error: str | None = None


def to_jsonable(value: Any) -> Any:
    """Turn a tool's return value into JSON-compatible data (pydantic models included)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return msgspec.to_builtins(value, enc_hook=_enc_hook)


def _enc_hook(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return str(value)


def encode_result(outcome: ToolOutcome) -> str:
    """The text the LLM reads as a tool result: the result (or ``{"error": ...}``) as JSON."""
    if outcome.error is not None:
        return msgspec.json.encode({"error": outcome.error}).decode()
    if isinstance(outcome.result, str):
        return outcome.result
    return msgspec.json.encode(outcome.result).decode()


def validation_message(exc: ValidationError) -> str:
    """A pydantic validation error as one stable line: ``field: problem; ...``."""
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "input"
        parts.append(f"{where}: {error['msg']}")
    return "invalid arguments: " + "; ".join(parts)


class InvalidArguments(Exception):
    """A call's arguments do not fit; ``str()`` is the one line the model reads."""


def decode_arguments(arguments: Any) -> Any:
    """The model's arguments as data: a string (JSON an adapter could not decode) is decoded here.

    Raises:
        InvalidArguments: ``invalid arguments: not valid JSON (<what> at line L
            column C): '<the text, trimmed>'``.
    """
    if not isinstance(arguments, str):
        return arguments
    if not arguments.strip():
        return {}
    try:
        return json.loads(arguments)
    except json.JSONDecodeError as exc:
        where = f"{exc.msg.removesuffix(' at')} at line {exc.lineno} column {exc.colno}"
        # The start says which call it was; the end is where truncated JSON broke off.
        shown = arguments if len(arguments) <= 200 else f"{arguments[:140]}...{arguments[-57:]}"
        raise InvalidArguments(f"invalid arguments: not valid JSON ({where}): {shown!r}") from None


def validate_arguments(schema: type[ModelT], arguments: Any) -> ModelT:
    """``arguments`` (decoded by :func:`decode_arguments`) validated into ``schema``.

    Raises:
        InvalidArguments: the JSON is malformed, or does not fit the schema
            (:func:`validation_message`'s line).
    """
    try:
        return schema.model_validate(decode_arguments(arguments))
    except ValidationError as exc:
        raise InvalidArguments(validation_message(exc)) from None


def validate_finish(agent: AgentConfig, arguments: Any) -> ToolOutcome:
    """Check ``__finish__`` arguments against the agent's output schema."""
    if agent.output_schema is None:
        return ToolOutcome(result=arguments)
    try:
        model = validate_arguments(agent.output_schema, arguments)
    except InvalidArguments as exc:
        return ToolOutcome(error=str(exc))
    return ToolOutcome(result=model.model_dump(mode="json"))


class RunToolContext:
    """The :class:`~helix_agents.ToolContext` a running tool gets (async methods)."""

    def __init__(
        self,
        agent: AgentConfig,
        writer: SessionWriter,
        call: ToolCall,
        memory: MemoryStore | None = None,
    ) -> None:
        self._agent = agent
        self._writer = writer
        self._call = call
        self._memory = ToolMemory(memory, writer, call.id)

    @property
    def session_id(self) -> str:
        """The calling session."""
        return self._writer.session_id

    @property
    def tool_call_id(self) -> str:
        """The call's id; stable across retries, so an idempotency key."""
        return self._call.id

    @property
    def agent_type(self) -> str:
        """The calling agent's name."""
        return self._agent.name

    @property
    def state(self) -> dict[str, Any]:
        """A copy of the custom state now."""
        return dict(self._writer.state.custom_state)

    @property
    def memory(self) -> ToolMemory:
        """The tenant's memory store, each read and write recorded in this session's log."""
        return self._memory

    async def update_state(
        self, update: dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]
    ) -> dict[str, Any]:
        """Merge ``update`` into the custom state (or apply the function), atomically."""
        schema = self._agent.state_schema

        def build(state: SessionState) -> list[Event]:
            current = dict(state.custom_state)
            new = update(current) if callable(update) else {**current, **update}
            if schema is not None:
                new = schema.model_validate(new).model_dump(mode="json")
            return [StateUpdated(state=to_jsonable(new))]

        state = await self._writer.append_with(build)
        return dict(state.custom_state)

    async def record_usage(
        self, name: str, value: float = 1.0, *, data: dict[str, Any] | None = None
    ) -> None:
        """Record a custom usage metric."""
        await self._writer.append(
            UsageRecorded(
                kind="custom",
                name=name,
                value=value,
                data=to_jsonable(data or {}),
            )
        )

    async def emit(self, name: str, data: Any = None) -> None:
        """Emit a custom chunk on the stream."""
        await self._writer.append(
            CustomChunk(
                agent_id=self.session_id,
                agent_type=self._agent.name,
                name=name,
                data=to_jsonable(data),
            )
        )


class SyncToolContext:
    """The context a synchronous ``execute`` gets: the same operations, blocking."""

    def __init__(self, inner: RunToolContext) -> None:
        self._inner = inner
        self.session_id = inner.session_id
        self.tool_call_id = inner.tool_call_id
        self.agent_type = inner.agent_type
        self.memory = SyncToolMemory(inner.memory)
        """The tenant's memory store (blocking calls)."""

    @property
    def state(self) -> dict[str, Any]:
        """A copy of the custom state now."""
        return anyio.from_thread.run_sync(lambda: self._inner.state)

    def update_state(
        self, update: dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]
    ) -> dict[str, Any]:
        """Merge ``update`` into the custom state (blocking)."""
        return anyio.from_thread.run(self._inner.update_state, update)

    def record_usage(
        self, name: str, value: float = 1.0, *, data: dict[str, Any] | None = None
    ) -> None:
        """Record a custom usage metric (blocking)."""
        anyio.from_thread.run(lambda: self._inner.record_usage(name, value, data=data))

    def emit(self, name: str, data: Any = None) -> None:
        """Emit a custom chunk (blocking)."""
        anyio.from_thread.run(self._inner.emit, name, data)


async def _execute(tool: Tool[Any], value: BaseModel, ctx: RunToolContext) -> Any:
    if not callable(tool.execute):
        raise TypeError(f"tool {tool.name!r} is run by the client, not here")
    execute: Callable[..., Any] = tool.execute
    if inspect.iscoroutinefunction(execute):
        return await execute(value, ctx)
    # A sync tool runs on a worker thread so it cannot block the loop; a
    # timeout or interrupt abandons the thread rather than waiting for it.
    produced = await anyio.to_thread.run_sync(
        execute, value, SyncToolContext(ctx), abandon_on_cancel=True
    )
    if inspect.isawaitable(produced):
        produced = await produced
    return produced


def tool_start(agent: AgentConfig, session_id: str, call: ToolCall) -> ToolStart:
    """The ``tool_start`` chunk for a call."""
    return ToolStart(
        agent_id=session_id,
        agent_type=agent.name,
        tool_call_id=call.id,
        tool_name=call.name,
        arguments=call.arguments,
    )


def tool_end(agent: AgentConfig, session_id: str, call: ToolCall, outcome: ToolOutcome) -> ToolEnd:
    """The ``tool_end`` chunk for a call."""
    return ToolEnd(
        agent_id=session_id,
        agent_type=agent.name,
        tool_call_id=call.id,
        tool_name=call.name,
        result=outcome.result,
        error=outcome.error,
    )


def result_events(
    agent: AgentConfig, session_id: str, call: ToolCall, outcome: ToolOutcome, *, usage: bool
) -> list[Event]:
    """The events that record a call's result: the tool message, ``tool_end``, usage."""
    events: list[Event] = [
        MessageAppended(
            message=ToolResultMessage(
                tool_call_id=call.id,
                tool_name=call.name,
                content=encode_result(outcome),
                is_error=outcome.error is not None,
            ),
        ),
        tool_end(agent, session_id, call, outcome),
    ]
    if usage:
        events.append(UsageRecorded(kind="tool", name=call.name))
    return events


async def run_tool_call(
    agent: AgentConfig,
    writer: SessionWriter,
    call: ToolCall,
    tool: Tool[Any],
    fire: Callable[..., Awaitable[None]],
    memory: MemoryStore | None = None,
) -> ToolOutcome:
    """Run a regular tool call and record it: ``tool_start``, the result, ``tool_end``.

    ``memory``: the store ``ctx.memory`` reaches (``RunEnv.memory``).

    Bad arguments (malformed JSON included), an exception and a timeout all
    become error results the LLM reads; only cancellation (interrupt, abort)
    escapes.
    """
    session_id = writer.session_id
    await writer.append(tool_start(agent, session_id, call))
    await fire("before_tool", call)
    try:
        value = validate_arguments(tool.input_schema, call.arguments)
    except InvalidArguments as exc:
        outcome = ToolOutcome(error=str(exc))
    else:
        ctx = RunToolContext(agent, writer, call, memory)
        try:
            if tool.timeout is not None:
                with anyio.fail_after(tool.timeout):
                    produced = await _execute(tool, value, ctx)
            else:
                produced = await _execute(tool, value, ctx)
            outcome = ToolOutcome(result=to_jsonable(produced))
        except TimeoutError:
            outcome = ToolOutcome(error=f"tool {tool.name!r} timed out after {tool.timeout:g}s")
        except Exception as exc:  # a tool's failure is data for the LLM, not a crash
            log.info("tool %s (%s) raised %r", tool.name, call.id, exc)
            outcome = ToolOutcome(error=f"{type(exc).__name__}: {exc}")
    await writer.append(*result_events(agent, session_id, call, outcome, usage=True))
    await fire("after_tool", call, outcome)
    return outcome
