"""``SessionRequestHandler``: the a2a-sdk ``RequestHandler`` that serves helix sessions.

The SDK's JSON-RPC dispatcher parses and answers requests (its errors are
A2A's own); this handler maps each method onto sessions: messages through
``turns.py``, tasks and streams read from the log (``tasks.py``,
``streams.py``), cancel as an interrupt. Writes go through the gateway's
target (an ``AgentServer`` or a fleet's transport), reads through its store.

The endpoint's agent type is in the call context (``state["agent_type"]``,
set from the path; None at the root endpoint, which serves every agent).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.events import Event as A2AEvent
from a2a.server.request_handlers import RequestHandler
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.proto_utils import validate_proto_required_fields
from a2a.utils.task import apply_history_length, validate_history_length, validate_page_size

from helix_agents import EventStore, RemoteAgentTransport
from helix_agents._aio import closing_iter
from helix_agents.auth import (
    IDENTITY_KEY,
    Gate,
    GuardedTransport,
    Identity,
)
from helix_agents.errors import AgentServerError, UsageError
from helix_agents.log.session_list import SessionCatalog

from .streams import Opened, current_snapshot, fold, task_events, wait_for_end
from .tasks import SessionTasks, TaskRecord, split_task_id
from .turns import reachable, send
from .wire import FROM_SEQUENCE_HEADER, TERMINAL_STATES, a2a_error, metadata_of

__all__ = ["OUTPUT_MODES", "SessionRequestHandler"]

log = logging.getLogger("helix_agents.a2a")

OUTPUT_MODES = ("text/plain", "application/json")
"""What the served agents answer with: text, and JSON data (typed outputs)."""

_ACCEPTED = {*OUTPUT_MODES, "text", "data", "*/*", "text/*", "application/*"}
_DEFAULT_PAGE = 50

ChooseAgent = Callable[[str | None, dict[str, Any]], Awaitable[str]]


def _agent_type(context: ServerCallContext) -> str | None:
    found = context.state.get("agent_type")
    return found if isinstance(found, str) else None


def _identity(context: ServerCallContext) -> Identity:
    """The caller's identity (the gateway's ``Endpoints.rpc`` put it in the context)."""
    found = context.state.get(IDENTITY_KEY)
    if not isinstance(found, Identity):  # never so behind the gateway: refuse, never open
        raise InternalError("no identity for this request")
    return found


def _headers(context: ServerCallContext) -> dict[str, str]:
    found = context.state.get("headers")
    return dict(found) if isinstance(found, dict) else {}


def _translated(exc: Exception, *, task: bool = False) -> A2AError:
    """The A2A error for a failure inside the handler; unexpected ones are logged."""
    if isinstance(exc, A2AError):
        return exc
    if isinstance(exc, AgentServerError):
        return a2a_error(exc, task=task)
    if isinstance(exc, UsageError):
        return InvalidParamsError(str(exc))
    log.exception("A2A request failed", exc_info=exc)
    return InternalError("internal error (logged by the server)")


class SessionRequestHandler(RequestHandler):
    """Serves A2A's methods on the sessions behind ``target`` (see the module).

    Args:
        target: where sessions are started and steered (``AgentServer``, a fleet).
        store: where their logs are read.
        choose_agent: names and checks the agent of a new context.
        cancel_wait: seconds ``CancelTask`` waits for the run to stop.
    """

    def __init__(
        self,
        target: RemoteAgentTransport,
        store: EventStore,
        choose_agent: ChooseAgent,
        gate: Gate,
        *,
        cancel_wait: float = 10.0,
    ) -> None:
        self._target = target
        self._store = store
        self._choose_agent = choose_agent
        self._gate = gate
        self._cancel_wait = cancel_wait

    def _read_for(self, identity: Identity) -> Callable[[str], Awaitable[list[Any]]]:
        """The logs ``identity`` may see: another tenant's session reads as none."""

        async def read(session_id: str) -> list[Any]:
            log_ = list(await self._store.read(session_id))
            if log_ and not identity.owns(getattr(log_[0], "owner", None)):
                return []
            return log_

        return read

    async def _opened(self, params: SendMessageRequest, context: ServerCallContext) -> Opened:
        validate_proto_required_fields(params)
        config = params.configuration
        validate_history_length(config)
        if config.HasField("task_push_notification_config"):
            raise PushNotificationNotSupportedError()
        modes = set(config.accepted_output_modes)
        if modes and not modes & _ACCEPTED:
            raise ContentTypeNotSupportedError(
                f"this agent answers with {', '.join(OUTPUT_MODES)}; the client accepts none"
            )
        identity = _identity(context)
        return await send(
            params,
            target=GuardedTransport(self._gate, identity, self._target),
            read=self._read_for(identity),
            headers=_headers(context),
            agent_type=_agent_type(context),
            choose_agent=self._choose_agent,
            caller=identity.principal,
        )

    async def _found(
        self, task_id: str, context: ServerCallContext, *, light: bool = False
    ) -> tuple[SessionTasks, TaskRecord]:
        """The session fold (``light``: without text) and the task ``task_id``;
        ``TaskNotFoundError`` if not ours. The log is folded a page at a time."""
        ids = split_task_id(task_id)
        if ids:
            _, owner = await self._gate.owner(ids[0])  # a missing one is not found below
            if not _identity(context).owns(owner):
                raise TaskNotFoundError(f"task {task_id!r} not found")
        tasks = await fold(self._store, ids[0], light=light) if ids else SessionTasks("")
        task = tasks.task(task_id)
        if task is None or not reachable(tasks, _agent_type(context)):
            raise TaskNotFoundError(f"task {task_id!r} not found")
        return tasks, task

    # --- messages -----------------------------------------------------------------

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        """``SendMessage``: carry the message out; the task once it ends or waits (or at once)."""
        try:
            opened = await self._opened(params, context)
            if params.configuration.return_immediately:
                task = await current_snapshot(
                    self._store, opened.session_id, opened.task_id, opened.extra
                )
            else:
                task = await self._until_end(opened)
        except Exception as exc:
            raise _translated(exc) from exc
        return apply_history_length(task, params.configuration)

    async def _until_end(self, opened: Opened) -> Task:
        async with closing_iter(task_events(self._store, opened)) as events:
            async for _ in events:
                pass
        return await current_snapshot(self._store, opened.session_id, opened.task_id, opened.extra)

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[A2AEvent, None]:
        """``SendStreamingMessage``: carry the message out, then stream its task."""
        try:
            opened = await self._opened(params, context)
        except Exception as exc:
            raise _translated(exc) from exc
        async for event in self._stream(opened, params.configuration):
            yield event

    async def _stream(self, opened: Opened, config: Any = None) -> AsyncIterator[A2AEvent]:
        try:
            async with closing_iter(task_events(self._store, opened)) as events:
                async for event in events:
                    if isinstance(event, Task) and config is not None:
                        event = apply_history_length(event, config)
                    yield event
        except Exception as exc:
            raise _translated(exc) from exc

    # --- tasks --------------------------------------------------------------------

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        """``GetTask``: the task as the log has it now."""
        validate_proto_required_fields(params)
        validate_history_length(params)
        try:
            tasks, task = await self._found(params.id, context)
        except Exception as exc:
            raise _translated(exc, task=True) from exc
        return apply_history_length(tasks.snapshot(task), params)

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        """``ListTasks``: a context's tasks, or the tasks of a page of this agent's contexts."""
        validate_history_length(params)
        if params.HasField("page_size"):
            validate_page_size(params.page_size)
        size = params.page_size if params.HasField("page_size") else _DEFAULT_PAGE
        agent_type = _agent_type(context)
        identity = _identity(context)
        try:
            if params.context_id:
                found = await self._context_tasks(params.context_id, agent_type, identity)
                start = _offset(params.page_token)
                page, token = found[start : start + size], ""
                if start + size < len(found):
                    token = str(start + size)
            else:
                catalog = await SessionCatalog(self._store).page(
                    agent_type=agent_type,
                    top_level=True,
                    limit=size,
                    cursor=params.page_token or None,
                    tenant=self._gate.tenant_filter(identity),
                )
                page = []
                for entry in catalog.sessions:
                    page.extend(await self._context_tasks(entry.session_id, agent_type, identity))
                token = catalog.next_cursor or ""
        except Exception as exc:
            raise _translated(exc) from exc
        chosen = [apply_history_length(task, params) for task in page if _listed(task, params)]
        if not params.include_artifacts:
            for task in chosen:
                task.ClearField("artifacts")
        return ListTasksResponse(
            tasks=chosen, next_page_token=token, page_size=size, total_size=len(chosen)
        )

    async def _context_tasks(
        self, context_id: str, agent_type: str | None, identity: Identity
    ) -> list[Task]:
        if split_task_id(f"{context_id}~x") is None:
            return []
        tasks = SessionTasks(context_id).apply_all(await self._read_for(identity)(context_id))
        if not tasks.tasks or not reachable(tasks, agent_type):
            return []
        return [tasks.snapshot(task) for task in tasks.tasks.values()]

    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        """``CancelTask``: interrupt the session (it stays resumable by a new message).

        Our extension's ``metadata.helix``: ``op: "abort"`` aborts it instead (it
        fails for good), and ``reason`` is the stop's reason.
        """
        validate_proto_required_fields(params)
        try:
            tasks, task = await self._found(params.id, context, light=True)
            if task.state in TERMINAL_STATES or task is not tasks.current:
                raise TaskNotCancelableError(f"task {params.id!r} has already ended")
            op, reason = _stop_of(params)
            guarded = GuardedTransport(self._gate, _identity(context), self._target)
            try:
                if op == "abort":
                    await guarded.abort(tasks.session_id, reason)
                else:
                    await guarded.interrupt(tasks.session_id, reason)
            except AgentServerError as exc:
                if exc.code != "ALREADY_COMPLETED":
                    raise
                raise TaskNotCancelableError(f"task {params.id!r} has already ended") from exc
            await wait_for_end(self._store, tasks.session_id, task.id, self._cancel_wait)
            tasks, task = await self._found(params.id, context)
        except Exception as exc:
            raise _translated(exc, task=True) from exc
        return tasks.snapshot(task)

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[A2AEvent, None]:
        """``SubscribeToTask``: the task as it stands, then its events, without a gap.

        With our extension's ``Helix-From-Sequence: N`` header the events are
        those after log position ``N`` (a replay), and an ended task may be
        subscribed to: the replay then closes with its final status.
        """
        validate_proto_required_fields(params)
        try:
            tasks, task = await self._found(params.id, context, light=True)
            replay_from = _from_sequence(_headers(context))
            if task.state in TERMINAL_STATES and replay_from is None:
                raise UnsupportedOperationError(
                    f"task {params.id!r} is in final state {TaskState.Name(task.state)}"
                )
            at = tasks.last_seq
            # A replay from at or past the snapshot is a plain subscription (nothing to replay).
            after = at if replay_from is None else min(replay_from, at)
            opened = Opened(tasks.session_id, task.id, at, after)
        except Exception as exc:
            raise _translated(exc, task=True) from exc
        async for event in self._stream(opened):
            yield event

    # --- what this bridge does not offer -------------------------------------------

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        """Push notifications are not offered (the card says so)."""
        raise PushNotificationNotSupportedError()

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        """Push notifications are not offered."""
        raise PushNotificationNotSupportedError()

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        """Push notifications are not offered."""
        raise PushNotificationNotSupportedError()

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        """Push notifications are not offered."""
        raise PushNotificationNotSupportedError()

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        """There is no extended card: the public card is the whole card."""
        raise ExtendedAgentCardNotConfiguredError()


def _stop_of(params: CancelTaskRequest) -> tuple[str, str | None]:
    """The stop a ``CancelTask`` asks: (``interrupt`` or ``abort``, the reason)."""
    found = metadata_of(params.metadata).get("helix") if params.HasField("metadata") else None
    helix: dict[str, Any] = found if isinstance(found, dict) else {}
    op = helix.get("op", "interrupt")
    if op not in ("interrupt", "abort"):
        raise InvalidParamsError('metadata.helix.op of a CancelTask is "interrupt" or "abort"')
    if "reason" not in helix:
        return op, "canceled over A2A"
    reason = helix["reason"]
    if not isinstance(reason, str):
        raise InvalidParamsError("metadata.helix.reason must be a string")
    return op, reason


def _offset(token: str) -> int:
    if not token:
        return 0
    if not (token.isascii() and token.isdigit()) or len(token) > 9:
        raise InvalidParamsError(f"pageToken {token[:40]!r} is not one this server gave")
    return int(token)


def _listed(task: Task, params: ListTasksRequest) -> bool:
    if params.status and task.status.state != params.status:
        return False
    if params.HasField("status_timestamp_after"):
        return task.status.timestamp.ToNanoseconds() > params.status_timestamp_after.ToNanoseconds()
    return True


def _from_sequence(headers: dict[str, str]) -> int | None:
    raw = headers.get(FROM_SEQUENCE_HEADER.lower())
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 16:
        raise InvalidParamsError(f"{FROM_SEQUENCE_HEADER} must be an integer >= 0")
    return int(raw)
