"""``check_store``: read every session of a store and report what is damaged (an fsck)."""

from __future__ import annotations

from dataclasses import dataclass, field

from helix_agents.errors import CorruptLogError, DamagedLogError, StoreClosedError, StoreError
from helix_agents.ids import is_schedule_log
from helix_agents.log.projections import project_state
from helix_agents.log.store import EventStore

__all__ = ["StoreCheck", "check_store"]


@dataclass
class StoreCheck:
    """What :func:`check_store` found."""

    sessions: int = 0
    """How many sessions were checked."""
    damaged: dict[str, str] = field(default_factory=dict)
    """Each damaged session and one line saying what is wrong with it."""
    problems: list[str] = field(default_factory=list)
    """Damage to the store as a whole (lost commits, a damaged file), one line each."""

    @property
    def ok(self) -> bool:
        """True when nothing is damaged."""
        return not self.damaged and not self.problems


async def check_store(store: EventStore) -> StoreCheck:
    """Read every session's log and report gaps, chain breaks, undecodable and invalid logs.

    Each log is read whole (so every checksum is verified) and folded (so a
    log whose events do not form a session is found too). A store with
    checks of its own (``check_storage``: SQLite's lost commits, its file's
    ``quick_check``, events of unlisted sessions) adds them. Changes nothing.
    """
    result = StoreCheck()
    check_storage = getattr(store, "check_storage", None)
    if check_storage is not None:
        for session_id, problem in await check_storage():
            if session_id is None:
                result.problems.append(problem)
            else:
                result.damaged.setdefault(session_id, problem)
    sessions = sorted(set(await store.list_sessions()) | set(result.damaged))
    result.sessions = len(sessions)
    for session_id in sessions:
        if session_id in result.damaged:
            continue
        try:
            events = await store.read(session_id)
        except DamagedLogError as exc:
            result.damaged[session_id] = str(exc)
            continue
        except StoreClosedError:
            raise
        except StoreError as exc:
            result.damaged[session_id] = f"session {session_id!r} cannot be read: {exc}"
            continue
        if not events:
            result.damaged[session_id] = f"session {session_id!r} is listed but holds no events"
            continue
        if is_schedule_log(session_id):
            continue  # the schedules' log: read whole (its checksums), but no session to fold
        try:
            project_state(events)
        except CorruptLogError as exc:
            result.damaged[session_id] = f"session {session_id!r} is not a valid log: {exc}"
    return result
