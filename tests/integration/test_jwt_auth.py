"""Bearer JWTs on a real gateway: a key file, a JWKS on loopback, and a tenant across servers.

Real keys (an RSA pair made here, an HMAC secret), tokens signed with PyJWT,
uvicorn on 127.0.0.1 for the gateways and for the JWKS document. A token
that does not verify (another key, expired, another issuer or audience, an
``alg`` of the wrong kind) is ``401``; one that does is its claims' identity.
A remote child started over HTTP by a parent server (a service identity
with the ``admin`` role, verified by the same JWKS) belongs to the parent's
owner: the child's server records the same owner, and only that tenant reads it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from hitl_app import remote_tool, root_agent, worker
from hitl_checks import until
from servers import serve
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from helix_agents.auth import Identity, JwtAuthenticator
from helix_agents.errors import UsageError
from helix_agents.events import Principal, SessionCreated
from helix_agents.server import AgentServer, create_http_app
from helix_agents.server.cli.options import add_auth_arguments, serve_auth
from helix_agents.stores import MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport

pytestmark = pytest.mark.slow

LIMIT = 40
ISSUER = "https://id.example.test"
AUDIENCE = "helix"


def _pair() -> tuple[Any, bytes]:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public


def _token(key: Any, *, kid: str | None = None, alg: str = "RS256", **claims: Any) -> str:
    body = {"iss": ISSUER, "aud": AUDIENCE, "exp": time.time() + 300, **claims}
    headers = {"kid": kid} if kid else None
    return jwt.encode(body, key, algorithm=alg, headers=headers)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_key_file_verifies_tokens_and_anything_else_is_401(tmp_path: Path) -> None:
    private, public = _pair()
    other, _ = _pair()
    key_file = tmp_path / "public.pem"
    key_file.write_bytes(public)
    verifier = JwtAuthenticator(key_file=key_file, issuer=ISSUER, audience=AUDIENCE)
    store = MemoryEventStore()
    app = create_http_app(AgentServer([worker("solo", ("rm",))], store), auth=verifier)
    alice = _token(private, sub="alice", tenant="acme")
    bob = _token(private, sub="bob", tenant="globex", roles=["member"])
    reader = _token(private, sub="rita", tenant="acme", roles="reader")
    refused = {
        "another key": _token(other, sub="alice", tenant="acme"),
        "expired": _token(private, sub="alice", tenant="acme", exp=time.time() - 600),
        "no exp": jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "sub": "a"}, private, "RS256"),
        "another issuer": _token(private, sub="alice", iss="https://evil.test"),
        "another audience": _token(private, sub="alice", aud="other"),
        # The public key as an HMAC secret: an algorithm of the wrong kind is refused.
        "alg confusion": jwt.api_jws.PyJWS().encode(
            json.dumps(
                {"sub": "a", "iss": ISSUER, "aud": AUDIENCE, "exp": time.time() + 60}
            ).encode(),
            b"x" * 32,
            algorithm="HS256",
        ),
        "not a jwt": "garbage",
    }
    with anyio.fail_after(LIMIT):
        async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as http:
            for why, token in refused.items():
                answer = await http.get("/sessions", headers=_bearer(token))
                assert answer.status_code == 401, why
                assert answer.json()["code"] == "UNAUTHORIZED"
            body = {"sessionId": "jwt-1", "agentType": "solo", "message": "hi"}
            started = await http.post("/start", json=body, headers=_bearer(alice))
            assert started.status_code == 200, started.text
            await until(store, "jwt-1", lambda state: state.status == "paused")
            assert (
                await http.get("/status?sessionId=jwt-1", headers=_bearer(bob))
            ).status_code == 404
            seen = await http.get("/status?sessionId=jwt-1", headers=_bearer(reader))
            assert seen.status_code == 200
            stop = await http.post("/abort", json={"sessionId": "jwt-1"}, headers=_bearer(reader))
            assert stop.status_code == 403
    created = (await store.read("jwt-1"))[0]
    assert isinstance(created, SessionCreated)
    assert created.owner == Principal(tenant="acme", user="alice")


def _jwks_app(keys: list[dict[str, Any]]) -> Starlette:
    async def jwks(request: Any) -> JSONResponse:
        return JSONResponse({"keys": keys})

    return Starlette(routes=[Route("/jwks.json", jwks)])


def _jwk(public_pem: bytes, kid: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(
        jwt.algorithms.RSAAlgorithm.to_jwk(serialization.load_pem_public_key(public_pem))
    )
    return {**found, "kid": kid, "use": "sig", "alg": "RS256"}


async def test_a_remote_child_over_http_belongs_to_its_parents_owner_with_one_jwks() -> None:
    """Gateway A (the parent) starts a child on gateway B; both verify with one JWKS."""
    private, public = _pair()
    keys = [_jwk(public, "k1")]
    alice = _token(private, kid="k1", sub="alice", tenant="acme")
    bob = _token(private, kid="k1", sub="bob", tenant="globex")
    service = _token(private, kid="k1", sub="gateway-a", roles=["admin"])
    a_store, b_store = MemoryEventStore(), MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with serve(_jwks_app(keys)) as idp:

            def verifier() -> JwtAuthenticator:
                return JwtAuthenticator(
                    jwks_url=f"{idp}/jwks.json", issuer=ISSUER, audience=AUDIENCE
                )

            b_app = create_http_app(
                AgentServer([worker("child", ("rm",))], b_store), auth=verifier()
            )
            async with (
                serve(b_app) as b_url,
                HttpRemoteAgentTransport(
                    b_url, headers=_bearer(service), max_retries=2, retry_base_delay=0.05
                ) as to_b,
            ):
                root = root_agent(remote_tool("child", to_b))
                a_app = create_http_app(AgentServer([root], a_store), auth=verifier())
                async with (
                    serve(a_app) as a_url,
                    httpx.AsyncClient(timeout=10) as http,
                ):
                    body = {"sessionId": "fam-r", "agentType": "root", "message": "hi"}
                    started = await http.post(f"{a_url}/start", json=body, headers=_bearer(alice))
                    assert started.status_code == 200, started.text
                    await until(a_store, "fam-r", lambda state: state.status == "paused")
                    (child,) = await b_store.list_sessions()
                    mine = await http.get(
                        f"{b_url}/status?sessionId={child}", headers=_bearer(alice)
                    )
                    assert mine.status_code == 200, mine.text
                    theirs = await http.get(
                        f"{b_url}/status?sessionId={child}", headers=_bearer(bob)
                    )
                    assert theirs.status_code == 404
                    listed = await http.get(f"{b_url}/sessions", headers=_bearer(bob))
                    assert listed.json()["sessions"] == []
                    # A service that is not an admin may not start for someone else.
                    member = _token(private, kid="k1", sub="svc", tenant="acme")
                    posed = await http.post(
                        f"{b_url}/start",
                        json={
                            "sessionId": "posed-1",
                            "agentType": "child",
                            "message": "x",
                            "owner": {"tenant": "acme", "user": "alice"},
                        },
                        headers=_bearer(member),
                    )
                    assert posed.status_code == 403, posed.text
    for log in (await a_store.read("fam-r"), await b_store.read(child)):
        created = log[0]
        assert isinstance(created, SessionCreated)
        assert created.owner == Principal(tenant="acme", user="alice")


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_auth_arguments(parser)
    return parser.parse_args(list(argv))


async def test_serve_options_build_the_authenticator(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("a-shared-secret-of-32-bytes-long!\n")
    lines = ["plain", "tok-a user=alice tenant=acme roles=reader,auditor"]
    auth = serve_auth(lines, _args())
    assert auth == {
        "plain": Identity(roles=frozenset({"admin"})),
        "tok-a": Identity(user="alice", tenant="acme", roles=frozenset({"reader", "auditor"})),
    }
    both = serve_auth(lines, _args("--jwt-key", str(secret), "--jwt-claims", "tenant=org"))
    token = jwt.encode(
        {"sub": "ada", "org": "acme", "exp": time.time() + 60},
        "a-shared-secret-of-32-bytes-long!",
        "HS256",
    )
    assert both is not None
    assert not isinstance(both, dict | list)
    found = await both.authenticate(_bearer(token))  # type: ignore[union-attr]
    assert found == Identity(user="ada", tenant="acme")
    assert await both.authenticate(_bearer("tok-a")) == auth["tok-a"]  # type: ignore[union-attr, index]
    for bad_lines, argv in (
        (["tok role=x"], ()),
        (["tok user=a user=b"], ()),
        (None, ("--jwt-key", str(secret), "--jwks", "http://127.0.0.1:1/j")),
        (None, ("--jwt-issuer", "x")),
        (None, ("--jwt-key", str(secret), "--jwt-claims", "who=sub")),
        (None, ("--jwt-key", str(tmp_path / "absent"))),
    ):
        with pytest.raises(UsageError):
            serve_auth(bad_lines, _args(*argv))
