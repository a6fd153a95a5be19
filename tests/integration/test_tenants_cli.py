"""``helix-agents serve --token-file`` with identities, on real processes: one store, a fleet.

A token file maps tokens to identities (specs/auth.md). Through ``serve``
(over SQLite, then ``replay`` of its store) and through ``serve --nats`` in
front of a ``host`` on a real nats-server, each tenant reaches its own
sessions only, the owner travels with the start (over NATS to the host),
and ``replay`` shows who owns a session and who changed it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import httpx
import pytest
from nats_server import NatsServer
from test_serve_access import ROOT, TARGET, running, start_body

pytestmark = pytest.mark.slow

LINES = "tok-alice user=alice tenant=acme\ntok-bob user=bob tenant=globex\nplain-ops\n"


def _as(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _two_tenants(client: httpx.AsyncClient, url: str) -> None:
    """alice starts, bob cannot see it; the old-form token sees everything."""
    started = await client.post(f"{url}/start", json=start_body("s-a"), headers=_as("tok-alice"))
    assert started.status_code == 200, started.text
    started = await client.post(f"{url}/start", json=start_body("s-b"), headers=_as("tok-bob"))
    assert started.status_code == 200, started.text
    refused = await client.get(f"{url}/status?sessionId=s-a", headers=_as("tok-bob"))
    assert refused.status_code == 404, refused.text
    assert refused.json() == {"error": "session 's-a' not found", "code": "NOT_FOUND"}
    mine = (await client.get(f"{url}/sessions", headers=_as("tok-alice"))).json()["sessions"]
    assert [(s["sessionId"], s["owner"]) for s in mine] == [
        ("s-a", {"tenant": "acme", "user": "alice"})
    ]
    every = (await client.get(f"{url}/sessions", headers=_as("plain-ops"))).json()["sessions"]
    assert {s["sessionId"] for s in every} == {"s-a", "s-b"}


async def test_serve_with_a_token_file_of_identities_and_replay_shows_who(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(LINES)
    store = f"sqlite:///{tmp_path / 'helix.db'}"
    args = ["serve", TARGET, "--store", store, "--token-file", str(tokens)]
    async with (
        running(args, tmp_path / "serve.log") as url,
        httpx.AsyncClient(timeout=10) as client,
    ):
        await _two_tenants(client, url)
        followed = await client.post(
            f"{url}/message",
            json={"sessionId": "s-a", "message": "and more", "messageId": "m-1"},
            headers=_as("tok-alice"),
        )
        assert followed.status_code == 200, followed.text
    done = await anyio.run_process(
        [sys.executable, "-m", "helix_agents.server", "replay", "--store", store, "s-a"], cwd=ROOT
    )
    replayed = done.stdout.decode()
    assert "owner=alice@acme" in replayed
    assert "request_made" in replayed
    assert "message (m-1) by alice@acme" in replayed


@pytest.mark.nats
async def test_the_fleet_gateway_keeps_tenants_apart_and_the_host_records_the_owner(
    tmp_path: Path,
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(LINES)
    with NatsServer.start(tmp_path / "nats") as nats:
        async with (
            running(
                ["host", TARGET, "--nats", nats.url],
                tmp_path / "host.log",
                ready="helix-agents: hosting",
            ),
            running(
                ["serve", "--nats", nats.url, "--token-file", str(tokens)],
                tmp_path / "gateway.log",
            ) as url,
            httpx.AsyncClient(timeout=10) as client,
        ):
            await _two_tenants(client, url)
