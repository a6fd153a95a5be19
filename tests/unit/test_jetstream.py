"""The JetStream store's pure parts: session ids as subject tokens (no server needed)."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from helix_agents.errors import UsageError
from helix_agents.ids import decode_session_token, encode_session_token, validate_session_id
from helix_agents.stores.jetstream.store import nats_servers, validate_stream_name

session_ids = st.text(alphabet="abcXYZ019_-.:", min_size=1, max_size=256).map(validate_session_id)


@given(session_ids)
def test_a_session_id_encodes_to_one_safe_subject_token_and_back(session_id: str) -> None:
    token = encode_session_token(session_id)
    assert token
    assert not any(char in token for char in ".*> \t\r\n")
    assert decode_session_token(token) == session_id


@given(session_ids, session_ids)
def test_different_session_ids_get_different_tokens(first: str, second: str) -> None:
    if first != second:
        assert encode_session_token(first) != encode_session_token(second)


@pytest.mark.parametrize(
    ("session_id", "token"),
    [
        ("plain", "plain"),
        ("a.b", "a_db"),
        ("a_b", "a__b"),
        ("a_d", "a__d"),
        ("a.d", "a_dd"),
        ("._:-", "_d__:-"),
    ],
)
def test_the_encoding_is_the_documented_one(session_id: str, token: str) -> None:
    assert encode_session_token(session_id) == token
    assert decode_session_token(token) == session_id


@pytest.mark.parametrize("token", ["a_", "a_x", "_", "a_D"])
def test_a_token_the_encoding_cannot_make_does_not_decode(token: str) -> None:
    with pytest.raises(ValueError, match="escape"):
        decode_session_token(token)


@pytest.mark.parametrize("name", ["", "a.b", "a b", "a*", "a>", "a/b", "x" * 65, "é"])
def test_bad_stream_names_are_usage_errors(name: str) -> None:
    with pytest.raises(UsageError):
        validate_stream_name(name)


def test_a_nats_url_lists_one_server_or_several_comma_separated() -> None:
    assert nats_servers("nats://127.0.0.1:4222") == ["nats://127.0.0.1:4222"]
    assert nats_servers("nats://a:1, nats://b:2,nats://c:3") == [
        "nats://a:1",
        "nats://b:2",
        "nats://c:3",
    ]


@pytest.mark.parametrize("url", ["", "nats://a:1,", ",nats://a:1", "nats://a:1,,nats://b:2"])
def test_a_blank_server_in_a_nats_url_is_a_usage_error(url: str) -> None:
    with pytest.raises(UsageError):
        nats_servers(url)
