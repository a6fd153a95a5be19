"""The JetStream store's wire format and its requests to the stream.

Names (the stream, a session's subject), the headers every stored batch
carries (``Helix-First-Seq``, ``Helix-Last-Seq``, ``Helix-Chain``) and how a
stored message is decoded back into a batch of events; and
:class:`StreamAccess`, the store's plain requests to its stream (a subject's
last or next message, a raw API call) with nats-py errors translated; and
:class:`LostConnection`, when the store's connection was lost (an outage).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import anyio
import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.js import api as js_api

from helix_agents.errors import (
    DamagedLogError,
    StoreClosedError,
    StoreError,
    StoreUnavailableError,
    UsageError,
)
from helix_agents.events import Event
from helix_agents.ids import encode_session_token

__all__ = [
    "API",
    "DEFAULT_STREAM",
    "HEADER_CHAIN",
    "HEADER_FIRST_SEQ",
    "HEADER_LAST_SEQ",
    "LostConnection",
    "Position",
    "StreamAccess",
    "Suspect",
    "chain_header",
    "decode_batch",
    "helix_seqs",
    "nats_servers",
    "validate_stream_name",
]

DEFAULT_STREAM = "HELIX_EVENTS"
"""The stream a store uses when none is named."""

HEADER_FIRST_SEQ = "Helix-First-Seq"
HEADER_LAST_SEQ = "Helix-Last-Seq"
HEADER_CHAIN = "Helix-Chain"
API = "$JS.API"
OUT_OF_REACH: tuple[type[BaseException], ...] = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.NoServersError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.FlushTimeoutError,
    nats.js.errors.ServiceUnavailableError,
    OSError,
)
"""The errors that mean NATS (or JetStream) is out of reach, not that a request was wrong."""
_STREAM_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")

Position = tuple[int, int, int | None]  # stream seq, helix seq, chain of a session's last message
Suspect = tuple[int, str, int]  # helix seq, what looked wrong, the log's last stream seq

_batch_decoder = msgspec.json.Decoder(list[Event])


def nats_servers(url: str) -> list[str]:
    """The servers a NATS URL names: ``nats://a:1,nats://b:2`` lists several (a cluster).

    A single URL is a list of one. Blank items are a :class:`UsageError`.
    """
    servers = [server.strip() for server in url.split(",")]
    if not all(servers):
        raise UsageError(f"bad NATS URL {url!r}: a blank server in the comma-separated list")
    return servers


def validate_stream_name(stream: str) -> str:
    """Return ``stream`` if it is a usable stream name (``A-Za-z0-9_-``, 1-64), else UsageError."""
    if not isinstance(stream, str) or _STREAM_NAME.fullmatch(stream) is None:
        raise UsageError(f"stream name must be 1-64 characters of A-Za-z0-9_-, not {stream!r}")
    return stream


def helix_seqs(session_id: str, msg: js_api.RawStreamMsg, near: int) -> tuple[int, int]:
    """The (first, last) helix seqs a stored batch holds; ``near``: the seq to blame if none."""
    headers = msg.headers or {}
    try:
        first, last = int(headers[HEADER_FIRST_SEQ]), int(headers[HEADER_LAST_SEQ])
    except (KeyError, ValueError):
        raise DamagedLogError(
            session_id, near, f"stream message {msg.seq} is not a helix batch"
        ) from None
    if not 1 <= first <= last:
        raise DamagedLogError(session_id, near, f"stream message {msg.seq}: bad helix seqs")
    return first, last


def chain_header(session_id: str, msg: js_api.RawStreamMsg, first: int) -> int | None:
    """The message's chain header (None: written before chains existed)."""
    text = (msg.headers or {}).get(HEADER_CHAIN)
    if text is None:
        return None
    try:
        return int(text, 16)
    except ValueError:
        raise DamagedLogError(session_id, first, "checksum mismatch") from None


def decode_batch(session_id: str, msg: js_api.RawStreamMsg, first: int, last: int) -> list[Event]:
    """The events of a stored batch, which must be exactly the seqs its headers name."""
    try:
        events: list[Event] = _batch_decoder.decode(msg.data or b"")
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
        raise DamagedLogError(session_id, first, f"undecodable batch: {exc}") from exc
    if [event.seq for event in events] != list(range(first, last + 1)) or any(
        event.session_id != session_id for event in events
    ):
        raise DamagedLogError(session_id, first, "the batch does not hold its headers' events")
    return events


class StreamAccess:
    """The store's plain requests to its stream, and the translation of nats-py's errors."""

    def __init__(
        self, nc: NatsClient, stream: str, timeout: float, is_closed: Callable[[], bool]
    ) -> None:
        """Requests on ``nc`` to ``stream``; ``is_closed`` tells whether the store is closing."""
        self.nc = nc
        self.stream = stream
        self.subject_prefix = f"helix.{stream}"
        self.timeout = timeout
        self.js = nc.jetstream(timeout=timeout)
        self.jsm = nc.jsm(timeout=timeout)
        self._is_closed = is_closed

    async def ensure_stream(self, replicas: int) -> tuple[bool, bool]:
        """Create the stream if missing (else check it fits).

        Returns whether it answers batched direct gets, and whether it is
        replicated (a direct get may then come from a lagging follower).

        Reads fetch a session's batches in one request (``allow_direct``). A
        replicated stream made before it had that (an earlier version of this
        store) is given it (a stream update; if that fails, its reads stay one
        get per message).
        """
        subjects = f"{self.subject_prefix}.*"
        jsm = self.jsm
        try:
            info = await jsm.stream_info(self.stream)
        except nats.js.errors.NotFoundError:
            try:
                await jsm.add_stream(
                    name=self.stream,
                    subjects=[subjects],
                    storage=js_api.StorageType.FILE,
                    num_replicas=replicas,
                    duplicate_window=120.0,
                    allow_direct=True,
                )
            except nats.js.errors.BadRequestError:
                # Another process may have created it meanwhile: use it if it fits.
                info = await jsm.stream_info(self.stream)
            except nats.js.errors.APIError as exc:
                raise StoreError(
                    f"cannot create stream {self.stream!r} with {replicas} replica(s): "
                    f"{exc.description or exc!r}"
                ) from exc
            else:
                return True, replicas > 1
        if subjects not in (info.config.subjects or []):
            raise StoreError(
                f"stream {self.stream!r} exists but does not capture {subjects!r} "
                f"(it captures {info.config.subjects})"
            )
        replicated = (info.config.num_replicas or 1) > 1
        if not info.config.allow_direct:
            try:
                info = await jsm.update_stream(replace(info.config, allow_direct=True))
            except nats.js.errors.APIError:
                return False, replicated
        return bool(info.config.allow_direct), replicated

    @contextlib.contextmanager
    def translate(self) -> Iterator[None]:
        """Turn nats-py errors into ours (StoreClosedError once the store is closing)."""
        try:
            yield
        except (nats.errors.Error, OSError) as exc:
            if self._is_closed():
                raise StoreClosedError() from exc
            if isinstance(exc, OUT_OF_REACH):
                raise StoreUnavailableError(
                    f"jetstream store {self.stream!r}: NATS out of reach: {exc!r}"
                ) from exc
            raise StoreError(f"jetstream store {self.stream!r}: {exc!r}") from exc

    def subject(self, session_id: str) -> str:
        """The subject holding the session's log."""
        return f"{self.subject_prefix}.{encode_session_token(session_id)}"

    async def last_msg(self, subject: str) -> js_api.RawStreamMsg | None:
        """The subject's last message, if any."""
        try:
            return await self.jsm.get_last_msg(self.stream, subject)
        except nats.js.errors.NotFoundError:
            return None

    async def next_msg(self, subject: str, stream_seq: int) -> js_api.RawStreamMsg | None:
        """The subject's first message at or after ``stream_seq``, if any."""
        try:
            return await self.jsm.get_msg(
                self.stream, seq=max(stream_seq, 1), subject=subject, next=True
            )
        except nats.js.errors.NotFoundError:
            return None

    async def api(self, subject: str, request: dict[str, Any]) -> dict[str, Any]:
        """One JetStream API request (``$JS.API.<subject>``); its error is a StoreError."""
        reply = await self.nc.request(
            f"{API}.{subject}", json.dumps(request).encode(), timeout=self.timeout
        )
        response: dict[str, Any] = json.loads(reply.data)
        error = response.get("error")
        if error is not None:
            raise StoreError(f"jetstream store {self.stream!r}: {subject}: {error}")
        return response


class LostConnection:
    """When the store's connection to NATS was lost, until it is back (the client's callbacks)."""

    def __init__(self) -> None:
        """Connected, as far as anyone said."""
        self.since: float | None = None

    async def disconnected(self) -> None:
        """The connection was lost (nats-py's ``disconnected_cb``): note when, once."""
        if self.since is None:
            self.since = anyio.current_time()

    async def reconnected(self) -> None:
        """The connection is back (nats-py's ``reconnected_cb``)."""
        self.since = None
