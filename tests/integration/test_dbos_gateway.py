"""The gateway's protocol tests (``test_gateway_errors.py``) against a gateway on DBOS.

The same test functions, imported here, run against this module's ``gw``: the
gateway's ``AgentServer`` is ``dbos_server(...)`` (embedded: the sessions run
as DBOS workflows in this process, a SQLite system database of the test's own),
on the same watched SQLite store and seeds. Every refusal, code, cursor and
stream plumbing must be the same: a client cannot tell which runtime runs them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest
from servers import serve

from helix_agents.dbos import DbosOptions, dbos_server
from helix_agents.events import Completed, Suspended
from helix_agents.protocol import RemoteStartRequest
from helix_agents.server import create_http_app
from helix_agents.stores import SqliteEventStore
from tests.integration._temporal_kit import wait_for
from tests.integration.test_gateway_errors import (  # noqa: F401 - collected here, on DBOS
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
async def gw(tmp_path: Path) -> AsyncIterator[Gateway]:
    """``test_gateway_errors``'s gateway and seeds, with the sessions run on DBOS."""
    store = WatchedStore(SqliteEventStore(tmp_path / "events.db"))
    agents = _agents()
    options = DbosOptions(system_database=f"sqlite:///{tmp_path / 'dbos.sqlite'}")
    try:
        async with (
            dbos_server(agents, store, options) as server,
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
        await store.close()
