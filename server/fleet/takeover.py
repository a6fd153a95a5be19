"""``OrphanTakeover``: a host's scan for running sessions whose host died, and their claim.

A session the log says is running, of an agent type this host serves, that
no live lease covers, lost its host. The scan looks for them among the
running index's entries (``running.py``: proportional to the running
sessions, not to all of them), takes the lease (only if no host holds it),
reads the log under it, claims the session by compare-and-append of
``host_claimed`` (so two claimants can never both win) and resumes it from
its log. A rare full sweep of every log is the index's last resort.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio

from helix_agents import SessionState
from helix_agents.errors import ConcurrencyConflict
from helix_agents.events import Event, HostClaimed, RunStarted
from helix_agents.ids import is_schedule_log
from helix_agents.log import project_state
from helix_agents.protocol import RemoteResumeRequest
from helix_agents.runtime.writer import stamp
from helix_agents.server.agent_server import AgentServer
from helix_agents.server.fleet.leases import LeaseKeeper
from helix_agents.server.fleet.running import RunningIndex

__all__ = ["DEFAULT_SWEEP_EVERY", "OrphanTakeover", "claim_on_resume"]

log = logging.getLogger("helix_agents.server")

DEFAULT_SWEEP_EVERY = 600.0
"""Seconds between two full sweeps of every session's log: how long an entry the running
index misses (its put failed, then its host died) can delay a takeover."""


class OrphanTakeover:
    """Claims and resumes, for ``server``, the orphaned sessions ``leases`` can take.

    A round looks at the sessions of the running index (``index``), not at
    every session: its cost follows the running sessions. Every
    ``sweep_every`` seconds, and while the index has never been filled, a
    round sweeps every session's log instead (``_sweep``), writing any entry
    the index misses.
    """

    def __init__(
        self,
        server: AgentServer,
        leases: LeaseKeeper,
        index: RunningIndex,
        *,
        interval: float,
        sweep_every: float = DEFAULT_SWEEP_EVERY,
    ) -> None:
        self.server = server
        self.leases = leases
        self.index = index
        self.interval = interval
        """Seconds between two scans."""
        self.sweep_every = sweep_every
        """Seconds between two full sweeps of every session's log (a missing entry's bound)."""
        self.swept = 0
        """How many rounds were full sweeps (a test's and the benchmark's count)."""
        self.looked_at = 0
        """Sessions the last round looked at (the index's entries, or every session)."""
        # What a sweep last read of each session: the seq its log ended at,
        # and whether it was running (of any agent type).
        self._scanned: dict[str, tuple[int, bool]] = {}
        self._last_sweep: float | None = None
        self._foreign: set[str] = set()  # running sessions of agent types not served here

    async def run_forever(self) -> None:
        """Scan every ``interval`` seconds; a failed round is logged and the next one runs."""
        while True:
            await anyio.sleep(self.interval)
            try:
                await self.index.mark_again(self.server.executor.is_executing)
                await self.take_over_orphans()
            except Exception as exc:  # a store or NATS failure (a node died): the next round
                log.warning("looking for orphaned sessions failed: %r", exc)

    async def take_over_orphans(self) -> list[str]:
        """Claim and resume the running sessions no live lease covers; return their ids.

        The sessions looked at are the running index's (a full sweep's when
        one is due). Each that is not executing here and that no live lease
        covers is claimed (``_claim``): only if its log says it is running and
        of an agent type this host serves; an entry whose log says otherwise
        is stale and is removed.
        """
        executor = self.server.executor
        now = anyio.current_time()
        due = self._last_sweep is None or now - self._last_sweep >= self.sweep_every
        if due and (self._last_sweep is not None or not await self.index.rebuilt()):
            sessions = await self._sweep()
            self._last_sweep = now
        else:
            if self._last_sweep is None:
                self._last_sweep = now  # filled already: the first sweep is a period away
            sessions = await self.index.sessions()
        self.looked_at = len(sessions)
        self._foreign.intersection_update(sessions)  # those no longer running are forgotten
        taken: list[str] = []
        for session_id in sessions:
            if executor.is_executing(session_id) or session_id in self._foreign:
                continue
            if await self.leases.holder(session_id) is not None:
                continue  # a live host holds it
            if await self._claim(session_id):
                taken.append(session_id)
        return taken

    async def _claim(self, session_id: str) -> bool:
        """Take the session's lease and claim it if its log says it is an orphan of ours.

        Under the lease no other host can begin a run of it, so what the log
        says holds: not running (a stale entry: the run ended, or never
        began) removes the entry read under the lease; running, of a type this
        host serves, is claimed by compare-and-append and resumed.
        """
        store = self.server.store
        async with self.leases.hold(session_id):
            lease = await self.leases.take(session_id)
            if lease.created is None:
                return False  # a host took the lease first
            revision = await self.index.revision(session_id)
            log_ = await store.read(session_id)
            state = project_state(log_) if log_ else None
            if state is None or state.status != "running":
                if revision is not None:
                    await self.index.remove(session_id, revision)
                await self.leases.drop(session_id)
                return False
            if revision is None:
                await self.index.mark(session_id)  # found by a sweep
            if state.agent_type not in self.server.agent_types:
                self._foreign.add(session_id)
                await self.leases.drop(session_id)
                return False
            claim = HostClaimed(host_id=self.leases.host_id, previous_host_id=state.host_id)
            try:
                await store.append(
                    session_id, stamp(session_id, state.last_seq, [claim]), state.last_seq
                )
            except ConcurrencyConflict:
                await self.leases.drop(session_id)
                return False  # another host claimed it first, or it moved on
        log.warning("host %s takes over session %s", self.leases.host_id, session_id)
        # Under the lease this host holds: the guard lets the run begin here.
        await self.server.resume_agent(RemoteResumeRequest(session_id=session_id))
        return True

    async def _sweep(self) -> list[str]:
        """Every session whose log says it is running; the index's missing entries are put.

        A log is read only when it is new to the sweep or moved since it last
        read it (the store's ``session_heads``, one call): a finished session
        is read once, ever. Once a sweep has put every entry missing, the
        index is complete (``REBUILT_KEY``).
        """
        heads = await self.server.store.session_heads()
        scanned = self._scanned
        for gone in [session_id for session_id in scanned if session_id not in heads]:
            del scanned[gone]
        running: list[str] = []
        for session_id, head in heads.items():
            if is_schedule_log(session_id):
                continue  # the schedules' log is no session
            known = scanned.get(session_id)
            if known is None or known[0] != head:
                log_ = await self.server.store.read(session_id)
                state = project_state(log_) if log_ else None
                known = (head, state is not None and state.status == "running")
                scanned[session_id] = known
            if known[1]:
                running.append(session_id)
        indexed = set(await self.index.sessions())
        complete = True
        missing = [session_id for session_id in running if session_id not in indexed]
        if missing:
            log.info(
                "running index %s: %d running session(s) put by a sweep",
                self.index.bucket,
                len(missing),
            )
        for session_id in missing:
            complete = await self.index.mark(session_id) and complete
        self.swept += 1
        if complete:  # else the next sweep (a new index's: the next round) tries again
            await self.index.mark_rebuilt()
        return running


def claim_on_resume(host_id: str, log_: Sequence[Event], state: SessionState) -> list[Event]:
    """The claim ``host_id``'s resume appends with its ``run_started`` when it takes over a session.

    A resume (a parent re-opening its child, a client) of a session its log
    says is running, none of whose runs is active here, under the lease this
    host just took (none was live): its run was cut (its host died, or a
    store failure ended it). The takeover is claimed, as a scan claims it
    (``take_over_orphans``), in the same compare-and-append as the new run.
    Nothing more if this host's own scan claimed the cut run already (events may
    have landed since: a child's, a parent's request).
    """
    for event in reversed(log_):
        if isinstance(event, RunStarted):
            break
        if isinstance(event, HostClaimed):  # the cut run's latest claim
            if event.host_id == host_id:
                return []
            break
    log.warning("host %s takes over session %s", host_id, state.session_id)
    # The resume stamps its batch (SessionRuns.begin_run): the payload only.
    return [HostClaimed(host_id=host_id, previous_host_id=state.host_id)]
