"""``helix-agents replay --rerun``: re-run a recorded session offline and compare.

The model's answers come from the recording; so do, by default, the tools'
results and remote children (``recording.py``); ``--live TOOL`` runs a tool
as the given agents define it now. Every run of the session is re-run.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from helix_agents import AgentExecutor
from helix_agents.agents import AgentRegistry
from helix_agents.events import SessionCreated
from helix_agents.log import project_state
from helix_agents.models import ReplayLLM
from helix_agents.protocol import RemoteStartRequest
from helix_agents.server.agent_server import AgentServer
from helix_agents.server.cli.recording import answered_from, read_recording, rerun_later_runs
from helix_agents.server.cli.target import TargetError, agents_of, load_target
from helix_agents.stores import MemoryEventStore, open_store
from helix_agents.workspaces import MemoryWorkspaceProvider, WorkspaceProvider

__all__ = ["rerun_lines"]


async def rerun_lines(url: str, session_id: str, spec: str, live: Iterable[str] = ()) -> list[str]:
    """Re-run a recorded session offline with the agents of ``spec``; describe the difference.

    The model's answers come from the recording (:class:`ReplayLLM`); so do,
    by default, the tools' results and remote children (``recording.py``): a
    tool named in ``live`` runs for real, as ``spec`` defines it now. The
    store is a scratch memory store (the recording is not touched), and every
    workspace kind is a fresh memory provider (a file the session read
    without writing it first is missing in the re-run). Every run of the
    session is re-run: its first, then each follow-up and resume recorded.
    """
    live = set(live)
    target = load_target(spec)
    agents = (
        target.executor.registry if isinstance(target, AgentServer) else agents_of(target, spec)
    )
    recorded_store = await open_store(url)
    try:
        recorded = await recorded_store.read(session_id)
        if not recorded:
            raise TargetError(f"session {session_id!r} not found in {url}")
        replay = await ReplayLLM.from_store(recorded_store, session_id)
        recording = await read_recording(recorded_store, session_id)
    finally:
        await recorded_store.close()
    created = recorded[0]
    assert isinstance(created, SessionCreated)
    scratch = MemoryEventStore()
    given = agents if isinstance(agents, AgentRegistry) else AgentRegistry(agents)
    originals = [agent for name in given.names() if (agent := given.get(name)) is not None]
    registry = AgentRegistry(answered_from(originals, recording, live))
    sandbox: dict[str, WorkspaceProvider] = {}
    for name in registry.names():
        agent = registry.get(name)
        for workspace in agent.workspaces if agent is not None else ():
            sandbox[workspace.kind] = MemoryWorkspaceProvider()
    async with AgentExecutor(
        scratch,
        registry,
        llm_override=replay,
        workspace_providers=sandbox,
        workspace_provider_kinds=sandbox,
    ) as executor:
        await executor.service.start(
            RemoteStartRequest(
                session_id=session_id,
                agent_type=created.agent_type,
                message=list(created.messages),
                state=created.initial_state or None,
                metadata=created.metadata or None,
                input=created.input,
            )
        )
        await executor.wait_idle(session_id)
        runs = await rerun_later_runs(executor, session_id, recorded)
        rerun = await executor.state(session_id)
    before = project_state(recorded)
    encode = msgspec.json.encode
    same = (
        not replay.divergences
        and before.status == rerun.status
        and encode(before.output) == encode(rerun.output)
    )
    answered = "live: " + ", ".join(sorted(live)) if live else "every tool from the recording"
    lines = [
        f"re-ran {session_id} with the recorded model answers and the agents of {spec}",
        f"  tools and remote children: {answered}; runs re-run: {runs}",
        f"  recorded: {before.status}  output={encode(before.output).decode()}",
        f"  re-run:   {rerun.status}  output={encode(rerun.output).decode()}",
    ]
    if before.error or rerun.error:
        lines.append(f"  errors:   recorded={before.error!r} re-run={rerun.error!r}")
    lines.append(f"  divergences: {len(replay.divergences) or 'none'}")
    for divergence in replay.divergences:
        lines.append(
            f"    {divergence.session_id} turn {divergence.turn + 1}, message "
            f"{divergence.index + 1}:\n      recorded {divergence.recorded}\n"
            f"      re-run   {divergence.actual}"
        )
    lines.append("  same: yes" if same else "  same: no")
    return lines
