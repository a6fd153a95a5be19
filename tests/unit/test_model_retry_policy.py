"""The retry policy's waits, the ``Retry-After`` a server sends, and a client pool's holders."""

from __future__ import annotations

import email.utils
import time

import anyio
import httpx
import pytest

from helix_agents.models import LLMError, RetryPolicy
from helix_agents.models.connections import ClientPool
from helix_agents.models.openai_errors import retry_after


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "0.1"}, 0.1),
        ({"retry-after": "7"}, 7.0),
        ({"retry-after-ms": "250", "retry-after": "1"}, 0.25),
        ({"retry-after": "-3"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_reads_seconds_and_milliseconds(
    headers: dict[str, str], seconds: float | None
) -> None:
    assert retry_after(httpx.Headers(headers)) == seconds


def test_retry_after_reads_an_http_date() -> None:
    when = email.utils.formatdate(time.time() + 60, usegmt=True)
    wait = retry_after(httpx.Headers({"retry-after": when}))
    assert wait is not None
    assert 50 <= wait <= 61


def test_the_wait_is_the_servers_capped_else_a_jittered_backoff() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=5.0)
    asked = LLMError("slow down", kind="rate_limit", retry_after=0.1)
    assert policy.delay(0, asked) == 0.1
    assert policy.delay(0, LLMError("x", kind="rate_limit", retry_after=60)) == 5.0
    plain = LLMError("boom", kind="server")
    for retry, ceiling in ((0, 1.0), (1, 2.0), (2, 4.0), (3, 5.0), (9, 5.0)):
        waits = {policy.delay(retry, plain) for _ in range(50)}
        assert all(ceiling / 2 <= wait <= ceiling for wait in waits)
        assert len(waits) > 1  # jittered: sessions refused together do not return together


def test_only_passing_kinds_are_retried() -> None:
    policy = RetryPolicy()
    for kind in ("rate_limit", "overloaded", "server", "connection", "timeout"):
        assert policy.retries(LLMError("x", kind=kind))  # type: ignore[arg-type]
    for kind in ("auth", "bad_request", "refused", "context_length", "not_found", None):
        assert not policy.retries(LLMError("x", kind=kind))  # type: ignore[arg-type]
    assert not policy.retries(ValueError("not a model error"))


class _Client:
    def __init__(self) -> None:
        self.closed = False


async def _close(client: _Client) -> None:
    client.closed = True


async def test_the_last_holder_on_a_loop_closes_its_client() -> None:
    pool: ClientPool[_Client] = ClientPool(_Client, _close)
    pool.hold()
    pool.hold()
    client = pool.client()
    assert pool.client() is client  # reused
    await pool.release()
    assert not client.closed
    await pool.release()
    assert client.closed
    assert pool.open == 0
    assert pool.client() is not client  # a later call makes a new one


def test_each_event_loop_gets_its_own_client() -> None:
    pool: ClientPool[_Client] = ClientPool(_Client, _close)

    async def take() -> _Client:
        return pool.client()

    first = anyio.run(take)
    second = anyio.run(take)  # the first loop has ended: its client is dropped
    assert first is not second
    assert pool.open == 1
