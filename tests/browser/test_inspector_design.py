"""The inspector as a product: header, way back, loading state, readable tools, decisions, widths.

Chromium (headless, Debian's) against a real server on loopback, as in
``test_inspector.py``. Two widths (a laptop and a phone) are checked for
layout regressions: nothing wider than the window, no header items on top
of each other; a screenshot of each is kept under ``build/test-artifacts``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from servers import serve
from starlette.types import ASGIApp, Receive, Scope, Send

from browser.tree_agents import Tree, build_tree
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore

pytestmark = pytest.mark.slow

TIMEOUT = 60
WAIT_MS = 30_000
ARTIFACTS = Path(__file__).parents[2] / "build" / "test-artifacts" / "browser"
WIDTHS = {"laptop": (1280, 800), "phone": (390, 844)}

LAYOUT = """() => {
  const overflow = document.documentElement.scrollWidth - window.innerWidth;
  const boxes = [...document.querySelectorAll('header > *')]
    .filter((el) => !el.hidden && el.offsetParent !== null)
    .map((el) => [el.id || el.className, el.getBoundingClientRect()]);
  const overlaps = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const [a, r] = boxes[i], [b, s] = boxes[j];
    const apart = r.right - 1 <= s.left || s.right - 1 <= r.left
      || r.bottom - 1 <= s.top || s.bottom - 1 <= r.top;
    if (!apart) overlaps.push([a, b]);
  }
  const cut = [...document.querySelectorAll('.tool, .decision, .agent-head, h1, td')]
    .filter((el) => el.getBoundingClientRect().right > window.innerWidth + 1)
    .map((el) => el.className || el.tagName);
  return { overflow, overlaps, cut };
}"""


@asynccontextmanager
async def tree_server(tree: Tree, app_wrapper: Any = None) -> AsyncIterator[str]:
    app: ASGIApp = create_http_app(AgentServer([tree.lead], MemoryEventStore()))
    async with serve(app if app_wrapper is None else app_wrapper(app)) as url:
        yield url


async def start(url: str, session_id: str) -> None:
    async with httpx.AsyncClient(base_url=url) as client:
        answer = await client.post(
            "/start", json={"sessionId": session_id, "agentType": "lead", "message": "go"}
        )
        assert answer.status_code == 200, answer.text


def slow_snapshots(gate: anyio.Event) -> Any:
    """Hold every ``GET /snapshot`` until ``gate`` is set (the page's loading state shows)."""

    def wrap(app: ASGIApp) -> ASGIApp:
        async def held(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http" and scope["path"].endswith("/snapshot"):
                await gate.wait()
            await app(scope, receive, send)

        return held

    return wrap


async def test_header_way_back_and_a_loading_state(page: Any) -> None:
    from playwright.async_api import expect

    tree = build_tree()
    tree.release.set()
    gate = anyio.Event()
    with anyio.fail_after(TIMEOUT):
        async with tree_server(tree, slow_snapshots(gate)) as url:
            await start(url, "look-1")
            await page.goto(f"{url}/ui?session=look-1")
            # Loading: a visible state, not a blank page, until the snapshot comes.
            await expect(page.locator("#loading")).to_be_visible(timeout=WAIT_MS)
            await expect(page.locator("body")).to_have_attribute("data-loading", "true")
            await expect(page.locator("#session-page")).to_be_hidden()
            gate.set()
            await expect(page.locator("#loading")).to_be_hidden(timeout=WAIT_MS)
            await expect(page.locator("#root-status")).to_have_attribute(
                "data-status", "completed", timeout=WAIT_MS
            )
            host = url.removeprefix("http://")
            await expect(page.locator("#server")).to_have_text(host)
            # The way back to the list.
            await page.locator("#back").click()
            await expect(page.locator("#sessions tr[data-session-id='look-1']")).to_be_visible(
                timeout=WAIT_MS
            )
            await expect(page.locator("#back")).to_be_hidden()


async def test_a_decided_approval_shows_what_when_and_why(page: Any) -> None:
    from playwright.async_api import expect

    tree = build_tree(approval=True)
    tree.release.set()
    with anyio.fail_after(TIMEOUT):
        async with tree_server(tree) as url:
            await start(url, "decide-1")
            await page.goto(f"{url}/ui?session=decide-1")
            form = page.locator('#pending-list form[data-kind="approval"]')
            await expect(form).to_contain_text("hold", timeout=WAIT_MS)
            await form.locator('input[name="reason"]').fill("reviewed the paragraph")
            await form.locator('button[name="approve"]').click()
            await expect(page.locator("#root-status")).to_have_attribute(
                "data-status", "completed", timeout=WAIT_MS
            )
            decision = page.locator("#decided-list .decision").first
            await expect(decision).to_have_attribute("data-verdict", "approved", timeout=WAIT_MS)
            await expect(decision.locator(".decision-call")).to_contain_text(
                'hold({"why":"review"})'
            )
            await expect(decision.locator(".decision-why")).to_have_text("“reviewed the paragraph”")
            await expect(decision.locator(".decision-when")).to_contain_text("at ")
            # The approved call itself reads without a click: arguments and result.
            tool = page.locator('.tool[data-tool-call-id^="call_hold"]')
            await expect(tool.locator(".tool-args")).to_contain_text('"why":"review"')
            await expect(tool.locator(".result")).to_be_visible()


@pytest.mark.parametrize("width", sorted(WIDTHS))
async def test_the_pages_fit_at_two_widths(page: Any, width: str) -> None:
    from playwright.async_api import expect

    tree = build_tree(approval=True)
    tree.release.set()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await page.set_viewport_size(dict(zip(("width", "height"), WIDTHS[width], strict=True)))
    with anyio.fail_after(TIMEOUT):
        async with tree_server(tree) as url:
            await start(url, "fit-1")
            await page.goto(f"{url}/ui")
            await expect(page.locator("#sessions tr[data-session-id='fit-1']")).to_be_visible(
                timeout=WAIT_MS
            )
            listed = await page.evaluate(LAYOUT)
            await page.screenshot(path=str(ARTIFACTS / f"list-{width}.png"), full_page=True)
            await page.goto(f"{url}/ui?session=fit-1")
            form = page.locator('#pending-list form[data-kind="approval"]')
            await expect(form).to_be_visible(timeout=WAIT_MS)
            await form.locator('button[name="deny"]').click()
            await expect(page.locator("#decided-list .decision")).to_be_visible(timeout=WAIT_MS)
            tree_page = await page.evaluate(LAYOUT)
            await page.screenshot(path=str(ARTIFACTS / f"session-{width}.png"), full_page=True)
    for name, layout in (("list", listed), ("session", tree_page)):
        assert layout["overflow"] <= 0, (name, layout)
        assert layout["overlaps"] == [], (name, layout)
        assert layout["cut"] == [], (name, layout)
