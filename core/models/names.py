"""Models by name: ``"openai:gpt-4o-mini"`` resolved to an adapter with the usual variables.

``define_agent(model=...)`` and ``helix-agents chat --model`` take a name of
the form ``PROVIDER:MODEL``:

- ``openai:MODEL``: OpenAI; the key from ``OPENAI_API_KEY`` (required), the
  API root from ``OPENAI_BASE_URL`` (default ``https://api.openai.com/v1``).
- ``openai-compatible:MODEL``: any OpenAI-compatible server (Ollama, vLLM,
  llama.cpp); the API root from ``OPENAI_BASE_URL`` (required, e.g.
  ``http://localhost:11434/v1`` for Ollama), a key from ``OPENAI_API_KEY``
  if one is set.
- ``anthropic:MODEL``: Anthropic's Messages API (:class:`AnthropicLLM`, the
  ``anthropic`` extra); the key from ``ANTHROPIC_API_KEY`` (required), the
  API root from ``ANTHROPIC_BASE_URL`` if set.
- ``google:MODEL``: the Gemini API (:class:`GeminiLLM`, the ``google``
  extra); the key from ``GEMINI_API_KEY`` or ``GOOGLE_API_KEY`` (required),
  the API root from ``GOOGLE_GEMINI_BASE_URL`` if set.

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

import importlib.util
import os
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urlsplit

from helix_agents.errors import UsageError
from helix_agents.models.base import LLMAdapter, LLMError, LLMRequest, LLMStreamEvent
from helix_agents.models.openai import OpenAIChatLLM
from helix_agents.models.openai_errors import API_KEY_ENV, BASE_URL_ENV

if TYPE_CHECKING:
    from helix_agents.models.anthropic import AnthropicLLM
    from helix_agents.models.google import GeminiLLM

__all__ = [
    "API_KEY_ENV",
    "BASE_URL_ENV",
    "PROVIDERS",
    "NamedModel",
    "check_model",
    "model_from_name",
    "native_adapter",
]


class _Native(NamedTuple):
    """A provider with an adapter of its own, on its SDK (an optional extra)."""

    sdk: str  # the SDK's import name
    extra: str  # pip install 'helix-agents[EXTRA]'
    keys: tuple[str, ...]  # the key's variables, the first set wins
    url_env: str  # the API root's variable (optional)
    key_name: str  # what the key is called in a message


_NATIVE = {
    "anthropic": _Native(
        "anthropic",
        "anthropic",
        ("ANTHROPIC_API_KEY",),
        "ANTHROPIC_BASE_URL",
        "an Anthropic API key",
    ),
    "google": _Native(
        "google.genai",
        "google",
        ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
        "GOOGLE_GEMINI_BASE_URL",
        "a Gemini API key",
    ),
}

PROVIDERS = ("openai", "openai-compatible", *_NATIVE)
"""The providers a model name may start with."""


class NamedModel:
    """The adapter a model name stands for (OpenAI-compatible, Anthropic, Gemini): a client a call.

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
                for ``openai:``, ``OPENAI_BASE_URL`` for ``openai-compatible:``,
                ``ANTHROPIC_API_KEY``, ``GEMINI_API_KEY``), an API root variable
                that is not an http(s) URL, or the extra to install for a
                provider whose SDK is missing.
        """
        if self.provider in _NATIVE:
            _check_native(self.name, _NATIVE[self.provider])
            return
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
        llm: AnthropicLLM | GeminiLLM | OpenAIChatLLM
        try:
            self.check()
            # Base URL and key come from the same variables check() just read.
            native = self.provider in _NATIVE
            llm = native_adapter(self.provider, self.model) if native else OpenAIChatLLM(self.model)
        except UsageError as exc:
            raise LLMError(str(exc)) from exc
        async with llm, aclosing(llm.stream(request)) as events:
            async for event in events:
                yield event


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


def _check_native(name: str, native: _Native) -> None:
    if not _installed(native.sdk):
        raise UsageError(
            f"model {name!r} needs the {native.sdk} SDK: pip install 'helix-agents[{native.extra}]'"
        )
    if not any(os.environ.get(key) for key in native.keys):
        raise UsageError(f"model {name!r} needs {native.key_name}: set {' or '.join(native.keys)}")
    base_url = os.environ.get(native.url_env) or None
    parts = urlsplit(base_url or "https://")
    if base_url is not None and (parts.scheme not in ("http", "https") or not parts.netloc):
        raise UsageError(
            f"model {name!r}: {native.url_env} must be an http(s) URL, not {base_url!r}"
        )


def native_adapter(provider: str, model: str) -> AnthropicLLM | GeminiLLM:
    """A new adapter for a provider with its own SDK (``anthropic``, ``google``), set by the env.

    Raises:
        UsageError: the provider's SDK is not installed (the message names the
            extra), or :class:`GeminiLLM` finds no key.
    """
    native = _NATIVE[provider]
    try:
        if provider == "anthropic":
            from helix_agents.models.anthropic import AnthropicLLM

            return AnthropicLLM(model)
        from helix_agents.models.google import GeminiLLM

        return GeminiLLM(model)
    except ImportError as exc:
        raise UsageError(
            f"{provider}:{model} needs the {native.sdk} SDK: pip install "
            f"'helix-agents[{native.extra}]' ({exc})"
        ) from exc


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
