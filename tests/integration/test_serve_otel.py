"""``helix-agents serve --otel``: each run's spans reach an OTLP/HTTP collector.

The collector is a real HTTP endpoint on loopback (Starlette on uvicorn)
that decodes the OTLP protobuf the official exporter posts; the server is the
real command in a subprocess. The spans are sent in batches and flushed when
the server shuts down (Ctrl-C, exit 0).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from _serve_process import ServeProcess
from servers import serve
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

pytestmark = pytest.mark.slow

CHATTER = "tests.integration.chat_app:chatter"
TIMEOUT = 60


def collector(spans: list[dict[str, Any]], arrived: anyio.Event) -> Starlette:
    """An OTLP/HTTP trace receiver: records each span's name and service."""

    async def traces(request: Request) -> Response:
        export = ExportTraceServiceRequest()
        export.ParseFromString(await request.body())
        for resource_spans in export.resource_spans:
            service = next(
                a.value.string_value
                for a in resource_spans.resource.attributes
                if a.key == "service.name"
            )
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    spans.append({"name": span.name, "service": service, "scope": scope.scope.name})
        arrived.set()
        return Response(b"", media_type="application/x-protobuf")

    return Starlette(routes=[Route("/v1/traces", traces, methods=["POST"])])


async def test_serve_otel_sends_the_runs_spans_to_the_collector(tmp_path: Path) -> None:
    spans: list[dict[str, Any]] = []
    arrived = anyio.Event()
    with anyio.fail_after(TIMEOUT):
        async with serve(collector(spans, arrived)) as otlp:
            server = ServeProcess(
                tmp_path, CHATTER, "--otel", env={"OTEL_EXPORTER_OTLP_ENDPOINT": otlp}
            )
            try:
                await server.start()
                async with httpx.AsyncClient(timeout=10) as client:
                    started = await client.post(
                        f"{server.url}/start",
                        json={"sessionId": "traced-1", "agentType": "chatter", "message": "hi"},
                    )
                    assert started.status_code == 200, started.text
                    async with client.stream(
                        "GET", f"{server.url}/sse", params={"sessionId": "traced-1"}
                    ) as stream:
                        async for _ in stream.aiter_text():
                            pass  # to the stream's end: the run is over
                server.signal(signal.SIGINT)
                assert await server.wait() == 0, server.output()
            finally:
                with anyio.CancelScope(shield=True):
                    await server.stop()
            await arrived.wait()
    output = server.output()
    assert f"helix-agents: tracing to OTLP {otlp}/v1/traces" in output
    names = {span["name"] for span in spans}
    assert "invoke_agent chatter" in names, names
    assert any(name.startswith("chat") for name in names), names  # the model call
    assert {span["service"] for span in spans} == {"helix-agents"}
    assert {span["scope"] for span in spans} == {"helix_agents"}


SERVER_MODULE = """
from helix_agents import define_agent
from helix_agents.models import ScriptedLLM
from helix_agents.server import AgentServer
from helix_agents.stores import MemoryEventStore

server = AgentServer([define_agent("a", llm=ScriptedLLM(["hi"]))], MemoryEventStore())
"""


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["own_server:server", "--otel"], "give it tracer=OtelTracer()"),
        (["--nats", "nats://127.0.0.1:4222", "--otel"], "a fleet's gateway runs none"),
    ],
)
def test_serve_otel_refuses_what_it_cannot_trace(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    needle: str,
) -> None:
    from helix_agents.server.cli.main import main

    (tmp_path / "own_server.py").write_text(SERVER_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["serve", *args]) == 2
    err = capsys.readouterr().err
    assert needle in err
    assert err.count("\n") == 1


@pytest.mark.nats
async def test_host_otel_sends_the_hosted_runs_spans(tmp_path: Path) -> None:
    from nats_server import NatsServer

    spans: list[dict[str, Any]] = []
    arrived = anyio.Event()
    log = tmp_path / "host.log"
    root = Path(__file__).parents[2]
    with NatsServer.start(tmp_path / "nats") as nats, anyio.fail_after(TIMEOUT):
        async with serve(collector(spans, arrived)) as otlp:
            command = ["host", "examples.nats_fleet:hosted", "--nats", nats.url, "--otel"]
            with log.open("ab") as output:
                host = await anyio.open_process(
                    [sys.executable, "-m", "helix_agents.server", *command],
                    cwd=root,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": otlp},
                )
            try:
                while "helix-agents: hosting researcher" not in log.read_text():
                    assert host.returncode is None, log.read_text()
                    await anyio.sleep(0.05)  # a subprocess's output is the only signal
                script = [sys.executable, str(root / "examples" / "nats_fleet.py")]
                await anyio.run_process([*script, "--nats", nats.url, "--no-host"], cwd=tmp_path)
                host.send_signal(signal.SIGINT)
                await host.wait()
            finally:
                if host.returncode is None:
                    host.kill()
                    await host.wait()
            await arrived.wait()
    assert "helix-agents: tracing to OTLP" in log.read_text()
    assert "invoke_agent researcher" in {span["name"] for span in spans}, spans
