"""The JSON encoding of events: one encoder and decoder, built once and reused."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from helix_agents.errors import EventDecodeError
from helix_agents.events import Event

__all__ = ["decode_event", "decode_events", "decode_jsonl", "encode_event", "encode_jsonl"]

# msgspec reports bad UTF-8 inside strings as UnicodeDecodeError, not DecodeError.
_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Event)
_array_decoder = msgspec.json.Decoder(list[Event])


def _stamped(event: Event) -> Event:
    """``event`` if it carries an envelope; builders leave it at defaults, stored events never do.

    The envelope fields have defaults so that code building an event gives
    only its payload (the writer stamps it), which would let a decoded event
    without ``seq`` or ``sessionId`` pass as seq 0 of session "": refuse it
    here, as a missing required field. (``ts`` is informational only.)
    """
    if event.seq < 1:
        field = "seq" if event.seq == 0 else "seq` >= 1"
        raise msgspec.ValidationError(f"Object missing required field `{field}`")
    if not event.session_id:
        raise msgspec.ValidationError("Object missing required field `sessionId`")
    return event


def encode_event(event: Event) -> bytes:
    """Encode one event as compact JSON (the storage and wire format)."""
    return _encoder.encode(event)


def decode_event(data: bytes | str) -> Event:
    """Decode one event; raise :class:`EventDecodeError` if ``data`` is not a known event."""
    try:
        event: Event = _stamped(_decoder.decode(data))
    except _DECODE_ERRORS as exc:
        raise EventDecodeError(str(exc)) from exc
    return event


def decode_events(items: Sequence[bytes]) -> list[Event]:
    """Decode many encoded events at once (one decoder pass over a joined array)."""
    if not items:
        return []
    try:
        events: list[Event] = _array_decoder.decode(b"[" + b",".join(items) + b"]")
    except _DECODE_ERRORS:
        events = []
    if len(events) == len(items) and all(event.seq >= 1 and event.session_id for event in events):
        return events
    # The joined decode failed, or an item held more than one value (a
    # corrupt row such as two events joined by a comma): decode one by one,
    # so the error names the offending item.
    for index, item in enumerate(items, start=1):
        try:
            _stamped(_decoder.decode(item))
        except _DECODE_ERRORS as exc:
            raise EventDecodeError(f"item {index}: {exc}") from exc
    raise EventDecodeError("items do not decode to one event each")  # pragma: no cover


def encode_jsonl(events: Iterable[Event]) -> bytes:
    """Encode events as JSON Lines: one event per line, each line ending in a newline."""
    return b"".join(_encoder.encode(event) + b"\n" for event in events)


def decode_jsonl(data: bytes) -> list[Event]:
    """Decode JSON Lines; blank lines are skipped, a bad line raises with its line number."""
    events: list[Event] = []
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            events.append(_stamped(_decoder.decode(line)))
        except _DECODE_ERRORS as exc:
            raise EventDecodeError(str(exc), line=number) from exc
    return events
