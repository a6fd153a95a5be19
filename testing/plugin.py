"""The pytest plugin of ``helix_agents.testing`` (an entry point): ``helix`` and ``helix_eval``."""

from __future__ import annotations

import pytest

from helix_agents.testing.evals import assert_passed, evaluate
from helix_agents.testing.runner import AgentTester

__all__ = ["EvalFixture", "helix", "helix_eval"]


@pytest.fixture
def helix() -> AgentTester:
    """A test's :class:`AgentTester`: a fresh in-memory store, strict runs."""
    return AgentTester()


class EvalFixture:
    """The ``helix_eval`` fixture: run an eval (:func:`~helix_agents.testing.evals.evaluate`)."""

    run = staticmethod(evaluate)
    """Choose the cases, run them as branches, return the :class:`EvalReport`."""
    assert_passed = staticmethod(assert_passed)
    """Fail the test with the report's table unless every case passed."""

    def __repr__(self) -> str:
        return "<helix_eval: .run(store, agents, ...) then .assert_passed(report)>"


@pytest.fixture
def helix_eval() -> EvalFixture:
    """A test's eval: ``report = helix_eval.run(store, agents, ...)``, then ``assert_passed``."""
    return EvalFixture()
