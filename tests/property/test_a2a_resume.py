"""A generic A2A peer's task, read through ``RemoteView`` from any snapshots, with any reconnects.

Hypothesis builds a task's life (text appended to artifacts one after the
other, new artifacts, data parts, requests for input and their answers, the
end) and a reader that sees some of its snapshots, reconnecting (a fresh view
from the sequence it holds) at any of them. Whatever it saw, the chunks it
got carry strictly increasing sequences, hold every unit of the artifacts
once and in order, announce each request for input it saw, and end once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from a2a.types import Artifact, Message, Part, Role, Task, TaskState, TaskStatus
from hypothesis import given, strategies as st

from helix_agents.bridges.a2a.remote_view import Link, RemoteView
from helix_agents.bridges.a2a.wire import data_part, struct_of
from helix_agents.events import CustomChunk, InputRequired, TextDelta
from helix_agents.protocol import ChunkEvent, EndEvent

SID = "p-remote-c"


@dataclass
class Life:
    """A task being lived: its artifacts, history and state; a snapshot after each step."""

    artifacts: list[tuple[str, list[Part]]] = field(default_factory=list)
    history: list[Message] = field(default_factory=list)
    state: TaskState = TaskState.TASK_STATE_WORKING
    question: str = ""
    snapshots: list[Task] = field(default_factory=list)
    text: str = ""
    episodes: int = 0

    def snap(self) -> None:
        status = TaskStatus(state=self.state)
        if self.question:
            status.message.CopyFrom(
                Message(role=Role.ROLE_AGENT, message_id="q", parts=[Part(text=self.question)])
            )
        self.snapshots.append(
            Task(
                id="t1",
                context_id=SID,
                status=status,
                artifacts=[
                    Artifact(artifact_id=aid, parts=list(parts)) for aid, parts in self.artifacts
                ],
                history=list(self.history),
            )
        )


STEP = st.one_of(
    st.tuples(st.just("text"), st.text(alphabet="abcxyz ", min_size=1, max_size=6)),
    st.tuples(st.just("new"), st.just("")),
    st.tuples(st.just("data"), st.just("")),
    st.tuples(st.just("ask"), st.just("")),
)


def live(steps: list[tuple[str, str]]) -> Life:
    life = Life()
    life.history.append(Message(role=Role.ROLE_USER, message_id=f"{SID}:start", parts=[]))
    life.snap()
    for kind, value in steps:
        if kind == "ask":
            life.episodes += 1
            life.state, life.question = TaskState.TASK_STATE_INPUT_REQUIRED, f"q{life.episodes}"
            life.snap()
            life.history.append(
                Message(
                    role=Role.ROLE_USER,
                    message_id=f"a{life.episodes}",
                    parts=[Part(text="answer")],
                    metadata=struct_of({"helix": {"op": "answer"}}),
                )
            )
            life.state, life.question = TaskState.TASK_STATE_WORKING, ""
        elif kind == "new" or not life.artifacts:
            life.artifacts.append((f"art{len(life.artifacts)}", []))
        if kind == "text":
            life.artifacts[-1][1].append(Part(text=value))
            life.text += value
        elif kind == "data":
            life.artifacts[-1][1].append(data_part({"n": len(life.text)}))
        life.snap()
    life.state = TaskState.TASK_STATE_COMPLETED
    life.snap()
    return life


@given(
    steps=st.lists(STEP, max_size=12),
    seen=st.lists(st.tuples(st.integers(min_value=0, max_value=100), st.booleans()), max_size=10),
)
def test_a_reader_gets_every_unit_once_in_order_whatever_it_saw(
    steps: list[tuple[str, str]], seen: list[tuple[int, bool]]
) -> None:
    life = live(steps)
    last = len(life.snapshots) - 1
    link = Link(session_id=SID, agent_type="peer", helix=False, task_id="t1", ancestors=["p"])
    view = RemoteView(link, 0)
    chunks: list[ChunkEvent] = []
    ends = []
    observed = sorted({min(index, last) for index, _ in seen} | {last})
    reconnects = dict(seen)
    for index in observed:
        if reconnects.get(index):
            view = RemoteView(link, view.held)  # a new stream, from what the reader holds
        for event in view.feed_task(life.snapshots[index]):
            if isinstance(event, ChunkEvent):
                chunks.append(event)
            else:
                ends.append(event)
    sequences = [c.sequence for c in chunks]
    assert sequences == sorted(set(sequences))
    texts = "".join(c.chunk.delta for c in chunks if isinstance(c.chunk, TextDelta))
    assert texts == life.text
    parts = [c for c in chunks if isinstance(c.chunk, CustomChunk)]
    assert len(parts) == sum(1 for kind, _ in steps if kind == "data")
    notices = [c.chunk for c in chunks if isinstance(c.chunk, InputRequired)]
    for notice in notices:
        (entry,) = notice.pending
        assert entry.tool_call_id.startswith(f"{SID}.input")
        assert entry.path == ["p", SID]
        assert entry.arguments["message"].startswith("q")
    asked_while_seen = {
        life.snapshots[i].status.message.parts[0].text
        for i in observed
        if life.snapshots[i].status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    }
    announced = {n.pending[0].arguments["message"] for n in notices}
    assert announced == asked_while_seen
    numbers = [int(n.pending[0].tool_call_id.rsplit("input", 1)[1]) for n in notices]
    assert numbers == sorted(numbers)
    questions = [n.pending[0].arguments["message"] for n in notices]
    assert questions == [f"q{k}" for k in numbers]
    assert [type(e) for e in ends] == [EndEvent]
