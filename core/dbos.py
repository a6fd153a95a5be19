"""Run agents as DBOS workflows, with the session's log in our store (``specs/dbos.md``).

The same ``define_agent`` agents: a session's run is a DBOS workflow (id
``{session id}#{seq}``), each model call and each tool call a step, a local
sub-agent a child workflow, a remote sub-agent call the seeds' remote-call
step, a companion tool call a step; a paused run waits durably for a
``resume`` message. Every event lands once in the session's log, so the
protocol, the streams and the CLI work unchanged. Needs the ``dbos`` extra.
Embedded on SQLite by default; Postgres for several worker processes.
"""

from __future__ import annotations

from helix_agents.engines.dbos.runtime import DbosWorker
from helix_agents.engines.dbos.service import DbosLauncher, DbosService
from helix_agents.engines.dbos.options import DbosOptions
from helix_agents.engines.dbos.server import DbosServer, dbos_server
from helix_agents.engines.durable.plan import ToolPolicy

__all__ = [
    "DbosLauncher",
    "DbosOptions",
    "DbosServer",
    "DbosService",
    "DbosWorker",
    "ToolPolicy",
    "dbos_server",
]
