"""``NatsAgentHost``: serve an ``AgentServer`` on NATS subjects, in a queue group, with failover.

N hosts share the work: each subscribes to ``<prefix>.start.<agent type>``
for the types it runs and to ``<prefix>.<op>.*`` for the per-session
operations, all in one queue group, so NATS hands each request to one host.
Any host can answer for any session, because the session's state is its log
in the shared store (``specs/nats.md``). Every request is handled in the
host's own task group, so a slow one never holds up the rest.

Failover: a host holds a lease (JetStream KV, with a TTL) on every session it
runs, taken before the run can begin (a local child's too: the run guard of
the server's runtime, :class:`~helix_agents.server.fleet.runtime.NatsRuntime`)
and renewed while it runs. Each host looks for sessions that
are running but that no live lease covers (their host died); it takes the
lease, claims the session by compare-and-append of ``host_claimed`` (so two
claimants can never both win) and resumes it from its log. A partitioned old
owner that comes back loses its next append, sees the claim, and stops
touching the session.

asyncio lives here only because nats-py is asyncio-only.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import anyio
import msgspec
import nats.errors
from anyio.abc import TaskGroup
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.errors import BucketNotFoundError
from nats.js.kv import KeyValue

from helix_agents.errors import AgentServerError, UsageError
from helix_agents.ids import SessionId, decode_session_token
from helix_agents.protocol import (
    RemoteMessageRequest,
    RemoteResumeRequest,
    RemoteStartRequest,
    SubmitApprovalRequest,
    SubmitToolResultRequest,
)
from helix_agents.schedules import DEFAULT_POLL, Scheduler
from helix_agents.server.agent_server import AgentServer
from helix_agents.server.edge import (
    checked_id,
    checked_start,
    decode,
    protocol_error,
    with_trace_headers,
)
from helix_agents.server.fleet.runtime import HeldElsewhere, NatsRuntime
from helix_agents.server.fleet.takeover import OrphanTakeover
from helix_agents.transports.bodies import SessionRequest
from helix_agents.transports.nats import (
    DEFAULT_PREFIX,
    DEFAULT_QUEUE,
    HOSTS_BUCKET,
    HostAnnouncement,
    NatsRemoteAgentTransport,
    Reply,
    StatusRequest,
)

__all__ = ["NatsAgentHost"]

log = logging.getLogger("helix_agents.server")

_encoder = msgspec.json.Encoder()


_reply_decoder = msgspec.json.Decoder(Reply)
_FORWARD_HOPS = 3  # a lease that moves again while a request follows it
ANNOUNCE_EVERY = 5.0
"""Seconds between a host's announcements of its agent types in ``HOSTS_BUCKET``."""
_ANNOUNCE_TTL = 3 * ANNOUNCE_EVERY  # a dead host's announcement lapses after this


class NatsAgentHost:
    """Serves ``server`` on NATS; use it as ``async with NatsAgentHost(server):``.

    ``server`` runs on a :class:`~helix_agents.server.fleet.runtime.NatsRuntime`
    (``AgentServer(agents, store, runtime=NatsRuntime(nc))``): its connection,
    host id and leases are this host's. Entering subscribes (and enters
    ``server`` unless it is already running); leaving unsubscribes, lets
    requests under way finish, and leaves ``server``. With ``run_schedules``, it
    fires the fleet's schedules too (specs/server.md, "Schedules"): every host
    may, and each tick is claimed by one.

    Raises:
        UsageError: a server on another runtime, or a bad option.
    """

    def __init__(
        self,
        server: AgentServer,
        *,
        prefix: str = DEFAULT_PREFIX,
        queue: str = DEFAULT_QUEUE,
        forward_timeout: float = 4.0,
        run_schedules: bool = False,
        schedule_poll: float = DEFAULT_POLL,
    ) -> None:
        fleet = server.executor.runtime
        if not isinstance(fleet, NatsRuntime):
            raise UsageError(
                "a NATS host serves a server built on the fleet's runtime: "
                "AgentServer(agents, store, runtime=NatsRuntime(nc))"
            )
        if not forward_timeout > 0:
            raise UsageError("forward_timeout must be positive")
        self.server = server
        self.fleet = fleet
        """The server's runtime: this host's leases, running index and identity."""
        self.nc = fleet.nc
        self.prefix = prefix
        self.queue = queue
        self.host_id = fleet.host_id
        """This host's identity in ``host_claimed`` events and leases."""
        self.forward_timeout = forward_timeout
        """Seconds a request forwarded to a session's lease holder waits for its answer."""
        self._direct = f"{prefix}.host.{self.host_id}."
        self.leases = fleet.leases
        """The leases this host holds (its runtime's)."""
        self.running = fleet.running
        """The fleet's index of running sessions (``running.py``), which the scan reads."""
        self._hosts_kv: KeyValue | None = None
        self._subscriptions: list[Subscription] = []
        self._tg: TaskGroup | None = None
        self._entered_server = False
        # A scan every third of the TTL: a dead host's sessions go within TTL + TTL/3.
        self.takeover = OrphanTakeover(
            self.server,
            self.leases,
            self.running,
            interval=fleet.lease_ttl / 3,
            sweep_every=fleet.sweep_every,
        )
        """The orphan scan: claims and resumes running sessions whose host died."""
        self.scheduler: Scheduler | None = None
        """Fires the fleet's schedules, each tick's run started through the fleet
        (whichever host serves its agent type), with ``run_schedules``."""
        if run_schedules:
            through_fleet = NatsRemoteAgentTransport(self.nc, server.store, prefix=prefix)
            self.scheduler = Scheduler(server.schedules, through_fleet, poll=schedule_poll)

    async def __aenter__(self) -> NatsAgentHost:
        if self.fleet.hosted:
            raise UsageError("this AgentServer is already hosted")
        self.fleet.hosted = True  # its leases wait for the bucket, opened below
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
        self.fleet.task_group = self._tg
        handlers: dict[str, Callable[[Msg], Awaitable[Any]]] = {
            "resume": self._resume,
            "message": self._message,
            "status": self._status,
            "interrupt": self._interrupt,
            "abort": self._abort,
            "submit": self._submit,
            "approve": self._approve,
        }
        for agent_type in self.server.agent_types:
            await self._subscribe(f"{self.prefix}.start.{agent_type}", self._start)
            await self._subscribe(f"{self._direct}start.{agent_type}", self._start, queue="")
        for op, handler in handlers.items():
            await self._subscribe(f"{self.prefix}.{op}.*", handler)
            # Requests another host forwards here, to the session's lease holder.
            await self._subscribe(f"{self._direct}{op}.*", handler, queue="")
        await self.nc.flush()
        await self.running.open()  # before the leases: a run guarded once they open is indexed
        await self.leases.open()
        js = self.nc.jetstream()
        try:
            self._hosts_kv = await js.key_value(HOSTS_BUCKET)
        except BucketNotFoundError:
            self._hosts_kv = await js.create_key_value(
                bucket=HOSTS_BUCKET, ttl=_ANNOUNCE_TTL, replicas=self.fleet.replicas
            )
        await self._announce()  # before the gateway can be asked for this host's types
        self._tg.start_soon(self.leases.renew_forever, self.server.executor.active_sessions)
        self._tg.start_soon(self.takeover.run_forever)
        self._tg.start_soon(self._announce_forever)
        if self.scheduler is not None:  # ended with the task group, before the server closes
            self._tg.start_soon(self.scheduler.run)

    async def _announce(self) -> None:
        """Put this host's agent types in the hosts bucket (best effort: the next round)."""
        if self._hosts_kv is None:
            return
        announcement = HostAnnouncement(agent_types=list(self.server.agent_types))
        try:
            await self._hosts_kv.put(self.host_id, _encoder.encode(announcement))
        except Exception as exc:
            log.warning("could not announce host %s: %s", self.host_id, exc)

    async def _announce_forever(self) -> None:
        while True:
            await anyio.sleep(ANNOUNCE_EVERY)
            await self._announce()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for subscription in self._subscriptions:
            await subscription.unsubscribe()
        self._subscriptions.clear()
        hosts_kv, self._hosts_kv = self._hosts_kv, None
        if hosts_kv is not None:
            with anyio.move_on_after(self.forward_timeout, shield=True):
                try:
                    await hosts_kv.delete(self.host_id)  # the fleet no longer counts on it
                except Exception as failure:  # it lapses anyway
                    log.debug("could not withdraw host %s: %s", self.host_id, failure)
        tg, self._tg = self._tg, None
        self.fleet.task_group = None
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
                self.fleet.hosted = False
                self.leases.stop_waiting()
                # Runs that ended (or never began) here: any host may resume them at once,
                # instead of after their leases lapse. Bounded, best effort.
                with anyio.move_on_after(self.forward_timeout, shield=True):
                    await self.fleet.give_back_idle()
                with anyio.move_on_after(self.forward_timeout, shield=True):
                    await self.leases.close()
                    await self.running.close()

    async def _subscribe(
        self, subject: str, handler: Callable[[Msg], Awaitable[Any]], queue: str | None = None
    ) -> None:
        async def deliver(msg: Msg) -> None:
            if self._tg is not None:
                self._tg.start_soon(self._answer, msg, handler)

        group = self.queue if queue is None else queue
        self._subscriptions.append(await self.nc.subscribe(subject, queue=group, cb=deliver))

    async def _answer(self, msg: Msg, handler: Callable[[Msg], Awaitable[Any]]) -> None:
        try:
            data = _encoder.encode(Reply(result=await handler(msg)))
        except HeldElsewhere as held:
            if msg.subject.startswith(self._direct):
                # Forwarded here, but the lease moved on: the asking host follows it.
                data = _encoder.encode(
                    Reply(error=str(held), code="UNAVAILABLE", holder=held.holder)
                )
            else:
                data = await self._forward(msg, handler, held.holder)
        except Exception as exc:  # never let one request take the host down
            data = _encoder.encode(_error_reply(exc, msg.subject))
        if msg.reply:
            await msg.respond(data)

    async def _forward(
        self, msg: Msg, handler: Callable[[Msg], Awaitable[Any]], holder: str
    ) -> bytes:
        """Ask the session's lease holder to answer ``msg``; its answer, as it gave it.

        Only the holder may begin a run of the session or say whether one is
        executing, so the fleet answers as one server would. A holder that
        does not answer (its host died: its lease lapses within ``lease_ttl``
        and a running session is taken over) leaves the answer to this host
        without beginning a run (``_unanswered``).
        """
        op_and_token = msg.subject[len(self.prefix) + 1 :]
        for _ in range(_FORWARD_HOPS):
            subject = f"{self.prefix}.host.{holder}.{op_and_token}"
            try:
                answer = await self.nc.request(
                    subject, msg.data, timeout=self.forward_timeout, headers=msg.headers
                )
            except nats.errors.NoRespondersError:
                return await self._unanswered(msg, handler, holder, "does not answer")
            except (nats.errors.Error, OSError) as exc:
                return await self._unanswered(msg, handler, holder, f"did not answer: {exc!r}")
            try:
                reply = _reply_decoder.decode(answer.data)
            except (msgspec.DecodeError, msgspec.ValidationError):
                return bytes(answer.data)
            if reply.holder is None or reply.holder == holder:
                return bytes(answer.data)
            holder = reply.holder
        return _encoder.encode(_unavailable(holder, "keeps moving"))

    async def _unanswered(
        self, msg: Msg, handler: Callable[[Msg], Awaitable[Any]], holder: str, what: str
    ) -> bytes:
        """The answer when the lease holder does not answer: what the log alone can say.

        A status is read here (no run is executing: its host is gone). A
        session that does not exist, or is finished, gets the answer one
        server gives (``NOT_FOUND``, ``ALREADY_COMPLETED``); anything else,
        which could begin a run, is refused ``UNAVAILABLE`` until the lease
        lapses.
        """
        try:
            if handler == self._status:
                return _encoder.encode(Reply(result=await self._local_status(msg)))
            token = msg.subject.rsplit(".", 1)[-1]
            if handler != self._start:
                session_id = decode_session_token(token)
                state = await self.server.executor.state(session_id)  # NOT_FOUND if none
                if state.is_terminal:
                    raise AgentServerError(
                        "ALREADY_COMPLETED", f"session {session_id!r} is {state.status}"
                    )
        except Exception as exc:
            return _encoder.encode(_error_reply(exc, msg.subject))
        return _encoder.encode(_unavailable(holder, what))

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
        traced = with_trace_headers(request, msg.headers)  # specs/otel.md
        return await self.server.start_agent(checked_start(traced))

    async def _resume(self, msg: Msg) -> Any:
        request = decode(msg.data, RemoteResumeRequest)
        self._session(msg, request.session_id)
        return await self.server.resume_agent(request)

    async def _message(self, msg: Msg) -> Any:
        request = decode(msg.data, RemoteMessageRequest)
        self._session(msg, request.session_id)
        return await self.server.send_message(request)

    # --- failover ------------------------------------------------------------------

    async def take_over_orphans(self) -> list[str]:
        """Claim and resume the running sessions no live lease covers; return their ids.

        One round of this host's orphan scan (:class:`~.takeover.OrphanTakeover`).
        """
        return await self.takeover.take_over_orphans()

    async def _status(self, msg: Msg) -> Any:
        request = decode(msg.data, StatusRequest)
        session_id = self._session(msg, request.session_id)
        if not msg.subject.startswith(self._direct) and not self.server.executor.is_executing(
            session_id
        ):
            # Whether a run is executing is the lease holder's to say.
            await self.leases.wait_open()
            holder = await self.leases.holder(session_id) if self.leases.kv is not None else None
            if holder is not None and holder != self.host_id:
                raise HeldElsewhere(session_id, holder)
        return await self.server.get_status(session_id)

    async def _local_status(self, msg: Msg) -> Any:
        """The status read here (its holder gone): the run is executing nowhere now."""
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
            decided_by=request.decided_by,
        )


def _error_reply(exc: Exception, subject: str) -> Reply:
    error = protocol_error(exc, f"host request on {subject}")
    return Reply(error=error.message, code=error.code)


def _unavailable(holder: str, what: str) -> Reply:
    return Reply(
        error=f"the session's host {holder!r} {what}; its sessions are taken over once its "
        "lease lapses",
        code="UNAVAILABLE",
    )
