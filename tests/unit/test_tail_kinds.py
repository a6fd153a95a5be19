"""A tail of ``kinds`` (a run's watcher) is not woken by appends of anything else."""

from __future__ import annotations

from store_conformance import SID, delta

from helix_agents.events import StepStarted
from helix_agents.stores.common import Subscription


def _step(seq: int) -> StepStarted:
    return StepStarted(session_id=SID, seq=seq, ts=1.0, step=seq)


def test_other_events_move_its_cursor_without_waking_it() -> None:
    inbox = Subscription((StepStarted,))
    inbox.deliver([delta(SID, 2, "a"), delta(SID, 3, "b")])
    inbox.deliver([delta(SID, 4, "c")])
    assert not inbox.ready
    assert not inbox.wake.is_set()
    inbox.deliver([delta(SID, 5, "d"), _step(6)])
    assert inbox.wake.is_set()
    assert inbox.take() == ([_step(6)], False)
    assert inbox.take_covered() == (2, 6)  # the tail's cursor moves to 6 with no read


def test_a_delivery_that_does_not_follow_the_last_one_makes_the_tail_re_read() -> None:
    inbox = Subscription((StepStarted,))
    inbox.deliver([delta(SID, 2, "a")])
    inbox.deliver([delta(SID, 4, "c")])  # 3 went elsewhere: it may have been a step
    assert inbox.wake.is_set()
    assert inbox.take() == ([], True)


def test_a_subscription_of_everything_is_woken_by_every_delivery() -> None:
    inbox = Subscription()
    inbox.deliver([delta(SID, 2, "a")])
    assert inbox.wake.is_set()
    assert inbox.take() == ([delta(SID, 2, "a")], False)
