"""``/crons`` over a real server: make, list, show, pause, resume, delete; refusals store nothing.

And an interval schedule that fires: each tick starts exactly one session,
``cron.ID.TICK``, carrying ``cronId`` in its metadata; pausing stops it.
"""

from __future__ import annotations

import itertools
import json
import sys
from typing import Any

import anyio
import httpx
import pytest
from cron_app import agents
from servers import serve

from helix_agents.events import RunStarted, ScheduleCreated, ScheduleFired, SessionCreated
from helix_agents.ids import SCHEDULES_LOG
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore

pytestmark = pytest.mark.anyio

LIMIT = 30


async def _ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


async def test_crons_are_made_listed_paused_resumed_and_deleted_and_bad_ones_refused() -> None:
    store = MemoryEventStore()
    server = AgentServer(agents, store)
    with anyio.fail_after(LIMIT):
        async with serve(create_http_app(server)) as url, httpx.AsyncClient(base_url=url) as http:
            start = {"agentType": "echo", "message": "hello", "metadata": {"team": "a"}}
            refused = {
                "bad expression": {"cron": "61 * * * *", "start": start},
                "six fields": {"cron": "0 0 * * * *", "start": start},
                "unknown zone": {"cron": "0 9 * * *", "timezone": "Mars/Olympus", "start": start},
                "zero interval": {"intervalSeconds": 0, "start": start},
                "negative interval": {"intervalSeconds": -5, "start": start},
                "fractional interval": {"intervalSeconds": 1.5, "start": start},
                "both clocks": {"cron": "* * * * *", "intervalSeconds": 5, "start": start},
                "no clock": {"start": start},
                "unknown agent": {"intervalSeconds": 5, "start": {**start, "agentType": "nope"}},
                "a session id": {"intervalSeconds": 5, "start": {**start, "sessionId": "s1"}},
                "nothing to start": {"intervalSeconds": 5},
                "bad catchup": {"intervalSeconds": 5, "catchup": "twice", "start": start},
                "bad id": {"id": "no spaces", "intervalSeconds": 5, "start": start},
                "unknown session": {
                    "intervalSeconds": 5,
                    "turn": {"sessionId": "gone", "message": "x"},
                },
                "a webhook no one delivers": {
                    "intervalSeconds": 5,
                    "start": {**start, "webhook": {"url": "https://hooks.example.com/h"}},
                },
            }
            for why, body in refused.items():
                answer = await http.post("/crons", json=body)
                assert answer.status_code in (400, 404), (why, answer.text)
                error = answer.json()
                assert set(error) == {"error", "code"}, (why, error)
                assert error["code"] in ("INVALID_REQUEST", "NOT_FOUND"), (why, error)
            assert await store.read(SCHEDULES_LOG) == []  # nothing stored

            made = await _ok(
                await http.post(
                    "/crons",
                    json={
                        "id": "daily",
                        "cron": "0  9 * * 1-5",
                        "timezone": "Europe/Paris",
                        "start": start,
                    },
                )
            )
            assert made["id"] == "daily"
            assert made["cron"] == "0 9 * * 1-5"
            assert made["timezone"] == "Europe/Paris"
            assert made["catchup"] == "once"
            assert made["paused"] is False
            assert made["fired"] == 0
            assert made["nextTickAt"] > made["createdAt"]
            again = await _ok(
                await http.post(
                    "/crons",
                    json={
                        "id": "daily",
                        "cron": "0 9 * * 1-5",
                        "timezone": "Europe/Paris",
                        "start": start,
                    },
                )
            )
            assert again == made  # an identical repeat is the same schedule
            taken = await http.post(
                "/crons", json={"id": "daily", "intervalSeconds": 60, "start": start}
            )
            assert taken.status_code == 409, taken.text
            hourly = await _ok(
                await http.post(
                    "/crons", json={"intervalSeconds": 3600, "catchup": "skip", "start": start}
                )
            )
            listed = await _ok(await http.get("/crons"))
            assert sorted(c["id"] for c in listed["crons"]) == sorted(["daily", hourly["id"]])
            assert (await _ok(await http.get("/crons/daily"))) == made

            paused = await _ok(await http.post("/crons/daily/pause"))
            assert paused["paused"] is True
            assert paused["nextTickAt"] is None
            resumed = await _ok(await http.post("/crons/daily/resume"))
            assert resumed["paused"] is False
            assert resumed["nextTickAt"] is not None

            assert (await _ok(await http.delete("/crons/daily"))) == {"ok": True}
            assert (await http.get("/crons/daily")).status_code == 404
            assert (await http.delete("/crons/daily")).status_code == 404
            assert (await http.post("/crons/daily/pause")).status_code == 404
            listed = await _ok(await http.get("/crons"))
            assert [c["id"] for c in listed["crons"]] == [hourly["id"]]

            # The schedules' log is no session: not listed, not started over.
            sessions = await _ok(await http.get("/sessions"))
            assert sessions["sessions"] == []
            taken = await http.post(
                "/start", json={"sessionId": SCHEDULES_LOG, "agentType": "echo", "message": "x"}
            )
            assert taken.status_code == 404, taken.text
            status = await http.get("/status", params={"sessionId": SCHEDULES_LOG})
            assert status.status_code == 404, status.text
    kinds = [type(event) for event in await store.read(SCHEDULES_LOG)]
    assert kinds.count(ScheduleCreated) == 2


async def test_a_schedule_naming_a_forbidden_webhook_is_refused_at_creation() -> None:
    """Its start's webhook is checked against the allow-list as POST /start's is: a
    private or loopback address is refused, nothing stored; an allowed one is kept."""
    from helix_agents.server.webhooks import WebhookSettings

    store = MemoryEventStore()
    server = AgentServer(agents, store, webhooks=WebhookSettings(secret="s3cret"))
    start = {"agentType": "echo", "message": "hello"}
    with anyio.fail_after(LIMIT):
        async with serve(create_http_app(server)) as url, httpx.AsyncClient(base_url=url) as http:
            for where in ("http://10.0.0.1/h", "http://127.0.0.1:9/h", "http://169.254.169.254/"):
                body = {"intervalSeconds": 3600, "start": {**start, "webhook": {"url": where}}}
                answer = await http.post("/crons", json=body)
                assert answer.status_code == 400, (where, answer.text)
                assert answer.json()["code"] == "INVALID_REQUEST"
            assert await store.read(SCHEDULES_LOG) == []
            public = {"url": "https://93.184.215.14/h"}  # a global address: allowed
            body = {"intervalSeconds": 3600, "start": {**start, "webhook": public}}
            made = await _ok(await http.post("/crons", json=body))
            assert made["start"]["webhook"]["url"] == public["url"]


async def test_an_interval_schedule_starts_one_session_per_tick_until_paused() -> None:
    store = MemoryEventStore()
    server = AgentServer(agents, store, run_schedules=True, schedule_poll=0.2)
    with anyio.fail_after(LIMIT):
        async with serve(create_http_app(server)) as url, httpx.AsyncClient(base_url=url) as http:
            body = {
                "id": "every",
                "intervalSeconds": 1,
                "start": {"agentType": "echo", "message": "hi", "metadata": {"k": "v"}},
            }
            await _ok(await http.post("/crons", json=body))
            while len(await _fired(store)) < 3:  # noqa: ASYNC110 (the log is the only signal)
                await anyio.sleep(0.1)
            await _ok(await http.post("/crons/every/pause"))
            fired = await _fired(store)
            await anyio.sleep(1.5)
            assert await _fired(store) == fired  # paused: no more ticks
            listed = await _ok(await http.get("/sessions", params={"metadata.cronId": "every"}))
    ticks = [event.tick for event in fired]
    assert len(set(ticks)) == len(ticks)
    assert all(b - a >= 1 for a, b in itertools.pairwise(ticks))
    assert sorted(s["sessionId"] for s in listed["sessions"]) == sorted(
        f"cron.every.{int(tick)}" for tick in ticks
    )
    for event in fired:
        created = (await store.read(event.run_session_id))[0]
        assert isinstance(created, SessionCreated)
        assert created.metadata == {"k": "v", "cronId": "every", "cronTick": str(int(event.tick))}


async def _fired(store: MemoryEventStore) -> list[ScheduleFired]:
    return [e for e in await store.read(SCHEDULES_LOG) if isinstance(e, ScheduleFired)]


async def _cli(url: str, *words: str) -> tuple[int, str]:
    done = await anyio.run_process(
        [sys.executable, "-m", "helix_agents.server", "cron", *words, "--server", url],
        check=False,
    )
    return done.returncode, (done.stdout + done.stderr).decode()


async def test_the_cron_command_makes_lists_pauses_and_deletes_a_servers_schedules() -> None:
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with serve(create_http_app(AgentServer(agents, store))) as url:
            code, out = await _cli(
                url,
                "create",
                "--id",
                "nightly",
                "--cron",
                "0 2 * * *",
                "--timezone",
                "Asia/Tokyo",
                "--agent",
                "echo",
                "--message",
                "go",
                "--metadata",
                "team=a",
                "--catchup",
                "skip",
                "--json",
            )
            assert code == 0, out
            made = json.loads(out)
            assert made["start"] == {
                "agentType": "echo",
                "message": "go",
                "metadata": {"team": "a"},
            }
            assert (made["cron"], made["timezone"], made["catchup"]) == (
                "0 2 * * *",
                "Asia/Tokyo",
                "skip",
            )
            code, out = await _cli(
                url, "create", "--every", "0", "--agent", "echo", "--message", "go"
            )
            assert code == 1, out
            assert "INVALID_REQUEST" in out
            assert "intervalSeconds" in out
            code, out = await _cli(url, "list")
            assert code == 0, out
            assert out.startswith("nightly  cron '0 2 * * *' Asia/Tokyo  agent echo  next ")
            code, out = await _cli(url, "pause", "nightly")
            assert code == 0, out
            assert "  paused  " in out
            code, out = await _cli(url, "delete", "nightly")
            assert (code, out.strip()) == (0, "deleted nightly")
            code, out = await _cli(url, "get", "nightly")
            assert code == 1, out
            assert "NOT_FOUND" in out
    kinds = [e.__struct_config__.tag for e in await store.read(SCHEDULES_LOG)]
    assert kinds == ["schedule_created", "schedule_paused", "schedule_deleted"]


async def test_a_turn_schedule_sends_each_tick_as_a_new_turn_of_its_session() -> None:
    store = MemoryEventStore()
    server = AgentServer(agents, store, run_schedules=True, schedule_poll=0.2)
    with anyio.fail_after(LIMIT):
        async with serve(create_http_app(server)) as url, httpx.AsyncClient(base_url=url) as http:
            await _ok(
                await http.post(
                    "/start", json={"sessionId": "chat", "agentType": "echo", "message": "hi"}
                )
            )
            blank = await http.post(
                "/crons", json={"intervalSeconds": 1, "turn": {"sessionId": "chat", "message": " "}}
            )
            assert blank.status_code == 400, blank.text
            body = {
                "id": "nudge",
                "intervalSeconds": 1,
                "turn": {"sessionId": "chat", "message": "anything new?"},
            }
            await _ok(await http.post("/crons", json=body))
            while len(await _fired(store)) < 2:  # noqa: ASYNC110 (the log is the only signal)
                await anyio.sleep(0.1)
            await _ok(await http.delete("/crons/nudge"))
            fired = await _fired(store)
            turns: list[str] = []
            while len(turns) < len(fired):
                await anyio.sleep(0.1)
                turns = [
                    e.message_id
                    for e in await store.read("chat")
                    if isinstance(e, RunStarted) and e.message_id is not None
                ]
    assert all(e.run_session_id == "chat" for e in fired)
    assert turns == [f"cron.nudge.{int(e.tick)}" for e in fired]  # one turn per tick
