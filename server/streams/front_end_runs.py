"""Runs a front end asks for: ``POST /sse?format=ag-ui`` and ``POST /sse?format=ai-sdk``.

The body is AG-UI's ``RunAgentInput`` (what ``HttpAgent`` sends; its
``threadId`` is the session) or what the AI SDK's ``DefaultChatTransport``
sends for ``useChat`` (``{id, messages, trigger}``; its ``id`` is the
session), whichever it fits, under either format: ``format`` chooses the
stream, the body's shape how it is read. A new session is started (agent
type from ``?agentType=``, or ``forwardedProps.agentType`` / the body's
``agentType``) with the last user message; a known one's new message is the
body's last, if the user said it: a completed session takes it as a
follow-up turn, any other is resumed with it (a known session given no new
text is a front end reattaching: it gets its current run, an interrupted
one resumed with no message); answers to the tree's pending inputs (AG-UI
``resume`` entries, or the ``tool`` messages ending ``messages``; the AI
SDK's tool outputs on the last assistant message) are submitted instead. The answer streams that
run only, under the client's ids, and ends with it or when the tree waits for
people again. Every check comes before anything changes: a bad request
answers ``{"error", "code"}`` and touches nothing (specs/streams.md).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal, TypeVar

import anyio
import msgspec

from helix_agents import PendingInput, RemoteAgentTransport
from helix_agents._aio import closing_iter
from helix_agents.errors import AgentServerError
from helix_agents.events import Multitask
from helix_agents.hitl.routing import send_approval
from helix_agents.ids import SessionId
from helix_agents.protocol import (
    RemoteMessageRequest,
    RemoteResumeRequest,
    RemoteStartRequest,
    RemoteStatusResponse,
    TransportEvent,
    checked_decided_by,
    checked_multitask,
)
from helix_agents.server.edge import (
    MAX_JSON_DEPTH,
    checked_depth,
    checked_id,
    checked_start,
    decode,
)
from helix_agents.server.streams.front_end import ProjectedStreamResponse, StreamFormat

__all__ = ["ChatRequest", "ResumeEntry", "RunAgentInput", "decode_run", "run_front_end"]

StreamOpener = Callable[[SessionId, int], Awaitable[AsyncIterator[TransportEvent]]]

A = TypeVar("A")

_TURN_POLL = 0.05
"""Seconds between looks for the turn a message mid-run waits for, once the run ended."""

_TURN_WAIT = 30.0
"""Seconds that turn may take to begin after the run (else the session's current run streams)."""

RESULT_DEPTH = MAX_JSON_DEPTH - 1
"""Levels a tool message's decoded content may nest: a result in a ``/submit-tool-result``
body (one level down) may nest no deeper, so every transport takes it."""


class ResumeEntry(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """An answer to one interrupt of the previous run."""

    interrupt_id: str
    status: Literal["resolved", "cancelled"]
    payload: Any = None


class RunAgentInput(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The fields of AG-UI's ``RunAgentInput`` that a run here reads (others are ignored)."""

    thread_id: str
    run_id: str
    messages: list[dict[str, Any]] = []
    state: Any = None
    resume: list[ResumeEntry] = []
    forwarded_props: Any = None


class ChatRequest(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """What ``DefaultChatTransport.sendMessages`` posts (the fields a run here reads)."""

    id: str
    messages: list[dict[str, Any]] = []
    trigger: str = "submit-message"
    agent_type: str | None = None
    multitask: str | None = None
    """What a message to a running session does (the transport's ``body`` option)."""


def _said(message: Any) -> bool:
    return isinstance(message, dict) and message.get("role") == "user"


def _fits(run: RunAgentInput | ChatRequest) -> bool:
    """Whether ``run`` has something to run with: a user message (or, AG-UI, answers)."""
    if isinstance(run, RunAgentInput) and run.resume:
        return True
    return any(_said(message) for message in run.messages)


def decode_run(raw: bytes, fmt: StreamFormat) -> RunAgentInput | ChatRequest:
    """``POST /sse``'s body as the shape it fits, the format's own shape tried first.

    ``INVALID_REQUEST`` when it fits neither: the format's own decoding error,
    or, when it decodes but has nothing to run with, that it has no user message.
    """
    own: type[RunAgentInput | ChatRequest] = RunAgentInput if fmt == "ag-ui" else ChatRequest
    other: type[RunAgentInput | ChatRequest] = ChatRequest if fmt == "ag-ui" else RunAgentInput
    refusal: AgentServerError | None = None
    for kind in (own, other):
        try:
            run = decode(raw, kind)
        except AgentServerError as exc:
            refusal = refusal or exc
            continue
        if _fits(run):
            return run
        refusal = AgentServerError("INVALID_REQUEST", "messages: no user message to run with")
    assert refusal is not None
    raise refusal


def _user_count(messages: list[dict[str, Any]]) -> int:
    """How many messages of the body the user said."""
    return sum(1 for message in messages if _said(message))


def _user_text(messages: list[dict[str, Any]]) -> str:
    """A new session's message: the last user message's text (see :func:`_text`)."""
    message = next((message for message in reversed(messages) if _said(message)), None)
    if message is None:  # decode_run lets no such run through; a caller's bug is still a 400
        raise AgentServerError("INVALID_REQUEST", "messages: no user message to run with")
    return _text(message)


def _new_text(messages: list[dict[str, Any]]) -> str:
    """A known session's new message: the body's last message if the user said it, else none.

    A body ending in anything else (the assistant's reply, tool results that
    answer nothing pending) says nothing new: the front end is reattaching.
    """
    return _text(messages[-1]) if messages and _said(messages[-1]) else ""


def _text(message: dict[str, Any]) -> str:
    """A user message's text: a string ``content``, or its text parts joined (else empty)."""
    content = message.get("content", message.get("parts"))
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        )
    return ""


Decision = tuple[bool, str | None, str | None]
"""An approval's answer: approved, reason, who decided."""


def _decision(entry: ResumeEntry) -> Decision:
    """An approval's answer: ``true``/``false`` or ``{approved, reason?, decidedBy?}``;
    cancelled denies. A ``decidedBy`` that is not a fit name is ``INVALID_REQUEST``."""
    if entry.status == "cancelled":
        return False, "cancelled", None
    payload = entry.payload
    if isinstance(payload, bool):
        return payload, None, None
    if isinstance(payload, dict) and isinstance(payload.get("approved"), bool):
        reason = payload.get("reason")
        decided_by = checked_decided_by(payload.get("decidedBy"))
        return payload["approved"], reason if isinstance(reason, str) else None, decided_by
    raise AgentServerError(
        "INVALID_REQUEST",
        f"resume {entry.interrupt_id!r}: an approval's payload is true, false "
        "or {approved: bool, reason?, decidedBy?}",
    )


async def _status(transport: RemoteAgentTransport, session_id: str) -> RemoteStatusResponse | None:
    try:
        return await transport.get_status(session_id)
    except AgentServerError as exc:
        if exc.code == "NOT_FOUND":
            return None
        raise


async def _start_or_resume(
    transport: RemoteAgentTransport,
    session_id: str,
    status: RemoteStatusResponse | None,
    message: str,
    agent_type: Any,
    state: dict[str, Any] | None = None,
    multitask: Any = None,
    said: int = 1,
) -> int:
    """Start a new session (``agent_type`` required), or go on with a known one with ``message``.

    A completed session takes it as a follow-up turn (its conversation kept:
    a chat's next message); a running one, as its ``multitask`` choice says
    (:func:`_mid_run`), when the body holds more than one user message
    (``said``: one is the session's first posted again, a retry or a reload);
    any other known one is resumed with it. A known
    session given no text shows its current run (:func:`_current_run`).
    Returns the cursor the answer streams from.
    """
    choice = checked_multitask(multitask)
    if status is not None:
        if not message.strip():
            return await _current_run(transport, session_id, status)
        if status.status == "running" and said > 1:
            return await _mid_run(transport, session_id, status, message, choice)
        if status.status == "completed":
            await transport.send_message(
                RemoteMessageRequest(session_id=session_id, message=message)
            )
        else:
            await transport.resume(RemoteResumeRequest(session_id=session_id, message=message))
        return status.latest_sequence
    if not isinstance(agent_type, str) or not agent_type:
        raise AgentServerError(
            "NOT_FOUND",
            f"session {session_id!r} not found (to start it, name an agentType: "
            "?agentType= or one in the body)",
        )
    request = RemoteStartRequest(
        session_id=session_id, agent_type=agent_type, message=message, state=state
    )
    await transport.start(checked_start(request))
    return 0


async def _mid_run(
    transport: RemoteAgentTransport,
    session_id: str,
    status: RemoteStatusResponse,
    message: str,
    multitask: Multitask | None,
) -> int:
    """A message while the session runs (a response streams): sent with its ``multitask``.

    ``steer``: the answer streams the rest of the run that takes it in;
    ``enqueue``, ``interrupt``, ``rollback``: the turn it gets, once the run
    under way ended (the cursor waits for it); ``reject``: ``SESSION_BUSY``.
    """
    answer = await transport.send_message(
        RemoteMessageRequest(session_id=session_id, message=message, multitask=multitask)
    )
    if not answer.queued:  # the run had ended meanwhile: this is its own turn
        return (await transport.get_status(session_id)).run_from_sequence
    if answer.multitask in (None, "steer"):
        return status.latest_sequence
    # The run under way ends first (its stream's end), then its next turn begins.
    async with closing_iter(transport.stream(session_id, status.latest_sequence)) as events:
        async for _event in events:
            pass
    with anyio.move_on_after(_TURN_WAIT):
        while True:
            now = await transport.get_status(session_id)
            if now.run_id != answer.run_id or now.status == "failed":
                return now.run_from_sequence
            await anyio.sleep(_TURN_POLL)
    return (await transport.get_status(session_id)).run_from_sequence


async def _current_run(
    transport: RemoteAgentTransport, session_id: str, status: RemoteStatusResponse
) -> int:
    """A known session asked to run with no text: the cursor its current run streams from.

    There is nothing to say to it, so the request is a front end (re)attaching:
    an interrupted session is resumed with no message and its new run is
    streamed; any other's current run is streamed from its start, live
    (running, or up to where it waits for people) or replayed to its end
    (completed, failed).
    """
    if status.status == "interrupted":
        await transport.resume(RemoteResumeRequest(session_id=session_id))
        return status.latest_sequence
    return status.run_from_sequence


def _client_calls(session_id: str, status: RemoteStatusResponse) -> dict[str, PendingInput]:
    """The pending client tool calls, by their id on the front-end streams.

    That is the stream's ``toolCallId``: the call's own id at the root,
    ``<owner>:<id>`` for a descendant's (answers go to the call's own id).
    """
    return {
        (
            p.tool_call_id
            if p.owner_session_id == session_id
            else f"{p.owner_session_id}:{p.tool_call_id}"
        ): p
        for p in status.pending_inputs
        if p.kind == "client_tool"
    }


def _tool_outputs(
    session_id: str, status: RemoteStatusResponse, messages: list[dict[str, Any]]
) -> list[tuple[str, Any, str | None]]:
    """The client tool results the last assistant message carries for pending calls (AI SDK)."""
    if not messages or messages[-1].get("role") != "assistant":
        return []
    parts = messages[-1].get("parts")
    if not isinstance(parts, list):
        return []
    pending = _client_calls(session_id, status)
    answers: list[tuple[str, Any, str | None]] = []
    for part in parts:
        call = pending.get(_call_id(part))
        if call is None:
            continue
        call_id = call.tool_call_id
        if part.get("state") == "output-available":
            answers.append((call_id, part.get("output"), None))
        elif part.get("state") == "output-error":
            answers.append((call_id, None, str(part.get("errorText") or "failed")))
    return _once(answers, lambda answer: answer[0], "messages")


def _tool_messages(
    session_id: str, status: RemoteStatusResponse, messages: list[dict[str, Any]]
) -> list[tuple[str, Any, str | None]]:
    """AG-UI's frontend tool results: the ``tool`` messages ending ``messages`` for pending calls.

    A message's ``error`` is the call's error; else its ``content`` is the
    result, a JSON object or array decoded, any other text as it is. Tool
    messages of calls no longer pending are history, and skipped.
    """
    pending = _client_calls(session_id, status)
    answers: list[tuple[str, Any, str | None]] = []
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "tool":
            break
        call = pending.get(_call_id(message))
        if call is None:
            continue
        error = message.get("error")
        if isinstance(error, str) and error:
            answers.append((call.tool_call_id, None, error))
        else:
            answers.append((call.tool_call_id, _tool_content(message.get("content")), None))
    answers.reverse()
    return _once(answers, lambda answer: answer[0], "messages")


def _once(answers: list[A], call_id: Callable[[A], str], where: str) -> list[A]:
    """``answers`` with identical repeats dropped: two different answers to one call are
    ``INVALID_REQUEST`` (one request cannot answer a call twice; checked before any is sent)."""
    kept: dict[str, A] = {}
    for answer in answers:
        earlier = kept.setdefault(call_id(answer), answer)
        if earlier != answer:
            raise AgentServerError(
                "INVALID_REQUEST", f"{where}: two different answers to {call_id(answer)!r}"
            )
    return list(kept.values())


def _call_id(item: Any) -> str:
    """The ``toolCallId`` of a message or part, if it names one (else ``""``, no call's id)."""
    call_id = item.get("toolCallId") if isinstance(item, dict) else None
    return call_id if isinstance(call_id, str) else ""


def _tool_content(content: Any) -> Any:
    """A tool message's content as a result: a JSON object or array decoded, else as it is.

    Decoded, it must fit where a result goes, one level into a body: JSON
    nested deeper than :data:`RESULT_DEPTH` is ``INVALID_REQUEST``.
    """
    if isinstance(content, str) and content.lstrip()[:1] in ("{", "["):
        field = "messages: a tool message's content"
        try:
            decoded = msgspec.json.decode(content)
        except msgspec.DecodeError:
            return content
        except RecursionError:  # thousands deep: msgspec gives up before the check below
            raise AgentServerError(
                "INVALID_REQUEST", f"{field}: JSON nested deeper than {RESULT_DEPTH} levels"
            ) from None
        return checked_depth(decoded, field, RESULT_DEPTH)
    return content


async def _chat_run(
    transport: RemoteAgentTransport, chat: ChatRequest, agent_type: str | None
) -> tuple[SessionId, int, str]:
    """Start, resume or answer the session ``chat.id``: its id, cursor and message id."""
    session_id = checked_id(chat.id, "id")
    if chat.trigger != "submit-message":
        raise AgentServerError(
            "INVALID_REQUEST", f"trigger: only submit-message is supported, not {chat.trigger!r}"
        )
    status = await _status(transport, session_id)
    answers = _tool_outputs(session_id, status, chat.messages) if status is not None else []
    if status is not None and answers:  # the continuation goes on in the message that asked
        cursor = status.latest_sequence
        message_id = str(chat.messages[-1].get("id") or f"{session_id}:{cursor}")
        for call_id, output, error in answers:
            await transport.submit_tool_result(session_id, call_id, output, error)
        return session_id, cursor, message_id
    message = _user_text(chat.messages) if status is None else _new_text(chat.messages)
    cursor = await _start_or_resume(
        transport,
        session_id,
        status,
        message,
        agent_type or chat.agent_type,
        None,
        chat.multitask,
        _user_count(chat.messages),
    )
    return session_id, cursor, f"{session_id}:{cursor}"


async def _ag_ui_run(
    transport: RemoteAgentTransport, run: RunAgentInput, agent_type: str | None
) -> tuple[SessionId, int, str]:
    """Start, resume or answer the session ``run.thread_id``: its id, cursor and run id."""
    session_id = checked_id(run.thread_id, "threadId")
    status = await _status(transport, session_id)
    if run.resume:
        if status is None:
            raise AgentServerError("NOT_FOUND", f"session {session_id!r} not found")
        cursor = status.latest_sequence
        kinds = {entry.tool_call_id: entry.kind for entry in status.pending_inputs}
        answers: list[tuple[ResumeEntry, str, Decision]] = []
        for entry in run.resume:  # all checked before any is sent
            found = kinds.get(entry.interrupt_id)
            if found is None:
                raise AgentServerError(
                    "NOT_FOUND", f"resume: no pending input {entry.interrupt_id!r}"
                )
            decision = _decision(entry) if found == "approval" else (False, None, None)
            answers.append((entry, found, decision))
        answers = _once(answers, lambda answer: answer[0].interrupt_id, "resume")
        # Client tool results first: a result can still be refused (the tool's
        # output_schema is checked where the call waits), an approval no longer.
        answers.sort(key=lambda answer: answer[1] == "approval")
        for entry, kind, (approved, reason, decided_by) in answers:
            if kind == "approval":
                await send_approval(
                    transport, session_id, entry.interrupt_id, approved, reason, decided_by
                )
            elif entry.status == "cancelled":
                await transport.submit_tool_result(
                    session_id, entry.interrupt_id, None, "cancelled by the user"
                )
            else:
                await transport.submit_tool_result(session_id, entry.interrupt_id, entry.payload)
    elif status is not None and (outputs := _tool_messages(session_id, status, run.messages)):
        cursor = status.latest_sequence
        for call_id, output, error in outputs:
            await transport.submit_tool_result(session_id, call_id, output, error)
    else:
        props = run.forwarded_props if isinstance(run.forwarded_props, dict) else {}
        name = agent_type or props.get("agentType")
        state = run.state if isinstance(run.state, dict) else None
        message = _user_text(run.messages) if status is None else _new_text(run.messages)
        multitask = props.get("multitask")
        cursor = await _start_or_resume(
            transport,
            session_id,
            status,
            message,
            name,
            state,
            multitask,
            _user_count(run.messages),
        )
    return session_id, cursor, run.run_id


async def run_front_end(
    transport: RemoteAgentTransport,
    open_stream: StreamOpener,
    run: RunAgentInput | ChatRequest,
    fmt: StreamFormat,
    agent_type: str | None,
    *,
    heartbeat_interval: float = 15.0,
) -> ProjectedStreamResponse:
    """Start, resume or answer the session ``run`` names; the answer streams that run in ``fmt``."""
    if isinstance(run, RunAgentInput):
        session_id, cursor, run_id = await _ag_ui_run(transport, run, agent_type)
    else:
        session_id, cursor, run_id = await _chat_run(transport, run, agent_type)
    events = await open_stream(session_id, 0)
    return ProjectedStreamResponse(
        fmt, session_id, events, cursor, run_id=run_id, heartbeat_interval=heartbeat_interval
    )
