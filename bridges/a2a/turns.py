"""``SendMessage`` on a session: decide what the message is, check it, then do it once.

A message is, in this order (specs/a2a.md, "Messages"):

1. a retry of the message that created its context: the first task again;
2. a follow-up already received (its ``messageId`` is in the session's
   receipts): the same task again, nothing sent twice;
3. our extension's resume (``metadata.helix.op == "resume"``);
4. an answer, when the session waits for people or the message names a
   ``toolCallId``;
5. a follow-up turn: a new task when the last one ended, else queued into
   the task under way (the same task).

A message with no context (or a context no session has yet) creates the
session: its id is the ``contextId`` when the client chose one, else derived
from the ``messageId``, so a retried first message never starts two.
Nothing changes until the whole message has been checked.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from a2a.types import SendMessageRequest
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from helix_agents import RemoteAgentTransport, SessionState
from helix_agents.errors import AgentServerError
from helix_agents.events import Principal
from helix_agents.hitl.routing import send_approval
from helix_agents.log import pending_inputs, project_state
from helix_agents.protocol import (
    RemoteMessageRequest,
    RemoteResumeRequest,
    RemoteStartRequest,
    checked_session_id,
    message_from_input,
)
from helix_agents.tracing import trace_context_from_headers

from .inbound import Answer, Incoming, answers_of, read_message
from .streams import Opened
from .tasks import MESSAGE_ID_KEY, SessionTasks, split_task_id
from .wire import TERMINAL_STATES, a2a_error, metadata_of, safe_id

__all__ = ["A2A_CONTEXT_KEY", "SessionLookup", "reachable", "send"]

A2A_CONTEXT_KEY = "a2a.context"
"""Session metadata set on sessions an A2A message created (they stay reachable over A2A)."""

SessionLookup = Callable[[str], Awaitable[list[Any]]]
"""Reads a session's log."""


def reachable(tasks: SessionTasks, agent_type: str | None) -> bool:
    """Whether an A2A endpoint for ``agent_type`` (None: the root one) may touch this session.

    Its agent type must be the endpoint's, and it must be a top-level session
    or one an A2A message created (a child of another tree is not a context).
    """
    if agent_type is not None and tasks.agent_type != agent_type:
        return False
    return tasks.parent_session_id is None or tasks.metadata.get(A2A_CONTEXT_KEY) == "1"


@dataclass(frozen=True)
class _Sender:
    """What a message is sent with: the session's target, its store, the caller's context."""

    target: RemoteAgentTransport
    read: SessionLookup
    headers: Mapping[str, str]
    caller: Principal | None = None


def _parent_fields(helix: dict[str, Any]) -> dict[str, Any]:
    """The parent linkage our extension sends with a first message, checked."""
    fields: dict[str, Any] = {}
    for key, name in (
        ("parentSessionId", "parent_session_id"),
        ("rootSessionId", "root_session_id"),
        ("parentToolCallId", "parent_tool_call_id"),
    ):
        value = helix.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise InvalidParamsError(f"metadata.helix.{key} must be a string")
        fields[name] = value if key == "parentToolCallId" else checked_session_id(value)
    owner = helix.get("owner")
    if owner is not None:  # the parent's owner (specs/auth.md): the gate decides if it may
        try:
            fields["owner"] = msgspec.convert(owner, Principal)
        except msgspec.ValidationError as exc:
            raise InvalidParamsError(f"metadata.helix.owner: {exc}") from exc
    ancestors = helix.get("ancestors")
    if ancestors is not None:
        if not isinstance(ancestors, list) or not all(isinstance(a, str) for a in ancestors):
            raise InvalidParamsError("metadata.helix.ancestors must be a list of session ids")
        fields["ancestors"] = [checked_session_id(a) for a in ancestors]
    return fields


def derived_session_id(agent_type: str, message_id: str, caller: Principal | None = None) -> str:
    """The session id of a context created by a message without a ``contextId``.

    With a ``caller`` (an identity that names someone, specs/auth.md) the id is
    the caller's own: two tenants' clients using the same message id never meet.
    """
    key = f"{agent_type}\0{message_id}"
    if caller is not None:
        key += f"\0{caller.tenant or ''}\0{caller.user or ''}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    return f"a2a-{digest}"


async def send(
    params: SendMessageRequest,
    *,
    target: RemoteAgentTransport,
    read: SessionLookup,
    headers: Mapping[str, str],
    agent_type: str | None,
    choose_agent: Callable[[str | None, dict[str, Any]], Awaitable[str]],
    caller: Principal | None = None,
) -> Opened:
    """Carry out ``params`` on its session (see the module); where its stream begins.

    ``choose_agent(endpoint agent, the message's metadata)`` names (and checks) the
    agent type of a new context. Raises A2A errors only.
    """
    message = params.message
    content = read_message(message)
    metadata = metadata_of(message.metadata)
    found = metadata.get("helix")
    helix: dict[str, Any] = found if isinstance(found, dict) else {}
    sender = _Sender(target, read, headers, caller)
    try:
        session_id, log = await _session_of(params, sender, agent_type)
        if not log:
            chosen = await choose_agent(agent_type, metadata)
            return await _start(sender, session_id, chosen, content, message.message_id, helix)
        return await _continue(sender, params, session_id, log, content, helix, agent_type)
    except AgentServerError as exc:
        raise a2a_error(exc) from exc  # tasks are looked up here: a NOT_FOUND is not one


async def _session_of(
    params: SendMessageRequest, sender: _Sender, agent_type: str | None
) -> tuple[str, list[Any]]:
    message = params.message
    if message.task_id:
        found = split_task_id(message.task_id)
        if found is None:
            raise TaskNotFoundError(f"task {message.task_id!r} not found")
        session_id = found[0]
        if message.context_id and message.context_id != session_id:
            raise InvalidParamsError(
                f"context {message.context_id!r} is not the context of task {message.task_id!r}"
            )
        log = await sender.read(session_id)
        if not log:
            raise TaskNotFoundError(f"task {message.task_id!r} not found")
        return session_id, log
    if message.context_id:
        try:
            session_id = checked_session_id(message.context_id)
        except AgentServerError as exc:
            raise InvalidParamsError(f"contextId is not usable here: {exc.message}") from exc
        return session_id, await sender.read(session_id)
    if agent_type is None:
        return "", []  # the agent is chosen first; the id is derived from it below
    session_id = derived_session_id(agent_type, message.message_id, sender.caller)
    return session_id, await sender.read(session_id)


async def _start(
    sender: _Sender,
    session_id: str,
    agent_type: str,
    content: Incoming,
    message_id: str,
    helix: dict[str, Any],
) -> Opened:
    if not session_id:
        session_id = derived_session_id(agent_type, message_id, sender.caller)
        if await sender.read(session_id):  # a retried first message at the root endpoint
            return await _first_task(sender, session_id)
    data = content.start_input()
    texts = "\n".join(content.texts).strip()
    request = RemoteStartRequest(
        session_id=session_id,
        agent_type=agent_type,
        message=texts if texts else message_from_input(data),
        input=data,
        metadata={MESSAGE_ID_KEY: message_id, A2A_CONTEXT_KEY: "1"},
        trace_context=trace_context_from_headers(sender.headers),
        **_parent_fields(helix),
    )
    response = await sender.target.start(request)
    return await _opened_by_run(sender, session_id, response.run_id, new=True)


async def _first_task(sender: _Sender, session_id: str) -> Opened:
    log = await sender.read(session_id)
    tasks = SessionTasks(session_id).apply_all(log)
    first = next(iter(tasks.tasks.values()))
    return Opened(session_id, first.id, first.opened_seq, first.opened_seq)


async def _opened_by_run(sender: _Sender, session_id: str, run_id: str, *, new: bool) -> Opened:
    """The stream of the task run ``run_id`` belongs to: from its opening if ``new``."""
    log = await sender.read(session_id)
    tasks = SessionTasks(session_id).apply_all(log)
    task = tasks.task_of_run(run_id) or tasks.current
    assert task is not None
    at = task.opened_seq if new else tasks.last_seq
    return Opened(session_id, task.id, at, at)


async def _continue(
    sender: _Sender,
    params: SendMessageRequest,
    session_id: str,
    log: list[Any],
    content: Incoming,
    helix: dict[str, Any],
    agent_type: str | None,
) -> Opened:
    message = params.message
    tasks = SessionTasks(session_id).apply_all(log)
    if not reachable(tasks, agent_type):
        if message.task_id:
            raise TaskNotFoundError(f"task {message.task_id!r} not found")
        raise InvalidParamsError(f"context {session_id!r} is not a context of this agent")
    named = tasks.task(message.task_id) if message.task_id else None
    if message.task_id and named is None:
        raise TaskNotFoundError(f"task {message.task_id!r} not found")
    if tasks.metadata.get(MESSAGE_ID_KEY) == message.message_id:
        return await _first_task(sender, session_id)
    state = project_state(log)
    helix_id = safe_id(message.message_id, "a2a-")
    if helix_id in state.message_ids:
        return await _follow_up(sender, session_id, content, helix_id)
    if helix.get("op") == "resume":
        text = "\n".join(content.texts).strip() or None
        response = await sender.target.resume(
            RemoteResumeRequest(session_id=session_id, message=text)
        )
        return await _opened_by_run(sender, session_id, response.run_id, new=True)
    waiting = pending_inputs(state) if state.status == "paused" else []
    names_call = any(isinstance(v, dict) and "toolCallId" in v for v in content.data)
    if named is not None and named is not tasks.current:
        raise UnsupportedOperationError(
            f"task {named.id!r} has ended; send a new message in its context without a taskId"
        )
    if waiting or names_call:
        return await _answer(sender, session_id, state, answers_of(content, waiting))
    if named is not None and named.state in TERMINAL_STATES:
        raise UnsupportedOperationError(
            f"task {named.id!r} has ended; send a new message in its context without a taskId"
        )
    return await _follow_up(sender, session_id, content, helix_id)


async def _follow_up(
    sender: _Sender, session_id: str, content: Incoming, message_id: str
) -> Opened:
    response = await sender.target.send_message(
        RemoteMessageRequest(session_id=session_id, message=content.text(), message_id=message_id)
    )
    return await _opened_by_run(sender, session_id, response.run_id, new=not response.queued)


async def _answer(
    sender: _Sender, session_id: str, state: SessionState, answers: list[Answer]
) -> Opened:
    # An answer to a session that has ended is the service's to judge, as over our
    # HTTP: the same answer again is taken (nothing resumes), another is refused.
    resumed = False
    for answer in answers:
        if answer.kind == "approval":
            response = await send_approval(
                sender.target,
                session_id,
                answer.tool_call_id,
                answer.approved,
                answer.reason,
                answer.decided_by,
            )
        else:
            response = await sender.target.submit_tool_result(
                session_id, answer.tool_call_id, answer.result, answer.error
            )
        resumed = resumed or response.resumed
    log = await sender.read(session_id)
    tasks = SessionTasks(session_id).apply_all(log)
    assert tasks.current is not None
    at = tasks.last_seq
    return Opened(session_id, tasks.current.id, at, at, extra={"resumed": resumed})
