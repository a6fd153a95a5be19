"""Loading ``MODULE:ATTR``: the agents (or the AgentServer) a command runs.

``serve``, ``host``, ``chat`` and ``replay --rerun`` all take user code this
way; a module that fails to import is named in one line with the file and
line it failed at.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import Any

from helix_agents import AgentConfig
from helix_agents.agents import SubAgentTool
from helix_agents.server.agent_server import AgentServer

__all__ = [
    "TargetError",
    "agents_of",
    "chat_agents",
    "holdings",
    "load_target",
    "server_agents",
]


class TargetError(Exception):
    """``MODULE:ATTR`` could not be loaded or is not agents / an AgentServer, or cannot be served.

    ``code`` is the CLI's exit status: 2 for a bad command line (the default),
    1 for a failure found while starting (an address in use).
    """

    def __init__(self, message: str, *, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def _where(exc: BaseException) -> str:
    """``file:line`` of the user's code an import failed in (the deepest frame under cwd)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}:{exc.lineno}"
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not frame.filename.startswith("<") and frame.filename != __file__
    ]
    cwd = os.getcwd() + os.sep
    ours = [frame for frame in frames if os.path.abspath(frame.filename).startswith(cwd)]
    if not (ours or frames):
        return ""
    chosen = (ours or frames)[-1]
    return f"{chosen.filename}:{chosen.lineno}"


def _import_failure(module_name: str, exc: Exception) -> TargetError:
    """One line for a module that failed to import: where, and what."""
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if missing is not None and (module_name + ".").startswith(missing + "."):
        # The module, or a package on its path, is not there (not a dependency
        # the module imports, which keeps its file and line).
        return TargetError(f"cannot import {module_name!r}: no module named {missing!r}")
    what = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    where = _where(exc)
    place = f" ({where})" if where else ""
    return TargetError(
        f"cannot import {module_name!r}{place}: {type(exc).__name__}: {what}".rstrip(": ")
    )


def load_target(spec: str) -> Any:
    """Import ``MODULE:ATTR`` (the working directory is importable) and return the attribute.

    Raises:
        TargetError: a malformed spec, a missing attribute, or a module that
            fails to import (named with the file and line it failed at).
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise TargetError(f"expected MODULE:ATTR, not {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module may raise anything while importing
        raise _import_failure(module_name, exc) from exc
    target = module
    for depth, part in enumerate(attr.split(".")):
        try:
            target = getattr(target, part)
        except AttributeError:
            held = f"; {holdings(module)}" if depth == 0 else ""
            raise TargetError(f"{module_name!r} has no attribute {attr!r}{held}") from None
    return target


def _delegates(agent: AgentConfig) -> list[str]:
    """The agents ``agent``'s local sub-agent tools run, by name."""
    return [tool.agent.name for tool in agent.tools if isinstance(tool, SubAgentTool)]


def _described(name: str, value: Any) -> str | None:
    """Module attribute ``name`` as the list of what a module holds shows it; None: no agents."""
    if isinstance(value, AgentServer):
        return f"{name} (an AgentServer: {', '.join(value.agent_types)})"
    if isinstance(value, AgentConfig):
        notes = [] if value.name == name else [f"agent {value.name!r}"]
        if children := _delegates(value):
            notes.append(f"delegates to {', '.join(children)}")
        return f"{name} ({'; '.join(notes)})" if notes else name
    if isinstance(value, Mapping | list | tuple):
        members = list(value.values()) if isinstance(value, Mapping) else list(value)
        if members and all(isinstance(member, AgentConfig) for member in members):
            kind = "dict" if isinstance(value, Mapping) else type(value).__name__
            return f"{name} (a {kind}: {', '.join(member.name for member in members)})"
    return None


def holdings(module: ModuleType) -> str:
    """What ``module`` offers a ``MODULE:ATTR``, for an error: ``it holds agents: ...; try M:A``.

    Its public attributes that are an agent, a non-empty dict, list or tuple
    of agents, or an AgentServer, by name. The suggestion is the collections
    and AgentServers when there are any (they hold a whole program), else the
    agents no other one of them delegates to (the roots of its trees).
    """
    values = {name: value for name, value in vars(module).items() if not name.startswith("_")}
    found = {name: shown for name in sorted(values) if (shown := _described(name, values[name]))}
    if not found:
        return "it holds no agents (define one with define_agent at the module's top level)"
    agents = {name: values[name] for name in found if isinstance(values[name], AgentConfig)}
    called = {child for agent in agents.values() for child in _delegates(agent)}
    groups = [name for name in found if name not in agents]
    roots = [name for name, agent in agents.items() if agent.name not in called]
    tries = " or ".join(f"{module.__name__}:{name}" for name in (groups or roots or list(found)))
    return f"it holds agents: {', '.join(found.values())}; try {tries}"


def agents_of(target: Any, spec: str) -> list[AgentConfig]:
    """The agents ``target`` holds: one agent, or a dict or list of them.

    Raises:
        TargetError: ``target`` is none of these (``spec`` names it).
    """
    if isinstance(target, AgentConfig):
        return [target]
    if isinstance(target, Mapping):
        values: Iterable[Any] = target.values()
    elif isinstance(target, list | tuple):
        values = target
    else:
        raise TargetError(f"{spec} is not an AgentServer, an agent, or a dict/list of agents")
    agents = list(values)
    if not agents or not all(isinstance(agent, AgentConfig) for agent in agents):
        raise TargetError(f"{spec} must hold agents built with define_agent")
    return agents


def server_agents(target: Any, spec: str) -> list[AgentConfig]:
    """The agents of ``target``: an AgentServer's registered ones, or :func:`agents_of`."""
    if isinstance(target, AgentServer):
        found = [target.executor.registry.get(name) for name in target.agent_types]
        return [agent for agent in found if agent is not None]
    return agents_of(target, spec)


def chat_agents(spec: str) -> list[AgentConfig]:
    """The agents of ``MODULE:ATTR`` for ``chat`` (an AgentServer's, or agents)."""
    return server_agents(load_target(spec), spec)
