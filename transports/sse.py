"""An incremental parser for ``text/event-stream`` (server-sent events).

:class:`SSEParser` follows the WHATWG HTML "event stream interpretation"
rules: bytes arrive in arbitrary chunks (a line, a multi-byte character or a
CRLF pair may be cut anywhere), lines end in CRLF, LF or CR, ``data:`` lines
join with ``"\\n"``, a blank line dispatches, comments (``:heartbeat``) and
unknown fields are ignored, and a leading byte-order mark is dropped. It does
no I/O, so it serves every SSE client in this package.
"""

from __future__ import annotations

import codecs
import re

import msgspec

__all__ = ["SSEMessage", "SSEParser"]

_LINE_END = re.compile(r"\r\n|\r|\n")


class SSEMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One dispatched server-sent event.

    Attributes:
        data: The ``data:`` lines of the event, joined with ``"\\n"``.
        event: The ``event:`` field, or ``"message"`` when the event named none.
        id: The ``id:`` field of this event's block, or ``None`` when it had none
            (see :attr:`SSEParser.last_event_id` for the value that persists).
    """

    data: str
    event: str = "message"
    id: str | None = None


class SSEParser:
    """Turns the bytes of an event stream, in any chunking, into :class:`SSEMessage`\\ s.

    Feeding a stream whole or cut at arbitrary byte offsets yields the same
    messages. An event still incomplete when the stream ends is never
    dispatched (the WHATWG rule), so there is nothing to flush.

    Attributes:
        last_event_id: The last ``id:`` value received (``""`` after a bare
            ``id:``), kept across events; what a reconnecting client sends as
            ``Last-Event-ID``. ``None`` until an id arrives.
        retry: The last valid ``retry:`` value in milliseconds, or ``None``.
    """

    def __init__(self) -> None:
        # utf-8-sig drops one leading BOM even when it is split across chunks;
        # invalid bytes become U+FFFD, as the standard asks.
        self._decoder = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
        self._partial: list[str] = []  # text of the current line seen so far
        self._after_cr = False  # the last line ended in CR: skip an LF that follows
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self.last_event_id: str | None = None
        self.retry: int | None = None

    def feed(self, data: bytes) -> list[SSEMessage]:
        """Parse the next bytes of the stream.

        Args:
            data: Any number of bytes, cut anywhere.

        Returns:
            The messages whose terminating blank line arrived with ``data``, in order.
        """
        text = self._decoder.decode(data)
        if not text:
            return []
        if self._after_cr and text[0] == "\n":
            text = text[1:]
        self._after_cr = False
        messages: list[SSEMessage] = []
        start = 0
        for match in _LINE_END.finditer(text):
            self._partial.append(text[start : match.start()])
            line = "".join(self._partial)
            self._partial.clear()
            start = match.end()
            message = self._line(line)
            if message is not None:
                messages.append(message)
        if start < len(text):
            self._partial.append(text[start:])
        elif text.endswith("\r"):
            self._after_cr = True
        return messages

    def _line(self, line: str) -> SSEMessage | None:
        if not line:
            return self._dispatch()
        if line[0] == ":":
            return None  # a comment: heartbeats and padding
        name, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
                self.last_event_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self.retry = int(value)
        # Any other field is ignored, as the standard asks.
        return None

    def _dispatch(self) -> SSEMessage | None:
        data, event, id_ = self._data, self._event, self._id
        self._data, self._event, self._id = [], "", None
        if not data:
            return None
        return SSEMessage(data="\n".join(data), event=event or "message", id=id_)
