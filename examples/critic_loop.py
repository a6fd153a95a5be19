"""Persistent companions: a maker re-consults the same critic until it passes.

The maker writes a haiku draft and spawns a blocking ``critic`` companion named
``reviewer`` (``companion__spawnAgent``); the critic returns a typed verdict
inline. On ``revise`` the maker fixes the draft and spawns ``reviewer`` again:
the critic's session is continued, not recreated, so it remembers every earlier
round and says what changed. The loop stops at ``pass`` or at the maker's own
round cap. The critic reads the current draft by reference, with a tool
(``load_draft``), since a companion message is text only. Both models are
scripted (``ScriptedLLM``): no LLM is called. Afterwards the usage rollup counts
the critic's session once, with all its rounds.

Run it::

    python examples/critic_loop.py [--rounds N] [--store FILE]
"""

from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path
from typing import Any

import anyio
import msgspec
from pydantic import BaseModel, Field

from helix_agents import (
    AgentConfig,
    AgentExecutor,
    AgentResult,
    PersistentAgent,
    ToolContext,
    UsageRollup,
    define_agent,
    define_tool,
)
from helix_agents.messages import ToolResultMessage, UserMessage
from helix_agents.models import LLMRequest, ScriptedLLM
from helix_agents.stores import EventStore, SqliteEventStore

SESSION = "critic-loop"
DRAFTS = [
    "an old silent pond / a frog jumps in / splash",
    "an old silent pond / a little green frog jumps into the pond / splash! silence again",
    "an old silent pond / a frog jumps into the pond / splash! silence again",
]
"""The maker's drafts, one per round: 10, 20, then 17 syllables (the critic's pass)."""

SPAWN = "companion__spawnAgent"

call = ScriptedLLM.call
finish = ScriptedLLM.finish


class Verdict(BaseModel):
    """The critic's typed answer."""

    verdict: str = Field(pattern="^(pass|revise)$")
    notes: str


class DraftRef(BaseModel):
    """Which draft to load."""

    version: int


async def _load_draft(ref: DraftRef, ctx: ToolContext) -> str:
    return DRAFTS[min(ref.version, len(DRAFTS)) - 1]


load_draft = define_tool("load_draft", "Load draft N of the artifact.", DraftRef, _load_draft)

_VOWEL_GROUPS = ("ai", "ea", "ee", "oo", "ou", "ie", "a", "e", "i", "o", "u", "y")


def syllables(text: str) -> int:
    """A rough syllable count (vowel groups per word, silent final e dropped)."""
    total = 0
    for word in text.replace("/", " ").replace("!", " ").replace(".", " ").split():
        word = word.lower()
        count, i = 0, 0
        while i < len(word):
            group = next((g for g in _VOWEL_GROUPS if word.startswith(g, i)), None)
            if group:
                count += 1
                i += len(group)
            else:
                i += 1
        if word.endswith("e") and count > 1 and not word.endswith(("le", "ee")):
            count -= 1
        total += max(count, 1)
    return total


def _messages_of(request: LLMRequest, kind: type) -> list[Any]:
    return [message for message in request.messages if isinstance(message, kind)]


def critic_model(request: LLMRequest) -> Any:
    """Load the draft named in the latest request, count, compare with the last round."""
    asks = [m.content for m in _messages_of(request, UserMessage)]
    loads = [m for m in _messages_of(request, ToolResultMessage) if m.tool_name == "load_draft"]
    rounds = len(asks)
    if len(loads) < rounds:  # this round's draft is not loaded yet
        version = re.search(r"draft v(\d+)", asks[-1])
        return call("load_draft", {"version": int(version.group(1)) if version else 1})
    draft = loads[-1].content
    count = syllables(draft)
    since = ""
    if len(loads) > 1:
        since = f"; last time it had {syllables(loads[-2].content)}"
    verdict = "pass" if count == 17 else "revise"
    return finish({"verdict": verdict, "notes": f"round {rounds}: {count} syllables{since}"})


def maker_model(rounds: int) -> Any:
    """Spawn the reviewer with draft 1, then re-consult it after each fix (at most ``rounds``)."""

    def model(request: LLMRequest) -> Any:
        verdicts = [
            msgspec.json.decode(m.content)
            for m in _messages_of(request, ToolResultMessage)
            if m.tool_name == SPAWN
        ]
        if verdicts and verdicts[-1]["status"] != "completed":
            return f"the critic could not review: {verdicts[-1].get('error')}"
        done = verdicts and verdicts[-1]["output"]["verdict"] == "pass"
        if done or len(verdicts) >= rounds:
            last = verdicts[-1]["output"]
            return f"final: {DRAFTS[len(verdicts) - 1]} ({last['verdict']}: {last['notes']})"
        version = len(verdicts) + 1
        ask = f"Review draft v{version}"
        if version > 1:
            ask += " - I addressed your notes"
        return call(SPAWN, {"agent": "critic", "name": "reviewer", "initialMessage": ask})

    return model


def build_agents(rounds: int = 5) -> AgentConfig:
    """The maker, with the critic as its blocking persistent companion."""
    critic = define_agent(
        "critic",
        description="Reviews a haiku draft; remembers earlier rounds.",
        output_schema=Verdict,
        tools=[load_draft],
        llm=ScriptedLLM(critic_model),
    )
    return define_agent(
        "maker",
        system_prompt="Write a haiku; re-consult the same critic ('reviewer') until it passes.",
        persistent_agents=[PersistentAgent(critic, mode="blocking", description="haiku critic")],
        llm=ScriptedLLM(maker_model(rounds)),
    )


AGENTS = [build_agents()]
"""The agents, for ``helix-agents replay --rerun examples.critic_loop:AGENTS``."""


async def free_session_id(store: EventStore, base: str) -> str:
    """``base``, or ``base-2``, ``base-3``... : the first id the store does not hold yet.

    So the example runs again on the same store (a session id is used once).
    """
    candidate, n = base, 1
    while await store.read(candidate):
        n += 1
        candidate = f"{base}-{n}"
    return candidate


async def run(store_path: Path, rounds: int = 5) -> tuple[AgentResult, UsageRollup]:
    """Run the maker on a SQLite store at ``store_path``; its result and its usage rollup.

    The session is :data:`SESSION`, or ``SESSION-2``... when the store holds it already.
    """
    maker = build_agents(rounds)
    store = SqliteEventStore(store_path)
    try:
        async with AgentExecutor(store, [maker]) as executor:
            session_id = await free_session_id(store, SESSION)
            task = "Write a haiku about a pond"
            handle = await executor.execute(maker, task, session_id=session_id)
            result = await handle.result()
            rollup = await executor.usage_rollup(session_id)
        return result, rollup
    finally:
        await store.close()


def main(argv: list[str] | None = None) -> None:
    """Run the example and print the answer and the usage rollup."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5, help="the maker's round cap")
    parser.add_argument("--store", type=Path, help="the SQLite file (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    path: Path = args.store or Path(tempfile.mkdtemp(prefix="helix-critic-")) / "events.db"
    result, rollup = anyio.run(run, path, args.rounds)
    print(f"status: {result.status}")
    print(f"answer: {result.output}")
    print(f"sessions: {', '.join(rollup.sessions)}")
    print(f"llm calls: {rollup.llm_calls}")
    print(f"store: {path}")


if __name__ == "__main__":
    main()
