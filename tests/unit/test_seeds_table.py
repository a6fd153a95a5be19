"""``specs/seeds.md`` has a row for every section heading of the five seed texts.

The seeds are web pages flattened to text (no ``#`` marks), so a heading is
found by its shape (the rule is stated in specs/seeds.md, "How headings are
found"): a line of at most 8 words and 60 characters that starts with a
capital letter or a digit, ends without sentence punctuation and holds no
code; or a camelCase API name alone on a line (``startAgent``); or a title
glued after the code that precedes it (``});Workspace Wiring``). Page
furniture (``Skip to content``, ``TIP``) and flattened table rows are not
headings. Each heading must appear in the table as ``| <seed file> | <heading> |``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ROOT.parent / "shared" / "seeds"  # ../shared beside the checkout, as in CI
TABLE = ROOT / "specs" / "seeds.md"

_CODE = re.compile(r"[=(){}\[\]`|;<>\"']|//|->|=>|__|::|\w\.\w|^\d+\.\s")
_GLUED = re.compile(r"[a-z][A-Z]")
_API_NAME = re.compile(r"^[a-z]+[A-Z][A-Za-z]+$")
_AFTER_CODE = re.compile(r"[});']\s*([A-Z][A-Za-z-]*(?: [A-Za-z—-]+){0,5})$")
_FURNITURE = {"Skip to content", "TIP", "StoreSupportNotes"}


def _titled(line: str) -> bool:
    if not (2 <= len(line) <= 60) or not (line[0].isupper() or line[0].isdigit()):
        return False
    if line[-1] in ".:,;!?" or _CODE.search(line) or line.startswith(("- ", "• ", "* ")):
        return False
    words = line.split()
    if len(words) > 8 or line in _FURNITURE or re.search(r"Yes[A-Z]", line):
        return False
    return sum(1 for word in words if _GLUED.search(word)) < 2


def seed_headings(text: str) -> list[str]:
    """The section headings of one seed text, in order, each once."""
    found: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        heading = None
        if _titled(line) or (_API_NAME.match(line) and len(line) >= 6):
            heading = line
        else:
            glued = _AFTER_CODE.search(line)
            if glued is not None and _titled(glued.group(1)):
                heading = glued.group(1)
        if heading is not None and heading not in found:
            found.append(heading)
    return found


def _seed_files() -> list[Path]:
    return sorted(SEEDS.glob("*.txt"))


@pytest.mark.skipif(not SEEDS.is_dir(), reason="the seed texts are not on this machine")
def test_every_seed_heading_has_a_row() -> None:
    table = TABLE.read_text()
    rows = {
        (cells[0], cells[1])
        for line in table.splitlines()
        if line.startswith("| ")
        for cells in [[cell.strip() for cell in line.strip("|").split(" | ")]]
        if len(cells) >= 5
    }
    missing = [
        (path.name[:3], heading)
        for path in _seed_files()
        for heading in seed_headings(path.read_text())
        if (path.name[:3], heading) not in rows
    ]
    assert not missing, f"specs/seeds.md lacks rows for: {missing}"


def test_the_heading_rule_finds_each_kind_of_heading() -> None:
    text = "\n".join(
        [
            "Skip to content",
            "Input Mapping",
            "The input schema defines what arguments the parent provides.",
            "startAgent",
            "});Workspace Wiring",
            "1. Use the researcher to gather information",
            "InMemoryStateStoreYesFields stored in-memory",
            "const x = 1;",
        ]
    )
    assert seed_headings(text) == ["Input Mapping", "startAgent", "Workspace Wiring"]
