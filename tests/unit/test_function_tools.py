"""``@tool``: a tool from a plain function (name, docstring, signature, context).

The schema the LLM sees is read from the function; a scripted run calls the
function with the LLM's arguments (and the context, for a parameter annotated
``ToolContext``), sync and async alike.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest
from pydantic import Field

from helix_agents import ToolContext, define_agent, tool
from helix_agents.errors import UsageError
from helix_agents.models import ScriptedLLM, ScriptStep
from helix_agents.testing import run_agent

calls: list[tuple[str, Any]] = []


@tool
async def get_weather(
    city: str,
    unit: Literal["C", "F"] = "C",
    days: Annotated[int, Field(description="how many days ahead, 0 for today", ge=0)] = 0,
) -> str:
    """The weather in a city.

    Looked up live.

    Args:
        city: the city's name, e.g. "Paris".
        unit: the temperature unit,
            Celsius or Fahrenheit.
        days: overridden by the Field's description.
    """
    calls.append(("get_weather", (city, unit, days)))
    return f"{city}: 21{unit} in {days} days"


@tool(requires_approval=True, timeout=5)
def remember(note: str = Field(description="what to keep"), *, ctx: ToolContext) -> str:
    """Keep a note in the session's state."""
    calls.append(("remember", (note, ctx.session_id, ctx.tool_call_id)))
    return "kept"


def test_the_schema_is_read_from_the_signature_and_the_docstring() -> None:
    spec = get_weather.spec()
    assert spec.name == "get_weather"
    assert spec.description == "The weather in a city.\n\nLooked up live."
    props = spec.parameters["properties"]
    assert spec.parameters["required"] == ["city"]
    assert props["city"] == {
        "type": "string",
        "title": "City",
        "description": 'the city\'s name, e.g. "Paris".',
    }
    assert props["unit"]["enum"] == ["C", "F"]
    assert props["unit"]["default"] == "C"
    assert props["unit"]["description"] == "the temperature unit, Celsius or Fahrenheit."
    assert props["days"]["description"] == "how many days ahead, 0 for today"
    assert props["days"]["minimum"] == 0
    assert spec.parameters["additionalProperties"] is False


def test_the_context_parameter_is_not_shown_and_options_are_kept() -> None:
    spec = remember.spec()
    assert list(spec.parameters["properties"]) == ["note"]
    assert spec.parameters["properties"]["note"]["description"] == "what to keep"
    assert remember.requires_approval is True
    assert remember.timeout == 5


async def test_a_run_calls_the_functions_with_the_arguments_and_the_context() -> None:
    calls.clear()
    llm = ScriptedLLM(
        [
            ScriptStep(
                tool_calls=[
                    ScriptedLLM.call("get_weather", {"city": "Oslo", "unit": "F"}, id="w1"),
                    ScriptedLLM.call("lookup", {"json": "{}", "n": "3"}, id="l1"),
                ]
            ),
            "done",
        ]
    )

    @tool(name="lookup")
    def look_up(json: str, n: int) -> dict[str, Any]:
        """Look a thing up (a parameter named like a BaseModel method still works)."""
        calls.append(("lookup", (json, n)))
        return {"found": n}

    agent = define_agent("weather", llm=llm, tools=[get_weather, look_up])
    report = await run_agent(agent, "weather?", time_limit=10)  # strict: no tool may fail
    assert sorted(calls) == [("get_weather", ("Oslo", "F", 0)), ("lookup", ("{}", 3))]
    ends = {call.call_id: call for call in report.trajectory.calls}
    assert ends["w1"].result == "Oslo: 21F in 0 days"
    assert ends["l1"].result == {"found": 3}
    assert look_up.spec().parameters["required"] == ["json", "n"]


async def test_a_sync_tool_gets_the_context_by_its_annotation() -> None:
    calls.clear()

    @tool
    def stamp(ctx: ToolContext, label: str) -> str:
        """Stamp a label with the session."""
        calls.append(("stamp", (label, ctx.session_id, ctx.tool_call_id)))
        return f"{label}@{ctx.agent_type}"

    llm = ScriptedLLM([ScriptedLLM.call("stamp", {"label": "x"}, id="s1"), "ok"])
    agent = define_agent("stamper", llm=llm, tools=[stamp])
    report = await run_agent(agent, "go", session_id="stamp-1", time_limit=10)
    assert calls == [("stamp", ("x", "stamp-1", "s1"))]
    assert [call.result for call in report.trajectory.calls] == ["x@stamper"]


def test_a_client_tool_is_described_by_the_function_and_never_runs() -> None:
    @tool(execute="client", expires_in=30)
    def confirm(question: str) -> bool:
        """Ask the user to confirm."""
        raise AssertionError("a client tool's body never runs")

    assert confirm.is_client_tool
    assert confirm.expires_in == 30
    assert confirm.spec().parameters["required"] == ["question"]


def test_the_function_form_takes_options() -> None:
    def add(a: int, b: int = 1) -> int:
        """Add two numbers."""
        return a + b

    made = tool(add, name="plus", description="Sum.")
    assert (made.name, made.description) == ("plus", "Sum.")


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def f(*items: int) -> int:\n    '''Sum.'''\n    return 0\n", "*items"),
        ("def f(**options: int) -> int:\n    '''Sum.'''\n    return 0\n", "*options"),
        ("def f(a: int) -> int:\n    return a\n", "docstring"),
        ("def f(a: 'Missing') -> int:\n    '''Doc.'''\n    return 0\n", "signature"),
        ("def __finish__(a: int) -> int:\n    '''Doc.'''\n    return 0\n", "reserved"),
    ],
)
def test_a_function_that_cannot_be_a_tool_is_a_usage_error(source: str, message: str) -> None:
    scope: dict[str, Any] = {}
    exec(source, scope)
    function = next(value for key, value in scope.items() if key != "__builtins__")
    with pytest.raises(UsageError, match=message.replace("*", r"\*")):
        tool(function)


def test_a_bad_execute_is_a_usage_error() -> None:
    def f(a: int) -> int:
        """Doc."""
        return a

    with pytest.raises(UsageError, match="execute"):
        tool(f, execute="server")  # type: ignore[call-overload]
