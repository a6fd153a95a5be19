"""OpenTelemetry on the durable engines: a DBOS or Temporal run's spans are the built-in's trace.

A three-deep tree of local sub-agents runs on DBOS (SQLite, the gateway's
process) or on Temporal (the dev server, a worker here); its spans, recorded
by a private provider, form one trace shaped like the agent tree
(``tests/otel_spans.py``), with the same model and tool spans as on the
built-in runtime (``tests/unit/test_tracing.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import anyio
import pytest
from otel_spans import (
    USAGE,
    assert_trace_follows_tree,
    failed_tools,
    leaf,
    local_tool,
    mid,
    recording,
    root,
)

from helix_agents.agents.config import AgentConfig
from helix_agents.log.store import EventStore
from helix_agents.otel import OtelTracer
from helix_agents.protocol import RemoteStartRequest
from helix_agents.server import AgentServer
from helix_agents.stores import MemoryEventStore
from tests.integration._temporal_kit import stream_to_end

pytestmark = [pytest.mark.slow]

Served = Callable[
    [list[AgentConfig], EventStore, OtelTracer], AbstractAsyncContextManager[AgentServer]
]


@pytest.fixture(params=["dbos", "temporal"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Served:
    """Agents served on DBOS or Temporal, traced by the tracer given."""
    if request.param == "dbos":
        from helix_agents.dbos import DbosOptions, dbos_server

        options = DbosOptions(system_database=f"sqlite:///{tmp_path / 'dbos.sqlite'}")

        @asynccontextmanager
        async def on_dbos(
            agents: list[AgentConfig], store: EventStore, tracer: OtelTracer
        ) -> AsyncIterator[AgentServer]:
            async with dbos_server(agents, store, options, tracer=tracer) as server:
                yield server

        return on_dbos
    from helix_agents.temporal import TemporalWorker, temporal_server
    from tests.integration._temporal_kit import options_for

    temporal = options_for(request.getfixturevalue("temporal_dev"))

    @asynccontextmanager
    async def on_temporal(
        agents: list[AgentConfig], store: EventStore, tracer: OtelTracer
    ) -> AsyncIterator[AgentServer]:
        async with TemporalWorker(agents, store, temporal, tracer=tracer):
            server = temporal_server(agents, store, temporal, tracer=tracer)
            async with server:
                yield server

    return on_temporal


async def test_a_three_deep_tree_is_one_trace_shaped_like_the_tree(served: Served) -> None:
    """Root -> mid -> leaf, local sub-agents: one trace; each run's model and tool spans
    hang under its run's span, each child's run under its parent's call; the failing
    tool's span is an error; every model call carries its usage."""
    tracer, exporter = recording()
    store = MemoryEventStore()
    top = root(local_tool(mid(local_tool(leaf()))))
    with anyio.fail_after(60):
        async with served([top], store, tracer) as server:
            await server.start(RemoteStartRequest(session_id="ot", agent_type="root", message="go"))
            output = await stream_to_end(server, "ot")
    assert "root got" in output
    sessions = sorted(await store.list_sessions())
    assert sessions == ["ot", "ot-sub-call_0_0", "ot-sub-call_0_0-sub-call_0_0"]
    logs = {sid: await store.read(sid) for sid in sessions}
    spans = exporter.get_finished_spans()
    assert_trace_follows_tree(spans, logs)
    assert failed_tools(spans) == {"broken": "RuntimeError: disk on fire"}
    chats = [s for s in spans if s.name.startswith("chat")]
    assert len(chats) == 6
    for chat in chats:
        assert chat.attributes is not None
        assert chat.attributes["gen_ai.usage.input_tokens"] == USAGE.input_tokens
