"""Agents ``test_runtimes_agree.py`` runs on every runtime, one per scenario.

:func:`agents` makes a fresh set for one gateway: the ``hold`` tool keeps, per
set, which sessions it held already, so each runtime's gateway has its own.
Scripts are indexed by the conversation (``ScriptedLLM``), so a durable
engine that runs a step again gets the same answer.

- ``looper``: calls ``lookup``, then answers (a tool loop);
- ``stepper``: calls ``lookup`` every turn; ``max_steps=2`` ends it;
- ``breaker``: calls ``broken`` (which raises), then answers;
- ``guesser``: calls ``nowhere`` (no such tool), then answers;
- ``parent``: delegates to the local ``helper`` (which calls ``lookup`` and
  finishes with a :class:`Note`), then answers;
- ``payer``: calls ``pay``, which needs an approval, then answers with what
  it saw (approved or denied: the result or the reason);
- ``asker``: calls the client tool ``pick``, then answers with the result;
- ``echo``: answers every turn with its last user message (follow-ups);
- ``mute``: its model fails (``LLMError``) on the first call;
- ``holder``: calls ``hold``, whose first call in a session emits a
  ``holding`` chunk and waits until it is cancelled (an interrupt), then answers;
- ``boss``: delegates to the local ``clerk``, whose ``pay`` needs an
  approval (answered at the boss), then answers;
- ``chooser``: delegates to the local ``picker``, which calls the client tool
  ``pick`` (answered at the chooser) and finishes with what it saw.
"""

from __future__ import annotations

from typing import Any

import anyio
from pydantic import BaseModel

from helix_agents import AgentConfig, ToolContext, create_sub_agent_tool, define_agent, define_tool
from helix_agents.messages import AssistantMessage, ToolResultMessage, UserMessage
from helix_agents.models import LLMRequest, ScriptedLLM, ScriptStep

__all__ = ["Note", "Topic", "agents"]

call = ScriptedLLM.call


class Topic(BaseModel):
    """What ``lookup``, ``broken`` and ``hold`` take."""

    topic: str


class Amount(BaseModel):
    """What ``pay`` pays and ``pick`` is asked about."""

    amount: int


class Note(BaseModel):
    """The helper's and the clerk's output."""

    note: str


def _lookup(value: Topic, ctx: ToolContext) -> dict[str, str]:
    return {"note": f"notes on {value.topic}"}


def _broken(value: Topic, ctx: ToolContext) -> dict[str, str]:
    raise RuntimeError(f"the {value.topic} archive is offline")


def _pay(value: Amount, ctx: ToolContext) -> dict[str, int]:
    return {"paid": value.amount}


def _turn(request: LLMRequest) -> int:
    return sum(1 for message in request.messages if isinstance(message, AssistantMessage))


def _seen(request: LLMRequest) -> str:
    """The tool results the model saw, ``name=content``, in order."""
    return "; ".join(
        f"{message.tool_name}={message.content}"
        for message in request.messages
        if isinstance(message, ToolResultMessage)
    )


def _then_say_what_was_seen(first: ScriptStep) -> Any:
    """A script: ``first``, then an answer naming every tool result the model saw."""

    def script(request: LLMRequest) -> ScriptStep:
        if _turn(request) == 0:
            return first
        return ScriptStep(text=f"I saw {_seen(request)}")

    return script


def _steps_forever(request: LLMRequest) -> ScriptStep:
    turn = _turn(request)
    return ScriptStep(
        text=f"Step {turn + 1}.", tool_calls=[call("lookup", {"topic": f"t{turn}"}, id=f"s{turn}")]
    )


def _echo(request: LLMRequest) -> str:
    said = [m.content for m in request.messages if isinstance(m, UserMessage)]
    return f"echo: {said[-1]}"


def agents() -> list[AgentConfig]:
    """A fresh set of the scenarios' agents (for one gateway)."""
    held: set[str] = set()

    async def _hold(value: Topic, ctx: ToolContext) -> dict[str, str]:
        if ctx.session_id not in held:
            held.add(ctx.session_id)
            await ctx.emit("holding", {"topic": value.topic})
            await anyio.sleep_forever()  # until an interrupt cancels it
        return {"held": value.topic}

    lookup = define_tool("lookup", "Look a topic up.", Topic, _lookup)
    broken = define_tool("broken", "An archive that is offline.", Topic, _broken)
    hold = define_tool("hold", "Hold on.", Topic, _hold)
    pay = define_tool("pay", "Pay an amount.", Amount, _pay, requires_approval=True)
    pick = define_tool("pick", "The user picks a colour.", Amount, "client")

    looper = define_agent(
        "looper",
        tools=[lookup],
        llm=ScriptedLLM(
            [
                ScriptStep(
                    text="Let me look.", tool_calls=[call("lookup", {"topic": "tea"}, id="t1")]
                ),
                "Tea is a leaf.",
            ],
            chunk_words=2,
        ),
    )
    stepper = define_agent("stepper", tools=[lookup], max_steps=2, llm=ScriptedLLM(_steps_forever))
    breaker = define_agent(
        "breaker",
        tools=[broken],
        llm=ScriptedLLM(
            _then_say_what_was_seen(
                ScriptStep(text="Trying.", tool_calls=[call("broken", {"topic": "old"}, id="b1")])
            )
        ),
    )
    guesser = define_agent(
        "guesser",
        tools=[lookup],
        llm=ScriptedLLM(
            _then_say_what_was_seen(ScriptStep(tool_calls=[call("nowhere", {"x": 1}, id="g1")]))
        ),
    )
    helper = define_agent(
        "helper",
        tools=[lookup],
        output_schema=Note,
        llm=ScriptedLLM(
            [
                ScriptStep(text="Looking.", tool_calls=[call("lookup", {"topic": "tea"}, id="h1")]),
                ScriptedLLM.finish({"note": "a leaf"}, text="Tea is a leaf.", id="h2"),
            ],
            chunk_words=1,
        ),
    )
    parent = define_agent(
        "parent",
        tools=[create_sub_agent_tool(helper, Topic)],
        llm=ScriptedLLM(
            _then_say_what_was_seen(
                ScriptStep(
                    text="Asking.", tool_calls=[call("subagent__helper", {"topic": "tea"}, id="c1")]
                )
            )
        ),
    )
    payer = define_agent(
        "payer",
        tools=[pay],
        llm=ScriptedLLM(
            _then_say_what_was_seen(
                ScriptStep(text="Paying.", tool_calls=[call("pay", {"amount": 5}, id="p1")])
            )
        ),
    )
    asker = define_agent(
        "asker",
        tools=[pick],
        llm=ScriptedLLM(
            _then_say_what_was_seen(ScriptStep(tool_calls=[call("pick", {"amount": 3}, id="k1")]))
        ),
    )
    echo = define_agent("echo", llm=ScriptedLLM(_echo))
    mute = define_agent("mute", llm=ScriptedLLM([ScriptedLLM.fail("the model is down")]))
    holder = define_agent(
        "holder",
        tools=[hold],
        llm=ScriptedLLM(
            _then_say_what_was_seen(
                ScriptStep(text="Holding.", tool_calls=[call("hold", {"topic": "line"}, id="w1")])
            )
        ),
    )
    clerk = define_agent(
        "clerk",
        tools=[pay],
        output_schema=Note,
        llm=ScriptedLLM(
            [
                [call("pay", {"amount": 7}, id="q1")],
                ScriptedLLM.finish({"note": "paid"}, id="q2"),
            ]
        ),
    )
    boss = define_agent(
        "boss",
        tools=[create_sub_agent_tool(clerk, Amount)],
        llm=ScriptedLLM(
            _then_say_what_was_seen(
                ScriptStep(tool_calls=[call("subagent__clerk", {"amount": 7}, id="c2")])
            )
        ),
    )
    picker = define_agent(
        "picker",
        tools=[pick],
        output_schema=Note,
        llm=ScriptedLLM(
            lambda request: (
                ScriptedLLM.finish({"note": _seen(request)}, id="r2")
                if _turn(request)
                else ScriptStep(tool_calls=[call("pick", {"amount": 9}, id="r1")])
            )
        ),
    )
    chooser = define_agent(
        "chooser",
        tools=[create_sub_agent_tool(picker, Amount)],
        llm=ScriptedLLM(
            _then_say_what_was_seen(
                ScriptStep(tool_calls=[call("subagent__picker", {"amount": 9}, id="c3")])
            )
        ),
    )
    fumbler = define_agent(
        "fumbler",
        tools=[broken],
        output_schema=Note,
        llm=ScriptedLLM(
            [
                [call("broken", {"topic": "old"}, id="f1")],
                ScriptedLLM.finish({"note": "gave up"}, id="f2"),
            ]
        ),
    )
    sponsor = define_agent(
        "sponsor",
        tools=[create_sub_agent_tool(fumbler, Topic)],
        llm=ScriptedLLM(
            _then_say_what_was_seen(
                ScriptStep(tool_calls=[call("subagent__fumbler", {"topic": "old"}, id="c4")])
            )
        ),
    )
    return [
        looper,
        stepper,
        breaker,
        guesser,
        parent,
        payer,
        asker,
        echo,
        mute,
        holder,
        boss,
        chooser,
        sponsor,
    ]
