"""The gateway's route middleware (``server/gateway/middleware.py``), called as ASGI in-process."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Message

from helix_agents.auth import Gate
from helix_agents.errors import AgentServerError
from helix_agents.server.gateway.middleware import EXCEPTION_HANDLERS
from helix_agents.server.gateway.routes import Endpoint

LIMIT = 16


async def _echo(request: Request) -> Response:
    return Response(await request.body())


async def _refuse(request: Request) -> Response:
    raise AgentServerError("ALREADY_RUNNING", "it runs")


async def _crash(request: Request) -> Response:
    raise ValueError("/srv/secret.db is locked")


async def _crash_mid_stream(request: Request) -> StreamingResponse:
    async def body() -> Any:
        yield b"first"
        raise ValueError("mid-stream")

    return StreamingResponse(body())


def _no_document(*, auth: bool) -> dict[str, Any]:
    return {}


def _app(auth: Any = None) -> Starlette:
    gate = Gate(auth, None)
    endpoints = [
        Endpoint("/echo", "POST", _echo, _no_document, "write"),
        Endpoint("/open", "POST", _echo, _no_document, "public"),
        Endpoint("/refuse", "GET", _refuse, _no_document, "read"),
        Endpoint("/crash", "GET", _crash, _no_document, "read"),
        Endpoint("/stream", "GET", _crash_mid_stream, _no_document, "read"),
    ]
    return Starlette(
        routes=[endpoint.route(gate, LIMIT) for endpoint in endpoints],
        exception_handlers=EXCEPTION_HANDLERS,
    )


async def _call(
    app: Starlette,
    method: str,
    path: str,
    *,
    headers: Sequence[tuple[str, str]] = (),
    chunks: Sequence[bytes] = (b"",),
    gone: bool = False,
) -> tuple[int, dict[str, str], bytes]:
    """``app``'s answer; ``gone``: the client leaves after ``chunks``, before the body's end."""
    pending = [
        {"type": "http.request", "body": chunk, "more_body": gone or index < len(chunks) - 1}
        for index, chunk in enumerate(chunks)
    ]
    sent: list[Message] = []

    async def receive() -> Message:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers],
        "scheme": "http",
        "server": ("test", 80),
        "client": ("test", 1),
    }
    await app(scope, receive, send)
    start = sent[0]
    answer_headers = {k.decode(): v.decode() for k, v in start["headers"]}
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], answer_headers, body


async def test_a_body_within_the_limit_is_read_whole() -> None:
    status, _, body = await _call(_app(), "POST", "/echo", chunks=[b"x" * 10, b"y" * 6])
    assert (status, body) == (200, b"x" * 10 + b"y" * 6)


@pytest.mark.parametrize(
    ("headers", "chunks"),
    [
        ([("content-length", str(LIMIT + 1))], [b"x" * (LIMIT + 1)]),
        ([("content-length", "9" * 5000)], [b"x"]),  # too long for int(): still 413
        ([], [b"x" * 10, b"y" * 10]),  # chunked: refused when it passes the limit
    ],
)
async def test_a_body_over_the_limit_is_413(
    headers: list[tuple[str, str]], chunks: list[bytes]
) -> None:
    status, _, body = await _call(_app(), "POST", "/echo", headers=headers, chunks=chunks)
    assert status == 413
    assert json.loads(body) == {
        "error": f"request body over {LIMIT} bytes",
        "code": "PAYLOAD_TOO_LARGE",
    }


async def test_a_route_that_reads_no_body_is_never_refused_for_one() -> None:
    status, _, _ = await _call(_app(), "GET", "/refuse", headers=[("content-length", "999")])
    assert status == 409


async def test_a_refusal_keeps_its_code_and_anything_else_is_an_internal_error() -> None:
    status, _, body = await _call(_app(), "GET", "/refuse")
    assert (status, json.loads(body)) == (409, {"error": "it runs", "code": "ALREADY_RUNNING"})
    status, _, body = await _call(_app(), "GET", "/crash")
    assert status == 500
    answer = json.loads(body)
    assert answer["code"] == "INTERNAL_ERROR"
    assert "secret" not in answer["error"]


async def test_a_failure_after_the_answer_started_ends_it() -> None:
    with pytest.raises(ValueError, match="mid-stream"):
        await _call(_app(), "GET", "/stream")


async def test_a_client_gone_mid_body_is_no_error_of_the_server() -> None:
    status, _, body = await _call(_app(), "POST", "/echo", chunks=[b"x"], gone=True)
    assert (status, json.loads(body)) == (
        400,
        {"error": "client disconnected", "code": "INVALID_REQUEST"},
    )


@pytest.mark.parametrize(
    "header", [None, "Bearer nope", "Basic dG9rZW4=", "Bearer ", "Bearer t\u00e9"]
)
async def test_without_an_accepted_token_a_guarded_route_is_401(header: str | None) -> None:
    headers = [] if header is None else [("authorization", header)]
    status, answer_headers, body = await _call(_app({"token"}), "POST", "/echo", headers=headers)
    assert status == 401
    assert answer_headers["www-authenticate"] == 'Bearer realm="helix-agents"'
    assert json.loads(body)["code"] == "UNAUTHORIZED"


async def test_an_open_route_and_an_accepted_token_are_served() -> None:
    app = _app({"token"})
    assert (await _call(app, "POST", "/open"))[0] == 200
    headers = [("authorization", "bearer token")]
    assert (await _call(app, "POST", "/echo", headers=headers))[0] == 200


async def test_a_token_check_is_awaited() -> None:
    async def check(token: str) -> bool:
        return token == "yes"

    app = _app(check)
    assert (await _call(app, "POST", "/echo", headers=[("authorization", "Bearer yes")]))[0] == 200
    assert (await _call(app, "POST", "/echo", headers=[("authorization", "Bearer no")]))[0] == 401


async def test_no_route_is_404_and_a_wrong_method_405_with_or_without_a_token() -> None:
    app = _app({"token"})
    status, _, body = await _call(app, "GET", "/nowhere")
    assert (status, json.loads(body)["code"]) == (404, "NOT_FOUND")
    status, headers, body = await _call(app, "GET", "/echo")
    assert (status, headers["allow"], json.loads(body)["code"]) == (
        405,
        "POST",
        "METHOD_NOT_ALLOWED",
    )
