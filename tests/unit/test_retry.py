"""One retry budget per call: a retry loop wrapped in another does not multiply the tries."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest

from helix_agents.errors import AgentServerError, StreamDropError, TransportError
from helix_agents.retry import (
    retries_spent,
    retrying,
    retrying_stream,
    transient,
    transient_unspent,
)


async def test_a_failure_that_spent_an_inner_budget_is_not_retried_outside() -> None:
    tries = 0

    async def unreachable() -> None:
        nonlocal tries
        tries += 1
        raise TransportError("POST http://127.0.0.1:9/start: agent server unreachable")

    async def transport_call() -> None:  # a transport retrying its own calls
        await retrying(unreachable, retries=3, base_delay=0)

    with pytest.raises(TransportError, match=r"127\.0\.0\.1:9") as caught:
        # the caller's retries, as a sub-agent call wraps its transport
        await retrying(transport_call, retries=3, base_delay=0, retry_if=transient_unspent)
    assert tries == 4  # 1 + 3, not (1 + 3) * (1 + 3)
    assert retries_spent(caught.value)
    assert transient(caught.value)  # still a network failure: a stream may reconnect
    assert not transient_unspent(caught.value)


async def test_a_fresh_failure_is_still_retried_and_a_success_ends_the_loop() -> None:
    tries = 0

    async def flaky() -> str:
        nonlocal tries
        tries += 1
        if tries < 3:
            raise AgentServerError("INTERNAL_ERROR", "try again")
        return "ok"

    assert await retrying(flaky, retries=3, base_delay=0) == "ok"
    assert tries == 3


async def test_a_failure_not_worth_retrying_is_raised_at_once_and_not_marked() -> None:
    tries = 0

    async def refused() -> None:
        nonlocal tries
        tries += 1
        raise AgentServerError("NOT_FOUND", "no such agent")

    with pytest.raises(AgentServerError) as caught:
        await retrying(refused, retries=3, base_delay=0)
    assert tries == 1
    assert not retries_spent(caught.value)
    assert not transient(StreamDropError("dropped", last_sequence=3))


def test_a_5xx_refusal_is_transient_a_4xx_is_not() -> None:
    # UNAVAILABLE: a server at a limit, or a fleet whose session's host died
    # (taken over once its lease lapses): a sub-agent call tries again.
    assert transient(AgentServerError("UNAVAILABLE", "its lease lapses soon"))
    assert transient(AgentServerError("INTERNAL_ERROR", "boom"))
    assert not transient(AgentServerError("ALREADY_RUNNING", "running"))
    assert not transient(AgentServerError("NOT_FOUND", "no such session"))


async def test_a_stream_that_spent_its_budget_is_not_reopened_by_an_outer_loop() -> None:
    opened = 0

    async def never_opens() -> AsyncGenerator[int, None]:
        nonlocal opened
        opened += 1
        if opened:
            raise TransportError("GET http://127.0.0.1:9/sse: agent server unreachable")
        yield 0

    async def read_all() -> list[object]:
        return [item async for item in retrying_stream(never_opens, retries=2, base_delay=0)]

    with pytest.raises(TransportError):
        await retrying(read_all, retries=5, base_delay=0, retry_if=transient_unspent)
    assert opened == 3
