"""Benchmarks: ``python bench/run.py NAME``, NAME one of ``BENCHMARKS`` (``store``... ``models``).

Each benchmark measures our code and a raw baseline in the same run and prints
ratios; its last line is one JSON object. Benchmarks never assert on time and
are not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# The programs the benchmarks serve (bench/served/) import by name, in here and in servers.
sys.path.insert(1, str(Path(__file__).resolve().parent / "served"))
BENCHMARKS = (
    "store",
    "runtime",
    "http",
    "nats",
    "idle",
    "peer",
    "load",
    "interop",
    "temporal",
    "dbos",
    "models",
    "fork",
)


def main(argv: list[str] | None = None) -> int:
    """Run the named benchmark and print its results, the JSON summary last."""
    parser = argparse.ArgumentParser(prog="bench/run.py", description=__doc__)
    parser.add_argument("name", choices=BENCHMARKS)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument(
        "--loop",
        action="append",
        choices=("asyncio", "uvloop"),
        help="peer: the server's event loop (repeat to compare; default: the serve default)",
    )
    parser.add_argument("--big", action="store_true", help="load: also N=3000")
    args = parser.parse_args(argv)
    if args.name == "store":
        from bench_store import run_store

        summary = run_store(quick=args.quick)
    elif args.name == "runtime":
        from bench_runtime import run_runtime

        summary = run_runtime(quick=args.quick)
    elif args.name == "http":
        from bench_http import run_http

        summary = run_http(quick=args.quick)
    elif args.name == "nats":
        from bench_nats import run_nats

        summary = run_nats(quick=args.quick)
    elif args.name == "peer":
        from bench_peer import run_peer

        summary = run_peer(quick=args.quick, loops=tuple(args.loop or ("default",)))
    elif args.name == "interop":
        # each bridge against a direct call, measured in the same run (the a2a and mcp extras)
        from bench_a2a import run_a2a
        from bench_mcp import run_mcp

        summary = {"a2a": run_a2a(quick=args.quick), "mcp": run_mcp(quick=args.quick)}
    elif args.name == "load":
        from bench_load import run_load

        summary = run_load(quick=args.quick, big=args.big)
    elif args.name == "temporal":
        from bench_durable import run_temporal

        summary = run_temporal(quick=args.quick)
    elif args.name == "dbos":
        from bench_durable import run_dbos

        summary = run_dbos(quick=args.quick)
    elif args.name == "fork":
        from bench_runtime import run_fork

        summary = run_fork(quick=args.quick)
    elif args.name == "models":
        from bench_models import run_models

        summary = run_models(quick=args.quick)
    else:
        from bench_idle import run_idle

        summary = run_idle(quick=args.quick)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
