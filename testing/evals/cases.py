"""An eval's cases: recorded sessions chosen by the session search, or exported ``.jsonl`` files.

A case is a root session (no parent) and the logs of its local descendants
(their tools are answered from their own recordings). Branches (an eval's,
``<case>.eval-<label>``, or any fork: ``forked_from`` in its metadata) are
never chosen by a search; name one to evaluate it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from helix_agents.branches import FORKED_FROM_KEY
from helix_agents.errors import EventDecodeError, UsageError
from helix_agents.events import Event, SessionCreated
from helix_agents.log.codec import decode_jsonl
from helix_agents.log.projections import project_state
from helix_agents.log.search import SessionQuery
from helix_agents.log.session_list import MAX_PAGE_SIZE, SessionCatalog
from helix_agents.log.store import EventStore

__all__ = ["BRANCH_MARK", "EvalCase", "cases_from_files", "cases_from_store", "is_branch"]

BRANCH_MARK = ".eval-"
"""What an eval branch's session id holds: ``<case>.eval-<label>``."""


def is_branch(session_id: str, log: Sequence[Event] = ()) -> bool:
    """The session is a branch (an eval's, or any fork), not a recording to evaluate."""
    created = log[0] if log else None
    forked = isinstance(created, SessionCreated) and FORKED_FROM_KEY in created.metadata
    return BRANCH_MARK in session_id or forked


@dataclass
class EvalCase:
    """One recorded session to re-run: its id, and the logs of its tree (the root's first)."""

    session_id: str
    logs: dict[str, list[Event]] = field(default_factory=dict)
    source: str = ""
    """Where it came from: the store's URL or the file's path."""
    in_store: bool = False
    """Its recording is in the store the eval writes to (its branch is then a fork of it)."""

    @property
    def events(self) -> list[Event]:
        """The root session's recorded log."""
        return self.logs[self.session_id]

    @property
    def created(self) -> SessionCreated:
        """The recorded ``session_created``: the case's agent, input, state and metadata."""
        first = self.events[0]
        assert isinstance(first, SessionCreated)
        return first


async def _tree(store: EventStore, session_id: str) -> dict[str, list[Event]]:
    logs: dict[str, list[Event]] = {}
    queue = [session_id]
    while queue:
        current = queue.pop(0)
        if current in logs:
            continue
        log = list(await store.read(current))
        if not log:
            continue
        logs[current] = log
        queue.extend(ref for ref, sub in project_state(log).sub_sessions.items() if not sub.remote)
    return logs


async def cases_from_store(
    store: EventStore,
    *,
    query: SessionQuery | None = None,
    session_ids: Sequence[str] = (),
    status: str | None = None,
    limit: int = 1000,
    source: str = "",
) -> list[EvalCase]:
    """The root sessions of ``store`` that match (newest first), or exactly ``session_ids``.

    ``query`` is the session search (``q``, ``metadata.KEY``, time ranges);
    ``status`` keeps one status; at most ``limit`` cases.

    Raises:
        UsageError: a session named in ``session_ids`` is not in the store, or is not a root.
    """
    cases: list[EvalCase] = []
    for session_id in session_ids:
        logs = await _tree(store, session_id)
        if not logs:
            raise UsageError(f"session {session_id!r} not found in {source or 'the store'}")
        first = logs[session_id][0]
        if isinstance(first, SessionCreated) and first.parent_session_id:
            raise UsageError(f"session {session_id!r} is a child; evaluate its root")
        cases.append(EvalCase(session_id=session_id, logs=logs, source=source, in_store=True))
    if session_ids:
        return cases
    catalog = SessionCatalog(store)
    cursor: str | None = None
    while len(cases) < limit:
        page = await catalog.page(
            status=status, top_level=True, limit=MAX_PAGE_SIZE, cursor=cursor, query=query
        )
        for entry in page.sessions:
            if is_branch(entry.session_id) or len(cases) >= limit:
                continue
            logs = await _tree(store, entry.session_id)
            if logs and not is_branch(entry.session_id, logs[entry.session_id]):
                cases.append(
                    EvalCase(session_id=entry.session_id, logs=logs, source=source, in_store=True)
                )
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    return cases


def cases_from_files(paths: Iterable[str | Path]) -> list[EvalCase]:
    """A case per root session in exported ``.jsonl`` files (a child's file answers its tools).

    Raises:
        UsageError: a file cannot be read, or holds no events or no valid log.
    """
    logs: dict[str, list[Event]] = {}
    sources: dict[str, str] = {}
    for path in paths:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc
        try:
            events = decode_jsonl(data)
        except EventDecodeError as exc:
            raise UsageError(f"{path}: {exc}") from exc
        if not events or not isinstance(events[0], SessionCreated):
            raise UsageError(f"{path} holds no session log (no session_created first)")
        logs[events[0].session_id] = events
        sources[events[0].session_id] = str(path)
    cases = []
    for session_id, events in logs.items():
        first = events[0]
        assert isinstance(first, SessionCreated)
        if first.parent_session_id is None and not is_branch(session_id, events):
            tree = {
                sid: log
                for sid, log in logs.items()
                if sid == session_id or getattr(log[0], "root_session_id", None) == session_id
            }
            cases.append(EvalCase(session_id=session_id, logs=tree, source=sources[session_id]))
    return cases
