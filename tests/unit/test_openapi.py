"""specs/openapi.json must be what the code generates, and the app must serve exactly its routes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from starlette.routing import Route

from helix_agents.errors import AgentServerError
from helix_agents.server import AgentServer, create_http_app
from helix_agents.server.gateway.openapi import openapi_document
from helix_agents.server.gateway.routes import ENDPOINTS
from helix_agents.stores import MemoryEventStore
from helix_agents.tracing import checked_trace_context

SPEC = Path(__file__).parents[2] / "specs" / "openapi.json"
REGENERATE = "python -m helix_agents.server openapi > specs/openapi.json"


def test_committed_openapi_matches_the_code() -> None:
    generated = json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"
    assert SPEC.read_text(encoding="utf-8") == generated, f"regenerate it: {REGENERATE}"


A2A_ROUTES = {
    ("/.well-known/agent-card.json", "get"),
    ("/a2a", "post"),
    ("/a2a/{agent_type}", "post"),
    ("/a2a/{agent_type}/.well-known/agent-card.json", "get"),
}
"""The A2A bridge's routes: JSON-RPC and agent cards, specified in specs/a2a.md, not here."""


def test_app_routes_are_the_documented_ones() -> None:
    """A route the app serves outside the table (but the A2A bridge's) fails here."""
    app = create_http_app(AgentServer([], MemoryEventStore()))
    served = {
        (route.path, method.lower())
        for route in app.routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"
    }
    assert served >= A2A_ROUTES  # the a2a extra is part of dev: its routes are mounted
    served -= A2A_ROUTES
    documented = {
        (path, method) for path, item in openapi_document()["paths"].items() for method in item
    }
    assert served == documented


def test_the_document_is_the_route_table() -> None:
    """Each route once; the document's paths are the table's, in its order."""
    table = [(endpoint.path, endpoint.method.lower()) for endpoint in ENDPOINTS]
    assert len(set(table)) == len(table)
    for auth in (True, False):
        paths = openapi_document(auth=auth)["paths"]
        documented = [(path, method) for path, item in paths.items() for method in item]
        assert sorted(documented) == sorted(table)
        assert list(paths) == list(dict.fromkeys(path for path, _ in table))


def test_the_open_routes_are_the_ones_documented_without_security() -> None:
    for endpoint in ENDPOINTS:
        declared = endpoint.operation(auth=True)["security"]
        assert (declared == []) == endpoint.open, endpoint.path


def _refs(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [ref for value in node.values() for ref in _refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _refs(value)]
    return []


def test_every_reference_resolves() -> None:
    for auth in (True, False):
        document = openapi_document(auth=auth)
        refs = _refs(document)
        assert refs
        for ref in refs:
            target: object = document
            for part in ref.removeprefix("#/").split("/"):
                assert isinstance(target, dict)
                assert part in target, ref
                target = target[part]


def test_the_document_without_auth_declares_no_security() -> None:
    document = openapi_document(auth=False)
    assert document["components"]["securitySchemes"] == {}
    for item in document["paths"].values():
        for operation in item.values():
            assert operation.get("security", []) == []
            assert "401" not in operation["responses"]
    protected = openapi_document(auth=True)["paths"]
    assert protected["/start"]["post"]["security"] == [{"bearer": []}]
    assert protected["/health"]["get"]["security"] == []


@pytest.mark.parametrize(
    "context",
    [
        {},
        {"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"},
        {"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01", "tracestate": "k=v, x=y"},
        {"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01-future stuff"},
        {"traceparent": "00-" + "A" * 32 + "-" + "b" * 16 + "-01"},
        {"traceparent": "0-" + "a" * 32 + "-" + "b" * 16 + "-01"},
        {"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01", "tracestate": "é"},
        {"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01", "baggage": "x"},
        {"tracestate": "k=v"},
    ],
)
def test_the_trace_context_schema_is_what_the_server_checks(context: dict[str, str]) -> None:
    schema = openapi_document()["components"]["schemas"]["RemoteStartRequest"]
    empty, full, _ = schema["properties"]["traceContext"]["anyOf"]
    keys = full["properties"]
    fits = not context or (
        "traceparent" in context
        and set(context) <= set(keys)
        and all(re.search(keys[key]["pattern"], value) for key, value in context.items())
    )
    if fits:
        checked_trace_context(context)
    else:
        with pytest.raises(AgentServerError, match=r"^INVALID_REQUEST: traceContext"):
            checked_trace_context(context)
    assert empty == {"type": "object", "maxProperties": 0}
