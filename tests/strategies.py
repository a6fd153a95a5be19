"""Hypothesis strategies for helix-agents: JSON values, single events, whole session logs.

- :func:`json_values`: anything the JSON codec round-trips unchanged (finite floats,
  integers within +-2**53, str-keyed dicts, lists).
- :func:`events` / :func:`event_of_type`: one event with arbitrary field values. The
  field strategies are derived from ``msgspec.inspect`` so every class in
  ``EVENT_TYPES`` is covered, including fields added later.
- :func:`session_logs`: a *valid* session log (seq 1, 2, 3 ..., one session, ts
  non-decreasing) built by a small model of a session's lifecycle, so every prefix is a
  log the runtime could have written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from hypothesis import strategies as st

from helix_agents import PendingInput
from helix_agents.events import (
    CHUNK_TYPES,
    EVENT_TYPES,
    Aborted,
    AbortRequested,
    ApprovalGiven,
    ApprovalRequested,
    ChildChunkForwarded,
    ChunkBase,
    ClientToolOwnershipRecorded,
    ClientToolPending,
    ClientToolResultSubmitted,
    Completed,
    CompletionDelivered,
    CustomChunk,
    ErrorChunk,
    Event,
    EventBase,
    Failed,
    HostClaimed,
    InputRequired,
    Interrupted,
    InterruptRequested,
    MessageAppended,
    MessageQueued,
    OutputChunk,
    PartialOutput,
    ReasoningDelta,
    RemoteRef,
    RunStarted,
    SessionCreated,
    StateUpdated,
    StepRestarted,
    StepStarted,
    SubAgentEnd,
    SubAgentStart,
    SubSessionFinished,
    SubSessionResumed,
    SubSessionStarted,
    SubSessionSuspended,
    Suspended,
    TextDelta,
    ToolEnd,
    ToolStart,
    UsageRecorded,
    WorkspaceDeleted,
    WorkspaceWritten,
)
from helix_agents.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage

__all__ = [
    "ALLOWED_STATUSES",
    "MAX_SAFE_INT",
    "chunks",
    "event_of_type",
    "events",
    "json_values",
    "session_ids",
    "session_logs",
]

MAX_SAFE_INT = 2**53
"""Largest integer magnitude every JSON reader keeps exactly."""

ALLOWED_STATUSES = frozenset({"running", "completed", "failed", "interrupted", "paused"})
"""The protocol's status values (``SessionStatus``)."""

# --- JSON values and single events -------------------------------------------

_finite_floats = st.floats(allow_nan=False, allow_infinity=False)
_ints = st.integers(min_value=-MAX_SAFE_INT, max_value=MAX_SAFE_INT)
_short_text = st.text(max_size=12)


def json_values(*, max_leaves: int = 8) -> st.SearchStrategy[Any]:
    """Any JSON value that decodes back equal: None, bool, int, finite float, str, list, dict."""
    scalars = st.none() | st.booleans() | _ints | _finite_floats | _short_text
    return st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(_short_text, children, max_size=4)
        ),
        max_leaves=max_leaves,
    )


_JSON_DICTS = st.dictionaries(_short_text, json_values(max_leaves=4), max_size=4)
_JSON3 = json_values(max_leaves=3)
_JSON2 = json_values(max_leaves=2)


def _from_type_info(info: msgspec.inspect.Type) -> st.SearchStrategy[Any]:
    """A strategy for values of a msgspec type, JSON-safe, small."""
    match info:
        case msgspec.inspect.AnyType():
            return json_values()
        case msgspec.inspect.NoneType():
            return st.none()
        case msgspec.inspect.BoolType():
            return st.booleans()
        case msgspec.inspect.IntType():
            return _ints
        case msgspec.inspect.FloatType():
            return _finite_floats
        case msgspec.inspect.StrType():
            return _short_text
        case msgspec.inspect.LiteralType(values=values):
            return st.sampled_from(values)
        case msgspec.inspect.UnionType(types=types):
            return st.one_of(*(_from_type_info(member) for member in types))
        case msgspec.inspect.ListType(item_type=item):
            return st.lists(_from_type_info(item), max_size=3)
        case msgspec.inspect.VarTupleType(item_type=item):
            return st.lists(_from_type_info(item), max_size=3).map(tuple)
        case msgspec.inspect.DictType(key_type=key, value_type=value):
            return st.dictionaries(_from_type_info(key), _from_type_info(value), max_size=3)
        case msgspec.inspect.StructType(cls=cls):
            return _struct(cls)
        case _:
            raise NotImplementedError(f"no strategy for msgspec type {info!r}: extend strategies")


def _struct(cls: type[msgspec.Struct]) -> st.SearchStrategy[Any]:
    """Instances of ``cls``: required fields always drawn, optional ones drawn or defaulted."""
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    required = {f.name: _from_type_info(f.type) for f in info.fields if f.required}
    optional = {f.name: _from_type_info(f.type) for f in info.fields if not f.required}
    if issubclass(cls, EventBase):
        # The envelope has defaults only for builders (the writer stamps it);
        # on the wire it is required and must be a real position.
        for name in ("session_id", "seq", "ts"):
            optional.pop(name, None)
        required |= {
            "session_id": session_ids(),
            "seq": st.integers(min_value=1, max_value=2**63 - 1),
            "ts": _finite_floats,
        }
    return st.fixed_dictionaries(required, optional=optional).map(lambda kwargs: cls(**kwargs))


def event_of_type(cls: type[EventBase]) -> st.SearchStrategy[Event]:
    """One event of class ``cls`` with arbitrary JSON-safe field values."""
    return _struct(cls)


def events() -> st.SearchStrategy[Event]:
    """One event of any class in ``EVENT_TYPES``, with arbitrary JSON-safe field values."""
    return st.sampled_from(EVENT_TYPES).flatmap(event_of_type)


def chunks() -> st.SearchStrategy[Any]:
    """One chunk (any class in ``CHUNK_TYPES``), arbitrary field values."""
    return st.sampled_from(CHUNK_TYPES).flatmap(_struct)


def session_ids() -> st.SearchStrategy[str]:
    """Valid session ids (the safe alphabet), short."""
    return st.from_regex(r"[A-Za-z0-9_.:\-]{1,24}", fullmatch=True)


# --- valid session logs -------------------------------------------------------

_WORDS = ("alpha", "beta", "gamma", "delta", "plan", "search", "", "ünï", "a b")
_TOOL_NAMES = ("search", "fetch", "calc", "ask_user", "confirm", "write")
_AGENT_TYPES = ("researcher", "writer", "critic", "planner")
_words = st.sampled_from(_WORDS)
_METADATA = st.dictionaries(st.sampled_from(["user", "tenant"]), _words, max_size=2)
_USER_MESSAGES = st.lists(st.builds(UserMessage, content=_words), max_size=2)


@dataclass
class _Child:
    """The parent's model of one child session."""

    id: str
    agent_type: str
    tool_call_id: str
    mode: str
    status: str = "running"  # running | paused | finished
    last_seq: int = 0
    delivered: bool = False
    grandchildren: dict[str, int] = field(default_factory=dict)  # id -> its last seq


@dataclass
class _Model:
    """What the log built so far says, as much as the generator needs to stay valid."""

    session_id: str
    agent_type: str
    status: str = "running"  # running | paused | interrupted | completed | failed | aborted
    recoverable: bool = False
    run_step: int = 0
    runs: int = 0
    calls: int = 0
    open_calls: dict[str, str] = field(default_factory=dict)  # tool call id -> tool name
    turn_calls: list[str] = field(default_factory=list)  # last assistant turn, no result yet
    client_pending: list[str] = field(default_factory=list)
    approvals_pending: list[str] = field(default_factory=list)
    children: dict[str, _Child] = field(default_factory=dict)
    queued: int = 0  # follow-up messages queued, not yet taken into the conversation
    message_ids: int = 0


class _Builder:
    """Appends events with contiguous seqs and non-decreasing ts."""

    def __init__(self, draw: st.DrawFn, model: _Model, start_ms: int) -> None:
        self.draw = draw
        self.model = model
        self.ms = start_ms
        self.log: list[Event] = []

    def envelope(self) -> dict[str, Any]:
        self.ms += self.draw(st.integers(min_value=0, max_value=5_000))
        return {"session_id": self.model.session_id, "seq": len(self.log) + 1, "ts": self.ms / 1000}

    def add(self, cls: type[Any], **fields: Any) -> None:
        self.log.append(cls(**self.envelope(), **fields))

    def pick(self, choices: Sequence[Any]) -> Any:
        """One of ``choices`` (cheaper than building a ``sampled_from`` per draw)."""
        return choices[self.draw(st.integers(min_value=0, max_value=len(choices) - 1))]

    def flip(self) -> bool:
        return self.draw(st.booleans())

    def new_call(self, name: str | None = None) -> str:
        self.model.calls += 1
        call_id = f"call_{self.model.calls}"
        self.model.open_calls[call_id] = name or self.pick(_TOOL_NAMES)
        return call_id

    def some_call(self) -> str:
        """An open tool call if there is one, else a fresh one."""
        if self.model.open_calls:
            call_id: str = self.pick(sorted(self.model.open_calls))
            return call_id
        return self.new_call()

    def new_run_id(self) -> str:
        self.model.runs += 1
        return f"run-{self.model.runs}"

    def chunk_fields(self, cls: type[ChunkBase], agent_id: str) -> dict[str, Any]:
        """The chunk-specific fields of a chunk of class ``cls`` emitted by ``agent_id``."""
        draw = self.draw
        call_id = f"{agent_id}:{draw(st.integers(min_value=1, max_value=9))}"
        sub_id = f"{agent_id}-sub-{call_id}"
        if cls is TextDelta or cls is ReasoningDelta:
            return {"delta": self.pick(_WORDS)}
        if cls is PartialOutput:
            return {"output": {self.pick(_WORDS): draw(_JSON2)}}
        if cls is ToolStart:
            return {
                "tool_call_id": call_id,
                "tool_name": self.pick(_TOOL_NAMES),
                "arguments": draw(_JSON3),
            }
        if cls is ToolEnd:
            return {
                "tool_call_id": call_id,
                "tool_name": self.pick(_TOOL_NAMES),
                "result": draw(_JSON3),
                "error": self.pick((None, *_WORDS)),
            }
        if cls is SubAgentStart:
            return {
                "sub_agent_id": sub_id,
                "sub_agent_type": self.pick(_AGENT_TYPES),
                "tool_call_id": call_id,
                "parent_session_id": agent_id,
                "input": draw(_JSON2),
            }
        if cls is SubAgentEnd:
            success = self.flip()
            return {
                "sub_agent_id": sub_id,
                "sub_agent_type": self.pick(_AGENT_TYPES),
                "tool_call_id": call_id,
                "parent_session_id": agent_id,
                "success": success,
                "result": draw(_JSON2) if success else None,
                "error": None if success else self.pick(_WORDS),
            }
        if cls is OutputChunk:
            return {"output": draw(_JSON3)}
        if cls is ErrorChunk:
            return {"error": self.pick(_WORDS), "recoverable": self.flip()}
        if cls is CustomChunk:
            return {"name": self.pick(_WORDS), "data": draw(_JSON3)}
        if cls is StepRestarted:
            return {
                "step": draw(st.integers(min_value=1, max_value=9)),
                "discard_from": draw(st.integers(min_value=0, max_value=50)),
                "discard_deltas": draw(st.integers(min_value=0, max_value=9)),
                "discard_chars": draw(st.integers(min_value=0, max_value=99)),
            }
        if cls is InputRequired:
            return {
                "pending": [
                    PendingInput(
                        kind=self.pick(("client_tool", "approval")),
                        tool_call_id=call_id,
                        tool_name=self.pick(_TOOL_NAMES),
                        arguments=draw(_JSON2),
                        owner_session_id=agent_id,
                        path=[agent_id],
                    )
                ]
            }
        raise NotImplementedError(f"no chunk fields for {cls.__name__}: extend strategies")

    # --- actions: each appends one or a few events -------------------------

    def step(self) -> None:
        model = self.model
        model.run_step += 1
        taken = self.draw(st.integers(min_value=0, max_value=model.queued))
        model.queued -= taken
        self.add(StepStarted, step=model.run_step, taken=taken)

    def message_id(self) -> str | None:
        if not self.flip():
            return None
        self.model.message_ids += 1
        return f"msg-{self.model.message_ids}"

    def queue_message(self) -> None:
        messages = [UserMessage(content=self.pick(_WORDS))]
        self.model.queued += len(messages)
        self.add(MessageQueued, messages=messages, message_id=self.message_id())

    def user_message(self) -> None:
        self.add(MessageAppended, message=UserMessage(content=self.pick(_WORDS)))

    def assistant_message(self) -> None:
        count = self.draw(st.integers(min_value=0, max_value=3))
        calls = []
        for _ in range(count):
            call_id = self.new_call()
            name = self.model.open_calls[call_id]
            calls.append(ToolCall(id=call_id, name=name, arguments=self.draw(_JSON3)))
        self.model.turn_calls = [call.id for call in calls]
        self.add(
            MessageAppended, message=AssistantMessage(content=self.pick(_WORDS), tool_calls=calls)
        )

    def tool_result(self) -> None:
        call_id = self.pick(sorted(self.model.open_calls))
        name = self.model.open_calls.pop(call_id)
        if call_id in self.model.turn_calls:
            self.model.turn_calls.remove(call_id)
        message = ToolResultMessage(
            tool_call_id=call_id,
            tool_name=name,
            content=self.pick(_WORDS),
            is_error=self.flip(),
        )
        self.add(MessageAppended, message=message)
        if call_id in self.model.client_pending:
            self.model.client_pending.remove(call_id)
        if call_id in self.model.approvals_pending:
            self.model.approvals_pending.remove(call_id)

    def tool_chunk(self) -> None:
        call_id = self.some_call()
        name = self.model.open_calls[call_id]
        sid = self.model.session_id
        if self.flip():
            self.add(
                ToolStart,
                agent_id=sid,
                agent_type=self.model.agent_type,
                tool_call_id=call_id,
                tool_name=name,
                arguments=self.draw(_JSON3),
            )
        else:
            self.add(
                ToolEnd,
                agent_id=sid,
                agent_type=self.model.agent_type,
                tool_call_id=call_id,
                tool_name=name,
                result=self.draw(_JSON3),
                error=self.pick((None, *_WORDS)),
            )

    def own_chunk(self) -> None:
        cls = self.pick(CHUNK_TYPES)
        sid = self.model.session_id
        self.add(cls, agent_id=sid, agent_type=self.model.agent_type, **self.chunk_fields(cls, sid))

    def state_updated(self) -> None:
        self.add(StateUpdated, state=self.draw(_JSON_DICTS))

    def workspace_change(self) -> None:
        """A workspace tool wrote or deleted a file (of its own or an inherited workspace)."""
        where = {
            "workspace": self.pick(("notes", "cache")),
            "kind": self.pick(("memory", "local")),
            "path": self.pick(("a.md", "notes/b.md", "c/d/e.txt")),
            "owner_session_id": self.pick((None, "root-1")),
            "tool_call_id": self.pick((None, "call_ws")),
        }
        if self.flip():
            size = self.draw(st.integers(min_value=0, max_value=10_000))
            self.add(WorkspaceWritten, **where, size=size, sha256=f"{size:064x}")
        else:
            self.add(WorkspaceDeleted, **where)

    def usage(self) -> None:
        kind = self.pick(("tokens", "tool", "subagent", "custom"))
        counts = st.integers(min_value=0, max_value=10_000)
        if kind == "tokens":
            self.add(
                UsageRecorded,
                kind=kind,
                name=self.pick(("gpt-x", "local")),
                input_tokens=self.draw(counts),
                output_tokens=self.draw(counts),
            )
        elif kind == "tool":
            self.add(UsageRecorded, kind=kind, name=self.pick(_TOOL_NAMES))
        elif kind == "subagent":
            sub = self.pick(sorted(self.model.children) or ["gone"])
            self.add(UsageRecorded, kind=kind, name=self.pick(_AGENT_TYPES), sub_session_id=sub)
        else:
            # Quarters are exact in binary, so sums never depend on the order of addition.
            value = self.draw(st.integers(min_value=-400, max_value=400)) / 4
            name = self.pick((None, "cost", "latency"))
            self.add(UsageRecorded, kind=kind, name=name, value=value, data=self.draw(_JSON_DICTS))

    def spawn(self) -> None:
        """Start a new child, or re-spawn a finished persistent one."""
        respawnable = [
            c.id
            for c in self.model.children.values()
            if c.mode == "persistent" and c.status == "finished"
        ]
        if respawnable and self.flip():
            child = self.model.children[self.pick(respawnable)]
            child.status = "running"
            child.delivered = False
            call_id = self.new_call(f"subagent__{child.agent_type}")
        else:
            agent_type = self.pick(_AGENT_TYPES)
            call_id = self.new_call(f"subagent__{agent_type}")
            mode = self.pick(("ephemeral", "persistent"))
            child_id = (
                f"{self.model.session_id}-agent-{agent_type}-{call_id}"
                if mode == "persistent"
                else f"{self.model.session_id}-sub-{call_id}"
            )
            child = _Child(id=child_id, agent_type=agent_type, tool_call_id=call_id, mode=mode)
            self.model.children[child_id] = child
        remote = self.pick(
            (
                None,
                RemoteRef(
                    transport="http",
                    remote_agent_type=child.agent_type,
                    url="http://127.0.0.1:8000",
                ),
                RemoteRef(transport="nats", remote_agent_type=child.agent_type),
            )
        )
        self.add(
            SubSessionStarted,
            sub_session_id=child.id,
            agent_type=child.agent_type,
            tool_call_id=call_id,
            mode=child.mode,
            name=child.agent_type if child.mode == "persistent" else None,
            input=self.draw(_JSON2),
            remote=remote,
        )

    def children_in(self, *statuses: str) -> list[str]:
        return sorted(c.id for c in self.model.children.values() if c.status in statuses)

    def forward(self) -> None:
        child = self.model.children[self.pick(self.children_in("running"))]
        child.last_seq += self.draw(st.integers(min_value=1, max_value=3))
        origin, origin_type, origin_seq = child.id, child.agent_type, child.last_seq
        if self.draw(st.integers(min_value=0, max_value=2)) == 0:
            # A grandchild's chunk, already flattened by the child: it keeps its origin.
            number = self.draw(st.integers(min_value=1, max_value=2))
            origin = f"{child.id}-sub-g{number}"
            origin_type = "searcher"
            origin_seq = child.grandchildren.get(origin, 0) + self.draw(
                st.integers(min_value=1, max_value=3)
            )
            child.grandchildren[origin] = origin_seq
        cls = self.pick(CHUNK_TYPES)
        inner = cls(
            session_id=origin,
            seq=origin_seq,
            ts=self.ms / 1000,
            agent_id=origin,
            agent_type=origin_type,
            **self.chunk_fields(cls, origin),
        )
        self.add(
            ChildChunkForwarded, child_session_id=child.id, child_seq=child.last_seq, chunk=inner
        )

    def child_suspend(self) -> None:
        child = self.model.children[self.pick(self.children_in("running"))]
        child.status = "paused"
        self.add(
            SubSessionSuspended,
            sub_session_id=child.id,
            reason=self.pick(("client_tool", "approval", "children")),
            tool_call_ids=[f"{child.id}:client"],
        )

    def child_resume(self) -> None:
        choices = self.children_in("paused") + [
            c.id
            for c in self.model.children.values()
            if c.mode == "persistent" and c.status == "finished"
        ]
        child = self.model.children[self.pick(sorted(choices))]
        child.status = "running"
        child.delivered = False
        # A re-consulted companion is owned by the call that re-consulted it.
        call_id = self.new_call("companion__sendMessage") if child.mode == "persistent" else None
        self.add(SubSessionResumed, sub_session_id=child.id, tool_call_id=call_id)

    def child_finish(self) -> None:
        child = self.model.children[self.pick(self.children_in("running", "paused"))]
        child.status = "finished"
        status = self.pick(("completed", "failed", "interrupted", "terminated"))
        self.add(
            SubSessionFinished,
            sub_session_id=child.id,
            status=status,
            output=self.draw(_JSON3) if status == "completed" else None,
            error=None if status == "completed" else self.pick(_WORDS),
        )
        if child.mode == "persistent" and self.flip():
            # The parent usually takes a companion's outcome in right away.
            child.delivered = True
            self.add(CompletionDelivered, sub_session_id=child.id, via="push")

    def deliver(self) -> None:
        undelivered = [
            c.id
            for c in self.model.children.values()
            if c.mode == "persistent" and c.status == "finished" and not c.delivered
        ]
        child = self.model.children[self.pick(sorted(undelivered))]
        child.delivered = True
        self.add(
            CompletionDelivered,
            sub_session_id=child.id,
            via=self.pick(("pull", "push")),
        )

    def client_pending(self) -> None:
        call_id = self.some_call()
        if call_id not in self.model.client_pending:
            self.model.client_pending.append(call_id)
        self.add(
            ClientToolPending,
            tool_call_id=call_id,
            tool_name=self.model.open_calls[call_id],
            arguments=self.draw(_JSON3),
        )

    def client_submit(self) -> None:
        call_id = self.pick(self.model.client_pending)
        self.model.client_pending.remove(call_id)
        failed = self.flip()
        self.add(
            ClientToolResultSubmitted,
            tool_call_id=call_id,
            result=None if failed else self.draw(_JSON3),
            error=self.pick(_WORDS) if failed else None,
        )

    def ownership(self) -> None:
        owners = [self.model.session_id, *sorted(self.model.children)]
        self.add(
            ClientToolOwnershipRecorded,
            tool_call_id=self.some_call(),
            owner_session_id=self.pick(owners),
            remote=self.pick((None, RemoteRef(transport="nats", remote_agent_type="writer"))),
        )

    def approval_requested(self) -> None:
        call_id = self.some_call()
        if call_id not in self.model.approvals_pending:
            self.model.approvals_pending.append(call_id)
        self.add(
            ApprovalRequested,
            tool_call_id=call_id,
            tool_name=self.model.open_calls[call_id],
            arguments=self.draw(_JSON3),
        )

    def approval_given(self) -> None:
        call_id = self.pick(self.model.approvals_pending)
        self.model.approvals_pending.remove(call_id)
        self.add(
            ApprovalGiven,
            tool_call_id=call_id,
            approved=self.flip(),
            reason=self.pick((None, *_WORDS)),
        )

    def interrupt_requested(self) -> None:
        self.add(InterruptRequested, reason=self.pick((None, *_WORDS)))

    def abort_requested(self) -> None:
        self.add(AbortRequested, reason=self.pick((None, *_WORDS)))

    def host_claimed(self) -> None:
        previous = self.pick((None, "host-a", "host-b"))
        self.add(
            HostClaimed,
            host_id=self.pick(("host-a", "host-b", "host-c")),
            previous_host_id=previous,
        )

    def end(self) -> None:
        """One of the lifecycle endings of a run."""
        ending = self.pick(("completed", "suspended", "interrupted", "failed", "aborted"))
        model = self.model
        if ending == "completed":
            output = self.draw(_JSON3)
            if self.flip():
                sid = model.session_id
                self.add(OutputChunk, agent_id=sid, agent_type=model.agent_type, output=output)
            self.add(Completed, output=output)
        elif ending == "suspended":
            reason = self.pick(("client_tool", "approval", "children"))
            waiting = {
                "client_tool": model.client_pending,
                "approval": model.approvals_pending,
                "children": self.children_in("running", "paused"),
            }[reason]
            self.add(Suspended, reason=reason, tool_call_ids=list(waiting))
        elif ending == "interrupted":
            self.add(Interrupted, reason=self.pick((None, *_WORDS)))
        elif ending == "failed":
            model.recoverable = self.flip()
            self.add(Failed, error=self.pick(_WORDS), recoverable=model.recoverable)
        else:
            self.add(Aborted, reason=self.pick((None, *_WORDS)))
        model.status = ending

    def paused_end(self) -> None:
        """A paused session is interrupted or aborted without resuming first."""
        ending = self.pick(("interrupted", "aborted"))
        self.add(
            Interrupted if ending == "interrupted" else Aborted,
            reason=self.pick((None, *_WORDS)),
        )
        self.model.status = ending

    def new_run(self) -> None:
        model = self.model
        mode = "continue" if model.status == "completed" else "resume"
        messages = self.draw(_USER_MESSAGES)
        self.add(
            RunStarted,
            run_id=self.new_run_id(),
            mode=mode,
            messages=messages,
            message_id=self.message_id(),
        )
        model.queued = 0  # every run takes the queue first
        model.status = "running"
        model.run_step = 0
        model.recoverable = False

    # --- which actions the model allows now ---------------------------------

    def actions(self) -> list[str]:
        """The actions the model allows now, repeated to weight them; empty when over."""
        model = self.model
        children = model.children.values()
        others: list[str] = []
        if any(c.status == "running" for c in children):
            others += ["forward", "forward", "forward", "child_suspend"]
        if any(c.status in ("running", "paused") for c in children):
            others += ["child_finish", "child_finish"]
        if any(c.status == "paused" for c in children):
            others.append("child_resume")
        if any(c.mode == "persistent" and c.status == "finished" for c in children):
            others += ["child_resume", "spawn"]  # re-consult, or re-spawn, a companion
        if any(
            c.mode == "persistent" and c.status == "finished" and not c.delivered for c in children
        ):
            others += ["deliver", "deliver"]
        if model.client_pending:
            others.append("client_submit")
        if model.approvals_pending:
            others.append("approval_given")
        if model.status == "running":
            names = ["own_chunk", "own_chunk", "step", "tool_chunk"]
            if not model.turn_calls:
                # Like the runtime: nothing joins the conversation between an assistant
                # turn and the results of its tool calls.
                names += ["assistant_message", "user_message"]
            names += ["state_updated", "usage", "usage", "spawn", "spawn"]
            names.append("workspace_change")
            names += ["client_pending", "ownership", "approval_requested"]
            names += ["interrupt_requested", "abort_requested", "host_claimed", "end", "end"]
            names.append("queue_message")
            if model.open_calls:
                names.append("tool_result")
            return names + others
        if model.status == "paused":
            names = ["new_run", "new_run", "paused_end", "host_claimed", "queue_message"]
            return [*names, "interrupt_requested", "abort_requested", *others]
        if model.status in ("interrupted", "completed") or (
            model.status == "failed" and model.recoverable
        ):
            return ["new_run", "new_run", "host_claimed"]
        return []  # aborted, or failed for good: the log is over


@st.composite
def session_logs(
    draw: st.DrawFn,
    *,
    max_events: int = 60,
    session_id: str | None = None,
) -> list[Event]:
    """A valid session log of at most ``max_events`` events (at least 1).

    ``SessionCreated`` at seq 1, ``RunStarted`` at seq 2, then a random interleaving of
    steps, messages (follow-ups queued and taken too), state, usage, workspace writes and
    deletes, every kind of chunk,
    children (started, forwarded chunks with increasing child seqs, including
    grandchildren's flattened chunks, suspended, resumed, finished, completion
    delivered, re-spawned), human-in-the-loop
    events, interrupt/abort requests, host claims, and run endings optionally followed by
    a new run (resume or continue). Seqs are contiguous from 1, ts never decreases.
    As in the runtime, no message joins the conversation between an assistant turn and
    the result messages of its tool calls (new input given meanwhile is deferred).
    """
    sid = session_id if session_id is not None else draw(session_ids())
    agent_type = draw(st.sampled_from(_AGENT_TYPES))
    model = _Model(session_id=sid, agent_type=agent_type)
    builder = _Builder(
        draw, model, draw(st.integers(min_value=1_600_000_000_000, max_value=1_900_000_000_000))
    )
    target = draw(st.integers(min_value=min(2, max_events), max_value=max_events))
    is_child = draw(st.booleans())
    builder.add(
        SessionCreated,
        agent_type=agent_type,
        run_id=builder.new_run_id(),
        messages=[UserMessage(content=draw(_words))],
        input=draw(_JSON3),
        initial_state=draw(_JSON_DICTS),
        metadata=draw(_METADATA),
        parent_session_id="root-1" if is_child else None,
        root_session_id="root-1" if is_child else None,
        parent_tool_call_id="call_root" if is_child else None,
        workspace_session_id="root-1" if is_child and draw(st.booleans()) else None,
    )
    if target >= 2:
        builder.add(RunStarted, run_id=f"run-{model.runs}", mode="start")
    while len(builder.log) < target:
        names = builder.actions()
        if not names:
            break
        getattr(builder, builder.pick(names))()
    return builder.log[:max_events]
