"""The OpenAPI document of the HTTP protocol, built from the gateway's route table.

``python -m helix_agents.server openapi > specs/openapi.json`` writes it; a test
fails when the committed file differs from it. The app serves it at ``GET
/openapi.json`` (without ``security`` when it has no auth). Its paths are
the table's (``routes.py``), each with the operation its entry carries
(``openapi_paths.py``); its components are the protocol's structs as JSON
Schemas (``openapi_components.py``).
"""

from __future__ import annotations

from typing import Any

from .openapi_components import components
from .routes import ENDPOINTS

__all__ = ["openapi_document"]


def openapi_document(*, auth: bool = True) -> dict[str, Any]:
    """The protocol as an OpenAPI 3.1 document.

    Args:
        auth: the server needs a bearer token (every operation but ``/health``
            and ``/openapi.json`` declares ``security`` and a ``401``); the
            committed ``specs/openapi.json`` is the document with auth.
    """
    paths: dict[str, Any] = {}
    for endpoint in ENDPOINTS:
        operation = endpoint.operation(auth=auth)
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = operation
    schemes = {"bearer": {"type": "http", "scheme": "bearer"}} if auth else {}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "helix-agents remote agent protocol",
            "version": "1",
            "description": "specs/http.md. Bodies nested deeper than 64 levels are refused (400).",
        },
        "paths": paths,
        "components": {"schemas": components(), "securitySchemes": schemes},
    }
