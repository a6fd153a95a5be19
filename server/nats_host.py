"""``NatsAgentHost``: serve an ``AgentServer`` on NATS subjects, in a queue group, with failover.

N hosts share the work: each subscribes to ``<prefix>.start.<agent type>``
for the types it runs and to ``<prefix>.<op>.*`` for the per-session
operations, all in one queue group, so NATS hands each request to one host.
Any host can answer for any session, because the session's state is its log
in the shared store (``specs/nats.md``). Every request is handled in the
host's own task group, so a slow one never holds up the rest.

Failover: a host holds a lease (JetStream KV, with a TTL) on every session it
runs, renewed while it runs. Each host looks for sessions that are running
but that no live lease covers (their host died); it claims one by
compare-and-append of ``host_claimed`` (so two claimants can never both
win) and resumes it from its log. A partitioned old owner that comes back
loses its next append, sees the claim, and stops touching the session.

asyncio lives here only because nats-py is asyncio-only.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar

import anyio
import msgspec
from anyio.abc import TaskGroup
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.errors import BucketNotFoundError, KeyNotFoundError
from nats.js.kv import KeyValue

from helix_agents import (
    AgentServerError,
    ConcurrencyConflict,
    HelixError,
    HostClaimed,
    LogError,
    RemoteResumeRequest,
    RemoteStartRequest,
    SubmitApprovalRequest,
    SubmitToolResultRequest,
    UsageError,
    decode_session_token,
    encode_session_token,
    project_state,
)
from helix_agents.transports.nats import (
    DEFAULT_PREFIX,
    DEFAULT_QUEUE,
    Reply,
    SessionOp,
    StatusRequest,
)

from .agent_server import AgentServer

__all__ = ["LEASE_BUCKET", "NatsAgentHost", "lease_key"]

LEASE_BUCKET = "helix_leases"
"""The JetStream KV bucket that holds the hosts' session leases."""


def lease_key(session_id: str) -> str:
    """A session's key in the lease bucket (its subject token, ``:`` escaped as ``_c``)."""
    return encode_session_token(session_id).replace(":", "_c")


log = logging.getLogger("helix_agents.server")

T = TypeVar("T")

_encoder = msgspec.json.Encoder()


class _Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(message)


def _decode(data: bytes, kind: type[T]) -> T:
    try:
        decoded: T = msgspec.json.decode(data, type=kind)
    except msgspec.ValidationError as exc:
        raise _Refused("INVALID_REQUEST", f"invalid request: {exc}") from exc
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise _Refused("INVALID_REQUEST", f"malformed JSON: {exc}") from exc
    return decoded


class NatsAgentHost:
    """Serves ``server`` on NATS; use it as ``async with NatsAgentHost(server, nc):``.

    Entering subscribes (and enters ``server`` unless it is already running);
    leaving unsubscribes, lets requests under way finish, and leaves ``server``.
    """

    def __init__(
        self,
        server: AgentServer,
        nc: NatsClient,
        *,
        prefix: str = DEFAULT_PREFIX,
        queue: str = DEFAULT_QUEUE,
        host_id: str | None = None,
        lease_ttl: float = 10.0,
    ) -> None:
        self.server = server
        self.nc = nc
        self.prefix = prefix
        self.queue = queue
        self.host_id = host_id or f"host-{uuid.uuid4().hex[:12]}"
        """This host's identity in ``host_claimed`` events and leases."""
        self.lease_ttl = lease_ttl
        self._kv: KeyValue | None = None
        self._subscriptions: list[Subscription] = []
        self._tg: TaskGroup | None = None
        self._entered_server = False

    async def __aenter__(self) -> NatsAgentHost:
        if not self.server.running:
            await self.server.__aenter__()
            self._entered_server = True
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        handlers: dict[str, Callable[[Msg], Awaitable[Any]]] = {
            "resume": self._resume,
            "status": self._status,
            "interrupt": self._interrupt,
            "abort": self._abort,
            "submit": self._submit,
            "approve": self._approve,
        }
        for agent_type in self.server.agent_types:
            await self._subscribe(f"{self.prefix}.start.{agent_type}", self._start)
        for op, handler in handlers.items():
            await self._subscribe(f"{self.prefix}.{op}.*", handler)
        await self.nc.flush()
        js = self.nc.jetstream()
        try:
            self._kv = await js.key_value(LEASE_BUCKET)
        except BucketNotFoundError:
            self._kv = await js.create_key_value(bucket=LEASE_BUCKET, ttl=self.lease_ttl)
        self._tg.start_soon(self._renew_forever)
        self._tg.start_soon(self._take_over_forever)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for subscription in self._subscriptions:
            await subscription.unsubscribe()
        self._subscriptions.clear()
        tg, self._tg = self._tg, None
        try:
            if tg is not None:
                tg.cancel_scope.cancel()  # the lease and takeover loops; requests are answered
                await tg.__aexit__(exc_type, exc, tb)
        finally:
            if self._entered_server:
                self._entered_server = False
                await self.server.__aexit__(exc_type, exc, tb)

    async def _subscribe(self, subject: str, handler: Callable[[Msg], Awaitable[Any]]) -> None:
        async def deliver(msg: Msg) -> None:
            if self._tg is not None:
                self._tg.start_soon(self._answer, msg, handler)

        self._subscriptions.append(await self.nc.subscribe(subject, queue=self.queue, cb=deliver))

    async def _answer(self, msg: Msg, handler: Callable[[Msg], Awaitable[Any]]) -> None:
        try:
            reply = Reply(result=await handler(msg))
        except _Refused as exc:
            reply = Reply(error=exc.message, code=exc.code)
        except AgentServerError as exc:
            reply = Reply(error=exc.message, code=exc.code)
        except (UsageError, LogError) as exc:
            reply = Reply(error=str(exc), code="INVALID_REQUEST")
        except HelixError as exc:
            log.error("host request on %s failed: %s", msg.subject, exc)
            reply = Reply(error=str(exc), code="INTERNAL_ERROR")
        except Exception as exc:  # never let one request take the host down
            log.exception("host request on %s failed", msg.subject)
            reply = Reply(error=f"{type(exc).__name__}: {exc}", code="INTERNAL_ERROR")
        if msg.reply:
            await msg.respond(_encoder.encode(reply))

    def _session(self, msg: Msg, session_id: str) -> str:
        """Check that the subject's token names the body's session."""
        token = msg.subject.rsplit(".", 1)[-1]
        try:
            named = decode_session_token(token)
        except ValueError as exc:
            raise _Refused("INVALID_REQUEST", f"bad session token {token!r}") from exc
        if named != session_id:
            raise _Refused("INVALID_REQUEST", "the subject and the body name different sessions")
        return session_id

    async def _start(self, msg: Msg) -> Any:
        request = _decode(msg.data, RemoteStartRequest)
        agent_type = msg.subject.rsplit(".", 1)[-1]
        if request.agent_type != agent_type:
            raise _Refused("INVALID_REQUEST", "the subject and the body name different agents")
        response = await self.server.start_agent(request)
        await self._hold(request.session_id)
        return response

    async def _resume(self, msg: Msg) -> Any:
        request = _decode(msg.data, RemoteResumeRequest)
        self._session(msg, request.session_id)
        response = await self.server.resume_agent(request)
        await self._hold(request.session_id)
        return response

    # --- leases and failover ----------------------------------------------------------

    async def _hold(self, session_id: str) -> None:
        """Take the lease of a session this host now runs (none if it runs elsewhere)."""
        if self._kv is not None and self.server.executor.is_executing(session_id):
            await self._kv.put(lease_key(session_id), self.host_id.encode())
            log.info("host %s runs session %s", self.host_id, session_id)
            print(f"helix-agents: host {self.host_id} runs {session_id}", flush=True)

    async def _renew_forever(self) -> None:
        assert self._kv is not None
        while True:
            for session_id in self.server.executor.active_sessions():
                try:
                    await self._kv.put(lease_key(session_id), self.host_id.encode())
                except Exception as exc:  # a missed renewal is retried next round
                    log.warning("could not renew the lease of %s: %s", session_id, exc)
            await anyio.sleep(self.lease_ttl / 3)

    async def _take_over_forever(self) -> None:
        while True:
            await anyio.sleep(self.lease_ttl / 2)
            try:
                await self.take_over_orphans()
            except HelixError as exc:
                log.warning("looking for orphaned sessions failed: %s", exc)

    async def _lease_holder(self, session_id: str) -> str | None:
        assert self._kv is not None
        try:
            entry = await self._kv.get(lease_key(session_id))
        except KeyNotFoundError:
            return None
        return entry.value.decode() if entry.value else None

    async def take_over_orphans(self) -> list[str]:
        """Claim and resume the running sessions no live lease covers; return their ids.

        Only sessions of this host's agent types, whose host died (its lease
        expired). The claim is a compare-and-append of ``host_claimed``.
        """
        store = self.server.store
        executor = self.server.executor
        taken: list[str] = []
        for session_id in await store.list_sessions():
            if executor.is_executing(session_id):
                continue
            log_ = await store.read(session_id)
            if not log_:
                continue
            state = project_state(log_)
            if state.status != "running" or state.agent_type not in self.server.agent_types:
                continue
            if await self._lease_holder(session_id) is not None:
                continue  # a live host holds it
            claim = HostClaimed(
                session_id=session_id,
                seq=state.last_seq + 1,
                ts=time.time(),
                host_id=self.host_id,
                previous_host_id=state.host_id,
            )
            try:
                await store.append(session_id, [claim], state.last_seq)
            except ConcurrencyConflict:
                continue  # another host claimed it first, or it moved on
            log.warning("host %s takes over session %s", self.host_id, session_id)
            await self.server.resume_agent(RemoteResumeRequest(session_id=session_id))
            await self._hold(session_id)
            taken.append(session_id)
        return taken

    async def _status(self, msg: Msg) -> Any:
        request = _decode(msg.data, StatusRequest)
        return await self.server.get_status(self._session(msg, request.session_id))

    async def _interrupt(self, msg: Msg) -> Any:
        request = _decode(msg.data, SessionOp)
        await self.server.interrupt_agent(self._session(msg, request.session_id), request.reason)
        return {"ok": True}

    async def _abort(self, msg: Msg) -> Any:
        request = _decode(msg.data, SessionOp)
        await self.server.abort_agent(self._session(msg, request.session_id), request.reason)
        return {"ok": True}

    async def _submit(self, msg: Msg) -> Any:
        request = _decode(msg.data, SubmitToolResultRequest)
        return await self.server.submit_tool_result(
            self._session(msg, request.session_id),
            request.tool_call_id,
            request.result,
            request.error,
        )

    async def _approve(self, msg: Msg) -> Any:
        request = _decode(msg.data, SubmitApprovalRequest)
        return await self.server.submit_approval(
            self._session(msg, request.session_id),
            request.tool_call_id,
            request.approved,
            request.reason,
        )
