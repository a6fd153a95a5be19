"""The inspector shows what the user sent, turn by turn, and lists sub-agents' sessions on ask.

As ``test_inspector.py``: a real ``create_http_app`` on uvicorn (loopback),
headless chromium, the ``tree_agents`` tree (lead -> planner -> writer) held
mid-run until the test releases it.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from browser.test_inspector import TIMEOUT, WAIT_MS, ids, start, state, tree_server, wait_ended
from browser.tree_agents import FIRST_LINE, build_tree

pytestmark = pytest.mark.slow

SAID = ".user-message"


async def said_on(page: Any, agent_id: str) -> list[str]:
    """The user's messages shown in ``agent_id``'s box (not its children's), in order."""
    box = page.locator(f'[data-agent-id="{agent_id}"] > .agent-body > {SAID} .said')
    return list(await box.all_inner_texts())


async def ended(url: str, session_id: str) -> None:
    """Read the session's stream until its run ends, completed or failed."""
    async with (
        httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client,
        client.stream("GET", "/sse", params={"sessionId": session_id}) as stream,
    ):
        async for text in stream.aiter_lines():
            if text in ("event: end", "event: error"):
                return
    raise AssertionError(f"{session_id}'s stream closed without an end")


async def test_the_session_page_shows_each_message_the_user_sent(page: Any) -> None:
    """The first input on top; a follow-up sent while the run goes on, where it arrived."""
    from playwright.async_api import expect

    tree = build_tree()
    root, _, writer = ids("said-1")
    with anyio.fail_after(TIMEOUT):
        async with tree_server(tree) as url:
            await start(url, root)
            await tree.held.wait()
            await page.goto(f"{url}/ui?session={root}")
            first = page.locator(f'[data-agent-id="{root}"] > .agent-body > *').first
            await expect(first).to_have_class("user-message", timeout=WAIT_MS)
            await expect(first.locator(".said-by")).to_have_text("user")
            await expect(first.locator(".said")).to_have_text("go")
            writer_box = page.locator(f'[data-agent-id="{writer}"]')
            await expect(writer_box.locator(".text").first).to_have_text(FIRST_LINE)

            # Sent while the tree works: it is not on the stream; the page still shows it.
            async with httpx.AsyncClient(base_url=url) as client:
                sent = await client.post("/message", json={"sessionId": root, "message": "hurry"})
                assert sent.json()["queued"] is True, sent.text
            tree.release.set()
            await expect(page.locator("#root-status")).to_have_attribute(
                "data-status", "completed", timeout=WAIT_MS
            )
            messages = page.locator(f'[data-agent-id="{root}"] > .agent-body > {SAID} .said')
            await expect(messages).to_have_text(["go", "hurry"], timeout=WAIT_MS)
            # Each once, and the page's own fold agrees with the server's after a reload.
            await expect(page.locator("body")).to_have_attribute(
                "data-ended", "true", timeout=WAIT_MS
            )
            live = await state(page)
            await page.reload()
            await expect(messages).to_have_text(["go", "hurry"], timeout=WAIT_MS)
            assert await state(page) == live
            assert await said_on(page, writer) == []  # a child's task is its parent's call

            # A follow-up to the finished session: a new turn, its message after the output
            # of the one before (the scripted lead has nothing more to say: it fails).
            async with httpx.AsyncClient(base_url=url) as client:
                again = await client.post("/message", json={"sessionId": root, "message": "more"})
                assert again.status_code == 200, again.text
            await ended(url, root)
            await page.reload()
            await expect(messages).to_have_text(["go", "hurry", "more"], timeout=WAIT_MS)
            body = page.locator(f'[data-agent-id="{root}"] > .agent-body > *')
            classes = [await part.get_attribute("class") for part in await body.all()]
            last = len(classes) - 1 - classes[::-1].index("user-message")
            assert "output" in classes[:last], classes


async def test_the_list_shows_sub_agents_sessions_when_asked(page: Any) -> None:
    from playwright.async_api import expect

    tree = build_tree()
    tree.release.set()
    root, planner, writer = ids("kids-1")
    rows = page.locator("#sessions tbody tr")
    with anyio.fail_after(TIMEOUT):
        async with tree_server(tree) as url:
            await start(url, root)
            await wait_ended(url, root)
            await page.goto(f"{url}/ui")
            await expect(rows).to_have_count(1, timeout=WAIT_MS)  # roots only, by default
            await expect(page.locator("#children-filter")).not_to_be_checked()

            await page.locator("#children-filter").check()
            await expect(rows).to_have_count(3, timeout=WAIT_MS)
            parent_of = {}
            for row in await rows.all():
                session_id = await row.get_attribute("data-session-id")
                parent = row.locator(".parent")
                parent_of[session_id] = (
                    await parent.get_attribute("data-parent-id") if await parent.count() else None
                )
            assert parent_of == {root: None, planner: root, writer: planner}
            writer_row = page.locator(f'#sessions tr[data-session-id="{writer}"]')
            await expect(writer_row.locator(".parent")).to_have_text(f"sub-agent of {planner}")

            # A sub-agent's session opens as a tree of its own, with the task it was given.
            await writer_row.locator("td a").first.click()
            await expect(page.locator("#session-title")).to_have_text(writer, timeout=WAIT_MS)
            await expect(page.locator("#root-status")).to_have_attribute(
                "data-status", "completed", timeout=WAIT_MS
            )
            assert await said_on(page, writer) == ["draft"]

            # The toggle is in the address: /ui?children=true opens the list with it on.
            await page.goto(f"{url}/ui?children=true")
            await expect(page.locator("#children-filter")).to_be_checked()
            await expect(rows).to_have_count(3, timeout=WAIT_MS)
