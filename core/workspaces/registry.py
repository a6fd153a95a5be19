"""``WorkspaceRegistry``: the workspaces one session owns, opened for the runs that use them.

A registry belongs to its owner session: the session that declared the
workspaces. The owner's runs use it, and so do the runs of its sub-agents
that inherit it (``inherit_workspace=True``): they all hold the same
registry object, so a write by any of them is visible to all. The executor's
:class:`~helix_agents.workspaces.hub.WorkspaceHub` opens a registry when the
first such run starts and closes it when the last one ends.

A workspace whose kind has no provider, or whose provider failed to open it,
stays in the registry as *failed*: the run goes on, and a tool call on it
gets :class:`~helix_agents.WorkspaceFailedError` (the seeds' soft wiring
mode surfaces missing providers at tool-call time).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from helix_agents.errors import WorkspaceError, WorkspaceFailedError
from helix_agents.workspaces.base import Workspace, WorkspaceProvider, WorkspaceRef

__all__ = ["OpenWorkspace", "WorkspaceRegistry"]

log = logging.getLogger("helix_agents")


@dataclass(kw_only=True)
class OpenWorkspace:
    """One workspace of a registry: its declaration, ref and provider, or why it failed."""

    workspace: Workspace
    ref: WorkspaceRef
    provider: WorkspaceProvider | None = None
    failure: str | None = None
    opened: bool = False

    @property
    def name(self) -> str:
        """The workspace's name."""
        return self.workspace.name

    @property
    def kind(self) -> str:
        """The workspace's provider kind."""
        return self.workspace.kind


class WorkspaceRegistry:
    """The workspaces of owner session ``owner_session_id``.

    Args:
        owner_session_id: the session that declared ``workspaces``.
        workspaces: the owner agent's declarations.
        providers: the executor's providers, by kind.
        failure: set when the declarations could not be found (an inherited
            registry whose owner is unknown here); every call then fails with it.
    """

    def __init__(
        self,
        owner_session_id: str,
        workspaces: Sequence[Workspace],
        providers: Mapping[str, WorkspaceProvider],
        *,
        failure: str | None = None,
    ) -> None:
        self.owner_session_id = owner_session_id
        self.failure = failure
        self._spaces: dict[str, OpenWorkspace] = {}
        for workspace in workspaces:
            ref = WorkspaceRef(
                session_id=owner_session_id, name=workspace.name, kind=workspace.kind
            )
            provider = providers.get(workspace.kind)
            self._spaces[workspace.name] = OpenWorkspace(
                workspace=workspace,
                ref=ref,
                provider=provider,
                failure=None
                if provider is not None
                else f"no provider of kind {workspace.kind!r} is configured on this executor "
                "(workspace_providers)",
            )

    @property
    def workspaces(self) -> list[OpenWorkspace]:
        """Every workspace, in declaration order."""
        return list(self._spaces.values())

    def names(self) -> list[str]:
        """The workspace names, in declaration order."""
        return list(self._spaces)

    async def open(self) -> None:
        """Open every workspace that has a provider; a failure marks that workspace failed."""
        for space in self._spaces.values():
            if space.provider is None:
                continue
            try:
                await space.provider.open(space.ref)
            except Exception as exc:  # reported at tool-call time, like a missing provider
                log.warning(
                    "could not open workspace %r (kind %r) of session %s: %r",
                    space.name,
                    space.kind,
                    self.owner_session_id,
                    exc,
                )
                space.failure = f"opening it failed: {type(exc).__name__}: {exc}"
            else:
                space.opened = True

    async def close(self) -> None:
        """Close every opened workspace; a failing close is logged, never raised."""
        for space in self._spaces.values():
            if not space.opened or space.provider is None:
                continue
            space.opened = False
            try:
                await space.provider.close(space.ref)
            except Exception:
                log.exception(
                    "could not close workspace %r of session %s", space.name, self.owner_session_id
                )

    def resolve(self, name: str | None) -> OpenWorkspace:
        """The open workspace a tool call names (``None``: the only one).

        Raises:
            WorkspaceError: no such workspace, or several and none named.
            WorkspaceFailedError: the workspace has no provider or failed to open.
        """
        if self.failure is not None:
            raise WorkspaceFailedError(name or "(inherited)", "unknown", self.failure)
        if name is None:
            if len(self._spaces) != 1:
                raise WorkspaceError(
                    f"there are several workspaces ({_listed(self._spaces)}); "
                    "name one in 'workspace'"
                )
            space = next(iter(self._spaces.values()))
        else:
            found = self._spaces.get(name)
            if found is None:
                raise WorkspaceError(
                    f"no workspace named {name!r}; the workspaces are {_listed(self._spaces)}"
                )
            space = found
        if space.failure is not None:
            raise WorkspaceFailedError(space.name, space.kind, space.failure)
        return space


def _listed(names: Mapping[str, object]) -> str:
    return ", ".join(repr(name) for name in names) or "none"
