"""serve's collector tuning: what was loaded is frozen, young collections rarer, cycles still go."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from helix_agents.server.serving.collector import YOUNG_THRESHOLD, tune_collector


@pytest.fixture
def restored_collector() -> Iterator[None]:
    """Put the test process's collector back as it was."""
    before = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


class _Node:
    """A cycle's member."""

    def __init__(self) -> None:
        self.other: _Node | None = None


def test_tuning_freezes_what_is_loaded_and_raises_the_young_threshold(
    restored_collector: None,
) -> None:
    _, middle, old = gc.get_threshold()
    tune_collector()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (YOUNG_THRESHOLD, middle, old)


def test_cycles_made_after_tuning_are_still_collected(restored_collector: None) -> None:
    tune_collector(young=50)
    first, second = _Node(), _Node()
    first.other, second.other = second, first
    gone = weakref.ref(first)
    del first, second
    gc.collect()
    assert gone() is None


def test_garbage_present_at_tuning_is_collected_not_frozen(restored_collector: None) -> None:
    gc.disable()  # so that only the tuning's own collection can free it
    try:
        first, second = _Node(), _Node()
        first.other, second.other = second, first
        gone = weakref.ref(first)
        del first, second
        tune_collector()
        assert gone() is None
    finally:
        gc.enable()
