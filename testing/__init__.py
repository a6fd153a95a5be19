"""Testing agents without a model: run a tree, see what each agent did, answer its people.

What a test of an agent tree needs, in one place:

- **models without a model**: ``helix_agents.models.ScriptedLLM`` plays a list
  of turns (``ScriptedLLM.call(...)``, ``ScriptedLLM.finish(...)``,
  ``ScriptedLLM.reply(...)``, ``ScriptedLLM.fail(...)``), or answers from a
  function of the request (a function model: ``ScriptedLLM(lambda request:
  ...)``, sync or async); ``helix_agents.models.ReplayLLM`` answers from a
  recorded session.
- **a run that reports**: :func:`run_agent` (and :func:`run_agent_sync`) runs an
  agent strict by default (a tool error, an unknown tool, a failed child or a
  rejected output fails the run, naming it), answers the approvals and client
  tools you give it, and returns a :class:`RunReport`: the result and the
  :class:`Trajectory` (each agent's tool calls in order, its children, what
  waits for a person). A run that does not end as expected (``expect``,
  default ``"completed"``) is an ``AssertionError`` naming why.
- **answers**: :func:`approve`, :func:`deny` and :func:`tool_result`, keyed by
  tool name or call id in ``answers=``.
- **a pytest fixture**: ``helix`` (registered by the package's pytest plugin):
  an :class:`AgentTester` on a fresh in-memory store, with ``run``,
  ``run_sync`` and ``executor(...)``.
- **evals from recorded sessions**: ``helix_agents.testing.evals`` re-runs
  recorded sessions as forks against today's agents and scores them (the
  ``helix_eval`` fixture; ``helix-agents eval`` on the command line).

Specified in specs/testing.md.
"""

from __future__ import annotations

from helix_agents.testing.answers import (
    Answer as Answer,
    approve as approve,
    deny as deny,
    tool_result as tool_result,
)
from helix_agents.testing.report import (
    RunReport as RunReport,
    ToolCallRecord as ToolCallRecord,
    Trajectory as Trajectory,
    trajectory_of as trajectory_of,
)
from helix_agents.testing.runner import (
    AgentTester as AgentTester,
    run_agent as run_agent,
    run_agent_sync as run_agent_sync,
)

__all__ = [
    "AgentTester",
    "Answer",
    "RunReport",
    "ToolCallRecord",
    "Trajectory",
    "approve",
    "deny",
    "run_agent",
    "run_agent_sync",
    "tool_result",
    "trajectory_of",
]
