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
from typing import Any

import anyio
import msgspec

from helix_agents._aio import closing_iter, prefetch, unwrap_group
from helix_agents.agents.config import AgentConfig, HookContext, RemoteSubAgentTool, SubAgentTool
from helix_agents.agents.tools import COMPANION_TOOL_PREFIX, Tool
from helix_agents.children.call import ChildCall
from helix_agents.children.open_calls import OpenCalls
from helix_agents.children.target import SubAgentToolLike
from helix_agents.companions.parent import Companions
from helix_agents.errors import (
    HelixError,
    OwnershipLost,
    StoreClosedError,
    StoreError,
    ToolsetError,
)
from helix_agents.events import (
    Aborted,
    AbortRequested,
    ErrorChunk,
    Event,
    Failed,
    Interrupted,
    InterruptRequested,
    MessageAppended,
    StepRestarted,
    StepStarted,
    TextDelta,
    UsageRecorded,
)
from helix_agents.hitl.gates import (
    Waiting,
    approval_gate,
    client_call,
    suspension,
)
from helix_agents.log.state import SessionState
from helix_agents.messages import AssistantMessage, ToolCall, UserMessage
from helix_agents.models.base import (
    FINISH_TOOL_NAME,
    LLMError,
    LLMRequest,
    LLMResponse,
    LLMTextDelta,
)
from helix_agents.runtime.decide import (
    FINISH_REMINDER,
    completion,
    final_answer,
    tool_specs,
    unanswered_calls,
    unique_calls,
)
from helix_agents.runtime.env import RunEnv
from helix_agents.runtime.tool_runner import (
    ToolOutcome,
    result_events,
    run_tool_call,
    tool_end,
    tool_start,
    validate_finish,
)
from helix_agents.runtime.writer import SessionWriter, StopRequest
from helix_agents.tracing import (
    call_error,
    end_tool_span,
    stream_is_plain,
    tool_span,
    traced_stream,
)

__all__ = ["SessionRun"]

log = logging.getLogger("helix_agents")

_STOP_REQUESTS: tuple[type[Event], ...] = (InterruptRequested, AbortRequested)


class SessionRun:
    """Runs one session until its current run ends. Use once."""

    def __init__(
        self,
        env: RunEnv,
        agent: AgentConfig,
        writer: SessionWriter,
        run_id: str,
        *,
        restart: StepRestarted | None = None,
    ) -> None:
        self.env = env
        self.agent = agent
        self.writer = writer
        self.run_id = run_id
        self.stop: StopRequest | None = None
        self._scope: anyio.CancelScope | None = None
        self._open = OpenCalls()
        self._companions = (
            Companions(writer, agent, env, self.fire, self._open)
            if agent.persistent_agents
            else None
        )
        self._restart = restart

    # --- control ----------------------------------------------------------------

    def request_stop(self, request: StopRequest) -> None:
        """Stop the run (an abort overrides an interrupt). Safe to call repeatedly."""
        if self.stop is None or request.kind == "abort":
            self.stop = request
        if self._scope is not None:
            self._scope.cancel()

    async def run(self) -> None:
        """Run until the run ends; never raises except for cancellation of the executor."""
        if self._restart is not None:
            # The cut step runs again: first tell readers its partial text is void.
            self.writer.emit(self._restart)
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
            error = unwrap_group(group)
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
        """Stop the run on an interrupt or abort request appended to its log.

        A tail that fails (the store lost its server for a moment: a NATS node
        died) is opened again from the last event it gave, with backoff: a
        watcher's hiccup never ends a healthy run.
        """
        # Nobody can append to a session before its start is in the store; from
        # then on the tail begins where the writer's commit left the log, which
        # the store knows without a read.
        await self.writer.start_settled()
        store = self.env.store
        seen = self.writer.last_seq
        failures = 0
        while True:
            try:
                # Only stop requests: the run's own appends do not wake the watcher.
                tail = store.tail(self.writer.session_id, seen, kinds=_STOP_REQUESTS)
                async with closing_iter(tail) as events:
                    async for event in events:
                        seen, failures = event.seq, 0
                        if isinstance(event, InterruptRequested):
                            self.request_stop(StopRequest("interrupt", event.reason))
                        elif isinstance(event, AbortRequested):
                            self.request_stop(StopRequest("abort", event.reason))
                return  # pragma: no cover - a tail ends only when closed
            except StoreClosedError:
                raise
            except StoreError as error:
                log.warning("watching run %s: %s; watching again", self.run_id, error)
                await anyio.sleep(min(0.05 * 2**failures, 2.0))
                failures += 1

    # --- the loop -----------------------------------------------------------------

    async def _loop(self) -> None:
        if self.agent.toolsets and self.env.toolsets is not None:
            # The toolsets' tools as they are now serve the whole run.
            try:
                self.agent = await self.env.toolsets.expand(self.agent)
            except ToolsetError as error:
                await self._fail(str(error), recoverable=True)
                return
        agent = self.agent
        while True:
            pending = unanswered_calls(self.writer.state)
            if pending:
                finished, waiting = await self._run_calls(pending)
                if finished is not None:
                    if await self._complete(finished.result):
                        return
                    continue  # follow-ups were queued meanwhile: they come first
                if waiting:
                    state = await self.writer.append_with(suspension(agent, waiting))
                    if state.status == "paused":
                        return
                    # An answer came in while the round ran: take the round again.
                continue
            if self.writer.state.run_step_count >= agent.max_steps:
                await self._fail("Max steps exceeded")  # the seeds' text (max_steps: the agent's)
                return
            if self._companions is not None:
                # Children's outcomes not yet seen reach the model first (push).
                await self._companions.deliver()
            try:
                response = await self.step()
            except LLMError as error:
                await self._fail(str(error), recoverable=error.retryable)
                return
            if response is None:
                return  # a final answer: recorded and completed in one batch
            if not response.tool_calls:
                if agent.output_schema is None:
                    # Its answer was not the end: follow-ups were queued meanwhile.
                    continue
                # The output schema wants a __finish__ call.
                await self.writer.append(
                    MessageAppended(message=UserMessage(content=FINISH_REMINDER))
                )

    async def step(self) -> LLMResponse | None:
        """Run one model step: ``step_started``, the streamed text, the assistant turn.

        Returns the turn (its calls made unique), or None when the turn ended the
        run (a final answer, recorded with the completion in one batch). Also
        used alone by a durable engine, one step per durable step
        (``helix_agents.engines.durable``); the caller runs the writer's flusher.
        """
        agent = self.agent
        llm = self.env.llm_override or agent.llm or self.env.llm
        if llm is None:
            raise LLMError(f"agent {agent.name!r} has no LLM and the executor has no default")
        state = self.writer.state
        step = StepStarted(step=state.run_step_count + 1, taken=len(state.queued_messages))
        if step.taken:
            # Follow-up messages queued meanwhile join the conversation at this
            # step: committed first, so the model sees exactly what the log says.
            state = await self.writer.append(step)
        else:
            self.writer.emit(step)
        prompt = agent.system_prompt
        request = LLMRequest(
            messages=list(state.messages),
            system_prompt=prompt(dict(state.custom_state)) if callable(prompt) else prompt,
            tools=tool_specs(self.agent),
            model=agent.llm_config.model,
            temperature=agent.llm_config.temperature,
            max_tokens=agent.llm_config.max_tokens,
            agent_type=agent.name,
            session_id=state.session_id,
        )
        response: LLMResponse | None = None
        # A traced stream is read in a task of its own (its span stays current
        # there); the model's own stream right here, with no task hop per delta
        # (the deltas it hands over at once still share one commit: the run
        # emits them, its writer commits what has queued up).
        plain = stream_is_plain(self.env.tracer)
        stream = traced_stream(self.env.tracer, llm, request)
        async with prefetch(stream, in_task=not plain) as parts:
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
        calls = unique_calls(self.agent, self.writer.state, response.tool_calls)
        usage = response.usage
        final = final_answer(self.agent, self.writer.state, calls, response.content)
        turn: list[Event] = [
            MessageAppended(
                message=AssistantMessage(content=response.content, tool_calls=calls),
            ),
            UsageRecorded(
                kind="tokens",
                name=response.model,
                input_tokens=usage.input_tokens if usage else 0,
                output_tokens=usage.output_tokens if usage else 0,
            ),
        ]
        # Decided on the latest log: a follow-up queued meanwhile keeps the run
        # going (the finish is recorded, the completion is not).
        state = await self.writer.append_with(
            lambda latest: [*turn, *(final[:-2] if latest.queued_messages else final)]
        )
        if final and state.status == "completed":
            await self.fire("on_agent_complete", state.output)
            return None
        return msgspec.structs.replace(response, tool_calls=calls)

    async def _run_calls(self, calls: list[ToolCall]) -> tuple[ToolOutcome | None, Waiting]:
        """Run the calls concurrently; return a valid finish (if any) and what waits for people."""
        finished: ToolOutcome | None = None
        waiting = Waiting()
        agent, writer = self.agent, self.writer
        async with anyio.create_task_group() as tg:
            for call in calls:
                tool = agent.tool(call.name)
                if call.name == FINISH_TOOL_NAME and agent.output_schema is not None:
                    outcome = await self._finish_call(call)
                    if outcome.error is None and finished is None:
                        finished = outcome
                    continue
                if self._companions is not None and call.name.startswith(COMPANION_TOOL_PREFIX):
                    tg.start_soon(self._call_companion, call, waiting)
                    continue
                if tool is None:
                    await self._record(call, ToolOutcome(error=f"unknown tool {call.name!r}"))
                    continue
                gate = await approval_gate(writer, agent, call, tool)
                if gate == "wait":
                    waiting.approval.append(call.id)
                elif gate == "done":
                    continue
                elif isinstance(tool, SubAgentTool | RemoteSubAgentTool):
                    tg.start_soon(self._call_sub_agent, call, tool, waiting)
                elif tool.is_client_tool:
                    if await client_call(writer, agent, call, tool):
                        waiting.client.append(call.id)
                else:
                    tg.start_soon(self._call_tool, call, tool)
        return finished, waiting

    async def _record(self, call: ToolCall, outcome: ToolOutcome) -> None:
        sid = self.writer.session_id
        with tool_span(self.env.tracer, self.agent.name, sid, call) as span:
            end_tool_span(span, outcome.error)
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

    async def _call_tool(self, call: ToolCall, tool: Tool[Any]) -> None:
        # Not forgotten on cancellation: the stop cleanup closes it with a tool_end.
        self._open.open_tool(call)
        with tool_span(self.env.tracer, self.agent.name, self.writer.session_id, call) as span:
            outcome = await run_tool_call(self.agent, self.writer, call, tool, self.fire)
            end_tool_span(span, outcome.error)
        self._open.close_tool(call.id)

    async def _call_sub_agent(
        self, call: ToolCall, tool: SubAgentToolLike, waiting: Waiting
    ) -> None:
        child = ChildCall(self.writer, self.agent, call, tool, self.env, self.fire)
        # Registered before it opens: the stop cleanup halts it if it is open.
        self._open.follow(child)
        with child.span() as span:
            if await child.run():
                waiting.children[child.session_id] = call.id
            end_tool_span(span, call_error(self.writer.state, call.id))
        self._open.drop(child.session_id)

    async def _call_companion(self, call: ToolCall, waiting: Waiting) -> None:
        assert self._companions is not None
        with tool_span(self.env.tracer, self.agent.name, self.writer.session_id, call) as span:
            await self._companions.call(call, waiting)
            end_tool_span(span, call_error(self.writer.state, call.id))

    # --- endings --------------------------------------------------------------------

    async def _complete(self, output: Any) -> bool:
        """Complete with ``output``, unless follow-ups are queued (then False: go on)."""
        ending = completion(self.agent, self.writer.state, output)
        state = await self.writer.append_with(
            lambda latest: [] if latest.queued_messages else ending
        )
        if state.status != "completed":
            return False
        await self.fire("on_agent_complete", output)
        return True

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
                    for child in self._open.children():
                        tg.start_soon(child.halt, stop)
                    if stop.kind == "abort" and self._companions is not None:
                        # Stopped for good: so are its companions running on their own.
                        tg.start_soon(self._companions.terminate_live, stop.reason)
            closing = [
                tool_end(self.agent, sid, call, ToolOutcome(error=word))
                for call in self._open.take_tools()
            ]
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
