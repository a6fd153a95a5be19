"""The inspector's "fork here": a timeline entry's edit box makes a branch (specs/ui.md).

A real ``create_http_app`` on uvicorn (loopback), headless chromium. A
session that called a tool is opened; "fork here" on the tool's card, its
result edited in the box, makes a branch through ``POST /fork``; the page
opens the branch, which runs on from the edited result (the tool is not
called again); the origin is untouched. "fork here" on the user's message
replaces it and regenerates the turn.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from pydantic import BaseModel
from servers import serve

from browser.test_inspector import TIMEOUT, WAIT_MS
from helix_agents import AgentExecutor, define_agent, define_tool
from helix_agents.branches import forks_of
from helix_agents.events import ReplaceToolResult, ReplaceUserMessage, SessionForked
from helix_agents.log import encode_event
from helix_agents.messages import UserMessage
from helix_agents.models import LLMRequest, ScriptedLLM, ScriptStep
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore

pytestmark = pytest.mark.slow


class Q(BaseModel):
    q: str


looked: list[str] = []


def _look(value: Q, ctx: Any) -> dict[str, str]:
    looked.append(value.q)
    return {"found": value.q}


def _script(request: LLMRequest) -> ScriptStep:
    said = [m.content for m in request.messages if type(m).__name__ == "UserMessage"]
    seen = [m.content for m in request.messages if type(m).__name__ == "ToolResultMessage"]
    if not seen:
        return ScriptStep(tool_calls=[ScriptedLLM.call("look", {"q": said[0]}, id="c1")])
    return ScriptStep(text=f"answer from {seen[0]}")


async def _branch_of(store: MemoryEventStore, origin: str) -> str:
    """The fork of ``origin`` the page made, once it is written (its list: ``forks_of``)."""
    for _ in range(TIMEOUT * 20):  # the page makes it: nothing to wait on but the store
        branches = await forks_of(store, origin)
        if branches:
            (branch,) = branches
            return branch
        await anyio.sleep(0.05)
    raise AssertionError(f"no fork of {origin} was made")


async def test_fork_here_on_a_tool_and_on_a_message(page: Any) -> None:
    from playwright.async_api import expect

    looked.clear()
    agent = define_agent(
        "looker", tools=[define_tool("look", "Look.", Q, _look)], llm=ScriptedLLM(_script)
    )
    store = MemoryEventStore()
    with anyio.fail_after(TIMEOUT):
        async with serve(create_http_app(AgentServer([agent], store))) as url:
            async with AgentExecutor(store, [agent]) as executor:
                assert await executor.run(agent, "tides", session_id="o1") == (
                    'answer from {"found":"tides"}'
                )
            origin = [encode_event(e) for e in await store.read("o1")]
            await page.goto(f"{url}/ui?session=o1")
            card = page.locator('[data-agent-id="o1"] .tool[data-tool-call-id="c1"]')
            await expect(card).to_be_visible(timeout=WAIT_MS)
            await card.hover()
            await card.locator(".fork-here").click()
            await expect(page.locator("#fork-panel")).to_be_visible()
            await expect(page.locator("#fork-edit")).to_have_value('{\n  "found": "tides"\n}')
            await page.locator("#fork-edit").fill('{"found": "edited"}')
            await page.locator("#fork-go").click()
            branch = await _branch_of(store, "o1")
            await expect(page).to_have_url(f"{url}/ui?session={branch}", timeout=WAIT_MS)
            await expect(page.locator("#root-status")).to_have_attribute(
                "data-status", "completed", timeout=WAIT_MS
            )
            await expect(page.locator(f'[data-agent-id="{branch}"] .text').last).to_have_text(
                'answer from {"found":"edited"}', timeout=WAIT_MS
            )
            marker = next(e for e in await store.read(branch) if isinstance(e, SessionForked))
            assert marker.edits == [
                ReplaceToolResult(tool_call_id="c1", result={"found": "edited"})
            ]

            # edit and regenerate: the user's message replaced, the turn run again
            said = page.locator(f'[data-agent-id="{branch}"] .user-message').first
            await said.hover()
            await said.locator(".fork-here").click()
            await expect(page.locator("#fork-edit")).to_have_value("tides")
            await page.locator("#fork-edit").fill("storms")
            await page.locator("#fork-go").click()
            second = await _branch_of(store, branch)
            await expect(page).to_have_url(f"{url}/ui?session={second}", timeout=WAIT_MS)
            await expect(page.locator(f'[data-agent-id="{second}"] .text').last).to_have_text(
                'answer from {"found":"storms"}', timeout=WAIT_MS
            )
            marker = next(e for e in await store.read(second) if isinstance(e, SessionForked))
            assert marker.edits == [
                ReplaceUserMessage(seq=1, message=UserMessage(content="storms"))
            ]
            assert [encode_event(e) for e in await store.read("o1")] == origin
    assert looked == ["tides", "storms"]  # the edited result was never looked up
