"""``OrphanTakeover``: a host's scan for running sessions whose host died, and their claim.

A session the log says is running, of an agent type this host serves, that
no live lease covers, lost its host. The scan takes its lease (only if no
host holds it), claims it by compare-and-append of ``host_claimed`` (so two
claimants can never both win) and resumes it from its log.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio

from helix_agents import SessionState
from helix_agents.errors import ConcurrencyConflict
from helix_agents.events import Event, HostClaimed
from helix_agents.log import project_state
from helix_agents.protocol import RemoteResumeRequest
from helix_agents.runtime.writer import stamp
from helix_agents.server.agent_server import AgentServer
from helix_agents.server.fleet.leases import LeaseKeeper

__all__ = ["OrphanTakeover"]

log = logging.getLogger("helix_agents.server")


class OrphanTakeover:
    """Claims and resumes, for ``server``, the orphaned sessions ``leases`` can take."""

    def __init__(self, server: AgentServer, leases: LeaseKeeper, *, interval: float) -> None:
        self.server = server
        self.leases = leases
        self.interval = interval
        """Seconds between two scans."""
        # What the scan last read of each session: the seq its log ended at,
        # and whether it was a candidate (running, of an agent type here).
        self._scanned: dict[str, tuple[int, bool]] = {}

    async def run_forever(self) -> None:
        """Scan every ``interval`` seconds; a failed round is logged and the next one runs."""
        while True:
            await anyio.sleep(self.interval)
            try:
                await self.take_over_orphans()
            except Exception as exc:  # a store or NATS failure (a node died): the next round
                log.warning("looking for orphaned sessions failed: %r", exc)

    async def take_over_orphans(self) -> list[str]:
        """Claim and resume the running sessions no live lease covers; return their ids.

        Only sessions of this host's agent types, whose host died (its lease
        expired). This host takes the lease first (only if no host holds it),
        then claims by compare-and-append of ``host_claimed``.

        The scan reads a session's log only when it is new to it or its log
        moved since it last read it (the store's ``session_heads``, one call):
        a session at rest keeps what the last read found (a finished session
        is never read again). A running one is read afresh before it is
        claimed, and one a live host holds is not read at all.
        """
        store = self.server.store
        executor = self.server.executor
        heads = await store.session_heads()
        scanned = self._scanned
        for gone in [session_id for session_id in scanned if session_id not in heads]:
            del scanned[gone]
        taken: list[str] = []
        for session_id, head in heads.items():
            if executor.is_executing(session_id):
                continue
            known = scanned.get(session_id)
            candidate: SessionState | None = None
            if known is None or not known[1]:
                if known is not None and known[0] == head:
                    continue  # read at this very head: not running, or not ours
                candidate = await self._scan(session_id)
                if candidate is None:
                    continue
            if await self.leases.holder(session_id) is not None:
                continue  # a live host holds it
            # Known running from an earlier scan: read afresh, it may have moved on.
            state = candidate or await self._scan(session_id)
            if state is None:
                continue
            async with self.leases.hold(session_id):
                lease = await self.leases.take(session_id)
                if lease.created is None:
                    continue  # a host took the lease first
                claim = HostClaimed(host_id=self.leases.host_id, previous_host_id=state.host_id)
                try:
                    await store.append(
                        session_id, stamp(session_id, state.last_seq, [claim]), state.last_seq
                    )
                except ConcurrencyConflict:
                    await self.leases.drop(session_id)
                    continue  # another host claimed it first, or it moved on
            log.warning("host %s takes over session %s", self.leases.host_id, session_id)
            # Under the lease this host holds: the guard lets the run begin here.
            await self.server.resume_agent(RemoteResumeRequest(session_id=session_id))
            taken.append(session_id)
        return taken

    async def _scan(self, session_id: str) -> SessionState | None:
        """Read ``session_id``'s log for the orphan scan: its state if it is a candidate.

        A candidate is running and of an agent type this host serves; what
        was found is kept (``_scanned``) with the seq the log ended at.
        """
        log_ = await self.server.store.read(session_id)
        if not log_:
            self._scanned.pop(session_id, None)
            return None
        state = project_state(log_)
        candidate = state.status == "running" and state.agent_type in self.server.agent_types
        self._scanned[session_id] = (state.last_seq, candidate)
        return state if candidate else None

    def claim_on_resume(self, log_: Sequence[Event], state: SessionState) -> list[Event]:
        """The claim a resume appends with its ``run_started`` when it takes over a session.

        A resume (a parent re-opening its child, a client) of a session its log
        says is running, none of whose runs is active here, under the lease this
        host just took (none was live): its run was cut (its host died, or a
        store failure ended it). The takeover is claimed, as a scan claims it
        (``take_over_orphans``), in the same compare-and-append as the new run.
        Nothing more if this host's own scan claimed it just now.
        """
        last = log_[-1]
        if isinstance(last, HostClaimed) and last.host_id == self.leases.host_id:
            return []
        log.warning("host %s takes over session %s", self.leases.host_id, state.session_id)
        # The resume stamps its batch (SessionRuns.begin_run): the payload only.
        return [HostClaimed(host_id=self.leases.host_id, previous_host_id=state.host_id)]
