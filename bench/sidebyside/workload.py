"""The workload both frameworks run: a tool ``inc`` called once per turn, then an answer.

Pydantic AI's side: :func:`scripted` is a ``FunctionModel`` function that calls
``inc`` until the run holds as many tool returns as the prompt's number, then
answers (the count travels in the prompt: nothing global, so a Temporal
workflow replayed in its sandbox decides the same). helix's side is
``_durable.build``'s ``stepper`` (a ``ScriptedLLM`` scripted the same).
Imports only Pydantic AI's messages: safe in Temporal's sandbox.
"""

from __future__ import annotations

from typing import Any

PROMPT = "{steps}"
"""The prompt: the number of ``inc`` calls to make."""


def prompt(steps: int) -> str:
    """The prompt of a run of ``steps`` tool steps."""
    return PROMPT.format(steps=steps)


def scripted(messages: list[Any], info: Any) -> Any:
    """The scripted model: one ``inc`` call per turn until the prompt's count, then an answer."""
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    steps = 0
    done = 0
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                steps = int(part.content)
            elif isinstance(part, ToolReturnPart):
                done += 1
    if done < steps:
        return ModelResponse(parts=[ToolCallPart("inc", {"x": done})])
    return ModelResponse(parts=[TextPart("stepped")])


async def inc(x: int) -> int:
    """Add one (the tool ``inc``)."""
    return x + 1
