"""The edges' one map from exceptions to protocol errors, and their request checks."""

from __future__ import annotations

import logging

import pytest

from helix_agents import (
    AgentServerError,
    CorruptLogError,
    RemoteStartRequest,
    StoreError,
    TransportError,
    UsageError,
)
from helix_agents.server.edge import checked_id, checked_start, decode, protocol_error


@pytest.mark.parametrize(
    ("exc", "code", "message", "logged"),
    [
        (AgentServerError("NOT_FOUND", "no such session"), "NOT_FOUND", "no such session", None),
        (UsageError("bad call"), "INVALID_REQUEST", "bad call", None),
        (CorruptLogError("a gap"), "INVALID_REQUEST", "a gap", None),
        (
            TransportError("refused"),
            "INTERNAL_ERROR",
            "agent host unreachable: refused",
            logging.WARNING,
        ),
        (StoreError("disk full"), "INTERNAL_ERROR", "disk full", logging.ERROR),
        (KeyError("x"), "INTERNAL_ERROR", "KeyError: 'x'", logging.ERROR),
    ],
)
def test_each_failure_maps_to_one_code_and_the_unexpected_ones_are_logged(
    caplog: pytest.LogCaptureFixture,
    exc: Exception,
    code: str,
    message: str,
    logged: int | None,
) -> None:
    with caplog.at_level(logging.DEBUG, logger="helix_agents.server"):
        error = protocol_error(exc, "test request")
    assert (error.code, error.message) == (code, message)
    levels = [record.levelno for record in caplog.records]
    assert levels == ([] if logged is None else [logged])
    if logged is not None:
        assert caplog.records[0].getMessage().startswith("test request")


def test_a_refusal_is_answered_as_itself() -> None:
    refusal = AgentServerError("ALREADY_COMPLETED", "session 's' is completed")
    assert protocol_error(refusal, "test request") is refusal


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b"{not json", "malformed JSON"),
        (b'{"sessionId": "s"}', "invalid request: Object missing required field `agentType`"),
        (b'{"sessionId": 5, "agentType": "a", "message": "m"}', "$.sessionId"),
        (b"", "malformed JSON"),
    ],
)
def test_decode_refuses_a_bad_body_naming_what_is_wrong(raw: bytes, needle: str) -> None:
    with pytest.raises(AgentServerError) as refused:
        decode(raw, RemoteStartRequest)
    assert refused.value.code == "INVALID_REQUEST"
    assert needle in refused.value.message


def test_session_ids_are_checked_naming_their_field() -> None:
    assert checked_id("ok-1") == "ok-1"
    with pytest.raises(AgentServerError, match=r"^INVALID_REQUEST: sessionId: invalid session id"):
        checked_id("a b")
    start = RemoteStartRequest(session_id="s-1", agent_type="a", message="m")
    assert checked_start(start) is start
    for field, request in (
        ("sessionId", RemoteStartRequest(session_id="", agent_type="a", message="m")),
        (
            "parentSessionId",
            RemoteStartRequest(session_id="s", agent_type="a", message="m", parent_session_id="/"),
        ),
        (
            "rootSessionId",
            RemoteStartRequest(session_id="s", agent_type="a", message="m", root_session_id="*"),
        ),
    ):
        with pytest.raises(AgentServerError, match=rf"^INVALID_REQUEST: {field}: "):
            checked_start(request)
