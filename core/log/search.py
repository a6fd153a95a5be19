"""Session search: the query a session list takes, what each session is searched by, the seam.

A :class:`SessionQuery` narrows the session list (``GET /sessions``,
``helix-agents sessions``) by text, metadata, agent, parenthood and time. A
store that can answer it from an index of its own implements the optional
:class:`SessionIndex` protocol; ``SessionCatalog`` then asks the store and folds
only the sessions it names. Otherwise the catalog folds every log and matches
each session's :class:`SessionDoc` itself, with the same semantics.

Text: a session's searchable text is its user and assistant messages, the
input it was created with and the output it completed with (non-string input
and output as JSON). Words are runs of letters and digits, lower-cased; a
query's words must each begin some word of the session (all of them, in any
order: ``"deploy stag"`` finds "Staging deploy done").
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

import msgspec

from helix_agents.errors import UsageError
from helix_agents.events import (
    Completed,
    Event,
    MessageAppended,
    MessageQueued,
    RunStarted,
    SessionCreated,
)
from helix_agents.messages import AssistantMessage, UserMessage

__all__ = [
    "MAX_METADATA_FILTERS",
    "MAX_METADATA_VALUE",
    "MAX_QUERY_CHARS",
    "MAX_TIME",
    "IndexedSession",
    "MemorySessionIndex",
    "SessionDoc",
    "SessionIndex",
    "SessionQuery",
    "event_text",
    "parse_time",
    "words",
]

MAX_QUERY_CHARS = 256
MAX_TIME = 1e15  # seconds either side of the epoch a numeric time bound may be
MAX_METADATA_FILTERS = 8
MAX_METADATA_KEY = 128
MAX_METADATA_VALUE = 512
MAX_TIME_CHARS = 64

_WORD = re.compile(r"[^\W_]+")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def words(text: str) -> list[str]:
    """The words of ``text``: runs of letters and digits, lower-cased, in order."""
    return _WORD.findall(text.lower())


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        return str(value)


def event_text(event: Event) -> Iterator[str]:
    """The searchable text an event adds to its session (none for most events)."""
    if isinstance(event, SessionCreated):
        for message in event.messages:
            yield message.content
        if event.input is not None:
            yield _as_text(event.input)
    elif isinstance(event, RunStarted | MessageQueued):
        for message in event.messages:
            yield message.content
    elif isinstance(event, MessageAppended):
        if isinstance(event.message, UserMessage | AssistantMessage) and event.message.content:
            yield event.message.content
    elif isinstance(event, Completed) and event.output is not None:
        yield _as_text(event.output)


_TEXTUAL: frozenset[type[Event]] = frozenset(
    (SessionCreated, RunStarted, MessageQueued, MessageAppended, Completed)
)
"""The event classes :func:`event_text` finds text in."""


def parse_time(name: str, raw: str) -> float:
    """A time bound given as epoch seconds or ISO 8601 (naive: UTC); UsageError otherwise."""
    shown = raw if len(raw) <= 40 else f"{raw[:40]}..."
    problem = (
        f"{name} must be seconds since the epoch or an ISO 8601 time "
        f"(e.g. 2026-01-31T12:00:00Z), not {shown!r}"
    )
    if len(raw) > MAX_TIME_CHARS or not raw.isascii():
        raise UsageError(problem)
    if _NUMBER.fullmatch(raw):
        value = float(raw)
        if not -MAX_TIME <= value <= MAX_TIME:
            raise UsageError(
                f"{name} is out of range (at most {MAX_TIME:.0e} seconds from the epoch)"
            )
        return value
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise UsageError(problem) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


class SessionQuery(msgspec.Struct, frozen=True, kw_only=True):
    """What a session must match to be listed (every field optional, combined with AND).

    Build it with :meth:`build`, which checks the bounds. ``terms`` are query
    words (each must begin a word of the session's text); ``metadata`` pairs
    must each equal the session's metadata; ``top_level`` keeps only sessions
    without a parent. ``*_after`` bounds are inclusive, ``*_before`` exclusive
    (seconds since the epoch); "created" is the ``session_created`` event's
    ``ts``, "updated" the last event's.
    """

    terms: tuple[str, ...] = ()
    metadata: tuple[tuple[str, str], ...] = ()
    agent_type: str | None = None
    top_level: bool = False
    created_after: float | None = None
    created_before: float | None = None
    updated_after: float | None = None
    updated_before: float | None = None

    @classmethod
    def build(
        cls,
        *,
        text: str | None = None,
        metadata: Iterable[tuple[str, str]] = (),
        agent_type: str | None = None,
        top_level: bool = False,
        created_after: float | None = None,
        created_before: float | None = None,
        updated_after: float | None = None,
        updated_before: float | None = None,
    ) -> SessionQuery:
        """A checked query: UsageError for text, metadata or times out of bounds."""
        terms: tuple[str, ...] = ()
        if text is not None:
            if len(text) > MAX_QUERY_CHARS:
                raise UsageError(f"search text is at most {MAX_QUERY_CHARS} characters")
            # Distinct words; a word that begins another adds nothing ("rot rotate").
            found = sorted(set(words(text)), key=len, reverse=True)
            kept: list[str] = []
            for word in found:
                if not any(other.startswith(word) for other in kept):
                    kept.append(word)
            terms = tuple(sorted(kept))
        pairs = list(metadata)
        if len(pairs) > MAX_METADATA_FILTERS:
            raise UsageError(f"at most {MAX_METADATA_FILTERS} metadata filters")
        seen: set[str] = set()
        for key, value in pairs:
            if not 1 <= len(key) <= MAX_METADATA_KEY:
                raise UsageError(f"a metadata key is 1 to {MAX_METADATA_KEY} characters")
            if len(value) > MAX_METADATA_VALUE:
                raise UsageError(f"a metadata value is at most {MAX_METADATA_VALUE} characters")
            if key in seen:
                raise UsageError(f"metadata key {key[:40]!r} is given twice")
            seen.add(key)
        for name, bound in (
            ("createdAfter", created_after),
            ("createdBefore", created_before),
            ("updatedAfter", updated_after),
            ("updatedBefore", updated_before),
        ):
            if bound is not None and not math.isfinite(bound):
                raise UsageError(f"{name} must be a finite time")
        return cls(
            terms=terms,
            metadata=tuple(sorted(pairs)),
            agent_type=agent_type,
            top_level=top_level,
            created_after=created_after,
            created_before=created_before,
            updated_after=updated_after,
            updated_before=updated_before,
        )

    def matches_times(self, created_ts: float, updated_ts: float) -> bool:
        """Whether the time bounds hold for a session created and updated at these times."""
        return (
            (self.created_after is None or created_ts >= self.created_after)
            and (self.created_before is None or created_ts < self.created_before)
            and (self.updated_after is None or updated_ts >= self.updated_after)
            and (self.updated_before is None or updated_ts < self.updated_before)
        )


class IndexedSession(msgspec.Struct, frozen=True):
    """A session an index found: its id, its list key's time, and the last seq it indexed."""

    session_id: str
    created_ts: float
    last_seq: int


@runtime_checkable
class SessionIndex(Protocol):
    """An optional store capability: answer a :class:`SessionQuery` from an index."""

    async def search_sessions(
        self, query: SessionQuery, *, before: tuple[float, str] | None, limit: int
    ) -> list[IndexedSession] | None:
        """The sessions matching ``query``, newest first, at most ``limit``.

        Ordered by ``(created_ts, session_id)`` descending; only sessions whose
        key is below ``before`` (exclusive) when it is given. Status is not part
        of the query: the caller folds each session for it. None: this store
        has no index to answer from right now (the caller folds every log).
        """
        ...


class SessionDoc(msgspec.Struct, kw_only=True):
    """What a session is searched by, kept up to date event by event."""

    session_id: str
    created_ts: float
    updated_ts: float
    last_seq: int
    agent_type: str = ""
    parent_session_id: str | None = None
    metadata: dict[str, str] = {}
    words: set[str] = set()

    @classmethod
    def start(cls, first: Event) -> SessionDoc:
        """The document of a session whose first event is ``first`` (not yet applied)."""
        doc = cls(session_id=first.session_id, created_ts=first.ts, updated_ts=first.ts, last_seq=0)
        if isinstance(first, SessionCreated):
            doc.agent_type = first.agent_type
            doc.parent_session_id = first.parent_session_id
            doc.metadata = dict(first.metadata)
        return doc

    def add(self, events: Iterable[Event]) -> set[str]:
        """Take in events after ``last_seq``; return the words that are new to the document."""
        new: set[str] = set()
        last: Event | None = None
        for last in events:
            if type(last) in _TEXTUAL:  # most events (chunks) add no text: no generator
                for text in event_text(last):
                    new.update(w for w in words(text) if w not in self.words)
        if last is not None:
            self.last_seq = last.seq
            self.updated_ts = last.ts
        self.words |= new
        return new

    def matches(self, query: SessionQuery) -> bool:
        """Whether the session matches ``query``."""
        if query.agent_type is not None and self.agent_type != query.agent_type:
            return False
        if query.top_level and self.parent_session_id is not None:
            return False
        if not query.matches_times(self.created_ts, self.updated_ts):
            return False
        if any(self.metadata.get(key) != value for key, value in query.metadata):
            return False
        return all(any(w.startswith(term) for w in self.words) for term in query.terms)


class MemorySessionIndex:
    """Session documents with a sorted word list and postings: a :class:`SessionIndex` in memory.

    The memory store keeps one up to date on append; the JetStream store keeps
    one as its process's mirror of the index bucket.
    """

    def __init__(self) -> None:
        self.docs: dict[str, SessionDoc] = {}
        self._order: list[tuple[float, str]] = []  # (created_ts, session_id), ascending
        self._words: list[str] = []  # every word of some document, sorted
        self._postings: dict[str, set[str]] = {}

    def __repr__(self) -> str:
        return f"<MemorySessionIndex {len(self.docs)} sessions, {len(self._words)} words>"

    def add(self, events: list[Event]) -> None:
        """Index a session's next events (its first events start its document)."""
        if not events:
            return
        doc = self.docs.get(events[0].session_id)
        if doc is None:
            self.put(SessionDoc.start(events[0]))
            doc = self.docs[events[0].session_id]
        self._post(doc.session_id, doc.add(events))

    def put(self, doc: SessionDoc) -> None:
        """Hold ``doc`` as its session's document, in place of any before it."""
        self.drop(doc.session_id)
        self.docs[doc.session_id] = doc
        bisect.insort(self._order, (doc.created_ts, doc.session_id))
        self._post(doc.session_id, doc.words)

    def _post(self, session_id: str, new_words: Iterable[str]) -> None:
        for word in new_words:
            posting = self._postings.get(word)
            if posting is None:
                posting = self._postings[word] = set()
                bisect.insort(self._words, word)
            posting.add(session_id)

    def drop(self, session_id: str) -> None:
        """Forget a session (deleted)."""
        doc = self.docs.pop(session_id, None)
        if doc is None:
            return
        key = (doc.created_ts, doc.session_id)
        at = bisect.bisect_left(self._order, key)
        if at < len(self._order) and self._order[at] == key:
            del self._order[at]
        for word in doc.words:
            posting = self._postings.get(word)
            if posting is None:
                continue
            posting.discard(session_id)
            if not posting:
                del self._postings[word]
                at = bisect.bisect_left(self._words, word)
                if at < len(self._words) and self._words[at] == word:
                    del self._words[at]

    def _with_prefix(self, term: str) -> set[str]:
        found: set[str] = set()
        at = bisect.bisect_left(self._words, term)
        while at < len(self._words) and self._words[at].startswith(term):
            found |= self._postings[self._words[at]]
            at += 1
        return found

    def search(
        self, query: SessionQuery, *, before: tuple[float, str] | None, limit: int
    ) -> list[IndexedSession]:
        """The sessions matching ``query`` below ``before``, newest first (see SessionIndex)."""
        if query.terms:
            candidates: set[str] | None = None
            for term in query.terms:
                hits = self._with_prefix(term)
                candidates = hits if candidates is None else candidates & hits
                if not candidates:
                    return []
            keys: Iterable[tuple[float, str]] = sorted(
                ((self.docs[s].created_ts, s) for s in candidates or ()), reverse=True
            )
        else:
            end = len(self._order) if before is None else bisect.bisect_left(self._order, before)
            order = self._order
            keys = (order[at] for at in range(end - 1, -1, -1))
        found: list[IndexedSession] = []
        for key in keys:
            if before is not None and key >= before:
                continue
            doc = self.docs[key[1]]
            if doc.matches(query):
                found.append(IndexedSession(doc.session_id, doc.created_ts, doc.last_seq))
                if len(found) >= limit:
                    break
        return found
