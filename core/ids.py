"""Session ids: the safe character set, validation, and fresh run ids.

Session ids become log keys, URL query values and (encoded) NATS subject tokens,
so they are restricted to a small set that is safe everywhere.
"""

from __future__ import annotations

import re
import uuid
from typing import NewType

from helix_agents.errors import InvalidSessionIdError

__all__ = [
    "MAX_SESSION_ID_LENGTH",
    "SCHEDULES_LOG",
    "SESSION_ID_ALPHABET",
    "SessionId",
    "decode_session_token",
    "encode_session_token",
    "is_schedule_log",
    "new_run_id",
    "validate_session_id",
]

MAX_SESSION_ID_LENGTH = 256
"""Longest accepted session id, in characters."""

SESSION_ID_ALPHABET = "A-Z a-z 0-9 _ - . :"
"""The characters a session id may contain (documented in specs/events.md)."""

SCHEDULES_LOG = "cron:schedules"
"""The store's one log of schedules (``helix_agents.schedules``): not a session."""

_RESERVED = "cron:"


def is_schedule_log(session_id: str) -> bool:
    """Whether ``session_id`` names a log kept for schedules (ids beginning ``cron:``).

    Such a log is no session: session lists, recovery and checks pass it by,
    and no session may be started under such an id.
    """
    return session_id.startswith(_RESERVED)


_SAFE = re.compile(r"[A-Za-z0-9_.:\-]+")

SessionId = NewType("SessionId", str)
"""A session id that :func:`validate_session_id` has checked."""


def validate_session_id(session_id: object) -> SessionId:
    """Return ``session_id`` if it is a valid id, else raise :class:`InvalidSessionIdError`."""
    if not isinstance(session_id, str):
        raise InvalidSessionIdError(repr(session_id), "must be a string")
    if not session_id:
        raise InvalidSessionIdError(session_id, "must not be empty")
    if len(session_id) > MAX_SESSION_ID_LENGTH:
        raise InvalidSessionIdError(
            session_id, f"is {len(session_id)} characters, over {MAX_SESSION_ID_LENGTH}"
        )
    if _SAFE.fullmatch(session_id) is None:
        raise InvalidSessionIdError(
            session_id, f"may only contain the characters {SESSION_ID_ALPHABET}"
        )
    return SessionId(session_id)


def new_run_id() -> str:
    """Return a fresh, unique run id."""
    return f"run-{uuid.uuid4().hex}"


def encode_session_token(session_id: str) -> str:
    """The subject token of a session id: ``_`` becomes ``__`` and ``.`` becomes ``_d``.

    Session ids hold only ``A-Za-z0-9_-.:``, so after this the token holds no
    ``.`` (NATS's token separator), and never ``*``, ``>`` or whitespace; the
    mapping is injective, and :func:`decode_session_token` inverts it.
    """
    return session_id.replace("_", "__").replace(".", "_d")


def decode_session_token(token: str) -> str:
    """Invert :func:`encode_session_token`; raise ``ValueError`` for a token it cannot make."""
    out: list[str] = []
    index = 0
    while index < len(token):
        char = token[index]
        if char == "_":
            escaped = token[index + 1 : index + 2]
            if escaped == "_":
                out.append("_")
            elif escaped == "d":
                out.append(".")
            else:
                raise ValueError(f"bad escape in subject token {token!r}")
            index += 2
        else:
            out.append(char)
            index += 1
    return "".join(out)
