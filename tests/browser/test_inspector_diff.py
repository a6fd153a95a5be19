"""The inspector's comparison page: two branches side by side from their common prefix."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from servers import serve

from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from tests.integration.test_ui_diff import branches, shop

pytestmark = pytest.mark.slow

TIMEOUT = 60
WAIT_MS = 30_000


async def test_the_page_shows_where_two_branches_part(page: Any) -> None:
    from playwright.async_api import expect

    store = MemoryEventStore()
    seq = await branches(store)
    with anyio.fail_after(TIMEOUT):
        async with serve(create_http_app(AgentServer([shop], store), auth=["sekrit"])) as url:
            await page.goto(f"{url}/ui/diff?a=s-1&b=s-1-edited#token=sekrit")
            summary = page.locator("#diff-summary")
            await expect(summary).to_have_text(
                f"common prefix: {seq - 1} events (A to seq {seq - 1}, B to seq {seq - 1})",
                timeout=WAIT_MS,
            )
            a, b = page.locator("[data-side=A]"), page.locator("[data-side=B]")
            for side in (a, b):
                await expect(side.locator(".diff-parted")).to_have_text(
                    f"parts at seq {seq} (message_appended)"
                )
            await expect(b.locator(".diff-excerpt")).to_contain_text("closed")
            await expect(a.locator(".diff-table")).to_contain_text("we are open on mondays")
            await expect(b.locator(".diff-table")).to_contain_text("we are closed")
            await expect(b.locator("h2 a")).to_have_attribute("href", "../ui?session=s-1-edited")
            # another pair, typed in the form: the same session twice
            await page.fill("#diff-b", "s-1")
            await page.click("#diff-form button")
            await expect(summary).to_contain_text("the same:", timeout=WAIT_MS)
            await page.fill("#diff-b", "nope")
            await page.click("#diff-form button")
            await expect(page.locator("#problem")).to_have_text(
                "session 'nope' not found", timeout=WAIT_MS
            )
