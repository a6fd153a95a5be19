"""``HttpRemoteAgentTransport``: the :class:`~helix_agents.RemoteAgentTransport` over HTTP + SSE.

It speaks ``specs/http.md`` to a gateway (``helix_agents.server``) anywhere:
JSON requests, an SSE stream of transport events, errors as
``{"error", "code"}``, and retries of 5xx answers and network errors with
exponential backoff. httpx errors never leave this module: the server's
refusals are :class:`~helix_agents.errors.AgentServerError`, everything else a
:class:`~helix_agents.errors.TransportError`.
"""

from __future__ import annotations

import inspect
import logging
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Self

import anyio
import httpx
import msgspec

from helix_agents.branches.fork import ForkRequest, ForkResult
from helix_agents.errors import TransportError, TransportTimeoutError, UsageError
from helix_agents.protocol import (
    ChunkEvent,
    RemoteMessageRequest,
    RemoteMessageResponse,
    RemoteResumeRequest,
    RemoteStartRequest,
    RemoteStartResponse,
    RemoteStatusResponse,
    SubmitApprovalRequest,
    SubmitResponse,
    SubmitToolResultRequest,
    TransportEvent,
)
from helix_agents.retry import retrying, retrying_stream
from helix_agents.tracing import trace_context_from_headers

from ._http_wire import (
    decode,
    encode,
    event_of,
    server_error,
    start_decoder,
    status_decoder,
    submit_decoder,
)
from .bodies import SessionRequest
from .sse import SSEParser

__all__ = ["HeadersSource", "HttpRemoteAgentTransport"]

logger = logging.getLogger(__name__)

_message_decoder = msgspec.json.Decoder(RemoteMessageResponse)
_fork_decoder = msgspec.json.Decoder(ForkResult)

HeadersSource = Mapping[str, str] | Callable[[], Mapping[str, str] | Awaitable[Mapping[str, str]]]
"""Static headers, or a sync or async callable asked for them before every request."""


class HttpRemoteAgentTransport:
    """Reach agent sessions served by an HTTP gateway (``specs/http.md``).

    Use it as an async context manager, or call :meth:`aclose`, to close the
    HTTP client it created; a client passed in stays open (its owner closes it).

    Args:
        url: The gateway's root, path prefix included (``http://host:4000/agents``);
            route paths such as ``/start`` are appended to it.
        headers: Headers for every request (``Authorization``...): a mapping, or
            a sync or async callable called before every request, retries
            included, so a token can be refreshed. They win over ours.
        max_retries: Retries after the first try, for 5xx answers and network
            errors (a stream only until its first event); 4xx are never retried.
        retry_base_delay: Retry ``n`` (from 0) waits ``retry_base_delay * 2**n`` seconds.
        timeout: Seconds for connecting and for each read, a stream's reads
            included (the server's heartbeat keeps an idle stream alive).
        client: An ``httpx.AsyncClient`` to use instead of creating one.

    Raises:
        UsageError: If ``url`` is not an http(s) URL (or has a query or fragment),
            or ``max_retries`` is negative.
    """

    def __init__(
        self,
        url: str,
        *,
        headers: HeadersSource | None = None,
        max_retries: int = 3,
        retry_base_delay: float = 1.0,
        timeout: float = 30.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL as exc:
            raise UsageError(f"invalid agent server url {url!r}: {exc}") from exc
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise UsageError(f"the agent server url must be an http(s) URL, not {url!r}")
        if parsed.query or parsed.fragment:
            raise UsageError(f"the agent server url must have no query or fragment: {url!r}")
        if max_retries < 0:
            raise UsageError(f"max_retries must be >= 0, not {max_retries}")
        self.url = url.rstrip("/")
        self._headers = headers
        self._max_retries = max_retries
        self._retry_base_delay = retry_base_delay
        self._timeout = httpx.Timeout(timeout)
        self._timeout_seconds = timeout
        self._owns_client = client is None
        self._client = client if client is not None else httpx.AsyncClient(timeout=self._timeout)

    async def aclose(self) -> None:
        """Close the HTTP client if this transport created it; idempotent."""
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # --- the RemoteAgentTransport protocol ------------------------------------

    async def start(self, request: RemoteStartRequest) -> RemoteStartResponse:
        """``POST /start``: start a session; idempotent for the same id and request.

        Raises:
            AgentServerError: The server refused (``NOT_FOUND``, ``ALREADY_RUNNING``...).
            TransportError: It could not be reached, even after retries, or answered
                something unreadable (:class:`TransportTimeoutError` if it never answered).
        """
        # The W3C headers too, for proxies and instrumented servers (specs/otel.md).
        response = await self._send(
            "POST",
            "/start",
            encode(request),
            extra_headers=trace_context_from_headers(request.trace_context),
        )
        return decode(response, start_decoder)

    async def resume(self, request: RemoteResumeRequest) -> RemoteStartResponse:
        """``POST /resume``: resume an interrupted or paused session (errors as :meth:`start`)."""
        response = await self._send("POST", "/resume", encode(request))
        return decode(response, start_decoder)

    async def send_message(self, request: RemoteMessageRequest) -> RemoteMessageResponse:
        """``POST /message``: a follow-up message (errors as :meth:`start`, or ``SESSION_FAILED``).

        A request without ``message_id`` gets a fresh one here, so the
        retries of one call can never deliver the message twice.
        """
        if request.message_id is None:
            request = msgspec.structs.replace(request, message_id=f"msg-{uuid.uuid4().hex}")
        response = await self._send("POST", "/message", encode(request))
        return decode(response, _message_decoder)

    async def get_status(self, session_id: str) -> RemoteStatusResponse:
        """``GET /status``: the session's status (errors as :meth:`start`)."""
        response = await self._send("GET", "/status", params={"sessionId": session_id})
        return decode(response, status_decoder)

    async def interrupt(self, session_id: str, reason: str | None = None) -> None:
        """``POST /interrupt``: stop the session softly (errors as :meth:`start`)."""
        await self._send(
            "POST", "/interrupt", encode(SessionRequest(session_id=session_id, reason=reason))
        )

    async def abort(self, session_id: str, reason: str | None = None) -> None:
        """``POST /abort``: stop the session for good (errors as :meth:`start`)."""
        await self._send(
            "POST", "/abort", encode(SessionRequest(session_id=session_id, reason=reason))
        )

    async def submit_tool_result(
        self, session_id: str, tool_call_id: str, result: Any = None, error: str | None = None
    ) -> SubmitResponse:
        """``POST /submit-tool-result``: answer a client tool call (errors as :meth:`start`).

        ``result`` must be JSON-encodable. Retried like every call: an
        identical repeat is idempotent on the server.
        """
        request = SubmitToolResultRequest(
            session_id=session_id, tool_call_id=tool_call_id, result=result, error=error
        )
        response = await self._send("POST", "/submit-tool-result", encode(request))
        return decode(response, submit_decoder)

    async def submit_approval(
        self,
        session_id: str,
        tool_call_id: str,
        approved: bool,
        reason: str | None = None,
        *,
        decided_by: str | None = None,
    ) -> SubmitResponse:
        """``POST /submit-approval``: approve or deny a gated call (errors as :meth:`start`)."""
        request = SubmitApprovalRequest(
            session_id=session_id,
            tool_call_id=tool_call_id,
            approved=approved,
            reason=reason,
            decided_by=decided_by,
        )
        response = await self._send("POST", "/submit-approval", encode(request))
        return decode(response, submit_decoder)

    async def fork(self, request: ForkRequest) -> ForkResult:
        """``POST /fork``: fork a session on its server (specs/branches.md; errors as ``start``).

        Retried like every call: a repeat with the same ``new_session_id``
        answers the branch the first one wrote.
        """
        response = await self._send("POST", "/fork", encode(request))
        return decode(response, _fork_decoder)

    def stream(
        self, session_id: str, from_sequence: int = 0
    ) -> AsyncGenerator[TransportEvent, None]:
        """``GET /sse``: yield the chunks with sequence > ``from_sequence``, then ``end``/``error``.

        A stream that stops without ``end`` or ``error`` was dropped (the server
        closed it, or the network failed after the first event): check
        :meth:`get_status` and reconnect from the last sequence held. Before the
        first event, failures are retried like any call. To leave the loop
        early, cancel or iterate under ``contextlib.aclosing``: either closes the
        HTTP response at once, where a plain ``break`` leaves it to the garbage collector.

        Raises:
            AgentServerError: The server refused the stream (``NOT_FOUND``...).
            TransportError: It could not be reached, or sent an unreadable event.
        """
        params = {"sessionId": session_id, "fromSequence": str(from_sequence)}
        return retrying_stream(
            lambda: self._stream_once(session_id, params),
            retries=self._max_retries,
            base_delay=self._retry_base_delay,
            retry_if=_worth_retrying,
        )

    # --- plumbing -----------------------------------------------------------------

    def _url(self, path: str) -> str:
        return self.url + path

    async def _headers_for(self, ours: Mapping[str, str]) -> dict[str, str]:
        if self._client.is_closed:
            raise UsageError("the HTTP transport's client is closed")
        source = self._headers
        if source is None:
            return dict(ours)
        supplied: Mapping[str, str]
        if callable(source):
            produced = source()
            supplied = await produced if inspect.isawaitable(produced) else produced
        else:
            supplied = source
        return {**ours, **supplied}

    async def _send(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        params: Mapping[str, str] | None = None,
        extra_headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """One call, retried: its successful response, or the error it ended in."""
        url = self._url(path)
        ours = {"Accept": "application/json", **(extra_headers or {})}
        if body is not None:
            ours["Content-Type"] = "application/json"

        async def attempt() -> httpx.Response:
            try:
                response = await self._client.request(
                    method,
                    url,
                    content=body,
                    params=params,
                    headers=await self._headers_for(ours),
                    timeout=self._timeout,
                )
                return await _succeeded(response)
            except httpx.TransportError as exc:
                raise self._network_error(method, url, exc) from exc
            except httpx.HTTPError as exc:
                raise TransportError(f"{method} {url}: {exc!r}") from exc

        return await retrying(
            attempt,
            retries=self._max_retries,
            base_delay=self._retry_base_delay,
            retry_if=_worth_retrying,
        )

    async def _stream_once(
        self, session_id: str, params: Mapping[str, str]
    ) -> AsyncGenerator[TransportEvent, None]:
        """One try at ``GET /sse``; a network failure after the first event ends it quietly."""
        url = self._url("/sse")
        received = False
        try:
            async with self._client.stream(
                "GET",
                url,
                params=params,
                headers=await self._headers_for({"Accept": "text/event-stream"}),
                timeout=self._timeout,
            ) as response:
                await _succeeded(response)
                parser = SSEParser()
                chunks = response.aiter_bytes()
                async for data in chunks:
                    for message in parser.feed(data):
                        event = event_of(message, url)
                        if event is None:
                            continue
                        received = True
                        if not isinstance(event, ChunkEvent):
                            # The stream ends here: read the response to its end
                            # first, so that its connection goes back to the pool
                            # for the next request instead of being closed.
                            await _drain(chunks)
                            yield event
                            return
                        yield event
        except httpx.TransportError as exc:
            if received:
                logger.debug("stream %s of %s broke off: %r", url, session_id, exc)
                return
            raise self._network_error("GET", url, exc) from exc
        except httpx.HTTPError as exc:
            raise TransportError(f"GET {url}: {exc!r}") from exc

    def _network_error(self, method: str, url: str, exc: httpx.TransportError) -> TransportError:
        if isinstance(exc, httpx.TimeoutException):
            return TransportTimeoutError(f"{method} {url}", self._timeout_seconds)
        return TransportError(f"{method} {url}: agent server unreachable: {exc!r}")


_DRAIN_WAIT = 0.05  # seconds a finished stream's end of body is waited for


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    """Read what is left of a body whose stream has ended (bounded: else it is dropped)."""
    with anyio.move_on_after(_DRAIN_WAIT):
        async for _ in chunks:
            pass


async def _succeeded(response: httpx.Response) -> httpx.Response:
    """``response`` if it is a 2xx; else the server's refusal, caused by httpx's status error."""
    try:
        return response.raise_for_status()
    except httpx.HTTPStatusError as exc:
        await response.aread()
        raise server_error(response) from exc


def _worth_retrying(exc: Exception) -> bool:
    """A network failure or a 5xx answer; never a 4xx, nor anything unreadable."""
    cause = exc.__cause__
    if isinstance(cause, httpx.HTTPStatusError):
        return cause.response.status_code >= 500
    return isinstance(cause, httpx.TransportError)
