"""``ToolsetHub``: an executor's toolsets, each opened once, shared by every run, closed at exit.

The executor opens the toolsets of its agents (``core/agents/toolsets.py``) on
entering it, for the agents registered then; from ``execute``, for the agent
it starts; else at the first run that needs them. Each toolset is entered and
exited by a task of its own in the hub, never by a run: a toolset built on
task groups (the ``mcp`` SDK's clients are) must leave them in the task that
entered them.

A run takes the toolsets' tools as they are when it begins: its agent is the
defined one with them added after its own tools. A toolset that will not open
or offers a tool whose name is taken fails the run, recoverably, with a
:class:`~helix_agents.errors.ToolsetError`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from helix_agents.agents.config import AgentConfig, SubAgentTool
from helix_agents.agents.define import AgentRegistry
from helix_agents.agents.tools import Tool, validate_tool_name
from helix_agents.agents.toolsets import Toolset
from helix_agents.errors import HelixError, ToolsetError, UsageError

__all__ = ["ToolsetHub", "toolsets_of"]

log = logging.getLogger("helix_agents")

_NOT_ENTERED = "use the executor as 'async with AgentExecutor(...) as executor:'"
_CLOSE_TIMEOUT = 30.0
"""Seconds the hub gives its toolsets to close before it stops waiting for them."""


def toolsets_of(agents: AgentRegistry | AgentConfig) -> list[Toolset]:
    """Every toolset of the registered agents, or of an agent and the agents it runs here.

    An agent's local sub-agents and local persistent children run in its
    executor, so their toolsets count; each toolset once, in the order found.
    """
    found: dict[int, Toolset] = {}
    for agent in _agents_of(agents):
        for toolset in agent.toolsets:
            found.setdefault(id(toolset), toolset)
    return list(found.values())


def _agents_of(agents: AgentRegistry | AgentConfig) -> list[AgentConfig]:
    """The registered agents, or an agent and those it runs in its executor, each once."""
    if not isinstance(agents, AgentConfig):
        return [agent for name in agents.names() if (agent := agents.get(name)) is not None]
    found: dict[int, AgentConfig] = {}
    stack = [agents]
    while stack:
        agent = stack.pop()
        if id(agent) in found:
            continue
        found[id(agent)] = agent
        stack.extend(tool.agent for tool in agent.tools if isinstance(tool, SubAgentTool))
        stack.extend(entry.agent for entry in agent.persistent_agents if entry.transport is None)
    return list(found.values())


@dataclass
class _Held:
    """One toolset in the hub: open or not, the events that close it, the lock of its opening."""

    toolset: Toolset
    is_open: bool = False
    closing: anyio.Event = field(default_factory=anyio.Event)
    """Set by the hub: the holding task exits the toolset."""
    closed: anyio.Event | None = None
    """Set by the holding task once it has left the toolset (None: never held)."""
    lock: anyio.Lock = field(default_factory=anyio.Lock)


class ToolsetHub:
    """An executor's open toolsets: each opened once, held by a task of its own, closed at exit.

    ``await hub.start()`` before use and ``await hub.aclose()`` after, in the
    same task (the executor's ``__aenter__`` and ``__aexit__``).
    """

    def __init__(self) -> None:
        self._held: dict[int, _Held] = {}
        self._tg: TaskGroup | None = None

    def __repr__(self) -> str:
        names = [held.toolset.name for held in self._held.values() if held.is_open]
        return f"<ToolsetHub open={names}>"

    async def start(self) -> None:
        """Begin holding toolsets (enters the task group their tasks live in)."""
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg

    async def aclose(self) -> None:
        """Close every open toolset and wait (a bounded time) for them to close."""
        tg, self._tg = self._tg, None
        if tg is None:
            return
        held, self._held = list(self._held.values()), {}
        for entry in held:
            entry.closing.set()
        with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
            for entry in held:
                if entry.closed is not None:
                    await entry.closed.wait()
        # A toolset slower than that is cut short. The group's own scope is
        # shielded (a new scope around its exit would break their nesting).
        tg.cancel_scope.cancel()
        tg.cancel_scope.shield = True
        await tg.__aexit__(None, None, None)

    async def open(self, toolsets: Iterable[Toolset]) -> None:
        """Open each of ``toolsets`` that is not open yet, concurrently.

        Raises:
            ToolsetError: a toolset would not open (the first such; the others stay open).
            UsageError: the hub is not started (the executor is not entered).
        """
        pending = [toolset for toolset in toolsets if not self._is_open(toolset)]
        if not pending:
            return
        if self._tg is None:
            raise UsageError(_NOT_ENTERED)
        if len(pending) == 1:
            await self.ensure(pending[0])
            return
        failures: list[ToolsetError] = []

        async def one(toolset: Toolset) -> None:
            try:
                await self.ensure(toolset)
            except ToolsetError as error:
                failures.append(error)

        async with anyio.create_task_group() as tg:
            for toolset in pending:
                tg.start_soon(one, toolset)
        if failures:
            raise failures[0]

    async def ensure(self, toolset: Toolset) -> None:
        """Open ``toolset`` unless it is open; concurrent callers share one opening.

        Raises:
            ToolsetError: it would not open (its error, translated).
            UsageError: the hub is not started.
        """
        held = self._held.get(id(toolset))
        if held is not None and held.is_open:
            return
        if self._tg is None:
            raise UsageError(_NOT_ENTERED)
        if held is None:
            held = self._held.setdefault(id(toolset), _Held(toolset))
        async with held.lock:
            if held.is_open:
                return
            held.closing, held.closed = anyio.Event(), anyio.Event()
            try:
                await self._tg.start(self._hold, held)
            except ToolsetError:
                raise
            except Exception as exc:
                raise ToolsetError(toolset.name, f"could not be opened: {_describe(exc)}") from exc

    async def prepare(self, agents: AgentRegistry | AgentConfig) -> None:
        """Open the toolsets of ``agents`` (as :func:`toolsets_of` finds them) and check them.

        Each agent with toolsets is expanded once, so a clash of names is
        found here, before anything runs, rather than by a run.

        Raises:
            ToolsetError: as :meth:`open` and :meth:`expand`.
        """
        await self.open(toolsets_of(agents))
        for agent in _agents_of(agents):
            if agent.toolsets:
                await self.expand(agent)

    async def expand(self, agent: AgentConfig) -> AgentConfig:
        """``agent`` with its toolsets' tools added after its own (their toolsets opened first).

        Raises:
            ToolsetError: a toolset would not open, offers something that is
                not a valid tool, or a name another tool of the agent has.
        """
        if not agent.toolsets:
            return agent
        names = {tool.name for tool in agent.tools}
        added: list[Tool[Any]] = []
        for toolset in agent.toolsets:
            await self.ensure(toolset)
            for tool in toolset.tools():
                if not isinstance(tool, Tool):
                    raise ToolsetError(toolset.name, f"offers {tool!r}, which is not a Tool")
                try:
                    validate_tool_name(tool.name)
                except UsageError as exc:
                    raise ToolsetError(toolset.name, str(exc)) from exc
                if tool.name in names:
                    raise ToolsetError(
                        toolset.name,
                        f"its tool {tool.name!r} has the name of another tool of agent "
                        f"{agent.name!r} (give the toolset a prefix)",
                    )
                names.add(tool.name)
                added.append(tool)
        return replace(agent, tools=(*agent.tools, *added), toolsets=())

    def _is_open(self, toolset: Toolset) -> bool:
        held = self._held.get(id(toolset))
        return held is not None and held.is_open

    async def _hold(self, held: _Held, *, task_status: TaskStatus[None]) -> None:
        """Enter the toolset, report it open, wait for the hub to close, exit it (one task)."""
        entered = False
        try:
            async with held.toolset:
                held.is_open = entered = True
                task_status.started()
                await held.closing.wait()
                held.is_open = False
        except Exception as exc:
            if not entered:
                raise
            log.warning("toolset %s failed while closing: %s", held.toolset.name, _describe(exc))
        finally:
            held.is_open = False
            if held.closed is not None:
                held.closed.set()


def _describe(exc: BaseException) -> str:
    """One line for an exception; a group's first leaf, since that is what went wrong."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, HelixError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
