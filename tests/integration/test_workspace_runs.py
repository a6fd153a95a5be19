"""Workspaces in real runs: the tools, refusals, wiring at tool-call time, inheritance,
parallel siblings, per-invocation lifetime, a restart on a local workspace, and replay.

A real ``AgentExecutor`` on real stores with scripted models; every test is bounded
with ``anyio.fail_after``, and tools that must be in flight together wait on
``anyio.Event`` s, never on sleeps.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from pydantic import BaseModel

from helix_agents import (
    AgentConfig,
    AgentExecutor,
    EventStore,
    create_sub_agent_tool,
    define_agent,
    define_tool,
)
from helix_agents.errors import AgentServerError
from helix_agents.events import (
    Event,
    RunStarted,
    SessionCreated,
    WorkspaceDeleted,
    WorkspaceWritten,
)
from helix_agents.log import project_state
from helix_agents.messages import AssistantMessage, ToolResultMessage
from helix_agents.models import LLMRequest, ScriptedLLM
from helix_agents.protocol import RemoteResumeRequest, RemoteStartRequest
from helix_agents.stores import MemoryEventStore, SqliteEventStore
from helix_agents.workspaces import (
    LocalWorkspaceProvider,
    MemoryWorkspaceProvider,
    Workspace,
    WorkspaceProvider,
    WorkspaceRef,
)

LIMIT = 10.0
ROOT = "root"
CHILD = f"{ROOT}-sub-call_1_0"

call = ScriptedLLM.call
finish = ScriptedLLM.finish
reply = ScriptedLLM.reply


class Query(BaseModel):
    query: str


class Answer(BaseModel):
    answer: str


# --- helpers ----------------------------------------------------------------------------


Turn = Any | Callable[[LLMRequest], Any]


class Play:
    """A ScriptedLLM script: turn k plays ``turns[k]`` (a callable gets the request)."""

    def __init__(self, *turns: Turn) -> None:
        self.turns = list(turns)
        self.requests: list[LLMRequest] = []

    def __call__(self, request: LLMRequest) -> Any:
        self.requests.append(request)
        turn = sum(isinstance(message, AssistantMessage) for message in request.messages)
        played = self.turns[turn]
        return played(request) if callable(played) else played

    def tool_names(self, index: int = 0) -> list[str]:
        return [tool.name for tool in self.requests[index].tools]


def results(request: LLMRequest) -> list[Any]:
    """The latest tool round's results, decoded, in the order of the calls (not of completion)."""
    found: dict[str, ToolResultMessage] = {}
    for message in reversed(request.messages):
        if isinstance(message, ToolResultMessage):
            found[message.tool_call_id] = message
        elif isinstance(message, AssistantMessage):
            order = [tool_call.id for tool_call in message.tool_calls]
            return [msgspec.json.decode(found[call_id].content) for call_id in order]
    return []


def all_results(play: Play) -> list[list[Any]]:
    """Every tool round the model saw, decoded (round k = the results of turn k)."""
    return [results(request) for request in play.requests[1:]]


def first_user_text(request: LLMRequest) -> str:
    content = request.messages[0].content
    assert isinstance(content, str)
    return content


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def providers_for(kind: str, root: Path, **limits: int) -> dict[str, WorkspaceProvider]:
    if kind == "memory":
        return {"memory": MemoryWorkspaceProvider(**limits)}
    return {"local": LocalWorkspaceProvider(root, **limits)}


async def run_root(
    store: EventStore,
    agent: AgentConfig,
    providers: dict[str, WorkspaceProvider],
    message: str = "go",
) -> Any:
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [agent], workspace_providers=providers) as executor:
            handle = await executor.execute(agent, message, session_id=ROOT)
            return await handle.result()


KINDS = pytest.mark.parametrize("kind", ["memory", "local"])


# --- the tools ---------------------------------------------------------------------------


@KINDS
async def test_write_read_list_delete(kind: str, tmp_path: Path) -> None:
    play = Play(
        [
            call("workspace_write", {"path": "notes/a.md", "content": "alpha"}),
            call("workspace_write", {"path": "b.md", "content": "beta"}),
        ],
        [call("workspace_read", {"path": "notes/a.md"}), call("workspace_list", {})],
        [call("workspace_delete", {"path": "b.md"}), call("workspace_delete", {"path": "gone"})],
        call("workspace_list", {"prefix": "notes"}),
        reply("done"),
    )
    agent = define_agent(
        "scribe",
        workspaces=[Workspace("notes", kind, description="Working notes")],
        llm=ScriptedLLM(play),
    )
    store = MemoryEventStore()
    providers = providers_for(kind, tmp_path)
    result = await run_root(store, agent, providers)
    assert result.status == "completed"
    writes, reads, deletes, listing = all_results(play)
    assert writes == [
        {"workspace": "notes", "path": "notes/a.md", "size": 5, "sha256": sha("alpha")},
        {"workspace": "notes", "path": "b.md", "size": 4, "sha256": sha("beta")},
    ]
    assert reads == [
        {"workspace": "notes", "path": "notes/a.md", "content": "alpha", "size": 5},
        {
            "workspace": "notes",
            "prefix": "",
            "files": [{"path": "b.md", "size": 4}, {"path": "notes/a.md", "size": 5}],
            "truncated": False,
        },
    ]
    assert deletes == [
        {"workspace": "notes", "path": "b.md", "deleted": True},
        {"workspace": "notes", "path": "gone", "deleted": False},
    ]
    assert listing == [
        {
            "workspace": "notes",
            "prefix": "notes",
            "files": [{"path": "notes/a.md", "size": 5}],
            "truncated": False,
        }
    ]
    # The model saw the four tools, described with the workspace's catalog.
    tools = {tool.name: tool for tool in play.requests[0].tools}
    assert {"workspace_read", "workspace_write", "workspace_list", "workspace_delete"} <= set(tools)
    assert f"'notes' ({kind}): Working notes" in tools["workspace_write"].description
    assert set(tools["workspace_write"].parameters["properties"]) == {
        "path",
        "content",
        "workspace",
    }
    # The log records each write and the one real delete, before the call's result.
    log = await store.read(ROOT)
    written = [e for e in log if isinstance(e, WorkspaceWritten)]
    assert [(e.workspace, e.kind, e.path, e.size, e.sha256) for e in written] == [
        ("notes", kind, "notes/a.md", 5, sha("alpha")),
        ("notes", kind, "b.md", 4, sha("beta")),
    ]
    assert all(e.owner_session_id is None and e.tool_call_id for e in written)
    [deleted] = [e for e in log if isinstance(e, WorkspaceDeleted)]
    assert (deleted.path, deleted.tool_call_id) == ("b.md", "call_2_0")
    state = project_state(log)
    assert list(state.workspace_files) == ["notes"]
    [kept] = state.workspace_files["notes"].values()
    assert (kept.path, kept.size, kept.sha256) == ("notes/a.md", 5, sha("alpha"))
    if kind == "local":
        local = providers["local"]
        assert isinstance(local, LocalWorkspaceProvider)
        directory = local.directory(WorkspaceRef(session_id=ROOT, name="notes", kind="local"))
        assert (directory / "notes" / "a.md").read_text() == "alpha"
        assert not (directory / "b.md").exists()


async def test_refused_paths_and_sizes_are_tool_errors_that_change_nothing(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    provider = LocalWorkspaceProvider(tmp_path / "root", max_file_bytes=10)
    directory = provider.directory(WorkspaceRef(session_id=ROOT, name="notes", kind="local"))
    directory.mkdir(parents=True)
    (directory / "escape").symlink_to(outside)
    (directory / "blob.bin").write_bytes(b"\xff\xfe\x00")
    play = Play(
        [
            call("workspace_read", {"path": "blob.bin"}),
            call("workspace_write", {"path": "/etc/passwd", "content": "x"}),
            call("workspace_write", {"path": "../../escape.md", "content": "x"}),
            call("workspace_write", {"path": "escape/planted.md", "content": "x"}),
            call("workspace_write", {"path": "big.md", "content": "x" * 11}),
            call("workspace_read", {"path": "missing.md"}),
            call("workspace_write", {"path": 7, "content": "x"}),
            call("workspace_write", {"path": "ok.md", "content": "fine"}),
        ],
        reply("done"),
    )
    agent = define_agent("scribe", workspaces=[Workspace("notes", "local")], llm=ScriptedLLM(play))
    store = MemoryEventStore()
    result = await run_root(store, agent, {"local": provider})
    assert result.status == "completed"
    [[binary, *outcomes]] = all_results(play)
    assert binary == {"error": "WorkspaceError: 'blob.bin' is not UTF-8 text (3 bytes)"}
    errors = [outcome.get("error") for outcome in outcomes]
    assert errors[0] == (
        "WorkspacePathError: path '/etc/passwd' refused: absolute paths are not allowed; "
        "give a path relative to the workspace root"
    )
    assert errors[1] == (
        "WorkspacePathError: path '../../escape.md' refused: "
        "'..' is not allowed (it would leave the workspace)"
    )
    assert errors[2] == (
        "WorkspacePathError: path 'escape/planted.md' refused: "
        "it leads out of the workspace (through a symbolic link)"
    )
    assert errors[3] == "WorkspaceLimitError: 'big.md': file size 11 bytes is over the 10 limit"
    assert errors[4] == "WorkspaceFileNotFoundError: workspace 'notes' has no file 'missing.md'"
    assert errors[5] is not None
    assert errors[5].startswith("invalid arguments: path:")
    assert outcomes[6] == {"workspace": "notes", "path": "ok.md", "size": 4, "sha256": sha("fine")}
    assert sorted(p.name for p in directory.iterdir()) == ["blob.bin", "escape", "ok.md"]
    assert list(outside.iterdir()) == []
    written = [e.path for e in await store.read(ROOT) if isinstance(e, WorkspaceWritten)]
    assert written == ["ok.md"]


async def test_a_missing_provider_fails_the_tool_call_not_the_run() -> None:
    """Soft wiring: the run goes on, the call reads WorkspaceFailedError (seed 000)."""
    play = Play(call("workspace_write", {"path": "a.md", "content": "x"}), reply("done"))
    agent = define_agent("scribe", workspaces=[Workspace("notes", "local")], llm=ScriptedLLM(play))
    result = await run_root(MemoryEventStore(), agent, {})
    assert result.status == "completed"
    [[outcome]] = all_results(play)
    assert outcome == {
        "error": "WorkspaceFailedError: workspace 'notes' (kind 'local') failed: no provider "
        "of kind 'local' is configured on this executor (workspace_providers)"
    }


class _BrokenProvider(MemoryWorkspaceProvider):
    async def open(self, ref: WorkspaceRef) -> None:
        raise OSError("the disk is on fire")

    async def read_file(self, ref: WorkspaceRef, path: str) -> bytes:
        raise RuntimeError("unexpected")


async def test_a_provider_that_fails_to_open_fails_the_calls_on_that_workspace() -> None:
    play = Play(
        [
            call("workspace_read", {"path": "a.md", "workspace": "broken"}),
            call("workspace_write", {"path": "a.md", "content": "x", "workspace": "fine"}),
        ],
        reply("done"),
    )
    agent = define_agent(
        "scribe",
        workspaces=[Workspace("broken", "flaky"), Workspace("fine", "memory")],
        llm=ScriptedLLM(play),
    )
    providers: dict[str, WorkspaceProvider] = {
        "flaky": _BrokenProvider(),
        "memory": MemoryWorkspaceProvider(),
    }
    result = await run_root(MemoryEventStore(), agent, providers)
    assert result.status == "completed"
    [[broken, fine]] = all_results(play)
    assert broken == {
        "error": "WorkspaceFailedError: workspace 'broken' (kind 'flaky') failed: "
        "opening it failed: OSError: the disk is on fire"
    }
    assert fine["size"] == 1


async def test_several_workspaces_are_named_in_the_calls() -> None:
    play = Play(
        [
            call("workspace_write", {"path": "a.md", "content": "x"}),
            call("workspace_write", {"path": "a.md", "content": "cached", "workspace": "cache"}),
            call("workspace_read", {"path": "a.md", "workspace": "nope"}),
        ],
        [
            call("workspace_list", {"workspace": "notes"}),
            call("workspace_read", {"path": "a.md", "workspace": "cache"}),
        ],
        reply("done"),
    )
    agent = define_agent(
        "scribe",
        workspaces=[Workspace("notes", "memory"), Workspace("cache", "memory")],
        llm=ScriptedLLM(play),
    )
    await run_root(MemoryEventStore(), agent, {"memory": MemoryWorkspaceProvider()})
    first, second = all_results(play)
    assert first[0] == {
        "error": "WorkspaceError: there are several workspaces ('notes', 'cache'); "
        "name one in 'workspace'"
    }
    assert first[1]["workspace"] == "cache"
    assert first[2] == {
        "error": "WorkspaceError: no workspace named 'nope'; the workspaces are 'notes', 'cache'"
    }
    assert second[0]["files"] == []
    assert second[1]["content"] == "cached"


# --- sub-agents ----------------------------------------------------------------------------


def reader(*, own: Sequence[Workspace] = ()) -> tuple[AgentConfig, Play]:
    """A child that reads plan.md, writes reply.md and answers with what it read."""
    play = Play(
        call("workspace_read", {"path": "plan.md"}),
        lambda request: call("workspace_write", {"path": "reply.md", "content": "on it"}),
        lambda request: finish({"answer": msgspec.json.encode(all_results(play)[0][0]).decode()}),
    )
    agent = define_agent(
        "reader", output_schema=Answer, workspaces=list(own), llm=ScriptedLLM(play)
    )
    return agent, play


def scribe(child: AgentConfig, *, inherit: bool, kind: str = "memory") -> tuple[AgentConfig, Play]:
    """A parent that writes plan.md, calls the child, then reads reply.md."""
    play = Play(
        call("workspace_write", {"path": "plan.md", "content": "the plan"}),
        call(f"subagent__{child.name}", {"query": "read the plan"}),
        call("workspace_read", {"path": "reply.md"}),
        reply("done"),
    )
    agent = define_agent(
        "scribe",
        workspaces=[Workspace("notes", kind)],
        tools=[create_sub_agent_tool(child, Query, inherit_workspace=inherit)],
        llm=ScriptedLLM(play),
    )
    return agent, play


@KINDS
async def test_an_inheriting_child_uses_its_parents_workspace(kind: str, tmp_path: Path) -> None:
    child, child_play = reader()
    parent, parent_play = scribe(child, inherit=True, kind=kind)
    store = MemoryEventStore()
    result = await run_root(store, parent, providers_for(kind, tmp_path))
    assert result.status == "completed"
    # The child read the parent's file; the parent read the child's.
    assert all_results(child_play)[0] == [
        {"workspace": "notes", "path": "plan.md", "content": "the plan", "size": 8}
    ]
    assert all_results(parent_play)[2] == [
        {"workspace": "notes", "path": "reply.md", "content": "on it", "size": 5}
    ]
    # An inheriting child declares nothing yet gets the tools.
    assert "workspace_read" in child_play.tool_names()
    child_log = await store.read(CHILD)
    created = child_log[0]
    assert isinstance(created, SessionCreated)
    assert created.workspace_session_id == ROOT
    [written] = [e for e in child_log if isinstance(e, WorkspaceWritten)]
    assert (written.path, written.owner_session_id) == ("reply.md", ROOT)
    assert project_state(child_log).workspace_files["notes"]["reply.md"].size == 5
    # The parent's log records only its own write.
    parent_writes = [e.path for e in await store.read(ROOT) if isinstance(e, WorkspaceWritten)]
    assert parent_writes == ["plan.md"]


async def test_a_child_that_does_not_inherit_has_only_its_own_workspace() -> None:
    child, child_play = reader(own=[Workspace("notes", "memory")])
    parent, parent_play = scribe(child, inherit=False)
    store = MemoryEventStore()
    await run_root(store, parent, {"memory": MemoryWorkspaceProvider()})
    assert all_results(child_play)[0] == [
        {"error": "WorkspaceFileNotFoundError: workspace 'notes' has no file 'plan.md'"}
    ]
    assert all_results(parent_play)[2] == [
        {"error": "WorkspaceFileNotFoundError: workspace 'notes' has no file 'reply.md'"}
    ]
    created = (await store.read(CHILD))[0]
    assert isinstance(created, SessionCreated)
    assert created.workspace_session_id is None


async def test_a_child_without_workspaces_or_inheritance_gets_no_workspace_tools() -> None:
    play = Play(finish({"answer": "nothing to see"}))
    child = define_agent("reader", output_schema=Answer, llm=ScriptedLLM(play))
    parent, _ = scribe(child, inherit=False)
    await run_root(MemoryEventStore(), parent, {"memory": MemoryWorkspaceProvider()})
    assert play.tool_names() == ["__finish__"]


async def test_inheriting_under_a_parent_without_workspaces_gives_nothing() -> None:
    play = Play(finish({"answer": "ok"}))
    child = define_agent("reader", output_schema=Answer, llm=ScriptedLLM(play))
    parent = define_agent(
        "plain",
        tools=[create_sub_agent_tool(child, Query, inherit_workspace=True)],
        llm=ScriptedLLM([call("subagent__reader", {"query": "q"}), reply("done")]),
    )
    store = MemoryEventStore()
    assert (await run_root(store, parent, {})).status == "completed"
    assert play.tool_names() == ["__finish__"]
    created = (await store.read(f"{ROOT}-sub-call_0_0"))[0]
    assert isinstance(created, SessionCreated)
    assert created.workspace_session_id is None


async def test_inheritance_passes_down_through_an_inheriting_child() -> None:
    leaf_play = Play(
        call("workspace_read", {"path": "plan.md"}),
        lambda request: finish({"answer": all_results(leaf_play)[0][0]["content"]}),
    )
    leaf = define_agent("leaf", output_schema=Answer, llm=ScriptedLLM(leaf_play))
    mid = define_agent(
        "mid",
        output_schema=Answer,
        tools=[create_sub_agent_tool(leaf, Query, inherit_workspace=True)],
        llm=ScriptedLLM([call("subagent__leaf", {"query": "read"}), finish({"answer": "ok"})]),
    )
    root, _ = scribe(mid, inherit=True)
    store = MemoryEventStore()
    await run_root(store, root, {"memory": MemoryWorkspaceProvider()})
    leaf_id = f"{CHILD}-sub-call_0_0"
    created = (await store.read(leaf_id))[0]
    assert isinstance(created, SessionCreated)
    assert created.workspace_session_id == ROOT
    assert project_state(await store.read(leaf_id)).output == {"answer": "the plan"}


async def test_a_start_request_inherits_only_from_a_parent_running_here() -> None:
    store = MemoryEventStore()
    own = define_agent("owner", output_schema=Answer, workspaces=[Workspace("w", "memory")])
    bare = define_agent("bare", output_schema=Answer)
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(
            store,
            [own, bare],
            llm=ScriptedLLM([]),  # refused before any model would be asked
            workspace_providers={"memory": MemoryWorkspaceProvider()},
        ) as executor:
            request = RemoteStartRequest(
                session_id="spoof",
                agent_type="bare",
                message="read someone else's files",
                parent_session_id="victim",
                workspace_session_id="victim",
            )
            with pytest.raises(AgentServerError) as caught:
                await executor.service.start(request)
            assert caught.value.code == "INVALID_REQUEST"
            assert "may only be set by a parent session running in this process" in str(
                caught.value
            )
            declares = msgspec.structs.replace(request, agent_type="owner")
            with pytest.raises(AgentServerError) as named:
                await executor.service.start(declares)
            assert named.value.code == "INVALID_REQUEST"
            assert named.value.message.startswith(
                "WorkspaceInheritanceError: agent 'owner' inherits its parent's workspaces"
            )
    assert await store.list_sessions() == []


@KINDS
async def test_parallel_inheriting_siblings_see_each_others_writes(
    kind: str, tmp_path: Path
) -> None:
    arrived = 0
    both = anyio.Event()

    async def barrier(value: Query, ctx: Any) -> str:
        nonlocal arrived
        arrived += 1
        if arrived == 2:
            both.set()
        await both.wait()
        return "both wrote"

    def sibling_turn(request: LLMRequest) -> Any:
        name = first_user_text(request)
        turn = sum(isinstance(m, AssistantMessage) for m in request.messages)
        if turn == 0:
            return call("workspace_write", {"path": f"{name}.md", "content": f"from {name}"})
        if turn == 1:
            return call("barrier", {"query": name})
        if turn == 2:
            return call("workspace_list", {})
        listed = [entry["path"] for entry in results(request)[0]["files"]]
        return finish({"answer": ",".join(listed)})

    sibling = define_agent(
        "sibling",
        output_schema=Answer,
        tools=[define_tool("barrier", "Wait for the other sibling.", Query, barrier)],
        llm=ScriptedLLM(sibling_turn),
    )
    play = Play(
        [call("subagent__sibling", {"query": "a"}), call("subagent__sibling", {"query": "b"})],
        call("workspace_list", {}),
        reply("done"),
    )
    parent = define_agent(
        "parent",
        workspaces=[Workspace("notes", kind)],
        tools=[create_sub_agent_tool(sibling, Query, inherit_workspace=True)],
        llm=ScriptedLLM(play),
    )
    result = await run_root(MemoryEventStore(), parent, providers_for(kind, tmp_path))
    assert result.status == "completed"
    spawned, listed = all_results(play)
    assert spawned == [{"answer": "a.md,b.md"}, {"answer": "a.md,b.md"}]
    assert [entry["path"] for entry in listed[0]["files"]] == ["a.md", "b.md"]


# --- lifetime and durability -----------------------------------------------------------------


def paused_scribe(kind: str) -> tuple[AgentConfig, Play]:
    """Writes draft.md, asks the client (the run ends), then reads draft.md and finishes."""
    play = Play(
        call("workspace_write", {"path": "draft.md", "content": "kept across runs"}),
        call("ask_user", {"query": "ok?"}),
        call("workspace_read", {"path": "draft.md"}),
        lambda request: finish({"answer": msgspec.json.encode(results(request)[0]).decode()}),
    )
    agent = define_agent(
        "scribe",
        output_schema=Answer,
        workspaces=[Workspace("notes", kind)],
        tools=[define_tool("ask_user", "Ask the user.", Query, "client")],
        llm=ScriptedLLM(play),
    )
    return agent, play


def client_call_id(store_log: Sequence[Any]) -> str:
    state = project_state(store_log)
    [pending] = [call_id for call_id, p in state.pending_client_tools.items() if not p.submitted]
    return pending


async def test_a_memory_workspace_lives_one_invocation() -> None:
    agent, _ = paused_scribe("memory")
    store = MemoryEventStore()
    provider = MemoryWorkspaceProvider()
    ref = WorkspaceRef(session_id=ROOT, name="notes", kind="memory")
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(
            store, [agent], workspace_providers={"memory": provider}
        ) as executor:
            first = await (await executor.execute(agent, "go", session_id=ROOT)).result()
            assert first.status == "paused"
            assert not provider.is_open(ref)  # closed when the run ended
            pending = client_call_id(await store.read(ROOT))
            await executor.submit_tool_result(ROOT, pending, result="yes")
            second = await (await executor.resume(ROOT)).result()
    assert second.status == "completed"
    assert msgspec.json.decode(second.output.answer) == {
        "error": "WorkspaceFileNotFoundError: workspace 'notes' has no file 'draft.md'"
    }


async def test_a_local_workspace_survives_a_process_restart(tmp_path: Path) -> None:
    agent, _ = paused_scribe("local")
    path, root = tmp_path / "events.db", tmp_path / "workspaces"
    first = SqliteEventStore(path)
    try:
        with anyio.fail_after(LIMIT):
            async with AgentExecutor(
                first, [agent], workspace_providers={"local": LocalWorkspaceProvider(root)}
            ) as executor:
                paused = await (await executor.execute(agent, "go", session_id=ROOT)).result()
        assert paused.status == "paused"
        pending = client_call_id(await first.read(ROOT))
    finally:
        await first.close()

    second = SqliteEventStore(path)  # a new process: new store, executor and provider
    try:
        with anyio.fail_after(LIMIT):
            async with AgentExecutor(
                second, [agent], workspace_providers={"local": LocalWorkspaceProvider(root)}
            ) as executor:
                await executor.submit_tool_result(ROOT, pending, result="yes")
                done = await (await executor.resume(ROOT)).result()
        assert done.status == "completed"
        assert msgspec.json.decode(done.output.answer) == {
            "workspace": "notes",
            "path": "draft.md",
            "content": "kept across runs",
            "size": 16,
        }
        log = await second.read(ROOT)
        assert [e.mode for e in log if isinstance(e, RunStarted)] == ["start", "resume"]
        written = project_state(log).workspace_files["notes"]["draft.md"]
        assert written.sha256 == sha("kept across runs")
    finally:
        await second.close()


async def test_a_crashed_parent_and_its_inheriting_child_resume_on_a_local_workspace(
    tmp_path: Path,
) -> None:
    entered = anyio.Event()
    calls = 0

    async def slow(value: Query, ctx: Any) -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            entered.set()
            await anyio.sleep_forever()  # the process dies while this runs
        return "done waiting"

    child_play = Play(
        call("wait", {"query": "x"}),
        call("workspace_read", {"path": "plan.md"}),
        lambda request: finish({"answer": results(request)[0]["content"]}),
    )
    child = define_agent(
        "reader",
        output_schema=Answer,
        tools=[define_tool("wait", "Wait.", Query, slow)],
        llm=ScriptedLLM(child_play),
    )
    parent, _ = scribe(child, inherit=True, kind="local")
    path, root = tmp_path / "events.db", tmp_path / "workspaces"
    first = SqliteEventStore(path)
    try:
        with anyio.fail_after(LIMIT), anyio.CancelScope() as crash:
            async with AgentExecutor(
                first, [parent], workspace_providers={"local": LocalWorkspaceProvider(root)}
            ) as executor:
                await executor.execute(parent, "go", session_id=ROOT)
                await entered.wait()
                crash.cancel()
    finally:
        await first.close()

    second = SqliteEventStore(path)
    try:
        assert project_state(await second.read(CHILD)).status == "running"
        with anyio.fail_after(LIMIT):
            async with AgentExecutor(
                second, [parent], workspace_providers={"local": LocalWorkspaceProvider(root)}
            ) as executor:
                assert sorted(await executor.recover()) == [ROOT, CHILD]
                await executor.wait_idle(ROOT)
        assert project_state(await second.read(CHILD)).output == {"answer": "the plan"}
        assert project_state(await second.read(ROOT)).status == "completed"
    finally:
        await second.close()


async def test_an_inheriting_child_resumed_alone_reopens_its_owners_workspace(
    tmp_path: Path,
) -> None:
    """A child whose parent runs nowhere finds the declarations in the owner's log."""
    store = MemoryEventStore()
    root = tmp_path / "workspaces"
    child_play = Play(
        call("workspace_read", {"path": "plan.md"}),
        lambda request: finish({"answer": results(request)[0]["content"]}),
    )
    child = define_agent("reader", output_schema=Answer, llm=ScriptedLLM(child_play))
    parent, _ = scribe(child, inherit=True, kind="local")
    provider = LocalWorkspaceProvider(root)
    ref = WorkspaceRef(session_id=ROOT, name="notes", kind="local")
    await store.append(
        ROOT, [SessionCreated(session_id=ROOT, seq=1, ts=1.0, agent_type="scribe", run_id="r0")], 0
    )
    await provider.open(ref)
    await provider.write_file(ref, "plan.md", b"written before")
    orphan: list[Event] = [
        SessionCreated(
            session_id="orphan",
            seq=1,
            ts=1.0,
            agent_type="reader",
            run_id="r1",
            parent_session_id=ROOT,
            workspace_session_id=ROOT,
        ),
        RunStarted(session_id="orphan", seq=2, ts=1.0, run_id="r1"),
    ]
    await store.append("orphan", orphan, 0)
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(
            store, [parent], workspace_providers={"local": LocalWorkspaceProvider(root)}
        ) as executor:
            await executor.service.resume(RemoteResumeRequest(session_id="orphan"))
            await executor.wait_idle("orphan")
    assert project_state(await store.read("orphan")).output == {"answer": "written before"}


# --- replay ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_replay_shows_workspace_writes_in_the_timeline(tmp_path: Path) -> None:
    play = Play(
        call("workspace_write", {"path": "notes/idea.md", "content": "Lyon"}),
        call("workspace_write", {"path": "scratch.md", "content": "tmp"}),
        call("workspace_delete", {"path": "scratch.md"}),
        reply("done"),
    )
    agent = define_agent("scribe", workspaces=[Workspace("notes", "memory")], llm=ScriptedLLM(play))

    async def record() -> None:
        store = SqliteEventStore(tmp_path / "events.db")
        try:
            await run_root(store, agent, {"memory": MemoryWorkspaceProvider()})
        finally:
            await store.close()

    anyio.run(record)
    command = [sys.executable, "-m", "helix_agents.server", "replay"]
    out = subprocess.run(
        [*command, "--store", "sqlite:///events.db", ROOT],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    timeline, state = out.split("\n\n", 1)
    written = [line for line in timeline.splitlines() if " workspace_written " in line]
    assert len(written) == 2
    assert f"notes: 'notes/idea.md' 4 B sha256={sha('Lyon')[:12]}" in written[0]
    [deleted] = [line for line in timeline.splitlines() if " workspace_deleted " in line]
    assert deleted.endswith("notes: 'scratch.md'")
    assert re.search(r"workspace files\s+1\n", state)
    assert f"notes: 'notes/idea.md'  4 B  sha256={sha('Lyon')[:12]}" in state


@pytest.mark.parametrize(
    ("owner_agent", "reason"),
    [
        (None, "the workspaces' owner session 'owner' does not exist"),
        ("unknown", "the agent of owner session 'owner' is not registered on this executor"),
    ],
)
async def test_an_inherited_registry_that_cannot_be_found_fails_the_calls(
    owner_agent: str | None, reason: str
) -> None:
    store = MemoryEventStore()
    if owner_agent is not None:
        created = SessionCreated(
            session_id="owner", seq=1, ts=1.0, agent_type=owner_agent, run_id="r"
        )
        await store.append("owner", [created], 0)
    play = Play(call("workspace_read", {"path": "plan.md"}), finish({"answer": "gave up"}))
    child = define_agent("reader", output_schema=Answer, llm=ScriptedLLM(play))
    orphan: list[Event] = [
        SessionCreated(
            session_id="orphan",
            seq=1,
            ts=1.0,
            agent_type="reader",
            run_id="r1",
            parent_session_id="owner",
            workspace_session_id="owner",
        ),
        RunStarted(session_id="orphan", seq=2, ts=1.0, run_id="r1"),
    ]
    await store.append("orphan", orphan, 0)
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [child]) as executor:
            await executor.service.resume(RemoteResumeRequest(session_id="orphan"))
            await executor.wait_idle("orphan")
    assert project_state(await store.read("orphan")).status == "completed"
    assert all_results(play)[0] == [
        {
            "error": "WorkspaceFailedError: workspace '(inherited)' (kind 'unknown') failed: "
            + reason
        }
    ]
