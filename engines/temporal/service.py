"""The protocol over Temporal: runs launched as workflows, stops sent as signals.

The service and the launcher of :class:`~helix_agents.engines.temporal.runtime.TemporalRuntime`,
sharing its :class:`TemporalConnection`.

:class:`TemporalService` is the :class:`~helix_agents.engines.durable.DurableService`
with three differences: a run is launched by :class:`TemporalLauncher`
(signal-with-start of the session's workflow, whose id is the session id)
instead of in this process; ``interrupt``/``abort`` record the request in
the log as always and then signal the workflow, which passes the stop on to
every child workflow at once; and ``status``/``start``/``resume`` ask Temporal
whether the session's workflow is open (``is_executing``; a repeated start or
a resume joins the run in progress), since no run is held here.
Everything else (idempotent start by compare-and-append, follow-ups,
answers routed at the root, streams from the log) is the service unchanged,
so the gateway in front of it cannot tell which runtime runs a session.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio
from temporalio.api.enums.v1 import WorkflowExecutionStatus
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from helix_agents.agents.config import AgentConfig
from helix_agents.engines.durable.launches import deferred_launch
from helix_agents.engines.durable.service import DurableService
from helix_agents.engines.temporal.options import TemporalOptions
from helix_agents.engines.temporal.stepping import task_timeout
from helix_agents.engines.temporal.workflow import WORKFLOW_NAME, WorkflowInput
from helix_agents.errors import AgentServerError, TransportError
from helix_agents.events import Event
from helix_agents.runtime.runs import SessionRuns

__all__ = ["TemporalConnection", "TemporalLauncher", "TemporalService", "connect"]

log = logging.getLogger("helix_agents.temporal")


async def connect(options: TemporalOptions) -> Client:
    """A Temporal client for ``options`` (``TransportError`` if it cannot be reached)."""
    try:
        return await Client.connect(options.address, namespace=options.namespace)
    except RuntimeError as exc:  # the SDK's core reports a failed connection so
        raise TransportError(f"cannot reach Temporal at {options.address}: {exc}") from exc


class TemporalConnection:
    """The client a runtime's service and launcher share: connected while the runtime is open.

    ``client``: one connected already (kept); else one is connected from
    ``options`` on :meth:`open`.
    """

    def __init__(self, options: TemporalOptions, client: Client | None = None) -> None:
        self.options = options
        self._given = client
        self._client = client

    @property
    def client(self) -> Client:
        """The connected client (``UNAVAILABLE`` before the runtime's executor is entered)."""
        if self._client is None:
            raise AgentServerError(
                "UNAVAILABLE", "not connected to Temporal: enter the server or worker first"
            )
        return self._client

    async def open(self) -> None:
        """Connect, unless a client was given (``TransportError`` if Temporal is unreachable)."""
        if self._client is None:
            self._client = await connect(self.options)

    def close(self) -> None:
        """Forget a client connected here (a given one is kept)."""
        self._client = self._given


class TemporalLauncher:
    """Launches a session's run as its workflow: signal-with-start, id = the session id.

    A run already open for the session (a paused one waiting) gets the
    ``resume`` signal; otherwise a new workflow starts with it. Inside a
    durable step that opens a local child, the launch is handed to the
    parent's workflow instead (a child workflow).
    """

    def __init__(self, connection: TemporalConnection) -> None:
        self.connection = connection

    async def __call__(self, agent: AgentConfig, log_: Sequence[Event], run_id: str) -> None:
        """Launch the run whose ``run_started`` ends ``log_`` (retried a few times, then logged)."""
        session_id, seq = log_[0].session_id, log_[-1].seq
        if deferred_launch(session_id, seq, run_id):
            return
        options = self.connection.options
        for attempt in range(5):
            try:
                await self.connection.client.start_workflow(
                    WORKFLOW_NAME,
                    WorkflowInput(
                        session_id,
                        seq,
                        heartbeat_timeout=options.heartbeat_timeout,
                        paused_wait=options.paused_wait,
                        stop_grace=options.stop_grace,
                    ),
                    id=session_id,
                    task_queue=options.task_queue,
                    start_signal="resume",
                    start_signal_args=[seq],
                    task_timeout=task_timeout(options.heartbeat_timeout),
                )
                return
            except RPCError as exc:
                log.warning("launching %s (attempt %d): %s", session_id, attempt + 1, exc)
                await anyio.sleep(0.2 * 2**attempt)
        log.error("could not launch run %s of %s: a resume will launch it", run_id, session_id)


class TemporalService(DurableService):
    """The protocol's service with runs on Temporal (see the module doc)."""

    def __init__(self, runs: SessionRuns, connection: TemporalConnection) -> None:
        super().__init__(runs)
        self.connection = connection

    async def workflow_open(self, session_id: str) -> bool:
        """Whether the session's workflow (its current run) is open."""
        try:
            described = await self.connection.client.get_workflow_handle(session_id).describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return False
            raise AgentServerError("UNAVAILABLE", f"Temporal: {exc}") from exc
        return bool(described.raw_description.workflow_execution_info.status == _RUNNING)

    async def run_open(self, session_id: str) -> bool:
        """Whether the session's workflow is open (:meth:`workflow_open`)."""
        return await self.workflow_open(session_id)

    async def signal_stop(self, session_id: str, kind: str, reason: str | None) -> None:
        """Signal ``stop`` to the session's workflow (it passes it on to its children)."""
        try:
            await self.connection.client.get_workflow_handle(session_id).signal(
                "stop", args=[kind, reason]
            )
        except RPCError as exc:
            # No open workflow (a paused run that ended its wait): the log has it all.
            log.info("stop of %s not signalled: %s", session_id, exc)


_RUNNING = WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_RUNNING
