"""Run agents as Temporal workflows, with the session's log in our store (``specs/temporal.md``).

The same ``define_agent`` agents: a session's run is a workflow (id = the
session id), each model call and each tool call an activity, a local
sub-agent a child workflow, a remote sub-agent call the seeds'
remote-call activity, a companion tool call an activity; interrupts and
aborts are signals. Every event lands
once in the session's log, so the protocol, the streams and the CLI work
unchanged. Needs the ``temporal`` extra (``temporalio``).

- :class:`TemporalRuntime`: the runtime of an executor or server whose sessions
  run as workflows (``AgentServer(agents, store, runtime=TemporalRuntime(options))``).
- :class:`TemporalWorker`: runs the workflows and activities (``helix-agents worker``).
- :func:`temporal_server`: the gateway's server starting them (``helix-agents serve --temporal``).
- :class:`DevServer`: a throwaway ``temporal server start-dev`` on loopback (tests, examples).
"""

from __future__ import annotations

from helix_agents.engines.durable.plan import ToolPolicy
from helix_agents.engines.temporal.dev_server import DevServer
from helix_agents.engines.temporal.options import TemporalOptions
from helix_agents.engines.temporal.runtime import TemporalRuntime, temporal_server
from helix_agents.engines.temporal.service import (
    TemporalConnection,
    TemporalLauncher,
    TemporalService,
    connect,
)
from helix_agents.engines.temporal.worker import TemporalWorker
from helix_agents.engines.temporal.workflow import AgentWorkflow, WorkflowInput

__all__ = [
    "AgentWorkflow",
    "DevServer",
    "TemporalConnection",
    "TemporalLauncher",
    "TemporalOptions",
    "TemporalRuntime",
    "TemporalService",
    "TemporalWorker",
    "ToolPolicy",
    "WorkflowInput",
    "connect",
    "temporal_server",
]
