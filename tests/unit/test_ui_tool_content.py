"""An AG-UI ``tool`` message's ``content`` as the result it submits (specs/streams.md)."""

from __future__ import annotations

import pytest

from helix_agents.server.edge import MAX_JSON_DEPTH
from helix_agents.server.ui_runs import _tool_content


@pytest.mark.parametrize(
    ("content", "result"),
    [
        ('{"ok": 1, "items": [1, 2]}', {"ok": 1, "items": [1, 2]}),
        ("  [1, 2]", [1, 2]),
        ("yes", "yes"),
        ("42", "42"),  # only objects and arrays are decoded: a number's text stays text
        ('"quoted"', '"quoted"'),
        ("[1, 2", "[1, 2"),  # not JSON: as it is
        ({"already": "json"}, {"already": "json"}),  # not a string (a lenient client)
    ],
)
def test_objects_and_arrays_are_decoded_else_kept(content: object, result: object) -> None:
    assert _tool_content(content) == result


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 100_000])
def test_json_nested_deeper_than_a_request_may_stays_text(depth: int) -> None:
    """Decoding it would exhaust the stack (or store what a request may not hold)."""
    deep = "[" * depth + "]" * depth
    assert _tool_content(deep) == deep
