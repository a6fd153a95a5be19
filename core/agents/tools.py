"""Tools: what an agent can call, and the context a tool runs in.

``define_tool`` builds a :class:`Tool` from a pydantic input model and an
``execute(input, ctx)`` function (sync or async), or ``execute="client"`` for a
tool the end user's client runs. Names with the framework's reserved prefixes
are refused at definition time, so adding a framework feature later never
collides with a user's tool.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar

import msgspec
from pydantic import BaseModel

from helix_agents.errors import UsageError
from helix_agents.models.base import FINISH_TOOL_NAME, ToolSpec

if TYPE_CHECKING:
    from helix_agents.memory.tools import ToolMemory

__all__ = [
    "COMPANION_TOOL_PREFIX",
    "RESERVED_TOOL_PREFIXES",
    "SUBAGENT_TOOL_PREFIX",
    "WORKSPACE_TOOL_PREFIX",
    "ApprovalPredicate",
    "ApprovalRule",
    "Tool",
    "ToolContext",
    "ToolExecute",
    "check_approval_options",
    "define_tool",
    "is_sub_agent_tool",
    "json_schema_of",
    "validate_tool_name",
]


@functools.lru_cache(maxsize=1024)
def _schema_bytes(model: type[BaseModel]) -> bytes:
    return msgspec.json.encode(model.model_json_schema())


def json_schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """``model.model_json_schema()``, built once per model class (a fresh copy each call)."""
    schema: dict[str, Any] = msgspec.json.decode(_schema_bytes(model))
    return schema


SUBAGENT_TOOL_PREFIX = "subagent__"
"""Prefix of the tools that call a sub-agent (``subagent__<agent name>``)."""

COMPANION_TOOL_PREFIX = "companion__"
"""Prefix of the auto-injected tools that manage persistent children."""

WORKSPACE_TOOL_PREFIX = "workspace_"
"""Prefix reserved for workspace tools."""

"""The tool an agent with an output schema calls to finish with its output."""

RESERVED_TOOL_PREFIXES = (
    SUBAGENT_TOOL_PREFIX,
    COMPANION_TOOL_PREFIX,
    WORKSPACE_TOOL_PREFIX,
    FINISH_TOOL_NAME,
)
"""Name prefixes user tools may not use."""

_TOOL_NAME = re.compile(r"[A-Za-z0-9_\-]{1,64}")

InputT = TypeVar("InputT", bound=BaseModel)


class ToolContext(Protocol):
    """What a running tool can see and do; provided by the run loop."""

    @property
    def session_id(self) -> str:
        """The session whose LLM called the tool."""
        ...

    @property
    def tool_call_id(self) -> str:
        """The call's id: stable across a crash and retry, so use it as an idempotency key."""
        ...

    @property
    def agent_type(self) -> str:
        """The calling agent's name."""
        ...

    @property
    def state(self) -> dict[str, Any]:
        """A copy of the agent's custom state as of now."""
        ...

    @property
    def memory(self) -> ToolMemory:
        """Memory across sessions, its tenant's items only; each read and write is recorded.

        ``await ctx.memory.put(("user-7", "prefs"), "language", {"lang": "fr"})``,
        ``get``, ``delete``, ``search(namespace, query)``, ``list(namespace)``
        (specs/server.md "Memory"); a synchronous tool's calls block instead.
        """
        ...

    async def update_state(
        self, update: dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]
    ) -> dict[str, Any]:
        """Merge ``update`` (or apply the function) into the custom state; return the new state."""
        ...

    async def record_usage(
        self, name: str, value: float = 1.0, *, data: dict[str, Any] | None = None
    ) -> None:
        """Record a custom usage metric for this session."""
        ...

    async def emit(self, name: str, data: Any = None) -> None:
        """Emit a custom chunk on the session's stream."""
        ...


ToolExecute = Callable[[Any, ToolContext], Any | Awaitable[Any]]
"""``execute(input, ctx)``: sync or async; its return value is the tool's result."""

ApprovalPredicate = Callable[[Any, ToolContext], bool | Awaitable[bool]]
"""``requires_approval(input, ctx)``: sync or async; True when a call needs a person's approval."""

ApprovalRule = bool | ApprovalPredicate
"""``requires_approval``: always, never, or decided per call by a predicate."""


def check_approval_options(
    owner: str, requires_approval: Any, expires_in: Any, *, waits: bool
) -> None:
    """Refuse a bad ``requires_approval`` / ``expires_in`` pair (``waits``: a client tool)."""
    if not (isinstance(requires_approval, bool) or callable(requires_approval)):
        raise UsageError(
            f"{owner}: requires_approval must be a bool or a callable (input, ctx) -> bool"
        )
    if expires_in is None:
        return
    number = isinstance(expires_in, int | float) and not isinstance(expires_in, bool)
    if not number or not expires_in > 0:
        raise UsageError(f"{owner}: expires_in must be > 0 seconds, not {expires_in!r}")
    if not waits and requires_approval is False:
        raise UsageError(
            f"{owner}: expires_in applies to client tools and approval gates; "
            "this tool waits for nobody"
        )


@dataclass(frozen=True, kw_only=True)
class Tool(Generic[InputT]):
    """A tool an agent can call. Build it with :func:`define_tool`."""

    name: str
    description: str
    input_schema: type[InputT]
    execute: ToolExecute | Literal["client"]
    timeout: float | None = None
    requires_approval: ApprovalRule = False
    output_schema: type[BaseModel] | None = None
    expires_in: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def is_client_tool(self) -> bool:
        """True when the end user's client executes this tool."""
        return self.execute == "client"

    def spec(self) -> ToolSpec:
        """The tool as the LLM sees it: name, description, JSON Schema of the input."""
        return ToolSpec(
            name=self.name,
            description=self.description,
            parameters=json_schema_of(self.input_schema),
        )


def validate_tool_name(
    name: str, *, allow_reserved: bool = False, what: str = "tool name", longest: int = 64
) -> str:
    """Return ``name`` if it is a valid tool name, else raise :class:`UsageError`.

    ``what`` names the thing in the message ("agent name" for an agent, whose
    tool is ``subagent__<name>``), ``longest`` its length limit.
    """
    if not isinstance(name, str) or _TOOL_NAME.fullmatch(name) is None or len(name) > longest:
        raise UsageError(f"invalid {what} {name!r}: use 1-{longest} letters, digits, '_' or '-'")
    if not allow_reserved:
        for prefix in RESERVED_TOOL_PREFIXES:
            if name.startswith(prefix):
                raise UsageError(
                    f"{what} {name!r} uses the reserved prefix {prefix!r} "
                    f"(reserved: {', '.join(RESERVED_TOOL_PREFIXES)})"
                )
    return name


def define_tool(
    name: str,
    description: str,
    input_schema: type[InputT],
    execute: ToolExecute | Literal["client"],
    *,
    timeout: float | None = None,
    requires_approval: ApprovalRule = False,
    output_schema: type[BaseModel] | None = None,
    expires_in: float | None = None,
    metadata: dict[str, Any] | None = None,
) -> Tool[InputT]:
    """Define a tool.

    Args:
        name: what the LLM calls it; reserved prefixes are refused.
        description: shown to the LLM.
        input_schema: a pydantic model; the LLM's arguments are validated
            against it, and a validation error goes back to the LLM as the
            tool result.
        execute: ``execute(input, ctx)``, sync or async, or ``"client"`` for a
            tool the client runs (the session pauses until its result arrives).
        timeout: seconds; a slower call ends with an error result.
        requires_approval: True, or a predicate ``(input, ctx) -> bool`` (sync
            or async): the call waits for a person's approval before it runs;
            a denial gives the LLM an error result with the reason.
        output_schema: a pydantic model the result must match: a client's
            submitted result is refused (400) otherwise, a server tool's
            result becomes an error result.
        expires_in: seconds a client tool or an approval waits for its answer;
            then it resolves as an error ("no answer within N s").

    Raises:
        UsageError: for a bad name, schema, timeout, execute, approval rule
            or expiry.
    """
    validate_tool_name(name)
    if not (isinstance(input_schema, type) and issubclass(input_schema, BaseModel)):
        raise UsageError(f"tool {name!r}: input_schema must be a pydantic model class")
    if output_schema is not None and not (
        isinstance(output_schema, type) and issubclass(output_schema, BaseModel)
    ):
        raise UsageError(f"tool {name!r}: output_schema must be a pydantic model class")
    if execute != "client" and not callable(execute):
        raise UsageError(f"tool {name!r}: execute must be callable or 'client'")
    if timeout is not None and not timeout > 0:
        raise UsageError(f"tool {name!r}: timeout must be > 0 seconds, not {timeout!r}")
    check_approval_options(
        f"tool {name!r}", requires_approval, expires_in, waits=execute == "client"
    )
    return Tool(
        name=name,
        description=description,
        input_schema=input_schema,
        execute=execute,
        timeout=timeout,
        requires_approval=requires_approval,
        output_schema=output_schema,
        expires_in=None if expires_in is None else float(expires_in),
        metadata=dict(metadata or {}),
    )


def is_sub_agent_tool(name: str) -> bool:
    """True if a tool name calls a sub-agent (it starts with ``subagent__``)."""
    return name.startswith(SUBAGENT_TOOL_PREFIX)
