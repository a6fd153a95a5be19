"""Retries of a failed model call, once for every adapter: ``RetryPolicy``, ``RetryingLLM``.

The run wraps the model of each step (``define_agent(llm=...)``, a model by
name, a :class:`~helix_agents.models.fallback.FallbackModel`, the executor's
default) in a :class:`RetryingLLM` with the agent's policy
(``LLMConfig(retry=RetryPolicy(...))``). A call that fails with an
:class:`~helix_agents.models.base.LLMError` of a passing kind (``rate_limit``,
``overloaded``, ``server``, ``connection``, ``timeout``) before it yielded
anything is made again after a backoff: the provider's ``Retry-After`` when
it gave one, else exponential with jitter, capped at ``max_delay``; at most
``attempts`` calls in all. Once a piece of output has been yielded, a failure
ends the call as it is: a new call would repeat what the run already
streamed (the run fails; doing the step again would need a ``step_restarted``,
as after a crash, which is not wired for a model's failure). An error some
retry loop already gave up on (an adapter's own ``max_retries``) is not
retried again.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

import anyio

from helix_agents._aio import closing_iter
from helix_agents.errors import UsageError
from helix_agents.models.base import (
    LLMAdapter,
    LLMError,
    LLMErrorKind,
    LLMRequest,
    LLMStreamEvent,
)
from helix_agents.models.connections import ClientPool, pools_of
from helix_agents.retry import mark_spent, retries_spent

__all__ = ["NO_RETRIES", "RETRY_KINDS", "RetryPolicy", "RetryingLLM", "with_retries"]

log = logging.getLogger("helix_agents")

RETRY_KINDS: frozenset[LLMErrorKind] = frozenset(
    {"rate_limit", "overloaded", "server", "connection", "timeout"}
)
"""The kinds of failure a retry may get past."""


@dataclass(frozen=True)
class RetryPolicy:
    """How a model call that failed for a passing reason is made again.

    Args:
        attempts: calls in all, the first included (``1``: no retry).
        base_delay: retry ``n`` (from 0) waits about ``base_delay * 2**n``
            seconds (half of it fixed, half random), unless the provider said
            how long (``Retry-After``).
        max_delay: the longest wait, the provider's included (seconds).

    Raises:
        UsageError: ``attempts`` below 1, or a negative delay.
    """

    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 30.0

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int):
            raise UsageError(f"RetryPolicy.attempts must be an integer, not {self.attempts!r}")
        if self.attempts < 1:
            raise UsageError(f"RetryPolicy.attempts must be >= 1, not {self.attempts}")
        if not self.base_delay >= 0 or not self.max_delay >= 0:
            raise UsageError(
                f"RetryPolicy delays must be >= 0, not {self.base_delay!r} and {self.max_delay!r}"
            )

    def retries(self, error: Exception) -> bool:
        """Whether ``error`` is a failure a new call may get past."""
        return (
            isinstance(error, LLMError) and error.kind in RETRY_KINDS and not retries_spent(error)
        )

    def delay(self, retry: int, error: LLMError) -> float:
        """Seconds to wait before retry ``retry`` (from 0) after ``error``."""
        if error.retry_after is not None:
            return min(max(error.retry_after, 0.0), self.max_delay)
        backoff = min(self.base_delay * 2.0**retry, self.max_delay)
        return backoff / 2 + random.uniform(0, backoff / 2)


NO_RETRIES = RetryPolicy(attempts=1)
"""A policy that makes every call once."""


class RetryingLLM:
    """``llm`` whose failed calls are made again under ``policy``, until output began.

    Args:
        llm: the model.
        policy: how often and how long to wait (:class:`RetryPolicy`).
    """

    def __init__(self, llm: LLMAdapter, policy: RetryPolicy | None = None) -> None:
        self.llm = llm
        self.policy = policy if policy is not None else RetryPolicy()

    def __repr__(self) -> str:
        return f"<RetryingLLM {self.llm!r} attempts={self.policy.attempts}>"

    def client_pools(self) -> Iterable[ClientPool[Any]]:
        """The pools of the model it wraps."""
        return pools_of(self.llm)

    def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        """Yield the model's pieces and response; a failure before the first piece is retried.

        Raises:
            LLMError: the last failure once the attempts are spent, a failure
                no retry gets past, or any failure after output began.
        """
        return self._stream(request)

    async def _stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        policy = self.policy
        retry = 0
        while True:
            started = False
            try:
                async with closing_iter(self.llm.stream(request)) as events:
                    async for event in events:
                        started = True
                        yield event
                return
            except LLMError as error:
                if started or not policy.retries(error):
                    raise
                if retry + 1 >= policy.attempts:
                    mark_spent(error)
                    raise
                delay = policy.delay(retry, error)
                log.info(  # INFO: a retry that passes is no news; the one that fails is
                    "model call failed (%s), retry %d of %d in %.2f s: %s",
                    error.kind,
                    retry + 1,
                    policy.attempts - 1,
                    delay,
                    error,
                )
            await anyio.sleep(delay)
            retry += 1


def with_retries(llm: LLMAdapter, policy: RetryPolicy | None) -> LLMAdapter:
    """``llm`` under ``policy``: itself when it already retries, or when the policy makes one
    attempt."""
    if isinstance(llm, RetryingLLM) or (policy is not None and policy.attempts == 1):
        return llm
    return RetryingLLM(llm, policy)
