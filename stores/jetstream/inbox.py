"""``NatsInbox``: one long-lived reply subscription for a connection's requests to JetStream.

nats-py's request machinery (a future, ``asyncio.wait_for``, a dataclass per
acknowledgement) and a subscribe/unsubscribe per multi-reply request (a
batched direct get) cost more CPU, and more writes to the server, than the
work itself. Here every request of one client answers to
``<inbox>.<request id>`` under one wildcard subscription, made once; a
JetStream acknowledgement is read with msgspec. The errors are nats-py's own
(``TimeoutError``, ``NoRespondersError``), so callers handle them as before.

asyncio lives here only because nats-py is asyncio-only.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncGenerator

import anyio
import msgspec
import nats.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

__all__ = ["EXPECTED_LAST_SUBJECT_SEQ", "WRONG_LAST_SEQUENCE", "NatsInbox", "PubAck"]

EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
"""The header that makes a JetStream publish a compare-and-append on its subject."""

WRONG_LAST_SEQUENCE = (10071, 10164)
"""JetStream's err_codes for a publish whose expected subject sequence was refused."""


class ApiError(msgspec.Struct):
    """An error JetStream answered with."""

    code: int = 0
    err_code: int = 0
    description: str = ""


class PubAck(msgspec.Struct):
    """JetStream's answer to a publish: where it was stored, or why not."""

    seq: int = 0
    duplicate: bool = False
    error: ApiError | None = None


_ack_decoder = msgspec.json.Decoder(PubAck)


class _Replies:
    """The replies to one multi-reply request, as they arrive."""

    __slots__ = ("arrived", "messages")

    def __init__(self) -> None:
        self.messages: deque[Msg] = deque()
        self.arrived = anyio.Event()

    def put(self, msg: Msg) -> None:
        self.messages.append(msg)
        self.arrived.set()

    async def next(self, wait: float) -> Msg:
        if not self.messages:
            with anyio.move_on_after(wait):
                await self.arrived.wait()
            if not self.messages:
                raise nats.errors.TimeoutError
        msg = self.messages.popleft()
        if not self.messages:
            self.arrived = anyio.Event()
        return msg


def _time_out(future: asyncio.Future[Msg]) -> None:
    if not future.done():
        future.set_exception(nats.errors.TimeoutError())


class NatsInbox:
    """Requests of one nats-py client, answered to one long-lived wildcard inbox."""

    def __init__(self, nc: NatsClient, timeout: float) -> None:
        self._nc = nc
        self.timeout = timeout
        self._prefix: str | None = None
        self._subscription: Subscription | None = None
        self._opening = anyio.Lock(fast_acquire=True)
        self._asks: dict[str, asyncio.Future[Msg]] = {}
        self._streams: dict[str, _Replies] = {}
        self._ids = 0

    async def _reply_to(self) -> tuple[str, str]:
        """A fresh request id and the subject its replies come to (subscribed once)."""
        if self._prefix is None:
            async with self._opening:
                if self._prefix is None:
                    prefix = self._nc.new_inbox()
                    self._subscription = await self._nc.subscribe(f"{prefix}.*", cb=self._route)
                    self._prefix = prefix
        self._ids += 1
        token = str(self._ids)
        return token, f"{self._prefix}.{token}"

    async def close(self) -> None:
        """Unsubscribe the inbox (best effort); a request after this subscribes it again."""
        subscription, self._subscription, self._prefix = self._subscription, None, None
        if subscription is not None:
            with contextlib.suppress(nats.errors.Error, OSError):
                await subscription.unsubscribe()

    async def _route(self, msg: Msg) -> None:
        token = msg.subject.rsplit(".", 1)[-1]
        replies = self._streams.get(token)
        if replies is not None:
            replies.put(msg)
            return
        asked = self._asks.get(token)
        if asked is not None and not asked.done():
            asked.set_result(msg)
        # else a late answer to a request given up

    async def ask(self, subject: str, payload: bytes, headers: dict[str, str] | None = None) -> Msg:
        """Publish a request and return its one reply.

        Raises nats-py's ``TimeoutError`` after :attr:`timeout` seconds and
        ``NoRespondersError`` when nothing took the message.
        """
        token, reply = await self._reply_to()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Msg] = loop.create_future()
        self._asks[token] = future
        timer = loop.call_later(self.timeout, _time_out, future)
        try:
            await self._nc.publish(subject, payload, reply=reply, headers=headers)
            msg = await future
        finally:
            timer.cancel()
            del self._asks[token]
        if not msg.data and msg.headers and msg.headers.get("Status") == "503":
            raise nats.errors.NoRespondersError
        return msg

    async def publish(
        self, subject: str, payload: bytes, headers: dict[str, str] | None = None
    ) -> PubAck:
        """Publish to JetStream and return its acknowledgement (which may carry an error).

        Raises ``TimeoutError`` and ``NoRespondersError`` as :meth:`ask`, and
        ``nats.errors.Error`` for an answer that is no acknowledgement.
        """
        reply = await self.ask(subject, payload, headers)
        try:
            ack = _ack_decoder.decode(reply.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise nats.errors.Error(f"not a JetStream acknowledgement: {exc}") from exc
        if ack.error is None and ack.seq < 1:
            raise nats.errors.Error("a JetStream acknowledgement without a sequence")
        return ack

    async def replies(self, subject: str, payload: bytes) -> AsyncGenerator[Msg, None]:
        """Publish a request and yield its replies as they come (the caller says when to stop).

        Each reply is awaited for :attr:`timeout` seconds at most (then
        ``TimeoutError``).
        """
        token, reply = await self._reply_to()
        box = self._streams[token] = _Replies()
        try:
            await self._nc.publish(subject, payload, reply=reply)
            while True:
                yield await box.next(self.timeout)
        finally:
            del self._streams[token]
