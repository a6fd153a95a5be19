"""``claim_on_resume``: a host resuming a cut run claims it once, however the log moved since.

The soak saw a host's scan claim a cut run (``host_claimed``), then events land
in the log (a child's chunks), then the same host's resume claim it again: two
claims of one cut run by one live host. The claim a resume adds is decided by
the cut run's latest claim, not by the log's last event.
"""

from __future__ import annotations

from typing import Any

from helix_agents.events import Event, HostClaimed, RunStarted, SessionCreated, TextDelta
from helix_agents.log import project_state
from helix_agents.server.fleet.takeover import claim_on_resume

SID = "s1"


def _log(*tail: tuple[type[Any], dict[str, Any]]) -> list[Event]:
    """session_created, run_started (the cut run, on host a), then ``tail``; seqs 1, 2, ..."""
    kinds: list[tuple[type[Any], dict[str, Any]]] = [
        (SessionCreated, {"agent_type": "planner", "run_id": "run-1"}),
        (RunStarted, {"run_id": "run-1"}),
        (HostClaimed, {"host_id": "a"}),
        *tail,
    ]
    return [
        cls(session_id=SID, seq=seq, ts=100.0 + seq, **fields)
        for seq, (cls, fields) in enumerate(kinds, start=1)
    ]


def _claims(host: str, log_: list[Event]) -> list[Event]:
    return claim_on_resume(host, log_, project_state(log_))


DELTA = (TextDelta, {"agent_id": SID, "agent_type": "planner", "delta": "x"})


def test_a_host_that_claimed_the_cut_run_adds_no_claim_when_events_came_since() -> None:
    log_ = _log((HostClaimed, {"host_id": "b", "previous_host_id": "a"}), DELTA, DELTA)
    assert _claims("b", log_) == []


def test_a_host_that_claimed_it_just_now_adds_none() -> None:
    assert _claims("b", _log((HostClaimed, {"host_id": "b", "previous_host_id": "a"}))) == []


def test_a_later_claim_by_another_host_is_claimed_again() -> None:
    log_ = _log(
        (HostClaimed, {"host_id": "b", "previous_host_id": "a"}),
        DELTA,
        (HostClaimed, {"host_id": "c", "previous_host_id": "b"}),
    )
    [claim] = _claims("b", log_)
    assert isinstance(claim, HostClaimed)
    assert (claim.host_id, claim.previous_host_id) == ("b", "c")


def test_a_claim_of_an_earlier_run_does_not_count() -> None:
    log_ = _log(
        (HostClaimed, {"host_id": "b", "previous_host_id": "a"}),
        (RunStarted, {"run_id": "run-2", "mode": "resume"}),
        DELTA,
    )
    [claim] = _claims("b", log_)
    assert isinstance(claim, HostClaimed)
    assert claim.host_id == "b"
