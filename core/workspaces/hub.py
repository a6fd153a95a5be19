"""``WorkspaceHub``: an executor's workspace providers, wiring check and open registries.

The executor holds one hub. For each run it opens the run's registry (the
session's own, or the one it inherits), hands the run its agent with the
``workspace_*`` tools added, and closes the registry when the last run using
it ends: workspaces live per invocation (open at spawn or resume, closed at
exit), and a registry shared by a parent and its inheriting children stays
open while any of them runs.

It also checks the wiring when the executor or server is built (strict when
``workspace_provider_kinds`` is given, a warning otherwise), and decides
whether a start request may inherit a registry.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import anyio

from helix_agents.agents.config import AgentConfig
from helix_agents.agents.define import AgentRegistry
from helix_agents.errors import AgentServerError, UsageError, WorkspaceInheritanceError
from helix_agents.events import SessionCreated
from helix_agents.log.state import SessionState
from helix_agents.log.store import EventStore
from helix_agents.protocol import RemoteStartRequest
from helix_agents.runtime.writer import SessionWriter
from helix_agents.workspaces.base import Workspace, WorkspaceProvider
from helix_agents.workspaces.registry import WorkspaceRegistry
from helix_agents.workspaces.tools import workspace_tools

__all__ = ["WorkspaceHub", "inherited_workspace"]

log = logging.getLogger("helix_agents")

_KIND = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_PROVIDER_METHODS = ("open", "close", "read_file", "write_file", "list_files", "delete_file")


def inherited_workspace(tool: Any, parent: SessionState, parent_agent: AgentConfig) -> str | None:
    """The ``workspace_session_id`` a child started by ``tool`` gets: whose workspaces it uses.

    None unless ``tool`` is a sub-agent tool with ``inherit_workspace``; then
    the parent's own registry owner: the session it inherits from, or itself
    when it declares workspaces (None when it has none: nothing to inherit).
    """
    if getattr(tool, "inherit_workspace", False) is not True:
        return None
    if parent.workspace_session_id is not None:
        return parent.workspace_session_id
    return parent.session_id if parent_agent.workspaces else None


@dataclass
class _Shared:
    """A registry and the runs holding it; ``lock`` orders its open and close."""

    users: int = 0
    registry: WorkspaceRegistry | None = None
    lock: anyio.Lock = field(default_factory=anyio.Lock)


def _checked_providers(
    providers: Mapping[str, WorkspaceProvider] | None,
) -> dict[str, WorkspaceProvider]:
    if providers is None:
        return {}
    if not isinstance(providers, Mapping):
        raise UsageError("workspace_providers must be a mapping of kind to provider")
    for kind, provider in providers.items():
        if not isinstance(kind, str) or _KIND.fullmatch(kind) is None:
            raise UsageError(f"workspace_providers: invalid kind {kind!r}")
        missing = [
            name for name in _PROVIDER_METHODS if not callable(getattr(provider, name, None))
        ]
        if missing:
            raise UsageError(
                f"workspace_providers[{kind!r}] is not a WorkspaceProvider "
                f"(it lacks {', '.join(missing)})"
            )
    return dict(providers)


def _checked_kinds(kinds: Iterable[str] | None) -> set[str] | None:
    if kinds is None:
        return None
    if isinstance(kinds, str) or not isinstance(kinds, Iterable):
        raise UsageError(f"workspace_provider_kinds must be a list of kinds, not {kinds!r}")
    checked = set(kinds)
    for kind in checked:
        if not isinstance(kind, str) or _KIND.fullmatch(kind) is None:
            raise UsageError(f"workspace_provider_kinds: invalid kind {kind!r}")
    return checked


def _quoted(items: Iterable[str]) -> str:
    return ", ".join(repr(item) for item in sorted(items))


class WorkspaceHub:
    """The workspaces of one executor.

    Args:
        providers: provider by kind (the executor's ``workspace_providers``).
        agents: the executor's agents (to find an inherited registry's declarations).
        store: the executor's store (to find an inherited registry's owner after a restart).

    Raises:
        UsageError: for a provider map whose keys are not kinds or whose
            values lack the :class:`~helix_agents.WorkspaceProvider` methods.
    """

    def __init__(
        self,
        providers: Mapping[str, WorkspaceProvider] | None,
        agents: AgentRegistry,
        store: EventStore,
    ) -> None:
        self.providers = _checked_providers(providers)
        self._agents = agents
        self._store = store
        self._shared: dict[str, _Shared] = {}
        self._active: dict[str, str] = {}
        self._holds: dict[str, int] = {}
        self._kept: set[str] = set()

    # --- wiring --------------------------------------------------------------------

    def check_wiring(self, agents: AgentRegistry, provider_kinds: Iterable[str] | None) -> None:
        """Check that every registered agent's workspace kinds are wired (seed 000).

        Strict (``provider_kinds`` given): raise ``AgentServerError`` code
        ``WORKSPACE_WIRING`` naming each agent and its kinds missing from
        ``provider_kinds``, and any listed kind this executor has no provider
        for. Soft (``None``): log a warning when any agent declares
        workspaces; a missing provider then fails the tool call
        (``WorkspaceFailedError``). Sub-agents are registered with their
        parents, so agents reachable only as sub-agents are checked too.
        """
        kinds = _checked_kinds(provider_kinds)
        declared: dict[str, set[str]] = {}
        for name in agents.names():
            agent = agents.get(name)
            if agent is not None and agent.workspaces:
                declared[name] = {workspace.kind for workspace in agent.workspaces}
        if kinds is None:
            if declared:
                unprovided = set().union(*declared.values()) - set(self.providers)
                consequence = (
                    f"no provider of kind {_quoted(unprovided)} is configured: their "
                    "workspace tools will fail with WorkspaceFailedError"
                    if unprovided
                    else "set workspace_provider_kinds to check the wiring at construction"
                )
                log.warning(
                    "workspace wiring is not checked (workspace_provider_kinds is unset): "
                    "agent(s) %s declare workspaces; %s",
                    _quoted(declared),
                    consequence,
                )
            return
        problems = [
            f"agent {name!r} declares workspace kind(s) {_quoted(agent_kinds - kinds)} "
            "that workspace_provider_kinds does not cover"
            for name, agent_kinds in sorted(declared.items())
            if agent_kinds - kinds
        ]
        unprovided = kinds - set(self.providers)
        if unprovided:
            problems.append(
                f"workspace_provider_kinds lists {_quoted(unprovided)} but the executor has "
                "no provider of that kind (workspace_providers)"
            )
        if problems:
            raise AgentServerError("WORKSPACE_WIRING", "; ".join(problems))

    def start_problem(self, agent: AgentConfig, request: RemoteStartRequest) -> str | None:
        """Why ``request`` may not start ``agent`` with its ``workspace_session_id``, or None.

        An inheriting child must not declare its own workspaces, and only a
        parent running here, whose registry it is, can hand its registry on.
        """
        owner = request.workspace_session_id
        if owner is None:
            return None
        if agent.workspaces:
            error = WorkspaceInheritanceError(agent.name, [ws.name for ws in agent.workspaces])
            return f"{type(error).__name__}: {error}"
        parent = request.parent_session_id
        if parent is None or self._active.get(parent) != owner:
            return (
                f"workspaceSessionId {owner!r} may only be set by a parent session running in "
                f"this process that uses those workspaces (parentSessionId {parent!r} does not)"
            )
        return None

    # --- runs ----------------------------------------------------------------------

    async def keep(self, owner: str, workspaces: tuple[Workspace, ...]) -> None:
        """Hold ``owner``'s workspaces open across its runs (``workspace_lifetime="persistent"``).

        Idempotent; :meth:`let_go` (or :meth:`let_go_all`) ends the hold.
        """
        if owner in self._kept:
            return
        self._kept.add(owner)
        try:
            await self._acquire(owner, workspaces)
        except BaseException:
            self._kept.discard(owner)
            raise

    async def let_go(self, owner: str) -> None:
        """End :meth:`keep`'s hold; the workspaces close once no run uses them."""
        if owner in self._kept:
            self._kept.discard(owner)
            await self._release(owner)

    async def let_go_all(self) -> None:
        """End every hold (the executor is closing)."""
        for owner in sorted(self._kept):
            await self.let_go(owner)

    def owner_of(self, session_id: str) -> str | None:
        """Whose registry a session running here uses (None: it has no workspaces)."""
        return self._active.get(session_id)

    @asynccontextmanager
    async def session(
        self, agent: AgentConfig, writer: SessionWriter
    ) -> AsyncIterator[AgentConfig]:
        """Open the run's workspaces; yield ``agent`` with its ``workspace_*`` tools; close them.

        Yields ``agent`` unchanged when the session has no workspaces. Never
        raises for a workspace problem: those fail the tool calls.
        """
        state = writer.state
        inherited = state.workspace_session_id
        if inherited is None and not agent.workspaces:
            yield agent
            return
        session_id = state.session_id
        owner = inherited or session_id
        registry = await self._acquire(owner, None if inherited else agent.workspaces)
        self._active[session_id] = owner
        # A durable runtime's steps of one session may overlap here: the last one out clears it.
        self._holds[session_id] = self._holds.get(session_id, 0) + 1
        try:
            tools = workspace_tools(registry, writer)
            yield replace(agent, tools=(*agent.tools, *tools))
        finally:
            self._holds[session_id] -= 1
            if not self._holds[session_id]:
                del self._holds[session_id]
                if self._active.get(session_id) == owner:
                    del self._active[session_id]
            await self._release(owner)

    async def _acquire(
        self, owner: str, workspaces: tuple[Workspace, ...] | None
    ) -> WorkspaceRegistry:
        shared = self._shared.setdefault(owner, _Shared())
        shared.users += 1
        try:
            async with shared.lock:
                if shared.registry is None:
                    failure = None
                    if workspaces is None:
                        workspaces, failure = await self._declared(owner)
                    registry = WorkspaceRegistry(owner, workspaces, self.providers, failure=failure)
                    await registry.open()
                    shared.registry = registry
                return shared.registry
        except BaseException:
            await self._release(owner)
            raise

    async def _release(self, owner: str) -> None:
        shared = self._shared[owner]
        shared.users -= 1
        if shared.users > 0:
            return
        with anyio.CancelScope(shield=True):
            async with shared.lock:
                if shared.users > 0:
                    return  # someone took it again while we waited
                registry, shared.registry = shared.registry, None
                if registry is not None:
                    await registry.close()
                if shared.users == 0 and self._shared.get(owner) is shared:
                    del self._shared[owner]

    async def _declared(self, owner: str) -> tuple[tuple[Workspace, ...], str | None]:
        """The declarations of an inherited registry whose owner runs nowhere here."""
        try:
            # Only on this path (a child whose owner runs nowhere here): one read.
            events = await self._store.read(owner)
        except Exception as exc:  # the run goes on; its workspace calls report this
            return (), f"cannot read the owner session {owner!r}: {type(exc).__name__}: {exc}"
        if not events:
            return (), f"the workspaces' owner session {owner!r} does not exist"
        created = events[0]
        agent = (
            self._agents.get(created.agent_type) if isinstance(created, SessionCreated) else None
        )
        if agent is None:
            return (), f"the agent of owner session {owner!r} is not registered on this executor"
        return agent.workspaces, None
