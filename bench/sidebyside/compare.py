"""Side by side in one run: helix and Pydantic AI, plain and on a durable engine, and the
engine alone (issue 35); ``bench/run.py dbos`` and ``temporal`` call :func:`run_side_by_side`.

The workload: a scripted model calls a tool ``inc`` once per turn, ``steps``
times, then answers (``workload.py``; helix's ``stepper`` from ``_durable``).
Contenders (``contender.py``, each run in a process of its own, the same
python; DBOS is one per process): helix's built-in runtime on a SQLite log;
Pydantic AI plain (in memory); helix on the engine; Pydantic AI's
``DBOSAgent`` (its tool a DBOS step) or ``TemporalAgent`` (its tool an
activity, the default); the engine alone, two no-op steps (DBOS) or regular
activities (Temporal) per agent step. Every round runs each contender once,
round-robin; a contender's figure in a round is its median session over
``steps``; the figures printed are the medians over the rounds. DBOS runs on
a SQLite system database, then on Postgres (a private cluster,
``tests/postgres_cluster.py``, when its binaries exist); Temporal on one dev
server started here, shared (each contender on its own task queue).

Printed per engine: the figures per agent step, each framework's durable
overhead over its own plain run, the ratios the issue targets, helix's
durable step itemized, and on Temporal the history per agent step.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from sidebyside.contender import MARK
from sidebyside.report import dbos_block, temporal_block

__all__ = ["run_side_by_side"]

BENCH = Path(__file__).resolve().parents[1]
CONTENDER = Path(__file__).with_name("contender.py")
PLAIN = ("helix_builtin", "pai_plain")


async def _run(job: dict[str, Any]) -> dict[str, Any]:
    """One contender's run in its own process; its ``RESULT`` line."""
    paths = [str(BENCH), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
    done = await anyio.run_process(
        [sys.executable, str(CONTENDER), json.dumps(job)], env=env, check=False
    )
    for line in reversed(done.stdout.decode().splitlines()):
        if line.startswith(MARK):
            result: dict[str, Any] = json.loads(line[len(MARK) :])
            return result
    tail = done.stderr.decode()[-3000:]
    raise RuntimeError(f"contender {job['kind']} failed ({done.returncode}): {tail}")


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def _merge(results: list[dict[str, Any]], steps: int) -> dict[str, Any] | None:
    """A contender's rounds: its median per agent step (ms), its profile and history medians."""
    if any("skipped" in result for result in results):
        return None
    merged: dict[str, Any] = {
        "ms": _median([statistics.median(r["times"]) / steps * 1000 for r in results]),
        "rounds_ms": [round(statistics.median(r["times"]) / steps * 1000, 2) for r in results],
    }
    for part in ("profile", "history"):
        if part in results[0]:
            merged[part] = {
                key: _median([r[part][key] for r in results])
                if isinstance(value, int | float)
                else value
                for key, value in results[-1][part].items()
            }
    return merged


class _Rounds:
    """The rounds' results by contender key (a kind, or a kind at a place)."""

    def __init__(self, steps: int, count: int, directory: Path) -> None:
        self.steps, self.count, self.directory = steps, count, directory
        self.results: dict[str, list[dict[str, Any]]] = {}

    async def run(self, key: str, kind: str, round_: int, **place: Any) -> None:
        """Run contender ``kind`` once (round ``round_``), filed under ``key``."""
        folder = self.directory / f"{key}-{round_}"
        folder.mkdir()
        prefix = f"{key.replace('_', '')}{round_}"
        job = {"kind": kind, "steps": self.steps, "count": self.count, "prefix": prefix}
        job.update(dir=str(folder), **place)
        self.results.setdefault(key, []).append(await _run(job))

    def merged(self) -> dict[str, dict[str, Any] | None]:
        """Every contender's medians (None: skipped, Pydantic AI not installed)."""
        return {key: _merge(results, self.steps) for key, results in self.results.items()}


def _sizes(quick: bool) -> tuple[int, int, int]:
    """Steps per session, sessions per contender and round, rounds."""
    return (3, 3, 1) if quick else (8, 10, 3)


async def _dbos(quick: bool) -> tuple[list[str], dict[str, Any]]:
    steps, count, rounds = _sizes(quick)
    sys.path.append(str(BENCH.parent / "tests"))
    from postgres_cluster import PostgresCluster, postgres_bin

    places: dict[str, Callable[[str, int], str]] = {}
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        places["sqlite"] = lambda kind, n: f"sqlite:///{root / f'{kind}-{n}.sqlite'}"
        binaries = postgres_bin()
        cluster = pg_place = None
        if binaries is not None:
            # Not under a 0700 temporary folder: as root, the server runs as postgres.
            pg_place = Path(tempfile.mkdtemp(prefix="helix-bench-pg-"))
            cluster = PostgresCluster(pg_place, binaries)
            await anyio.to_thread.run_sync(cluster.start)
            base = cluster.url.rsplit("/", 1)[0]
            places["postgres"] = lambda kind, n: f"{base}/sbs_{kind}_{n}"
        try:
            table = _Rounds(steps, count, root)
            for n in range(rounds):
                for kind in PLAIN:
                    await table.run(kind, kind, n)
                for where, url in places.items():
                    for kind in ("helix_dbos", "pai_dbos", "bare_dbos"):
                        await table.run(f"{kind}_{where}", kind, n, system_database=url(kind, n))
        finally:
            if cluster is not None and pg_place is not None:
                await anyio.to_thread.run_sync(cluster.stop)
                shutil.rmtree(pg_place, ignore_errors=True)
    figures = table.merged()
    lines: list[str] = []
    summary: dict[str, Any] = {"steps": steps, "sessions": count, "rounds": rounds}
    for where in ("sqlite", "postgres"):
        if where not in places:
            lines.append("side by side on DBOS/Postgres: skipped (no PostgreSQL binaries)")
            continue
        block, summary[where] = dbos_block(where, figures, steps, count, rounds)
        lines += block
    return lines, summary


async def _temporal(quick: bool) -> tuple[list[str], dict[str, Any]]:
    from helix_agents.temporal import DevServer

    steps, count, rounds = _sizes(quick)
    with tempfile.TemporaryDirectory() as directory:
        table = _Rounds(steps, count, Path(directory))
        async with DevServer() as dev:
            for n in range(rounds):
                for kind in PLAIN:
                    await table.run(kind, kind, n)
                for kind in ("helix_temporal", "pai_temporal", "bare_temporal"):
                    await table.run(kind, kind, n, address=dev.address, queue=f"{kind}-{n}")
    lines, summary = temporal_block(table.merged(), steps, count, rounds)
    return lines, {"steps": steps, "sessions": count, "rounds": rounds, **summary}


def run_side_by_side(engine: str, quick: bool) -> dict[str, Any]:
    """Run the side-by-side comparison on ``engine`` (``dbos`` or ``temporal``); print its
    lines; return its summary for the JSON line."""
    measure = _dbos if engine == "dbos" else _temporal
    lines, summary = anyio.run(measure, quick)
    for line in lines:
        print(line)
    return summary
