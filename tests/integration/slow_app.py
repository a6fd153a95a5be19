"""An agent that stays running: ``helix-agents serve tests.integration.slow_app:agents``.

``sleeper`` calls its ``wait`` tool, which waits (an hour) unless the
server was started with ``SLOW_APP_QUICK=1`` (or for ``SLOW_APP_NAP`` seconds
if set), then answers with the text
it was given. Used by the tests of ``serve``'s limits and its bounded
shutdown (``test_serve_limits.py``, ``test_serve_shutdown.py``): a session
that is running, with an open stream, for as long as the test needs.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
from pydantic import BaseModel

from helix_agents import ToolContext, define_agent, define_tool
from helix_agents.messages import AssistantMessage, UserMessage
from helix_agents.models import LLMRequest, ScriptedLLM, ScriptStep

__all__ = ["agents", "sleeper"]


class Nap(BaseModel):
    """The ``wait`` tool's input."""

    label: str


async def _wait(args: Nap, ctx: ToolContext) -> dict[str, Any]:
    if os.environ.get("SLOW_APP_QUICK") != "1":
        await anyio.sleep(float(os.environ.get("SLOW_APP_NAP", "3600")))
    return {"woke": args.label}


def _script(request: LLMRequest) -> ScriptStep:
    text = next(m.content for m in request.messages if isinstance(m, UserMessage))
    if not any(isinstance(message, AssistantMessage) for message in request.messages):
        return ScriptStep(
            text="waiting", tool_calls=[ScriptedLLM.call("wait", {"label": text}, id="wait_1")]
        )
    return ScriptStep(text=f"woke {text}")


sleeper = define_agent(
    "sleeper",
    description="Waits in a tool, then repeats its message.",
    tools=[define_tool("wait", "Waits.", Nap, _wait)],
    llm=ScriptedLLM(_script),
)

agents = {"sleeper": sleeper}
