"""A run's watcher (its log's tail, for interrupt and abort requests) survives a store hiccup.

Found by ``test_nats_soak.py``: when a NATS node died, the tail of a running
session failed with a ``StoreError`` (a read timed out) and took the whole
run down with it, recorded as a permanent ``internal error``. The watcher
now opens the tail again from the last event it saw.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
from pydantic import BaseModel
from wrapped_store import WrappedStore

from helix_agents import AgentExecutor, define_agent
from helix_agents.errors import StoreError
from helix_agents.events import Event
from helix_agents.log import project_state
from helix_agents.models import ScriptedLLM
from helix_agents.stores import MemoryEventStore

LIMIT = 10


class Found(BaseModel):
    findings: str


class HiccupTails(WrappedStore):
    """Each of the first ``failures`` tails opened fails at once, as a read timing out does."""

    def __init__(self, inner: MemoryEventStore, failures: int) -> None:
        super().__init__(inner)
        self.failures = failures
        self.opened: list[int] = []
        self.watching = anyio.Event()  # a tail opened after the failures

    def tail(
        self,
        session_id: str,
        from_seq: int = 0,
        *,
        kinds: tuple[type[Event], ...] | None = None,
    ) -> AsyncIterator[Event]:
        self.opened.append(from_seq)
        if self.failures > 0:
            self.failures -= 1
            return self._broken()
        self.watching.set()
        return self.inner.tail(session_id, from_seq, kinds=kinds)

    async def _broken(self) -> AsyncIterator[Event]:
        raise StoreError("jetstream store 'HELIX_EVENTS': TimeoutError()")
        yield  # pragma: no cover - an async generator


async def test_a_run_whose_watcher_fails_goes_on_and_can_still_be_interrupted() -> None:
    gate = anyio.Event()

    async def slow(_request: object) -> object:
        await gate.wait()
        return ScriptedLLM.finish({"findings": "tides"})

    agent = define_agent("researcher", output_schema=Found, llm=ScriptedLLM(slow))
    store = HiccupTails(MemoryEventStore(), failures=2)
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [agent]) as executor:  # type: ignore[arg-type]
            handle = await executor.execute(agent, "tides", session_id="w-1")
            await store.watching.wait()  # failed twice, then watching
            await executor.service.interrupt("w-1", "enough")
            result = await handle.result()
            log = await store.read("w-1")
    assert result.status == "interrupted", result.error
    assert project_state(log).status == "interrupted"
    # Watching again from where the first tail began: past the start's events (and any
    # the run's first batch committed with them), never from the log's beginning.
    first = store.opened[0]
    assert first >= 2
    assert store.opened == [first, first, first]
