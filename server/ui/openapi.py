"""The inspector's entries in the OpenAPI document (``server/gateway/openapi.py`` merges them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from helix_agents.log.diff import LogDiff

from .routes import ASSETS
from .snapshot import Snapshot

__all__ = ["UI_MODELS", "ui_paths"]

UI_MODELS: list[type[msgspec.Struct]] = [Snapshot, LogDiff]
"""The answers' structs, for the document's components."""


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


def ui_paths(
    session_query: Callable[..., list[dict[str, Any]]],
    answers: Callable[..., dict[str, Any]],
) -> dict[str, Any]:
    """The inspector's paths, built with the document's own helpers."""
    page = {
        "200": {
            "description": "the inspector page",
            "content": {"text/html": {"schema": {"type": "string"}}},
        }
    }
    return {
        "/ui": {
            "get": {"summary": "The inspector page (no auth: it holds no data)", "responses": page}
        },
        "/ui/assets/{name}": {
            "get": {
                "summary": "The page's script and style sheet (no auth)",
                "parameters": [
                    {
                        "name": "name",
                        "in": "path",
                        "required": True,
                        # The files there are: a generator that knows them tries them, and an
                        # unconstrained string (most unfit for a path) starved schemathesis.
                        "schema": {"type": "string", "enum": sorted(ASSETS)},
                    }
                ],
                "responses": {
                    "200": {
                        "description": "the file",
                        "content": {
                            "text/javascript": {"schema": {"type": "string"}},
                            "text/css": {"schema": {"type": "string"}},
                        },
                    },
                    "404": {"description": "NOT_FOUND: no such asset"},
                },
            }
        },
        "/ui/diff": {
            "get": {
                "summary": "The page comparing two branches, ?a=&b= (no auth: it holds no data)",
                "responses": page,
            }
        },
        "/diff": {
            "get": {
                "summary": "Two sessions compared from their common prefix (specs/evals.md)",
                "parameters": [
                    {
                        "name": name,
                        "in": "query",
                        "required": True,
                        "schema": {"$ref": "#/components/schemas/SessionId"},
                        "description": f"the {side} session",
                    }
                    for name, side in (("a", "first"), ("b", "second"))
                ],
                "responses": answers(
                    "LogDiff", "the common prefix, where they part, and what each side did after"
                ),
            }
        },
        "/snapshot": {
            "get": {
                "summary": "A session tree as it was at a sequence of the root's log (specs/ui.md)",
                "parameters": session_query(
                    _query(
                        "at",
                        {"type": "integer", "minimum": 1, "maximum": 10**19 - 1},
                        "the sequence to show (default and beyond the end: the latest)",
                    )
                ),
                "responses": answers("Snapshot", "the tree at `at`, and the log's latest sequence"),
            }
        },
    }
