"""The pytest plugin of ``helix_agents.testing`` (an entry point): the ``helix`` fixture."""

from __future__ import annotations

import pytest

from helix_agents.testing.runner import AgentTester

__all__ = ["helix"]


@pytest.fixture
def helix() -> AgentTester:
    """A test's :class:`AgentTester`: a fresh in-memory store, strict runs."""
    return AgentTester()
