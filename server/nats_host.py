"""``NatsAgentHost``: serve an ``AgentServer`` on NATS subjects, in a queue group, with failover.

N hosts share the work: each subscribes to ``<prefix>.start.<agent type>``
for the types it runs and to ``<prefix>.<op>.*`` for the per-session
operations, all in one queue group, so NATS hands each request to one host.
Any host can answer for any session, because the session's state is its log
in the shared store (``specs/nats.md``). Every request is handled in the
host's own task group, so a slow one never holds up the rest.

Failover: a host holds a lease (JetStream KV, with a TTL) on every session it
runs, taken before the run can begin (a local child's too: the server's
``run_guard``) and renewed while it runs. Each host looks for sessions that
are running but that no live lease covers (their host died); it takes the
lease, claims the session by compare-and-append of ``host_claimed`` (so two
claimants can never both win) and resumes it from its log. A partitioned old
owner that comes back loses its next append, sees the claim, and stops
touching the session.

asyncio lives here only because nats-py is asyncio-only.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any

import anyio
import msgspec
from anyio.abc import TaskGroup
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from helix_agents import (
    AgentServerError,
    ConcurrencyConflict,
    HelixError,
    HostClaimed,
    RemoteResumeRequest,
    RemoteStartRequest,
    SubmitApprovalRequest,
    SubmitToolResultRequest,
    UsageError,
    decode_session_token,
    encode_session_token,
    project_state,
)
from helix_agents.ids import SessionId
from helix_agents.transports.bodies import SessionRequest
from helix_agents.transports.nats import (
    DEFAULT_PREFIX,
    DEFAULT_QUEUE,
    Reply,
    StatusRequest,
)

from .agent_server import AgentServer
from .edge import checked_id, checked_start, decode, protocol_error

__all__ = ["LEASE_BUCKET", "NatsAgentHost", "lease_key"]

LEASE_BUCKET = "helix_leases"
"""The JetStream KV bucket that holds the hosts' session leases."""


def lease_key(session_id: str) -> str:
    """A session's key in the lease bucket (its subject token, ``:`` escaped as ``_c``)."""
    return encode_session_token(session_id).replace(":", "_c")


log = logging.getLogger("helix_agents.server")

_encoder = msgspec.json.Encoder()


class _Lease(msgspec.Struct, kw_only=True):
    """What taking a session's lease found: who holds it, and our revision if we created it."""

    holder: str | None
    created: int | None = None


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
        self._kv_open = anyio.Event()
        self._subscriptions: list[Subscription] = []
        self._tg: TaskGroup | None = None
        self._entered_server = False

    async def __aenter__(self) -> NatsAgentHost:
        if self.server.run_guard is not None:
            raise UsageError("this AgentServer is already hosted (it has a run_guard)")
        self.server.run_guard = self._leased  # its leases wait for the bucket, opened below
        try:
            await self._open()
        except BaseException as exc:
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def _open(self) -> None:
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
        self._kv_open.set()
        self._tg.start_soon(self._renew_forever)
        self._tg.start_soon(self._take_over_forever)

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
            try:
                if self._entered_server:
                    self._entered_server = False
                    await self.server.__aexit__(exc_type, exc, tb)
            finally:
                self.server.run_guard = None
                self._kv_open.set()  # no lease is waited for any more (none, if it never opened)

    async def _subscribe(self, subject: str, handler: Callable[[Msg], Awaitable[Any]]) -> None:
        async def deliver(msg: Msg) -> None:
            if self._tg is not None:
                self._tg.start_soon(self._answer, msg, handler)

        self._subscriptions.append(await self.nc.subscribe(subject, queue=self.queue, cb=deliver))

    async def _answer(self, msg: Msg, handler: Callable[[Msg], Awaitable[Any]]) -> None:
        try:
            reply = Reply(result=await handler(msg))
        except Exception as exc:  # never let one request take the host down
            error = protocol_error(exc, f"host request on {msg.subject}")
            reply = Reply(error=error.message, code=error.code)
        if msg.reply:
            await msg.respond(_encoder.encode(reply))

    def _session(self, msg: Msg, session_id: str) -> SessionId:
        """The body's session id, checked, once the subject's token names the same session."""
        token = msg.subject.rsplit(".", 1)[-1]
        try:
            named = decode_session_token(token)
        except ValueError as exc:
            raise AgentServerError("INVALID_REQUEST", f"bad session token {token!r}") from exc
        if named != session_id:
            raise AgentServerError(
                "INVALID_REQUEST", "the subject and the body name different sessions"
            )
        return checked_id(session_id)

    async def _start(self, msg: Msg) -> Any:
        request = decode(msg.data, RemoteStartRequest)
        agent_type = msg.subject.rsplit(".", 1)[-1]
        if request.agent_type != agent_type:
            raise AgentServerError(
                "INVALID_REQUEST", "the subject and the body name different agents"
            )
        return await self.server.start_agent(checked_start(request))

    async def _resume(self, msg: Msg) -> Any:
        request = decode(msg.data, RemoteResumeRequest)
        self._session(msg, request.session_id)
        return await self.server.resume_agent(request)

    # --- leases and failover ----------------------------------------------------------

    @asynccontextmanager
    async def _leased(self, session_id: str) -> AsyncIterator[_Lease]:
        """Hold ``session_id``'s lease around a request that can begin its run here.

        The server's run guard (starts, resumes, answers; a local child's
        too). The lease is taken (created, if no host holds it) before the run
        can begin, so no other host can find the session running unleased; if
        no run of it began here, a lease created for it is given back. A lease
        that cannot be taken (JetStream unavailable) does not stop the run:
        the next renewal puts it.
        """
        lease = await self._take_lease(session_id)
        try:
            yield lease
        finally:
            with anyio.CancelScope(shield=True):
                if not self.server.executor.is_executing(session_id):
                    if lease.created is not None:
                        await self._drop_lease(session_id, lease.created)
                elif lease.created is not None or lease.holder != self.host_id:
                    if lease.created is None:  # held elsewhere, or not at all: ours now
                        await self._put_lease(session_id)
                    log.info("host %s runs %s", self.host_id, session_id)

    async def _take_lease(self, session_id: str) -> _Lease:
        """Create the session's lease for this host unless a host holds it; say who does."""
        await self._kv_open.wait()  # a request that came in while the host was opening it
        if self._kv is None:
            return _Lease(holder=None)
        try:
            for _ in range(3):  # a lease that expires between the two steps: try again
                try:
                    revision = await self._kv.create(lease_key(session_id), self.host_id.encode())
                    return _Lease(holder=self.host_id, created=revision)
                except (KeyWrongLastSequenceError, KeyNotFoundError):
                    holder = await self._lease_holder(session_id)
                    if holder is not None:
                        return _Lease(holder=holder)
        except Exception as exc:  # best effort: the next renewal puts it
            log.warning("could not take the lease of %s: %s", session_id, exc)
        return _Lease(holder=None)

    async def _put_lease(self, session_id: str) -> None:
        if self._kv is None:
            return
        try:
            await self._kv.put(lease_key(session_id), self.host_id.encode())
        except Exception as exc:  # never the end of the host: the next renewal puts it again
            log.warning("could not put the lease of %s: %s", session_id, exc)

    async def _drop_lease(self, session_id: str, revision: int) -> None:
        """Delete the lease this host created at ``revision``, unless it was written since."""
        if self._kv is None:
            return
        try:
            await self._kv.delete(lease_key(session_id), last=revision)
        except Exception as exc:  # written since (a renewal): not ours to delete
            log.debug("left the lease of %s: %s", session_id, exc)

    async def _renew_forever(self) -> None:
        assert self._kv is not None
        while True:
            for session_id in self.server.executor.active_sessions():
                await self._put_lease(session_id)  # a missed renewal is retried next round
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
        expired). This host takes the lease first (only if no host holds it),
        then claims by compare-and-append of ``host_claimed``.
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
            async with self._leased(session_id) as lease:
                if lease.created is None:
                    continue  # a host took the lease first
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
            taken.append(session_id)
        return taken

    async def _status(self, msg: Msg) -> Any:
        request = decode(msg.data, StatusRequest)
        return await self.server.get_status(self._session(msg, request.session_id))

    async def _interrupt(self, msg: Msg) -> Any:
        request = decode(msg.data, SessionRequest)
        await self.server.interrupt_agent(self._session(msg, request.session_id), request.reason)
        return {"ok": True}

    async def _abort(self, msg: Msg) -> Any:
        request = decode(msg.data, SessionRequest)
        await self.server.abort_agent(self._session(msg, request.session_id), request.reason)
        return {"ok": True}

    async def _submit(self, msg: Msg) -> Any:
        request = decode(msg.data, SubmitToolResultRequest)
        return await self.server.submit_tool_result(
            self._session(msg, request.session_id),
            request.tool_call_id,
            request.result,
            request.error,
        )

    async def _approve(self, msg: Msg) -> Any:
        request = decode(msg.data, SubmitApprovalRequest)
        return await self.server.submit_approval(
            self._session(msg, request.session_id),
            request.tool_call_id,
            request.approved,
            request.reason,
        )
