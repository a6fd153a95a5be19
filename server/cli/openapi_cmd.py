"""``helix-agents openapi``: print the protocol's OpenAPI document."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from helix_agents.server.gateway.openapi import openapi_document

__all__ = ["add_openapi_command", "run_openapi"]


def run_openapi() -> None:
    """Print the protocol's OpenAPI document (what ``specs/openapi.json`` holds)."""
    sys.stdout.write(json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n")


def _openapi_command(args: argparse.Namespace) -> int:
    run_openapi()
    return 0


def add_openapi_command(commands: Any) -> None:
    """Add ``openapi`` to the CLI's subcommands."""
    openapi = commands.add_parser(
        "openapi", help="print the protocol's OpenAPI document", description=run_openapi.__doc__
    )
    openapi.set_defaults(handler=_openapi_command)
