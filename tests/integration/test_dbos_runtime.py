"""What only DBOS has of the durable runtime's scenarios (the rest: ``test_durable_runtime.py``)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from helix_agents.dbos import DbosOptions, DbosWorker
from helix_agents.engines.dbos.routes import open_runs
from helix_agents.errors import UsageError
from helix_agents.events import Interrupted, Suspended
from helix_agents.log import project_state
from helix_agents.protocol import RemoteStartRequest
from helix_agents.stores import MemoryEventStore
from tests.integration._durable_kit import Runtime
from tests.integration._temporal_kit import seqs_contiguous, stream_to_end, wait_for
from tests.integration.temporal_app import agents

pytestmark = [pytest.mark.slow]


def options_in(tmp_path: Path) -> DbosOptions:
    """Options with a system database of the test's own."""
    return DbosOptions(system_database=f"sqlite:///{tmp_path / 'dbos.sqlite'}")


@pytest.mark.parametrize("runtime", ["dbos"], indirect=True)
async def test_an_interrupt_of_a_paused_root_ends_its_waiting_workflow(runtime: Runtime) -> None:
    """A tree paused for an approval is interrupted at the root: the root ends interrupted
    and its paused workflow, woken, ends; the paused child stays paused (as on the built-in
    runtime: it can still be answered), its workflow still waiting."""
    store = MemoryEventStore()
    with anyio.fail_after(60):
        async with runtime.server(agents, store) as server:
            await server.start(
                RemoteStartRequest(session_id="pi", agent_type="hitl_boss", message="pay")
            )
            await wait_for(store, "pi", lambda e: isinstance(e, Suspended))
            assert await open_runs("pi") == ["pi#2"]
            await server.interrupt("pi", "never mind")
            await wait_for(store, "pi", lambda e: isinstance(e, Interrupted))
            # DBOS's state offers no event to wait on: polled, bounded by fail_after.
            while await open_runs("pi"):  # noqa: ASYNC110
                await anyio.sleep(0.05)
            assert await open_runs("pi-sub-c1") == ["pi-sub-c1#2"]
    log = await store.read("pi")
    assert seqs_contiguous(log)
    assert project_state(log).status == "interrupted"
    assert project_state(await store.read("pi-sub-c1")).status == "paused"


async def test_a_second_dbos_in_the_process_is_refused_and_the_first_goes_on(
    tmp_path: Path,
) -> None:
    """One DBOS per process: a second worker entered while one runs is refused, and the
    refusal leaves the running one's DBOS launched, its sessions running to their end."""
    store = MemoryEventStore()
    with anyio.fail_after(60):
        async with DbosWorker(agents.values(), store, options_in(tmp_path)) as worker:
            second = DbosWorker(agents.values(), store, options_in(tmp_path / "other"))
            with pytest.raises(UsageError, match="one per process"):
                await second.__aenter__()
            service = worker.executor.service
            await service.start(
                RemoteStartRequest(session_id="one", agent_type="boss", message="go")
            )
            output = await stream_to_end(service, "one")  # type: ignore[arg-type]
    assert output == "one plus two is three and the helper said six"
