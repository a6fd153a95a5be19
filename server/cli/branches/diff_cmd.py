"""``helix-agents diff A B``: two sessions side by side from their common prefix.

A and B are session ids in the store, or exported ``.jsonl`` files. The
comparison is ``helix_agents.log.diff``'s; this prints it: the common
prefix, the first event where they part (each side's, as a timeline line),
a two-column table (status, output, model turns, tool calls, tokens, LLM
calls, cost, events), then each side's model turns and tool calls after the
prefix. ``--json`` prints the :class:`~helix_agents.log.diff.LogDiff`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import msgspec

from helix_agents.events import Event
from helix_agents.log.diff import DiffCall, DiffSide, LogDiff
from helix_agents.server.cli.timeline import json_text, one_line, quoted, summarize_event

__all__ = ["add_diff_command", "diff_json", "diff_lines"]

_COLUMN = 44


def add_diff_command(commands: Any, store_help: str) -> argparse.ArgumentParser:
    """Add ``diff`` to the CLI's subcommands; return its parser."""
    diff: argparse.ArgumentParser = commands.add_parser(
        "diff",
        help="compare two sessions (branches of a run) from their common prefix",
        description="Compare two sessions from their common prefix: the first event where they "
        "part, then each side's model turns, tool calls, output, usage and cost. Events are "
        "compared without their envelope and fresh ids (each side's session id and tool call "
        "ids are renamed in order), so a branch that did the same under other ids matches.",
        epilog="examples:\n  helix-agents diff SESSION SESSION.eval-1a2b3c4d\n"
        "  helix-agents diff a.jsonl b.jsonl --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    diff.add_argument(
        "a",
        metavar="A",
        help="a session id in the store, or a .jsonl file (as for replay; with --store, a "
        "path holding a '/', e.g. ./a.jsonl)",
    )
    diff.add_argument("b", metavar="B", help="the other session id or .jsonl file")
    diff.add_argument("--store", metavar="URL", help=store_help)
    diff.add_argument("--json", action="store_true", help="print the comparison as one JSON object")
    return diff


def _cell(text: str) -> str:
    text = one_line(text)
    return text if len(text) <= _COLUMN else text[: _COLUMN - 3] + "..."


def _side_lines(name: str, side: DiffSide) -> list[str]:
    lines = [f"{name} ({side.session_id}) after the prefix:"]
    if not side.turns and not side.tool_calls:
        lines.append("  no model turn or tool call")
    entries: list[tuple[int, list[str]]] = []
    shown: set[str] = set()
    for turn in side.turns:
        said = quoted(turn.text, 100) if turn.text else "(no text)"
        entry = [f"  seq {turn.seq}  model: {said}"]
        for call in side.tool_calls:
            if call.seq == turn.seq and call.tool_call_id not in shown:
                shown.add(call.tool_call_id)
                entry.append(_call_line(call))
        entries.append((turn.seq, entry))
    for call in side.tool_calls:
        if call.tool_call_id not in shown:  # called in the prefix, its result after it
            entries.append((call.seq, [f"  seq {call.seq}  result of an earlier call:"]))
            entries[-1][1].append(_call_line(call))
    for _, entry in sorted(entries, key=lambda item: item[0]):
        lines.extend(entry)
    return [one_line(line) for line in lines]


def _call_line(call: DiffCall) -> str:
    outcome = "no result" if call.result is None else quoted(call.result, 80)
    error = " (error)" if call.is_error else ""
    return f"    {call.name}({json_text(call.arguments, 80)}) -> {outcome}{error}"


def _cost(usd: float | None) -> str:
    return "unknown (no price)" if usd is None else f"${usd:.6f}"


def diff_lines(diff: LogDiff, a: Sequence[Event], b: Sequence[Event]) -> list[str]:
    """The text ``diff`` prints for ``diff`` of logs ``a`` and ``b``."""
    lines = [f"diff {diff.a.session_id} {diff.b.session_id}"]
    if diff.same:
        lines.append(f"  the same: {diff.common} events, nothing parts them")
    else:
        lines.append(
            f"  common prefix: {diff.common} events (A to seq {diff.common_seq_a}, "
            f"B to seq {diff.common_seq_b})"
        )
        lines.append("  parted at:")
        for name, side, log in (("A", diff.a, a), ("B", diff.b, b)):
            event = next((e for e in log if e.seq == side.parted_seq), None)
            shown = "(its log ends here)" if event is None else summarize_event(event)
            where = "end" if side.parted_seq is None else f"seq {side.parted_seq}"
            lines.append(f"    {name} {where:<8} {side.parted_type or '':<22} {shown}")
            if side.parted_excerpt:
                lines.append(one_line(f"      {side.parted_excerpt}"))
    rows = [
        ("", "A", "B"),
        ("status", diff.a.status, diff.b.status),
        ("output", json_text(diff.a.output, None), json_text(diff.b.output, None)),
        ("error", diff.a.error or "-", diff.b.error or "-"),
        ("model turns after", str(len(diff.a.turns)), str(len(diff.b.turns))),
        (
            "tool calls after",
            ", ".join(call.name for call in diff.a.tool_calls) or "none",
            ", ".join(call.name for call in diff.b.tool_calls) or "none",
        ),
        (
            "tokens in / out",
            f"{diff.a.usage.input_tokens} / {diff.a.usage.output_tokens}",
            f"{diff.b.usage.input_tokens} / {diff.b.usage.output_tokens}",
        ),
        ("llm calls", str(diff.a.usage.llm_calls), str(diff.b.usage.llm_calls)),
        ("cost", _cost(diff.a.cost_usd), _cost(diff.b.cost_usd)),
        ("events", str(diff.a.events), str(diff.b.events)),
    ]
    for label, left, right in rows:
        lines.append(f"  {label:<18} {_cell(left):<{_COLUMN}}  {_cell(right)}".rstrip())
    if not diff.same:
        lines.append("")
        lines.extend(_side_lines("A", diff.a))
        lines.extend(_side_lines("B", diff.b))
    return lines


def diff_json(diff: LogDiff) -> bytes:
    """``diff --json``: the comparison as one JSON object (as ``GET /diff`` answers it)."""
    return msgspec.json.encode(diff)
