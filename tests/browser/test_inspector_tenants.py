"""The inspector behind identities (specs/auth.md): a reader sees without answering; who did what.

Headless chromium against a real server on loopback, with static tokens
mapped to identities: alice (a member of ``acme``) starts a tree that waits
for an approval; rita (a reader of ``acme``) opens it, sees it, and her
approval is refused; bob (``globex``) lists nothing; alice approves, and the
page shows who owns the tree and who changed it.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from servers import serve

from browser.tree_agents import build_tree
from helix_agents.auth import Identity
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore

pytestmark = pytest.mark.slow

TIMEOUT = 60
WAIT_MS = 30_000
TOKENS = {
    "tok-alice": Identity(user="alice", tenant="acme"),
    "tok-rita": Identity(user="rita", tenant="acme", roles=frozenset({"reader"})),
    "tok-bob": Identity(user="bob", tenant="globex"),
}


async def test_a_reader_sees_without_answering_and_the_page_shows_who_did_what(
    page: Any,
) -> None:
    from playwright.async_api import expect

    tree = build_tree(approval=True)
    tree.release.set()
    store = MemoryEventStore()
    app = create_http_app(AgentServer([tree.lead], store), auth=TOKENS)
    with anyio.fail_after(TIMEOUT):
        async with (
            serve(app) as url,
            httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer tok-alice"}) as alice,
        ):
            started = await alice.post(
                "/start", json={"sessionId": "t-1", "agentType": "lead", "message": "go"}
            )
            assert started.status_code == 200, started.text
            # bob's list is empty: the page says so.
            await page.goto(f"{url}/ui#token=tok-bob")
            await expect(page.locator("#sessions-empty")).to_be_visible(timeout=WAIT_MS)
            # rita sees the tree and its question; her approval is refused.
            await page.evaluate("sessionStorage.clear()")
            await page.goto(f"{url}/ui?session=t-1#token=tok-rita")
            form = page.locator('#pending-list form[data-kind="approval"]')
            await expect(form).to_contain_text("hold", timeout=WAIT_MS)
            await expect(page.locator("#requests-list")).to_contain_text("owned by alice@acme")
            await form.locator('button[name="approve"]').click()
            await expect(form.locator(".form-problem")).to_contain_text(
                "FORBIDDEN: this identity may not write sessions", timeout=WAIT_MS
            )
            status = (await alice.get("/status", params={"sessionId": "t-1"})).json()
            assert status["status"] == "paused"
            # alice approves: the decider and the request are hers, whatever the form said.
            await page.evaluate("sessionStorage.clear()")
            await page.goto(f"{url}/ui?session=t-1#token=tok-alice")
            form = page.locator('#pending-list form[data-kind="approval"]')
            await expect(form).to_contain_text("hold", timeout=WAIT_MS)
            await form.locator('input[name="decided-by"]').fill("Mallory")
            await form.locator('button[name="approve"]').click()
            await expect(page.locator("#root-status")).to_have_attribute(
                "data-status", "completed", timeout=WAIT_MS
            )
            decision = page.locator("#decided-list .decision").first
            await expect(decision.locator(".decision-who")).to_have_text(
                "by alice", timeout=WAIT_MS
            )
            request = page.locator('#requests-list .request[data-action="approval"]')
            await expect(request).to_contain_text("by alice@acme", timeout=WAIT_MS)
