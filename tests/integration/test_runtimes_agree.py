"""A client over HTTP sees the same session on every runtime: built-in, Temporal, DBOS.

Issue 31: one loop, three drivers. Each runtime gets one gateway for the
module (uvicorn on 127.0.0.1 in this process; Temporal's worker here too, on
the run's dev server; DBOS embedded on a SQLite system database), serving
``agree_app``'s agents on a SQLite store. Every scenario is a session of its
own on each gateway, and all of them run at once. A client plays each
scenario with raw HTTP (``/start``, ``/sse``, ``/status``, the answers a
person gives) and records everything it is shown, in order: every ``/sse``
frame (event, id, data), every answer's status code and body. The records of
two runtimes must be equal once :func:`normalized` has taken out what differs
between any two runs (run ids, times); the text of an error is never taken out.

A param names its scenario and the runtime pair, e.g.
``step_limit-builtin-vs-dbos``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from servers import serve
from temporal_server import TemporalDev

from helix_agents.server import create_http_app
from helix_agents.stores import SqliteEventStore
from helix_agents.transports.sse import SSEParser
from tests.integration._durable_kit import Runtime
from tests.integration.agree_app import agents

pytestmark = [pytest.mark.slow]

LIMIT = 90.0
"""Seconds one scenario may take on one runtime (all of them run at once, on a shared machine)."""

RUNTIMES = ("builtin", "temporal", "dbos")
PAIRS = [("builtin", "temporal"), ("builtin", "dbos"), ("temporal", "dbos")]


@asynccontextmanager
async def gateway(
    name: str, directory: Path, dev: TemporalDev | None, dbos_template: Path | None
) -> AsyncIterator[str]:
    """The gateway of runtime ``name`` serving a fresh set of ``agree_app``'s agents: its URL.

    The one place a runtime's server is made (``_durable_kit.Runtime.server``:
    ``AgentServer``, ``temporal_server`` with a ``TemporalWorker``, ``dbos_server``).
    """
    store = SqliteEventStore(directory / "events.db")
    runtime = Runtime(name, directory, dev, dbos_template)
    try:
        async with runtime.server(agents(), store) as server, serve(create_http_app(server)) as url:
            yield url
    finally:
        await store.close()


# --- what a client sees ---------------------------------------------------------------


class Client:
    """One scenario's client of one gateway; ``seen`` is everything it was shown, in order."""

    def __init__(self, http: httpx.AsyncClient, session_id: str) -> None:
        self.http = http
        self.session_id = session_id
        self.seen: list[Any] = []

    async def post(self, path: str, **body: Any) -> Any:
        """``POST path`` with ``body`` (and this session's id); its JSON answer."""
        response = await self.http.post(path, json={"sessionId": self.session_id, **body})
        answer = response.json()
        self.seen.append([f"POST {path}", response.status_code, answer])
        return answer

    async def start(self, agent_type: str, message: str = "go", **more: Any) -> Any:
        """``POST /start`` of this session (``more``: other fields of the body)."""
        return await self.post("/start", agentType=agent_type, message=message, **more)

    async def status(self) -> Any:
        """``GET /status`` of this session; its JSON answer."""
        response = await self.http.get("/status", params={"sessionId": self.session_id})
        answer = response.json()
        self.seen.append(["GET /status", response.status_code, answer])
        return answer

    async def sse(
        self,
        from_sequence: int = 0,
        on_chunk: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
    ) -> None:
        """Read ``GET /sse`` until the server ends it; ``on_chunk`` acts on each chunk (awaited
        before the next frame is read). A stream ending without ``end`` or ``error`` fails."""
        params = {"sessionId": self.session_id, "fromSequence": str(from_sequence)}
        self.seen.append(["GET /sse", from_sequence])
        parser = SSEParser()
        ended = False
        async with self.http.stream("GET", "/sse", params=params) as response:
            assert response.status_code == 200, await response.aread()
            async for data in response.aiter_bytes():
                for message in parser.feed(data):
                    frame = json.loads(message.data)
                    self.seen.append(["sse", message.event, message.id, frame])
                    ended = message.event in ("end", "error")
                    if message.event == "chunk" and on_chunk is not None:
                        await on_chunk(frame["chunk"])
        assert ended, f"the stream of {self.session_id} closed without end or error"

    async def answer_on(
        self, kind: str, answer: Callable[[dict[str, Any]], Awaitable[None]]
    ) -> None:
        """Follow the stream from the start; at the session's own ``input_required`` (once),
        read ``/status`` and ``answer`` its one pending entry of ``kind``."""
        answered = False

        async def on_chunk(chunk: dict[str, Any]) -> None:
            nonlocal answered
            if chunk["type"] != "input_required" or chunk["agentId"] != self.session_id:
                return
            if not answered:
                answered = True
                await self.status()
                [entry] = [e for e in chunk["pending"] if e["kind"] == kind]
                await answer(entry)

        await self.sse(0, on_chunk)


# --- the scenarios: each plays one session ----------------------------------------------


async def tool_loop(c: Client) -> None:
    await c.start("looper")
    await c.sse()
    await c.status()


async def step_limit(c: Client) -> None:
    await c.start("stepper")
    await c.sse()
    await c.status()


async def failing_tool(c: Client) -> None:
    await c.start("breaker")
    await c.sse()
    await c.status()


async def unknown_tool(c: Client) -> None:
    await c.start("guesser")
    await c.sse()
    await c.status()


async def strict_unknown_tool(c: Client) -> None:
    await c.start("guesser", strict=True)
    await c.sse()
    status = await c.status()
    assert status["status"] == "failed", status


async def strict_failing_grandchild_tool(c: Client) -> None:
    """Strict is inherited: the child fails at its tool's error, its parent at the child."""
    await c.start("sponsor", strict=True)
    await c.sse()
    status = await c.status()
    assert status["status"] == "failed", status


async def failing_child_tool(c: Client) -> None:
    await c.start("sponsor")
    await c.sse()
    await c.status()


async def local_child(c: Client) -> None:
    await c.start("parent")
    await c.sse()
    await c.status()


async def approval_approved(c: Client) -> None:
    await c.start("payer")

    async def approve(entry: dict[str, Any]) -> None:
        await c.post("/submit-approval", toolCallId=entry["toolCallId"], approved=True)

    await c.answer_on("approval", approve)
    await c.status()


async def approval_denied(c: Client) -> None:
    await c.start("payer")

    async def deny(entry: dict[str, Any]) -> None:
        await c.post(
            "/submit-approval", toolCallId=entry["toolCallId"], approved=False, reason="not today"
        )

    await c.answer_on("approval", deny)
    await c.status()


async def strict_approval_denied(c: Client) -> None:
    """A person's denial is a decision, not a problem: a strict run goes on."""
    await c.start("payer", strict=True)

    async def deny(entry: dict[str, Any]) -> None:
        await c.post("/submit-approval", toolCallId=entry["toolCallId"], approved=False)

    await c.answer_on("approval", deny)
    status = await c.status()
    assert status["status"] == "completed", status


async def client_tool(c: Client) -> None:
    await c.start("asker")

    async def pick(entry: dict[str, Any]) -> None:
        await c.post("/submit-tool-result", toolCallId=entry["toolCallId"], result="green")

    await c.answer_on("client_tool", pick)
    await c.status()


async def follow_up(c: Client) -> None:
    await c.start("echo", "one")
    await c.sse()
    before = await c.status()
    await c.post("/message", message="two", messageId="m1")
    await c.sse(before["latestSequence"])
    await c.status()
    await c.sse()  # a client reading the whole session afterwards


async def failing_model(c: Client) -> None:
    await c.start("mute")
    await c.sse()
    await c.status()


async def interrupt_and_resume(c: Client) -> None:
    await c.start("holder")

    async def interrupt(chunk: dict[str, Any]) -> None:
        if chunk["type"] == "custom" and chunk["name"] == "holding":
            await c.post("/interrupt", reason="wait")

    await c.sse(0, interrupt)
    interrupted = await c.status()
    await c.post("/resume")
    await c.sse(interrupted["latestSequence"])
    await c.status()
    await c.sse()  # a client reading the whole session afterwards


async def paused_child_approval_at_root(c: Client) -> None:
    await c.start("boss")

    async def approve(entry: dict[str, Any]) -> None:
        await c.post("/submit-approval", toolCallId=entry["toolCallId"], approved=True)

    await c.answer_on("approval", approve)
    await c.status()


async def paused_child_client_tool_at_root(c: Client) -> None:
    await c.start("chooser")

    async def pick(entry: dict[str, Any]) -> None:
        await c.post("/submit-tool-result", toolCallId=entry["toolCallId"], result="blue")

    await c.answer_on("client_tool", pick)
    await c.status()


SCENARIOS: dict[str, Callable[[Client], Awaitable[None]]] = {
    play.__name__: play
    for play in (
        tool_loop,
        step_limit,
        failing_tool,
        unknown_tool,
        strict_unknown_tool,
        failing_child_tool,
        strict_failing_grandchild_tool,
        local_child,
        approval_approved,
        approval_denied,
        strict_approval_denied,
        client_tool,
        follow_up,
        failing_model,
        interrupt_and_resume,
        paused_child_approval_at_root,
        paused_child_client_tool_at_root,
    )
}


# --- what differs between any two runs ------------------------------------------------


def normalized(seen: list[Any]) -> list[Any]:
    """``seen`` without what differs between any two runs of the same session.

    Two keys, wherever they are:

    - ``runId`` (a random id): replaced by its rank among the scenario's run
      ids, ``run-1``, ``run-2``... in order of first appearance, since whether
      two answers name the same run or another one is behaviour;
    - ``ts`` holding a number (a chunk's time, seconds since the epoch): ``TS``.

    Nothing else is touched: sequences, session and call ids (deterministic
    here), texts, outputs and error messages stay as the client was shown them.
    """
    ranks: dict[str, str] = {}

    def item(key: str, value: Any) -> Any:
        if key == "runId" and isinstance(value, str):
            return ranks.setdefault(value, f"run-{len(ranks) + 1}")
        if key == "ts" and isinstance(value, int | float):
            return "TS"
        return walk(value)

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: item(key, inner) for key, inner in value.items()}
        if isinstance(value, list):
            return [walk(inner) for inner in value]
        return value

    return [walk(entry) for entry in seen]


# --- running them all -------------------------------------------------------------------


@dataclass(frozen=True)
class Played:
    """What one scenario's client saw on one runtime; ``failure``: why its play stopped short."""

    seen: list[Any]
    failure: str | None


async def _play(
    http: httpx.AsyncClient, scenario: str, runtime: str, into: dict[tuple[str, str], Played]
) -> None:
    client = Client(http, f"agree-{scenario}")
    failure = None
    try:
        with anyio.fail_after(LIMIT):
            await SCENARIOS[scenario](client)
    except TimeoutError:
        failure = f"not played to its end within {LIMIT:.0f} s"
    except Exception as exc:  # recorded: the pairs' tests report it
        failure = f"{type(exc).__name__}: {exc}"
    into[scenario, runtime] = Played(client.seen, failure)


@pytest.fixture(scope="module")
async def played(
    tmp_path_factory: pytest.TempPathFactory,
    temporal_dev: TemporalDev,
    dbos_system_template: Path,
) -> dict[tuple[str, str], Played]:
    """Every scenario played on every runtime, all at once (one gateway per runtime)."""
    results: dict[tuple[str, str], Played] = {}

    async def on(runtime: str) -> None:
        directory = tmp_path_factory.mktemp(f"agree-{runtime}")
        dev = temporal_dev if runtime == "temporal" else None
        template = dbos_system_template if runtime == "dbos" else None
        async with (
            gateway(runtime, directory, dev, template) as url,
            httpx.AsyncClient(base_url=url, timeout=LIMIT) as http,
            anyio.create_task_group() as tg,
        ):
            for scenario in SCENARIOS:
                tg.start_soon(_play, http, scenario, runtime, results)

    with anyio.fail_after(LIMIT + 60):
        async with anyio.create_task_group() as tg:
            for runtime in RUNTIMES:
                tg.start_soon(on, runtime)
    return results


def _difference(ours: list[Any], theirs: list[Any]) -> str:
    """Where two records first differ, for the failure message."""
    for index, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        if a != b:
            return f"item {index}:\n  {json.dumps(a)}\n  {json.dumps(b)}"
    shorter = min(len(ours), len(theirs))
    return f"lengths {len(ours)} and {len(theirs)}; then:\n  {ours[shorter:]}\n  {theirs[shorter:]}"


@pytest.mark.parametrize(("first", "second"), PAIRS, ids=[f"{a}-vs-{b}" for a, b in PAIRS])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_a_client_sees_the_same_session_on_both_runtimes(
    played: dict[tuple[str, str], Played], scenario: str, first: str, second: str
) -> None:
    ours, theirs = played[scenario, first], played[scenario, second]
    for runtime, play in ((first, ours), (second, theirs)):
        shown = "\n".join(json.dumps(item) for item in normalized(play.seen))
        assert play.failure is None, f"{scenario} on {runtime}: {play.failure}; it saw:\n{shown}"
    a, b = normalized(ours.seen), normalized(theirs.seen)
    assert a == b, f"{scenario}: {first} vs {second} first differ at {_difference(a, b)}"
