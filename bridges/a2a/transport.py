"""``A2ARemoteAgentTransport``: any A2A agent as a remote child (specs/a2a.md).

It implements the ``RemoteAgentTransport`` seam with a2a-sdk's client: a
child session is an A2A context whose id is the child's session id (so a
retried call, or a parent resumed after a crash, reaches the same context),
and its task is found again by ``ListTasks`` on that context before anything
is sent twice. ``start`` sends the first message (``returnImmediately``),
``stream`` subscribes to the task and re-subscribes after a cut, ``interrupt``
and ``abort`` cancel it, answers to its ``input-required`` are the next
message. What a peer streams becomes chunks and sequences as
``remote_view.py`` says; a peer that declares our extension (a helix
gateway) is followed exactly, log sequence by log sequence.

a2a-sdk's errors never leave the bridge (``peer.py`` maps them): a peer's
refusal is an :class:`~helix_agents.errors.AgentServerError` (the helix code
when the peer sent one), an unreachable peer a
:class:`~helix_agents.errors.TransportError`.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any, Self

import anyio
import httpx
import msgspec
from a2a.types import AgentCard, Message, Part, Role, StreamResponse, Task
from a2a.utils.errors import MethodNotFoundError, UnsupportedOperationError

from helix_agents._aio import closing_iter
from helix_agents.errors import (
    AgentServerError,
    InvalidSessionIdError,
    TransportError,
    UsageError,
)
from helix_agents.ids import validate_session_id
from helix_agents.messages import UserMessage
from helix_agents.protocol import (
    ChunkEvent,
    RemoteMessageRequest,
    RemoteMessageResponse,
    RemoteResumeRequest,
    RemoteStartRequest,
    RemoteStartResponse,
    RemoteStatusResponse,
    SubmitResponse,
    TransportEvent,
)
from helix_agents.tracing import trace_context_from_headers
from helix_agents.transports import HeadersSource

from .peer import Peer
from .remote_view import Link, RemoteView, run_id_of, status_of_task
from .wire import (
    FROM_SEQUENCE_HEADER,
    INTERRUPTED_STATES,
    TERMINAL_STATES,
    data_part,
    helix_metadata,
    struct_of,
    text_part,
)

__all__ = ["A2ARemoteAgentTransport"]

_DATA_MODES = ("application/json", "data")


def _checked(session_id: str) -> str:
    """``session_id`` if it is a valid session id, else ``INVALID_REQUEST`` (nothing is sent)."""
    try:
        return validate_session_id(session_id)
    except InvalidSessionIdError as exc:
        raise AgentServerError("INVALID_REQUEST", str(exc)) from exc


def _request_key(request: RemoteStartRequest) -> str:
    """What tells two start requests apart (a repeat is the same request)."""
    return msgspec.json.encode([request.agent_type, _text(request.message), request.input]).decode()


def _text(message: str | list[UserMessage] | None) -> str:
    if message is None:
        return ""
    return message if isinstance(message, str) else "\n".join(m.content for m in message)


class A2ARemoteAgentTransport:
    """Reach an A2A agent as a helix child session (see the module).

    Use it as an async context manager, or call :meth:`aclose`, to close the
    HTTP client it created; a client passed in stays open.

    Args:
        url: the agent's base URL; its card is read from
            ``{url}/.well-known/agent-card.json`` on first use.
        card: the agent's card, instead of reading it.
        headers: headers for every request (``Authorization``...): a mapping, or a
            sync or async callable asked before every request.
        timeout: seconds for connecting and for each read (a stream's too).
        poll_interval: longest wait, in seconds, before subscribing again to a
            task whose stream the peer closed while it waits for input.
        answer_wait: seconds an answer waits for a peer to take it in (leave
            ``input-required``) before it is reported as resuming the child.
        client: an ``httpx.AsyncClient`` to use instead of creating one.

    Raises:
        UsageError: neither ``url`` nor ``card``, a URL that is not http(s), or
            a negative wait.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        card: AgentCard | None = None,
        headers: HeadersSource | None = None,
        timeout: float = 30.0,
        poll_interval: float = 1.0,
        answer_wait: float = 5.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if url is None and card is None:
            raise UsageError("A2ARemoteAgentTransport needs the agent's url or its card")
        if url is not None and not url.startswith(("http://", "https://")):
            raise UsageError(f"the A2A agent's url must be an http(s) URL, not {url!r}")
        if min(timeout, poll_interval, answer_wait) <= 0:
            raise UsageError("timeout, poll_interval and answer_wait must be > 0 seconds")
        self.url = url.rstrip("/") if url is not None else None
        """The agent's base URL (recorded with each child it reaches)."""
        self._timeout = timeout
        self._poll_interval = poll_interval
        self._answer_wait = answer_wait
        self._owns_http = client is None
        self._http = client if client is not None else httpx.AsyncClient(timeout=timeout)
        self._peer = Peer(self.url, card, headers, timeout, self._http)
        self._links: dict[str, Link] = {}

    async def aclose(self) -> None:
        """Close the HTTP client if this transport created it; idempotent."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # --- plumbing -------------------------------------------------------------------

    async def _find(self, session_id: str, agent_type: str = "") -> Link | None:
        """The link of a context this transport does not know (after a restart), if any."""
        helix = await self._peer.helix()
        tasks = await self._peer.context_tasks(session_id)
        if not tasks:  # none, or a peer without ListTasks: nothing can be found again
            return None
        ours = [t for t in tasks if t.history and t.history[0].message_id == f"{session_id}:start"]
        task = (ours or tasks)[0]
        meta = helix_metadata(task.history[0].metadata) if task.history else {}
        current = helix_metadata(task.metadata).get("currentTaskId")
        link = Link(
            session_id=session_id,
            agent_type=str(meta.get("agentType") or agent_type),
            helix=helix,
            task_id=current if helix and isinstance(current, str) else task.id,
            ancestors=[a for a in meta.get("ancestors", []) if isinstance(a, str)],
        )
        self._links[session_id] = link
        return link

    async def _link(self, session_id: str) -> Link:
        _checked(session_id)
        link = self._links.get(session_id) or await self._find(session_id)
        if link is None:
            raise AgentServerError("NOT_FOUND", f"no A2A task for session {session_id!r}")
        return link

    def _message(
        self,
        link: Link,
        parts: list[Part],
        message_id: str,
        helix: dict[str, Any],
        skill: str | None = None,
    ) -> Message:
        metadata: dict[str, Any] = {"helix": helix}
        if skill:  # a gateway's root endpoint (/a2a) serves the agent this names
            metadata["skillId"] = skill
        message = Message(
            role=Role.ROLE_USER,
            message_id=message_id,
            context_id=link.session_id,
            parts=parts,
            metadata=struct_of(metadata),
        )
        if link.task_id and link.reply is None:
            message.task_id = link.task_id
        return message

    # --- the RemoteAgentTransport protocol ---------------------------------------------

    async def start(self, request: RemoteStartRequest) -> RemoteStartResponse:
        """Send the first message of context ``request.session_id`` (once: see the module)."""
        sid = _checked(request.session_id)
        linked = (request.parent_session_id, request.root_session_id, *(request.ancestors or ()))
        for other in linked:
            if other is not None:
                _checked(other)
        link = self._links.get(sid)
        if link is not None:
            return await self._started_again(link, request)
        if not await self._peer.helix():
            # Another agent may not know the message again: look for its task first.
            # A helix peer needs no look: its SendMessage is idempotent per messageId.
            link = await self._find(sid, request.agent_type)
        if link is None:
            card, _, _ = await self._peer.resolved()
            link = Link(
                session_id=sid,
                agent_type=request.agent_type,
                helix=await self._peer.helix(),
                ancestors=list(request.ancestors or ()),
            )
            parts = [text_part(_text(request.message) or "(no message)")]
            takes_data = any(mode in _DATA_MODES for mode in card.default_input_modes)
            if request.input is not None and takes_data:
                parts.append(data_part(request.input))
            helix = {
                "agentType": request.agent_type,
                "ancestors": link.ancestors,
                "parentSessionId": request.parent_session_id,
                "rootSessionId": request.root_session_id,
                "parentToolCallId": request.parent_tool_call_id,
                # The parent's owner: the child belongs to it (specs/auth.md).
                "owner": None if request.owner is None else msgspec.to_builtins(request.owner),
            }
            helix = {key: value for key, value in helix.items() if value is not None}
            message = self._message(link, parts, f"{sid}:start", helix, request.agent_type)
            traced = trace_context_from_headers(request.trace_context) or {}
            answer = await self._peer.send(message, f"SendMessage {sid}", traced)
            link.request_key = _request_key(request)
            if isinstance(answer, Task):
                current = helix_metadata(answer.metadata).get("currentTaskId")
                link.task_id = current if isinstance(current, str) and link.helix else answer.id
                link.run_id = run_id_of(link, answer)
            else:
                link.reply = answer
            self._links[sid] = link
        return self._response(link)

    def _response(self, link: Link) -> RemoteStartResponse:
        sid = link.session_id
        return RemoteStartResponse(
            session_id=sid, stream_id=sid, run_id=link.run_id or link.task_id or sid
        )

    async def _started_again(self, link: Link, request: RemoteStartRequest) -> RemoteStartResponse:
        """A start of a child this transport started: the same request is the same run
        while it runs; another request is ``ALREADY_RUNNING``; an ended one ``ALREADY_COMPLETED``
        (as over our HTTP: the caller reads how it ended from its stream)."""
        sid = link.session_id
        if link.reply is not None:
            raise AgentServerError("ALREADY_COMPLETED", f"session {sid!r} has ended")
        status = await self.get_status(sid)
        if status.status in ("completed", "failed") or (
            status.status == "interrupted" and not link.helix
        ):
            raise AgentServerError("ALREADY_COMPLETED", f"session {sid!r} has ended")
        same = request.agent_type == link.agent_type and (
            not link.request_key or link.request_key == _request_key(request)
        )
        if not same:
            raise AgentServerError("ALREADY_RUNNING", f"session {sid!r} exists (another request)")
        return self._response(link)

    async def stream(
        self, session_id: str, from_sequence: int = 0
    ) -> AsyncIterator[TransportEvent]:
        """The child's chunks after ``from_sequence``, then ``end``/``error``.

        Subscribes to its task; a stream the peer closes while the task waits
        is subscribed to again (after a short, growing wait). A network failure
        raises :class:`TransportError`: the caller reconnects from what it holds.
        """
        link = await self._link(session_id)
        view = RemoteView(link, from_sequence)
        if link.reply is not None:
            for event in view.reply_events(link.reply):
                yield event
            return
        quiet = 0
        while True:
            before = view.held
            async with closing_iter(self._subscribe(link, view)) as events:
                async for event in events:
                    yield event
                    if not isinstance(event, ChunkEvent):
                        return
            quiet = 0 if view.held > before else quiet + 1
            await anyio.sleep(min(self._poll_interval, 0.02 * 2**quiet))

    async def _subscribe(self, link: Link, view: RemoteView) -> AsyncIterator[TransportEvent]:
        """One subscription's events (a final task read by ``GetTask`` instead)."""
        extra = {FROM_SEQUENCE_HEADER: str(view.held)} if link.helix else None
        try:
            async with closing_iter(self._peer.subscribe(link.task_id, extra)) as responses:
                async for response in responses:
                    if link.helix or response.WhichOneof("payload") in ("task", "message"):
                        events = view.feed(response)
                    else:  # an update: the task as it stands is the truth (see RemoteView)
                        events = view.feed_task(await self._settled(link, response))
                    for event in events:
                        yield event
        except AgentServerError as exc:
            if not isinstance(exc.__cause__, UnsupportedOperationError | MethodNotFoundError):
                raise
            # A task in a final state cannot be subscribed to: read it instead.
            for event in view.feed_task(await self._peer.get_task(link.task_id)):
                yield event
        for event in view.closed():
            yield event

    async def _settled(self, link: Link, update: StreamResponse) -> Task:
        """The task after ``update``: read until it shows the state the update announced.

        A peer may publish an update before its task store holds it: a final
        or waiting state is waited for (within the timeout), so the end is
        read with every artifact that came before it.
        """
        task = await self._peer.get_task(link.task_id)
        if update.WhichOneof("payload") != "status_update":
            return task
        wanted = update.status_update.status.state
        if wanted not in TERMINAL_STATES and wanted not in INTERRUPTED_STATES:
            return task
        with anyio.move_on_after(self._timeout):
            while task.status.state != wanted:
                await anyio.sleep(0.01)
                task = await self._peer.get_task(link.task_id)
        return task

    async def get_status(self, session_id: str) -> RemoteStatusResponse:
        """The child's task as a session's status (``paused`` while it waits for input)."""
        link = await self._link(session_id)
        if link.reply is not None:
            view = RemoteView(link, 0)
            view.reply_events(link.reply)
            return RemoteStatusResponse(
                session_id=session_id,
                run_id=session_id,
                status="completed",
                step_count=0,
                is_executing=False,
                stream_id=session_id,
                latest_sequence=view.held,
                output=view.output,
            )
        task = await self._peer.get_task(link.task_id)
        return status_of_task(link, task)

    async def interrupt(self, session_id: str, reason: str | None = None) -> None:
        """Cancel the child's task (``ALREADY_COMPLETED`` if it has ended); a helix peer
        hears the reason (our extension's ``CancelTask`` metadata)."""
        await self._cancel(session_id, "interrupt", reason)

    async def abort(self, session_id: str, reason: str | None = None) -> None:
        """Cancel the child's task: A2A has one way to stop a task; a helix peer hears that
        it is an abort, and the reason, through our extension (the session then fails)."""
        await self._cancel(session_id, "abort", reason)

    async def _cancel(self, session_id: str, op: str, reason: str | None) -> None:
        link = await self._link(session_id)
        if link.reply is not None:
            raise AgentServerError("ALREADY_COMPLETED", f"session {session_id!r} has ended")
        stop: dict[str, Any] = {"op": op}
        if reason is not None:
            stop["reason"] = reason
        await self._peer.cancel(link.task_id, {"helix": stop} if link.helix else None)

    async def resume(self, request: RemoteResumeRequest) -> RemoteStartResponse:
        """Go on with the child: a helix peer resumes it; another's task goes on by itself.

        A task that has ended (canceled included) cannot go on over A2A:
        ``ALREADY_COMPLETED``, unless the peer is a helix gateway.
        """
        sid = request.session_id
        link = await self._link(sid)
        if link.helix and link.reply is None:
            parts = [data_part({"resume": True})]
            if _text(request.message):
                parts.insert(0, text_part(_text(request.message)))
            message = self._message(
                link, parts, f"{sid}:resume:{uuid.uuid4().hex}", {"op": "resume"}
            )
            message.ClearField("task_id")
            answer = await self._peer.send(message, f"SendMessage {sid} (resume)")
            if isinstance(answer, Task):
                link.task_id, link.run_id = answer.id, run_id_of(link, answer)
            return self._response(link)
        status = await self.get_status(sid)
        if status.status in ("completed", "failed", "interrupted"):
            raise AgentServerError("ALREADY_COMPLETED", f"the A2A task of {sid!r} has ended")
        if _text(request.message):
            parts = [text_part(_text(request.message))]
            await self._peer.send(self._message(link, parts, f"{sid}:{uuid.uuid4().hex}", {}), sid)
        return RemoteStartResponse(session_id=sid, stream_id=sid, run_id=link.task_id)

    async def send_message(self, request: RemoteMessageRequest) -> RemoteMessageResponse:
        """A follow-up turn in the child's context (helix peers only: see specs/a2a.md)."""
        sid = request.session_id
        link = await self._link(sid)
        if not link.helix:
            raise AgentServerError(
                "INVALID_REQUEST",
                "follow-up turns over A2A need a peer that declares the helix extension: "
                "another agent's new task could not continue this child's stream",
            )
        message_id = request.message_id or f"msg-{uuid.uuid4().hex}"
        message = self._message(link, [text_part(_text(request.message))], message_id, {})
        message.ClearField("task_id")
        before = link.task_id
        answer = await self._peer.send(message, f"SendMessage {sid}")
        if not isinstance(answer, Task):
            raise TransportError(f"SendMessage {sid}: the A2A agent answered without a task")
        link.task_id, link.run_id = answer.id, run_id_of(link, answer)
        return RemoteMessageResponse(
            session_id=sid, stream_id=sid, run_id=link.run_id, queued=answer.id == before
        )

    async def submit_tool_result(
        self, session_id: str, tool_call_id: str, result: Any = None, error: str | None = None
    ) -> SubmitResponse:
        """Answer the child's pending input ``tool_call_id``: the task's next message."""
        answer: dict[str, Any] = {"toolCallId": tool_call_id}
        if error is not None:
            answer["error"] = error
        else:
            answer["result"] = result
        return await self._answer(session_id, tool_call_id, answer, "client_tool")

    async def submit_approval(
        self,
        session_id: str,
        tool_call_id: str,
        approved: bool,
        reason: str | None = None,
        *,
        decided_by: str | None = None,
    ) -> SubmitResponse:
        """Approve or deny the child's gated call (a helix peer's: others ask no approvals)."""
        answer: dict[str, Any] = {"toolCallId": tool_call_id, "approved": approved}
        if reason is not None:
            answer["reason"] = reason
        if decided_by is not None:
            answer["decidedBy"] = decided_by
        return await self._answer(session_id, tool_call_id, answer, "approval")

    async def _answer(
        self, session_id: str, tool_call_id: str, answer: dict[str, Any], kind: str
    ) -> SubmitResponse:
        link = await self._link(session_id)
        message_id = f"{session_id}:answer:{tool_call_id}"
        if link.helix:
            message = self._message(link, [data_part(answer)], message_id, {"op": "answer"})
            message.ClearField("task_id")  # the session's current task takes it
            reply = await self._peer.send(message, f"SendMessage {session_id} (answer)")
            resumed = isinstance(reply, Task) and helix_metadata(reply.metadata).get("resumed")
            return SubmitResponse(resumed=bool(resumed))
        return await self._answer_generic(link, tool_call_id, answer, kind, message_id)

    async def _answer_generic(
        self, link: Link, tool_call_id: str, answer: dict[str, Any], kind: str, message_id: str
    ) -> SubmitResponse:
        view = RemoteView(link, 0)
        view.feed_task(await self._peer.get_task(link.task_id))
        waiting = [entry.tool_call_id for entry in view.pending()]
        if tool_call_id not in waiting:
            if tool_call_id.startswith(f"{link.session_id}.input") and view.state not in (
                INTERRUPTED_STATES
            ):
                return SubmitResponse(resumed=False)  # answered before: a retry
            raise AgentServerError(
                "NOT_FOUND", f"session {link.session_id!r} waits for no input {tool_call_id!r}"
            )
        if kind != "client_tool":
            raise AgentServerError("INVALID_REQUEST", f"input {tool_call_id!r} needs a tool result")
        if "error" in answer:
            parts = [text_part(f"error: {answer['error']}")]
        elif isinstance(answer["result"], str):
            parts = [text_part(answer["result"])]
        else:
            parts = [data_part(answer["result"])]
        message = self._message(
            link, parts, message_id, {"op": "answer", "toolCallId": tool_call_id}
        )
        await self._peer.send(message, f"SendMessage {link.session_id} (answer)")
        episode = view.episode
        with anyio.move_on_after(self._answer_wait):
            while True:  # the peer takes the answer in: it leaves that input-required
                probe = RemoteView(link, 0)
                task = await self._peer.get_task(link.task_id)
                probe.feed_task(task)
                if task.status.state not in INTERRUPTED_STATES or probe.episode > episode:
                    break
                await anyio.sleep(0.02)
        return SubmitResponse(resumed=True)
