"""The inspector's search box: typing words lists only the sessions whose text has them."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from servers import serve

from helix_agents import define_agent
from helix_agents.events import Completed, RunStarted, SessionCreated
from helix_agents.messages import UserMessage
from helix_agents.models import ScriptedLLM
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore

pytestmark = pytest.mark.slow

TIMEOUT = 60
WAIT_MS = 30_000


async def test_the_search_box_narrows_the_list(page: Any) -> None:
    from playwright.async_api import expect

    store = MemoryEventStore()
    for n, said in enumerate(["rotate the signing keys", "plan the offsite", "rotate logs"]):
        sid = f"s-{n}"
        ts = 1_700_000_000.0 + n
        await store.append(
            sid,
            [
                SessionCreated(
                    session_id=sid,
                    seq=1,
                    ts=ts,
                    agent_type="lead",
                    run_id="r1",
                    messages=[UserMessage(content=said)],
                ),
                RunStarted(session_id=sid, seq=2, ts=ts, run_id="r1"),
                Completed(session_id=sid, seq=3, ts=ts + 1, output="ok"),
            ],
            expected_seq=0,
        )
    lead = define_agent("lead", llm=ScriptedLLM(lambda request: ScriptedLLM.finish("ok")))
    rows = page.locator("#sessions tbody tr")
    with anyio.fail_after(TIMEOUT):
        async with serve(create_http_app(AgentServer([lead], store))) as url:
            await page.goto(f"{url}/ui")
            await expect(rows).to_have_count(3, timeout=WAIT_MS)
            await page.fill("#search-filter", "ROTATE")
            await page.press("#search-filter", "Enter")
            await expect(rows).to_have_count(2, timeout=WAIT_MS)
            ids = [await row.get_attribute("data-session-id") for row in await rows.all()]
            assert ids == ["s-2", "s-0"]
            await page.fill("#search-filter", "rot sign")
            await page.press("#search-filter", "Enter")
            await expect(rows).to_have_count(1, timeout=WAIT_MS)
            await page.fill("#search-filter", "zebra")
            await page.press("#search-filter", "Enter")
            await expect(page.locator("#sessions-empty")).to_be_visible(timeout=WAIT_MS)
            # Only punctuation is no search: the whole list again.
            await page.fill("#search-filter", "?!")
            await page.press("#search-filter", "Enter")
            await expect(rows).to_have_count(3, timeout=WAIT_MS)
            # Opened with ?q=, the box and the list start from it.
            await page.goto(f"{url}/ui?q=offsite")
            await expect(page.locator("#search-filter")).to_have_value("offsite")
            await expect(rows).to_have_count(1, timeout=WAIT_MS)
    await store.close()
