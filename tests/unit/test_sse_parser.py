"""``SSEParser``: the WHATWG event-stream rules, chunk by chunk.

Each rule gets a small case; a Hypothesis property then checks that any
re-chunking of an encoded stream (cuts inside lines, inside multi-byte
characters, between CR and LF) parses to the messages that were encoded.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import pairwise

import pytest
from hypothesis import given, strategies as st

from helix_agents.transports import SSEMessage, SSEParser


def parse(*chunks: bytes, parser: SSEParser | None = None) -> list[SSEMessage]:
    """Feed ``chunks`` in order and return every message dispatched."""
    parser = parser or SSEParser()
    return [message for chunk in chunks for message in parser.feed(chunk)]


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


# --- lines -------------------------------------------------------------------


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"], ids=["LF", "CRLF", "CR"])
def test_each_line_ending_ends_lines(end: str) -> None:
    stream = end.join(["event: chunk", "id: 7", "data: one", "data: two", "", ""])
    assert parse(stream.encode()) == [SSEMessage(event="chunk", id="7", data="one\ntwo")]


def test_mixed_line_endings_in_one_stream() -> None:
    stream = b"data: a\r\ndata: b\rdata: c\n\r\ndata: d\r\r"
    assert parse(stream) == [SSEMessage(data="a\nb\nc"), SSEMessage(data="d")]


def test_crlf_split_across_chunks_is_one_line_end() -> None:
    # Read as CR then LF, the LF would be a blank line dispatching "a" alone.
    assert parse(b"data: a\r", b"\ndata: b\r\n\r\n") == [SSEMessage(data="a\nb")]


def test_crlf_split_with_empty_chunks_between() -> None:
    assert parse(b"data: a\r", b"", b"", b"\ndata: b\r", b"\n", b"\r", b"\n") == [
        SSEMessage(data="a\nb")
    ]


def test_cr_at_chunk_end_then_a_line_is_a_line_end() -> None:
    assert parse(b"data: a\r", b"data: b\r", b"\r") == [SSEMessage(data="a\nb")]


def test_cr_ends_the_line_without_waiting_for_the_next_chunk() -> None:
    parser = SSEParser()
    assert parse(b"data: a\r\r", parser=parser) == [SSEMessage(data="a")]
    assert parse(b"\ndata: b\n\n", parser=parser) == [SSEMessage(data="b")]


def test_partial_lines_across_chunks() -> None:
    assert parse(b"da", b"ta: hel", b"lo\n", b"\n") == [SSEMessage(data="hello")]
    assert parse(*bytewise(b"event: end\ndata: {}\n\n")) == [SSEMessage(event="end", data="{}")]


def test_utf8_split_inside_characters() -> None:
    text = "data: é€😀 ünïcødé\n\n"
    assert parse(*bytewise(text.encode())) == [SSEMessage(data="é€😀 ünïcødé")]


def test_invalid_utf8_becomes_replacement_characters() -> None:
    assert parse(b"data: a\xff\xfeb\n\n") == [SSEMessage(data="a\ufffd\ufffdb")]


def test_incomplete_event_at_the_end_is_not_dispatched() -> None:
    assert parse(b"data: lost\n") == []
    assert parse(b"data: lost") == []


# --- fields ------------------------------------------------------------------


def test_data_lines_join_with_newlines_including_empty_ones() -> None:
    assert parse(b"data: a\ndata:\ndata\ndata: b\n\n") == [SSEMessage(data="a\n\n\nb")]


def test_only_one_leading_space_is_stripped() -> None:
    assert parse(b"data:  two\ndata:none\ndata: a: b\n\n") == [SSEMessage(data=" two\nnone\na: b")]


def test_a_data_line_alone_dispatches_empty_data() -> None:
    assert parse(b"data:\n\n") == [SSEMessage(data="")]
    assert parse(b"data\n\n") == [SSEMessage(data="")]


def test_blank_line_without_data_dispatches_nothing_and_resets_the_event() -> None:
    assert parse(b"event: chunk\nid: 3\n\ndata: x\n\n") == [SSEMessage(data="x")]
    assert parse(b"\n\n\r\n\r") == []


def test_event_name_defaults_to_message_and_resets_after_dispatch() -> None:
    assert parse(b"event: chunk\ndata: 1\n\ndata: 2\n\nevent:\ndata: 3\n\n") == [
        SSEMessage(event="chunk", data="1"),
        SSEMessage(data="2"),
        SSEMessage(data="3"),
    ]


def test_last_field_of_a_kind_wins() -> None:
    assert parse(b"event: a\nevent: b\nid: 1\nid: 2\ndata: x\n\n") == [
        SSEMessage(event="b", id="2", data="x")
    ]


def test_ids_belong_to_their_event_and_persist_as_last_event_id() -> None:
    assert SSEParser().last_event_id is None
    parser = SSEParser()
    assert parse(b"id: 1\ndata: a\n\ndata: b\n\n", parser=parser) == [
        SSEMessage(id="1", data="a"),
        SSEMessage(data="b"),
    ]
    assert parser.last_event_id == "1"
    assert parse(b"id\ndata: c\n\n", parser=parser) == [SSEMessage(id="", data="c")]
    assert parser.last_event_id == ""


def test_an_id_without_data_still_moves_last_event_id() -> None:
    parser = SSEParser()
    assert parse(b"id: 9\n\n", parser=parser) == []
    assert parser.last_event_id == "9"


def test_ids_containing_nul_are_ignored() -> None:
    parser = SSEParser()
    assert parse(b"id: 5\ndata: a\n\nid: 6\x007\ndata: b\n\n", parser=parser) == [
        SSEMessage(id="5", data="a"),
        SSEMessage(data="b"),
    ]
    assert parser.last_event_id == "5"


def test_comments_are_ignored() -> None:
    assert parse(b":heartbeat\n\n:\n\n: padding\n") == []
    assert parse(b"data: a\n:heartbeat\ndata: b\n\n") == [SSEMessage(data="a\nb")]


def test_unknown_fields_are_ignored() -> None:
    stream = b"foo: bar\nData: no\nevents: no\ndata : no\nbare\ndata: yes\n\n"
    assert parse(stream) == [SSEMessage(data="yes")]


def test_retry_is_kept_when_it_is_digits() -> None:
    parser = SSEParser()
    parse(b"retry: 1500\n", parser=parser)
    assert parser.retry == 1500
    parse(b"retry: soon\nretry: 1.5\nretry: \xd9\xa3\n", parser=parser)  # ARABIC-INDIC THREE
    assert parser.retry == 1500


# --- the byte-order mark -------------------------------------------------------


def test_leading_bom_is_dropped_even_when_split() -> None:
    stream = b"\xef\xbb\xbfdata: x\n\n"
    assert parse(stream) == [SSEMessage(data="x")]
    assert parse(*bytewise(stream)) == [SSEMessage(data="x")]


def test_only_the_leading_bom_is_dropped() -> None:
    # A second BOM makes the field name "\ufeffdata", an unknown field.
    assert parse(b"\xef\xbb\xbf\xef\xbb\xbfdata: x\n\n") == []
    assert parse(b"data: \xef\xbb\xbfx\n\n") == [SSEMessage(data="\ufeffx")]


# --- property: any chunking parses the same ------------------------------------

_line = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=12)
_id = st.text(st.characters(codec="utf-8", exclude_characters="\r\n\0"), max_size=8)
_noise = st.one_of(
    _line.map(lambda text: ":" + text),  # comments and heartbeats
    st.sampled_from(["retry: 100", "foo: bar", "ignored"]),
)


@st.composite
def sse_streams(draw: st.DrawFn) -> tuple[bytes, list[SSEMessage]]:
    """An encoded event stream and the messages it holds.

    Events have random names and ids (or none) and multi-line data with empty
    lines and multi-byte characters; comments, heartbeat blocks and unknown
    fields are interleaved; every line ends in LF, CRLF or CR at random.
    """
    lines: list[str] = []
    expected: list[SSEMessage] = []
    for _ in range(draw(st.integers(0, 5))):
        if draw(st.booleans()):
            lines += [":heartbeat", ""]
        block: list[str] = []
        data = draw(st.lists(_line, min_size=1, max_size=4))
        for line in data:
            separator = ": " if line.startswith(" ") or draw(st.booleans()) else ":"
            block.append(f"data{separator}{line}")
        event = draw(st.none() | _line)
        if event is not None:
            block.insert(draw(st.integers(0, len(block))), f"event: {event}")
        id_ = draw(st.none() | _id)
        if id_ is not None:
            block.insert(draw(st.integers(0, len(block))), f"id: {id_}")
        for noise in draw(st.lists(_noise, max_size=2)):
            block.insert(draw(st.integers(0, len(block))), noise)
        lines += [*block, ""]
        expected.append(SSEMessage(data="\n".join(data), event=event or "message", id=id_))
    text = "\ufeff" if draw(st.booleans()) else ""
    previous = ""
    for line in lines:
        # A CR, then an empty line ended by LF, would read as one CRLF: no writer does that.
        endings = ["\r", "\r\n"] if previous == "\r" and not line else ["\n", "\r\n", "\r"]
        previous = draw(st.sampled_from(endings))
        text += line + previous
    return text.encode(), expected


def chunked(data: bytes, cuts: Iterable[int]) -> list[bytes]:
    points = [0, *sorted(set(cuts)), len(data)]
    return [data[start:end] for start, end in pairwise(points)]


@given(sse_streams(), st.data())
def test_any_chunking_parses_to_the_encoded_messages(
    stream: tuple[bytes, list[SSEMessage]], data: st.DataObject
) -> None:
    payload, expected = stream
    assert parse(payload) == expected
    cuts = data.draw(st.lists(st.integers(0, len(payload)), max_size=len(payload)))
    assert parse(*chunked(payload, cuts)) == expected


@given(sse_streams())
def test_byte_by_byte_parses_to_the_encoded_messages(
    stream: tuple[bytes, list[SSEMessage]],
) -> None:
    payload, expected = stream
    assert parse(*bytewise(payload)) == expected
