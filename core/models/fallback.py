"""``FallbackModel``: models tried in turn, the next one when a call fails before any output.

``define_agent(model=["openai:gpt-4o-mini", "openai-compatible:llama3.2"])``
makes one, as does ``FallbackModel(a, b, ...)`` with adapters or names. A
call goes to the first model; when it fails with an error of a kind another
model may get past (:data:`FALLBACK_KINDS`) before yielding anything, the
next model gets the same request, and so on. A failure after output began
ends the call (a second model would repeat the text). The response's
``model`` names the model that answered (the log's ``usage_recorded`` carries
it). When every model fails, the error says what each one said, in one line.
The run's retries (``RetryPolicy``) wrap the whole list: a rate-limited
first model hands over to the second at once, and only when every model
failed for a passing reason does the run wait and try the list again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

import msgspec

from helix_agents._aio import closing_iter
from helix_agents.errors import UsageError
from helix_agents.models.base import (
    LLMAdapter,
    LLMError,
    LLMErrorKind,
    LLMRequest,
    LLMResponse,
    LLMStreamEvent,
)
from helix_agents.models.connections import ClientPool, pools_of
from helix_agents.models.names import ChecksVariables, NamedModel
from helix_agents.models.retrying import RETRY_KINDS

__all__ = ["FALLBACK_KINDS", "FallbackModel"]

FALLBACK_KINDS: frozenset[LLMErrorKind] = RETRY_KINDS | {
    "auth",
    "not_found",
    "context_length",
    "bad_reply",
}
"""The kinds of failure the next model may get past: the passing ones, and what is particular to
one provider (its key, its model name, its context window, its replies). ``bad_request`` and
``refused`` end the call: a request another model would take is a bug to see, and a refusal is
not to be worked around by asking elsewhere."""


def _name(model: LLMAdapter) -> str:
    if isinstance(model, NamedModel):
        return model.name
    name = getattr(model, "model", None)
    return name if isinstance(name, str) else type(model).__name__


class FallbackModel(ChecksVariables):
    """Models tried in order: the next when a call fails with a kind in ``fall_on``.

    Args:
        models: adapters, or model names (``"openai:gpt-4o-mini"``), first choice first.
        fall_on: the failure kinds that hand the call to the next model.

    Raises:
        UsageError: no model, or a malformed model name.
    """

    def __init__(
        self, *models: LLMAdapter | str, fall_on: Iterable[LLMErrorKind] = FALLBACK_KINDS
    ) -> None:
        if not models:
            raise UsageError("FallbackModel needs at least one model")
        self.models: list[LLMAdapter] = [
            NamedModel(model) if isinstance(model, str) else model for model in models
        ]
        self.fall_on = frozenset(fall_on)

    def __repr__(self) -> str:
        return f"<FallbackModel {[_name(model) for model in self.models]}>"

    def check(self) -> None:
        """Check that some model has the variables it needs (the others fail over at their call).

        Raises:
            UsageError: the first model's line, when no model can run.
        """
        first: UsageError | None = None
        for model in self.models:
            if not isinstance(model, ChecksVariables):
                return  # an adapter given as it is: nothing to check
            try:
                model.check()
            except UsageError as error:
                first = first or error
            else:
                return
        if first is not None:
            raise first

    def client_pools(self) -> Iterable[ClientPool[Any]]:
        """The pools of every model in the list."""
        return [pool for model in self.models for pool in pools_of(model)]

    def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        """The first model's stream that does not fail before its first piece.

        Raises:
            LLMError: a failure after output began, one not in ``fall_on``, or,
                when every model failed, one line with each one's error.
        """
        return self._stream(request)

    async def _stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        failures: list[tuple[LLMAdapter, LLMError]] = []
        for model in self.models:
            started = False
            try:
                async with closing_iter(model.stream(request)) as events:
                    async for event in events:
                        started = True
                        if isinstance(event, LLMResponse) and event.model is None:
                            event = msgspec.structs.replace(event, model=_name(model))
                        yield event
                return
            except LLMError as error:
                if started or error.kind not in self.fall_on:
                    raise
                failures.append((model, error))
        raise _every_one_failed(failures)


def _every_one_failed(failures: list[tuple[LLMAdapter, LLMError]]) -> LLMError:
    """One error for a list whose every model failed: each one's line; the kind a retry may pass."""
    *_, (_, last) = failures
    if len(failures) == 1:
        return last
    passing = [error for _, error in failures if error.kind in RETRY_KINDS]
    waits = [error.retry_after for error in passing if error.retry_after is not None]
    lead = passing[0] if passing else last
    said = "; ".join(f"{_name(model)}: {error}" for model, error in failures)
    error = LLMError(
        f"every model failed: {said}",
        retryable=any(error.retryable for _, error in failures),
        kind=lead.kind,
        retry_after=min(waits) if waits else None,
    )
    error.__cause__ = last
    return error
