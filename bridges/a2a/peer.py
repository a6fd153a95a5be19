"""``Peer``: one A2A agent as a2a-sdk's client reaches it, with its errors made ours.

It owns what every call to the agent shares: the card (read once), the
SDK's clients (one that sends without streaming, one that streams), the
headers asked for before each call, and the one place a2a-sdk's errors are
translated (:meth:`Peer.edge`): a peer's refusal becomes an
:class:`~helix_agents.errors.AgentServerError` (the helix code when the peer
sent one), an unreachable peer a :class:`~helix_agents.errors.TransportError`.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import anyio
import httpx
from a2a.client import (
    A2ACardResolver,
    A2AClientError,
    A2AClientTimeoutError,
    Client,
    ClientCallContext,
    ClientConfig,
    ClientFactory,
)
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
)
from a2a.utils.errors import A2AError

from helix_agents._aio import closing_iter
from helix_agents.errors import AgentServerError, TransportError, TransportTimeoutError
from helix_agents.transports import HeadersSource

from .wire import EXTENSION_URI, server_error, struct_of

__all__ = ["Peer"]


def _status_code(exc: BaseException) -> int | None:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, httpx.HTTPStatusError):
            return cause.response.status_code
        found = getattr(cause, "status_code", None)
        if isinstance(found, int):
            return found
        cause = cause.__cause__
    return None


class Peer:
    """An A2A agent reached with a2a-sdk's client (see the module).

    Args:
        url: the agent's base URL (its card is read from it on first use), or None.
        card: its card, instead of reading it.
        headers: headers for every call: a mapping, or a callable asked each time.
        timeout: seconds for connecting and for each read.
        http: the HTTP client the SDK's clients use.
    """

    def __init__(
        self,
        url: str | None,
        card: AgentCard | None,
        headers: HeadersSource | None,
        timeout: float,
        http: httpx.AsyncClient,
    ) -> None:
        self.url = url
        self.timeout = timeout
        self._card = card
        self._headers = headers
        self._http = http
        self._clients: tuple[Client, Client] | None = None
        self._lock = anyio.Lock()

    @contextmanager
    def edge(self, what: str) -> Iterator[None]:
        """Translate a2a-sdk's errors into ours for the call ``what``."""
        try:
            yield
        except A2AClientTimeoutError as exc:
            raise TransportTimeoutError(what, self.timeout) from exc
        except A2AClientError as exc:
            status = _status_code(exc)
            if status in (401, 403):
                raise AgentServerError("UNAUTHORIZED", f"{what}: {exc.message}") from exc
            if status == 404:
                raise AgentServerError("NOT_FOUND", f"{what}: {exc.message}") from exc
            if status is not None and 400 <= status < 500:
                raise AgentServerError("INVALID_REQUEST", f"{what}: {exc.message}") from exc
            raise TransportError(f"{what}: the A2A agent is unreachable: {exc.message}") from exc
        except A2AError as exc:
            raise server_error(exc) from exc

    async def _context(self, extra: Mapping[str, str] | None = None) -> ClientCallContext:
        source = self._headers
        supplied: Mapping[str, str] = {}
        if callable(source):
            produced = source()
            supplied = await produced if inspect.isawaitable(produced) else produced
        elif source is not None:
            supplied = source
        return ClientCallContext(
            service_parameters={**(extra or {}), **supplied}, timeout=self.timeout
        )

    async def resolved(self) -> tuple[AgentCard, Client, Client]:
        """The card, a sending client (no streaming) and a streaming client."""
        async with self._lock:
            if self._card is None:
                assert self.url is not None
                resolver = A2ACardResolver(self._http, self.url)
                context = await self._context()
                with self.edge(f"GET {self.url} agent card"):
                    self._card = await resolver.get_agent_card(
                        http_kwargs={"headers": dict(context.service_parameters or {})}
                    )
            if self._clients is None:
                sending = ClientFactory(
                    ClientConfig(streaming=False, polling=True, httpx_client=self._http)
                ).create(self._card)
                streaming = ClientFactory(
                    ClientConfig(streaming=True, httpx_client=self._http)
                ).create(self._card)
                self._clients = (sending, streaming)
            return self._card, *self._clients

    async def helix(self) -> bool:
        """Whether the agent declares our extension (it is a helix gateway)."""
        card, _, _ = await self.resolved()
        return any(ext.uri == EXTENSION_URI for ext in card.capabilities.extensions)

    async def send(
        self, message: Message, what: str, extra: Mapping[str, str] | None = None
    ) -> Task | Message:
        """``SendMessage`` with ``returnImmediately``: the task (or the message) it answers."""
        _, sending, _ = await self.resolved()
        request = SendMessageRequest(
            message=message, configuration=SendMessageConfiguration(return_immediately=True)
        )
        context = await self._context(extra)
        with self.edge(what):
            async for response in sending.send_message(request, context=context):
                return response.message if response.HasField("message") else response.task
        raise TransportError(f"{what}: the A2A agent answered nothing")

    async def get_task(self, task_id: str) -> Task:
        """``GetTask``."""
        _, sending, _ = await self.resolved()
        context = await self._context()
        with self.edge(f"GetTask {task_id}"):
            return await sending.get_task(GetTaskRequest(id=task_id), context=context)

    async def context_tasks(self, context_id: str) -> list[Task] | None:
        """``ListTasks`` of a context; None if the agent cannot list them."""
        _, sending, _ = await self.resolved()
        context = await self._context()
        try:
            with self.edge(f"ListTasks {context_id}"):
                found = await sending.list_tasks(
                    ListTasksRequest(context_id=context_id), context=context
                )
        except AgentServerError:
            return None
        return list(found.tasks)

    async def cancel(self, task_id: str, metadata: dict[str, Any] | None = None) -> None:
        """``CancelTask`` (``metadata``: the request's, our extension's stop and its reason)."""
        _, sending, _ = await self.resolved()
        context = await self._context()
        request = CancelTaskRequest(id=task_id)
        if metadata:
            request.metadata.CopyFrom(struct_of(metadata))
        with self.edge(f"CancelTask {task_id}"):
            await sending.cancel_task(request, context=context)

    async def subscribe(
        self, task_id: str, extra: Mapping[str, str] | None = None
    ) -> AsyncIterator[StreamResponse]:
        """``SubscribeToTask``: what the agent streams, errors translated."""
        _, _, streaming = await self.resolved()
        context = await self._context(extra)
        request = SubscribeToTaskRequest(id=task_id)
        with self.edge(f"SubscribeToTask {task_id}"):
            async with closing_iter(streaming.subscribe(request, context=context)) as responses:
                async for response in responses:
                    yield response
