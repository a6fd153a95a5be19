"""How a session's log folds the turns of messages sent mid-run (specs/server.md).

A ``message_queued`` with a ``multitask`` choice waits as a
:class:`~helix_agents.log.state.PendingTurn` until the ``run_started`` that
names it (``turn_of``); every run that begins a turn remembers what it began
from (:class:`~helix_agents.log.state.RunBase`), which a ``run_superseded``
(a rollback) restores.
"""

from __future__ import annotations

from helix_agents.errors import CorruptLogError
from helix_agents.events import MessageQueued, RunStarted, RunSuperseded
from helix_agents.log.state import PendingTurn, RunBase, SessionState

__all__ = ["begin_turn", "queue_turn", "supersede_run"]


def queue_turn(state: SessionState, event: MessageQueued) -> bool:
    """Fold a ``message_queued`` that waits for a turn of its own; False for a steer."""
    if event.multitask is None:
        return False
    state.pending_turns.append(
        PendingTurn(
            seq=event.seq,
            messages=list(event.messages),
            message_id=event.message_id,
            multitask=event.multitask,
            run_id=state.run_id,
        )
    )
    return True


def begin_turn(state: SessionState, event: RunStarted) -> None:
    """Before a ``run_started`` adds its input: what a new turn begins from, its waiting turn.

    A resume goes on with the turn it resumes, and a session's first run
    began at its ``session_created`` (its input is that run's): their bases stay.
    """
    if event.mode == "continue":
        state.run_base = base_of(state, event.seq)
    if event.turn_of is None:
        return
    for index, turn in enumerate(state.pending_turns):
        if turn.seq == event.turn_of:
            del state.pending_turns[index]
            return
    raise CorruptLogError(
        f"run_started at seq {event.seq} is the turn of message_queued {event.turn_of}, "
        "which waits for no turn"
    )


def base_of(state: SessionState, seq: int) -> RunBase:
    """What a run beginning at ``seq`` begins from (copies: later folds replace, not edit)."""
    return RunBase(
        seq=seq,
        message_count=len(state.messages),
        deferred_messages=list(state.deferred_messages),
        custom_state=state.custom_state,
        output=state.output,
    )


def supersede_run(state: SessionState, event: RunSuperseded) -> None:
    """Fold a ``run_superseded``: the conversation, state and output are the run's base again."""
    base = state.run_base
    if base is None or event.run_id != state.run_id or event.from_seq != base.seq:
        raise CorruptLogError(
            f"run_superseded at seq {event.seq} names run {event.run_id!r} from seq "
            f"{event.from_seq}; the current run is {state.run_id!r}"
            + (f" from seq {base.seq}" if base is not None else "")
        )
    if state.status == "running":
        raise CorruptLogError(f"run_superseded at seq {event.seq}: the run is still running")
    del state.messages[base.message_count :]
    state.deferred_messages = list(base.deferred_messages)
    state.awaiting_results = []
    state.custom_state = base.custom_state
    state.output = base.output
    state.problems = []
    # What the run waited for, it no longer does (its calls are not in the conversation).
    state.pending_client_tools = {}
    state.pending_approvals = {}
    state.run_base = base_of(state, event.seq)
