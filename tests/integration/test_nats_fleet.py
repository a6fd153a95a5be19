"""A fleet: two ``helix-agents host`` processes on one nats-server, fronted by ``serve --nats``.

A parent in this process delegates to the researcher and the summarizer
through the gateway (HTTP) and, separately, straight over NATS; the hosts
share the requests in their queue group and the session logs live in
JetStream. An interrupt sent through the gateway reaches a session on
whichever host runs it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import nats
import pytest
from anyio.abc import Process
from nats_server import NatsServer
from pydantic import BaseModel
from remote_app import Query, Report, Summary, Text, expected_report, expected_summary
from servers import listen_port

from helix_agents import (
    AgentExecutor,
    RemoteAgentTransport,
    create_remote_sub_agent_tool,
    define_agent,
)
from helix_agents.events import ChildChunkForwarded, HostClaimed
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import ChunkEvent, EndEvent, ErrorEvent, RemoteStartRequest
from helix_agents.stores import JetStreamEventStore, MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport
from helix_agents.transports.nats import NatsRemoteAgentTransport

pytestmark = [pytest.mark.slow, pytest.mark.nats]

ROOT = Path(__file__).parents[2]
TARGET = "tests.integration.remote_app:agents"
LIMIT = 60


class Brief(BaseModel):
    report: Report
    summary: Summary


@asynccontextmanager
async def _process(args: list[str], log: Path, ready: str) -> AsyncIterator[Process]:
    """Run ``helix-agents ARGS``; wait (bounded) for ``ready`` in its output; stop it by PID."""
    with log.open("ab") as out:
        process = await anyio.open_process(
            [sys.executable, "-m", "helix_agents.server", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
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


@asynccontextmanager
async def _fleet(tmp_path: Path, token: str | None = None) -> AsyncIterator[tuple[str, str]]:
    """nats-server, two hosts and a gateway; yields (nats URL, gateway URL).

    With ``token``, the gateway accepts only that bearer token (``--token-file``).
    """
    with NatsServer.start(tmp_path / "nats") as server:
        port = listen_port()
        host_args = ["host", TARGET, "--nats", server.url]
        gateway_args = ["serve", "--nats", server.url, "--port", str(port)]
        if token is not None:
            (tmp_path / "tokens").write_text(f"{token}\n")
            gateway_args += ["--token-file", str(tmp_path / "tokens")]
        async with (
            _process(host_args, tmp_path / "host1.log", "helix-agents: hosting"),
            _process(host_args, tmp_path / "host2.log", "helix-agents: hosting"),
            _process(gateway_args, tmp_path / "gateway.log", "Uvicorn running"),
        ):
            yield server.url, f"http://127.0.0.1:{port}"


def _orchestrator(remote: RemoteAgentTransport) -> object:
    def tool(name: str, schema: type[BaseModel], output: type[BaseModel]) -> object:
        return create_remote_sub_agent_tool(
            name,
            description=f"{name} (remote)",
            input_schema=schema,
            output_schema=output,
            transport=remote,
            remote_agent_type=name,
        )

    return define_agent(
        "orchestrator",
        output_schema=Brief,
        tools=[tool("researcher", Query, Report), tool("summarizer", Text, Summary)],  # type: ignore[list-item]
        llm=ScriptedLLM(
            [
                [
                    ScriptedLLM.call("subagent__researcher", {"query": "tides"}, id="r1"),
                    ScriptedLLM.call("subagent__summarizer", {"text": "tides turn"}, id="s1"),
                ],
                ScriptedLLM.finish(
                    {"report": expected_report("tides"), "summary": expected_summary("tides turn")}
                ),
            ]
        ),
    )


async def _delegate(remote: RemoteAgentTransport, parent_id: str) -> None:
    store = MemoryEventStore()
    orchestrator = _orchestrator(remote)
    async with AgentExecutor(store, [orchestrator]) as executor:  # type: ignore[list-item]
        handle = await executor.execute(orchestrator, "brief me", session_id=parent_id)  # type: ignore[arg-type]
        result = await handle.result()
    assert result.status == "completed", result.error
    assert result.output.model_dump() == {
        "report": expected_report("tides"),
        "summary": expected_summary("tides turn"),
    }
    log = await store.read(parent_id)
    for call_id in ("r1", "s1"):
        child = f"{parent_id}-remote-{call_id}"
        forwarded = [
            e.child_seq
            for e in log
            if isinstance(e, ChildChunkForwarded) and e.child_session_id == child
        ]
        remote_seqs = [e.sequence async for e in remote.stream(child) if isinstance(e, ChunkEvent)]
        assert forwarded == remote_seqs  # every remote chunk once, in order
        assert forwarded


async def test_a_fleet_serves_delegation_through_the_gateway_and_over_nats(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(LIMIT):
        async with _fleet(tmp_path) as (nats_url, gateway_url):
            async with HttpRemoteAgentTransport(gateway_url, retry_base_delay=0.05) as http:
                await _delegate(http, "via-gateway")
            store = await JetStreamEventStore.connect(nats_url)
            nc = await nats.connect(nats_url)
            try:
                await _delegate(NatsRemoteAgentTransport(nc, store), "via-nats")
            finally:
                await nc.close()
                await store.close()
    hosts = [(tmp_path / f"host{n}.log").read_text(errors="replace") for n in (1, 2)]
    assert all("hosting researcher, summarizer" in text for text in hosts)


async def test_an_interrupt_through_the_gateway_reaches_the_host_running_the_session(
    tmp_path: Path,
) -> None:
    bearer = {"Authorization": "Bearer fleet-secret"}
    with anyio.fail_after(LIMIT):
        async with (
            _fleet(tmp_path, token="fleet-secret") as (_, gateway_url),
            HttpRemoteAgentTransport(gateway_url, retry_base_delay=0.05, headers=bearer) as gateway,
        ):
            await gateway.start(
                RemoteStartRequest(session_id="slow-1", agent_type="researcher", message="tides")
            )
            async for event in gateway.stream("slow-1"):
                if isinstance(event, ChunkEvent):
                    break  # it is running on one of the hosts
            await gateway.interrupt("slow-1", "stop")
            ended = [event async for event in gateway.stream("slow-1")]
            status = await gateway.get_status("slow-1")
            async with httpx.AsyncClient(base_url=gateway_url) as client:
                health = (await client.get("/health")).json()
                anonymous = await client.get("/status", params={"sessionId": "slow-1"})
                wrong = await client.get(
                    "/status",
                    params={"sessionId": "slow-1"},
                    headers={"Authorization": "Bearer other"},
                )
                with anyio.fail_after(5):  # no retries waiting for a host of that type
                    unknown = await client.post(
                        "/start",
                        json={"sessionId": "u-1", "agentType": "astronomer", "message": "hi"},
                        headers=bearer,
                    )
    assert isinstance(ended[-1], ErrorEvent)
    assert ended[-1].recoverable is True
    assert status.status == "interrupted"
    # The gateway runs no agents itself: it lists what the fleet's hosts announce.
    assert health == {"status": "ok", "agents": ["researcher", "summarizer"]}
    assert (anonymous.status_code, anonymous.json()["code"]) == (401, "UNAUTHORIZED")
    assert (wrong.status_code, wrong.json()["code"]) == (401, "UNAUTHORIZED")
    assert unknown.status_code == 404
    assert unknown.json() == {"error": "agent type not found: astronomer", "code": "NOT_FOUND"}


async def test_a_dead_hosts_session_is_finished_by_another_host(tmp_path: Path) -> None:
    ttl = 2.0
    with NatsServer.start(tmp_path / "nats") as server, anyio.fail_after(LIMIT):
        port = listen_port()
        host_args = ["host", TARGET, "--nats", server.url, "--lease-ttl", str(ttl)]
        logs = [tmp_path / f"host{n}.log" for n in (1, 2, 3)]
        async with (
            _process(host_args, logs[0], "helix-agents: hosting") as first,
            _process(host_args, logs[1], "helix-agents: hosting") as second,
            _process(host_args, logs[2], "helix-agents: hosting") as third,
            _process(
                ["serve", "--nats", server.url, "--port", str(port)],
                tmp_path / "gateway.log",
                "Uvicorn running",
            ),
            HttpRemoteAgentTransport(f"http://127.0.0.1:{port}", retry_base_delay=0.05) as gateway,
        ):
            await gateway.start(
                RemoteStartRequest(session_id="fo-1", agent_type="researcher", message="tides")
            )
            async for event in gateway.stream("fo-1"):
                if isinstance(event, ChunkEvent):
                    break  # streaming on one of the hosts
            processes = {0: first, 1: second, 2: third}
            owners = [
                n
                for n in processes
                if "runs fo-1" in await anyio.Path(logs[n]).read_text(errors="replace")
            ]
            assert len(owners) == 1, owners
            owner = owners[0]
            processes[owner].kill()  # SIGKILL: no cleanup, no lease release
            await processes[owner].wait()
            started = anyio.current_time()
            events = [event async for event in gateway.stream("fo-1")]
            took = anyio.current_time() - started
            status = await gateway.get_status("fo-1")
            store = await JetStreamEventStore.connect(server.url)
            try:
                log = await store.read("fo-1")
            finally:
                await store.close()
    assert status.status == "completed"
    assert events[-1] == EndEvent(output=expected_report("tides"), state={})
    sequences = [event.sequence for event in events if isinstance(event, ChunkEvent)]
    assert sequences == sorted(set(sequences))  # no duplicate, in order
    assert [event.seq for event in log] == list(range(1, len(log) + 1))  # no gap
    claims = [event for event in log if isinstance(event, HostClaimed)]
    assert len(claims) == 1  # exactly one host won the claim
    assert took < ttl + 10  # lease expiry, a scan, and the re-run: bounded
