"""Issue 35's workflow change replays old histories (``specs/temporal.md``, the versioning rule).

A history recorded by the code before issue 35 (four steps per agent step:
``helix_round_open`` and ``helix_round_close`` local activities around one
``helix_tool_call`` activity per call) replays on today's ``AgentWorkflow``
without a nondeterminism error: the new rounds are behind
``workflow.patched("helix-tool-rounds")``. A history recorded now replays
too (with the patch's marker).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from helix_agents.engines.temporal.runtime import _RUNNER
from helix_agents.engines.temporal.workflow import AgentWorkflow

pytestmark = pytest.mark.anyio

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _replayer() -> Replayer:
    return Replayer(workflows=[AgentWorkflow], workflow_runner=_RUNNER)


async def test_a_history_from_before_the_tool_rounds_replays() -> None:
    text = (GOLDEN / "temporal_history_before_35.json").read_text()
    assert "helix_round_open" not in text  # activity types of local activities are base64
    history = WorkflowHistory.from_json("h1", text)
    with anyio.fail_after(60):
        result = await _replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None


async def test_a_history_changed_under_the_workflow_fails_to_replay() -> None:
    """The check has teeth: the same history with its first tool call's activity renamed
    is a nondeterminism error."""
    text = (GOLDEN / "temporal_history_before_35.json").read_text()
    changed = text.replace('"helix_tool_call"', '"helix_tool_renamed"', 1)
    assert changed != text
    history = WorkflowHistory.from_json("h1", changed)
    with anyio.fail_after(60):
        result = await _replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is not None
