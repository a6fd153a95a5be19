"""The fake model the ``models`` benchmark calls: OpenAI's Responses API and chat completions.

``python model_server.py PORT TOKENS`` serves, on 127.0.0.1:PORT, ``POST
/v1/responses`` and ``POST /v1/chat/completions``, each streaming TOKENS text
deltas of 4 characters (the streams built once, at start). The Responses
route answers a model named ``steps-N`` as an agent's N steps: it calls the
``tick`` tool until N-1 results came back, then answers. ``GET /connections``
says how many TCP connections the Responses calls came on (distinct client
addresses) and forgets them.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

CLIENTS: set[tuple[str, int]] = set()


def _sse(events: list[dict[str, Any]], *, named: bool) -> bytes:
    lines = []
    for event in events:
        head = f"event: {event['type']}\n" if named else ""
        lines.append(f"{head}data: {json.dumps(event, separators=(',', ':'))}\n\n")
    return "".join(lines).encode()


def responses_stream(pieces: list[str], call: tuple[str, str] | None = None) -> bytes:
    """A Responses API stream: a message of ``pieces``, or a ``tick`` call, then completed."""
    events: list[dict[str, Any]] = [{"type": "response.created", "response": {"model": "bench"}}]
    if call is None:
        where = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
        events.append({"type": "response.output_item.added", "output_index": 0, "item": {}})
        events += [
            {"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []}
            for piece in pieces
        ]
        text = "".join(pieces)
        content = [{"type": "output_text", "text": text, "annotations": []}]
        item = {"type": "message", "id": "msg_1", "role": "assistant", "content": content}
    else:
        call_id, arguments = call
        item = {"type": "function_call", "call_id": call_id, "name": "tick", "arguments": ""}
        events.append({"type": "response.output_item.added", "output_index": 0, "item": item})
        events.append(
            {
                "type": "response.function_call_arguments.delta",
                "output_index": 0,
                "delta": arguments,
            }
        )
        item = {**item, "arguments": arguments}
    events.append({"type": "response.output_item.done", "output_index": 0, "item": item})
    usage = {"input_tokens": 10, "output_tokens": len(pieces)}
    response = {"model": "bench", "output": [item], "usage": usage}
    events.append({"type": "response.completed", "response": response})
    for number, event in enumerate(events):
        event["sequence_number"] = number
    return _sse(events, named=True)


def chat_stream(pieces: list[str]) -> bytes:
    """A chat-completions stream of ``pieces``, a finish, the usage, ``[DONE]``."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {"id": "c", "object": "chat.completion.chunk", "model": "bench", "choices": [choice]}

    events = [chunk({"content": piece}) for piece in pieces] + [chunk({}, "stop")]
    usage = {"prompt_tokens": 10, "completion_tokens": len(pieces)}
    events.append({"id": "c", "model": "bench", "choices": [], "usage": usage})
    return _sse(events, named=False) + b"data: [DONE]\n\n"


def app(tokens: int) -> Starlette:
    """The fake model, its streams of ``tokens`` deltas built once."""
    pieces = [f"w{index % 100:02d} " for index in range(tokens)]
    bodies = {"responses": responses_stream(pieces), "chat": chat_stream(pieces)}

    async def responses(request: Request) -> Response:
        if request.client is not None:
            CLIENTS.add((request.client.host, request.client.port))
        body = await request.json()
        model = str(body.get("model", ""))
        if model.startswith("steps-"):
            done = sum(1 for item in body["input"] if item.get("type") == "function_call_output")
            if done < int(model.removeprefix("steps-")) - 1:
                stream = responses_stream([], (f"c{done}", json.dumps({"n": done})))
            else:
                stream = responses_stream(["done"])
            return Response(stream, media_type="text/event-stream")
        return Response(bodies["responses"], media_type="text/event-stream")

    async def chat(request: Request) -> Response:
        return Response(bodies["chat"], media_type="text/event-stream")

    async def connections(request: Request) -> JSONResponse:
        count = len(CLIENTS)
        CLIENTS.clear()
        return JSONResponse({"connections": count})

    return Starlette(
        routes=[
            Route("/v1/responses", responses, methods=["POST"]),
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/connections", connections),
        ]
    )


if __name__ == "__main__":
    port, count = int(sys.argv[1]), int(sys.argv[2])
    uvicorn.run(app(count), host="127.0.0.1", port=port, log_level="warning")
