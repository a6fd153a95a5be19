"""Small async helpers shared inside core."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TypeVar

T = TypeVar("T")

__all__ = ["closing_iter"]


@asynccontextmanager
async def closing_iter(iterator: AsyncIterator[T]) -> AsyncIterator[AsyncIterator[T]]:
    """Use an async iterator and close it on exit, if it can be closed (generators can).

    Protocols return plain ``AsyncIterator``; their implementations are async
    generators, whose cleanup (closing a tail, a connection) must run promptly.
    """
    try:
        yield iterator
    finally:
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()
