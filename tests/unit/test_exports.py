"""The public names of ``helix_agents`` and ``helix_agents.stores`` are pinned.

Adding or removing a public name is an API change: update the list here on purpose.
Every exported name exists, and every exported class and function (and each
public method of an exported class) has a docstring with a non-empty first line.
"""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType
from typing import Any

import pytest

import helix_agents
import helix_agents.events
import helix_agents.stores

HELIX_AGENTS_ALL = {
    "AgentConfig",
    "AgentExecutor",
    "AgentHandle",
    "AgentHooks",
    "AgentResult",
    "EventStore",
    "HookContext",
    "InProcessTransport",
    "LLMAdapter",
    "PendingInput",
    "PersistentAgent",
    "RemoteAgentTransport",
    "SessionState",
    "SessionStatus",
    "StreamItem",
    "Tool",
    "ToolContext",
    "UsageRollup",
    "create_remote_sub_agent_tool",
    "create_sub_agent_tool",
    "define_agent",
    "define_tool",
    "tool",
    "get_usage_rollup",
    "run_sync",
}

# The public subpackages and modules: each has its own ``__all__``, and every
# name in it is defined in that package (no name is public in two places but
# for the few that ``helix_agents`` itself re-exports).
PUBLIC_HOMES = (
    "helix_agents.agents",
    "helix_agents.models",
    "helix_agents.log",
    "helix_agents.runtime",
    "helix_agents.workspaces",
    "helix_agents.events",
    "helix_agents.errors",
    "helix_agents.messages",
    "helix_agents.protocol",
    "helix_agents.ids",
    "helix_agents.transport",
    "helix_agents.testing",
    "helix_agents.memory",
)

STORES_ALL = {
    "DEFAULT_STORE_URL",
    "InMemoryMemoryStore",
    "JetStreamEventStore",
    "JetStreamMemoryStore",
    "MemoryEventStore",
    "SqliteEventStore",
    "SqliteMemoryStore",
    "StoreCheck",
    "check_store",
    "open_store",
}

PINNED = [
    pytest.param(helix_agents, HELIX_AGENTS_ALL, id="helix_agents"),
    pytest.param(helix_agents.stores, STORES_ALL, id="helix_agents.stores"),
]
MODULES = [
    pytest.param(helix_agents, id="helix_agents"),
    pytest.param(helix_agents.stores, id="helix_agents.stores"),
    *(pytest.param(importlib.import_module(name), id=name) for name in PUBLIC_HOMES),
]


@pytest.mark.parametrize(("module", "expected"), PINNED)
def test_all_is_pinned(module: ModuleType, expected: set[str]) -> None:
    exported = module.__all__
    assert len(exported) == len(set(exported)), "__all__ lists a name twice"
    added, removed = set(exported) - expected, expected - set(exported)
    assert (added, removed) == (set(), set()), "update the pinned list if this is on purpose"


@pytest.mark.parametrize("module", MODULES)
def test_every_exported_name_exists(module: ModuleType) -> None:
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == []
    namespace: dict[str, Any] = {}
    exec(f"from {module.__name__} import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(module.__all__)


def test_the_top_level_api_is_small() -> None:
    assert len(helix_agents.__all__) <= 30


@pytest.mark.parametrize("home", PUBLIC_HOMES)
def test_a_name_has_one_public_home(home: str) -> None:
    module = importlib.import_module(home)
    for other in PUBLIC_HOMES:
        if other != home:
            shared = set(module.__all__) & set(importlib.import_module(other).__all__)
            assert shared == set(), f"{home} and {other} both export {sorted(shared)}"


def test_every_top_level_name_is_also_in_its_home() -> None:
    homes = [importlib.import_module(name) for name in PUBLIC_HOMES]
    for name in helix_agents.__all__:
        owners = [home.__name__ for home in homes if name in home.__all__]
        assert len(owners) == 1, f"{name} is exported by {owners}"
        assert getattr(importlib.import_module(owners[0]), name) is getattr(helix_agents, name)


def test_the_event_classes_are_not_in_the_top_level_api() -> None:
    events = {cls.__name__ for cls in helix_agents.events.EVENT_TYPES}
    assert len(events) > 30
    assert events & set(helix_agents.__all__) == set()
    assert events <= set(helix_agents.events.__all__)


def test_a_lazy_home_refuses_an_unknown_name() -> None:
    import helix_agents.models

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = helix_agents.models.Nope  # type: ignore[attr-defined]


def _public_api(module: ModuleType) -> list[tuple[str, object]]:
    """The exported classes and functions, and the public methods and properties of the classes."""
    found: list[tuple[str, object]] = []
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isfunction(obj):
            found.append((name, obj))
        elif inspect.isclass(obj):
            found.append((name, obj))
            for attr, member in vars(obj).items():
                if attr.startswith("_"):
                    continue
                if isinstance(member, staticmethod | classmethod):
                    member = member.__func__
                elif isinstance(member, property):
                    member = member.fget
                if inspect.isfunction(member):
                    found.append((f"{name}.{attr}", member))
    return found


def _summary(obj: object) -> str:
    """The first line of ``obj``'s own docstring, stripped ("" when it has none)."""
    lines = (obj.__doc__ or "").splitlines()
    return lines[0].strip() if lines else ""


def test_the_docstring_check_catches_what_it_should() -> None:
    def bare() -> None:
        pass

    def blank_first_line() -> None:
        """
        Summary on the second line."""

    class Documented:
        """A class."""

    class Undocumented(Documented):
        pass

    assert [_summary(obj) for obj in (bare, blank_first_line, Undocumented)] == ["", "", ""]
    assert _summary(Documented) == "A class."


@pytest.mark.parametrize("module", MODULES)
def test_every_public_class_and_function_has_a_docstring(module: ModuleType) -> None:
    api = _public_api(module)
    assert len(api) > len(module.__all__) // 3  # the walk really found the API
    undocumented = [name for name, obj in api if not _summary(obj)]
    assert undocumented == []


@pytest.mark.parametrize("module", MODULES)
def test_exported_classes_and_functions_are_our_own(module: ModuleType) -> None:
    foreign = [
        name
        for name in module.__all__
        if (inspect.isclass(obj := getattr(module, name)) or inspect.isfunction(obj))
        and not obj.__module__.startswith("helix_agents")
    ]
    assert foreign == []
