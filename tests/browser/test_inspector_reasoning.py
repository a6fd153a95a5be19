"""The inspector shows a model's reasoning apart from its answer, and its output as it grows.

As ``test_inspector.py``: a real ``create_http_app`` on uvicorn (loopback) and
headless chromium. The planner calls a tool held until the test releases it,
so the page has loaded (from the server's fold) before the step that thinks
and writes the typed output arrives on the live stream (the page's own fold);
after a reload both folds must show the same page.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from pydantic import BaseModel
from servers import serve

from browser.test_inspector import TIMEOUT, WAIT_MS, state
from helix_agents import ToolContext, define_agent, define_tool
from helix_agents.models import ScriptedLLM, ScriptStep
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from tests.integration.reasoning_agents import THOUGHT, TRIP, Trip

pytestmark = pytest.mark.slow

ANSWER = "Here is the plan."


class Nothing(BaseModel):
    pass


async def test_reasoning_is_shown_apart_and_the_output_replaces_its_partial_form(
    page: Any,
) -> None:
    from playwright.async_api import expect

    held, release = anyio.Event(), anyio.Event()

    async def hold(value: Nothing, ctx: ToolContext) -> str:
        held.set()
        await release.wait()
        return "go on"

    planner = define_agent(
        "planner",
        tools=[define_tool("hold", "Waits for the test.", Nothing, hold)],
        output_schema=Trip,
        llm=ScriptedLLM(
            [
                ScriptedLLM.call("hold", {}, id="c_hold"),
                ScriptStep(
                    text=ANSWER,
                    reasoning=THOUGHT,
                    tool_calls=[ScriptedLLM.call("__finish__", TRIP, id="c_done")],
                    stream_arguments=12,
                ),
            ],
            delta_delay=0.01,
        ),
    )
    with anyio.fail_after(TIMEOUT):
        async with (
            AgentServer([planner], MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
            httpx.AsyncClient(base_url=url) as client,
        ):
            answer = await client.post(
                "/start", json={"sessionId": "think-1", "agentType": "planner", "message": "go"}
            )
            assert answer.status_code == 200, answer.text
            await held.wait()
            await page.goto(f"{url}/ui?session=think-1")
            box = page.locator('[data-agent-id="think-1"] > .agent-body')
            await expect(box.locator(".tool").first).to_be_visible(timeout=WAIT_MS)
            release.set()  # the thinking step arrives live
            await expect(page.locator("#root-status")).to_have_attribute(
                "data-status", "completed", timeout=WAIT_MS
            )
            await expect(page.locator("body")).to_have_attribute(
                "data-ended", "true", timeout=WAIT_MS
            )

            reasoning = box.locator(":scope > .reasoning")
            await expect(reasoning.locator(".thought")).to_have_text(THOUGHT)
            await expect(reasoning.locator(".thought-by")).to_have_text("reasoning")
            await expect(box.locator(":scope > .text")).to_have_text(ANSWER)  # the answer only
            output = box.locator(":scope > pre.output")
            await expect(output).to_have_count(1)  # the partial form was replaced in place
            await expect(output).not_to_have_class("output partial")
            assert '"Three days in Lyon, slowly"' in await output.inner_text()
            classes = await box.evaluate("(body) => [...body.children].map((c) => c.className)")
            assert classes.index("reasoning") < classes.index("text") < classes.index("output")

            # Its usage says how many of its output tokens were reasoning.
            thought = len(THOUGHT.split(" "))
            own = page.locator('[data-agent-id="think-1"] > .agent-head > .usage')
            await expect(own).to_contain_text(f" out ({thought} reasoning) tokens", timeout=WAIT_MS)

            live = await state(page)
            await page.reload()
            await expect(page.locator("body")).to_have_attribute(
                "data-ended", "true", timeout=WAIT_MS
            )
            assert await state(page) == live  # the page's fold and the server's agree
