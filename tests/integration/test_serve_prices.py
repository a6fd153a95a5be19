"""``serve --prices FILE.json``: the inspector's cost per node at the prices in the file.

A real ``helix-agents serve`` (a subprocess on loopback) prices the scripted
model's tokens from the file; a file that is not a price list is one error
line (exit 2) before anything starts (specs/cli.md, specs/ui.md "Cost").
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import httpx
import pytest
from _serve_process import ServeProcess
from test_cli_serve_errors import one_error_line, run

pytestmark = pytest.mark.slow

CHATTER = "tests.integration.chat_app:chatter"
TIMEOUT = 60


async def test_serve_prices_each_node_at_the_files_prices(tmp_path: Path) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(
        json.dumps({"models": {"scripted": {"inputPerMillion": 3, "outputPerMillion": 15}}})
    )
    with anyio.fail_after(TIMEOUT):
        server = ServeProcess(tmp_path, CHATTER, "--prices", str(prices))
        try:
            await server.start()
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
                started = await client.post(
                    "/start",
                    json={"sessionId": "priced-1", "agentType": "chatter", "message": "hi"},
                )
                assert started.status_code == 200, started.text
                async with client.stream("GET", "/sse", params={"sessionId": "priced-1"}) as stream:
                    async for _ in stream.aiter_text():
                        pass  # to the stream's end: the run is over
                snap = (await client.get("/snapshot", params={"sessionId": "priced-1"})).json()
        finally:
            with anyio.CancelScope(shield=True):
                await server.stop()
    node = snap["view"]["agents"]["priced-1"]
    usage = node["usage"]
    assert usage["models"]["scripted"]["llmCalls"] == usage["llmCalls"] == 1
    expected = (usage["inputTokens"] * 3 + usage["outputTokens"] * 15) / 1_000_000
    assert expected > 0
    assert node["cost"] == {"usd": pytest.approx(expected), "unpriced": []}


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "No such file"),
        ("not json", "not JSON"),
        ('{"models": {"m": {"inputPerMillion": -1, "outputPerMillion": 1}}}', ">= 0"),
    ],
    ids=["missing", "not-json", "negative"],
)
def test_a_bad_prices_file_is_one_error_line(
    tmp_path: Path, content: str | None, says: str
) -> None:
    prices = tmp_path / "prices.json"
    if content is not None:
        prices.write_text(content)
    line = one_error_line(run(tmp_path, "serve", CHATTER, "--prices", str(prices)), 2)
    assert "prices file" in line
    assert says in line
    assert not (tmp_path / "helix.db").exists()
