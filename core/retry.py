"""``retrying``: one backoff loop for idempotent calls across a transport."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from .errors import AgentServerError, StreamDropError, TransportError

__all__ = ["retrying", "transient"]

T = TypeVar("T")


def transient(exc: BaseException) -> bool:
    """A failure worth retrying: the network, or the server's INTERNAL_ERROR (a 5xx)."""
    if isinstance(exc, AgentServerError):
        return exc.code == "INTERNAL_ERROR"
    return isinstance(exc, TransportError) and not isinstance(exc, StreamDropError)


async def retrying(call: Callable[[], Awaitable[T]], *, retries: int, base_delay: float) -> T:
    """Await ``call()``, retrying transient failures with backoff ``base * 2**n``.

    Only for idempotent calls (start with a fixed session id, resume, status).
    """
    attempt = 0
    while True:
        try:
            return await call()
        except (TransportError, AgentServerError) as exc:
            if not transient(exc) or attempt >= retries:
                raise
            attempt += 1
            await anyio.sleep(base_delay * 2 ** (attempt - 1))
