"""``helix-agents eval MODULE:ATTR``: recorded sessions re-run against today's agents, scored.

The cases are chosen by the session search (``--search``, ``--metadata``,
the time ranges, ``--status``, ``--agent``) or named (``--session``, or
``--file`` for exported ``.jsonl`` logs); each is re-run as a branch in the
store by ``helix_agents.testing.evals``, scored, and reported as a table
(default), ``--json``, and ``--junit FILE``. The exit status is 0 when every
case passed, :data:`EVAL_FAILED` when some case failed or could not run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec

from helix_agents.agents import AgentRegistry
from helix_agents.errors import HelixError, UsageError
from helix_agents.log.pricing import Prices
from helix_agents.models.base import LLMAdapter
from helix_agents.models.names import PROVIDERS, model_from_name
from helix_agents.server.agent_server import AgentServer
from helix_agents.server.cli.options import store_url
from helix_agents.server.cli.sessions import STATUSES, session_query
from helix_agents.server.cli.target import agents_of, load_target
from helix_agents.stores import open_store
from helix_agents.testing.evals import (
    BUILT_IN_SCORERS,
    EvalReport,
    Scorer,
    cases_from_files,
    cases_from_store,
    report_json,
    report_junit,
    report_lines,
    run_eval,
)

__all__ = ["EVAL_FAILED", "add_eval_command", "run_eval_command"]

EVAL_FAILED = 4
"""``eval``'s exit status when some case failed a score or could not run."""


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def add_eval_command(commands: Any, store_help: str) -> argparse.ArgumentParser:
    """Add ``eval`` to the CLI's subcommands; return its parser."""
    cmd: argparse.ArgumentParser = commands.add_parser(
        "eval",
        help="re-run recorded sessions against today's agents and score them",
        description="Re-run recorded sessions as branches in the store (SESSION.eval-LABEL): "
        "each case's recorded input, run by the agents of MODULE:ATTR (or --model), its tools "
        "and remote children answered from the recording where the call matches (same agent, "
        "tool and arguments), live where --live names them. Scores: output_equal, "
        "output_valid, same_tool_calls, token_delta, cost_delta, and yours (--scorer).",
        epilog=f"exit status: 0 every case passed, {EVAL_FAILED} some case failed or could not "
        "run, 1 the eval could not run (no cases, unreadable store), 2 a bad command line\n"
        "examples:\n  helix-agents eval app:agents --metadata env=prod --junit eval.xml\n"
        "  helix-agents eval app:agents --file run1.jsonl --model openai:gpt-4o-mini",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cmd.add_argument("target", metavar="MODULE:ATTR", help="today's agents (or an AgentServer)")
    cmd.add_argument(
        "--session",
        dest="sessions",
        action="append",
        default=[],
        metavar="SESSION_ID",
        help="this recorded session is a case (repeatable; default: the search's sessions)",
    )
    cmd.add_argument("--store", metavar="URL", help=store_help)
    cmd.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="FILE.jsonl",
        help="a case from an exported log (repeatable; a child's file answers its tools); "
        "the branches go to the store (default: none, the store's sessions)",
    )
    cmd.add_argument(
        "--search",
        metavar="TEXT",
        help="cases whose text has every word of TEXT (default: no text search)",
    )
    cmd.add_argument(
        "--metadata",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="cases whose metadata KEY equals VALUE (repeatable; default: none)",
    )
    for flag in ("--created-after", "--created-before", "--updated-after", "--updated-before"):
        cmd.add_argument(
            flag, metavar="TIME", help="a time bound, as for sessions (default: no bound)"
        )
    cmd.add_argument("--status", choices=STATUSES, help="cases with this status (default: any)")
    cmd.add_argument("--agent", metavar="TYPE", help="cases of this agent type (default: any)")
    cmd.add_argument(
        "--limit", type=_count, default=100, metavar="N", help="at most N cases (default: 100)"
    )
    cmd.add_argument(
        "--model",
        metavar="PROVIDER:MODEL|MODULE:ATTR",
        help="answer every model call with this model (default: each agent's own)",
    )
    cmd.add_argument(
        "--live",
        action="append",
        default=[],
        metavar="TOOL",
        help="run this tool (or subagent__NAME) for real (repeatable; default: every call "
        "answered from the recording, a call it cannot answer fails)",
    )
    cmd.add_argument(
        "--scorer",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="a scorer of yours, a callable of a CaseRun (repeatable; after the built-in ones; "
        "default: the built-in ones only)",
    )
    cmd.add_argument(
        "--prices",
        metavar="FILE",
        help="prices for the cost scores, as serve's (default: the built-in prices)",
    )
    cmd.add_argument(
        "--label",
        metavar="LABEL",
        help="name the branches SESSION.eval-LABEL (default: 8 fresh hex digits)",
    )
    cmd.add_argument("--json", action="store_true", help="print the report as one JSON object")
    cmd.add_argument(
        "--junit", metavar="FILE", help="also write the report as JUnit XML (default: none)"
    )
    return cmd


def _model(spec: str) -> LLMAdapter:
    provider = spec.partition(":")[0]
    if provider in PROVIDERS:
        return model_from_name(spec)
    found = load_target(spec)
    if not callable(getattr(found, "stream", None)):
        raise UsageError(f"--model {spec}: not a model name (PROVIDER:MODEL) nor an LLM adapter")
    return found  # type: ignore[no-any-return]


def _scorer(spec: str) -> Scorer:
    found = load_target(spec)
    if not callable(found):
        raise UsageError(f"--scorer {spec} is not callable")
    return found  # type: ignore[no-any-return]


async def _run(args: argparse.Namespace, url: str, registry: AgentRegistry) -> EvalReport:
    model = _model(args.model) if args.model else None
    scorers = [*BUILT_IN_SCORERS, *(_scorer(spec) for spec in args.scorer)]
    prices = Prices.from_file(args.prices) if args.prices else None
    store = await open_store(url)
    try:
        if args.file:
            cases = cases_from_files(args.file)
        else:
            query = session_query(args)
            if args.agent:
                query = msgspec.structs.replace(query, agent_type=args.agent)
            cases = await cases_from_store(
                store,
                query=query,
                session_ids=args.sessions,
                status=args.status,
                limit=args.limit,
                source=url,
            )
        if not cases:
            raise HelixError(f"no recorded sessions to evaluate in {url} match")
        report = await run_eval(
            store,
            registry,
            cases,
            model=model,
            live=args.live,
            scorers=scorers,
            prices=prices,
            label=args.label,
        )
    finally:
        await store.close()
    report.agents = args.target
    report.model = args.model
    return report


def run_eval_command(args: argparse.Namespace, check_store: Callable[[str], None]) -> int:
    """Run ``eval``; print the report; return the exit status."""
    if args.file and args.sessions:
        raise UsageError("give --session or --file, not both")
    url = store_url(args.store)
    if not args.file:
        check_store(url)
    target = load_target(args.target)
    agents = (
        target.executor.registry
        if isinstance(target, AgentServer)
        else AgentRegistry(agents_of(target, args.target))
    )
    report = anyio.run(_run, args, url, agents)
    if args.junit:
        try:
            Path(args.junit).write_text(report_junit(report), encoding="utf-8")
        except OSError as exc:
            raise HelixError(f"cannot write {args.junit}: {exc.strerror or exc}") from exc
    if args.json:
        sys.stdout.write(report_json(report).decode() + "\n")
    else:
        print("\n".join(report_lines(report)))
    return 0 if report.ok else EVAL_FAILED
