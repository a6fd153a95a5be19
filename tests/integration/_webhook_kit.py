"""A webhook receiver for the webhook tests: a Starlette app on uvicorn at 127.0.0.1.

:class:`Receiver` records every POST it gets (headers and raw body) and
answers ``500`` to the first ``failures`` of them, then ``204``; a test waits
for the n-th POST with :meth:`Receiver.wait_for`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio
import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["Received", "Receiver"]


@dataclass
class Received:
    """One POST as the receiver got it."""

    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        """The body, decoded."""
        return msgspec.json.decode(self.body)


@dataclass
class Receiver:
    """Answers 500 to the first ``failures`` POSTs, then 204; records them all."""

    failures: int = 0
    received: list[Received] = field(default_factory=list)
    _arrived: anyio.Event = field(default_factory=anyio.Event)

    def app(self) -> Starlette:
        """The ASGI app (serve it with ``servers.serve``)."""

        async def hook(request: Request) -> Response:
            self.received.append(Received(dict(request.headers), await request.body()))
            self._arrived.set()
            self._arrived = anyio.Event()
            if len(self.received) <= self.failures:
                return Response("down for now", status_code=500)
            return Response(status_code=204)

        return Starlette(routes=[Route("/hook", hook, methods=["POST"])])

    async def wait_for(self, count: int) -> list[Received]:
        """Wait until ``count`` POSTs arrived (bound it with ``fail_after``); all of them."""
        while len(self.received) < count:
            await self._arrived.wait()
        return self.received
