"""Models by name: ``"openai:gpt-4o-mini"`` resolved to an adapter with the usual variables.

``define_agent(model=...)`` and ``helix-agents chat --model`` take a name of
the form ``PROVIDER:MODEL``; :data:`PROVIDERS` is the table of providers:

- ``openai:MODEL``: OpenAI's Responses API (:class:`OpenAIResponsesLLM`); the
  key from ``OPENAI_API_KEY`` (required), the API root from ``OPENAI_BASE_URL``
  (default ``https://api.openai.com/v1``).
- ``openai-chat:MODEL``: OpenAI's chat completions (:class:`OpenAIChatLLM`),
  with the same variables.
- ``openai-compatible:MODEL``: any OpenAI-compatible chat-completions server
  (Ollama, vLLM, llama.cpp); the API root from ``OPENAI_BASE_URL`` (required,
  e.g. ``http://localhost:11434/v1`` for Ollama), a key from
  ``OPENAI_API_KEY`` if one is set.
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
line. The adapter is made at the first call and again only when a variable it
reads has changed; its HTTP client is one per event loop, reused across calls
and closed with the executor (``connections.py``).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlsplit

from helix_agents._aio import closing_iter
from helix_agents.errors import UsageError
from helix_agents.models.base import LLMAdapter, LLMError, LLMRequest, LLMStreamEvent
from helix_agents.models.connections import CallLimit, ClientPool, limited, pools_of
from helix_agents.models.openai import OpenAIChatLLM
from helix_agents.models.openai_errors import API_KEY_ENV, BASE_URL_ENV
from helix_agents.models.openai_responses import OpenAIResponsesLLM

if TYPE_CHECKING:
    from helix_agents.models.anthropic import AnthropicLLM
    from helix_agents.models.google import GeminiLLM

__all__ = [
    "session_model",
    "API_KEY_ENV",
    "BASE_URL_ENV",
    "PROVIDERS",
    "ChecksVariables",
    "NamedModel",
    "Provider",
    "check_model",
    "model_from_name",
    "native_adapter",
]


@dataclass(frozen=True)
class Provider:
    """A provider a model name may start with: its adapter and the variables it needs."""

    build: Callable[[str], LLMAdapter]
    """Makes the adapter for a model (the adapter reads its variables then)."""
    check: Callable[[str], None]
    """Raises a ``UsageError`` naming what to set; given the whole name (``openai:gpt-4o``)."""
    reads: tuple[str, ...]
    """The variables the adapter reads: the adapter is made again when one of them changes."""
    api: str
    """What the provider's adapter speaks, for the docs (``OpenAI's Responses API``)."""
    extra: str | None = None
    """The ``pip install 'helix-agents[EXTRA]'`` extra it needs, if any."""


def _openai_check(*, key: bool, base_url: bool) -> Callable[[str], None]:
    """The check of an OpenAI-wire provider: the key and/or the API root it requires."""

    def check(name: str) -> None:
        url = os.environ.get(BASE_URL_ENV) or None
        if key and not os.environ.get(API_KEY_ENV):
            raise UsageError(
                f"model {name!r} needs an OpenAI API key: set {API_KEY_ENV} "
                f"(or use 'openai-compatible:MODEL' with {BASE_URL_ENV} for a local server)"
            )
        if base_url and url is None:
            raise UsageError(
                f"model {name!r} needs the server's address: set {BASE_URL_ENV} "
                "(e.g. http://localhost:11434/v1 for Ollama, http://localhost:8000/v1 for vLLM)"
            )
        parts = urlsplit(url or "https://api.openai.com")
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise UsageError(f"model {name!r}: {BASE_URL_ENV} must be an http(s) URL, not {url!r}")

    return check


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


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


def _native_check(provider: str) -> Callable[[str], None]:
    """The check of a provider on its own SDK: the SDK installed, the key, the API root."""
    native = _NATIVE[provider]

    def check(name: str) -> None:
        if not _installed(native.sdk):
            raise UsageError(
                f"model {name!r} needs the {native.sdk} SDK: "
                f"pip install 'helix-agents[{native.extra}]'"
            )
        if not any(os.environ.get(key) for key in native.keys):
            raise UsageError(
                f"model {name!r} needs {native.key_name}: set {' or '.join(native.keys)}"
            )
        base_url = os.environ.get(native.url_env) or None
        parts = urlsplit(base_url or "https://")
        if base_url is not None and (parts.scheme not in ("http", "https") or not parts.netloc):
            raise UsageError(
                f"model {name!r}: {native.url_env} must be an http(s) URL, not {base_url!r}"
            )

    return check


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


class _PerLoop:
    """An SDK adapter per event loop (its SDK client is bound to the loop it was made on).

    Each loop's calls reuse that loop's adapter and so its connections; the
    executor closes it with the rest of the model's clients (``client_pools``).
    """

    def __init__(self, provider: str, model: str) -> None:
        self.name = f"{provider}:{model}"
        self._pool: ClientPool[AnthropicLLM | GeminiLLM] = ClientPool(
            lambda: native_adapter(provider, model), lambda adapter: adapter.aclose()
        )

    def __repr__(self) -> str:
        return f"<{self.name} adapter per event loop>"

    def client_pools(self) -> Iterable[ClientPool[Any]]:
        """Its pool of SDK adapters, one per event loop."""
        return [self._pool]

    def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        """This loop's adapter's stream."""
        return self._pool.client().stream(request)


def _native(provider: str, api: str) -> Provider:
    native = _NATIVE[provider]
    return Provider(
        build=lambda model: _PerLoop(provider, model),
        check=_native_check(provider),
        reads=(*native.keys, native.url_env),
        api=api,
        extra=native.extra,
    )


_OPENAI_VARIABLES = (API_KEY_ENV, BASE_URL_ENV)

PROVIDERS: dict[str, Provider] = {
    "openai": Provider(
        build=OpenAIResponsesLLM,
        check=_openai_check(key=True, base_url=False),
        reads=_OPENAI_VARIABLES,
        api="OpenAI's Responses API",
    ),
    "openai-chat": Provider(
        # No retries of its own: the run's retry policy makes them.
        build=lambda model: OpenAIChatLLM(model, max_retries=0),
        check=_openai_check(key=True, base_url=False),
        reads=_OPENAI_VARIABLES,
        api="OpenAI's chat completions",
    ),
    "openai-compatible": Provider(
        build=lambda model: OpenAIChatLLM(model, max_retries=0),
        check=_openai_check(key=False, base_url=True),
        reads=_OPENAI_VARIABLES,
        api="an OpenAI-compatible chat-completions server (Ollama, vLLM, llama.cpp)",
    ),
    "anthropic": _native("anthropic", "Anthropic's Messages API"),
    "google": _native("google", "the Gemini API"),
}
"""The providers a model name may start with, by prefix."""


class ChecksVariables:
    """A model that can say now whether the variables it needs are set (:func:`check_model`)."""

    def check(self) -> None:
        """Raise a one-line ``UsageError`` naming what to set, if something is missing."""
        raise NotImplementedError


class NamedModel(ChecksVariables):
    """The adapter a model name stands for, made when it is first called.

    Building one checks the name only; the environment is read at each call
    (and by :meth:`check`).

    Args:
        name: ``PROVIDER:MODEL`` (``"openai:gpt-4o-mini"``).
        max_concurrency: At most this many calls of this model in flight at
            once (per event loop); None: no limit. Share the one ``NamedModel``
            (``define_agent(llm=...)``) between agents to share the limit.

    Raises:
        UsageError: a name without ``:`` or a model, an unknown provider, or a
            ``max_concurrency`` that is not a positive integer.
    """

    def __init__(self, name: str, *, max_concurrency: int | None = None) -> None:
        provider, sep, model = name.partition(":") if isinstance(name, str) else ("", "", "")
        known = ", ".join(PROVIDERS)
        if not sep or not provider or not model.strip():
            raise UsageError(
                f"model {name!r}: expected PROVIDER:MODEL, e.g. 'openai:gpt-4o-mini' "
                f"(providers: {known})"
            )
        if provider not in PROVIDERS:
            raise UsageError(f"model {name!r}: unknown provider {provider!r} (known: {known})")
        self.name = name
        self.provider = provider
        self.model = model
        """The model sent to the server (``"gpt-4o-mini"``)."""
        self._spec = PROVIDERS[provider]
        self._limit = CallLimit(max_concurrency) if max_concurrency is not None else None
        self._made: tuple[tuple[str | None, ...], LLMAdapter] | None = None
        self._all: list[LLMAdapter] = []  # every adapter made: their clients to close

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
        self._spec.check(self.name)

    def adapter(self) -> LLMAdapter:
        """The provider's adapter for this model, made again if a variable it reads changed.

        Raises:
            UsageError: as :meth:`check`.
        """
        self.check()
        seen = tuple(os.environ.get(variable) for variable in self._spec.reads)
        if self._made is None or self._made[0] != seen:
            made = self._spec.build(self.model)
            self._made = (seen, made)
            self._all.append(made)
        return self._made[1]

    def client_pools(self) -> Iterable[ClientPool[Any]]:
        """The pools of its adapters (the current one made now, if its variables are set)."""
        with contextlib.suppress(UsageError):
            self.adapter()  # an executor holds the pool before the step's first call
        return [pool for made in self._all for pool in pools_of(made)]

    async def aclose(self) -> None:
        """Close this event loop's clients of the adapters made so far."""
        for pool in [pool for made in self._all for pool in pools_of(made)]:
            await pool.aclose()

    def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        """Call the model through its provider's adapter (made or reused).

        A variable it needs that is missing is an :class:`LLMError` of kind
        ``auth`` whose message is :meth:`check`'s line (its cause the ``UsageError``).
        """
        try:
            llm = self.adapter()
        except UsageError as exc:
            return _failing(LLMError(str(exc), kind="auth"), exc)
        if self._limit is None:
            return llm.stream(request)
        return limited(self._limit, lambda: _generator(llm.stream(request)))


async def _failing(error: LLMError, cause: Exception) -> AsyncIterator[LLMStreamEvent]:
    none: list[LLMStreamEvent] = []  # an async generator: the error is raised where it is read
    for event in none:
        yield event
    raise error from cause


async def _generator(
    events: AsyncIterator[LLMStreamEvent],
) -> AsyncGenerator[LLMStreamEvent, None]:
    async with closing_iter(events) as items:
        async for event in items:
            yield event


def model_from_name(name: str, *, max_concurrency: int | None = None) -> NamedModel:
    """The adapter for ``PROVIDER:MODEL``, its variables checked now (see the module's docstring).

    Raises:
        UsageError: a malformed name, an unknown provider, or a variable it
            needs that is not set (the message names it).
    """
    model = NamedModel(name, max_concurrency=max_concurrency)
    model.check()
    return model


@functools.cache
def session_model(name: str) -> NamedModel:
    """The model ``name`` for a session that names its own (a fork's ``UseAgent``); one per name."""
    return NamedModel(name)


def check_model(llm: object) -> None:
    """Check ``llm``'s variables now if it can say (a named model, a fallback list).

    Raises:
        UsageError: as :meth:`NamedModel.check`.
    """
    if isinstance(llm, ChecksVariables):
        llm.check()
