"""A real model: an agent with a tool and a typed answer, on OpenAI or any compatible server.

The model is named (``model="openai:gpt-4o-mini"``), the tool is a plain
function (``@tool``: its name, docstring and signature are what the model
sees). The agent counts the words of a text with ``word_count``, then
finishes with a ``Summary`` (JSON the model must make valid). Works with
OpenAI, vLLM, Ollama, llama.cpp's server and the like.

Run it::

    OPENAI_API_KEY=... python examples/openai_compatible.py --model gpt-4o-mini
    python examples/openai_compatible.py --base-url http://127.0.0.1:11434/v1 --model llama3.1

With ``--base-url`` (or ``$OPENAI_BASE_URL``) the model is
``openai-compatible:MODEL`` on that server, with ``$OPENAI_API_KEY`` if set;
otherwise ``openai:MODEL``, which needs ``$OPENAI_API_KEY``. Without one the
example says so in one line and exits 0 (it runs no model).
"""

from __future__ import annotations

import argparse
import os
import sys

import anyio
from pydantic import BaseModel, Field

from helix_agents import AgentConfig, AgentExecutor, define_agent, tool
from helix_agents.errors import HelixError
from helix_agents.stores import MemoryEventStore

TEXT = "An append-only log makes recovery a replay and debugging a read."


class Summary(BaseModel):
    summary: str = Field(description="one sentence")
    words: int


@tool
def word_count(text: str) -> int:
    """Count the words of a text.

    Args:
        text: the text, as given.
    """
    return len(text.split())


def summarizer(model: str) -> AgentConfig[Summary]:
    """The agent, on the model named ``model`` (``openai:...``, ``openai-compatible:...``)."""
    return define_agent(
        "summarizer",
        system_prompt="Count the words with the word_count tool, then finish with a summary.",
        tools=[word_count],
        output_schema=Summary,
        model=model,
    )


async def main(model: str) -> Summary:
    """Summarise :data:`TEXT` with the model named ``model``; print the answer."""
    agent = summarizer(model)
    async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
        summary = await executor.run(agent, f"Summarise this text: {TEXT}")
    print(f"summary: {summary.summary}")
    print(f"words: {summary.words}")
    return summary


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt-4o-mini", help="(default: %(default)s)")
    parser.add_argument(
        "--base-url",
        default=os.environ.get("OPENAI_BASE_URL"),
        help="an OpenAI-compatible server's API root (default: $OPENAI_BASE_URL, else OpenAI)",
    )
    args = parser.parse_args()
    if args.base_url:
        os.environ["OPENAI_BASE_URL"] = args.base_url
        name = f"openai-compatible:{args.model}"
    elif not os.environ.get("OPENAI_API_KEY"):
        print(
            "openai_compatible.py calls a real model: set OPENAI_API_KEY, or pass "
            "--base-url http://127.0.0.1:11434/v1 for a local server (Ollama, vLLM)",
            file=sys.stderr,
        )
        sys.exit(0)
    else:
        name = f"openai:{args.model}"
    try:
        anyio.run(main, name)
    except HelixError as exc:  # a bad name or URL; the model failed or is away
        sys.exit(f"openai_compatible.py: {exc}")
