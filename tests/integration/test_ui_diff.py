"""The inspector's comparison of two branches over real HTTP: ``GET /diff`` and ``/ui/diff``."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from pydantic import BaseModel
from servers import serve

from helix_agents import AgentExecutor, ToolContext, define_agent, define_tool
from helix_agents.events import MessageAppended, ReplaceToolResult
from helix_agents.messages import ToolResultMessage
from helix_agents.models import ScriptedLLM
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore

pytestmark = pytest.mark.slow

TIMEOUT = 30


class Query(BaseModel):
    query: str


def lookup(value: Query, ctx: ToolContext) -> str:
    return f"open on {value.query}"


def _answer(request: Any) -> Any:
    results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
    if not results:
        return [ScriptedLLM.call("lookup", {"query": "mondays"})]
    return ScriptedLLM.reply(f"we are {results[-1].content}")


shop = define_agent(
    "shop",
    tools=[define_tool("lookup", "Opening hours", Query, lookup)],
    llm=ScriptedLLM(_answer),
)


async def branches(store: MemoryEventStore) -> int:
    """``s-1``, and ``s-1-edited``: forked at its tool result, which is replaced."""
    async with AgentExecutor(store, [shop]) as executor:
        handle = await executor.execute(shop, "open on mondays?", session_id="s-1")
        assert (await handle.result()).output == "we are open on mondays"
        result = next(
            event
            for event in await store.read("s-1")
            if isinstance(event, MessageAppended) and isinstance(event.message, ToolResultMessage)
        )
        assert isinstance(result.message, ToolResultMessage)
        edit = ReplaceToolResult(tool_call_id=result.message.tool_call_id, result="closed")
        await executor.fork("s-1", result.seq, edits=[edit], new_session_id="s-1-edited")
        await executor.wait_idle("s-1-edited")
    return result.seq


async def test_diff_answers_the_comparison_and_its_errors() -> None:
    store = MemoryEventStore()
    seq = await branches(store)
    with anyio.fail_after(TIMEOUT):
        async with (
            serve(create_http_app(AgentServer([shop], store), auth=["sekrit"])) as url,
            httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer sekrit"}) as client,
        ):
            answer = await client.get("/diff", params={"a": "s-1", "b": "s-1-edited"})
            assert answer.status_code == 200, answer.text
            diff = answer.json()
            assert (diff["same"], diff["parted"], diff["common"]) == (False, True, seq - 1)
            assert diff["a"]["partedSeq"] == diff["b"]["partedSeq"] == seq
            assert diff["a"]["output"] == "we are open on mondays"
            assert diff["b"]["output"] == "we are closed"
            assert next(c["result"] for c in diff["b"]["toolCalls"]) == "closed"
            same = (await client.get("/diff", params={"a": "s-1", "b": "s-1"})).json()
            assert (same["same"], same["parted"]) == (True, False)
            missing = await client.get("/diff", params={"a": "s-1", "b": "nope"})
            assert missing.status_code == 404
            assert missing.json() == {"error": "session 'nope' not found", "code": "NOT_FOUND"}
            for params in ({"a": "s-1"}, {"a": "s-1", "b": "bad id!"}):
                bad = await client.get("/diff", params=params)
                assert bad.status_code == 400, params
                assert bad.json()["code"] == "INVALID_REQUEST"
            async with httpx.AsyncClient(base_url=url) as anonymous:
                refused = await anonymous.get("/diff", params={"a": "s-1", "b": "s-1"})
                assert refused.status_code == 401
                page = await anonymous.get("/ui/diff", params={"a": "s-1", "b": "s-1-edited"})
                assert page.status_code == 200  # the page holds no data: no token
                assert 'src="assets/diff.js"' in page.text
                script = await anonymous.get("/ui/assets/diff.js")
                assert script.headers["content-type"].startswith("text/javascript")
