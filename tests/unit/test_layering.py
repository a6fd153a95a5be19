"""The import arrows point one way: server -> a2a, mcp -> transports/stores -> core (otel -> core).

``core/`` (``helix_agents``) never imports ``helix_agents.stores``,
``.transports`` or ``.server``, and ``stores/`` and ``transports/`` never
import ``helix_agents.server``. Checked on the source with ``ast``, so an
import inside a function or under ``TYPE_CHECKING`` counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

# folder -> (the package it is, the packages it must never import)
RULES = {
    "core": (
        "helix_agents",
        (
            "helix_agents.stores",
            "helix_agents.transports",
            "helix_agents.server",
            "helix_agents.engines",
            "helix_agents.bridges",
            "helix_agents.a2a",
            "helix_agents.mcp",
            "helix_agents.temporal",
            "helix_agents.dbos",
        ),
    ),
    # the durable engines' shared half: core only, never an engine or an edge
    "engines/durable": (
        "helix_agents.engines.durable",
        (
            "helix_agents.stores",
            "helix_agents.transports",
            "helix_agents.server",
            "helix_agents.bridges",
            "helix_agents.engines.temporal",
            "helix_agents.engines.dbos",
            "helix_agents.a2a",
            "helix_agents.mcp",
            "helix_agents.temporal",
            "helix_agents.dbos",
        ),
    ),
    # the Temporal engine: the shared half and the server's AgentServer, never another engine
    "engines/temporal": (
        "helix_agents.engines.temporal",
        ("helix_agents.engines.dbos", "helix_agents.dbos", "helix_agents.bridges"),
    ),
    # the DBOS engine: the shared half and the server's AgentServer, never another engine
    "engines/dbos": (
        "helix_agents.engines.dbos",
        ("helix_agents.engines.temporal", "helix_agents.temporal", "helix_agents.bridges"),
    ),
    "stores": ("helix_agents.stores", ("helix_agents.server", "helix_agents.bridges")),
    "transports": ("helix_agents.transports", ("helix_agents.server", "helix_agents.bridges")),
    # tracing on OpenTelemetry: the Tracer seam of core, nothing else of ours
    "otel": (
        "helix_agents.otel",
        ("helix_agents.stores", "helix_agents.transports", "helix_agents.server"),
    ),
    # the testing kit: core and the stores (a fresh memory store), never an edge or an engine
    "testing": (
        "helix_agents.testing",
        (
            "helix_agents.transports",
            "helix_agents.server",
            "helix_agents.bridges",
            "helix_agents.engines",
        ),
    ),
    # the A2A bridge: the gateway mounts it (server -> a2a), so it never imports the server
    "bridges/a2a": ("helix_agents.bridges.a2a", ("helix_agents.server", "helix_agents.engines")),
    # the MCP bridge: the gateway mounts it (server -> mcp), so it never imports the server
    "bridges/mcp": ("helix_agents.bridges.mcp", ("helix_agents.server", "helix_agents.engines")),
}
SHORT_HOMES = {
    "temporal.py": ("helix_agents.engines.temporal", "helix_agents.engines.durable"),
    "dbos.py": ("helix_agents.engines.dbos", "helix_agents.engines.durable"),
    "a2a.py": ("helix_agents.bridges.a2a",),
    "mcp.py": ("helix_agents.bridges.mcp",),
}
"""core's public short homes (``helix_agents.temporal``...): each re-exports its own room only."""
FOLDERS = ("core", "stores", "transports", "server", "otel", "bridges", "engines", "testing")
"""Folder names: importing one of them by name means importing by folder, not by package."""


def _package_of(path: Path, folder: Path, package: str) -> str:
    """The package a module file belongs to (``package`` plus any sub-folders)."""
    parts = path.relative_to(folder).parent.parts
    return ".".join((package, *parts))


def imported_modules(source: str, module_package: str, top_package: str) -> list[str]:
    """Every module ``source`` imports, as absolute names; relative imports are resolved.

    ``from X import a`` yields both ``X`` and ``X.a`` (``a`` may be a submodule).
    A relative import that climbs above ``top_package`` yields ``"<escapes>"``.
    String arguments of ``importlib.import_module`` and ``__import__`` count too.
    """
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module_package.split(".")
                kept = len(base) - (node.level - 1)
                if kept < len(top_package.split(".")):
                    found.append("<escapes>")
                    continue
                base = base[:kept]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.append(module)
            found.extend(f"{module}.{alias.name}" for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (
                    isinstance(node.func, ast.Name)
                    and node.func.id in ("import_module", "__import__")
                )
            )
        ):
            found.append(node.args[0].value)
    return found


def violations(
    source: str, module_package: str, top_package: str, banned: tuple[str, ...]
) -> list[str]:
    """The imports in ``source`` that break the layering rules."""
    bad: list[str] = []
    for module in imported_modules(source, module_package, top_package):
        if module == "<escapes>":
            bad.append(f"a relative import climbs out of {top_package}")
        elif any(module == b or module.startswith(b + ".") for b in banned):
            bad.append(module)
        elif module.split(".")[0] in FOLDERS:
            bad.append(f"{module} (imported by folder, not by package)")
    return bad


@pytest.mark.parametrize("folder_name", sorted(RULES))
def test_no_import_points_the_wrong_way(folder_name: str) -> None:
    package, banned = RULES[folder_name]
    folder = ROOT / folder_name
    files = sorted(folder.rglob("*.py"))
    assert files, f"no modules found under {folder}"
    problems = {}
    for path in files:
        source = path.read_text(encoding="utf-8")
        if folder_name == "core" and path.parent == folder and path.name in SHORT_HOMES:
            # a short home may import its own room, and nothing else the rule bans
            own = SHORT_HOMES[path.name]
            bad = [
                module
                for module in violations(source, package, package, banned)
                if not module.startswith(own)
            ]
        else:
            bad = violations(source, _package_of(path, folder, package), package, banned)
        if bad:
            problems[str(path.relative_to(ROOT))] = bad
    assert problems == {}


def test_core_is_really_walked() -> None:
    names = {path.name for path in (ROOT / "core").rglob("*.py")}
    assert {"__init__.py", "events.py", "store.py", "errors.py"} <= names


# The checker itself: it must catch every way of writing a forbidden import.
CORE_BANNED = RULES["core"][1]


@pytest.mark.parametrize(
    "source",
    [
        "import helix_agents.stores",
        "import helix_agents.stores.sqlite as s",
        "from helix_agents.transports import InProcessTransport",
        "from helix_agents import server",
        "from helix_agents.server.app import create_http_app",
        "from . import stores",
        "from .stores import MemoryEventStore",
        "from .transports.http import x",
        "from .. import anything",
        "from ..other import anything",
        "import stores.memory",
        "from core.events import Event",
        "def f():\n    from helix_agents.server import AgentServer",
        "if TYPE_CHECKING:\n    from helix_agents.stores import SqliteEventStore",
        "importlib.import_module('helix_agents.stores.sqlite')",
        "__import__('helix_agents.server')",
    ],
)
def test_the_checker_catches_a_forbidden_import_in_core(source: str) -> None:
    assert violations(source, "helix_agents", "helix_agents", CORE_BANNED)


@pytest.mark.parametrize(
    "source",
    [
        "import anyio",
        "from helix_agents.events import Event",
        "from helix_agents import events",
        "from .events import Event",
        "from . import codec",
        "from .storage_helpers import x",
        "import helix_agents.storesque",
    ],
)
def test_the_checker_allows_core_imports(source: str) -> None:
    assert violations(source, "helix_agents", "helix_agents", CORE_BANNED) == []


@pytest.mark.parametrize(
    ("source", "module_package", "allowed"),
    [
        ("from .. import server", "helix_agents.stores", False),
        ("from ..server import x", "helix_agents.stores", False),
        ("from ..errors import X", "helix_agents.stores", False),  # crosses folders
        ("import helix_agents.server", "helix_agents.stores", False),
        ("from helix_agents.server import AgentServer", "helix_agents.stores.nats", False),
        ("from ..common import x", "helix_agents.stores.jetstream", True),
        ("from .common import x", "helix_agents.stores", True),
        ("from helix_agents.errors import X", "helix_agents.stores", True),
    ],
)
def test_the_checker_in_stores(source: str, module_package: str, allowed: bool) -> None:
    found = violations(source, module_package, "helix_agents.stores", RULES["stores"][1])
    assert (found == []) == allowed, found


# --- no import cycles ----------------------------------------------------------------


def _package_dirs() -> dict[str, Path]:
    """Each installed package -> its folder, read from pyproject's package-dir mapping."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    mapping = config["tool"]["setuptools"]["package-dir"]
    return {package: ROOT / folder for package, folder in mapping.items()}


def module_graph() -> dict[str, set[str]]:
    """Every module of the distribution -> the modules of the distribution it imports.

    Imports inside functions and under ``TYPE_CHECKING`` count. A package's
    ``__init__`` is the module named for the package.
    """
    files: dict[str, tuple[Path, str]] = {}
    for package, folder in _package_dirs().items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            name = ".".join((package, *parts))
            if name.endswith(".__init__"):
                name = name.removesuffix(".__init__")
            files.setdefault(name, (path, _package_of(path, folder, package)))
    graph: dict[str, set[str]] = {}
    for name, (path, module_package) in files.items():
        imported = imported_modules(
            path.read_text(encoding="utf-8"), module_package, "helix_agents"
        )
        graph[name] = {module for module in imported if module in files and module != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_module_imports_itself_back() -> None:
    graph = module_graph()
    assert len(graph) > 100  # the walk found the distribution
    assert cycles(graph) == []


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"x": {"y"}, "y": {"x"}, "z": set()}) == [["x", "y"]]
    assert cycles({"x": {"y"}, "y": set()}) == []
