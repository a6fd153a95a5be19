"""Models by name: ``"openai:gpt-4o-mini"`` resolved to an adapter with the usual variables.

``define_agent(model=...)`` and ``helix-agents chat --model`` take a name of
the form ``PROVIDER:MODEL``:

- ``openai:MODEL``: OpenAI; the key from ``OPENAI_API_KEY`` (required), the
  API root from ``OPENAI_BASE_URL`` (default ``https://api.openai.com/v1``).
- ``openai-compatible:MODEL``: any OpenAI-compatible server (Ollama, vLLM,
  llama.cpp); the API root from ``OPENAI_BASE_URL`` (required, e.g.
  ``http://localhost:11434/v1`` for Ollama), a key from ``OPENAI_API_KEY``
  if one is set.

Resolution happens when the agent is defined, so a missing key is one
``UsageError`` line before anything runs. The adapter opens an HTTP client
per model call and closes it after, so an agent defined at import time holds
no connection across event loops (``run_sync`` twice, tests).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import aclosing
from urllib.parse import urlsplit

from helix_agents.errors import UsageError
from helix_agents.models.base import LLMRequest, LLMStreamEvent
from helix_agents.models.openai import OpenAIChatLLM

__all__ = ["API_KEY_ENV", "BASE_URL_ENV", "PROVIDERS", "NamedModel", "model_from_name"]

API_KEY_ENV = "OPENAI_API_KEY"
BASE_URL_ENV = "OPENAI_BASE_URL"
OPENAI_URL = "https://api.openai.com/v1"
PROVIDERS = ("openai", "openai-compatible")
"""The providers a model name may start with."""


class NamedModel:
    """The adapter a model name resolves to: an OpenAI-compatible endpoint, one client per call.

    Args:
        name: the name it was made from (``"openai:gpt-4o-mini"``).
        model: the model sent to the server (``"gpt-4o-mini"``).
        base_url: the API root.
        api_key: the bearer token, or None for a server that needs none.
    """

    def __init__(self, name: str, *, model: str, base_url: str, api_key: str | None) -> None:
        self.name = name
        self.model = model
        self.base_url = base_url
        self._api_key = api_key
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise UsageError(
                f"model {name!r}: {BASE_URL_ENV} must be an http(s) URL, not {base_url!r}"
            )

    def __repr__(self) -> str:
        return f"<NamedModel {self.name!r} base_url={self.base_url!r}>"  # never the key

    def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        """Call the model as :meth:`OpenAIChatLLM.stream` does, on a client of its own."""
        return self._stream(request)

    async def _stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        llm = OpenAIChatLLM(self.model, base_url=self.base_url, api_key=self._api_key)
        async with llm, aclosing(llm.stream(request)) as events:
            async for event in events:
                yield event


def model_from_name(name: str) -> NamedModel:
    """The adapter for ``PROVIDER:MODEL`` (see the module's docstring for the variables).

    Raises:
        UsageError: a malformed name, an unknown provider, or a variable it
            needs that is not set (the message names it).
    """
    provider, sep, model = name.partition(":") if isinstance(name, str) else ("", "", "")
    if not sep or not provider or not model.strip():
        raise UsageError(
            f"model {name!r}: expected PROVIDER:MODEL, e.g. 'openai:gpt-4o-mini' "
            f"(providers: {', '.join(PROVIDERS)})"
        )
    base_url = os.environ.get(BASE_URL_ENV) or None
    api_key = os.environ.get(API_KEY_ENV) or None
    if provider == "openai":
        if api_key is None:
            raise UsageError(
                f"model {name!r} needs an OpenAI API key: set {API_KEY_ENV} "
                f"(or use 'openai-compatible:MODEL' with {BASE_URL_ENV} for a local server)"
            )
        return NamedModel(name, model=model, base_url=base_url or OPENAI_URL, api_key=api_key)
    if provider == "openai-compatible":
        if base_url is None:
            raise UsageError(
                f"model {name!r} needs the server's address: set {BASE_URL_ENV} "
                "(e.g. http://localhost:11434/v1 for Ollama, http://localhost:8000/v1 for vLLM)"
            )
        return NamedModel(name, model=model, base_url=base_url, api_key=api_key)
    raise UsageError(
        f"model {name!r}: unknown provider {provider!r} (known: {', '.join(PROVIDERS)})"
    )
