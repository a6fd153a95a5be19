"""``define_agent(tools=...)`` takes a list of tools; anything else is a ``UsageError``."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from helix_agents import define_agent, define_tool
from helix_agents.errors import UsageError


class Query(BaseModel):
    query: str


def lookup(value: Query, ctx: Any) -> str:
    return value.query


TOOL = define_tool("lookup", "Look it up.", Query, lookup)


@pytest.mark.parametrize(
    ("tools", "kind"),
    [("lookup", "str"), (b"x", "bytes"), (5, "int"), (lookup, "function"), (TOOL, "Tool")],
    ids=["str", "bytes", "int", "function", "one-tool-not-in-a-list"],
)
def test_tools_of_the_wrong_type_are_a_usage_error(tools: Any, kind: str) -> None:
    with pytest.raises(UsageError, match=rf"agent 'a': tools must be a list of tools.*not {kind}$"):
        define_agent("a", tools=tools)


def test_a_list_tuple_or_generator_of_tools_is_accepted() -> None:
    for tools in ([TOOL], (TOOL,), (t for t in [TOOL])):
        assert define_agent("a", tools=tools).tools == (TOOL,)
