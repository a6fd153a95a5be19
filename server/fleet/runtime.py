"""``NatsRuntime``: the built-in runtime as one host of a NATS fleet, with leases and takeovers.

Runs happen in this process, as on the built-in runtime; what the fleet adds
is said when the server is built (``AgentServer(agents, store,
runtime=NatsRuntime(nc))``) and takes effect while a
:class:`~helix_agents.server.fleet.host.NatsAgentHost` serves it:

- its run guard: every start and resume of a session here (a request's, a
  local child's, an expiry timer's, ``recover()``'s) first takes the
  session's lease (JetStream KV, with a TTL), so at most one host begins runs
  of a session; a lease another host holds refuses it (:class:`HeldElsewhere`:
  the host forwards the request there). The session is put in the running
  index before its run can begin, and both are given back once no run of it
  is active here.
- its takeover claim: a resume that takes over a session left running
  appends ``host_claimed`` in the same compare-and-append as its run.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext

import anyio
from anyio.abc import TaskGroup
from nats.aio.client import Client as NatsClient

from helix_agents.errors import HelixError, UsageError
from helix_agents.events import Event
from helix_agents.log.state import SessionState
from helix_agents.runtime.executor import AgentExecutor
from helix_agents.runtime.runs import ActiveRun
from helix_agents.runtime.service import ExecutorService, RuntimeParts
from helix_agents.server.fleet.leases import DEFAULT_LEASE_TTL, Lease, LeaseKeeper
from helix_agents.server.fleet.running import RunningIndex, bucket_for
from helix_agents.server.fleet.takeover import DEFAULT_SWEEP_EVERY, claim_on_resume

__all__ = ["HeldElsewhere", "NatsRuntime"]

_log = logging.getLogger("helix_agents.server")

BEGIN_PATIENCE = 5.0
"""Seconds a run about to begin waits for its lease and index entry while JetStream does not
answer (a killed node's streams find a new leader in about a second)."""

_HOST_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


class HeldElsewhere(HelixError):
    """The session's lease is held by another host: only it may begin a run, or say if one runs."""

    def __init__(self, session_id: str, holder: str) -> None:
        super().__init__(f"session {session_id!r} is held by host {holder!r}")
        self.holder = holder


class NatsRuntime:
    """The runtime of one host of a NATS fleet (a ``Runtime``; see the module doc).

    Args:
        nc: the NATS connection of the leases, the running index and the host.
        host_id: this host's identity in ``host_claimed`` events and leases.
        lease_ttl: seconds a dead host's leases live: its sessions are taken
            over within about ``lease_ttl * 4/3``.
        replicas: copies JetStream keeps of the lease and hosts buckets, if
            this host creates them (1 to 5).
        sweep_every: seconds between two full sweeps of every session's log.
        running_bucket_name: the running index's bucket (default: named after
            the store's stream).

    Raises:
        UsageError: a bad option (and, once given to a server, a store with
            no stream to name the running index after).
    """

    def __init__(
        self,
        nc: NatsClient,
        *,
        host_id: str | None = None,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        replicas: int = 1,
        sweep_every: float = DEFAULT_SWEEP_EVERY,
        running_bucket_name: str | None = None,
    ) -> None:
        if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= 5:
            raise UsageError(f"replicas must be an int from 1 to 5, not {replicas!r}")
        if host_id is not None and _HOST_ID.fullmatch(host_id) is None:
            raise UsageError(f"host_id must be 1-64 characters of A-Za-z0-9_-, not {host_id!r}")
        if not lease_ttl > 0 or not sweep_every > 0:
            raise UsageError("lease_ttl and sweep_every must be positive")
        self.nc = nc
        self.host_id = host_id or f"host-{uuid.uuid4().hex[:12]}"
        """This host's identity in ``host_claimed`` events and leases."""
        self.lease_ttl = lease_ttl
        self.replicas = replicas
        """Copies JetStream keeps of the lease and hosts buckets, if this host creates them."""
        self.sweep_every = sweep_every
        self.leases = LeaseKeeper(nc, self.host_id, ttl=lease_ttl, replicas=replicas)
        """The leases this host holds; a session's is taken, and given back, under its lock."""
        self.hosted = False
        """True while a ``NatsAgentHost`` serves this runtime's server (its guard applies)."""
        self.task_group: TaskGroup | None = None
        """The host's task group while it is open (where leases wait to be given back)."""
        self._bucket_name = running_bucket_name
        self._running: RunningIndex | None = None
        self._executor: AgentExecutor | None = None
        self._releasing: set[str] = set()  # sessions whose lease goes when their run ends

    @property
    def runs_models(self) -> bool:
        """True: the runs happen in this process."""
        return True

    @property
    def recovers_sessions(self) -> bool:
        """False: a server on it recovers as a built-in one does (under the leases)."""
        return False

    @property
    def running(self) -> RunningIndex:
        """The fleet's index of running sessions (``running.py``), which the scan reads."""
        if self._running is None:
            raise UsageError("give the NatsRuntime to a server (runtime=) first")
        return self._running

    @property
    def executor(self) -> AgentExecutor:
        """The executor this runtime was given to."""
        if self._executor is None:
            raise UsageError("give the NatsRuntime to a server (runtime=) first")
        return self._executor

    def bind(self, executor: AgentExecutor) -> RuntimeParts:
        """The built-in service, with this host's lease guard and takeover claim."""
        if self._executor is not None:
            raise UsageError("this NatsRuntime already runs another server's sessions")
        bucket = bucket_for(executor.store, self._bucket_name)  # UsageError if it is bad
        self._running = RunningIndex(self.nc, bucket, host_id=self.host_id, replicas=self.replicas)
        self._executor = executor
        return RuntimeParts(
            service=ExecutorService(executor.runs),
            run_guard=self._guard,
            takeover_claim=self._claim,
        )

    def lifespan(self) -> AbstractAsyncContextManager[object]:
        """Nothing to open with the executor: the host opens the leases and the index."""
        return nullcontext()

    def _claim(self, log_: Sequence[Event], state: SessionState) -> list[Event]:
        return claim_on_resume(self.host_id, log_, state) if self.hosted else []

    def _guard(self, session_id: str) -> AbstractAsyncContextManager[object]:
        return self._leased(session_id) if self.hosted else nullcontext()

    @asynccontextmanager
    async def _leased(self, session_id: str) -> AsyncIterator[Lease]:
        """Hold ``session_id``'s lease around a request that can begin its run here.

        The server's run guard (starts, resumes, answers; a local child's
        too). The lease is taken (created, if no host holds it) before the run
        can begin, so no other host can find the session running unleased; and
        then the session is put in the running index (unless a run of it is
        executing here already), so no run can begin unindexed (``running.py``).
        A lease another host holds refuses the request here (``HeldElsewhere``:
        it is forwarded to that host), so at most one host can begin runs of a
        session. If no run of it began here, a lease this host holds for it is
        given back, and the index entry put here is removed if the log says
        the session is not running. While JetStream does not answer (a node's
        streams moving), both are tried again for up to ``BEGIN_PATIENCE``
        seconds before the run begins; a lease that still cannot be taken
        (JetStream unavailable) does not stop the run: the next renewal puts it
        (and the next scan round its index entry).
        """
        async with self.leases.hold(session_id):
            lease = await self.leases.take(session_id, patience=BEGIN_PATIENCE)
            if lease.holder is not None and lease.holder != self.host_id:
                raise HeldElsewhere(session_id, lease.holder)
            marked = False
            if not self.executor.is_executing(session_id):
                marked = await self.running.mark(session_id, patience=BEGIN_PATIENCE)
            try:
                yield lease
            finally:
                with anyio.CancelScope(shield=True):
                    await self._settle(session_id, lease, marked)

    async def _settle(self, session_id: str, lease: Lease, marked: bool) -> None:
        """After a guarded request: keep the lease while a run is on, else give it back."""
        if not self.executor.is_executing(session_id):
            if lease.holder == self.host_id:
                if marked:
                    await self.running.remove_at_rest(session_id, self.executor.store)
                await self.leases.drop(session_id)
            return
        if lease.holder is None:
            await self.leases.put(session_id)
        if lease.created is not None or lease.holder is None:
            _log.info("host %s runs %s", self.host_id, session_id)
        if session_id not in self._releasing and self.task_group is not None:
            self._releasing.add(session_id)
            # The run as it is now: it may end before the task below first looks.
            active = self.executor.runs.active(session_id)
            self.task_group.start_soon(self._release_when_idle, session_id, active)

    async def _release_when_idle(self, session_id: str, active: ActiveRun | None) -> None:
        """Give the session's lease back (and its index entry) once no run of it is active here.

        ``active``: the run that was active when the task was started, so its
        final state is known even if it ended before the task first looked.
        """
        executor = self.executor
        try:
            while True:
                # Until no run is active here; ``last``: the one that ended last.
                last, current = None, active or executor.runs.active(session_id)
                active = None
                while current is not None:
                    last = current
                    await current.done.wait()
                    current = executor.runs.active(session_id)
                put = self.running.mine.get(session_id)
                async with self.leases.hold(session_id):
                    if not executor.is_executing(session_id):
                        # The state the last run ended with: the index entry goes without
                        # a read if it is not running, unless a run began (and ended) since.
                        run = last.run if last is not None else None
                        fresh = run is not None and self.running.mine.get(session_id) == put
                        state = run.writer.state if run is not None and fresh else None
                        with anyio.CancelScope(shield=True):
                            store = executor.store
                            await self.running.remove_at_rest(session_id, store, state)
                            await self.leases.drop(session_id)
                        return
        finally:
            self._releasing.discard(session_id)

    async def give_back_idle(self) -> None:
        """Give back the leases, and index entries, of sessions no run of which is active here."""
        executor = self.executor
        for session_id in list(self.leases.held):
            if not executor.is_executing(session_id):
                await self.running.remove_at_rest(session_id, executor.store)
        await self.leases.drop_idle(executor.is_executing)
