"""The inspector page in a real browser: the list, a live tree, the time slider, a cut stream.

Each test serves a real ``create_http_app`` on uvicorn (loopback) and drives
headless chromium at it; the tree is ``tree_agents``' lead -> planner ->
writer, held mid-run until the test releases it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import msgspec
import pytest
from servers import serve
from starlette.types import ASGIApp, Receive, Scope, Send
from tcp_proxy import tcp_proxy

from browser.tree_agents import FIRST_LINE, LINES, Tree, build_tree, line
from helix_agents.events import (
    Completed,
    RunStarted,
    SessionCreated,
    StepRestarted,
    StepStarted,
    TextDelta,
)
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore

pytestmark = pytest.mark.slow

TIMEOUT = 60  # generous: a loaded 2-core machine, a browser and a server
WAIT_MS = 30_000  # playwright's own waits, in milliseconds

# What the page shows, without usage (usage comes from the store, not the stream).
TREE_STATE = """() => [...document.querySelectorAll('#tree .agent')].map((box) => ({
  id: box.dataset.agentId,
  status: box.dataset.status,
  parent: box.parentElement.closest('.agent')?.dataset.agentId ?? null,
  entries: [...box.querySelector(':scope > .agent-body').children]
    .filter((part) => !part.classList.contains('agent'))
    .map((part) => part.matches('details') ? part.querySelector('summary').textContent
                                            : part.textContent),
}))"""


def ids(root: str) -> tuple[str, str, str]:
    """The session ids of the tree's three agents."""
    planner = f"{root}-sub-call_planner"
    return root, planner, f"{planner}-sub-call_writer"


@asynccontextmanager
async def tree_server(tree: Tree, app_wrapper: Any = None) -> AsyncIterator[str]:
    server = AgentServer([tree.lead], MemoryEventStore())
    app: ASGIApp = create_http_app(server)
    async with serve(app if app_wrapper is None else app_wrapper(app)) as url:
        yield url


async def start(url: str, session_id: str) -> None:
    async with httpx.AsyncClient(base_url=url) as client:
        answer = await client.post(
            "/start", json={"sessionId": session_id, "agentType": "lead", "message": "go"}
        )
        assert answer.status_code == 200, answer.text


async def wait_ended(url: str, session_id: str) -> None:
    """Read the session's stream until it ends (the run is over)."""
    async with (
        httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client,
        client.stream("GET", "/sse", params={"sessionId": session_id}) as stream,
    ):
        async for text in stream.aiter_lines():
            if text == "event: end":
                return
    raise AssertionError(f"{session_id}'s stream closed without an end")


async def state(page: Any) -> Any:
    return await page.evaluate(TREE_STATE)


async def test_the_list_shows_a_finished_session(page: Any) -> None:
    from playwright.async_api import expect

    tree = build_tree()
    tree.release.set()
    with anyio.fail_after(TIMEOUT):
        async with tree_server(tree) as url:
            await start(url, "done-1")
            await wait_ended(url, "done-1")
            await page.goto(f"{url}/ui")
            row = page.locator('#sessions tr[data-session-id="done-1"]')
            await expect(row).to_contain_text("lead", timeout=WAIT_MS)
            await expect(row.locator(".badge")).to_have_attribute("data-status", "completed")
            cells = await row.locator("td").all_inner_texts()
            assert cells[0] == "done-1"
            assert cells[3], cells  # started
            assert cells[4].endswith("s"), cells  # duration
            # Children are inside the tree, not rows of their own.
            assert await page.locator("#sessions tbody tr").count() == 1

            await page.select_option("#status-filter", "failed")
            await expect(page.locator("#sessions-empty")).to_be_visible(timeout=WAIT_MS)
            await page.select_option("#status-filter", "completed")
            await expect(row).to_be_visible(timeout=WAIT_MS)

            await row.locator("a").click()
            await expect(page.locator("#root-status")).to_have_attribute(
                "data-status", "completed", timeout=WAIT_MS
            )


async def test_a_running_three_deep_tree_renders_live(page: Any) -> None:
    from playwright.async_api import expect

    tree = build_tree()
    root, planner, writer = ids("live-1")
    with anyio.fail_after(TIMEOUT):
        async with tree_server(tree) as url:
            await start(url, root)
            await tree.held.wait()
            await page.goto(f"{url}/ui?session={root}")
            nested = page.locator(
                f'[data-agent-id="{root}"] [data-agent-id="{planner}"] [data-agent-id="{writer}"]'
            )
            await expect(nested.locator(".text").first).to_have_text(FIRST_LINE, timeout=WAIT_MS)
            await expect(nested).to_have_attribute("data-status", "running")
            await expect(page.locator("#root-status")).to_have_attribute("data-status", "running")
            assert await nested.locator(".text").count() == 1  # nothing after the hold yet

            tree.release.set()  # the rest arrives on the live stream only
            await expect(page.locator("body")).to_have_attribute(
                "data-ended", "true", timeout=WAIT_MS
            )
            await expect(page.locator("#root-status")).to_have_attribute(
                "data-status", "completed", timeout=WAIT_MS
            )
            numbered = " ".join(line(k) for k in range(1, LINES + 1))
            await expect(nested.locator(".text").nth(1)).to_have_text(numbered)
            for agent in (planner, writer):
                box = page.locator(f'[data-agent-id="{agent}"]')
                await expect(box).to_have_attribute("data-status", "completed")
            # Usage per node, and rolled up at the root (filled from the store).
            root_usage = page.locator(f'[data-agent-id="{root}"] .usage').first
            await expect(root_usage).to_contain_text("own: ", timeout=WAIT_MS)
            await expect(root_usage).to_contain_text(" 2 LLM,", timeout=WAIT_MS)
            await expect(root_usage).to_contain_text("with sub-agents: ", timeout=WAIT_MS)
            await expect(root_usage).to_contain_text(" 6 LLM,", timeout=WAIT_MS)

            # The page's own fold of the stream and the server's snapshot agree.
            live = await state(page)
            await page.reload()
            await expect(page.locator("body")).to_have_attribute(
                "data-ended", "true", timeout=WAIT_MS
            )
            assert await state(page) == live
            assert [agent["id"] for agent in live] == [root, planner, writer]
            assert [agent["parent"] for agent in live] == [None, root, planner]
            # Each agent's __finish__ call stays in the log; the page shows its output.
            assert "__finish__" not in await page.locator("body").inner_text()
            await expect(page.locator(f'[data-agent-id="{writer}"]')).to_contain_text("written")


async def test_the_time_slider_shows_an_earlier_state(page: Any) -> None:
    from playwright.async_api import expect

    tree = build_tree()
    root, _, writer = ids("slide-1")
    with anyio.fail_after(TIMEOUT):
        async with tree_server(tree) as url:
            await start(url, root)
            await tree.held.wait()
            await page.goto(f"{url}/ui?session={root}")
            writer_box = page.locator(f'[data-agent-id="{writer}"]')
            await expect(writer_box.locator(".text").first).to_have_text(
                FIRST_LINE, timeout=WAIT_MS
            )
            held_at = int(await page.locator("#tree").get_attribute("data-at"))
            held = await state(page)
            assert int(await page.locator("#tree").get_attribute("data-at")) == held_at

            tree.release.set()
            await expect(page.locator("#root-status")).to_have_attribute(
                "data-status", "completed", timeout=WAIT_MS
            )
            final = await state(page)
            assert final != held

            await page.locator("#seq").fill(str(held_at))
            await page.locator("#seq").dispatch_event("change")
            await expect(page.locator("#mode")).to_have_text(
                f"showing the tree at sequence {held_at}", timeout=WAIT_MS
            )
            await expect(page.locator("#root-status")).to_have_attribute("data-status", "running")
            assert await state(page) == held

            await page.locator("#go-live").click()
            await expect(page.locator("#mode")).to_have_text("", timeout=WAIT_MS)
            assert await state(page) == final


def recording_sse_headers(seen: list[dict[str, str]]) -> Any:
    """Wrap an app to record the headers of every ``/sse`` request it gets."""

    def wrap(app: ASGIApp) -> ASGIApp:
        async def recorded(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http" and scope["path"] == "/sse":
                seen.append({k.decode().lower(): v.decode() for k, v in scope["headers"]})
            await app(scope, receive, send)

        return recorded

    return wrap


async def test_a_cut_stream_resumes_without_a_duplicate_line(page: Any) -> None:
    from playwright.async_api import expect

    tree = build_tree()
    root, _, writer = ids("cut-1")
    seen: list[dict[str, str]] = []
    with anyio.fail_after(TIMEOUT):
        async with (
            tree_server(tree, recording_sse_headers(seen)) as url,
            tcp_proxy(url) as proxy,
        ):
            await start(url, root)
            await tree.held.wait()
            # The page's first stream is cut mid-way through the writer's lines.
            armed = proxy.cut_after(3000, request_prefix=b"GET /sse")
            await page.goto(f"{proxy.url}/ui?session={root}")
            writer_box = page.locator(f'[data-agent-id="{writer}"]')
            await expect(writer_box.locator(".text").first).to_have_text(
                FIRST_LINE, timeout=WAIT_MS
            )
            tree.release.set()
            await expect(page.locator("#root-status")).to_have_attribute(
                "data-status", "completed", timeout=WAIT_MS
            )
            assert armed.fired
            assert int(await page.locator("body").get_attribute("data-reconnects")) >= 1
            words = (await writer_box.locator(".text").nth(1).inner_text()).split()
            assert words == [line(k) for k in range(1, LINES + 1)], await state(page)
            # The page resumed where it was: every request after the first sent the
            # last id it had, never an older one. (The same id twice is right when
            # the cut fell inside the first frame after it: that frame never arrived.)
            resumed_from = [int(headers["last-event-id"]) for headers in seen]
            assert len(resumed_from) >= 2, seen
            assert resumed_from == sorted(resumed_from), seen


async def test_a_pending_approval_is_answered_from_the_page(page: Any) -> None:
    from playwright.async_api import expect

    tree = build_tree(approval=True)
    tree.release.set()
    root, _, writer = ids("ask-1")
    with anyio.fail_after(TIMEOUT):
        async with tree_server(tree) as url:
            await start(url, root)
            await page.goto(f"{url}/ui?session={root}")
            form = page.locator('#pending-list form[data-kind="approval"]')
            await expect(form).to_contain_text("hold", timeout=WAIT_MS)
            await expect(form).to_contain_text(writer)
            await expect(page.locator("#root-status")).to_have_attribute(
                "data-status", "paused", timeout=WAIT_MS
            )
            await form.locator('button[name="approve"]').click()
            await expect(page.locator("#root-status")).to_have_attribute(
                "data-status", "completed", timeout=WAIT_MS
            )
            await expect(page.locator("#pending")).to_be_hidden()
            assert tree.held.is_set()  # hold ran once approved
            await expect(page.locator(f'[data-agent-id="{writer}"] .text').nth(1)).to_contain_text(
                line(LINES)
            )


async def test_a_restarted_step_drops_its_cut_text_on_the_page(page: Any) -> None:
    from playwright.async_api import expect

    # A log written by hand, appended to while the page watches: a step whose
    # text was cut ("Hello wor" ... "ld, cut 🙂") runs again from its start.
    store = MemoryEventStore()
    made = [
        SessionCreated(agent_type="lead", run_id="r1"),
        RunStarted(run_id="r1"),
        StepStarted(step=1),
        TextDelta(agent_id="redo-1", agent_type="lead", delta="Hello wor"),
    ]
    later = [
        TextDelta(agent_id="redo-1", agent_type="lead", delta="ld, cut 🙂"),
        StepRestarted(agent_id="redo-1", agent_type="lead", step=1, discard_chars=18),
        TextDelta(agent_id="redo-1", agent_type="lead", delta="Hello again 🙂"),
        Completed(output={"summary": "again"}),
    ]

    async def append(events: list[Any]) -> None:
        start = len(await store.read("redo-1"))
        stamped = [
            msgspec.structs.replace(event, session_id="redo-1", seq=start + n, ts=1.0)
            for n, event in enumerate(events, start=1)
        ]
        await store.append("redo-1", stamped, expected_seq=start)

    await append(made)
    server = AgentServer([build_tree().lead], store, recover=False)
    with anyio.fail_after(TIMEOUT):
        async with serve(create_http_app(server)) as url:
            await page.goto(f"{url}/ui?session=redo-1")
            text = page.locator('[data-agent-id="redo-1"] .text')
            await expect(text).to_have_text("Hello wor", timeout=WAIT_MS)
            await expect(page.locator("#connection")).to_have_text("live", timeout=WAIT_MS)
            await append(later)
            await expect(page.locator("#root-status")).to_have_attribute(
                "data-status", "completed", timeout=WAIT_MS
            )
            await expect(text).to_have_text("Hello again 🙂")
            live = await state(page)
            await page.reload()
            await expect(text).to_have_text("Hello again 🙂", timeout=WAIT_MS)
            assert await state(page) == live


async def test_a_client_tool_is_answered_from_the_page(page: Any) -> None:
    from playwright.async_api import expect

    tree = build_tree(client=True)
    root, _, writer = ids("client-1")
    with anyio.fail_after(TIMEOUT):
        async with tree_server(tree) as url:
            await start(url, root)
            await page.goto(f"{url}/ui?session={root}")
            form = page.locator('#pending-list form[data-kind="client_tool"]')
            await expect(form).to_contain_text("hold", timeout=WAIT_MS)
            await expect(form.locator(".arguments")).to_contain_text('"why": "review"')
            await form.locator("textarea").fill("{not json")
            await form.locator('button[name="send-result"]').click()
            await expect(form.locator(".form-problem")).to_contain_text("not JSON")
            await expect(page.locator("#root-status")).to_have_attribute("data-status", "paused")

            await form.locator("textarea").fill('{"held": "by the page"}')
            await form.locator('button[name="send-result"]').click()
            await expect(page.locator("#root-status")).to_have_attribute(
                "data-status", "completed", timeout=WAIT_MS
            )
            # The call and its result read without a click.
            hold = page.locator(f'[data-agent-id="{writer}"] .tool[data-tool-call-id]').first
            await expect(hold.locator(".result")).to_be_visible()
            await expect(hold.locator(".result")).to_contain_text('{"held":"by the page"}')
            assert not tree.held.is_set()  # the server never ran it
