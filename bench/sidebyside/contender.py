"""One contender's run, in a process of its own: ``python contender.py JOB`` (JSON).

The job names the contender (``KINDS``), the steps per session, the sessions,
a prefix for session ids, a scratch folder, and the engine's place (a DBOS
system database URL, or a Temporal address and task queue). The last line
printed is the result: ``RESULT {...}`` (the sessions' seconds, and for
helix's durable contenders the itemized profile); or ``skipped`` when
Pydantic AI is not installed (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

# bench/ on the path (its helpers, and this folder as the package ``sidebyside``).
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

import anyio

MARK = "RESULT "
"""What starts the line carrying the result."""
SKIPPED = "skipped (pip install -e '.[bench]')"
"""A Pydantic AI contender's result when Pydantic AI is not installed."""

Run = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def _runner(kind: str) -> Run:
    if kind == "helix_builtin":
        from sidebyside.plain_side import helix_builtin

        return helix_builtin
    if kind == "pai_plain":
        from sidebyside.plain_side import pai_plain

        return pai_plain
    if kind == "helix_dbos":
        from sidebyside.dbos_side import helix_dbos

        return helix_dbos
    if kind == "pai_dbos":
        from sidebyside.dbos_side import pai_dbos

        return pai_dbos
    if kind == "bare_dbos":
        from sidebyside.dbos_side import bare_dbos

        return bare_dbos
    if kind == "helix_temporal":
        from sidebyside.temporal_side import helix_temporal

        return helix_temporal
    if kind == "pai_temporal":
        from sidebyside.temporal_side import pai_temporal

        return pai_temporal
    from sidebyside.temporal_side import bare_temporal

    return bare_temporal


KINDS = (
    "helix_builtin",
    "pai_plain",
    "helix_dbos",
    "pai_dbos",
    "bare_dbos",
    "helix_temporal",
    "pai_temporal",
    "bare_temporal",
)
"""The contenders a job may name."""


def main(argv: list[str]) -> int:
    """Run the job given as JSON; print ``RESULT`` and its result."""
    job: dict[str, Any] = json.loads(argv[0])
    kind = job["kind"]
    if kind not in KINDS:
        raise SystemExit(f"unknown contender {kind!r}; one of {', '.join(KINDS)}")
    if kind.startswith("pai_") and importlib.util.find_spec("pydantic_ai") is None:
        result: dict[str, Any] = {"skipped": SKIPPED}
    else:
        result = anyio.run(_runner(kind), job)
    print(MARK + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
