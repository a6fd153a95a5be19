"""``repr`` of the objects a user holds: short, telling, and never a secret."""

from __future__ import annotations

from pathlib import Path

import anyio

from helix_agents import AgentExecutor, define_agent
from helix_agents.events import RunStarted, SessionCreated
from helix_agents.messages import UserMessage
from helix_agents.models import OpenAIChatLLM, ReplayLLM, ScriptedLLM
from helix_agents.stores import MemoryEventStore, SqliteEventStore


async def test_executor_and_handle() -> None:
    agent = define_agent("echo", llm=ScriptedLLM(["hi"]))
    store = MemoryEventStore()
    executor = AgentExecutor(store, [agent])
    assert repr(executor) == (
        "<AgentExecutor agents=['echo'] store=<MemoryEventStore 0 sessions> "
        "not entered, 0 runs active>"
    )
    with anyio.fail_after(10):
        async with executor:
            handle = await executor.execute(agent, "hello", session_id="s-1")
            assert repr(handle) == f"<AgentHandle session='s-1' run={handle.run_id!r} from seq 2>"
            await handle.result()
            assert repr(executor).endswith(
                "store=<MemoryEventStore 1 sessions> open, 0 runs active>"
            )


async def test_stores(tmp_path: Path) -> None:
    memory = MemoryEventStore()
    await memory.close()
    assert repr(memory) == "<MemoryEventStore closed>"
    path = str(tmp_path / "events.db")
    sqlite = SqliteEventStore(path)
    assert repr(sqlite) == f"<SqliteEventStore path={path!r}>"
    await sqlite.close()
    assert repr(sqlite) == f"<SqliteEventStore path={path!r} closed>"


async def test_llm_adapters_and_no_api_key() -> None:
    assert repr(ScriptedLLM(["a", "b"])) == "<ScriptedLLM 2 turns, 0 calls answered>"

    def script(request: object) -> str:
        return "x"

    assert repr(ScriptedLLM(script)).startswith("<ScriptedLLM turns from ")
    async with OpenAIChatLLM(
        "gpt-test", base_url="http://127.0.0.1:9/v1", api_key="sk-secret"
    ) as llm:
        shown = repr(llm)
    assert shown == "<OpenAIChatLLM model='gpt-test' base_url='http://127.0.0.1:9/v1'>"
    assert "sk-secret" not in shown
    log = [
        SessionCreated(
            session_id="s",
            seq=1,
            ts=0.0,
            agent_type="a",
            run_id="r",
            messages=[UserMessage(content="hi")],
            root_session_id="s",
        ),
        RunStarted(session_id="s", seq=2, ts=0.0, run_id="r"),
    ]
    assert repr(ReplayLLM({"s": log})) == "<ReplayLLM 1 recorded sessions, 0 divergences>"
