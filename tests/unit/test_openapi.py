"""specs/openapi.json must be what the code generates, and the app must serve exactly its routes."""

from __future__ import annotations

import json
from pathlib import Path

from starlette.routing import Route

from helix_agents.server import AgentServer, create_http_app
from helix_agents.server.openapi import openapi_document
from helix_agents.stores import MemoryEventStore

SPEC = Path(__file__).parents[2] / "specs" / "openapi.json"
REGENERATE = "python -m helix_agents.server openapi > specs/openapi.json"


def test_committed_openapi_matches_the_code() -> None:
    generated = json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"
    assert SPEC.read_text(encoding="utf-8") == generated, f"regenerate it: {REGENERATE}"


def test_app_routes_are_the_documented_ones() -> None:
    app = create_http_app(AgentServer([], MemoryEventStore()))
    served = {
        (route.path, method.lower())
        for route in app.routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"
    }
    documented = {
        (path, method) for path, item in openapi_document()["paths"].items() for method in item
    }
    assert served == documented
