"""How the OpenAI adapters post a call, and how their failures read.

Each failure is one :class:`~helix_agents.models.base.LLMError` line that names
the model, the endpoint, what went wrong and, where there is one, the fix:
the variable or argument to check (a 401 names where the key came from, a
refused connection where the address came from), and carries its kind
(``rate_limit``, ``auth``...) and the ``Retry-After`` the server asked for.
specs/llm.md has the map. The chat-completions and the Responses adapters
share it: both APIs answer errors in OpenAI's shape.
"""

from __future__ import annotations

import email.utils
import math
import os
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import aclosing
from typing import Any, NamedTuple, TypeVar

import httpx
import msgspec

from helix_agents.errors import UsageError
from helix_agents.models.base import LLMError, LLMErrorKind

__all__ = [
    "API_KEY_ENV",
    "BASE_URL_ENV",
    "OPENAI_URL",
    "Origin",
    "Sent",
    "code_kind",
    "endpoint",
    "error_text",
    "posted",
    "retry_after",
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


def endpoint(
    base_url: str | None, api_key: str | None, headers: Mapping[str, str] | None, path: str
) -> tuple[httpx.URL, Origin, dict[str, str]]:
    """The URL an adapter posts to (``base_url`` or ``OPENAI_BASE_URL``, else OpenAI's, then
    ``path``), where its settings came from, and its headers (the key as a bearer token).

    Raises:
        UsageError: the API root is not an http(s) URL (the message names where it came from).
    """
    url_from: str | None = "base_url"
    if base_url is None:
        base_url = os.environ.get(BASE_URL_ENV) or None
        url_from = BASE_URL_ENV if base_url is not None else None
    base_url = base_url or OPENAI_URL
    try:
        url = httpx.URL(base_url.rstrip("/") + path)
    except httpx.InvalidURL as exc:
        raise UsageError(f"invalid {url_from or 'base_url'} {base_url!r}: {exc}") from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise UsageError(f"{url_from} must be an http(s) URL, not {base_url!r}")
    key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
    key_from = ("api_key" if api_key is not None else API_KEY_ENV) if key else None
    sent = {"Content-Type": "application/json"}
    if key:
        sent["Authorization"] = f"Bearer {key}"
    sent.update(headers or {})
    return url, Origin(base_url=base_url, url_from=url_from, key_from=key_from), sent


T = TypeVar("T")


class Sent(NamedTuple):
    """Where and how an adapter posts: the URL, headers, timeout, and where they came from."""

    url: httpx.URL
    headers: dict[str, str]
    timeout: httpx.Timeout
    origin: Origin


async def posted(
    client: httpx.AsyncClient,
    sent: Sent,
    body: bytes,
    model: str,
    read: Callable[[httpx.Response, Origin], AsyncGenerator[T, None]],
) -> AsyncGenerator[T, None]:
    """Post ``body`` and yield what ``read`` makes of a 2xx reply.

    A refusal, a network failure or anything ``read`` raises is an
    :class:`LLMError` naming ``model`` and the URL (the httpx error its cause).
    """
    try:
        try:
            async with client.stream(
                "POST", sent.url, content=body, headers=sent.headers, timeout=sent.timeout
            ) as response:
                try:
                    response.raise_for_status()
                except httpx.HTTPStatusError as exc:
                    await response.aread()
                    raise status_error(response, sent.origin, model) from exc
                async with aclosing(read(response, sent.origin)) as events:
                    async for event in events:
                        yield event
        except httpx.TransportError as exc:
            raise transport_error(exc, sent.origin, sent.timeout) from exc
        except httpx.HTTPError as exc:
            raise LLMError(f"{type(exc).__name__}: {exc}", kind="bad_reply") from exc
    except LLMError as exc:
        # Every failure names what was called, where (the server's own words stay the message).
        exc.model, exc.endpoint = exc.model or model, exc.endpoint or str(sent.url)
        raise


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


_CODE_KINDS: dict[str, LLMErrorKind] = {
    "context_length_exceeded": "context_length",
    "string_above_max_length": "context_length",
    "rate_limit_exceeded": "rate_limit",
    "insufficient_quota": "auth",
    "invalid_api_key": "auth",
    "server_error": "server",
    "overloaded": "overloaded",
    "server_is_overloaded": "overloaded",
    "content_filter": "refused",
    "content_policy_violation": "refused",
    "invalid_prompt": "refused",
    "bio_policy": "refused",
    "model_not_found": "not_found",
}
"""OpenAI's error ``code`` (and ``type``) values that say what kind of failure it is."""


def code_kind(code: Any, message: str | None = None) -> LLMErrorKind | None:
    """The kind an OpenAI error ``code`` (or its ``message``) names, if it names one."""
    kind = _CODE_KINDS.get(code) if isinstance(code, str) else None
    if kind is None and message and "maximum context length" in message:
        kind = "context_length"  # vLLM and llama.cpp say so without a code
    return kind


def _status_kind(status: int) -> LLMErrorKind:
    if status in (401, 403):
        return "auth"
    if status == 404:
        return "not_found"
    if status == 408:
        return "timeout"
    if status == 413:
        return "context_length"
    if status == 429:
        return "rate_limit"
    if status in (503, 529):
        return "overloaded"
    return "server" if status >= 500 or status == 409 else "bad_request"


def retry_after(headers: httpx.Headers) -> float | None:
    """Seconds the server asked to wait: ``retry-after-ms``, else ``retry-after`` (seconds or
    an HTTP date); None when it asked nothing readable."""
    millis = _number(headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    value = headers.get("retry-after")
    seconds = _number(value)
    if seconds is not None or value is None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def _number(value: str | None) -> float | None:
    try:
        number = float(value) if value is not None else math.nan
    except ValueError:
        return None
    return None if math.isnan(number) or math.isinf(number) else max(number, 0.0)


def status_error(response: httpx.Response, origin: Origin, model: str) -> LLMError:
    """The error for a non-2xx reply whose body was read: the server's message and the fix."""
    try:
        body = msgspec.json.decode(response.content)
    except msgspec.DecodeError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    detail = error_text(error)
    if detail is None and response.content.strip():
        detail = trimmed(response.content)
    status = response.status_code
    code = (error.get("code") or error.get("type")) if isinstance(error, dict) else None
    kind = code_kind(code, detail) or _status_kind(status)
    hint: str | None = None
    if code == "insufficient_quota":
        hint = "the account's quota is spent: check its plan and billing"
    elif status in (401, 403):
        hint = origin.key_hint()
    elif status == 404:
        hint = f"check the model name {model!r} and the API root {origin.base_url} ("
        hint += f"{origin.source()}; most end in /v1)"
    elif status == 429:
        hint = "the server is rate limiting (or the quota is spent): wait and try again"
    return LLMError(
        detail or response.reason_phrase or "no message",
        retryable=(status == 429 or status >= 500) and kind != "auth",
        status=status,
        hint=hint,
        kind=kind,
        retry_after=retry_after(response.headers),
    )


def transport_error(exc: httpx.TransportError, origin: Origin, timeout: httpx.Timeout) -> LLMError:
    """The error for a network failure: refused, timed out, or broken off."""
    hint: str | None = None
    kind: LLMErrorKind = "timeout"
    if isinstance(exc, httpx.ConnectTimeout):
        message, hint = f"no connection within {timeout.connect:g} s", origin.running_hint()
    elif isinstance(exc, httpx.ConnectError):
        message, hint = f"cannot connect: {str(exc) or 'connection refused'}", origin.running_hint()
        kind = "connection"
    elif isinstance(exc, httpx.ReadTimeout):
        message = f"the server sent nothing for {timeout.read:g} s (the read timeout)"
    elif isinstance(exc, httpx.TimeoutException):
        message = f"timed out ({type(exc).__name__})"
    else:
        message = f"the connection failed: {type(exc).__name__}: {str(exc) or 'no detail'}"
        kind = "connection"
    return LLMError(message, retryable=True, hint=hint, kind=kind)
