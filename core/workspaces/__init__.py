"""Workspaces: named places an agent keeps files in.

``base`` (the ``Workspace`` / ``WorkspaceProvider`` seam), ``local`` and
``memory`` (providers), ``registry`` (the workspaces one session owns),
``hub`` (an executor's providers), ``tools`` (the ``workspace_*`` tools).
See ``specs/workspaces.md``.
"""
