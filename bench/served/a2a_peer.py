"""The peer: an a2a-sdk reference server and client on the ``peer`` workload.

Run as a script it serves the a2a-sdk's JSON-RPC app (``DefaultRequestHandler``,
``InMemoryTaskStore``, uvicorn as a2a's examples run it) with an agent that
streams ``CHUNKS`` text artifact chunks of ``CHUNK_CHARS`` characters, then
completes. :func:`a2a_task` is the client side of one task: ``message/stream``
read to the final status with a2a's own client.

Needs ``a2a-sdk[http-server]`` (the ``bench`` extra); imported only when it is there.
"""

from __future__ import annotations

import argparse
import uuid
from typing import Any

CHUNKS = 100
CHUNK_CHARS = 100


def _app(chunks: int) -> Any:
    from a2a.helpers.proto_helpers import new_task, new_text_part
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
    from a2a.types import AgentCapabilities, AgentCard, AgentInterface, TaskState
    from starlette.applications import Starlette

    text = "x" * (CHUNK_CHARS - 1) + " "

    class Writer(AgentExecutor):  # type: ignore[misc]
        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            task_id = context.task_id or str(uuid.uuid4())
            context_id = context.context_id or str(uuid.uuid4())
            if context.current_task is None:
                await event_queue.enqueue_event(
                    new_task(task_id, context_id, TaskState.TASK_STATE_SUBMITTED)
                )
            updater = TaskUpdater(event_queue, task_id, context_id)
            await updater.start_work()
            artifact_id = str(uuid.uuid4())
            for index in range(chunks):
                await updater.add_artifact(
                    [new_text_part(text)],
                    artifact_id=artifact_id,
                    append=index > 0,
                    last_chunk=index == chunks - 1,
                )
            await updater.complete()

        async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
            raise NotImplementedError

    card = AgentCard(
        name="writer",
        description="streams text",
        version="1.0",
        supported_interfaces=[AgentInterface(protocol_binding="JSONRPC", url="/")],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text"],
        default_output_modes=["text"],
        skills=[],
    )
    handler = DefaultRequestHandler(
        agent_executor=Writer(), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")]
    return Starlette(routes=routes)


def a2a_card(base: str) -> Any:
    """The served agent's card, pointing at ``base``."""
    from a2a.types import AgentCapabilities, AgentCard, AgentInterface

    return AgentCard(
        name="writer",
        description="streams text",
        version="1.0",
        supported_interfaces=[AgentInterface(protocol_binding="JSONRPC", url=base + "/")],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text"],
        default_output_modes=["text"],
        skills=[],
    )


def a2a_client(base: str) -> Any:
    """An a2a client of the served agent (streaming, JSON-RPC)."""
    import httpx
    from a2a.client import ClientConfig, ClientFactory

    http = httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_keepalive_connections=64))
    return ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(a2a_card(base))


async def a2a_task(client: Any) -> int:
    """One task: send a message, read the stream to its final status; the chunks seen."""
    from a2a.helpers.proto_helpers import new_text_message
    from a2a.types import Role, SendMessageRequest

    request = SendMessageRequest(message=new_text_message("go", role=Role.ROLE_USER))
    chunks = 0
    async for response in client.send_message(request):
        if response.HasField("artifact_update"):
            chunks += 1
    return chunks


def main() -> None:
    """Serve the peer on 127.0.0.1 (``--port``)."""
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--chunks", type=int, default=CHUNKS)
    args = parser.parse_args()
    uvicorn.run(_app(args.chunks), host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
