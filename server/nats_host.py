"""``NatsAgentHost``: serve an ``AgentServer`` on NATS subjects, in a queue group.

N hosts share the work: each subscribes to ``<prefix>.start.<agent type>``
for the types it runs and to ``<prefix>.<op>.*`` for the per-session
operations, all in one queue group, so NATS hands each request to one host.
Any host can answer for any session, because the session's state is its log
in the shared store (``specs/nats.md``). Every request is handled in the
host's own task group, so a slow one never holds up the rest.

asyncio lives here only because nats-py is asyncio-only.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar

import anyio
import msgspec
from anyio.abc import TaskGroup
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from helix_agents import (
    AgentServerError,
    HelixError,
    LogError,
    RemoteResumeRequest,
    RemoteStartRequest,
    SubmitToolResultRequest,
    UsageError,
    decode_session_token,
)
from helix_agents.transports.nats import (
    DEFAULT_PREFIX,
    DEFAULT_QUEUE,
    Reply,
    SessionOp,
    StatusRequest,
)

from .agent_server import AgentServer

__all__ = ["NatsAgentHost"]

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
    ) -> None:
        self.server = server
        self.nc = nc
        self.prefix = prefix
        self.queue = queue
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
        }
        for agent_type in self.server.agent_types:
            await self._subscribe(f"{self.prefix}.start.{agent_type}", self._start)
        for op, handler in handlers.items():
            await self._subscribe(f"{self.prefix}.{op}.*", handler)
        await self.nc.flush()
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
        return await self.server.start_agent(request)

    async def _resume(self, msg: Msg) -> Any:
        request = _decode(msg.data, RemoteResumeRequest)
        self._session(msg, request.session_id)
        return await self.server.resume_agent(request)

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
        await self.server.submit_tool_result(
            self._session(msg, request.session_id),
            request.tool_call_id,
            request.result,
            request.error,
        )
        return {"ok": True}
