"""Agents that ``test_answer_settles_ancestors_crash.py`` serves with ``helix-agents serve``.

- ``child_agents`` (server B): ``child``, a worker whose ``rm`` waits for an approval;
- ``crash_root_agents`` (server A): ``root``, delegating to B's ``child`` over HTTP
  (``PARITY_CHILD_URL``). When ``PARITY_CRASH_AFTER_FORWARD`` is set, the
  root's process SIGKILLs itself right after B took a forwarded approval,
  before the root records it: the crash window specs/hitl.md says a retry covers.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from helix_agents.protocol import SubmitResponse
from helix_agents.transports import HttpRemoteAgentTransport
from tests.integration.hitl_app import remote_tool, root_agent, worker

__all__ = ["CrashAfterForward", "child_agents"]


class CrashAfterForward(HttpRemoteAgentTransport):
    """An HTTP transport whose process dies (SIGKILL) once a forwarded approval was taken."""

    async def submit_approval(
        self,
        session_id: str,
        tool_call_id: str,
        approved: bool,
        reason: str | None = None,
        *,
        decided_by: str | None = None,
    ) -> SubmitResponse:
        """Forward the decision; then, if asked to, die before the caller records it."""
        response = await super().submit_approval(
            session_id, tool_call_id, approved, reason, decided_by=decided_by
        )
        if os.environ.get("PARITY_CRASH_AFTER_FORWARD"):
            os.kill(os.getpid(), signal.SIGKILL)
        return response


child_agents = {"child": worker("child", ("rm",))}


def __getattr__(attribute: str) -> Any:
    if attribute == "crash_root_agents":
        transport = CrashAfterForward(
            os.environ["PARITY_CHILD_URL"], max_retries=2, retry_base_delay=0.05, timeout=10
        )
        return {"root": root_agent(remote_tool("child", transport, stream_retries=20))}
    raise AttributeError(attribute)
