"""specs/events.md must name every event tag and wire field exactly as the code does."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from helix_agents.events import EVENT_TYPES

SPEC = Path(__file__).parents[2] / "specs" / "events.md"
ENVELOPE = {"sessionId", "seq", "ts"}


def _cells(line: str) -> list[str]:
    """Split a Markdown table row on its unescaped pipes."""
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def _spec_catalog() -> dict[str, set[str]]:
    text = SPEC.read_text(encoding="utf-8")
    table = text.split("<!-- catalog:begin -->", 1)[1].split("<!-- catalog:end -->", 1)[0]
    catalog: dict[str, set[str]] = {}
    for line in table.splitlines():
        cells = _cells(line)
        match = re.fullmatch(r"`([a-z_]+)`", cells[0]) if cells else None
        if match is None:
            continue
        # Only the names before any "(...)" annotation are field names.
        fields_cell = re.sub(r"\([^)]*\)", "", cells[1])
        catalog[match.group(1)] = set(re.findall(r"`([A-Za-z][A-Za-z0-9]*)\??`", fields_cell))
    return catalog


def _code_catalog() -> dict[str, set[str]]:
    catalog: dict[str, set[str]] = {}
    for cls in EVENT_TYPES:
        info = msgspec.inspect.type_info(cls)
        assert isinstance(info, msgspec.inspect.StructType)
        tag = cls.__struct_config__.tag
        assert isinstance(tag, str)
        catalog[tag] = {field.encode_name for field in info.fields} - ENVELOPE
    return catalog


def test_spec_lists_every_event_with_its_wire_fields() -> None:
    assert _spec_catalog() == _code_catalog()


def test_spec_optional_marks_match_defaults() -> None:
    text = SPEC.read_text(encoding="utf-8")
    for cls in EVENT_TYPES:
        info = msgspec.inspect.type_info(cls)
        assert isinstance(info, msgspec.inspect.StructType)
        row = next(
            line
            for line in text.splitlines()
            if line.startswith(f"| `{info.cls.__struct_config__.tag}` |")
        )
        fields_cell = _cells(row)[1]
        for field in info.fields:
            if field.encode_name in ENVELOPE:
                continue
            optional = f"`{field.encode_name}?`" in fields_cell
            assert optional == (not field.required), (cls.__name__, field.encode_name)
