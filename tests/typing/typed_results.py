"""Checked by mypy in ``tests/unit/test_typing.py``: what the checker sees of typed results.

Every ``reveal_type`` line carries the type mypy must reveal in a comment;
the ``type: ignore`` lines must be errors (``warn_unused_ignores`` says so if
one stops being an error). Never run, only checked.
"""

from __future__ import annotations

from typing import Any, reveal_type

from pydantic import BaseModel

from helix_agents import AgentConfig, AgentExecutor, define_agent, run_sync
from helix_agents.models import ScriptedLLM
from helix_agents.stores import MemoryEventStore


class Findings(BaseModel):
    findings: str


researcher = define_agent("researcher", output_schema=Findings, llm=ScriptedLLM([]))
chatty = define_agent("chatty", llm=ScriptedLLM([]))
agents: list[AgentConfig] = [researcher, chatty]  # a bare AgentConfig takes any agent

reveal_type(researcher)  # AgentConfig[Findings]
reveal_type(chatty)  # AgentConfig[Any]
reveal_type(run_sync(researcher, "q", store=MemoryEventStore()))  # Findings


async def check(executor: AgentExecutor) -> None:
    reveal_type(await executor.run(researcher, "q"))  # Findings
    handle = await executor.execute(researcher, "q")
    reveal_type(handle)  # AgentHandle[Findings]
    result = await handle.result()
    reveal_type(result.output)  # Findings | None
    reveal_type(result.unwrap())  # Findings
    text: str = (await executor.run(researcher, "q")).findings
    wrong: int = (await executor.run(researcher, "q")).findings  # type: ignore[assignment]
    anything: Any = await executor.run(chatty, "q")
    print(text, wrong, anything)
