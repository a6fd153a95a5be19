"""Pydantic AI's side on Temporal: ``PaiWorkflow`` runs the workload with a ``TemporalAgent``
(its model requests and its tool calls activities, the default).

In a module, not ``__main__``: Temporal's sandbox imports it again (the
worker's ``PydanticAIPlugin`` passes Pydantic AI's own modules through).
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

from temporalio import workflow

__all__ = ["PAI_AGENT", "PaiWorkflow"]


def _pai_agent() -> Any:
    with workflow.unsafe.imports_passed_through():
        from pydantic_ai import Agent
        from pydantic_ai.durable_exec.temporal import TemporalAgent
        from pydantic_ai.models.function import FunctionModel

        from sidebyside.workload import inc, scripted
    agent = Agent(FunctionModel(scripted), name="pai_stepper", tools=[inc])
    with warnings.catch_warnings():  # deprecated for the TemporalDurability capability in 2.68
        warnings.simplefilter("ignore")
        return TemporalAgent(agent)


PAI_AGENT: Any = _pai_agent()
"""The agent (``contender.py`` skips this side when Pydantic AI is not installed)."""


@workflow.defn(name="bench_pai")
class PaiWorkflow:
    """Pydantic AI's ``TemporalAgent`` run on the prompt."""

    __pydantic_ai_agents__: ClassVar[list[Any]] = [PAI_AGENT]

    @workflow.run
    async def run(self, prompt: str) -> str:
        """The agent's answer."""
        result = await PAI_AGENT.run(prompt)
        return str(result.output)
