"""The edges' one map from exceptions to protocol errors, and their request checks."""

from __future__ import annotations

import logging
import re

import pytest

from helix_agents.errors import (
    AgentServerError,
    CorruptLogError,
    DamagedLogError,
    StoreError,
    TransportError,
    UsageError,
)
from helix_agents.protocol import RemoteResumeRequest, RemoteStartRequest
from helix_agents.server.edge import (
    MAX_JSON_DEPTH,
    checked_id,
    checked_start,
    decode,
    protocol_error,
)

_REF = r"\(ref (?P<ref>[0-9a-f]{8})\)"


@pytest.mark.parametrize(
    ("exc", "code", "message", "logged"),
    [
        (AgentServerError("NOT_FOUND", "no such session"), "NOT_FOUND", "no such session", None),
        (UsageError("bad call"), "INVALID_REQUEST", "bad call", None),
        # A stored log that fails its checks is the server's trouble (issue 12,
        # finding 3): 500, logged, never the client's 400.
        (
            CorruptLogError("a gap"),
            "INTERNAL_ERROR",
            "damaged session log: a gap",
            logging.ERROR,
        ),
        (
            DamagedLogError("s1", 5, "checksum mismatch"),
            "INTERNAL_ERROR",
            r"damaged session log: session 's1' is damaged at seq 5: checksum mismatch",
            logging.ERROR,
        ),
        # A 500 never echoes the exception's text (issue 12, finding 1): it may
        # name files or hosts. The answer and the log line share a reference.
        (
            TransportError("refused by 10.0.0.7"),
            "INTERNAL_ERROR",
            rf"agent host unreachable {_REF}",
            logging.WARNING,
        ),
        (
            StoreError("disk full at /var/lib/helix.db"),
            "INTERNAL_ERROR",
            rf"internal error {_REF}: see the server's log",
            logging.ERROR,
        ),
        (
            KeyError("/home/me/secret"),
            "INTERNAL_ERROR",
            rf"internal error {_REF}: see the server's log",
            logging.ERROR,
        ),
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
    assert error.code == code
    matched = re.fullmatch(message, error.message)
    assert matched is not None, error.message
    levels = [record.levelno for record in caplog.records]
    assert levels == ([] if logged is None else [logged])
    if logged is not None:
        line = caplog.records[0].getMessage()
        assert line.startswith("test request")
        if "ref" in matched.groupdict():
            assert f"(ref {matched['ref']})" in line
            assert "/" not in error.message
            assert "10.0.0.7" not in error.message
            # The details are in the log, for whoever runs the server.
            assert str(exc) in line or caplog.records[0].exc_info is not None


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


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH, 2_000, 100_000])
def test_a_body_nested_too_deep_is_a_bad_request_not_a_crash(depth: int) -> None:
    # The body is 1 level, ``input`` adds ``depth``: one over the limit at the least.
    raw = b'{"sessionId":"s","agentType":"a","message":"m","input":%s}' % _nested(depth)
    with pytest.raises(AgentServerError) as refused:
        decode(raw, RemoteStartRequest)
    assert refused.value.code == "INVALID_REQUEST"
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in refused.value.message


def test_a_body_at_the_depth_limit_is_accepted() -> None:
    inner = _nested(MAX_JSON_DEPTH - 1)
    raw = b'{"sessionId":"s","agentType":"a","message":"m","input":%s}' % inner
    decoded = decode(raw, RemoteStartRequest)
    depth, value = 0, decoded.input
    while value:
        depth, value = depth + 1, value[0]
    assert depth == MAX_JSON_DEPTH - 2  # the innermost list is empty


@pytest.mark.parametrize(
    "message",
    [b'[{"content": "hi"}]', b'[{"role": "user", "content": "a"}, {"content": "b"}]'],
)
def test_a_message_item_must_say_its_role(message: bytes) -> None:
    for kind in (RemoteStartRequest, RemoteResumeRequest):
        raw = b'{"sessionId":"s","agentType":"a","message":%s}' % message
        with pytest.raises(AgentServerError) as refused:
            decode(raw, kind)  # type: ignore[arg-type]
        assert refused.value.code == "INVALID_REQUEST"
        assert "role" in refused.value.message
    raw = b'{"sessionId":"s","agentType":"a","message":[{"role":"user","content":"hi"}]}'
    assert decode(raw, RemoteStartRequest).message[0].content == "hi"  # type: ignore[union-attr]


def test_ancestors_and_the_workspace_session_are_checked_as_session_ids() -> None:
    for field, request in (
        (
            "workspaceSessionId",
            RemoteStartRequest(
                session_id="s", agent_type="a", message="m", workspace_session_id="a b"
            ),
        ),
        (
            r"ancestors\[1\]",
            RemoteStartRequest(session_id="s", agent_type="a", message="m", ancestors=["r", "x/y"]),
        ),
    ):
        with pytest.raises(AgentServerError, match=rf"^INVALID_REQUEST: {field}: "):
            checked_start(request)
