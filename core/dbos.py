"""Run agents as DBOS workflows, with the session's log in our store (``specs/dbos.md``).

The same ``define_agent`` agents: a session's run is a DBOS workflow (id
``{session id}#{seq}``), each model call and each tool call a step, a local
sub-agent a child workflow, a remote sub-agent call the seeds' remote-call
step, a companion tool call a step; a paused run waits durably for a
``resume`` message. Every event lands once in the session's log, so the
protocol, the streams and the CLI work unchanged. Needs the ``dbos`` extra.
Embedded on SQLite by default; Postgres for several worker processes.

- :class:`DbosRuntime`: the runtime of an executor or server whose sessions
  run as DBOS workflows on this process (``AgentServer(..., runtime=DbosRuntime(options))``).
- :class:`DbosWorker`: a process that runs them (``helix-agents worker --dbos``).
- :func:`dbos_server`: the gateway's server, running them too (``helix-agents serve --dbos``).
"""

from __future__ import annotations

from helix_agents.engines.dbos.options import DbosOptions
from helix_agents.engines.dbos.runtime import DbosRuntime, dbos_server
from helix_agents.engines.dbos.service import DbosLauncher, DbosService
from helix_agents.engines.dbos.worker import DbosWorker
from helix_agents.engines.durable.plan import ToolPolicy

__all__ = [
    "DbosLauncher",
    "DbosOptions",
    "DbosRuntime",
    "DbosService",
    "DbosWorker",
    "ToolPolicy",
    "dbos_server",
]
