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
from typing import Any

from helix_agents import AgentConfig
from helix_agents.server.agent_server import AgentServer

__all__ = ["TargetError", "agents_of", "chat_agents", "load_target", "server_agents"]


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
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise TargetError(f"{module_name!r} has no attribute {attr!r}") from None
    return target


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
