"""``SessionRun``: one run of a session's loop, from ``run_started`` to its end.

Each step folds the log (through the writer), calls the LLM (streamed text
becomes ``text_delta`` events), records the assistant message and routes its
tool calls: regular tools, sub-agents (through a transport), ``__finish__``
and client tools, concurrently in one task group. The run ends completed,
failed, suspended (waiting for a client), interrupted or aborted.

Interrupts and aborts are events in the log. A watcher tails the log and
cancels the run's scope when one arrives; the shielded cleanup then
propagates the stop to every running child through its transport, waits for
each child's acknowledgement, records it on the parent's ``SubSessionRef``,
and appends ``interrupted`` / ``aborted``. Calls cut short keep no result, so
``resume`` picks them up again (children are resumed, not restarted).
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import msgspec
from pydantic import ValidationError

from ._aio import closing_iter, prefetch
from .agents import AgentConfig, HookContext, RemoteSubAgentTool, SubAgentTool
from .child_calls import (
    ChildOutcome,
    ChildTarget,
    child_session_id,
    forward_child,
    remote_session_id,
    retrying,
    sub_agent_end,
    sub_agent_start,
)
from .errors import (
    AgentServerError,
    HelixError,
    OwnershipLost,
    RemoteAgentFailedError,
    TransportError,
)
from .events import (
    Aborted,
    AbortRequested,
    ClientToolPending,
    Completed,
    ErrorChunk,
    Event,
    Failed,
    Interrupted,
    InterruptRequested,
    MessageAppended,
    OutputChunk,
    RemoteRef,
    StepStarted,
    SubSessionResumed,
    SubSessionStarted,
    Suspended,
    TextDelta,
    UsageRecorded,
)
from .llm import LLMAdapter, LLMError, LLMRequest, LLMResponse, LLMTextDelta, ToolSpec
from .messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from .protocol import RemoteResumeRequest, RemoteStartRequest, message_from_input
from .session_writer import SessionWriter, StopRequest
from .state import SessionState
from .store import EventStore
from .tool_runner import (
    ToolOutcome,
    result_events,
    run_tool_call,
    tool_end,
    tool_start,
    validate_finish,
    validation_message,
)
from .tools import FINISH_TOOL_NAME, Tool
from .transport import RemoteAgentTransport

__all__ = ["FINISH_REMINDER", "RunEnv", "SessionRun", "unanswered_calls"]

log = logging.getLogger("helix_agents")

FINISH_REMINDER = (
    f"Call the {FINISH_TOOL_NAME} tool with your final output; it must match the output schema."
)
"""Sent when an agent with an output schema answers with text instead of finishing."""

_CALL_ID = re.compile(r"[A-Za-z0-9_\-]{1,64}")


@dataclass(frozen=True, kw_only=True)
class RunEnv:
    """What a run needs from its executor."""

    store: EventStore
    llm: LLMAdapter | None
    llm_override: LLMAdapter | None
    local_transport: RemoteAgentTransport
    host_id: str | None = None
    stop_grace: float = 10.0


def unanswered_calls(state: SessionState) -> list[ToolCall]:
    """Tool calls of the last assistant message that have no recorded result yet."""
    answered: set[str] = set()
    for message in reversed(state.messages):
        if isinstance(message, ToolResultMessage):
            answered.add(message.tool_call_id)
        elif isinstance(message, AssistantMessage):
            return [call for call in message.tool_calls if call.id not in answered]
    return []


def _fits(schema: Any, value: Any) -> bool:
    if schema is None:
        return isinstance(value, dict)
    try:
        schema.model_validate(value)
    except ValueError:
        return False
    return True


def _unwrap(group: BaseExceptionGroup[BaseException]) -> BaseException:
    while isinstance(group, BaseExceptionGroup) and len(group.exceptions) == 1:
        group = group.exceptions[0]  # type: ignore[assignment]
    return group


class SessionRun:
    """Runs one session until its current run ends. Use once."""

    def __init__(self, env: RunEnv, agent: AgentConfig, writer: SessionWriter, run_id: str) -> None:
        self.env = env
        self.agent = agent
        self.writer = writer
        self.run_id = run_id
        self.stop: StopRequest | None = None
        self._scope: anyio.CancelScope | None = None
        self._open_tools: dict[str, ToolCall] = {}
        self._open_children: dict[str, tuple[ToolCall, ChildTarget]] = {}

    # --- control ----------------------------------------------------------------

    def request_stop(self, request: StopRequest) -> None:
        """Stop the run (an abort overrides an interrupt). Safe to call repeatedly."""
        if self.stop is None or request.kind == "abort":
            self.stop = request
        if self._scope is not None:
            self._scope.cancel()

    async def run(self) -> None:
        """Run until the run ends; never raises except for cancellation of the executor."""
        await self.fire("on_agent_start")
        state = self.writer.state
        if state.abort_requested:
            self.request_stop(StopRequest("abort", state.stop_reason))
        elif state.interrupt_requested:
            self.request_stop(StopRequest("interrupt", state.stop_reason))
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                if self.stop is not None:
                    scope.cancel()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._watch)
                    tg.start_soon(self.writer.flush_forever)
                    await self._loop()
                    tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            error = _unwrap(group)
            if not isinstance(error, Exception):
                raise
            await self._crashed(error)
            return
        except Exception as error:
            await self._crashed(error)
            return
        if self.stop is not None:
            try:
                await self._stopped(self.stop)
            except HelixError as error:  # the store failed: this run ends, the others go on
                log.error("could not record the end of run %s: %s", self.run_id, error)

    async def _crashed(self, error: Exception) -> None:
        if isinstance(error, OwnershipLost):
            log.warning("stopping run %s: %s", self.run_id, error)
            return
        log.exception("run %s of %s crashed", self.run_id, self.writer.session_id, exc_info=error)
        try:
            with anyio.CancelScope(shield=True):
                await self._fail(f"internal error: {type(error).__name__}: {error}")
        except HelixError as failure:
            # Recording the failure failed too (the store is closed or broken):
            # this run ends here; the executor and its other runs go on.
            log.error("could not record the failure of run %s: %s", self.run_id, failure)

    async def _watch(self) -> None:
        store = self.env.store
        async with closing_iter(store.tail(self.writer.session_id, self.writer.last_seq)) as events:
            async for event in events:
                if isinstance(event, InterruptRequested):
                    self.request_stop(StopRequest("interrupt", event.reason))
                elif isinstance(event, AbortRequested):
                    self.request_stop(StopRequest("abort", event.reason))

    # --- the loop -----------------------------------------------------------------

    async def _loop(self) -> None:
        agent = self.agent
        while True:
            pending = unanswered_calls(self.writer.state)
            if pending:
                finished, waiting = await self._run_calls(pending)
                if finished is not None:
                    await self._complete(finished.result)
                    return
                if waiting:
                    await self.writer.append(
                        Suspended(
                            reason="client_tool",
                            tool_call_ids=waiting,
                        )
                    )
                    return
                continue
            if self.writer.state.run_step_count >= agent.max_steps:
                await self._fail(f"max steps ({agent.max_steps}) reached")
                return
            try:
                response = await self._step()
            except LLMError as error:
                await self._fail(str(error), recoverable=error.retryable)
                return
            if response is None:
                return  # a final answer: recorded and completed in one batch
            if not response.tool_calls:
                if agent.output_schema is None:
                    await self._complete(response.content)
                    return
                await self.writer.append(
                    MessageAppended(message=UserMessage(content=FINISH_REMINDER))
                )

    def _tool_specs(self) -> list[ToolSpec]:
        specs = [tool.spec() for tool in self.agent.tools]
        if self.agent.output_schema is not None:
            specs.append(
                ToolSpec(
                    name=FINISH_TOOL_NAME,
                    description="Finish the task with your final output.",
                    parameters=self.agent.output_schema.model_json_schema(),
                )
            )
        return specs

    async def _step(self) -> LLMResponse | None:
        agent = self.agent
        llm = self.env.llm_override or agent.llm or self.env.llm
        if llm is None:
            raise LLMError(f"agent {agent.name!r} has no LLM and the executor has no default")
        state = self.writer.state
        self.writer.emit(StepStarted(step=state.run_step_count + 1))
        prompt = agent.system_prompt
        request = LLMRequest(
            messages=list(state.messages),
            system_prompt=prompt(dict(state.custom_state)) if callable(prompt) else prompt,
            tools=self._tool_specs(),
            model=agent.llm_config.model,
            temperature=agent.llm_config.temperature,
            max_tokens=agent.llm_config.max_tokens,
            agent_type=agent.name,
            session_id=state.session_id,
        )
        response: LLMResponse | None = None
        async with prefetch(llm.stream(request)) as parts:
            async for batch in parts.batches():
                # Deltas that arrived together share one append.
                deltas = [
                    TextDelta(
                        agent_id=state.session_id,
                        agent_type=agent.name,
                        delta=part.text,
                    )
                    for part in batch
                    if isinstance(part, LLMTextDelta) and part.text
                ]
                if deltas:
                    self.writer.emit(*deltas)
                for part in batch:
                    if isinstance(part, LLMResponse):
                        response = part
        if response is None:
            raise LLMError("the model's stream ended without a response")
        calls = self._unique_calls(response.tool_calls)
        usage = response.usage
        final = self._final_answer(calls)
        await self.writer.append(
            MessageAppended(
                message=AssistantMessage(content=response.content, tool_calls=calls),
            ),
            UsageRecorded(
                kind="tokens",
                name=response.model,
                input_tokens=usage.input_tokens if usage else 0,
                output_tokens=usage.output_tokens if usage else 0,
            ),
            *final,
        )
        if final:
            await self.fire("on_agent_complete", self.writer.state.output)
            return None
        return msgspec.structs.replace(response, tool_calls=calls)

    def _final_answer(self, calls: list[ToolCall]) -> list[Event]:
        """For a turn whose only call is a valid ``__finish__``: its whole ending.

        Validation is pure, so the answer, the finish call's record and the
        completion can be one batch (one commit) instead of three.
        """
        if len(calls) != 1 or calls[0].name != FINISH_TOOL_NAME or self.agent.output_schema is None:
            return []
        call = calls[0]
        outcome = validate_finish(self.agent, call.arguments)
        if outcome.error is not None:
            return []
        sid = self.writer.session_id
        return [
            tool_start(self.agent, sid, call),
            *result_events(
                self.agent, sid, call, ToolOutcome(result="output accepted"), usage=False
            ),
            *self._completion(outcome.result),
        ]

    def _unique_calls(self, calls: Sequence[ToolCall]) -> list[ToolCall]:
        """Give every call an id unique in the session and safe inside a session id."""
        state = self.writer.state
        used = {
            call.id
            for message in state.messages
            if isinstance(message, AssistantMessage)
            for call in message.tool_calls
        }
        fixed: list[ToolCall] = []
        for index, call in enumerate(calls):
            call_id = call.id
            if not _CALL_ID.fullmatch(call_id) or call_id in used:
                call_id = f"call-{state.last_seq}-{index}"
            used.add(call_id)
            fixed.append(call if call_id == call.id else msgspec.structs.replace(call, id=call_id))
        return fixed

    async def _run_calls(self, calls: list[ToolCall]) -> tuple[ToolOutcome | None, list[str]]:
        """Run the calls concurrently; return a valid finish (if any) and client calls waited on."""
        finished: ToolOutcome | None = None
        waiting: list[str] = []
        async with anyio.create_task_group() as tg:
            for call in calls:
                tool = self.agent.tool(call.name)
                if call.name == FINISH_TOOL_NAME and self.agent.output_schema is not None:
                    outcome = await self._finish_call(call)
                    if outcome.error is None and finished is None:
                        finished = outcome
                elif isinstance(tool, SubAgentTool | RemoteSubAgentTool):
                    tg.start_soon(self._call_sub_agent, call, tool)
                elif isinstance(tool, Tool) and tool.is_client_tool:
                    if await self._client_call(call, tool):
                        waiting.append(call.id)
                elif isinstance(tool, Tool):
                    tg.start_soon(self._call_tool, call, tool)
                else:
                    await self._record(call, ToolOutcome(error=f"unknown tool {call.name!r}"))
        return finished, waiting

    async def _record(self, call: ToolCall, outcome: ToolOutcome) -> None:
        sid = self.writer.session_id
        await self.writer.append(
            tool_start(self.agent, sid, call),
            *result_events(self.agent, sid, call, outcome, usage=False),
        )

    async def _finish_call(self, call: ToolCall) -> ToolOutcome:
        outcome = validate_finish(self.agent, call.arguments)
        shown = outcome if outcome.error is not None else ToolOutcome(result="output accepted")
        sid = self.writer.session_id
        await self.writer.append(
            tool_start(self.agent, sid, call),
            *result_events(self.agent, sid, call, shown, usage=False),
        )
        return outcome

    async def _client_call(self, call: ToolCall, tool: Tool[Any]) -> bool:
        """Record a client tool's pending call or its submitted result; True while waiting."""
        pending = self.writer.state.pending_client_tools.get(call.id)
        sid = self.writer.session_id
        if pending is None:
            await self.writer.append(
                tool_start(self.agent, sid, call),
                ClientToolPending(
                    tool_call_id=call.id,
                    tool_name=tool.name,
                    arguments=call.arguments,
                ),
            )
            return True
        if not pending.submitted:
            return True
        outcome = ToolOutcome(result=pending.result, error=pending.error)
        await self.writer.append(*result_events(self.agent, sid, call, outcome, usage=True))
        return False

    async def _call_tool(self, call: ToolCall, tool: Tool[Any]) -> None:
        # Not forgotten on cancellation: the stop cleanup closes it with a tool_end.
        self._open_tools[call.id] = call
        await run_tool_call(self.agent, self.writer, call, tool, self.fire)
        self._open_tools.pop(call.id, None)

    def _target(
        self, call: ToolCall, tool: SubAgentTool[Any] | RemoteSubAgentTool[Any]
    ) -> ChildTarget:
        sid = self.writer.session_id
        if isinstance(tool, SubAgentTool):
            return ChildTarget(
                session_id=child_session_id(sid, call.id),
                agent_type=tool.agent.name,
                transport=self.env.local_transport,
                state_schema=tool.agent.state_schema,
                output_schema=None,
                timeout=tool.timeout,
            )
        return ChildTarget(
            session_id=remote_session_id(sid, call.id),
            agent_type=tool.remote_agent_type,
            transport=tool.transport,
            remote=RemoteRef(
                transport=type(tool.transport).__name__,
                remote_agent_type=tool.remote_agent_type,
                url=getattr(tool.transport, "url", None),
            ),
            output_schema=tool.output_schema,
            timeout=tool.timeout,
            stream_retries=tool.stream_retries,
            stream_retry_base=tool.stream_retry_base,
        )

    async def _call_sub_agent(
        self, call: ToolCall, tool: SubAgentTool[Any] | RemoteSubAgentTool[Any]
    ) -> None:
        state = self.writer.state
        sid = state.session_id
        target = self._target(call, tool)
        child_id = target.session_id
        try:
            value = tool.input_schema.model_validate(call.arguments).model_dump(mode="json")
        except ValidationError as exc:
            await self._record(call, ToolOutcome(error=validation_message(exc)))
            return
        transport = target.transport
        ref = state.sub_sessions.get(child_id)
        if ref is None:
            await self.fire("before_sub_agent", call)
            # Written behind: start is idempotent with a deterministic child id,
            # so if these were lost in a crash, the resumed call (still without
            # a result) reaches the same child again.
            self.writer.emit(
                tool_start(self.agent, sid, call),
                SubSessionStarted(
                    sub_session_id=child_id,
                    agent_type=target.agent_type,
                    tool_call_id=call.id,
                    input=value,
                    remote=target.remote,
                ),
                sub_agent_start(state, child_id, target.agent_type, call.id, value),
            )
            self._open_children[child_id] = (call, target)
            request = RemoteStartRequest(
                session_id=child_id,
                agent_type=target.agent_type,
                message=message_from_input(value),
                state=value
                if target.remote is None and _fits(target.state_schema, value)
                else None,
                parent_session_id=sid,
                root_session_id=state.root_session_id,
                input=value,
                parent_tool_call_id=call.id,
            )
            try:
                await retrying(
                    lambda: transport.start(request),
                    retries=target.stream_retries,
                    base_delay=target.stream_retry_base,
                )
            except (TransportError, AgentServerError) as exc:
                await self._end_child(call, target, ChildOutcome(status="failed", error=str(exc)))
                return
        else:
            if ref.status == "interrupted":
                # The segment was closed at the interrupt; open a new one.
                await self.writer.append(
                    tool_start(self.agent, sid, call),
                    sub_agent_start(state, child_id, target.agent_type, call.id, value),
                    SubSessionResumed(sub_session_id=child_id),
                )
            self._open_children[child_id] = (call, target)
            try:
                await self._reconcile(target)
            except (TransportError, AgentServerError) as exc:
                await self._end_child(call, target, ChildOutcome(status="failed", error=str(exc)))
                return
        try:
            outcome = await self._await_child(target)
        except (TransportError, AgentServerError) as exc:
            outcome = ChildOutcome(status="failed", error=str(exc))
        await self._end_child(call, target, outcome)

    async def _reconcile(self, target: ChildTarget) -> None:
        """Before following an existing child again: resume it if nothing runs it."""
        transport = target.transport
        child_id = target.session_id
        status = await retrying(
            lambda: transport.get_status(child_id),
            retries=target.stream_retries,
            base_delay=target.stream_retry_base,
        )
        if status.status == "interrupted" or (
            status.status == "running" and not status.is_executing
        ):
            try:
                await retrying(
                    lambda: transport.resume(RemoteResumeRequest(session_id=child_id)),
                    retries=target.stream_retries,
                    base_delay=target.stream_retry_base,
                )
            except AgentServerError as exc:
                if exc.code != "ALREADY_COMPLETED":
                    raise

    async def _end_child(self, call: ToolCall, target: ChildTarget, outcome: ChildOutcome) -> None:
        self._open_children.pop(target.session_id, None)
        if outcome.status == "completed" and target.output_schema is not None:
            try:
                output = target.output_schema.model_validate(outcome.output)
            except ValueError as exc:
                outcome = ChildOutcome(
                    status="failed", error=f"remote output does not match the schema: {exc}"
                )
            else:
                outcome = ChildOutcome(status="completed", output=output.model_dump(mode="json"))
        if outcome.status != "completed" and target.remote is not None:
            failure = RemoteAgentFailedError(target.session_id, outcome.error or outcome.status)
            outcome = ChildOutcome(status=outcome.status, error=str(failure))
        result = (
            ToolOutcome(result=outcome.output)
            if outcome.status == "completed"
            else ToolOutcome(error=outcome.error or f"sub-agent {target.agent_type!r} failed")
        )
        sid = self.writer.session_id
        await self.writer.append(
            *sub_agent_end(
                self.writer.state, target.session_id, target.agent_type, call.id, outcome
            ),
            *result_events(self.agent, sid, call, result, usage=False),
            UsageRecorded(
                kind="subagent",
                name=target.agent_type,
                sub_session_id=target.session_id,
            ),
        )
        await self.fire("after_sub_agent", call, outcome)

    async def _follow(self, target: ChildTarget) -> ChildOutcome:
        return await forward_child(
            self.writer,
            target.transport,
            target.session_id,
            stream_retries=target.stream_retries,
            retry_base_delay=target.stream_retry_base,
        )

    async def _await_child(self, target: ChildTarget) -> ChildOutcome:
        if target.timeout is None:
            return await self._follow(target)
        with anyio.move_on_after(target.timeout):
            return await self._follow(target)
        message = f"sub-agent {target.agent_type!r} timed out after {target.timeout:g}s"
        outcome = await self._halt_child(target, StopRequest("interrupt", message))
        if outcome.status == "completed":
            return outcome  # it finished while being stopped: keep the result
        return ChildOutcome(status="interrupted", error=message)

    # --- endings --------------------------------------------------------------------

    def _completion(self, output: Any) -> list[Event]:
        state = self.writer.state
        return [
            OutputChunk(
                agent_id=state.session_id,
                agent_type=self.agent.name,
                output=output,
            ),
            Completed(output=output),
        ]

    async def _complete(self, output: Any) -> None:
        await self.writer.append(*self._completion(output))
        await self.fire("on_agent_complete", output)

    async def _fail(self, error: str, *, recoverable: bool = False) -> None:
        state = self.writer.state
        await self.writer.append(
            ErrorChunk(
                agent_id=state.session_id,
                agent_type=self.agent.name,
                error=error,
                recoverable=recoverable,
            ),
            Failed(error=error, recoverable=recoverable),
        )
        await self.fire("on_agent_fail", error)

    async def _stopped(self, stop: StopRequest) -> None:
        """Propagate the stop to children, close open tool calls, record the end. Shielded."""
        word = "interrupted" if stop.kind == "interrupt" else "aborted"
        sid = self.writer.session_id
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(self.env.stop_grace):
                async with anyio.create_task_group() as tg:
                    for child_id in list(self._open_children):
                        tg.start_soon(self._stop_child, child_id, stop)
            closing = [
                tool_end(self.agent, sid, call, ToolOutcome(error=word))
                for call in self._open_tools.values()
            ]
            self._open_tools.clear()
            reason = f"aborted: {stop.reason}" if stop.reason else "aborted"

            def ending(state: SessionState) -> list[Event]:
                if state.is_terminal:
                    return []  # the run had already ended when the stop arrived
                if stop.kind == "interrupt":
                    return [*closing, Interrupted(reason=stop.reason)]
                return [
                    *closing,
                    ErrorChunk(
                        agent_id=sid,
                        agent_type=self.agent.name,
                        error=reason,
                    ),
                    Aborted(reason=stop.reason),
                ]

            before = self.writer.last_seq
            await self.writer.append_with(ending)
            if stop.kind == "abort" and self.writer.last_seq > before:
                await self.fire("on_agent_fail", reason)

    async def _halt_child(self, target: ChildTarget, stop: StopRequest) -> ChildOutcome:
        """Send the stop to a child and follow it until it acknowledges (bounded)."""
        child_id = target.session_id
        transport = target.transport
        outcome = ChildOutcome(status="interrupted", error="no acknowledgement from the child")
        started = True
        try:
            if stop.kind == "abort":
                await transport.abort(child_id, stop.reason)
            else:
                await transport.interrupt(child_id, stop.reason)
        except AgentServerError as exc:
            started = exc.code != "NOT_FOUND"  # cut short before the child was created
            if started:
                log.warning("could not stop child %s: %s", child_id, exc)
        except (HelixError, OSError) as exc:  # best effort: the parent stops regardless
            log.warning("could not stop child %s: %s", child_id, exc)
        with anyio.move_on_after(self.env.stop_grace if started else 0):
            try:
                outcome = await self._follow(target)
            except (HelixError, OSError) as exc:
                outcome = ChildOutcome(status="interrupted", error=str(exc))
        return outcome

    async def _stop_child(self, child_id: str, stop: StopRequest) -> None:
        """Stop one open child and record its acknowledgement on its ref (no tool result)."""
        opened = self._open_children.get(child_id)
        if opened is None:
            return
        call, target = opened
        outcome = await self._halt_child(target, stop)
        if outcome.status == "completed":
            # It finished before the stop reached it: keep its result.
            await self._end_child(call, target, outcome)
            return
        self._open_children.pop(child_id, None)
        await self.writer.append(
            *sub_agent_end(self.writer.state, child_id, target.agent_type, call.id, outcome),
            tool_end(self.agent, self.writer.session_id, call, ToolOutcome(error=outcome.error)),
        )

    # --- hooks ------------------------------------------------------------------------

    async def fire(self, name: str, *args: Any) -> None:
        """Call hook ``name`` of the agent, if set; a failing hook is logged and ignored."""
        hook = getattr(self.agent.hooks, name)
        if hook is None:
            return
        state = self.writer.state
        ctx = HookContext(
            session_id=state.session_id,
            agent_type=self.agent.name,
            run_id=self.run_id,
            parent_session_id=state.parent_session_id,
            root_session_id=state.root_session_id,
        )
        try:
            produced = hook(ctx, *args)
            if inspect.isawaitable(produced):
                await produced
        except Exception:
            log.exception("hook %s of agent %s failed", name, self.agent.name)
