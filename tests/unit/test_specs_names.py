"""Every code name the specs mention exists: the specs cannot drift from the code.

``specs/*.md`` name code in backticks. Each such name is checked against the
code, by the form it is written in:

- a dotted path from the package, ``helix_agents.log.codec.encode_jsonl``,
  must import (module by module, then attribute by attribute);
- ``Class.member`` or ``Class.member(...)``, where ``Class`` is one of our
  public classes, must be a member of that class (a method, property or field);
- ``Class(...)`` with keyword arguments must name parameters the class takes,
  and its positional arguments must fit;
- ``name(...)``, a call of a snake_case name, must be a function or method
  defined in the distribution;
- a bare snake_case name with an underscore (``run_started``,
  ``max_steps``) must be known to the code: a definition, a parameter, a
  field, a string the code uses, or a test or benchmark the specs point to.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[2]
SPECS = sorted((ROOT / "specs").glob("*.md"))

CODE = re.compile(r"`([^`\n]+)`")
DOTTED = re.compile(r"\bhelix_agents(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
MEMBER = re.compile(r"(?<![\w.])([A-Z][A-Za-z0-9]+)\.([a-z_][a-z0-9_]*)")
CONSTRUCTED = re.compile(r"(?<![\w.])([A-Z][A-Za-z0-9]+)\(([^()]*)\)")
CALLED = re.compile(r"(?<![\w.-])([a-z_][a-z0-9_]*)\(")
SNAKE = re.compile(r"(?<![\w./:-])([a-z][a-z0-9]*(?:_[a-z0-9]+)+)(?![\w-])")


def _package_dirs() -> dict[str, Path]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {p: ROOT / f for p, f in config["tool"]["setuptools"]["package-dir"].items()}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, folder in _package_dirs().items():
        for path in folder.rglob("*.py"):
            name = ".".join((package, *path.relative_to(folder).with_suffix("").parts))
            found.setdefault(name.removesuffix(".__init__"), path)
    return found


def _code_facts() -> tuple[set[str], set[str]]:
    """(every identifier the code knows, the functions and methods it defines)."""
    known: set[str] = set()
    functions: set[str] = set()
    sources = [*_modules().values()]
    for extra in ("tests", "bench", "examples"):
        sources += (ROOT / extra).rglob("*.py")
    for path in sources:
        known.add(path.stem)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                known.add(node.name)
                functions.add(node.name)
            elif isinstance(node, ast.ClassDef):
                known.add(node.name)
            elif isinstance(node, ast.arg):
                known.add(node.arg)
            elif isinstance(node, ast.Name):
                known.add(node.id)
            elif isinstance(node, ast.Attribute):
                known.add(node.attr)
            elif isinstance(node, ast.keyword) and node.arg:
                known.add(node.arg)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                known.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", node.value))
    return known, functions


def _public_classes() -> dict[str, type]:
    """Our classes by name, from every public ``__all__`` of the distribution."""
    classes: dict[str, type] = {}
    for name in _modules():
        if any(part.startswith("_") for part in name.split(".")):
            continue
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", ()):
            obj = getattr(module, attr, None)
            if inspect.isclass(obj) and obj.__module__.startswith("helix_agents"):
                classes.setdefault(attr, obj)
    return classes


def _has_member(cls: type, member: str) -> bool:
    if hasattr(cls, member):
        return True
    for klass in cls.__mro__:
        fields: set[str] = set(getattr(klass, "__struct_fields__", ()))
        fields |= set(getattr(klass, "model_fields", {}))
        if dataclasses.is_dataclass(klass):
            fields |= {f.name for f in dataclasses.fields(klass)}
        fields |= set(getattr(klass, "__annotations__", {}))
        if member in fields:
            return True
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        if re.search(rf"\bself\.{re.escape(member)}\s*[:=]", source):
            return True
    return False


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _fits(cls: type, arguments: str) -> str | None:
    """Why ``cls(arguments)`` names a parameter ``cls`` does not take, or None.

    A bare name is read as the parameter it is (``Transport(service)``, or a
    signature written out: ``Workspace(name, kind, *, description="")``); a
    keyword names its parameter; an expression or a literal is not checked.
    """
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    for argument in (a.strip() for a in arguments.split(",")):
        named = re.fullmatch(r"([a-z_][a-z0-9_]*)\s*(?:=.*)?", argument)
        if named is not None and named.group(1) not in params:
            return f"takes no parameter {named.group(1)!r}"
    return None


@pytest.fixture(scope="module")
def facts() -> tuple[set[str], set[str], dict[str, type]]:
    known, functions = _code_facts()
    return known, functions, _public_classes()


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.name)
def test_every_name_a_spec_mentions_exists(
    spec: Path, facts: tuple[set[str], set[str], dict[str, type]]
) -> None:
    known, functions, classes = facts
    problems: list[str] = []
    for code in CODE.findall(spec.read_text(encoding="utf-8")):
        for dotted in DOTTED.findall(code):
            if not _resolves(dotted):
                problems.append(f"{dotted}: no such module or attribute")
        for owner, member in MEMBER.findall(code):
            cls = classes.get(owner)
            if cls is not None and not _has_member(cls, member):
                problems.append(f"{owner}.{member}: {owner} has no {member!r}")
        for owner, arguments in CONSTRUCTED.findall(code):
            cls = classes.get(owner)
            why = _fits(cls, arguments) if cls is not None else None
            if why is not None:
                problems.append(f"{owner}({arguments}): {why}")
        for name in CALLED.findall(code):
            if name not in functions and name not in EVENT_TAGS and name not in NOT_OURS:
                problems.append(f"{name}(): no such function or method")
        for name in SNAKE.findall(code):
            if name not in known and name not in NOT_OURS:
                problems.append(f"{name}: unknown to the code")
    assert problems == []


# Names the specs may write that are not ours: Python's, the libraries', NATS's.
NOT_OURS = {"int", "str", "len", "print", "isinstance", "getattr", "dict", "list", "open"}
NOT_OURS |= {"crc32", "last_by_subj"}
# An event is written as its tag with its payload: ``run_started(mode=resume)``.
EVENT_TAGS = {
    cls.__struct_config__.tag for cls in importlib.import_module("helix_agents.events").EVENT_TYPES
}


def test_the_checks_catch_drift(facts: tuple[set[str], set[str], dict[str, type]]) -> None:
    known, functions, classes = facts
    assert not _resolves("helix_agents.no_such_module.thing")
    assert _resolves("helix_agents.log.codec.encode_jsonl")
    assert not _has_member(classes["ExecutorService"], "start_agent")
    assert _has_member(classes["ExecutorService"], "start")
    assert _fits(classes["InProcessTransport"], "executor") is not None
    assert _fits(classes["AgentExecutor"], "store, agents, llm=model") is None
    assert _fits(classes["AgentExecutor"], "store, no_such=1") is not None
    assert _fits(classes["AgentExecutor"], "store, *, tracer") is None
    assert "define_agent" in functions
    assert "start_agent_now" not in functions
    unknown = "no_such_" + "event_tag"  # built here: the literal would be known (tests count)
    assert "run_started" in known
    assert unknown not in known


FILE_PATH = re.compile(
    r"(?<![\w/.-])((?:core|stores|transports|server|otel|bridges|engines)/[\w/]+\.py)"
)


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.name)
def test_every_file_a_spec_names_exists(spec: Path) -> None:
    named = set(FILE_PATH.findall(spec.read_text(encoding="utf-8")))
    missing = sorted(path for path in named if not (ROOT / path).is_file())
    assert missing == []
