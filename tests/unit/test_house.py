"""The house's sizes (specs/layout.md): rooms small enough to read, drivers that only drive.

No source folder holds more than 15 modules, no module more than about 500
lines but the event catalog, and the durable engines' workflows (drivers of
``next_action``, nothing else) stay under about 200 lines.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).parents[2]
FOLDERS = (
    "core",
    "engines",
    "bridges",
    "stores",
    "server",
    "transports",
    "otel",
    "bench",
    "testing",
)
MOST_MODULES = 15
MOST_LINES = 520  # "about 500"
CATALOG = ROOT / "core" / "events.py"


def _folders() -> list[Path]:
    found = []
    for top in FOLDERS:
        for folder in [ROOT / top, *(ROOT / top).rglob("*")]:
            if folder.is_dir() and "__pycache__" not in folder.parts:
                found.append(folder)
    return found


def test_no_folder_holds_more_than_15_modules() -> None:
    crowded = {
        str(folder.relative_to(ROOT)): count
        for folder in _folders()
        if (count := len(list(folder.glob("*.py")))) > MOST_MODULES
    }
    assert crowded == {}


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_module_is_longer_than_about_500_lines_but_the_catalog() -> None:
    long = {
        str(path.relative_to(ROOT)): lines
        for folder in _folders()
        for path in folder.glob("*.py")
        if path != CATALOG and (lines := _lines(path)) > MOST_LINES
    }
    assert long == {}


def test_the_workflows_only_drive() -> None:
    """Under ~200 lines each, and neither names a rule of the run (the step limit, a finish)."""
    for engine in ("temporal", "dbos"):
        source = (ROOT / "engines" / engine / "workflow.py").read_text(encoding="utf-8")
        assert len(source.splitlines()) <= 200, engine
        for rule in ("max_steps", "run_step_count", "__finish__", "FINISH_TOOL_NAME"):
            assert rule not in source, (engine, rule)
