"""Chained checksums: what lets a store notice that a stored log was damaged.

Each stored record (a SQLite row, a JetStream message) carries
``chain(previous, data)``: the CRC-32 of its bytes seeded with its
predecessor's chain (0 for the first record, or after records written before
chains existed). A record's chain is therefore the CRC-32 of the session's
whole log up to it, so a flipped byte, a record replaced by another, or a
record moved from elsewhere breaks the chain at that record. A missing record
shows up as a gap in the seqs; a missing *end* of the log does not (nothing
follows it): stores detect that with a high-water mark kept elsewhere.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from helix_agents.errors import DamagedLogError, EventDecodeError
from helix_agents.events import Event
from helix_agents.log.codec import decode_event, decode_events

__all__ = ["chain_of", "verified_events"]


def chain_of(previous: int | None, data: bytes) -> int:
    """The chain value of a record holding ``data`` after a record chained ``previous``."""
    return zlib.crc32(data, previous or 0)


def verified_events(
    session_id: str,
    first_seq: int,
    previous: int | None,
    records: Sequence[tuple[int, bytes, int | None]],
) -> list[Event]:
    """Decode ``(seq, data, chain)`` records that must hold seqs ``first_seq, first_seq + 1...``.

    ``previous`` is the chain of the record before ``first_seq`` (None when
    unknown or unchained). A record whose chain is None was written before
    chains existed: it is checked for its seq and decodability only, and the
    chain starts afresh after it. Raises :class:`DamagedLogError` at the first
    gap, chain break, undecodable record, or record of another seq or session.
    """
    expected = first_seq
    for seq, data, chain in records:
        if seq != expected:
            raise DamagedLogError(session_id, expected, "gap: the event is missing")
        if chain is not None and chain != chain_of(previous, data):
            raise DamagedLogError(session_id, seq, "checksum mismatch")
        previous = chain
        expected += 1
    try:
        events = decode_events([record[1] for record in records])
    except EventDecodeError:
        for seq, data, _ in records:
            try:
                decode_event(data)
            except EventDecodeError as exc:
                raise DamagedLogError(session_id, seq, f"undecodable event: {exc}") from exc
        raise  # pragma: no cover - decode_events failed, so one record does not decode
    for event, (seq, _, _) in zip(events, records, strict=True):
        if event.seq != seq or event.session_id != session_id:
            raise DamagedLogError(
                session_id, seq, f"the record holds seq {event.seq} of {event.session_id!r}"
            )
    return events
