"""How :class:`~helix_agents.models.openai.OpenAIChatLLM`'s failures read.

Each failure is one :class:`~helix_agents.models.base.LLMError` line that names
the model, the endpoint, what went wrong and, where there is one, the fix:
the variable or argument to check (a 401 names where the key came from, a
refused connection where the address came from). specs/llm.md has the map.
"""

from __future__ import annotations

from typing import Any

import httpx
import msgspec

from helix_agents.models.base import LLMError

__all__ = [
    "API_KEY_ENV",
    "BASE_URL_ENV",
    "OPENAI_URL",
    "Origin",
    "error_text",
    "status_error",
    "transport_error",
    "trimmed",
]

API_KEY_ENV = "OPENAI_API_KEY"
"""The environment variable the API key is read from when none is given."""
BASE_URL_ENV = "OPENAI_BASE_URL"
"""The environment variable the API root is read from when none is given."""
OPENAI_URL = "https://api.openai.com/v1"
"""The API root when neither ``base_url`` nor ``OPENAI_BASE_URL`` is given."""


class Origin(msgspec.Struct, frozen=True, kw_only=True):
    """Where an adapter's settings came from, so a hint names what to change.

    ``url_from`` and ``key_from`` are ``"base_url"``/``"api_key"`` (given to the
    adapter), the environment variable they were read from, or None (the
    default API root; no key sent).
    """

    base_url: str
    url_from: str | None
    key_from: str | None

    def key_hint(self) -> str:
        """What to check after a 401 or 403."""
        if self.key_from is None:
            return f"no API key was sent: set {API_KEY_ENV} (or give api_key=)"
        if self.key_from == API_KEY_ENV:
            return f"check the API key in {API_KEY_ENV}"
        return "check the api_key given"

    def source(self) -> str:
        """Where the API root came from, as a hint says it."""
        if self.url_from is None:
            return f"OpenAI's; set {BASE_URL_ENV} for another server"
        return f"from {self.url_from}"

    def running_hint(self) -> str:
        """What to check when the server cannot be reached."""
        return f"is a server running at {self.base_url}? ({self.source()})"

    def root_hint(self) -> str:
        """What to check when the reply holds no chat completion at all."""
        return f"is {self.base_url} an OpenAI-compatible API root? ({self.source()})"


def trimmed(text: str | bytes, limit: int = 200) -> str:
    """``text`` on one line, cut to ``limit`` characters, quoted: what a body held."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[: limit - 3] + "...")


def error_text(error: Any) -> str | None:
    """The message of OpenAI's ``{"message": ...}`` error object (or of a bare string)."""
    message = error.get("message") if isinstance(error, dict) else error
    return " ".join(message.split()) if isinstance(message, str) and message.strip() else None


def status_error(response: httpx.Response, origin: Origin, model: str) -> LLMError:
    """The error for a non-2xx reply whose body was read: the server's message and the fix."""
    try:
        body = msgspec.json.decode(response.content)
    except msgspec.DecodeError:
        body = None
    detail = error_text(body.get("error")) if isinstance(body, dict) else None
    if detail is None and response.content.strip():
        detail = trimmed(response.content)
    status = response.status_code
    hint: str | None = None
    if status in (401, 403):
        hint = origin.key_hint()
    elif status == 404:
        hint = f"check the model name {model!r} and the API root {origin.base_url} ("
        hint += f"{origin.source()}; most end in /v1)"
    elif status == 429:
        hint = "the server is rate limiting (or the quota is spent): wait and try again"
    return LLMError(
        detail or response.reason_phrase or "no message",
        retryable=status == 429 or status >= 500,
        status=status,
        hint=hint,
    )


def transport_error(exc: httpx.TransportError, origin: Origin, timeout: httpx.Timeout) -> LLMError:
    """The error for a network failure: refused, timed out, or broken off."""
    hint: str | None = None
    if isinstance(exc, httpx.ConnectTimeout):
        message, hint = f"no connection within {timeout.connect:g} s", origin.running_hint()
    elif isinstance(exc, httpx.ConnectError):
        message, hint = f"cannot connect: {str(exc) or 'connection refused'}", origin.running_hint()
    elif isinstance(exc, httpx.ReadTimeout):
        message = f"the server sent nothing for {timeout.read:g} s (the read timeout)"
    elif isinstance(exc, httpx.TimeoutException):
        message = f"timed out ({type(exc).__name__})"
    else:
        message = f"the connection failed: {type(exc).__name__}: {str(exc) or 'no detail'}"
    return LLMError(message, retryable=True, hint=hint)
