"""A durable worker with ``workspace_app``'s agents and a ``local`` workspace provider.

Run as a subprocess by the tests that SIGKILL workers (``_durable_kit.WorkerScript``):

- ``temporal ADDRESS QUEUE STORE ROOT``: a :class:`~helix_agents.temporal.TemporalWorker`
  (heartbeat timeout 2 s) until killed;
- ``dbos SYSTEM_DB STORE ROOT SESSION AGENT``: a ``dbos_server`` (its worker
  recovers what a killed process left), which starts SESSION (idempotent: a
  restart joins the run) and follows it to its end, printing ``output: ...``.

It prints ``durable worker ready`` once it polls.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio

from helix_agents.protocol import EndEvent, ErrorEvent, RemoteStartRequest
from helix_agents.stores import SqliteEventStore
from helix_agents.workspaces import LocalWorkspaceProvider
from tests.integration.workspace_app import agents

READY = "durable worker ready"


async def _temporal(address: str, queue: str, db: str, root: str) -> None:
    from helix_agents.temporal import TemporalOptions, TemporalWorker

    options = TemporalOptions(address=address, task_queue=queue, heartbeat_timeout=2.0)
    providers = {"local": LocalWorkspaceProvider(root)}
    async with (
        SqliteEventStore(Path(db), poll_interval=0.05) as store,
        TemporalWorker(agents, store, options, workspace_providers=providers),
    ):
        print(READY, flush=True)
        await anyio.sleep_forever()


async def _dbos(system_db: str, db: str, root: str, session_id: str, agent_type: str) -> None:
    from helix_agents.dbos import DbosOptions, dbos_server

    options = DbosOptions(system_database=system_db, takeover_after=2.0)
    if system_db.startswith("sqlite"):
        options = DbosOptions(system_database=system_db)
    providers = {"local": LocalWorkspaceProvider(root)}
    async with SqliteEventStore(Path(db), poll_interval=0.05) as store:
        server = dbos_server(agents, store, options, workspace_providers=providers)
        async with server:
            print(READY, flush=True)
            request = RemoteStartRequest(session_id=session_id, agent_type=agent_type, message="go")
            await server.start(request)
            async for event in server.stream(session_id):
                if isinstance(event, EndEvent | ErrorEvent):
                    print(f"output: {json.dumps(getattr(event, 'output', None))}", flush=True)
                    return


def main(argv: list[str]) -> None:
    """Run the worker ``argv`` names (see the module doc)."""
    if argv[0] == "temporal":
        anyio.run(_temporal, *argv[1:5])
    else:
        anyio.run(_dbos, *argv[1:6])


if __name__ == "__main__":
    main(sys.argv[1:])
