"""Two branches of a run compared: their common prefix, where they part, what each did after.

Two session logs (a session and its fork, an eval case and the recording it
came from, a session and its ``replay --rerun``) are compared event by event
after *normalizing* each event: the envelope (session id, seq, time), the ids
a run draws afresh (run ids, host ids, trace context) are left out, each
side's own session id is written ``<session>`` and its tool call ids
``<call N>`` in the order they first appear, so a branch that made the same
calls under other ids still matches. A fork's own records are left out too:
its ``session_forked`` marker, the run that took it live (a ``run_started``
resume right after it) and the ``forked_from``/``forked_at`` metadata of its
``session_created``. The common prefix is the longest run of
equal events from the start; the first event after it, on either side, is
where the branches part. After it, each side's model turns, tool calls and
results, final status and output, usage and cost are listed for comparison.

Specified in specs/evals.md ("Diff").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from helix_agents.branches.copy import FORKED_AT_KEY, FORKED_FROM_KEY
from helix_agents.events import Event, MessageAppended, RunStarted, SessionCreated
from helix_agents.log.pricing import Prices
from helix_agents.log.projections import project_state
from helix_agents.log.state import UsageTotals
from helix_agents.messages import AssistantMessage, ToolResultMessage

__all__ = [
    "IGNORED_EVENT_TYPES",
    "DiffCall",
    "DiffSide",
    "DiffTurn",
    "LogDiff",
    "diff_logs",
    "first_user_turn",
    "normalized",
]

_DROPPED = frozenset({"sessionId", "seq", "ts", "runId", "hostId", "previousHostId"})
_DROPPED_CREATED = frozenset({"traceContext", "rootSessionId", "ancestors"})
IGNORED_EVENT_TYPES = frozenset({"host_claimed", "session_forked"})
"""Event types left out of the comparison: who ran it, and the branch's own origin record."""


class DiffCall(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One tool call after the prefix: its name, arguments, and result (None: no result yet)."""

    seq: int
    tool_call_id: str
    name: str
    arguments: Any = None
    result: str | None = None
    is_error: bool = False


class DiffTurn(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One model turn after the prefix: its text and the tools it called."""

    seq: int
    text: str
    tool_calls: list[str] = []


class DiffSide(msgspec.Struct, kw_only=True, rename="camel"):
    """One branch: its session, what it did after the common prefix, how it ended, its usage."""

    session_id: str
    events: int
    """Events in its log."""
    parted_seq: int | None
    """The seq of its first event after the common prefix (None: the log ends there)."""
    parted_type: str | None
    """That event's type."""
    parted_excerpt: str | None = None
    """Its normalized JSON from a little before the first character where the sides differ."""
    turns: list[DiffTurn] = []
    tool_calls: list[DiffCall] = []
    status: str = ""
    output: Any = None
    error: str | None = None
    usage: UsageTotals = msgspec.field(default_factory=UsageTotals)
    """This session's own usage (the whole log, prefix included)."""
    cost_usd: float | None = 0.0
    """What its tokens cost (``None``: a model without a price)."""


class LogDiff(msgspec.Struct, kw_only=True, rename="camel"):
    """Two branches from their common prefix (``helix-agents diff --json`` prints this)."""

    a: DiffSide
    b: DiffSide
    common: int
    """How many events (after normalizing, ignored types left out) the two share from the start."""
    common_seq_a: int
    """The seq of the last event of the common prefix in ``a`` (0: none shared)."""
    common_seq_b: int
    """The same in ``b``."""
    same: bool
    """Nothing parts them: equal logs, as far as normalizing sees."""
    parted: bool
    """The branches part somewhere (``not same``)."""


def _call_ids(events: Sequence[Event]) -> dict[str, str]:
    ids: dict[str, str] = {}
    for event in events:
        if isinstance(event, MessageAppended) and isinstance(event.message, AssistantMessage):
            for call in event.message.tool_calls:
                ids.setdefault(call.id, f"<call {len(ids) + 1}>")
    return ids


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in _DROPPED}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def normalized(events: Sequence[Event]) -> list[tuple[Event, str]]:
    """Each event kept for comparison with its normalized JSON text (see the module's doc)."""
    if not events:
        return []
    session_id = events[0].session_id
    calls = _call_ids(events)
    # Longest first: an id that contains another (a child's id holds its parent's) wins.
    swaps = sorted([(session_id, "<session>"), *calls.items()], key=lambda p: -len(p[0]))
    kept: list[tuple[Event, str]] = []
    forked = False
    for event in events:
        raw = msgspec.to_builtins(event)
        going_live = forked and isinstance(event, RunStarted) and event.mode == "resume"
        forked = raw.get("type") == "session_forked"
        if forked or going_live or raw.get("type") in IGNORED_EVENT_TYPES:
            continue
        data = _strip(raw)
        if isinstance(event, SessionCreated):
            for key in _DROPPED_CREATED:
                data.pop(key, None)
            for key in (FORKED_FROM_KEY, FORKED_AT_KEY):
                data.get("metadata", {}).pop(key, None)
        text = msgspec.json.encode(data).decode()
        for old, new in swaps:
            if old:
                text = text.replace(msgspec.json.encode(old).decode()[1:-1], new)
        kept.append((event, text))
    return kept


def _excerpt(text: str | None, other: str | None) -> str | None:
    if text is None:
        return None
    other = other or ""
    at = next(
        (i for i, (x, y) in enumerate(zip(text, other, strict=False)) if x != y),
        min(len(text), len(other)),
    )
    start = max(0, at - 30)
    return ("..." if start else "") + text[start : at + 90] + ("..." if at + 90 < len(text) else "")


def _side(
    events: Sequence[Event],
    kept: list[tuple[Event, str]],
    common: int,
    prices: Prices,
    other: list[tuple[Event, str]],
) -> DiffSide:
    state = project_state(events)
    after = [event for event, _ in kept[common:]]
    first = after[0] if after else None
    turns: list[DiffTurn] = []
    calls: dict[str, DiffCall] = {}
    asked = {  # every call's arguments, the prefix's too (a result may come after it)
        call.id: call.arguments
        for event in events
        if isinstance(event, MessageAppended) and isinstance(event.message, AssistantMessage)
        for call in event.message.tool_calls
    }
    for event in after:
        if not isinstance(event, MessageAppended):
            continue
        message = event.message
        if isinstance(message, AssistantMessage):
            turns.append(
                DiffTurn(
                    seq=event.seq,
                    text=message.content,
                    tool_calls=[call.name for call in message.tool_calls],
                )
            )
            for call in message.tool_calls:
                calls[call.id] = DiffCall(
                    seq=event.seq, tool_call_id=call.id, name=call.name, arguments=call.arguments
                )
        elif isinstance(message, ToolResultMessage):
            known = calls.get(message.tool_call_id)
            calls[message.tool_call_id] = msgspec.structs.replace(
                known
                or DiffCall(
                    seq=event.seq,
                    tool_call_id=message.tool_call_id,
                    name=message.tool_name,
                    arguments=asked.get(message.tool_call_id),
                ),
                result=message.content,
                is_error=message.is_error,
            )
    return DiffSide(
        session_id=state.session_id,
        events=len(events),
        parted_seq=None if first is None else first.seq,
        parted_type=None if first is None else msgspec.to_builtins(first)["type"],
        parted_excerpt=_excerpt(
            kept[common][1] if first is not None else None,
            other[common][1] if common < len(other) else None,
        ),
        turns=turns,
        tool_calls=list(calls.values()),
        status=state.status,
        output=state.output,
        error=state.error,
        usage=state.usage,
        cost_usd=prices.cost(state.usage, state.agent_type).usd,
    )


def diff_logs(a: Sequence[Event], b: Sequence[Event], *, prices: Prices | None = None) -> LogDiff:
    """Compare two session logs from their common prefix (``prices``: the built-in defaults).

    Raises:
        ValueError: a log is empty.
        CorruptLogError: a log does not fold.
    """
    if not a or not b:
        raise ValueError("a diff needs two non-empty logs")
    prices = Prices() if prices is None else prices
    kept_a, kept_b = normalized(a), normalized(b)
    common = 0
    for (_, text_a), (_, text_b) in zip(kept_a, kept_b, strict=False):
        if text_a != text_b:
            break
        common += 1
    same = common == len(kept_a) == len(kept_b)
    return LogDiff(
        a=_side(a, kept_a, common, prices, kept_b),
        b=_side(b, kept_b, common, prices, kept_a),
        common=common,
        common_seq_a=kept_a[common - 1][0].seq if common else 0,
        common_seq_b=kept_b[common - 1][0].seq if common else 0,
        same=same,
        parted=not same,
    )


def first_user_turn(events: Sequence[Event]) -> int:
    """The seq of the first event that gives the session a user's input (its first run's start)."""
    for event in events:
        if isinstance(event, RunStarted):
            return event.seq
    return events[0].seq if events else 0
