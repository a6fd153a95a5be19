"""The A2A bridge's small pieces: messages read, answers parsed, values and errors across A2A."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.types import Artifact, Message, Part, Role, Task, TaskState, TaskStatus
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from helix_agents import PendingInput
from helix_agents.bridges.a2a.inbound import answers_of, read_message
from helix_agents.bridges.a2a.remote_view import output_of
from helix_agents.bridges.a2a.wire import (
    a2a_error,
    data_part,
    part_value,
    plain,
    safe_id,
    server_error,
)
from helix_agents.errors import AgentServerError

ASK = PendingInput(kind="client_tool", tool_call_id="c1", tool_name="ask", owner_session_id="s")
RED = {"color": "red"}
GATE = PendingInput(kind="approval", tool_call_id="c2", tool_name="rm", owner_session_id="s")


def message(*parts: Part, role: Role = Role.ROLE_USER) -> Message:
    return Message(role=role, message_id="m", parts=list(parts))


def test_json_values_cross_a2a_with_their_ints() -> None:
    value = {"count": 42, "ratio": 0.5, "items": [1, 2.0, None, "x"], "big": 2**53}
    assert part_value(data_part(value)) == {**value, "items": [1, 2, None, "x"]}
    assert plain(3.0) == 3
    assert isinstance(plain(3.5), float)


def test_ids_that_are_not_helix_ids_are_replaced_by_a_stable_digest() -> None:
    assert safe_id("msg-1.a:b_c", "a2a-") == "msg-1.a:b_c"
    odd = safe_id("a message / id", "a2a-")
    assert odd.startswith("a2a-")
    assert odd == safe_id("a message / id", "a2a-")
    assert safe_id("", "a2a-") != safe_id("x", "a2a-")


def test_a_message_is_read_as_texts_and_data() -> None:
    content = read_message(message(Part(text="hi"), data_part({"q": 1}), Part(text="there")))
    assert content.texts == ["hi", "there"]
    assert content.start_input() == {"q": 1}
    assert content.text() == 'hi\nthere\n{"q":1}'


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (message(Part()), InvalidParamsError),
        (message(Part(text="   ")), InvalidParamsError),
        (message(Part(url="https://x/y.png")), ContentTypeNotSupportedError),
        (message(Part(raw=b"\x00")), ContentTypeNotSupportedError),
        (message(Part(text="hi"), role=Role.ROLE_AGENT), InvalidParamsError),
    ],
)
def test_what_a_message_cannot_hold_gets_a2a_s_error(bad: Message, error: type[Exception]) -> None:
    with pytest.raises(error):
        read_message(bad)


@pytest.mark.parametrize(
    ("parts", "pending", "expected"),
    [
        ([Part(text="teal")], [ASK], [("client_tool", "c1", "teal", None, False)]),
        ([Part(text="Yes!")], [GATE], [("approval", "c2", None, None, True)]),
        ([Part(text="no")], [GATE], [("approval", "c2", None, None, False)]),
        (
            [data_part({"toolCallId": "c2", "approved": False, "reason": "risky"})],
            [ASK, GATE],
            [("approval", "c2", None, None, False)],
        ),
        (
            [data_part({"toolCallId": "c1", "error": "no camera"})],
            [ASK, GATE],
            [("client_tool", "c1", None, "no camera", False)],
        ),
        (
            [data_part({"result": {"color": "red"}})],
            [ASK],
            [("client_tool", "c1", {"color": "red"}, None, False)],
        ),
        # An input no longer open may be a retry: the session decides.
        (
            [data_part({"toolCallId": "old", "result": 1})],
            [],
            [("client_tool", "old", 1, None, False)],
        ),
    ],
)
def test_answers_are_read_from_texts_and_data_parts(
    parts: list[Part], pending: list[PendingInput], expected: list[tuple[Any, ...]]
) -> None:
    answers = answers_of(read_message(message(*parts)), pending)
    assert [(a.kind, a.tool_call_id, a.result, a.error, a.approved) for a in answers] == expected


@pytest.mark.parametrize(
    "parts",
    [
        [Part(text="teal")],  # two inputs are open: which one?
        [data_part({"result": 1})],
        [data_part({"toolCallId": "c2", "approved": "yes"})],
        [data_part({"toolCallId": "c1"})],
        [data_part([1, 2])],
    ],
)
def test_an_answer_that_names_nothing_clearly_is_refused(parts: list[Part]) -> None:
    with pytest.raises(InvalidParamsError):
        answers_of(read_message(message(*parts)), [ASK, GATE])


def test_a_text_that_is_no_decision_does_not_answer_an_approval() -> None:
    with pytest.raises(InvalidParamsError):
        answers_of(read_message(message(Part(text="maybe"))), [GATE])


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("INVALID_REQUEST", InvalidParamsError),
        ("ALREADY_ANSWERED", InvalidParamsError),
        ("ALREADY_COMPLETED", UnsupportedOperationError),
        ("SESSION_FAILED", UnsupportedOperationError),
    ],
)
def test_a_helix_refusal_crosses_a2a_and_comes_back_with_its_code(code: Any, kind: type) -> None:
    sent = a2a_error(AgentServerError(code, "why"))
    assert isinstance(sent, kind)
    back = server_error(sent)
    assert (back.code, back.message) == (code, "why")


def test_another_peers_errors_map_to_the_nearest_code() -> None:
    assert isinstance(a2a_error(AgentServerError("NOT_FOUND", "x"), task=True), TaskNotFoundError)
    assert server_error(TaskNotFoundError("x")).code == "NOT_FOUND"
    assert server_error(TaskNotCancelableError("x")).code == "ALREADY_COMPLETED"
    assert server_error(ContentTypeNotSupportedError("x")).code == "INVALID_REQUEST"


def _done(*artifacts: Artifact, status_text: str = "") -> Task:
    status = TaskStatus(state=TaskState.TASK_STATE_COMPLETED)
    if status_text:
        status.message.CopyFrom(message(Part(text=status_text), role=Role.ROLE_AGENT))
    return Task(id="t", context_id="c", status=status, artifacts=list(artifacts))


def test_a_generic_tasks_output_prefers_data_then_text() -> None:
    text = Artifact(artifact_id="a", parts=[Part(text="hello "), Part(text="world")])
    data = Artifact(artifact_id="b", parts=[data_part({"n": 1})])
    named = Artifact(artifact_id="x", name="output", parts=[Part(text='{"answer": "yes"}')])
    assert output_of(_done(text)) == "hello world"
    assert output_of(_done(text, data)) == {"n": 1}
    assert output_of(_done(text, named)) == {"answer": "yes"}
    assert output_of(_done(status_text="just this")) == "just this"
