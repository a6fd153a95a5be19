"""Differential test: memory, SQLite and JetStream stores agree, operation by operation.

A Hypothesis state machine applies the same random operations to a
``MemoryEventStore`` and a ``SqliteEventStore`` and checks after each step
that both returned the same value or raised the same error, and that both
hold the logs a plain model says they should. A subclass adds a
``JetStreamEventStore`` (on the session's nats-server, marked ``nats``) as a
third store.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from nats_server import NatsServer

from helix_agents.errors import ConcurrencyConflict, InvalidSessionIdError, UsageError
from helix_agents.events import Event, SessionCreated, StepStarted, TextDelta
from helix_agents.stores import JetStreamEventStore, MemoryEventStore, SqliteEventStore

SESSION_IDS = ["s1", "s2", "a:b.c-d_e"]
sessions = st.sampled_from(SESSION_IDS)
bad_session_ids = st.sampled_from(["", "a/b", "x y", "a*", "a" * 257])


def build_batch(session_id: str, first_seq: int, texts: list[str]) -> list[Event]:
    """Events at ``first_seq, first_seq + 1, ...``: ``SessionCreated`` at seq 1, then deltas."""
    events: list[Event] = []
    for seq, text in enumerate(texts, start=first_seq):
        ts = 1_700_000_000 + seq / 4
        if seq == 1:
            events.append(
                SessionCreated(session_id=session_id, seq=seq, ts=ts, agent_type="t", run_id=text)
            )
        elif text:
            events.append(
                TextDelta(
                    session_id=session_id,
                    seq=seq,
                    ts=ts,
                    agent_id=session_id,
                    agent_type="t",
                    delta=text,
                )
            )
        else:
            events.append(StepStarted(session_id=session_id, seq=seq, ts=ts, step=seq))
    return events


def _outcome(call: Callable[[], Any]) -> tuple[Any, ...]:
    """What a call did: ``("ok", value)`` or ``("raised", type, data)``."""
    try:
        return ("ok", call())
    except ConcurrencyConflict as exc:
        return ("raised", type(exc), (exc.session_id, exc.expected_seq, exc.actual_seq))
    except Exception as exc:
        return ("raised", type(exc), None)


class StoreAgreement(RuleBasedStateMachine):
    """Memory and SQLite stores, driven through one blocking portal, checked against a model."""

    def __init__(self) -> None:
        super().__init__()
        self._resources = ExitStack()
        directory = Path(self._resources.enter_context(tempfile.TemporaryDirectory()))
        self.portal = self._resources.enter_context(start_blocking_portal("asyncio"))
        self.stores: dict[str, Any] = {}
        self._add("memory", MemoryEventStore())
        self._add("sqlite", SqliteEventStore(directory / "events.db"))
        self.model: dict[str, list[Event]] = {}

    def _add(self, name: str, store: Any) -> None:
        self.stores[name] = store
        self._resources.callback(self.portal.call, store.close)

    def teardown(self) -> None:
        self._resources.close()

    def both(self, method: str, *args: Any) -> tuple[Any, ...]:
        """Call ``method`` on every store; assert they agree; return the shared outcome."""
        outcomes: dict[str, tuple[Any, ...]] = {}
        for name, store in self.stores.items():
            outcomes[name] = _outcome(partial(self.portal.call, getattr(store, method), *args))
        first = outcomes["memory"]
        for name, outcome in outcomes.items():
            assert outcome == first, f"{method}{args}: memory {first} != {name} {outcome}"
        return first

    @rule(
        session_id=sessions,
        offset=st.sampled_from([0, 0, 0, -1, 1, -2, 2]),
        texts=st.lists(st.text(alphabet="xyz", max_size=2), min_size=1, max_size=3),
        flaw=st.sampled_from([None, None, None, "wrong-seqs", "foreign", "empty"]),
    )
    def append(self, session_id: str, offset: int, texts: list[str], flaw: str | None) -> None:
        log = self.model.setdefault(session_id, [])
        expected_seq = len(log) + offset
        batch = build_batch(session_id, expected_seq + 1, texts)
        if flaw == "wrong-seqs":
            batch = build_batch(session_id, expected_seq + 2, texts)
        elif flaw == "foreign":
            other = next(s for s in SESSION_IDS if s != session_id)
            batch = build_batch(other, expected_seq + 1, texts)
        elif flaw == "empty":
            batch = []

        outcome = self.both("append", session_id, batch, expected_seq)

        if flaw is not None or expected_seq < 0:
            assert outcome[0] == "raised", outcome
            assert issubclass(outcome[1], UsageError), outcome
            assert not issubclass(outcome[1], ConcurrencyConflict), outcome
        elif offset != 0:
            assert outcome == ("raised", ConcurrencyConflict, (session_id, expected_seq, len(log)))
        else:
            assert outcome == ("ok", expected_seq + len(batch))
            log.extend(batch)

    @rule(session_id=sessions, from_seq=st.integers(0, 10))
    def read(self, session_id: str, from_seq: int) -> None:
        outcome = self.both("read", session_id, from_seq)
        assert outcome == ("ok", self.model.get(session_id, [])[from_seq:])

    @rule()
    def list_sessions(self) -> None:
        expected = sorted(session_id for session_id, log in self.model.items() if log)
        assert self.both("list_sessions") == ("ok", expected)

    @rule(session_id=sessions)
    def delete(self, session_id: str) -> None:
        existed = bool(self.model.pop(session_id, None))
        assert self.both("delete", session_id) == ("ok", existed)

    @rule(
        bad_id=bad_session_ids,
        method=st.sampled_from(["read", "delete", "append"]),
    )
    def invalid_session_id(self, bad_id: str, method: str) -> None:
        args: tuple[Any, ...] = (bad_id,)
        if method == "append":
            args = (bad_id, build_batch(bad_id, 1, ["x"]), 0)
        assert self.both(method, *args)[:2] == ("raised", InvalidSessionIdError)

    @invariant()
    def logs_agree_with_the_model(self) -> None:
        for session_id in SESSION_IDS:
            assert self.both("read", session_id) == ("ok", self.model.get(session_id, []))


StoreAgreement.TestCase.settings = settings(max_examples=30, stateful_step_count=30, deadline=None)
TestStoreAgreement = StoreAgreement.TestCase

_nats: list[NatsServer] = []  # the session's server, handed over by the fixture below


class StoreAgreementWithJetStream(StoreAgreement):
    """The same machine with a JetStream store (a fresh stream per example) as a third."""

    def __init__(self) -> None:
        super().__init__()
        stream = f"SA{uuid.uuid4().hex[:16]}"
        store = self.portal.call(lambda: JetStreamEventStore.connect(_nats[0].url, stream=stream))
        self._add("nats", store)


StoreAgreementWithJetStream.TestCase.settings = settings(
    max_examples=30, stateful_step_count=30, deadline=None
)


_JetStreamCase: Any = StoreAgreementWithJetStream.TestCase


@pytest.mark.nats
class TestStoreAgreementWithJetStream(_JetStreamCase):  # type: ignore[misc]
    @pytest.fixture(autouse=True)
    def _server(self, nats_server: NatsServer) -> None:
        _nats[:] = [nats_server]


del _JetStreamCase  # pytest collects every TestCase in the module, whatever its name
