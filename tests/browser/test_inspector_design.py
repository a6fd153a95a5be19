"""The inspector as a product: header, way back, loading state, readable tools, decisions,
cost per node, widths.

Chromium (headless, Debian's) against a real server on loopback, as in
``test_inspector.py``. Two widths (a laptop and a phone) are checked for
layout regressions: nothing wider than the window, nothing cut off at its
right edge, no items of a row (the header, a decision, a node's head, the
tree's total, an approval form) on top of each other; and each page's
screenshot is compared with its baseline in ``baselines/`` (``screenshots.py``),
on deterministic data: fixed ids, the log's times frozen, a fixed time zone
and locale, the server's address masked.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest
from servers import serve
from starlette.types import ASGIApp, Receive, Scope, Send

from browser.screenshots import check_screenshot, fonts_mismatch
from browser.tree_agents import Tree, build_tree
from helix_agents.events import Event
from helix_agents.log import ModelPrice, Prices
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore

pytestmark = pytest.mark.slow

TIMEOUT = 60
WAIT_MS = 30_000
ARTIFACTS = Path(__file__).parents[2] / "build" / "test-artifacts" / "browser"
WIDTHS = {"laptop": (1280, 800), "phone": (390, 844)}

ROWS = "header, .decision, .agent-head, .tree-total, .entry-form, .toolbar"
"""Rows whose items must never sit on top of each other."""
SHOWN = (
    ".tool, .decision, .decision > *, .agent-head, .agent-head > *, .tree-total, "
    ".tree-total > *, .entry-form, .entry-form > *, h1, td"
)
"""What must not be cut off at the window's right edge (nor below a 1px slack)."""

LAYOUT = f"""() => {{
  const visible = (el) => !el.hidden && el.offsetParent !== null;
  const overflow = document.documentElement.scrollWidth - window.innerWidth;
  const overlaps = [];
  for (const row of document.querySelectorAll({ROWS!r})) {{
    if (!visible(row)) continue;
    const boxes = [...row.children].filter(visible)
      .map((el) => [el.getAttribute('name') || el.id || el.className || el.tagName,
                    el.getBoundingClientRect()]);
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {{
      const [a, r] = boxes[i], [b, s] = boxes[j];
      const apart = r.right - 1 <= s.left || s.right - 1 <= r.left
        || r.bottom - 1 <= s.top || s.bottom - 1 <= r.top;
      if (!apart) overlaps.push([row.className || row.tagName, a, b]);
    }}
  }}
  const cut = [...document.querySelectorAll({SHOWN!r})].filter(visible)
    .filter((el) => el.getBoundingClientRect().right > window.innerWidth + 1
      || el.getBoundingClientRect().left < -1)
    .map((el) => el.className || el.tagName);
  const counted = document.querySelectorAll({SHOWN!r}).length;
  return {{ overflow, overlaps, cut, counted }};
}}"""

SCRIPTED = ModelPrice(input_per_million=2.0, output_per_million=8.0)
"""The test's price for the scripted model's tokens."""

FROZEN = 1_767_225_600.0
"""2026-01-01T00:00:00Z: every logged time in the screenshots is this plus the event's seq."""


class FrozenClockStore(MemoryEventStore):
    """A memory store that stamps each event at ``FROZEN + seq`` s: the same page every run."""

    async def append(self, session_id: str, events: Sequence[Event], expected_seq: int) -> int:
        """Store ``events`` with their times frozen."""
        frozen = [msgspec.structs.replace(event, ts=FROZEN + event.seq) for event in events]
        return await super().append(session_id, frozen, expected_seq)


@asynccontextmanager
async def tree_server(
    tree: Tree,
    app_wrapper: Any = None,
    *,
    prices: Prices | None = None,
    store: MemoryEventStore | None = None,
) -> AsyncIterator[str]:
    server = AgentServer([tree.lead], MemoryEventStore() if store is None else store)
    app: ASGIApp = create_http_app(server, prices=prices)
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


async def _snapshot(url: str, session_id: str) -> Any:
    async with httpx.AsyncClient(base_url=url) as client:
        answer = await client.get("/snapshot", params={"sessionId": session_id})
        assert answer.status_code == 200, answer.text
        return answer.json()


async def test_a_decided_approval_shows_who_what_when_and_why(page: Any) -> None:
    from playwright.async_api import expect

    tree = build_tree(approval=True)
    tree.release.set()
    with anyio.fail_after(TIMEOUT):
        async with tree_server(tree) as url:
            await start(url, "decide-1")
            await page.goto(f"{url}/ui?session=decide-1")
            form = page.locator('#pending-list form[data-kind="approval"]')
            await expect(form).to_contain_text("hold", timeout=WAIT_MS)
            await expect(form.locator('input[name="decided-by"]')).to_have_value("")
            await form.locator('input[name="decided-by"]').fill("Ada Lovelace")
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
            await expect(decision.locator(".decision-who")).to_have_text("by Ada Lovelace")
            await expect(decision.locator(".decision-why")).to_have_text("“reviewed the paragraph”")
            await expect(decision.locator(".decision-when")).to_contain_text("at ")
            # The server recorded who: the page sent it as decidedBy.
            (recorded,) = (await _snapshot(url, "decide-1"))["view"]["decisions"]
            assert (recorded["decidedBy"], recorded["approved"]) == ("Ada Lovelace", True)
            # The approved call itself reads without a click: arguments and result.
            tool = page.locator('.tool[data-tool-call-id^="call_hold"]')
            await expect(tool.locator(".tool-args")).to_contain_text('"why":"review"')
            await expect(tool.locator(".result")).to_be_visible()

            # The name is remembered in this browser: the next approval has it filled in.
            # Cleared, the decision is sent without one and says so.
            await start(url, "decide-2")
            await page.goto(f"{url}/ui?session=decide-2")
            form = page.locator('#pending-list form[data-kind="approval"]')
            name = form.locator('input[name="decided-by"]')
            await expect(name).to_have_value("Ada Lovelace", timeout=WAIT_MS)
            await name.fill("")
            await form.locator('button[name="deny"]').click()
            decision = page.locator("#decided-list .decision").first
            await expect(decision).to_have_attribute("data-verdict", "denied", timeout=WAIT_MS)
            await expect(decision.locator(".decision-who")).to_have_text("by (not recorded)")
            (recorded,) = (await _snapshot(url, "decide-2"))["view"]["decisions"]
            assert recorded["decidedBy"] is None
            assert await page.evaluate("localStorage.getItem('helix-decider')") is None


async def test_each_node_shows_its_tokens_and_cost_and_the_tree_its_total(page: Any) -> None:
    from playwright.async_api import expect

    with anyio.fail_after(TIMEOUT):
        tree = build_tree()
        tree.release.set()
        async with tree_server(tree, prices=Prices({"scripted": SCRIPTED})) as url:
            await start(url, "cost-1")
            await page.goto(f"{url}/ui?session=cost-1")
            total = page.locator("#tree-total .total-cost")
            await expect(page.locator("#root-status")).to_have_attribute(
                "data-status", "completed", timeout=WAIT_MS
            )
            await expect(page.locator("#tree-total")).to_contain_text(
                "6 LLM calls", timeout=WAIT_MS
            )
            snap = await _snapshot(url, "cost-1")
            expected_total = 0.0
            for agent_id, node in snap["view"]["agents"].items():
                usage = node["usage"]
                usd = SCRIPTED.cost(usage["inputTokens"], usage["outputTokens"])
                assert usage["inputTokens"] > 0, node
                assert usd > 0, node
                assert node["cost"]["usd"] == pytest.approx(usd)
                expected_total += usd
                cost = page.locator(f'[data-agent-id="{agent_id}"] > .agent-head > .cost')
                await expect(cost).to_have_text(re.compile(r"^cost: \$0\.0\d+$"), timeout=WAIT_MS)
                assert float(await cost.get_attribute("data-usd")) == pytest.approx(usd)
                tokens = page.locator(f'[data-agent-id="{agent_id}"] > .agent-head > .usage')
                await expect(tokens).to_contain_text(
                    f"own: {usage['inputTokens']} in / {usage['outputTokens']} out tokens"
                )
            assert float(await total.get_attribute("data-usd")) == pytest.approx(expected_total)
            await expect(total).to_have_text(re.compile(r"^cost: \$0\.0\d+$"))
            root_with_children = page.locator(
                '[data-agent-id="cost-1"] > .agent-head > .cost-with-children'
            )
            assert float(await root_with_children.get_attribute("data-usd")) == pytest.approx(
                expected_total
            )

        # No price for the scripted model: "—", never a made-up number.
        tree = build_tree()
        tree.release.set()
        async with tree_server(tree) as url:
            await start(url, "cost-2")
            await page.goto(f"{url}/ui?session=cost-2")
            await expect(page.locator("#tree-total")).to_contain_text(
                "6 LLM calls", timeout=WAIT_MS
            )
            cost = page.locator('[data-agent-id="cost-2"] > .agent-head > .cost')
            await expect(cost).to_have_text("cost: —", timeout=WAIT_MS)
            assert "scripted" in (await cost.get_attribute("title") or "")
            await expect(page.locator("#tree-total .total-cost")).to_have_text("cost: —")
            snap = await _snapshot(url, "cost-2")
            assert snap["view"]["agents"]["cost-2"]["cost"] == {
                "usd": None,
                "unpriced": ["scripted"],
            }


async def _settled(page: Any) -> None:
    """Wait until nothing more will change on the page: no request out, no frame pending."""
    await page.wait_for_load_state("networkidle")
    await page.evaluate("() => new Promise((done) => requestAnimationFrame(() => done()))")


@pytest.mark.parametrize("width", sorted(WIDTHS))
async def test_the_pages_fit_and_match_their_baselines_at_two_widths(
    browser: Any, width: str
) -> None:
    from playwright.async_api import expect

    tree = build_tree(approval=True)
    tree.release.set()
    viewport = dict(zip(("width", "height"), WIDTHS[width], strict=True))
    context = await browser.new_context(
        viewport=viewport, locale="en-US", timezone_id="UTC", reduced_motion="reduce"
    )
    # The page's clock too: a paused session's duration counts up to "now".
    await context.clock.set_fixed_time(FROZEN + 600)
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    prices = Prices({"scripted": SCRIPTED})
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        with anyio.fail_after(TIMEOUT):
            async with tree_server(tree, prices=prices, store=FrozenClockStore()) as url:
                await start(url, "fit-1")
                await page.goto(f"{url}/ui")
                await expect(page.locator("#sessions tr[data-session-id='fit-1']")).to_be_visible(
                    timeout=WAIT_MS
                )
                await _settled(page)
                mismatch = await fonts_mismatch(page)
                listed = await page.evaluate(LAYOUT)
                masks = [page.locator("#server")]
                shot = await page.screenshot(full_page=True, animations="disabled", mask=masks)
                (ARTIFACTS / f"list-{width}.png").write_bytes(shot)
                if mismatch is None:
                    check_screenshot(shot, f"list-{width}", ARTIFACTS)

                await page.goto(f"{url}/ui?session=fit-1")
                form = page.locator('#pending-list form[data-kind="approval"]')
                await expect(form).to_be_visible(timeout=WAIT_MS)
                pending = await page.evaluate(LAYOUT)  # the approval form, at this width
                await form.locator('input[name="decided-by"]').fill("Ada Lovelace")
                await form.locator('input[name="reason"]').fill("needs a second look")
                await form.locator('button[name="deny"]').click()
                await expect(page.locator("#decided-list .decision-who")).to_have_text(
                    "by Ada Lovelace", timeout=WAIT_MS
                )
                await expect(page.locator("#connection")).to_have_text("ended", timeout=WAIT_MS)
                await expect(page.locator("#tree-total")).to_contain_text(
                    "6 LLM calls", timeout=WAIT_MS
                )
                await expect(page.locator("#tree-total .total-cost")).to_have_text(
                    re.compile(r"^cost: \$"), timeout=WAIT_MS
                )
                await _settled(page)
                tree_page = await page.evaluate(LAYOUT)
                shot = await page.screenshot(full_page=True, animations="disabled", mask=masks)
                (ARTIFACTS / f"session-{width}.png").write_bytes(shot)
                for selector in (".decision-who", ".cost", ".cost-with-children", ".tree-total"):
                    assert await page.locator(selector).count() > 0, selector  # checked above
                if mismatch is None:
                    check_screenshot(shot, f"session-{width}", ARTIFACTS)
    finally:
        await context.close()
    assert not errors, f"the page threw: {errors}"
    for name, layout in (("list", listed), ("approval", pending), ("session", tree_page)):
        assert layout["overflow"] <= 0, (name, layout)
        assert layout["overlaps"] == [], (name, layout)
        assert layout["cut"] == [], (name, layout)
    if mismatch is not None:
        pytest.skip(f"the layout fits; {mismatch}")
