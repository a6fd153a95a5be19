"""Branches: fork a session (and its tree) at a sequence, edit the past, run on (specs/branches.md).

``AgentExecutor.fork`` is the entrance; ``POST /fork`` and ``helix-agents fork``
call it. The edits (``ReplaceUserMessage``, ``ReplaceToolResult``,
``ReplaceState``, ``DecideApproval``, ``UseAgent``) and the ``session_forked``
event live in the event catalog (``helix_agents.events``).
"""

from __future__ import annotations

from helix_agents.branches.copy import FORKED_AT_KEY, FORKED_FROM_KEY, branch_log, map_ids
from helix_agents.branches.fork import (
    APPEND_BATCH,
    ForkResult,
    ForkService,
    fork_session,
    forks_of,
)

__all__ = [
    "APPEND_BATCH",
    "FORKED_AT_KEY",
    "FORKED_FROM_KEY",
    "ForkResult",
    "ForkService",
    "branch_log",
    "fork_session",
    "forks_of",
    "map_ids",
]
