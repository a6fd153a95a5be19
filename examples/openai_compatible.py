"""An OpenAI-compatible model: an agent with a tool and a typed answer, on a real endpoint.

``OpenAIChatLLM`` speaks ``/chat/completions`` (streamed), so it works with
OpenAI, vLLM, Ollama, llama.cpp's server and the like. The agent counts the
words of a text with its ``word_count`` tool, then finishes with a
``Summary`` (the model calls ``__finish__`` with JSON that must validate).

Run it::

    OPENAI_API_KEY=... python examples/openai_compatible.py --model gpt-4o-mini
    python examples/openai_compatible.py --base-url http://127.0.0.1:11434/v1 --model llama3.1

The key comes from ``$OPENAI_API_KEY`` (none is sent when it is unset, as a
local server expects).
"""

from __future__ import annotations

import argparse

import anyio
from pydantic import BaseModel

from helix_agents import AgentConfig, AgentExecutor, ToolContext, define_agent, define_tool
from helix_agents.models import OpenAIChatLLM
from helix_agents.stores import MemoryEventStore

TEXT = "An append-only log makes recovery a replay and debugging a read."


class Text(BaseModel):
    text: str


class Summary(BaseModel):
    summary: str
    words: int


def word_count(value: Text, ctx: ToolContext) -> int:
    """The number of words in ``value.text``."""
    return len(value.text.split())


def summarizer(llm: OpenAIChatLLM) -> AgentConfig[Summary]:
    """The agent, on ``llm``."""
    return define_agent(
        "summarizer",
        system_prompt="Count the words with the word_count tool, then finish with a summary.",
        tools=[define_tool("word_count", "Count the words of a text.", Text, word_count)],
        output_schema=Summary,
        llm=llm,
    )


async def main(model: str, base_url: str) -> Summary:
    """Summarise :data:`TEXT` with ``model`` at ``base_url``; print the answer."""
    async with OpenAIChatLLM(model, base_url=base_url) as llm:
        agent = summarizer(llm)
        async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
            summary = await executor.run(agent, f"Summarise this text: {TEXT}")
    print(f"summary: {summary.summary}")
    print(f"words: {summary.words}")
    return summary


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt-4o-mini", help="(default: %(default)s)")
    parser.add_argument(
        "--base-url", default="https://api.openai.com/v1", help="(default: %(default)s)"
    )
    args = parser.parse_args()
    anyio.run(main, args.model, args.base_url)
