"""Where a run reads its model's stream (specs/runtime.md, "Reading the model").

With no tracer the run reads the model's stream in its own task: no task and
no hop per delta (at a thousand live sessions each hop was a wait behind all
of them). A traced stream is read in a task of its own, where its ``chat``
span stays current. Either way every delta is committed in order, a failure
of the stream is the run's failure, and an interrupted run closes the stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
from otel_spans import recording

from helix_agents import AgentExecutor, AgentHooks, define_agent
from helix_agents.events import TextDelta
from helix_agents.log import project_state
from helix_agents.models import LLMError, LLMRequest, LLMResponse, LLMStreamEvent, LLMTextDelta
from helix_agents.stores import MemoryEventStore
from helix_agents.tracing import NO_TRACER, Tracer

LIMIT = 10


class RecordingModel:
    """Streams ``words`` (then fails, or answers), noting the task each item is produced in."""

    def __init__(self, words: list[str], *, fail: bool = False, hold: bool = False) -> None:
        self.words = words
        self.fail = fail
        self.hold = hold  # wait for ever after the words (until the run is stopped)
        self.tasks: list[int] = []
        self.closed = False
        self.holding = anyio.Event()

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        try:
            for word in self.words:
                self.tasks.append(anyio.get_current_task().id)
                yield LLMTextDelta(text=word)
            if self.fail:
                raise LLMError("the model went away", retryable=True)
            if self.hold:
                self.holding.set()
                await anyio.sleep_forever()
            self.tasks.append(anyio.get_current_task().id)
            yield LLMResponse(content="".join(self.words), finish_reason="stop", model="m")
        finally:
            self.closed = True


async def _run(
    model: RecordingModel, tracer: Tracer, session_id: str
) -> tuple[int, list[str], str]:
    """Run an agent on ``model``: the run's own task id, the deltas committed, its status."""
    run_task: list[int] = []
    hooks = AgentHooks(on_agent_start=lambda ctx: run_task.append(anyio.get_current_task().id))
    agent = define_agent("talker", llm=model, hooks=hooks)
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [agent], tracer=tracer) as executor:
            handle = await executor.execute(agent, "go", session_id=session_id)
            if model.hold:
                await model.holding.wait()
                await executor.service.interrupt(session_id, "enough")
            await handle.result()
            log = await store.read(session_id)
    deltas = [event.delta for event in log if isinstance(event, TextDelta)]
    return run_task[0], deltas, project_state(log).status


async def test_without_a_tracer_the_model_is_read_in_the_runs_own_task() -> None:
    model = RecordingModel([f"w{i} " for i in range(50)])
    run_task, deltas, status = await _run(model, NO_TRACER, "plain-1")
    assert status == "completed"
    assert deltas == model.words  # every delta, in order
    assert set(model.tasks) == {run_task}  # no reader task between the model and the run
    assert model.closed


async def test_a_traced_model_stream_is_read_in_a_task_of_its_own() -> None:
    tracer, _exporter = recording()
    model = RecordingModel([f"w{i} " for i in range(5)])
    run_task, deltas, status = await _run(model, tracer, "traced-1")
    assert status == "completed"
    assert deltas == model.words
    assert len(set(model.tasks)) == 1  # one reader task
    assert run_task not in model.tasks  # not the run's own
    assert model.closed


async def test_a_stream_that_fails_read_in_place_fails_the_run_after_its_deltas() -> None:
    model = RecordingModel(["a ", "b "], fail=True)
    _, deltas, status = await _run(model, NO_TRACER, "plain-fail")
    assert status == "failed"
    assert deltas == ["a ", "b "]
    assert model.closed


async def test_an_interrupted_run_closes_the_stream_it_reads_in_place() -> None:
    model = RecordingModel(["a ", "b "], hold=True)
    _, deltas, status = await _run(model, NO_TRACER, "plain-stop")
    assert status == "interrupted"
    assert deltas == ["a ", "b "]
    assert model.closed
