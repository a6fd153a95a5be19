"""Schemathesis against the served protocol: every answer conforms to the document, none is 5xx.

Each run loads the document the server serves (``GET /openapi.json``) and
runs schemathesis's engine over it, as ``st run`` would, in all its phases:
coverage (boundary values: a 256- and a 257-character session id, the
largest sequence and one past it, missing parameters, undeclared methods),
fuzzing (valid and invalid requests to every operation) and stateful
scenarios that follow the document's links: a ``start`` and then
``status``, ``sse``, ``interrupt``, ``resume`` and ``abort`` of the session
it started. Every built-in check is on: no 5xx, a documented status,
content type and headers (``Allow`` on 405, ``WWW-Authenticate`` on 401),
a body that fits its schema (each SSE event's ``data`` included), invalid
input refused, valid input accepted, a declared bearer requirement
enforced (requests are replayed without the token and with a wrong one).

Servers, all real, on loopback: a single server (``create_http_app`` over an
``AgentServer``, with auth), run with the token and without it; and the NATS
gateway: ``helix-agents serve --nats`` with a token (``$HELIX_TOKEN``) in
front of a ``helix-agents host`` on a real nats-server, run with the token
and without it, and the same gateway app without auth, in this process, in
front of the same host (its document declares no security).

Generation is bounded (:data:`EXAMPLES`, :data:`SHORT`) so the module fits
CI; the long run (``HELIX_BUDGET=long``) generates about twice as much. Three
things are steered, all only towards requests the document allows:
a generated ``start`` names one of the served agent types half of the time
and gets a fresh session id, so scenarios reach running and finished
sessions; a valid ``start`` drops ``workspaceSessionId``, which only a
parent session in the server's own process may send (400 otherwise,
specs/workspaces.md); every other valid front-end run (``POST /sse``)
names a session that exists (one the run began with: completed, interrupted
or aborted; or one a valid ``start`` named), and every fourth a served agent
type and a fresh session id, so it follows up, resumes, replays and starts
sessions instead of finding none; a valid ``POST /crons`` gets an expression, a
zone and an agent type that exist, a fresh id and ticks a year apart. The
operations in :data:`NOT_YET` are left out.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import nats
import pytest
import schemathesis
from anyio.abc import Process
from budgets import budget
from hypothesis import strategies as st
from nats_server import NatsServer
from schema_app import agents
from schemathesis import engine
from schemathesis.config import HealthCheck
from schemathesis.engine import events
from servers import listen_port, serve

from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import JetStreamEventStore, SqliteEventStore
from helix_agents.transports.nats import NatsRemoteAgentTransport

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).parents[2]
TARGET = "tests.integration.schema_app:agents"
TOKEN = "schemathesis-token"
EXAMPLES = budget(ci=8, long=15)
"""Generated examples per operation (and scenarios) in a full run (tests/budgets.py)."""
SHORT = budget(ci=3, long=4)
"""The same, in a run whose answers are all alike (every request refused without the token)."""
REQUEST_TIMEOUT = 5
"""Seconds for one request, its body included. Every answer comes in milliseconds but a
stream that does not end: a scenario's ``GET /sse`` of a running session from a
``fromSequence`` past its end gets heartbeats only, also after the session ended, until
this timeout cuts it (the run goes on; it was 15 s, a third of the module's time)."""
LIMIT = 300
OPEN_PATHS = {"/health", "/openapi.json", "/ui", "/ui/assets/{name}", "/ui/diff"}
CHECKS = {
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
    "positive_data_acceptance",
    "unsupported_method",
}
"""Checks that must have run in every run (the engine runs every built-in one that applies)."""
NOT_YET: tuple[str, ...] = ()
"""Operations whose documents do not yet say all their servers check (none now: a session
list's cursor, which must be one it gave out, is steered in ``map_case``)."""
_SESSION_ID = re.compile(r"[A-Za-z0-9_.:-]{1,256}")


@dataclass
class Run:
    """What a schemathesis run sent (phase, operation, status), which checks ran, what failed."""

    statuses: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    checks: set[str] = field(default_factory=set)
    failures: list[str] = field(default_factory=list)

    def count(self, operation: str, status: int, phase: str | None = None) -> int:
        """How many answers ``operation`` gave with ``status`` (in ``phase``, else in any)."""
        return sum(
            count
            for (in_phase, label, code), count in self.statuses.items()
            if label == operation and code == status and phase in (None, in_phase)
        )


def _seeded(url: str, headers: dict[str, str] | None) -> list[str]:
    """Sessions for front-end runs to find: one completed, one interrupted, one aborted.

    None without the token (every start is refused). The stops race the slow
    agent's six words: whichever state a session ends in, it exists.
    """
    run = uuid.uuid4().hex[:8]
    plan = [
        ("done", "quick", None),
        ("stopped", "slow", "/interrupt"),
        ("aborted", "slow", "/abort"),
    ]
    seeded: list[str] = []
    with httpx.Client(base_url=url, headers=headers, timeout=REQUEST_TIMEOUT) as client:
        for name, agent_type, stop in plan:
            session_id = f"front-end-{run}.{name}"
            body = {"sessionId": session_id, "agentType": agent_type, "message": "go"}
            if client.post("/start", json=body).status_code != 200:
                continue
            if stop is not None:
                client.post(stop, json={"sessionId": session_id})
            seeded.append(session_id)
    return seeded


def _steered(schema: Any, seeded: list[str]) -> None:
    """Register the steering hooks (module docstring) on ``schema``."""
    fresh = itertools.count()
    runs = itertools.count()
    names = sorted(agents)
    started = list(seeded)  # and the session ids of valid starts that named a served agent

    def unique(body: dict[str, Any]) -> dict[str, Any]:
        session_id = body.get("sessionId")
        if isinstance(session_id, str) and _SESSION_ID.fullmatch(session_id):
            return {**body, "sessionId": f"{session_id[:240]}.{next(fresh)}"}
        return body

    def flatmap_body(context: Any, body: Any) -> Any:
        start = context.operation.path == "/start" and isinstance(body, dict)
        if start and isinstance(body.get("agentType"), str):
            named = [{**body, "agentType": name} for name in agents]
            return st.sampled_from([body, body, *named]).map(unique)
        return st.just(body)

    def front_end_run(case: Any) -> None:
        """Every other valid run names a session that exists, every fourth a new one to start.

        The new one's id is fresh, as a steered ``start``'s: a session at an id the
        other operations' boundary values use would reach states they never did.
        """
        turn = next(runs)
        key = next((k for k in ("threadId", "id") if isinstance(case.body.get(k), str)), None)
        if key is None:
            return
        if turn % 2 == 0:
            case.body[key] = started[(turn // 2) % len(started)]
        elif turn % 4 == 1 and isinstance(case.query, dict) and "agentType" in case.query:
            case.query["agentType"] = names[(turn // 4) % len(names)]
            case.body[key] = f"{case.body[key][:240]}.{next(fresh)}"

    def map_case(context: Any, case: Any) -> Any:
        positive = case.meta is not None and case.meta.generation.mode.is_positive
        if positive and case.operation.path == "/start" and isinstance(case.body, dict):
            case.body.pop("workspaceSessionId", None)
            case.body.pop("webhook", None)  # a server with no webhook secret refuses one (400)
            if case.body.get("agentType") in agents and isinstance(case.body["sessionId"], str):
                started.append(case.body["sessionId"])
        run = case.operation.path == "/sse" and case.operation.method == "post"
        if positive and run and isinstance(case.body, dict) and started:
            front_end_run(case)
        if positive and case.operation.path == "/sessions" and isinstance(case.query, dict):
            case.query.pop("cursor", None)  # only a cursor the list gave out is valid
        if positive and case.operation.path == "/crons" and isinstance(case.body, dict):
            schedule(case.body)
        return case

    def schedule(body: dict[str, Any]) -> None:
        """A valid schedule: an expression and a zone that exist, a served agent type, a
        fresh id; and rare ticks (a year apart), so that none fires during the run."""
        body.pop("id", None)
        if isinstance(body.get("cron"), str):
            body["cron"] = "0 0 1 1 *"
        if isinstance(body.get("timezone"), str):
            body["timezone"] = "UTC"
        if isinstance(body.get("intervalSeconds"), int | float):
            body["intervalSeconds"] = 31_622_400
        start = body.get("start")
        if isinstance(start, dict):
            start.pop("workspaceSessionId", None)
            start.pop("webhook", None)  # checked as /start's: no webhook secret here (400)
            start["agentType"] = names[next(runs) % len(names)]

    schema.hook(flatmap_body)
    schema.hook(map_case)


def _record(run: Run, phase: str, recorder: Any) -> None:
    for case_id, interaction in recorder.interactions.items():
        node = recorder.cases.get(case_id)
        if node is not None and interaction.response is not None:
            label = node.value.operation.label
            run.statuses[(phase, label, interaction.response.status_code)] += 1
    for nodes in recorder.checks.values():
        for check in nodes:
            run.checks.add(check.name)
            if check.failure_info is not None:
                failure = check.failure_info.failure
                run.failures.append(
                    f"[{phase}] {recorder.label}: {check.name}: {failure.title}\n"
                    f"{failure.message}\n{check.failure_info.code_sample}"
                )


def fuzz(url: str, *, token: str | None, examples: int) -> Run:
    """One schemathesis run against ``url`` (blocking: run it in a worker thread)."""
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json").exclude(name=list(NOT_YET))
    headers = {"Authorization": f"Bearer {token}"} if token is not None else None
    schema.config.update(
        base_url=url,
        request_timeout=REQUEST_TIMEOUT,
        headers=headers,
        # Generation's own health (how many drawn values it threw away, how slowly it drew)
        # says nothing of the server, and with few examples it flakes from run to run.
        suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
    )
    schema.config.generation.update(max_examples=examples)
    # Scenarios follow the document's own links (start and resume lead to the session's
    # routes). Links inferred from shared field names (GET /sessions' ids into /snapshot)
    # took every scenario once /snapshot was in, so no scenario started a session.
    schema.config.phases.stateful.inference.algorithms = []
    _steered(schema, _seeded(url, headers))
    run = Run()
    for event in engine.from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished | events.FuzzScenarioFinished):
            phase = str(getattr(event, "phase", "fuzzing"))
            _record(run, phase, event.recorder)
        elif isinstance(event, events.NonFatalError):
            run.failures.append(f"error in {event.label}: {event.value!r}")
        elif isinstance(event, events.FatalError):
            run.failures.append(f"fatal: {event.exception!r}")
    return run


async def _fuzz(url: str, *, token: str | None, short: bool = False) -> Run:
    examples = SHORT if short else EXAMPLES
    return await anyio.to_thread.run_sync(lambda: fuzz(url, token=token, examples=examples))


def _clean(run: Run, label: str) -> None:
    assert not run.failures, f"{label}:\n\n" + "\n\n".join(run.failures)
    errors = {key: count for key, count in run.statuses.items() if key[2] >= 500}
    assert not errors, f"{label}: server errors {errors}"
    assert run.checks >= CHECKS, f"{label}: checks that did not run: {CHECKS - run.checks}"


def _followed_links(run: Run, label: str) -> None:
    """The scenarios started sessions and went on to the routes about them."""
    assert run.count("POST /start", 200, "stateful") > 0, f"{label}: {run.statuses}"
    about = [
        (operation, status)
        for (phase, operation, status) in run.statuses
        if phase == "stateful" and operation != "POST /start" and status == 200
    ]
    assert about, f"{label}: no linked call succeeded: {run.statuses}"


def _refused_without_token(run: Run, label: str) -> None:
    """Without the token every protected operation is refused: 401 (or 405, a wrong method)."""
    protected = {
        (operation, status)
        for (_, operation, status) in run.statuses
        if operation.split()[1] not in OPEN_PATHS
    }
    assert protected, f"{label}: {run.statuses}"
    assert {status for _, status in protected} <= {401, 405}, f"{label}: {sorted(protected)}"


async def test_the_single_server_conforms_with_and_without_the_token(tmp_path: Path) -> None:
    store = SqliteEventStore(tmp_path / "events.db")
    server = AgentServer(list(agents.values()), store)
    try:
        with anyio.fail_after(LIMIT):
            async with serve(create_http_app(server, auth=[TOKEN])) as url:
                with_token = await _fuzz(url, token=TOKEN)
                without = await _fuzz(url, token=None, short=True)
    finally:
        await store.close()
    _clean(with_token, "with the token")
    _followed_links(with_token, "with the token")
    assert "ignored_auth" in with_token.checks
    _clean(without, "without a token")
    _refused_without_token(without, "without a token")


# --- the NATS gateway -------------------------------------------------------------------


@asynccontextmanager
async def _process(
    args: list[str], log: Path, ready: str, env: dict[str, str] | None = None
) -> AsyncIterator[Process]:
    """Run ``helix-agents ARGS``; wait (bounded) for ``ready`` in its output; stop it by PID."""
    with log.open("ab") as out:
        process = await anyio.open_process(
            [sys.executable, "-m", "helix_agents.server", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
    try:
        with anyio.fail_after(30):
            while ready not in (text := await anyio.Path(log).read_text(errors="replace")):
                assert process.returncode is None, text
                await anyio.sleep(0.05)  # a subprocess's output is the only signal
        yield process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with anyio.move_on_after(10):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


@pytest.mark.nats
async def test_the_nats_gateway_conforms_with_and_without_the_token(tmp_path: Path) -> None:
    with NatsServer.start(tmp_path / "nats") as nats_server:
        port = listen_port()
        async with (
            _process(
                ["host", TARGET, "--nats", nats_server.url],
                tmp_path / "host.log",
                "helix-agents: hosting",
            ),
            _process(
                ["serve", "--nats", nats_server.url, "--port", str(port)],
                tmp_path / "gateway.log",
                "Uvicorn running",
                env={"HELIX_TOKEN": TOKEN},  # not an argument: those show in ps
            ),
        ):
            with anyio.fail_after(LIMIT):
                url = f"http://127.0.0.1:{port}"
                with_token = await _fuzz(url, token=TOKEN)
                without = await _fuzz(url, token=None, short=True)
                # The same gateway app without auth (its document declares none),
                # in this process, in front of the same host.
                store = await JetStreamEventStore.connect(nats_server.url)
                nc = await nats.connect(nats_server.url)
                try:
                    async with serve(
                        create_http_app(NatsRemoteAgentTransport(nc, store))
                    ) as open_url:
                        no_auth = await _fuzz(open_url, token=None, short=True)
                finally:
                    await nc.close()
                    await store.close()
    _clean(with_token, "serve --nats with the token")
    _followed_links(with_token, "serve --nats with the token")
    assert "ignored_auth" in with_token.checks
    _clean(without, "serve --nats without a token")
    _refused_without_token(without, "serve --nats without a token")
    _clean(no_auth, "the NATS gateway without auth")
    assert no_auth.count("POST /start", 200) > 0
