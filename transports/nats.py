"""``NatsRemoteAgentTransport``: reach agent sessions hosted by a fleet behind NATS.

Control calls are NATS requests to the hosts' queue group (``specs/nats.md``):
``<prefix>.start.<agent type>`` and ``<prefix>.<op>.<session token>`` for
``resume``, ``message``, ``status``, ``interrupt``, ``abort``, ``submit`` and
``approve``. The stream is not relayed by a host: it is read straight from the session's log in
JetStream (any ``EventStore`` on the fleet's stream), so it survives any host.

asyncio lives here only because nats-py is asyncio-only; nats-py errors never
leave this module.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from helix_agents import EventStore
from helix_agents._aio import closing_iter
from helix_agents.errors import (
    HTTP_STATUS,
    AgentServerError,
    StoreClosedError,
    StoreError,
    TransportError,
    TransportTimeoutError,
)
from helix_agents.ids import encode_session_token
from helix_agents.log import stream_session
from helix_agents.log.streaming import open_session_stream
from helix_agents.protocol import (
    RemoteMessageRequest,
    RemoteMessageResponse,
    RemoteResumeRequest,
    RemoteStartRequest,
    RemoteStartResponse,
    RemoteStatusResponse,
    SubmitApprovalRequest,
    SubmitResponse,
    SubmitToolResultRequest,
    TransportEvent,
    checked_from_sequence,
    checked_session_id,
)
from helix_agents.retry import retrying
from helix_agents.tracing import trace_context_from_headers

from .bodies import SessionRequest

__all__ = [
    "DEFAULT_PREFIX",
    "DEFAULT_QUEUE",
    "HOSTS_BUCKET",
    "HostAnnouncement",
    "NatsRemoteAgentTransport",
    "Reply",
    "StatusRequest",
]

DEFAULT_PREFIX = "helix.rpc"
"""The first tokens of every control subject."""

DEFAULT_QUEUE = "helix-hosts"
"""The queue group the hosts share."""

HOSTS_BUCKET = "helix_hosts"
"""The JetStream KV bucket where each live host announces its agent types (key: host id)."""

_AGENT_TYPE = re.compile(r"[A-Za-z0-9_\-]{1,64}")

T = TypeVar("T")


class Reply(msgspec.Struct, frozen=True, kw_only=True):
    """A host's answer: ``result`` on success, else ``error`` and ``code``."""

    result: Any = None
    error: str | None = None
    code: str | None = None
    holder: str | None = None
    """Host to host only: the session's lease is held by this host; ask it."""


class StatusRequest(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The body of ``status``."""

    session_id: str


class HostAnnouncement(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A host's entry in :data:`HOSTS_BUCKET`: the agent types it starts."""

    agent_types: list[str]


_encoder = msgspec.json.Encoder()
_reply_decoder = msgspec.json.Decoder(Reply)
_announcement_decoder = msgspec.json.Decoder(HostAnnouncement)


def _unanswered(exc: Exception) -> bool:
    """No host answered (none subscribed, or none in time): worth another try."""
    return isinstance(exc.__cause__, nats.errors.NoRespondersError | nats.errors.TimeoutError)


class NatsRemoteAgentTransport:
    """A :class:`~helix_agents.RemoteAgentTransport` over NATS and a shared event store.

    Args:
        nc: a connected nats-py client.
        store: the fleet's event store (a JetStream store on the same stream the
            hosts write); streams are read from it.
        prefix: the subjects' first tokens (the hosts must use the same).
        timeout: seconds to wait for a host's reply.
        max_retries: retries of a request that timed out or found no host
            (every control call is idempotent), with ``retry_base_delay * 2**n``.
    """

    def __init__(
        self,
        nc: NatsClient,
        store: EventStore,
        *,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = 5.0,
        max_retries: int = 3,
        retry_base_delay: float = 0.2,
    ) -> None:
        self.nc = nc
        self.store = store
        self.prefix = prefix
        self.timeout = timeout
        self.max_retries = max_retries
        self.retry_base_delay = retry_base_delay

    def _session_subject(self, op: str, session_id: str) -> str:
        checked_session_id(session_id)
        return f"{self.prefix}.{op}.{encode_session_token(session_id)}"

    async def _request(
        self,
        subject: str,
        body: bytes,
        *,
        missing: str,
        unknown_agent: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        async def attempt() -> Msg:
            try:
                return await self.nc.request(subject, body, timeout=self.timeout, headers=headers)
            except nats.errors.NoRespondersError as exc:
                if unknown_agent is not None and not await self._announced(unknown_agent):
                    # No live host announces this type: the protocol's NOT_FOUND now,
                    # without the retries that wait for a host restarting.
                    raise AgentServerError(
                        "NOT_FOUND", f"agent type not found: {unknown_agent}"
                    ) from None
                if unknown_agent is not None:
                    # No host subscribes to this agent type's start subject: after
                    # the retries (hosts may be restarting) that is the protocol's
                    # NOT_FOUND, as an unknown type is for one server.
                    raise AgentServerError(
                        "NOT_FOUND", f"agent type not found: {unknown_agent}"
                    ) from exc
                raise TransportError(f"{subject}: {missing}") from exc
            except nats.errors.TimeoutError as exc:
                raise TransportTimeoutError(subject, self.timeout) from exc
            except nats.errors.MaxPayloadError:
                # Over what the NATS server takes in one message: the caller's to
                # make smaller (a gateway answers 413), not a host out of reach.
                raise AgentServerError(
                    "PAYLOAD_TOO_LARGE",
                    f"request of {len(body)} bytes over the NATS message limit "
                    f"({self.nc.max_payload} bytes)",
                ) from None
            except nats.errors.Error as exc:
                raise TransportError(f"{subject}: {exc}") from exc

        msg = await retrying(
            attempt,
            retries=self.max_retries,
            base_delay=self.retry_base_delay,
            retry_if=_unanswered,
        )
        try:
            reply = _reply_decoder.decode(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise TransportError(f"{subject}: unreadable reply: {exc}") from exc
        if reply.error is not None:
            code = reply.code if reply.code in HTTP_STATUS else "INTERNAL_ERROR"
            raise AgentServerError(code, reply.error)  # type: ignore[arg-type]
        return reply.result

    async def list_agent_types(self) -> list[str]:
        """The agent types the fleet's live hosts announce, sorted (``/health``'s ``agents``).

        Read from :data:`HOSTS_BUCKET` (a host's entry lapses soon after it
        dies); empty when no host ever announced. Raises :class:`TransportError`
        when the bucket cannot be read.
        """
        if not self.nc.is_connected:  # reconnecting: say so now, not after the timeout
            raise TransportError("NATS is out of reach (reconnecting)")
        js = self.nc.jetstream(timeout=self.timeout)
        try:
            try:
                kv = await js.key_value(HOSTS_BUCKET)
            except nats.js.errors.BucketNotFoundError:
                return []
            info = await self.nc.request(
                f"$JS.API.STREAM.INFO.KV_{HOSTS_BUCKET}",
                _encoder.encode({"subjects_filter": f"$KV.{HOSTS_BUCKET}.>"}),
                timeout=self.timeout,
            )
            subjects = msgspec.json.decode(info.data).get("state", {}).get("subjects") or {}
            types: set[str] = set()
            for subject in subjects:
                try:
                    entry = await kv.get(subject.removeprefix(f"$KV.{HOSTS_BUCKET}."))
                except nats.js.errors.KeyNotFoundError:
                    continue  # the host left (deleted) or its entry lapsed
                try:
                    types.update(_announcement_decoder.decode(entry.value or b"").agent_types)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue  # not an announcement: ignored
        except (nats.errors.Error, OSError, msgspec.DecodeError) as exc:
            raise TransportError(f"cannot read the fleet's hosts: {exc!r}") from exc
        return sorted(types)

    async def _announced(self, agent_type: str) -> bool:
        """Whether a live host announces ``agent_type`` (True when that cannot be known)."""
        try:
            return agent_type in await self.list_agent_types()
        except TransportError:
            return True  # unknown: the retries decide, as before discovery

    async def start(self, request: RemoteStartRequest) -> RemoteStartResponse:
        """Start a session on whichever host serves its agent type (idempotent)."""
        if _AGENT_TYPE.fullmatch(request.agent_type) is None:
            raise AgentServerError("NOT_FOUND", f"agent type not found: {request.agent_type}")
        self._session_subject("start", request.session_id)  # validates the id first
        result = await self._request(
            f"{self.prefix}.start.{request.agent_type}",
            _encoder.encode(request),
            missing=f"no agent host serves agent type {request.agent_type!r}",
            unknown_agent=request.agent_type,
            headers=trace_context_from_headers(request.trace_context),  # specs/otel.md
        )
        return msgspec.convert(result, RemoteStartResponse)

    async def resume(self, request: RemoteResumeRequest) -> RemoteStartResponse:
        """Resume a session on any host."""
        subject = self._session_subject("resume", request.session_id)
        result = await self._request(subject, _encoder.encode(request), missing=_NO_HOST)
        return msgspec.convert(result, RemoteStartResponse)

    async def send_message(self, request: RemoteMessageRequest) -> RemoteMessageResponse:
        """Send a follow-up message to a session on any host.

        A request without ``message_id`` gets a fresh one here, so the retries
        of one call can never deliver the message twice.
        """
        if request.message_id is None:
            request = msgspec.structs.replace(request, message_id=f"msg-{uuid.uuid4().hex}")
        subject = self._session_subject("message", request.session_id)
        result = await self._request(subject, _encoder.encode(request), missing=_NO_HOST)
        return msgspec.convert(result, RemoteMessageResponse)

    async def stream(
        self, session_id: str, from_sequence: int = 0
    ) -> AsyncIterator[TransportEvent]:
        """The session's stream, read from its log in the shared store."""
        checked_session_id(session_id)
        checked_from_sequence(from_sequence)
        opened = stream_session(self.store, session_id, from_sequence, must_exist=True)
        async with closing_iter(self._relayed(session_id, opened)) as events:
            async for event in events:
                yield event

    async def open_stream(
        self, session_id: str, from_sequence: int = 0
    ) -> AsyncIterator[TransportEvent]:
        """The session's stream, opened: its log read once, ``NOT_FOUND`` now if it has none."""
        checked_session_id(session_id)
        checked_from_sequence(from_sequence)
        try:
            events = await open_session_stream(self.store, session_id, from_sequence)
        except StoreClosedError:
            raise
        except StoreError as exc:
            raise TransportError(f"stream of {session_id!r} broke: {exc}") from exc
        return self._relayed(session_id, events)

    async def _relayed(
        self, session_id: str, opened: AsyncIterator[TransportEvent]
    ) -> AsyncIterator[TransportEvent]:
        """``opened``, a store failure under it told as a dropped stream; closes it."""
        async with closing_iter(opened) as events:
            try:
                async for event in events:
                    yield event
            except StoreClosedError:
                raise
            except StoreError as exc:
                # The store lost its server for now (a NATS node died, a stream leader
                # is being elected): a dropped stream, which the caller re-opens from
                # the last sequence it holds, as after a dropped HTTP connection.
                raise TransportError(f"stream of {session_id!r} broke: {exc}") from exc

    async def get_status(self, session_id: str) -> RemoteStatusResponse:
        """The session's status, as a host reads it from the log."""
        subject = self._session_subject("status", session_id)
        body = _encoder.encode(StatusRequest(session_id=session_id))
        return msgspec.convert(
            await self._request(subject, body, missing=_NO_HOST), RemoteStatusResponse
        )

    async def interrupt(self, session_id: str, reason: str | None = None) -> None:
        """Interrupt the session, wherever it runs."""
        subject = self._session_subject("interrupt", session_id)
        body = _encoder.encode(SessionRequest(session_id=session_id, reason=reason))
        await self._request(subject, body, missing=_NO_HOST)

    async def abort(self, session_id: str, reason: str | None = None) -> None:
        """Abort the session, wherever it runs."""
        subject = self._session_subject("abort", session_id)
        body = _encoder.encode(SessionRequest(session_id=session_id, reason=reason))
        await self._request(subject, body, missing=_NO_HOST)

    async def submit_tool_result(
        self, session_id: str, tool_call_id: str, result: Any = None, error: str | None = None
    ) -> SubmitResponse:
        """Answer a client tool call (routed to its owner by the host)."""
        subject = self._session_subject("submit", session_id)
        body = _encoder.encode(
            SubmitToolResultRequest(
                session_id=session_id, tool_call_id=tool_call_id, result=result, error=error
            )
        )
        reply = await self._request(subject, body, missing=_NO_HOST)
        return msgspec.convert(reply, SubmitResponse)

    async def submit_approval(
        self,
        session_id: str,
        tool_call_id: str,
        approved: bool,
        reason: str | None = None,
        *,
        decided_by: str | None = None,
    ) -> SubmitResponse:
        """Approve or deny a gated call (routed to its owner by the host)."""
        subject = self._session_subject("approve", session_id)
        body = _encoder.encode(
            SubmitApprovalRequest(
                session_id=session_id,
                tool_call_id=tool_call_id,
                approved=approved,
                reason=reason,
                decided_by=decided_by,
            )
        )
        reply = await self._request(subject, body, missing=_NO_HOST)
        return msgspec.convert(reply, SubmitResponse)


_NO_HOST = "no agent host is listening"
