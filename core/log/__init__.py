"""The log: the event catalog's storage seam and everything folded from a log.

``store`` (the ``EventStore`` seam), ``codec`` (JSON lines), ``projections``
and ``state`` (pure folds and what they produce), ``streaming`` (a session's
protocol stream), ``session_list`` and ``usage`` (reads across sessions),
``pricing`` (what tokens cost).
May import: ``helix_agents.errors``, ``.events``, ``.messages``, ``.ids``,
``.protocol``, ``._aio``. Nothing here performs a side effect but reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from helix_agents._exports import lazy_exports

if TYPE_CHECKING:
    from helix_agents.log.codec import (
        decode_event as decode_event,
        decode_events as decode_events,
        decode_jsonl as decode_jsonl,
        encode_event as encode_event,
        encode_jsonl as encode_jsonl,
    )
    from helix_agents.log.pricing import (
        Cost as Cost,
        ModelPrice as ModelPrice,
        Prices as Prices,
    )
    from helix_agents.log.projections import (
        SessionProjector as SessionProjector,
        pending_inputs as pending_inputs,
        project_state as project_state,
        project_status as project_status,
        project_stream as project_stream,
        status_of as status_of,
        stream_item as stream_item,
    )
    from helix_agents.log.state import (
        MessageReceipt as MessageReceipt,
        ModelTokens as ModelTokens,
        PendingApproval as PendingApproval,
        PendingClientTool as PendingClientTool,
        PendingTurn as PendingTurn,
        ProblemKind as ProblemKind,
        RunBase as RunBase,
        RunProblem as RunProblem,
        SessionState as SessionState,
        SessionStatus as SessionStatus,
        StatusSnapshot as StatusSnapshot,
        StreamItem as StreamItem,
        SubSessionRef as SubSessionRef,
        SubSessionStatus as SubSessionStatus,
        ToolOwnership as ToolOwnership,
        UsageTotals as UsageTotals,
        WorkspaceFile as WorkspaceFile,
    )
    from helix_agents.log.store import (
        EventStore as EventStore,
    )
    from helix_agents.log.streaming import (
        RUN_ENDING_EVENTS as RUN_ENDING_EVENTS,
        final_event as final_event,
        stream_session as stream_session,
    )
    from helix_agents.log.usage import (
        UsageRollup as UsageRollup,
        get_usage_rollup as get_usage_rollup,
    )

_HOMES = {
    "decode_event": "helix_agents.log.codec",
    "decode_events": "helix_agents.log.codec",
    "decode_jsonl": "helix_agents.log.codec",
    "encode_event": "helix_agents.log.codec",
    "encode_jsonl": "helix_agents.log.codec",
    "Cost": "helix_agents.log.pricing",
    "ModelPrice": "helix_agents.log.pricing",
    "Prices": "helix_agents.log.pricing",
    "SessionProjector": "helix_agents.log.projections",
    "pending_inputs": "helix_agents.log.projections",
    "project_state": "helix_agents.log.projections",
    "project_status": "helix_agents.log.projections",
    "project_stream": "helix_agents.log.projections",
    "status_of": "helix_agents.log.projections",
    "stream_item": "helix_agents.log.projections",
    "MessageReceipt": "helix_agents.log.state",
    "ModelTokens": "helix_agents.log.state",
    "PendingApproval": "helix_agents.log.state",
    "PendingClientTool": "helix_agents.log.state",
    "PendingTurn": "helix_agents.log.state",
    "ProblemKind": "helix_agents.log.state",
    "RunBase": "helix_agents.log.state",
    "RunProblem": "helix_agents.log.state",
    "SessionState": "helix_agents.log.state",
    "SessionStatus": "helix_agents.log.state",
    "StatusSnapshot": "helix_agents.log.state",
    "StreamItem": "helix_agents.log.state",
    "SubSessionRef": "helix_agents.log.state",
    "SubSessionStatus": "helix_agents.log.state",
    "ToolOwnership": "helix_agents.log.state",
    "UsageTotals": "helix_agents.log.state",
    "WorkspaceFile": "helix_agents.log.state",
    "EventStore": "helix_agents.log.store",
    "RUN_ENDING_EVENTS": "helix_agents.log.streaming",
    "final_event": "helix_agents.log.streaming",
    "stream_session": "helix_agents.log.streaming",
    "UsageRollup": "helix_agents.log.usage",
    "get_usage_rollup": "helix_agents.log.usage",
}
__all__ = [
    "decode_event",
    "decode_events",
    "decode_jsonl",
    "encode_event",
    "encode_jsonl",
    "Cost",
    "ModelPrice",
    "Prices",
    "SessionProjector",
    "pending_inputs",
    "project_state",
    "project_status",
    "project_stream",
    "status_of",
    "stream_item",
    "MessageReceipt",
    "ModelTokens",
    "PendingApproval",
    "PendingClientTool",
    "PendingTurn",
    "ProblemKind",
    "RunBase",
    "RunProblem",
    "SessionState",
    "SessionStatus",
    "StatusSnapshot",
    "StreamItem",
    "SubSessionRef",
    "SubSessionStatus",
    "ToolOwnership",
    "UsageTotals",
    "WorkspaceFile",
    "EventStore",
    "RUN_ENDING_EVENTS",
    "final_event",
    "stream_session",
    "UsageRollup",
    "get_usage_rollup",
]
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
