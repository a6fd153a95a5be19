"""``RunActions``: what every driver of a run carries out, written once.

:func:`~helix_agents.runtime.decide.next_action` decides; this carries the
decision out on the session's log: a model step (``step_started``, the
streamed text, the turn), a round's routing (the calls recorded at once, the
approval gates, the client tools; the calls left to run), a completion, a
failure, and the agent's hooks. The built-in loop (``run_loop.SessionRun``)
and the durable steps (``helix_agents.engines.durable``) both act through it,
so the log one runtime writes is the log the others write.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pydantic_core

from helix_agents._aio import prefetch
from helix_agents.agents.config import AgentConfig, HookContext
from helix_agents.agents.tools import Tool
from helix_agents.events import (
    Event,
    MessageAppended,
    PartialOutput,
    ReasoningDelta,
    StepStarted,
    TextDelta,
    UsageRecorded,
)
from helix_agents.hitl.gates import Waiting, approval_gate, client_call
from helix_agents.messages import AssistantMessage, ToolCall
from helix_agents.models.base import (
    FINISH_TOOL_NAME,
    LLMError,
    LLMReasoningDelta,
    LLMRequest,
    LLMResponse,
    LLMStreamEvent,
    LLMTextDelta,
    LLMToolCallDelta,
)
from helix_agents.models.names import session_model
from helix_agents.models.retrying import with_retries
from helix_agents.runtime.decide import (
    JOB_KINDS,
    JobKind,
    call_kind,
    completion,
    failure,
    failure_text,
    final_answer,
    reminder,
    tool_specs,
    unique_calls,
)
from helix_agents.runtime.env import RunEnv
from helix_agents.runtime.tool_runner import (
    ToolOutcome,
    result_events,
    tool_start,
    validate_finish,
)
from helix_agents.runtime.writer import SessionWriter
from helix_agents.tracing import end_tool_span, stream_is_plain, tool_span, traced_stream

__all__ = ["PARTIAL_OUTPUT_MIN_CHARS", "RunActions", "Routed", "StepChunks", "partial_json"]

log = logging.getLogger("helix_agents")


PARTIAL_OUTPUT_MIN_CHARS = 32
"""How much ``__finish__`` argument text must arrive before the output so far is parsed
again: this many characters, or a quarter of what was parsed before if more (specs/llm.md)."""

# A number or a literal at the very end of unfinished JSON may still grow ("12" of
# "125", "tru" of "true"): cut it, so each partial value is one the whole text keeps
# (inside a string it only holds back those few characters).
_MAY_GROW = re.compile(r"([:,\[]\s*)[-+.0-9eEtrufalsn]+$")


def partial_json(text: str) -> Any:
    """The JSON value an unfinished JSON text holds so far (``None``: none yet, or not JSON).

    Open strings, arrays and objects are closed where the text stops; a key
    without its value, and a number or literal that may still grow, are left
    out (pydantic-core's partial parser, ``trailing-strings`` mode).
    """
    cut = _MAY_GROW.sub(r"\1", text)
    if not cut.strip():
        return None
    try:
        return pydantic_core.from_json(cut, allow_partial="trailing-strings")
    except ValueError:
        return None


class StepChunks:
    """Turns a model step's stream pieces into the chunks the step emits.

    Text and reasoning pieces become ``text_delta`` / ``reasoning_delta``
    chunks, in the order they came; the pieces of the ``__finish__`` call's
    arguments (``outputs``: the agent has an output schema) become at most one
    ``partial_output`` per batch of pieces, when the text has grown by
    :data:`PARTIAL_OUTPUT_MIN_CHARS` (or a quarter) since it was last parsed
    and parses to a new JSON object.
    """

    def __init__(self, agent_id: str, agent_type: str, *, outputs: bool) -> None:
        self.agent_id = agent_id
        self.agent_type = agent_type
        self.outputs = outputs
        self.response: LLMResponse | None = None
        self._names: dict[int, str] = {}
        self._args: dict[int, list[str]] = {}
        self._length = 0
        self._parsed_at = 0
        self._shown: Any = None

    def take(self, batch: Sequence[LLMStreamEvent]) -> list[Event]:
        """The chunks of one batch of pieces (the response, if it came, kept in ``response``)."""
        chunks: list[Event] = []
        agent_id, agent_type = self.agent_id, self.agent_type
        for part in batch:
            if isinstance(part, LLMTextDelta):
                if part.text:
                    chunks.append(
                        TextDelta(agent_id=agent_id, agent_type=agent_type, delta=part.text)
                    )
            elif isinstance(part, LLMReasoningDelta):
                if part.text:
                    chunks.append(
                        ReasoningDelta(agent_id=agent_id, agent_type=agent_type, delta=part.text)
                    )
            elif isinstance(part, LLMToolCallDelta):
                if self.outputs:
                    self._piece(part)
            else:
                self.response = part
        if self.outputs and self.response is None:
            chunks.extend(self._partial())
        return chunks

    def _piece(self, part: LLMToolCallDelta) -> None:
        if part.name:
            self._names.setdefault(part.index, part.name)
        name = self._names.get(part.index)
        if name is not None and name != FINISH_TOOL_NAME:
            self._args.pop(part.index, None)  # another tool's arguments: not the output
            return
        if part.arguments:
            self._args.setdefault(part.index, []).append(part.arguments)
            if name == FINISH_TOOL_NAME:
                self._length = max(self._length, sum(map(len, self._args[part.index])))

    def _partial(self) -> list[Event]:
        finish = next((i for i, n in self._names.items() if n == FINISH_TOOL_NAME), None)
        grown = self._length - self._parsed_at
        if finish is None or grown < max(PARTIAL_OUTPUT_MIN_CHARS, self._parsed_at // 4):
            return []
        text = "".join(self._args.get(finish, []))
        self._parsed_at = len(text)
        value = partial_json(text)
        if not isinstance(value, dict) or value == self._shown:
            return []
        self._shown = value
        return [PartialOutput(agent_id=self.agent_id, agent_type=self.agent_type, output=value)]


@dataclass
class Routed:
    """A round routed: the calls left to run (with their kind), and what waits for people."""

    jobs: list[tuple[ToolCall, JobKind]] = field(default_factory=list)
    waiting: Waiting = field(default_factory=Waiting)


class RunActions:
    """Carries out a run's actions on ``writer``'s session (see the module doc)."""

    def __init__(self, env: RunEnv, agent: AgentConfig, writer: SessionWriter, run_id: str) -> None:
        self.env = env
        self.agent = agent
        self.writer = writer
        self.run_id = run_id

    async def step(self) -> LLMResponse | None:
        """Run one model step: ``step_started``, the streamed text, the assistant turn.

        Returns the turn (its calls made unique), or None when the turn ended the
        run (a final answer, recorded with the completion in one batch). A turn
        with no call from an agent with an output schema is followed, in the
        same batch, by the reminder to call ``__finish__``. The caller runs the
        writer's flusher.
        """
        agent = self.agent
        named = self.writer.state.model  # a fork's UseAgent(model=...)
        own = session_model(named) if named else agent.llm
        llm = self.env.llm_override or own or self.env.llm
        if llm is None:
            raise LLMError(f"agent {agent.name!r} has no LLM and the executor has no default")
        self.env.models.use(llm)  # its HTTP client stays open until the executor closes
        llm = with_retries(llm, agent.llm_config.retry)
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
            tools=tool_specs(agent),
            model=agent.llm_config.model,
            temperature=agent.llm_config.temperature,
            max_tokens=agent.llm_config.max_tokens,
            agent_type=agent.name,
            session_id=state.session_id,
        )
        pieces = StepChunks(state.session_id, agent.name, outputs=agent.output_schema is not None)
        # A traced stream is read in a task of its own (its span stays current
        # there); the model's own stream right here, with no task hop per delta
        # (the deltas it hands over at once still share one commit: the run
        # emits them, its writer commits what has queued up).
        plain = stream_is_plain(self.env.tracer)
        stream = traced_stream(self.env.tracer, llm, request)
        async with prefetch(stream, in_task=not plain) as parts:
            async for batch in parts.batches():
                # Deltas that arrived together share one append.
                chunks = pieces.take(batch)
                if chunks:
                    self.writer.emit(*chunks)
        response = pieces.response
        if response is None:
            raise LLMError("the model's stream ended without a response")
        calls = unique_calls(agent, self.writer.state, response.tool_calls)
        usage = response.usage
        final = final_answer(agent, self.writer.state, calls, response.content)
        turn: list[Event] = [
            MessageAppended(
                message=AssistantMessage(
                    content=response.content,
                    tool_calls=calls,
                    reasoning=response.reasoning or msgspec.UNSET,
                )
            ),
            UsageRecorded(
                kind="tokens",
                name=response.model,
                input_tokens=usage.input_tokens if usage else 0,
                output_tokens=usage.output_tokens if usage else 0,
                cached_input_tokens=usage.cached_input_tokens if usage else 0,
                reasoning_tokens=usage.reasoning_tokens if usage else 0,
            ),
            *reminder(agent, calls),
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

    async def route(self, calls: list[ToolCall]) -> Routed:
        """Route a round's calls: record the inline ones, gate the rest; what is left to run.

        ``__finish__`` (validated), unknown tools, denied calls and client tools
        are recorded here; a call waiting for a person is in ``waiting``; the
        tools, children and companion calls to run are in ``jobs``.
        """
        routed = Routed()
        agent, writer = self.agent, self.writer
        for call in calls:
            kind = call_kind(agent, call)
            if kind == "finish":
                outcome = validate_finish(agent, call.arguments)
                shown = (
                    outcome if outcome.error is not None else ToolOutcome(result="output accepted")
                )
                await self._record(call, shown, traced=False)
                continue
            if kind == "companion":
                routed.jobs.append((call, "companion"))
                continue
            tool = agent.tool(call.name)
            if tool is None:
                await self._record(call, ToolOutcome(error=f"unknown tool {call.name!r}"))
                continue
            gate = await approval_gate(writer, agent, call, tool)
            if gate == "wait":
                routed.waiting.approval.append(call.id)
            elif gate == "go" and isinstance(tool, Tool) and kind == "client":
                if await client_call(writer, agent, call, tool):
                    routed.waiting.client.append(call.id)
            elif gate == "go":
                routed.jobs.append((call, JOB_KINDS[kind]))
        return routed

    async def _record(self, call: ToolCall, outcome: ToolOutcome, *, traced: bool = True) -> None:
        sid = self.writer.session_id
        if traced:
            with tool_span(self.env.tracer, self.agent.name, sid, call) as span:
                end_tool_span(span, outcome.error)
        await self.writer.append(
            tool_start(self.agent, sid, call),
            *result_events(self.agent, sid, call, outcome, usage=False),
        )

    async def complete(self, output: Any) -> None:
        """Complete with ``output``, unless follow-ups were queued meanwhile (they come first)."""
        ending = completion(self.agent, self.writer.state, output)
        state = await self.writer.append_with(
            lambda latest: [] if latest.queued_messages else ending
        )
        if state.status == "completed":
            await self.fire("on_agent_complete", output)

    async def fail(self, error: str, *, recoverable: bool = False) -> None:
        """Fail the run with ``error`` (its error chunk, ``failed``, the ``on_agent_fail`` hook)."""
        sid = self.writer.session_id
        error = failure_text(self.writer.state, error)
        await self.writer.append(*failure(self.agent, sid, error, recoverable=recoverable))
        await self.fire("on_agent_fail", error)

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
