"""An MCP server's tool list as agent tools: names, input schemas, approval rules, results.

:func:`agent_tools` turns a ``tools/list`` answer into :class:`~helix_agents.Tool`\\ s,
refusing the whole list (a :class:`~helix_agents.errors.ToolsetError`) when a
tool cannot be an agent tool: a name outside ``[A-Za-z0-9_-]{1,64}`` once
prefixed (MCP also allows ``.``), a reserved name, a name given twice, or an
input schema that is not a JSON Schema of an object. Each tool's input model
is an :class:`MCPArguments` subclass whose JSON Schema is the server's, so
the model sees that schema and a call's arguments are checked against it
before the server is asked. :func:`result_value` maps a ``CallToolResult``
to the JSON the log records and the model reads.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar

import mcp_types
from jsonschema import SchemaError
from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from pydantic import BaseModel, ConfigDict, create_model, model_validator
from pydantic_core import PydanticCustomError

from helix_agents.agents.tools import ApprovalRule, Tool, ToolContext, define_tool
from helix_agents.errors import ToolsetError, UsageError

__all__ = ["MCPArguments", "agent_tools", "error_text", "result_value"]

Caller = Callable[[str, "MCPArguments", ToolContext], Awaitable[Any]]
"""``call(mcp tool name, arguments, ctx)``: what an MCP tool's ``execute`` does."""


class MCPArguments(BaseModel):
    """The arguments of a call to an MCP tool, checked against the tool's JSON Schema.

    Each tool gets a subclass: its ``model_json_schema()`` is the server's
    input schema, and validation checks a call's arguments against it (a
    mismatch is the model's error to fix; the server is not asked). An
    approval predicate gets an instance: ``value.arguments()`` is the dict.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    input_schema: ClassVar[dict[str, Any]] = {"type": "object"}
    """The MCP tool's input schema, as the server listed it."""
    validator: ClassVar[Validator | None] = None

    @model_validator(mode="before")
    @classmethod
    def _check(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise PydanticCustomError(
                "mcp_arguments",
                "the arguments must be a JSON object, not {kind}",
                {"kind": type(data).__name__},
            )
        if cls.validator is not None:
            error = best_match(cls.validator.iter_errors(data))
            if error is not None:
                where = ".".join(str(part) for part in error.absolute_path)
                raise PydanticCustomError(
                    "mcp_arguments",
                    "{where}{problem}",
                    {"where": f"{where}: " if where else "", "problem": error.message},
                )
        return data

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The MCP tool's input schema (a copy), which is what the model is shown."""
        return copy.deepcopy(cls.input_schema)

    def arguments(self) -> dict[str, Any]:
        """The arguments as the call sends them."""
        return dict(self.model_extra or {})


def _arguments_model(name: str, schema: dict[str, Any], validator: Validator) -> type[MCPArguments]:
    model = create_model(f"MCPArguments[{name}]", __base__=MCPArguments)
    model.input_schema = schema
    model.validator = validator
    return model


def _checked_schema(server: str, name: str, schema: Any) -> tuple[dict[str, Any], Validator]:
    """The tool's input schema and a validator for it, or the reason the list is refused."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise ToolsetError(
            server,
            f"tool {name!r} has an input schema that is not a JSON Schema of an object "
            f"(MCP requires type 'object'): {_short(schema)}",
        )
    try:
        validator_class = validator_for(schema)
        validator_class.check_schema(schema)
    except SchemaError as exc:
        raise ToolsetError(
            server, f"tool {name!r} has an invalid input schema: {exc.message}"
        ) from exc
    return schema, validator_class(schema)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def agent_tools(
    server: str,
    listed: Sequence[mcp_types.Tool],
    call: Caller,
    *,
    prefix: str,
    include: frozenset[str] | None,
    timeout: float,
    requires_approval: ApprovalRule | Mapping[str, ApprovalRule],
) -> tuple[Tool[Any], ...]:
    """The agent tools for server ``server``'s listed tools (those in ``include``, if given).

    Raises:
        ToolsetError: the list cannot be used as it is (the message names the
            tool and what is wrong); nothing is built then.
    """
    seen: set[str] = set()
    chosen = [tool for tool in listed if include is None or tool.name in include]
    names = {tool.name for tool in chosen}
    if include is not None and include - names:
        raise ToolsetError(
            server, f"include names tools the server does not list: {sorted(include - names)}"
        )
    if isinstance(requires_approval, Mapping) and set(requires_approval) - names:
        raise ToolsetError(
            server,
            "requires_approval names tools not offered (not listed, or left out by include): "
            f"a gate that would never apply: {sorted(set(requires_approval) - names)}",
        )
    tools: list[Tool[Any]] = []
    for listed_tool in chosen:
        name = listed_tool.name
        if name in seen:
            raise ToolsetError(server, f"the server lists tool {name!r} twice")
        seen.add(name)
        schema, validator = _checked_schema(server, name, listed_tool.input_schema)
        rule = (
            requires_approval.get(name, False)
            if isinstance(requires_approval, Mapping)
            else requires_approval
        )
        try:
            tools.append(
                define_tool(
                    prefix + name,
                    listed_tool.description or listed_tool.title or f"The MCP tool {name}.",
                    _arguments_model(prefix + name, schema, validator),
                    _executor(call, name),
                    timeout=timeout,
                    requires_approval=rule,
                    metadata={"mcp_server": server, "mcp_tool": name},
                )
            )
        except UsageError as exc:
            hint = "" if prefix else " (include=[...] leaves a tool out)"
            raise ToolsetError(
                server, f"tool {name!r} cannot be an agent tool: {exc}{hint}"
            ) from exc
    return tuple(tools)


def _executor(call: Caller, name: str) -> Callable[[MCPArguments, ToolContext], Awaitable[Any]]:
    async def execute(value: MCPArguments, ctx: ToolContext) -> Any:
        return await call(name, value, ctx)

    return execute


def _block(block: mcp_types.ContentBlock) -> dict[str, Any]:
    """A non-text content block as JSON; binary data is left out (the model reads text)."""
    if isinstance(block, mcp_types.TextContent):
        return {"type": "text", "text": block.text}
    if isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
        return {"type": block.type, "mimeType": block.mime_type}
    if isinstance(block, mcp_types.EmbeddedResource):
        resource = block.resource
        entry: dict[str, Any] = {"type": "resource", "uri": str(resource.uri)}
        if resource.mime_type:
            entry["mimeType"] = resource.mime_type
        if isinstance(resource, mcp_types.TextResourceContents):
            entry["text"] = resource.text
        return entry
    entry = {"type": "resource_link", "uri": str(block.uri), "name": block.name}
    if block.mime_type:
        entry["mimeType"] = block.mime_type
    return entry


def result_value(result: mcp_types.CallToolResult) -> Any:
    """What a successful call records: its structured content, else its text, else its blocks.

    Structured content is the tool's typed result and wins. Without it, text
    blocks alone become one string (joined by newlines); other blocks make a
    list of JSON objects (images and audio as their MIME type only).
    """
    if result.structured_content is not None:
        return result.structured_content
    blocks = result.content
    if not blocks:
        return None
    if all(isinstance(block, mcp_types.TextContent) for block in blocks):
        return "\n".join(block.text for block in blocks if isinstance(block, mcp_types.TextContent))
    return [_block(block) for block in blocks]


def error_text(result: mcp_types.CallToolResult) -> str:
    """The message of an error result: its text blocks, else a generic sentence."""
    texts = [block.text for block in result.content if isinstance(block, mcp_types.TextContent)]
    return "\n".join(texts) if texts else "the MCP tool reported an error"
