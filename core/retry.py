"""One backoff policy for calls across a network: ``retrying`` and ``retrying_stream``.

Retry ``n`` (from 0) waits ``base_delay * 2**n`` seconds, or what ``wait``
says for that failure (a server's ``Retry-After``). ``retry_if`` decides which
failures are worth another try; by default the ones :func:`transient` names.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from typing import TypeVar

import anyio

from helix_agents.errors import AgentServerError, StreamDropError, TransportError

__all__ = [
    "mark_spent",
    "retries_spent",
    "retrying",
    "retrying_stream",
    "transient",
    "transient_unspent",
]

T = TypeVar("T")

RetryIf = Callable[[Exception], bool]
"""Whether a failure is worth another try."""

Wait = Callable[[Exception], float | None]
"""Seconds to wait before retrying after a failure; ``None`` for the exponential backoff."""


_SPENT = "_helix_retries_spent"


def _spend(exc: Exception) -> None:
    """Mark ``exc`` as the failure a retry loop gave up on: no outer loop retries it again."""
    setattr(exc, _SPENT, True)


def mark_spent(exc: Exception) -> None:
    """Mark ``exc`` as the failure a retry loop (of another module) gave up on."""
    _spend(exc)


def retries_spent(exc: BaseException) -> bool:
    """True when ``exc`` already ended a retry loop whose budget was spent."""
    return getattr(exc, _SPENT, False) is True


def transient(exc: BaseException) -> bool:
    """A failure worth retrying: the network, or a 5xx: the server's INTERNAL_ERROR or UNAVAILABLE.

    ``UNAVAILABLE`` (503): a server at one of its limits, or a fleet host whose
    session's lease holder died (it is taken over once the lease lapses).
    """
    if isinstance(exc, AgentServerError):
        return exc.code in ("INTERNAL_ERROR", "UNAVAILABLE")
    return isinstance(exc, TransportError) and not isinstance(exc, StreamDropError)


def transient_unspent(exc: BaseException) -> bool:
    """:func:`transient`, unless a retry loop inside the call already spent its budget on it.

    The ``retry_if`` of a loop around a transport that retries its own calls.
    """
    return transient(exc) and not retries_spent(exc)


def _delay(exc: Exception, attempt: int, base_delay: float, wait: Wait | None) -> float:
    chosen = wait(exc) if wait is not None else None
    return chosen if chosen is not None else base_delay * 2**attempt


async def retrying(
    call: Callable[[], Awaitable[T]],
    *,
    retries: int,
    base_delay: float,
    retry_if: RetryIf = transient,
    wait: Wait | None = None,
) -> T:
    """Await ``call()``, trying again up to ``retries`` times after a failure ``retry_if`` accepts.

    Only for idempotent calls (start with a fixed session id, resume, status).
    The last failure, or the first one not worth retrying, is raised as it is.
    """
    attempt = 0
    while True:
        try:
            return await call()
        except Exception as exc:
            if not retry_if(exc):
                raise
            if attempt >= retries:
                _spend(exc)
                raise
            delay = _delay(exc, attempt, base_delay, wait)
        await anyio.sleep(delay)
        attempt += 1


async def retrying_stream(
    open_stream: Callable[[], AsyncGenerator[T, None]],
    *,
    retries: int,
    base_delay: float,
    retry_if: RetryIf = transient,
    wait: Wait | None = None,
) -> AsyncGenerator[T, None]:
    """Yield what ``open_stream()`` yields, opening it again after a failure, until the first item.

    A failure before the first item is retried as in :func:`retrying`; once an
    item was yielded, every failure is final (a new try would repeat what the
    consumer already has). Each stream opened is closed before the next.
    """
    attempt = 0
    while True:
        started = False
        try:
            async with aclosing(open_stream()) as items:
                async for item in items:
                    started = True
                    yield item
            return
        except Exception as exc:
            if started or not retry_if(exc):
                raise
            if attempt >= retries:
                _spend(exc)
                raise
            delay = _delay(exc, attempt, base_delay, wait)
        await anyio.sleep(delay)
        attempt += 1
