"""serve's listen backlog: room for all its connections at once, within the descriptors."""

from __future__ import annotations

import resource

import pytest

from helix_agents.server.serving import descriptors
from helix_agents.server.serving.descriptors import fit_descriptor_limit, fit_listen_backlog
from helix_agents.server.serving.limits import (
    LISTEN_BACKLOG,
    MAX_LISTEN_BACKLOG,
    RESERVED_DESCRIPTORS,
)


class FakeLimit:
    """``RLIMIT_NOFILE`` as ``getrlimit``/``setrlimit`` see it, without touching the real one."""

    def __init__(self, soft: int, hard: int) -> None:
        self.soft, self.hard = soft, hard

    def getrlimit(self, which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return self.soft, self.hard

    def setrlimit(self, which: int, limits_: tuple[int, int]) -> None:
        soft, hard = limits_
        if soft > self.hard or hard != self.hard:
            raise ValueError("not allowed")
        self.soft = soft


@pytest.fixture
def fake_limit(monkeypatch: pytest.MonkeyPatch) -> FakeLimit:
    fake = FakeLimit(1024, 1 << 20)
    monkeypatch.setattr(descriptors.resource, "getrlimit", fake.getrlimit)
    monkeypatch.setattr(descriptors.resource, "setrlimit", fake.setrlimit)
    return fake


def test_the_backlog_holds_every_connection_and_the_limit_is_raised_for_it(
    fake_limit: FakeLimit,
) -> None:
    connections = fit_descriptor_limit(3200)
    assert connections == 3200
    assert fit_listen_backlog(connections) == 3200
    assert fake_limit.soft >= 3200 + 3200 + RESERVED_DESCRIPTORS


def test_the_backlog_is_capped_and_never_below_the_shortest(fake_limit: FakeLimit) -> None:
    assert fit_listen_backlog(fit_descriptor_limit(10_000)) == MAX_LISTEN_BACKLOG
    assert fit_listen_backlog(fit_descriptor_limit(10)) == LISTEN_BACKLOG


def test_a_low_hard_limit_keeps_the_connections_and_shortens_the_backlog(
    fake_limit: FakeLimit,
) -> None:
    fake_limit.hard = 2000
    connections = fit_descriptor_limit(1000)
    assert connections == 1000  # the connections come first
    backlog = fit_listen_backlog(connections)
    assert backlog == 2000 - 1000 - RESERVED_DESCRIPTORS  # what is left, not 1,000
    assert connections + backlog + RESERVED_DESCRIPTORS <= fake_limit.soft


def test_with_no_room_left_the_backlog_is_the_shortest_one_kept_for(fake_limit: FakeLimit) -> None:
    fake_limit.soft = fake_limit.hard = 1024
    connections = fit_descriptor_limit(1000)
    assert connections == 1024 - LISTEN_BACKLOG - RESERVED_DESCRIPTORS
    assert fit_listen_backlog(connections) == LISTEN_BACKLOG
