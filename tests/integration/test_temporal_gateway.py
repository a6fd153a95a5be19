"""The gateway's protocol tests (``test_gateway_errors.py``) against a gateway on Temporal.

The same test functions, imported here, run against this module's ``gw``: the
gateway's ``AgentServer`` is ``temporal_server(...)`` and the sessions run as
workflows on a worker in this process, on the same watched SQLite store and
seeds. Every refusal, code, cursor and stream plumbing must be the same: a
client cannot tell which runtime runs the sessions.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest
from servers import serve
from temporal_server import TemporalDev
from temporalio.client import Client
from temporalio.service import RPCError

from helix_agents.events import Completed, Suspended
from helix_agents.protocol import RemoteStartRequest
from helix_agents.server import create_http_app
from helix_agents.stores import SqliteEventStore
from helix_agents.temporal import TemporalWorker, temporal_server
from tests.integration._temporal_kit import options_for, wait_for
from tests.integration.test_gateway_errors import (  # noqa: F401 - collected here, on Temporal
    PAUSED,
    TIMEOUT,
    Gateway,
    WatchedStore,
    _agents,
    test_a_client_that_disconnects_mid_stream_frees_the_tail,
    test_a_cursor_past_sqlite_integers_does_not_break_the_stream,
    test_a_from_sequence_that_is_not_an_integer_is_400,
    test_a_non_ascii_digit_from_sequence_is_400_not_500,
    test_bad_session_ids_are_400_on_every_route,
    test_head_on_an_open_stream_ends_and_frees_the_connection,
    test_last_event_id_is_the_cursor_when_from_sequence_is_absent,
    test_malformed_missing_and_mistyped_bodies_are_400,
    test_unknown_routes_are_404_and_wrong_methods_405,
    test_unknown_sessions_and_conflicts_have_their_codes,
)

pytestmark = pytest.mark.slow


@pytest.fixture
async def gw(tmp_path: Path, temporal_dev: TemporalDev) -> AsyncIterator[Gateway]:
    """``test_gateway_errors``'s gateway and seeds, with the sessions run on Temporal."""
    store = WatchedStore(SqliteEventStore(tmp_path / "events.db"))
    agents = _agents()
    options = options_for(temporal_dev)
    try:
        async with TemporalWorker(agents, store, options):
            server = await temporal_server(agents, store, options)
            async with (
                serve(create_http_app(server)) as url,
                httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client,
            ):
                with anyio.fail_after(TIMEOUT * 3):
                    seeds = [("done-1", "writer", "Write")] + [(s, "asker", "Ask") for s in PAUSED]
                    for session_id, agent_type, message in seeds:
                        await server.start_agent(
                            RemoteStartRequest(
                                session_id=session_id, agent_type=agent_type, message=message
                            )
                        )
                    await wait_for(store, "done-1", lambda e: isinstance(e, Completed))
                    for session_id in PAUSED:
                        await wait_for(store, session_id, lambda e: isinstance(e, Suspended))
                    statuses = [(await server.get_status(s)).status for s, _, _ in seeds]
                    assert statuses == ["completed", "paused", "paused", "paused"]
                yield Gateway(url=url, client=client, store=store, server=server)
    finally:
        # The next test seeds the same ids in the same namespace: end these workflows.
        temporal = await Client.connect(temporal_dev.address)
        for session_id in PAUSED:
            with contextlib.suppress(RPCError):
                await temporal.get_workflow_handle(session_id).terminate("test over")
        await store.close()
