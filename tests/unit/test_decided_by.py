"""``decidedBy``: the check, the old logs without it, and the bridges that read it."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from helix_agents.errors import AgentServerError
from helix_agents.events import ApprovalGiven, PendingInput
from helix_agents.log import decode_event, encode_event
from helix_agents.protocol import DECIDED_BY_MAX, SubmitApprovalRequest, checked_decided_by


@pytest.mark.parametrize(
    "name", [None, "Ada", "Grace Hopper (ops)", "ünïcødé 名前", "x" * DECIDED_BY_MAX]
)
def test_a_fit_name_or_none_passes_unchanged(name: str | None) -> None:
    assert checked_decided_by(name) == name


@pytest.mark.parametrize(
    ("name", "says"),
    [
        (7, "must be a string, not int"),
        ({"name": "ada"}, "must be a string, not dict"),
        ("", "must not be empty"),
        (" \u3000 ", "must not be empty"),
        ("x" * (DECIDED_BY_MAX + 1), f"longer than {DECIDED_BY_MAX}"),
        ("ada\r", "control characters"),
        ("\x7fada", "control characters"),
        ("ada\x85", "control characters"),
    ],
)
def test_a_bad_name_is_invalid_request(name: Any, says: str) -> None:
    with pytest.raises(AgentServerError) as refused:
        checked_decided_by(name)
    assert refused.value.code == "INVALID_REQUEST"
    assert says in refused.value.message


def test_an_old_log_without_the_field_still_decodes() -> None:
    old = (
        b'{"type":"approval_given","sessionId":"s","seq":4,"ts":1.5,'
        b'"toolCallId":"call_1","approved":true,"reason":"ok","expired":false}'
    )
    event = decode_event(old)
    assert isinstance(event, ApprovalGiven)
    assert event.decided_by is None
    # And the new field round-trips under its wire name.
    new = msgspec.structs.replace(event, decided_by="Ada")
    assert b'"decidedBy":"Ada"' in encode_event(new)
    assert decode_event(encode_event(new)) == new


def test_the_wire_name_is_camel_case_and_optional() -> None:
    body = b'{"sessionId":"s","toolCallId":"t","approved":false,"decidedBy":"Ada"}'
    request = msgspec.json.decode(body, type=SubmitApprovalRequest)
    assert request.decided_by == "Ada"
    bare = msgspec.json.decode(
        b'{"sessionId":"s","toolCallId":"t","approved":false}', type=SubmitApprovalRequest
    )
    assert bare.decided_by is None


def _approval_entry() -> PendingInput:
    return PendingInput(
        kind="approval", tool_call_id="call_rm", owner_session_id="s", tool_name="rm"
    )


def test_an_a2a_data_part_names_the_decider() -> None:
    pytest.importorskip("a2a")
    from a2a.utils.errors import InvalidParamsError

    from helix_agents.bridges.a2a.inbound import Incoming, answers_of

    (answer,) = answers_of(
        Incoming(texts=[], data=[{"approved": True, "decidedBy": "Ada"}]), [_approval_entry()]
    )
    assert (answer.approved, answer.decided_by) == (True, "Ada")
    (plain,) = answers_of(Incoming(texts=["yes"], data=[]), [_approval_entry()])
    assert plain.decided_by is None
    with pytest.raises(InvalidParamsError, match="control characters"):
        answers_of(
            Incoming(texts=[], data=[{"approved": True, "decidedBy": "a\nb"}]),
            [_approval_entry()],
        )


def test_an_ag_ui_resume_payload_names_the_decider() -> None:
    from helix_agents.server.streams.front_end_runs import ResumeEntry, _decision

    entry = ResumeEntry(
        interrupt_id="call_rm",
        status="resolved",
        payload={"approved": False, "reason": "no", "decidedBy": "Ada"},
    )
    assert _decision(entry) == (False, "no", "Ada")
    assert _decision(ResumeEntry(interrupt_id="c", status="resolved", payload=True)) == (
        True,
        None,
        None,
    )
    bad = ResumeEntry(
        interrupt_id="c", status="resolved", payload={"approved": True, "decidedBy": 3}
    )
    with pytest.raises(AgentServerError) as refused:
        _decision(bad)
    assert refused.value.code == "INVALID_REQUEST"


async def test_a_transport_written_before_decided_by_still_takes_unnamed_decisions() -> None:
    from helix_agents.hitl.routing import send_approval
    from helix_agents.protocol import SubmitResponse

    taken: list[tuple[Any, ...]] = []

    class OldTransport:
        async def submit_approval(
            self, session_id: str, tool_call_id: str, approved: bool, reason: str | None = None
        ) -> SubmitResponse:
            taken.append((session_id, tool_call_id, approved, reason))
            return SubmitResponse(resumed=True)

    old: Any = OldTransport()
    response = await send_approval(old, "s", "c1", False, "no", None)
    assert response.resumed
    assert taken == [("s", "c1", False, "no")]

    class NewTransport(OldTransport):
        async def submit_approval(
            self,
            session_id: str,
            tool_call_id: str,
            approved: bool,
            reason: str | None = None,
            *,
            decided_by: str | None = None,
        ) -> SubmitResponse:
            taken.append((session_id, decided_by))
            return SubmitResponse()

    new: Any = NewTransport()
    await send_approval(new, "s", "c2", True, None, "Ada")
    assert taken[-1] == ("s", "Ada")
