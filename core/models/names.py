"""Models by name: ``"openai:gpt-4o-mini"`` resolved to an adapter with the usual variables.

``define_agent(model=...)`` and ``helix-agents chat --model`` take a name of
the form ``PROVIDER:MODEL``:

- ``openai:MODEL``: OpenAI; the key from ``OPENAI_API_KEY`` (required), the
  API root from ``OPENAI_BASE_URL`` (default ``https://api.openai.com/v1``).
- ``openai-compatible:MODEL``: any OpenAI-compatible server (Ollama, vLLM,
  llama.cpp); the API root from ``OPENAI_BASE_URL`` (required, e.g.
  ``http://localhost:11434/v1`` for Ollama), a key from ``OPENAI_API_KEY``
  if one is set.

The name is checked when the agent is defined (a malformed name or an unknown
provider is a ``UsageError`` at once); the variables are read when the model
is used, so a module whose agents name a model imports without them (``replay
--rerun`` never calls the model). :meth:`NamedModel.check` says at once what
is missing (``executor.execute``, ``run_sync`` and ``chat --model`` call it
before they start); a run that reaches the model without it fails with that
line. The adapter opens an HTTP client per model call and closes it after, so
an agent defined at import time holds no connection across event loops
(``run_sync`` twice, tests).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import aclosing
from urllib.parse import urlsplit

from helix_agents.errors import UsageError
from helix_agents.models.base import LLMAdapter, LLMError, LLMRequest, LLMStreamEvent
from helix_agents.models.openai import OpenAIChatLLM
from helix_agents.models.openai_errors import API_KEY_ENV, BASE_URL_ENV

__all__ = [
    "API_KEY_ENV",
    "BASE_URL_ENV",
    "PROVIDERS",
    "NamedModel",
    "check_model",
    "model_from_name",
]

PROVIDERS = ("openai", "openai-compatible")
"""The providers a model name may start with."""


class NamedModel:
    """The adapter a model name stands for: an OpenAI-compatible endpoint, one client per call.

    Building one checks the name only; the environment is read at each call
    (and by :meth:`check`).

    Args:
        name: ``PROVIDER:MODEL`` (``"openai:gpt-4o-mini"``).

    Raises:
        UsageError: a name without ``:`` or a model, or an unknown provider.
    """

    def __init__(self, name: str) -> None:
        provider, sep, model = name.partition(":") if isinstance(name, str) else ("", "", "")
        if not sep or not provider or not model.strip():
            raise UsageError(
                f"model {name!r}: expected PROVIDER:MODEL, e.g. 'openai:gpt-4o-mini' "
                f"(providers: {', '.join(PROVIDERS)})"
            )
        if provider not in PROVIDERS:
            raise UsageError(
                f"model {name!r}: unknown provider {provider!r} (known: {', '.join(PROVIDERS)})"
            )
        self.name = name
        self.provider = provider
        self.model = model
        """The model sent to the server (``"gpt-4o-mini"``)."""

    def __repr__(self) -> str:
        return f"<NamedModel {self.name!r}>"  # never the key

    def check(self) -> None:
        """Check the variables this model needs are set and usable.

        Raises:
            UsageError: one line naming the variable to set (``OPENAI_API_KEY``
                for ``openai:``, ``OPENAI_BASE_URL`` for ``openai-compatible:``),
                or an ``OPENAI_BASE_URL`` that is not an http(s) URL.
        """
        base_url = os.environ.get(BASE_URL_ENV) or None
        if self.provider == "openai" and not os.environ.get(API_KEY_ENV):
            raise UsageError(
                f"model {self.name!r} needs an OpenAI API key: set {API_KEY_ENV} "
                f"(or use 'openai-compatible:MODEL' with {BASE_URL_ENV} for a local server)"
            )
        if self.provider == "openai-compatible" and base_url is None:
            raise UsageError(
                f"model {self.name!r} needs the server's address: set {BASE_URL_ENV} "
                "(e.g. http://localhost:11434/v1 for Ollama, http://localhost:8000/v1 for vLLM)"
            )
        parts = urlsplit(base_url or "https://api.openai.com")
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise UsageError(
                f"model {self.name!r}: {BASE_URL_ENV} must be an http(s) URL, not {base_url!r}"
            )

    def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        """Call the model as :meth:`OpenAIChatLLM.stream` does, on a client of its own.

        A variable it needs that is missing is an :class:`LLMError` whose
        message is :meth:`check`'s line (its cause the ``UsageError``).
        """
        return self._stream(request)

    async def _stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        try:
            self.check()
        except UsageError as exc:
            raise LLMError(str(exc)) from exc
        # Base URL and key come from the same variables check() just read.
        llm = OpenAIChatLLM(self.model)
        async with llm, aclosing(llm.stream(request)) as events:
            async for event in events:
                yield event


def model_from_name(name: str) -> NamedModel:
    """The adapter for ``PROVIDER:MODEL``, its variables checked now (see the module's docstring).

    Raises:
        UsageError: a malformed name, an unknown provider, or a variable it
            needs that is not set (the message names it).
    """
    model = NamedModel(name)
    model.check()
    return model


def check_model(llm: LLMAdapter | None) -> None:
    """Check ``llm``'s variables now if it is a :class:`NamedModel` (else nothing to check).

    Raises:
        UsageError: as :meth:`NamedModel.check`.
    """
    if isinstance(llm, NamedModel):
        llm.check()
