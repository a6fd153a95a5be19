"""``--otel`` on the durable runtimes: ``serve --dbos`` and ``serve``/``worker --temporal``.

The commands run as real subprocesses; their spans go over OTLP/HTTP to a
real receiver on loopback (Starlette on uvicorn, decoding the official
exporter's protobuf). A session of ``boss`` (a tool, then a local sub-agent
with its own tool) is one trace: its runs, model calls and tool calls, the
child's included, as on the built-in runtime (``test_serve_otel.py``).
"""

from __future__ import annotations

import signal
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
from temporal_server import TemporalDev, fresh_task_queue

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

from tests.integration._durable_kit import WorkerProcess

pytestmark = pytest.mark.slow

TARGET = "tests.integration.temporal_app:agents"
TIMEOUT = 90


def collector(spans: list[dict[str, Any]]) -> Starlette:
    """An OTLP/HTTP trace receiver: records each span's name, trace, ids and attributes."""

    async def traces(request: Request) -> Response:
        export = ExportTraceServiceRequest()
        export.ParseFromString(await request.body())
        for resource_spans in export.resource_spans:
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    attributes = {a.key: a.value.string_value for a in span.attributes}
                    spans.append(
                        {
                            "name": span.name,
                            "trace": span.trace_id.hex(),
                            "id": span.span_id.hex(),
                            "parent": span.parent_span_id.hex(),
                            "session": attributes.get("gen_ai.conversation.id"),
                        }
                    )
        return Response(b"", media_type="application/x-protobuf")

    return Starlette(routes=[Route("/v1/traces", traces, methods=["POST"])])


async def _run_boss(url: str, session_id: str) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        started = await client.post(
            f"{url}/start", json={"sessionId": session_id, "agentType": "boss", "message": "go"}
        )
        assert started.status_code == 200, started.text
        async with client.stream("GET", f"{url}/sse", params={"sessionId": session_id}) as stream:
            async for _ in stream.aiter_text():
                pass  # to the stream's end: the run is over


def _check_one_trace(spans: list[dict[str, Any]], session_id: str) -> None:
    """The session's spans (its child's too) are one trace with the built-in's span kinds."""
    child = f"{session_id}-sub-h1"
    mine = [s for s in spans if s["session"] in (session_id, child)]
    names = {s["name"] for s in mine}
    assert {"invoke_agent boss", "invoke_agent helper"} <= names, names
    assert {"execute_tool add", "execute_tool subagent__helper", "execute_tool double"} <= names
    assert sum(name.startswith("chat") for name in (s["name"] for s in mine)) == 5, names
    assert len({s["trace"] for s in mine}) == 1, "the session's spans are not one trace"
    by_id = {s["id"]: s for s in spans}
    # The child's run hangs under the parent's call of it.
    [helper_run] = [s for s in mine if s["name"] == "invoke_agent helper"]
    assert by_id[helper_run["parent"]]["name"] == "execute_tool subagent__helper"
    # Each model call and tool call hangs under a run of its own session.
    runs = {s["id"]: s["session"] for s in mine if s["name"].startswith("invoke_agent ")}
    for span in mine:
        if span["name"].startswith(("chat", "execute_tool ")):
            assert runs.get(span["parent"]) == span["session"], span


async def test_serve_dbos_otel_exports_the_sessions_trace(tmp_path: Path) -> None:
    """``serve --dbos sqlite:/// --otel``: the session's spans reach the receiver as one trace."""
    spans: list[dict[str, Any]] = []
    with anyio.fail_after(TIMEOUT):
        async with serve(collector(spans)) as otlp:
            server = ServeProcess(
                tmp_path,
                TARGET,
                "--dbos",
                f"sqlite:///{tmp_path / 'dbos.sqlite'}",
                "--otel",
                env={"OTEL_EXPORTER_OTLP_ENDPOINT": otlp},
            )
            try:
                await server.start()
                await _run_boss(server.url, "od")
                server.signal(signal.SIGINT)
                assert await server.wait() == 0, server.output()
            finally:
                with anyio.CancelScope(shield=True):
                    await server.stop()
    assert f"helix-agents: tracing to OTLP {otlp}/v1/traces" in server.output()
    _check_one_trace(spans, "od")


async def test_temporal_gateway_and_worker_otel_export_one_trace(
    tmp_path: Path, temporal_dev: TemporalDev
) -> None:
    """``serve --temporal --otel`` begins the session's trace; ``worker --temporal --otel``
    exports its runs' spans into it; both flush on SIGINT."""
    spans: list[dict[str, Any]] = []
    queue = fresh_task_queue()
    with anyio.fail_after(TIMEOUT):
        async with serve(collector(spans)) as otlp:
            env = {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp}
            gateway = ServeProcess(
                tmp_path, TARGET, "--temporal", temporal_dev.address, "--task-queue", queue,
                "--otel", env=env,
            )  # fmt: skip
            worker = WorkerProcess.temporal(
                tmp_path / "worker.log",
                TARGET,
                address=temporal_dev.address,
                db=gateway.db,
                task_queue=queue,
                args=("--otel",),
                env=env,
            )
            try:
                await gateway.start()
                await worker.start()
                await _run_boss(gateway.url, "serve-ot")
                assert worker.process is not None
                worker.process.send_signal(signal.SIGINT)
                assert await worker.process.wait() == 0, worker.output()
                worker.process = None  # it left: nothing for the teardown to kill
                gateway.signal(signal.SIGINT)
                assert await gateway.wait() == 0, gateway.output()
            finally:
                with anyio.CancelScope(shield=True):
                    await worker.stop()
                    await gateway.stop()
    assert "helix-agents: tracing to OTLP" in worker.output()
    starts = [s for s in spans if s["name"] == "start_session boss"]
    assert len(starts) == 1  # the gateway began the session's trace
    _check_one_trace(spans, "serve-ot")
    assert {s["trace"] for s in spans if s["session"] == "serve-ot"} == {starts[0]["trace"]}
