"""Human in the loop: a sub-agent's tool waits for a person's approval, answered at the root.

The lead delegates to an assistant whose ``send_email`` tool has
``requires_approval=True``. When the assistant calls it, the whole tree
pauses (``status: paused``) and the root lists the open entry
(``handle.pending_inputs()``: the tool, its arguments, the path down the
tree). You answer at the root (``handle.approve`` / ``handle.deny``) and the
tree resumes where it stopped: approved, the email is "sent"; denied, the
assistant's model is told why and answers without it. The models are
scripted: no LLM is called. ``specs/hitl.md`` has the whole story.

Run it (asks at the terminal, or answer with ``--answer``; with no terminal,
the end of input is a denial)::

    python examples/human_in_the_loop.py [--answer approve|deny]
"""

from __future__ import annotations

import argparse
import contextlib
import json
from typing import Any

import anyio
from pydantic import BaseModel

from helix_agents import (
    AgentExecutor,
    ToolContext,
    create_sub_agent_tool,
    define_agent,
    define_tool,
)
from helix_agents.messages import AssistantMessage, ToolCall, ToolResultMessage
from helix_agents.models import LLMRequest, ScriptedLLM, ScriptStep
from helix_agents.stores import MemoryEventStore

SESSION = "hitl-example"
SENT: list[str] = []
"""The emails ``send_email`` sent, so a test can see what happened."""


class Email(BaseModel):
    to: str
    body: str


class Task(BaseModel):
    task: str


class Outcome(BaseModel):
    outcome: str


def send_email(email: Email, ctx: ToolContext) -> str:
    """Send ``email`` (here: remember it)."""
    SENT.append(email.to)
    return f"sent to {email.to}"


def reports_back(first: ToolCall) -> ScriptedLLM:
    """A model that makes the call ``first``, then finishes with what its result said."""

    def turn(request: LLMRequest) -> ScriptStep | ToolCall:
        if not any(isinstance(m, AssistantMessage) for m in request.messages):
            return first
        last = request.messages[-1]
        said: Any = last.content if isinstance(last, ToolResultMessage) else ""
        with contextlib.suppress(ValueError):
            said = json.loads(said)  # a sub-agent's result is its output's JSON
        if isinstance(said, dict):
            said = said.get("outcome") or said.get("error")
        return ScriptedLLM.finish({"outcome": str(said)})

    return ScriptedLLM(turn)


assistant = define_agent(
    "assistant",
    output_schema=Outcome,
    tools=[define_tool("send_email", "Send an email.", Email, send_email, requires_approval=True)],
    llm=reports_back(
        ScriptedLLM.call("send_email", {"to": "ops@example.com", "body": "Deploy at 5."})
    ),
)
lead = define_agent(
    "lead",
    output_schema=Outcome,
    tools=[create_sub_agent_tool(assistant, Task)],
    llm=reports_back(ScriptedLLM.call("subagent__assistant", {"task": "Tell ops: deploy at 5."})),
)


NO_ANSWER = "no answer (end of input)"
"""The denial's reason when standard input ends (no terminal, a closed pipe)."""


def ask(question: str) -> str | None:
    """Ask at the terminal until the answer is approve or deny; None at the end of input."""
    while True:
        try:
            answer = input(question).strip().lower()
        except EOFError:
            print()
            return None
        if answer in ("approve", "deny", "a", "d", "y", "n"):
            return "approve" if answer in ("approve", "a", "y") else "deny"


async def main(answer: str | None) -> Outcome:
    """Run the tree, answer its one approval (``answer``, else ask), return the lead's outcome."""
    async with AgentExecutor(MemoryEventStore(), [lead]) as executor:
        handle = await executor.execute(lead, "Tell ops about the deploy.", session_id=SESSION)
        paused = await handle.result()
        print(f"status: {paused.status}")
        [entry] = await handle.pending_inputs()
        print(f"waiting: {entry.kind} for {entry.tool_name} {entry.arguments}")
        print(f"  in {' > '.join(entry.path)}")
        choice = answer or await anyio.to_thread.run_sync(ask, "approve or deny? ")
        if choice == "approve":
            await handle.approve(entry.tool_call_id)
        else:
            reason = NO_ANSWER if choice is None else "not before the change review"
            await handle.deny(entry.tool_call_id, reason)
        outcome = (await handle.result()).unwrap()
    print(f"{'approved' if choice == 'approve' else 'denied'}; outcome: {outcome.outcome}")
    return outcome


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--answer", choices=["approve", "deny"], help="answer without asking (default: ask)"
    )
    anyio.run(main, parser.parse_args().answer)
