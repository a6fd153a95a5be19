"""Definition-time validation of tools, agents, sub-agent tools and the registry.

Every developer mistake is refused when the definition is built, with a
:class:`UsageError` whose message names the problem, so nothing invalid ever
reaches a run.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from helix_agents import (
    AgentConfig,
    AgentExecutor,
    Tool,
    create_remote_sub_agent_tool,
    create_sub_agent_tool,
    define_agent,
    define_tool,
)
from helix_agents.agents import (
    COMPANION_TOOL_PREFIX,
    RESERVED_TOOL_PREFIXES,
    SUBAGENT_TOOL_PREFIX,
    WORKSPACE_TOOL_PREFIX,
    AgentRegistry,
    SubAgentTool,
    is_sub_agent_tool,
    validate_tool_name,
)
from helix_agents.children.inprocess import InProcessTransport
from helix_agents.errors import UsageError
from helix_agents.models import FINISH_TOOL_NAME
from helix_agents.stores import MemoryEventStore


class Query(BaseModel):
    query: str


class Answer(BaseModel):
    answer: str


class Counter(BaseModel):
    count: int = 0
    label: str = "start"


class NoDefaults(BaseModel):
    count: int


def noop(value: Query, ctx: Any) -> str:
    return value.query


def tool(name: str = "search") -> Tool[Query]:
    return define_tool(name, "A tool.", Query, noop)


def agent(name: str = "worker", **options: Any) -> AgentConfig:
    options.setdefault("output_schema", Answer)
    return define_agent(name, **options)


# --- reserved prefixes and constants ------------------------------------------------


def test_prefix_constants() -> None:
    assert SUBAGENT_TOOL_PREFIX == "subagent__"
    assert COMPANION_TOOL_PREFIX == "companion__"
    assert WORKSPACE_TOOL_PREFIX == "workspace_"
    assert FINISH_TOOL_NAME == "__finish__"
    assert set(RESERVED_TOOL_PREFIXES) == {
        "subagent__",
        "companion__",
        "workspace_",
        "__finish__",
    }


RESERVED_NAMES = [
    pytest.param("subagent__researcher", "subagent__", id="subagent"),
    pytest.param("subagent__", "subagent__", id="subagent-bare"),
    pytest.param("companion__spawnAgent", "companion__", id="companion"),
    pytest.param("workspace_read", "workspace_", id="workspace"),
    pytest.param("__finish__", "__finish__", id="finish"),
    pytest.param("__finish__now", "__finish__", id="finish-prefix"),
]


@pytest.mark.parametrize(("name", "prefix"), RESERVED_NAMES)
def test_define_tool_refuses_reserved_prefixes(name: str, prefix: str) -> None:
    with pytest.raises(UsageError, match="reserved prefix") as info:
        define_tool(name, "A tool.", Query, noop)
    assert repr(prefix) in str(info.value)
    assert repr(name) in str(info.value)


def test_define_agent_refuses_hand_built_tools_with_reserved_names() -> None:
    """The seeds: a reserved-prefix tool makes defineAgent() throw, whatever built the tool.

    ``Tool`` is public and constructible directly (or via ``dataclasses.replace``),
    which bypasses ``define_tool``; ``define_agent`` must still refuse the name.
    """
    accepted: list[str] = []
    refusals: list[str] = []
    for param in RESERVED_NAMES:
        name = str(param.values[0])
        smuggled = Tool(name=name, description="A tool.", input_schema=Query, execute=noop)
        try:
            define_agent("worker", tools=[smuggled])
        except UsageError as exc:
            refusals.append(str(exc))
        else:
            accepted.append(name)
    assert accepted == []
    assert all("reserved" in message for message in refusals)


def test_validate_tool_name_can_allow_reserved_names() -> None:
    assert validate_tool_name("subagent__x", allow_reserved=True) == "subagent__x"
    with pytest.raises(UsageError):
        validate_tool_name("subagent__x")


def test_similar_but_unreserved_names_are_fine() -> None:
    for name in ("subagent_x", "companion_x", "workspace", "finish", "_finish_", "helper__list"):
        assert define_tool(name, "A tool.", Query, noop).name == name


# --- tool names and tool options ---------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["", "has space", "dot.name", "slash/name", "ünï", "a" * 65, "tab\tname", "new\nline"],
)
def test_define_tool_refuses_invalid_names(name: str) -> None:
    with pytest.raises(UsageError, match="invalid tool name"):
        define_tool(name, "A tool.", Query, noop)


@pytest.mark.parametrize("name", [None, 42, b"search"])
def test_define_tool_refuses_non_string_names(name: Any) -> None:
    with pytest.raises(UsageError, match="invalid tool name"):
        define_tool(name, "A tool.", Query, noop)


@pytest.mark.parametrize("name", ["a", "get-weather", "x_1", "A" * 64, "0"])
def test_define_tool_accepts_valid_names(name: str) -> None:
    built = define_tool(name, "A tool.", Query, noop)
    assert built.name == name
    assert built.spec().name == name
    assert built.spec().parameters == Query.model_json_schema()


@pytest.mark.parametrize("schema", [dict, Query(query="x"), "Query", None])
def test_define_tool_refuses_a_non_model_input_schema(schema: Any) -> None:
    with pytest.raises(UsageError, match="input_schema must be a pydantic model"):
        define_tool("search", "A tool.", schema, noop)


@pytest.mark.parametrize("execute", [None, 42, "server"])
def test_define_tool_refuses_a_non_callable_execute(execute: Any) -> None:
    with pytest.raises(UsageError, match="execute must be callable or 'client'"):
        define_tool("search", "A tool.", Query, execute)


@pytest.mark.parametrize("timeout", [0, -1, 0.0, -0.5])
def test_define_tool_refuses_a_non_positive_timeout(timeout: float) -> None:
    with pytest.raises(UsageError, match="timeout must be > 0"):
        define_tool("search", "A tool.", Query, noop, timeout=timeout)


def test_define_tool_client_and_options() -> None:
    client = define_tool("pick_file", "The user picks a file.", Query, "client")
    assert client.is_client_tool
    assert not tool().is_client_tool
    timed = define_tool("slow", "Slow.", Query, noop, timeout=2.5, metadata={"k": "v"})
    assert timed.timeout == 2.5
    assert timed.metadata == {"k": "v"}


@pytest.mark.parametrize("rule", [1, "yes", None, 2.5])
def test_define_tool_refuses_an_approval_rule_that_is_not_a_bool_or_callable(rule: Any) -> None:
    with pytest.raises(UsageError, match="requires_approval must be a bool or a callable"):
        define_tool("delete_all", "Dangerous.", Query, noop, requires_approval=rule)


def test_define_tool_keeps_its_approval_rule() -> None:
    def rule(value: Any, ctx: Any) -> bool:
        return True

    assert define_tool("a", "A.", Query, noop, requires_approval=True).requires_approval is True
    assert define_tool("b", "B.", Query, noop, requires_approval=rule).requires_approval is rule
    assert not define_tool("c", "C.", Query, noop).requires_approval


@pytest.mark.parametrize("expires_in", [0, -1, True, "5"])
def test_define_tool_refuses_a_bad_expiry(expires_in: Any) -> None:
    with pytest.raises(UsageError, match="expires_in must be > 0"):
        define_tool("pick", "P.", Query, "client", expires_in=expires_in)


def test_define_tool_refuses_an_expiry_on_a_tool_that_waits_for_nobody() -> None:
    with pytest.raises(UsageError, match="waits for nobody"):
        define_tool("read", "R.", Query, noop, expires_in=5)
    assert define_tool("pick", "P.", Query, "client", expires_in=5).expires_in == 5.0
    gated = define_tool("rm", "R.", Query, noop, requires_approval=True, expires_in=2)
    assert gated.expires_in == 2.0


def test_define_tool_refuses_a_non_model_output_schema() -> None:
    with pytest.raises(UsageError, match="output_schema must be a pydantic model class"):
        define_tool("pick", "P.", Query, "client", output_schema=dict)  # type: ignore[arg-type]


# --- agents ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "has space", "a.b", "é", "a" * 55])
def test_define_agent_refuses_invalid_names(name: str) -> None:
    # The message names the agent, not a tool (its tool is subagent__<name>).
    with pytest.raises(UsageError, match=r"invalid agent name .*: use 1-54 letters"):
        define_agent(name)


def test_longest_agent_name_still_makes_a_valid_sub_agent_tool_name() -> None:
    name = "a" * (64 - len(SUBAGENT_TOOL_PREFIX))
    built = create_sub_agent_tool(agent(name), Query)
    assert len(built.name) == 64
    assert validate_tool_name(built.name, allow_reserved=True) == built.name


def test_define_agent_refuses_duplicate_tool_names() -> None:
    with pytest.raises(UsageError, match="two tools are named 'search'"):
        define_agent("worker", tools=[tool("search"), tool("lookup"), tool("search")])


def test_define_agent_refuses_two_sub_agent_tools_for_one_agent() -> None:
    child = agent("child")
    with pytest.raises(UsageError, match="two tools are named 'subagent__child'"):
        define_agent(
            "parent",
            tools=[create_sub_agent_tool(child, Query), create_sub_agent_tool(child, Answer)],
        )


@pytest.mark.parametrize("thing", [noop, "search", {"name": "search"}, None])
def test_define_agent_refuses_things_that_are_not_tools(thing: Any) -> None:
    with pytest.raises(UsageError, match="is not a tool"):
        define_agent("worker", tools=[thing])


@pytest.mark.parametrize("max_steps", [0, -1, True, False, 1.5, "3", None])
def test_define_agent_refuses_bad_max_steps(max_steps: Any) -> None:
    with pytest.raises(UsageError, match="max_steps must be an int >= 1"):
        define_agent("worker", max_steps=max_steps)


@pytest.mark.parametrize("max_steps", [1, 2, 100])
def test_define_agent_accepts_positive_max_steps(max_steps: int) -> None:
    assert define_agent("worker", max_steps=max_steps).max_steps == max_steps


@pytest.mark.parametrize("label", ["output_schema", "state_schema"])
@pytest.mark.parametrize("schema", [dict, Answer(answer="x"), "Answer", 3])
def test_define_agent_refuses_non_model_schemas(label: str, schema: Any) -> None:
    with pytest.raises(UsageError, match=f"{label} must be a pydantic model class"):
        define_agent("worker", **{label: schema})


def test_define_agent_refuses_a_state_schema_without_defaults() -> None:
    with pytest.raises(UsageError, match="initial state is invalid"):
        define_agent("worker", state_schema=NoDefaults)


def test_state_schema_defaults_seed_the_initial_state() -> None:
    built = define_agent("worker", state_schema=Counter)
    assert built.initial_state() == {"count": 0, "label": "start"}
    assert built.initial_state({"count": 3}) == {"count": 3, "label": "start"}
    with pytest.raises(UsageError, match="initial state is invalid"):
        built.initial_state({"count": "many"})


def test_initial_state_without_a_schema_is_the_seed() -> None:
    built = define_agent("worker")
    assert built.initial_state() == {}
    assert built.initial_state({"anything": [1]}) == {"anything": [1]}


def test_agent_tool_lookup() -> None:
    search = tool("search")
    child = agent("child")
    sub = create_sub_agent_tool(child, Query)
    built = define_agent("parent", tools=[search, sub])
    assert built.tool("search") is search
    assert built.tool("subagent__child") is sub
    assert built.tool("missing") is None


# --- sub-agent tools ------------------------------------------------------------------------


def test_a_remote_sub_agent_tool_needs_no_output_schema() -> None:
    transport = InProcessTransport(AgentExecutor(MemoryEventStore()).service)
    options: dict[str, Any] = {
        "description": "Remote writer.",
        "input_schema": Query,
        "transport": transport,
        "remote_agent_type": "writer",
    }
    assert create_remote_sub_agent_tool("writer", **options).output_schema is None
    typed = create_remote_sub_agent_tool("writer", output_schema=Answer, **options)
    assert typed.output_schema is Answer
    for bad in (dict, Answer(answer="x"), "Answer"):
        with pytest.raises(UsageError, match="output_schema must be a pydantic model class"):
            create_remote_sub_agent_tool("writer", output_schema=bad, **options)


def test_create_sub_agent_tool_refuses_an_agent_without_output_schema() -> None:
    plain = define_agent("chatty")
    with pytest.raises(UsageError, match="'chatty' has no output_schema"):
        create_sub_agent_tool(plain, Query)


def test_create_sub_agent_tool_refuses_a_non_agent() -> None:
    with pytest.raises(UsageError, match="define_agent"):
        create_sub_agent_tool("worker", Query)  # type: ignore[arg-type]


@pytest.mark.parametrize("schema", [dict, Query(query="x"), None])
def test_create_sub_agent_tool_refuses_a_non_model_input_schema(schema: Any) -> None:
    with pytest.raises(UsageError, match="input_schema must be a pydantic model"):
        create_sub_agent_tool(agent(), schema)


@pytest.mark.parametrize("timeout", [0, -1.0])
def test_create_sub_agent_tool_refuses_a_non_positive_timeout(timeout: float) -> None:
    with pytest.raises(UsageError, match="timeout must be > 0"):
        create_sub_agent_tool(agent(), Query, timeout=timeout)


def test_sub_agent_tool_is_named_after_its_agent() -> None:
    child = agent("summarizer", description="Summarizes texts.")
    built = create_sub_agent_tool(child, Query)
    assert isinstance(built, SubAgentTool)
    assert built.name == "subagent__summarizer"
    assert built.name == SUBAGENT_TOOL_PREFIX + child.name
    assert is_sub_agent_tool(built.name)
    assert built.name[len(SUBAGENT_TOOL_PREFIX) :] == "summarizer"
    spec = built.spec()
    assert spec.name == "subagent__summarizer"
    assert spec.parameters == Query.model_json_schema()
    assert spec.description == "Summarizes texts."


def test_sub_agent_tool_description_fallbacks() -> None:
    assert create_sub_agent_tool(agent("a1"), Query).description == "Delegate to the a1 agent"
    assert create_sub_agent_tool(agent("a2"), Query, "Custom.").description == "Custom."


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("subagent__x", True),
        ("subagent__", True),
        ("subagent_x", False),
        ("search", False),
        ("companion__spawnAgent", False),
        ("__finish__", False),
        ("xsubagent__y", False),
    ],
)
def test_is_sub_agent_tool(name: str, expected: bool) -> None:
    assert is_sub_agent_tool(name) is expected


# --- registry -------------------------------------------------------------------------------


def test_registry_registers_sub_agents_recursively() -> None:
    grandchild = agent("grandchild")
    child = agent("child", tools=[create_sub_agent_tool(grandchild, Query)])
    sibling = agent("sibling")
    parent = define_agent(
        "parent",
        tools=[create_sub_agent_tool(child, Query), create_sub_agent_tool(sibling, Query)],
    )
    registry = AgentRegistry([parent])
    assert registry.names() == ["child", "grandchild", "parent", "sibling"]
    assert registry.get("grandchild") is grandchild
    assert "grandchild" in registry
    assert "stranger" not in registry
    assert registry.get("stranger") is None


def test_registry_accepts_the_same_agent_twice() -> None:
    shared = agent("shared")
    a = define_agent("a", tools=[create_sub_agent_tool(shared, Query)])
    b = define_agent("b", tools=[create_sub_agent_tool(shared, Query)])
    registry = AgentRegistry([a, b, shared])
    assert registry.register(shared) is shared
    assert registry.names() == ["a", "b", "shared"]


def test_registry_refuses_two_different_agents_with_one_name() -> None:
    registry = AgentRegistry([agent("worker")])
    with pytest.raises(UsageError, match="two different agents are named 'worker'"):
        registry.register(agent("worker"))


def test_registry_refuses_a_clash_found_while_recursing() -> None:
    registry = AgentRegistry([agent("child")])
    impostor = agent("child")
    parent = define_agent("parent", tools=[create_sub_agent_tool(impostor, Query)])
    with pytest.raises(UsageError, match="two different agents are named 'child'"):
        registry.register(parent)


def test_registry_refuses_a_clash_inside_one_tree() -> None:
    first = agent("twin")
    second = agent("twin")
    parent = define_agent(
        "parent",
        tools=[create_sub_agent_tool(first, Query)],
    )
    other = define_agent("other", tools=[create_sub_agent_tool(second, Query)])
    with pytest.raises(UsageError, match="'twin'"):
        AgentRegistry([parent, other])


def test_an_agent_without_a_model_is_refused_when_an_executor_without_one_registers_it() -> None:
    from helix_agents import AgentExecutor
    from helix_agents.models import ScriptedLLM
    from helix_agents.stores import MemoryEventStore

    lonely = define_agent("lonely")
    with pytest.raises(UsageError, match="agent 'lonely' has no model"):
        AgentExecutor(MemoryEventStore(), [lonely])
    # A sub-agent without a model is found through its parent.
    parent = define_agent(
        "parent",
        tools=[create_sub_agent_tool(define_agent("quiet", output_schema=Answer), Query)],
        llm=ScriptedLLM(["hi"]),
    )
    with pytest.raises(UsageError, match="agent 'quiet' has no model"):
        AgentExecutor(MemoryEventStore(), [parent])
    # A default model on the executor serves them all.
    AgentExecutor(MemoryEventStore(), [lonely, parent], llm=ScriptedLLM(["hi"]))


def test_a_tool_spec_is_the_models_schema_built_once_and_a_fresh_copy_each_time() -> None:
    built = define_tool("search", "A tool.", Query, noop)
    first, second = built.spec().parameters, built.spec().parameters
    assert first == second == Query.model_json_schema()
    first["properties"]["query"]["title"] = "changed by a caller"
    assert built.spec().parameters == Query.model_json_schema()  # the cache is untouched
