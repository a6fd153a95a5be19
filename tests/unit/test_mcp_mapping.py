"""The MCP bridge's mappings, without a server: options, tool lists, arguments, results."""

from __future__ import annotations

import inspect
import math
import re
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from pydantic import ValidationError

import helix_agents.mcp
from helix_agents.bridges.mcp.tools import agent_tools, error_text, result_value
from helix_agents.errors import ToolsetError, UsageError
from helix_agents.mcp import MCPArguments, MCPToolset, StdioServerParameters
from helix_agents.runtime.tool_runner import validation_message

STDIO = StdioServerParameters(command="mcp-server", args=["--flag"])


async def never(name: str, value: MCPArguments, ctx: Any) -> Any:
    raise AssertionError("not called here")


def listed(name: str, schema: Any = None, **more: Any) -> mcp_types.Tool:
    """A listed tool; ``model_construct`` lets a test list what the SDK would refuse to send."""
    return mcp_types.Tool.model_construct(
        name=name, input_schema={"type": "object"} if schema is None else schema, **more
    )


def build(*tools: mcp_types.Tool, **options: Any) -> tuple[Any, ...]:
    settings: dict[str, Any] = {
        "prefix": "",
        "include": None,
        "timeout": 5.0,
        "requires_approval": False,
    }
    settings.update(options)
    return agent_tools("srv", list(tools), never, **settings)


# --- options --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("server", "options", "message"),
    [
        ("ftp://example.com", {}, "is not an http:// or https:// URL"),
        ("localhost:8000/mcp", {}, "is not an http:// or https:// URL"),
        (["python", "server.py"], {}, "server must be a URL or StdioServerParameters"),
        (STDIO, {"headers": {"A": "b"}}, "headers are for a URL"),
        ("http://h/mcp", {"headers": {"A": 1}}, "headers must map strings to strings"),
        (STDIO, {"name": " "}, "name must be a non-empty string"),
        (STDIO, {"prefix": "my prefix"}, "prefix must be up to 63"),
        (STDIO, {"prefix": "x" * 64}, "prefix must be up to 63"),
        (STDIO, {"include": "read"}, "include must be a list of tool names"),
        (STDIO, {"timeout": 0}, "timeout must be a number of seconds > 0"),
        (STDIO, {"timeout": True}, "timeout must be a number of seconds > 0"),
        (STDIO, {"timeout": math.inf}, "timeout must be finite"),
        (STDIO, {"connect_timeout": -1}, "connect_timeout must be a number of seconds > 0"),
        (STDIO, {"requires_approval": "yes"}, "requires_approval must be a bool or a callable"),
        (STDIO, {"requires_approval": {"read": 2}}, "requires_approval must be a bool"),
        (STDIO, {"requires_approval": {1: True}}, "maps tool names to rules"),
        (STDIO, {"progress": "no"}, "progress must be a bool"),
    ],
)
def test_bad_options_are_refused(server: Any, options: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        MCPToolset(server, **options)


def test_a_toolset_is_named_after_its_server_and_has_no_tools_until_open() -> None:
    assert MCPToolset(STDIO).name == "mcp-server --flag"
    http = MCPToolset("https://user:pw@tools.example.com:8443/mcp?key=secret")
    assert http.name == "https://tools.example.com:8443/mcp"  # no credentials, no query
    assert MCPToolset(STDIO, name="files").name == "files"
    assert http.tools() == ()
    assert repr(http) == "<MCPToolset 'https://tools.example.com:8443/mcp' closed, 0 tools>"


# --- tool lists -------------------------------------------------------------------


def test_listed_tools_become_agent_tools_with_the_prefix_and_the_servers_schema() -> None:
    schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    [read, stat] = build(
        listed("read", schema, description="Read a file."),
        listed("stat", title="File status"),
        prefix="fs_",
    )
    assert (read.name, read.description) == ("fs_read", "Read a file.")
    assert stat.description == "File status"  # no description: its title
    assert read.spec().parameters == schema
    assert read.timeout == 5.0
    assert read.metadata == {"mcp_server": "srv", "mcp_tool": "read"}
    [bare] = build(listed("ping"))
    assert bare.description == "The MCP tool ping."


@pytest.mark.parametrize(
    ("tools", "options", "message"),
    [
        ([listed("read file")], {}, "tool 'read file' cannot be an agent tool: invalid tool name"),
        ([listed("files.read")], {}, r"include=\[...\] leaves a tool out"),
        ([listed("subagent__x")], {}, "uses the reserved prefix 'subagent__'"),
        ([listed("r" * 60)], {"prefix": "long_"}, "cannot be an agent tool"),
        ([listed("read"), listed("read")], {}, "lists tool 'read' twice"),
        ([listed("read", {"type": "string"})], {}, "not a JSON Schema of an object"),
        ([listed("read", ["type"])], {}, "not a JSON Schema of an object"),
        (
            [listed("read", {"type": "object", "required": "path"})],
            {},
            "tool 'read' has an invalid input schema",
        ),
        ([listed("read")], {"include": frozenset({"read", "write"})}, r"\['write'\]"),
        (
            [listed("read")],
            {"requires_approval": {"wrte": True}},
            r"requires_approval names tools not offered .*\['wrte'\]",
        ),
    ],
)
def test_a_tool_list_that_cannot_be_used_is_refused_whole(
    tools: list[mcp_types.Tool], options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ToolsetError, match=message) as caught:
        build(*tools, **options)
    assert caught.value.toolset == "srv"


def test_include_leaves_out_the_tools_it_does_not_name_even_unusable_ones() -> None:
    tools = build(listed("read"), listed("files.write"), include=frozenset({"read"}))
    assert [tool.name for tool in tools] == ["read"]


def test_requires_approval_applies_to_every_tool_or_per_tool() -> None:
    def rule(value: MCPArguments, ctx: Any) -> bool:
        return True

    every = build(listed("read"), listed("write"), requires_approval=True)
    assert [tool.requires_approval for tool in every] == [True, True]
    some = build(listed("read"), listed("write"), requires_approval={"write": rule})
    assert [tool.requires_approval for tool in some] == [False, rule]


# --- arguments ----------------------------------------------------------------------


def arguments_of(schema: dict[str, Any]) -> type[MCPArguments]:
    [tool] = build(listed("t", schema))
    model: type[MCPArguments] = tool.input_schema
    return model


def test_arguments_are_checked_against_the_servers_schema() -> None:
    model = arguments_of(
        {
            "type": "object",
            "properties": {"path": {"type": "string"}, "lines": {"type": "integer"}},
            "required": ["path"],
        }
    )
    value = model.model_validate({"path": "/a", "lines": 3, "extra": [1]})
    assert value.arguments() == {"path": "/a", "lines": 3, "extra": [1]}
    with pytest.raises(ValidationError) as wrong_type:
        model.model_validate({"path": "/a", "lines": "three"})
    assert validation_message(wrong_type.value) == (
        "invalid arguments: input: lines: 'three' is not of type 'integer'"
    )
    with pytest.raises(ValidationError) as missing:
        model.model_validate({})
    assert validation_message(missing.value) == (
        "invalid arguments: input: 'path' is a required property"
    )
    with pytest.raises(ValidationError) as not_object:
        model.model_validate(["/a"])
    assert "the arguments must be a JSON object, not list" in validation_message(not_object.value)


def test_the_model_is_shown_the_servers_schema_and_cannot_change_it() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    model = arguments_of(schema)
    shown = model.model_json_schema()
    assert shown == schema
    shown["properties"]["q"]["type"] = "integer"
    assert model.model_json_schema() == schema


# --- results --------------------------------------------------------------------------


def result(*blocks: Any, structured: Any = None, error: bool = False) -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(
        content=list(blocks), structured_content=structured, is_error=error
    )


def text(value: str) -> mcp_types.TextContent:
    return mcp_types.TextContent(text=value)


def test_structured_content_wins_then_text_then_the_blocks() -> None:
    assert result_value(result(text('{"n": 1}'), structured={"n": 1})) == {"n": 1}
    assert result_value(result(structured=[1, 2])) == [1, 2]
    assert result_value(result(text("one"), text("two"))) == "one\ntwo"
    assert result_value(result()) is None
    mixed = result(
        text("see"),
        mcp_types.ImageContent(data="AAAA", mime_type="image/png"),
        mcp_types.AudioContent(data="AAAA", mime_type="audio/wav"),
        mcp_types.EmbeddedResource(
            resource=mcp_types.TextResourceContents(
                uri="file:///a.txt", mime_type="text/plain", text="A"
            )
        ),
        mcp_types.EmbeddedResource(
            resource=mcp_types.BlobResourceContents(uri="file:///b.bin", blob="AAAA")
        ),
        mcp_types.ResourceLink(uri="file:///c.md", name="c", mime_type="text/markdown"),
    )
    assert result_value(mixed) == [
        {"type": "text", "text": "see"},
        {"type": "image", "mimeType": "image/png"},
        {"type": "audio", "mimeType": "audio/wav"},
        {"type": "resource", "uri": "file:///a.txt", "mimeType": "text/plain", "text": "A"},
        {"type": "resource", "uri": "file:///b.bin"},
        {"type": "resource_link", "uri": "file:///c.md", "name": "c", "mimeType": "text/markdown"},
    ]


def test_an_error_result_reads_as_its_text() -> None:
    assert error_text(result(text("no such file"), error=True)) == "no such file"
    assert error_text(result(error=True)) == "the MCP tool reported an error"


def test_the_public_names_are_pinned_and_documented() -> None:
    assert set(helix_agents.mcp.__all__) == {
        "CALL_META_KEYS",
        "PROGRESS_CHUNK",
        "MCPArguments",
        "MCPServerError",
        "MCPToolError",
        "MCPToolset",
        "StdioServerParameters",
        "MCP_PATH",
        "SESSION_META_KEY",
        "AgentMessage",
        "MCPOptions",
    }
    for name in helix_agents.mcp.__all__:
        value = getattr(helix_agents.mcp, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert (inspect.getdoc(value) or "").strip(), name


SPEC = Path(__file__).parents[2] / "specs" / "mcp.md"


def _spec_table(marker: str) -> set[str]:
    """The names in the first column of the table between ``<!-- marker:begin/end -->``."""
    text = SPEC.read_text(encoding="utf-8")
    table = text.split(f"<!-- {marker}:begin -->", 1)[1].split(f"<!-- {marker}:end -->", 1)[0]
    return set(re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.MULTILINE))


def test_the_spec_lists_every_option_of_mcptoolset_and_mcpoptions() -> None:
    assert _spec_table("options") == set(inspect.signature(MCPToolset).parameters)
    assert _spec_table("mount") == set(inspect.signature(helix_agents.mcp.MCPOptions).parameters)
