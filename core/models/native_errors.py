"""How the native adapters' failures read: Anthropic's and Gemini's errors as one ``LLMError`` line.

:func:`anthropic_error` and :func:`gemini_error` turn what the providers'
SDKs raise (a status error with the provider's error body, a connection
failure, a stream that broke off) into an
:class:`~helix_agents.models.base.LLMError` with its ``kind`` (``auth``,
``rate_limit``, ``overloaded``, ``context_length``, ...), the seconds the
provider asked to wait (``retry_after``) and a hint naming the fix. Each SDK
is imported only when its adapter's failure is read. specs/llm.md has the map.
"""

from __future__ import annotations

import math
import re
from typing import Any

import httpx
import msgspec

from helix_agents.models.base import LLMError, LLMErrorKind

__all__ = ["RETRYABLE", "Where", "anthropic_error", "gemini_error", "seconds"]

RETRYABLE: frozenset[LLMErrorKind] = frozenset(
    {"rate_limit", "overloaded", "server", "connection", "timeout"}
)
"""The kinds of failure another try may get past."""


class Where(msgspec.Struct, frozen=True, kw_only=True):
    """Where an adapter sends its calls and where its settings came from, for the hints.

    ``url_from`` and ``key_from`` are ``"base_url"``/``"api_key"`` (given to
    the adapter), the environment variable they were read from, or ``None``
    (the provider's own API root; no key given or found in ``key_envs``).
    """

    provider: str
    endpoint: str
    root: str
    key_envs: tuple[str, ...]
    url_from: str | None = None
    key_from: str | None = None

    def key_hint(self) -> str:
        """What to check after an authentication failure."""
        if self.key_from is None:
            return f"no API key was given: set {' or '.join(self.key_envs)} (or give api_key=)"
        if self.key_from == "api_key":
            return "check the api_key given"
        return f"check the API key in {self.key_from}"

    def running_hint(self) -> str:
        """What to check when the server cannot be reached."""
        source = f"from {self.url_from}" if self.url_from else f"{self.provider}'s API"
        return f"is a server running at {self.root}? ({source})"


def seconds(value: object) -> float | None:
    """A wait in seconds from ``Retry-After`` (``"7"``) or a Google duration (``"7s"``)."""
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        return None
    try:
        wait = float(str(value).strip().removesuffix("s"))
    except ValueError:
        return None  # an HTTP date: the retry layer's own backoff
    return wait if math.isfinite(wait) and wait >= 0 else None


def _failure(
    message: str,
    kind: LLMErrorKind,
    where: Where,
    model: str,
    *,
    status: int | None = None,
    retry_after: float | None = None,
) -> LLMError:
    hint = _hint(kind, where, model, retry_after)
    return LLMError(
        " ".join(message.split()) or "no message",
        retryable=kind in RETRYABLE,
        status=status,
        model=model,
        endpoint=where.endpoint,
        hint=hint,
        kind=kind,
        retry_after=retry_after,
    )


def _hint(kind: LLMErrorKind, where: Where, model: str, retry_after: float | None) -> str | None:
    wait = f": retry after {retry_after:g} s" if retry_after is not None else ": wait and retry"
    match kind:
        case "auth":
            return where.key_hint()
        case "rate_limit":
            return f"{where.provider} is rate limiting (or the quota is spent){wait}"
        case "overloaded":
            return f"{where.provider} is overloaded{wait} (or use another model)"
        case "context_length":
            return "the conversation is longer than the model's context window: shorten it"
        case "not_found":
            return f"check the model name {model!r} and the API root {where.root}"
        case _:
            return None


def _transport(exc: BaseException) -> bool:
    """A network failure from httpx or from httpx2 (the fork the SDKs may run on)."""
    kinds: list[type[BaseException]] = [httpx.TransportError]
    try:
        import httpx2

        kinds.append(httpx2.TransportError)
    except ImportError:  # pragma: no cover - an SDK on plain httpx
        pass
    return isinstance(exc, tuple(kinds))


def _network(exc: BaseException, where: Where, model: str, *, started: bool) -> LLMError:
    name = type(exc).__name__
    detail = f"{name}: {str(exc) or 'no detail'}"
    if "Timeout" in name:
        return _failure(f"timed out ({detail})", "timeout", where, model)
    if started or not any(word in name for word in ("Connect", "Proxy")):
        return _failure(
            f"the connection broke off mid-reply ({detail})", "connection", where, model
        )
    failure = _failure(f"cannot connect ({detail})", "connection", where, model)
    failure.hint = where.running_hint()
    return failure


# --- Anthropic ---------------------------------------------------------------------

_ANTHROPIC_KINDS: dict[str, LLMErrorKind] = {
    "authentication_error": "auth",
    "permission_error": "auth",
    "billing_error": "auth",
    "not_found_error": "not_found",
    "rate_limit_error": "rate_limit",
    "overloaded_error": "overloaded",
    "api_error": "server",
    "timeout_error": "timeout",
    "request_too_large": "bad_request",
    "invalid_request_error": "bad_request",
}
_BY_STATUS: dict[int, LLMErrorKind] = {
    400: "bad_request",
    401: "auth",
    403: "auth",
    404: "not_found",
    408: "timeout",
    413: "bad_request",
    429: "rate_limit",
    503: "overloaded",
    504: "timeout",
    529: "overloaded",
}
_TOO_LONG = re.compile(
    r"prompt is too long|too many tokens|context (window|length)"
    r"|exceeds the maximum number of tokens",
    re.IGNORECASE,
)


def anthropic_error(
    exc: BaseException, where: Where, model: str, *, started: bool
) -> LLMError | None:
    """The ``LLMError`` for what Anthropic's SDK (or its transport) raised; ``None`` if not its.

    ``started`` says whether the reply had begun (a broken connection then
    reads as cut off mid-reply, never as "cannot connect").
    """
    import anthropic

    if isinstance(exc, anthropic.APIStatusError):
        body = exc.body if isinstance(exc.body, dict) else {}
        error = body.get("error")
        error = error if isinstance(error, dict) else {}
        error_type = error.get("type") if isinstance(error.get("type"), str) else None
        text = error.get("message") if isinstance(error.get("message"), str) else None
        status: int | None = exc.status_code
        if status is not None and status < 300:  # an error event in a stream that began
            status = None
        kind = _ANTHROPIC_KINDS.get(error_type or "") or _BY_STATUS.get(status or 0)
        if kind is None:
            kind = "server" if (status or 0) >= 500 else "bad_request"
        if kind == "bad_request" and _TOO_LONG.search(text or ""):
            kind = "context_length"
        message = f"{error_type}: {text}" if error_type and text else text or exc.message
        if status is None:
            message = f"the stream broke off with an error event: {message}"
        retry_after = seconds(exc.response.headers.get("retry-after")) if status else None
        return _failure(message, kind, where, model, status=status, retry_after=retry_after)
    if isinstance(exc, anthropic.APITimeoutError):
        return _failure("timed out (no reply in time)", "timeout", where, model)
    if isinstance(exc, anthropic.APIConnectionError):
        cause = exc.__cause__
        if cause is not None and _transport(cause):
            return _network(cause, where, model, started=started)
        failure = _failure(f"cannot connect: {exc.message}", "connection", where, model)
        failure.hint = where.running_hint()
        return failure
    if _transport(exc):
        return _network(exc, where, model, started=started)
    if isinstance(exc, TypeError) and "authentication" in str(exc):
        # the SDK found no credentials at all
        return _failure("no credentials to send", "auth", where, model)
    if isinstance(exc, anthropic.AnthropicError):
        return _failure(f"{type(exc).__name__}: {exc}", "bad_reply", where, model)
    return None


# --- Gemini -------------------------------------------------------------------------

_GOOGLE_KINDS: dict[str, LLMErrorKind] = {
    "UNAUTHENTICATED": "auth",
    "PERMISSION_DENIED": "auth",
    "NOT_FOUND": "not_found",
    "RESOURCE_EXHAUSTED": "rate_limit",
    "UNAVAILABLE": "overloaded",
    "INTERNAL": "server",
    "DEADLINE_EXCEEDED": "timeout",
    "INVALID_ARGUMENT": "bad_request",
    "FAILED_PRECONDITION": "bad_request",
}


def _retry_delay(details: Any, headers: Any) -> float | None:
    """``google.rpc.RetryInfo``'s ``retryDelay``, else a ``Retry-After`` header."""
    body = details.get("error", details) if isinstance(details, dict) else None
    listed = body.get("details") if isinstance(body, dict) else None
    for detail in listed if isinstance(listed, list) else []:
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("RetryInfo"):
            return seconds(detail.get("retryDelay"))
    return seconds(headers.get("retry-after")) if headers is not None else None


def _key_invalid(details: Any, text: str) -> bool:
    return "API_KEY_INVALID" in str(details) or "API key not valid" in text


def gemini_error(exc: BaseException, where: Where, model: str, *, started: bool) -> LLMError | None:
    """The ``LLMError`` for what Google's SDK (or its transport) raised; ``None`` if not its."""
    from google.genai import errors

    if isinstance(exc, errors.APIError):
        code = exc.code if isinstance(exc.code, int) else None
        state = exc.status if isinstance(exc.status, str) else None
        text = exc.message if isinstance(exc.message, str) else str(exc)
        kind = _GOOGLE_KINDS.get(state or "") or _BY_STATUS.get(code or 0)
        if kind is None:
            kind = "server" if (code or 0) >= 500 else "bad_request"
        if kind == "bad_request" and _key_invalid(exc.details, text):
            kind = "auth"
        elif kind == "bad_request" and _TOO_LONG.search(text):
            kind = "context_length"
        headers = getattr(exc.response, "headers", None)
        retry_after = _retry_delay(exc.details, headers) if kind in RETRYABLE else None
        message = f"{state}: {text}" if state else text
        if started:
            message = f"the stream broke off with an error: {message}"
        status = code if code is not None and code >= 400 else None
        return _failure(message, kind, where, model, status=status, retry_after=retry_after)
    if _transport(exc):
        return _network(exc, where, model, started=started)
    if isinstance(exc, errors.UnknownApiResponseError):
        return _failure(f"the reply is not Gemini's JSON: {exc}", "bad_reply", where, model)
    return None
