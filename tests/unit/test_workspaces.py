"""Workspaces without a run: paths, declarations, the provider seam and the wiring check.

The provider conformance suite runs against every shipped provider
(``memory`` and ``local``); the local provider's containment (links out of
the root, FIFOs, files too large) has its own tests. Runs that use
workspaces are in ``tests/integration/test_workspace_runs.py``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from helix_agents import (
    AgentExecutor,
    InProcessTransport,
    Tool,
    create_remote_sub_agent_tool,
    create_sub_agent_tool,
    define_agent,
    define_tool,
)
from helix_agents.errors import (
    AgentServerError,
    UsageError,
    WorkspaceFailedError,
    WorkspaceFileNotFoundError,
    WorkspaceInheritanceError,
    WorkspaceLimitError,
    WorkspacePathError,
)
from helix_agents.models import ScriptedLLM
from helix_agents.server import AgentServer
from helix_agents.stores import MemoryEventStore
from helix_agents.workspaces import (
    LocalWorkspaceProvider,
    MemoryWorkspaceProvider,
    Workspace,
    WorkspaceProvider,
    WorkspaceRef,
    normalize_workspace_path,
)
from helix_agents.workspaces.local import session_directory_name

LIMIT = 10.0


class Query(BaseModel):
    query: str


class Answer(BaseModel):
    answer: str


def ref(session_id: str = "s1", name: str = "notes", kind: str = "memory") -> WorkspaceRef:
    return WorkspaceRef(session_id=session_id, name=name, kind=kind)


# --- paths ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "normalised"),
    [
        ("idea.md", "idea.md"),
        ("notes/idea.md", "notes/idea.md"),
        ("./notes//idea.md", "notes/idea.md"),
        ("notes/./idea.md/", "notes/idea.md"),
        ("a:b.md", "a:b.md"),
        ("...md", "...md"),
        ("é/ü.txt", "é/ü.txt"),
    ],
)
def test_accepted_paths_are_normalised(given: str, normalised: str) -> None:
    assert normalize_workspace_path(given) == normalised


@pytest.mark.parametrize(
    ("given", "reason"),
    [
        ("/etc/passwd", "absolute paths are not allowed"),
        ("/notes/idea.md", "absolute paths are not allowed"),
        ("C:/x", "absolute paths are not allowed"),
        ("..", "'..' is not allowed"),
        ("../secret", "'..' is not allowed"),
        ("notes/../../secret", "'..' is not allowed"),
        ("notes/../idea.md", "'..' is not allowed"),
        ("notes\\idea.md", "use '/'"),
        ("a\nb", "control characters"),
        ("a\x00b", "control characters"),
        ("", "it names no file"),
        (".", "it names no file"),
        ("./", "it names no file"),
        ("x" * 256, "longer than 255 bytes"),
        ("a/" * 600, "longer than 1024 characters"),
        ("\ud800", "not valid Unicode"),
    ],
)
def test_refused_paths_say_why(given: str, reason: str) -> None:
    with pytest.raises(WorkspacePathError) as caught:
        normalize_workspace_path(given)
    assert reason in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_the_root_is_a_path_only_for_listing() -> None:
    assert normalize_workspace_path("", allow_root=True) == ""
    assert normalize_workspace_path("./", allow_root=True) == ""
    with pytest.raises(WorkspacePathError, match="must be a string"):
        normalize_workspace_path(3)


# --- declarations --------------------------------------------------------------------


def test_a_workspace_declaration_is_checked() -> None:
    workspace = Workspace("notes", "local", description="Working notes")
    assert (workspace.name, workspace.kind, workspace.description) == (
        "notes",
        "local",
        "Working notes",
    )
    for name in ("", "a b", "x" * 65, "a/b", "notes.md"):
        with pytest.raises(UsageError, match="invalid workspace name"):
            Workspace(name, "local")
    for kind in ("", "a b", "a/b"):
        with pytest.raises(UsageError, match="invalid kind"):
            Workspace("notes", kind)


def test_define_agent_keeps_workspaces_and_refuses_duplicates() -> None:
    notes, cache = Workspace("notes", "local"), Workspace("cache", "memory")
    agent = define_agent("scribe", workspaces=[notes, cache])
    assert agent.workspaces == (notes, cache)
    assert define_agent("plain").workspaces == ()
    with pytest.raises(UsageError, match="two workspaces are named 'notes'"):
        define_agent("scribe", workspaces=[notes, Workspace("notes", "memory")])
    with pytest.raises(UsageError, match="is not a Workspace"):
        define_agent("scribe", workspaces=["notes"])  # type: ignore[list-item]


def test_user_tools_may_not_use_the_workspace_prefix() -> None:
    with pytest.raises(UsageError, match="reserved prefix 'workspace_'"):
        define_tool("workspace_read", "Mine.", Query, lambda value, ctx: None)
    # A Tool built by hand is checked by define_agent too.
    sneaky = Tool(name="workspace_write", description="", input_schema=Query, execute=print)
    with pytest.raises(UsageError, match="reserved prefix 'workspace_'"):
        define_agent("scribe", tools=[sneaky])


def test_an_inheriting_sub_agent_may_not_declare_its_own_workspaces() -> None:
    child = define_agent("reader", output_schema=Answer, workspaces=[Workspace("own", "memory")])
    with pytest.raises(WorkspaceInheritanceError) as caught:
        create_sub_agent_tool(child, Query, inherit_workspace=True)
    message = str(caught.value)
    assert "agent 'reader' inherits its parent's workspaces" in message
    assert "'own'" in message
    assert isinstance(caught.value, UsageError)
    # Either one alone is fine.
    assert not create_sub_agent_tool(child, Query).inherit_workspace
    bare = define_agent("bare", output_schema=Answer)
    assert create_sub_agent_tool(bare, Query, inherit_workspace=True).inherit_workspace
    with pytest.raises(UsageError, match="inherit_workspace must be a bool"):
        create_sub_agent_tool(bare, Query, inherit_workspace="yes")  # type: ignore[arg-type]


def test_a_remote_sub_agent_cannot_inherit_workspaces() -> None:
    transport = InProcessTransport(AgentExecutor(MemoryEventStore()).service)
    options: dict[str, Any] = {
        "description": "Remote reader.",
        "input_schema": Query,
        "output_schema": Answer,
        "transport": transport,
        "remote_agent_type": "reader",
    }
    with pytest.raises(UsageError, match="inherit_workspace is not supported") as caught:
        create_remote_sub_agent_tool("reader", inherit_workspace=True, **options)
    assert "declare a workspace on the remote agent" in str(caught.value)
    assert create_remote_sub_agent_tool("reader", **options).name == "subagent__reader"


# --- the provider seam: one suite for every provider ------------------------------------


@pytest.fixture(params=["memory", "local"])
async def provider(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """An open workspace ``ref()`` on a provider with small limits (3000 / 5000 bytes)."""
    made: Any
    if request.param == "memory":
        made = MemoryWorkspaceProvider(max_file_bytes=3000, max_workspace_bytes=5000)
    else:
        made = LocalWorkspaceProvider(
            tmp_path / "root", max_file_bytes=3000, max_workspace_bytes=5000
        )
    checked: WorkspaceProvider = made  # it satisfies the Protocol
    await checked.open(ref())
    return made


async def test_write_then_read_and_overwrite(provider: WorkspaceProvider) -> None:
    await provider.write_file(ref(), "notes/idea.md", b"first")
    assert await provider.read_file(ref(), "notes/idea.md") == b"first"
    await provider.write_file(ref(), "notes/idea.md", b"second, longer")
    assert await provider.read_file(ref(), "notes/idea.md") == b"second, longer"
    await provider.write_file(ref(), "empty", b"")
    assert await provider.read_file(ref(), "empty") == b""


async def test_list_is_sorted_recursive_and_scoped_by_directory(
    provider: WorkspaceProvider,
) -> None:
    for path in ("b.md", "a/z.md", "a/b/c.md", "ab.md"):
        await provider.write_file(ref(), path, path.encode())
    everything = await provider.list_files(ref(), "", 100)
    assert [(entry.path, entry.size) for entry in everything] == [
        ("a/b/c.md", 8),
        ("a/z.md", 6),
        ("ab.md", 5),
        ("b.md", 4),
    ]
    assert [entry.path for entry in await provider.list_files(ref(), "a", 100)] == [
        "a/b/c.md",
        "a/z.md",
    ]
    assert [entry.path for entry in await provider.list_files(ref(), "b.md", 100)] == ["b.md"]
    assert await provider.list_files(ref(), "missing", 100) == []
    assert [entry.path for entry in await provider.list_files(ref(), "", 2)] == [
        "a/b/c.md",
        "a/z.md",
    ]


async def test_delete_says_whether_there_was_a_file(provider: WorkspaceProvider) -> None:
    await provider.write_file(ref(), "notes/idea.md", b"x")
    assert await provider.delete_file(ref(), "notes/idea.md") is True
    assert await provider.delete_file(ref(), "notes/idea.md") is False
    assert await provider.delete_file(ref(), "never/was.md") is False
    with pytest.raises(WorkspaceFileNotFoundError) as caught:
        await provider.read_file(ref(), "notes/idea.md")
    assert str(caught.value) == "workspace 'notes' has no file 'notes/idea.md'"
    assert await provider.list_files(ref(), "", 100) == []


async def test_a_path_is_a_file_or_a_directory_never_both(provider: WorkspaceProvider) -> None:
    await provider.write_file(ref(), "a/b.md", b"x")
    await provider.write_file(ref(), "file", b"x")
    for call in (
        provider.read_file(ref(), "a"),
        provider.write_file(ref(), "a", b"y"),
        provider.delete_file(ref(), "a"),
        provider.write_file(ref(), "file/below.md", b"y"),
    ):
        with pytest.raises(WorkspacePathError):
            await call
    assert [entry.path for entry in await provider.list_files(ref(), "", 100)] == [
        "a/b.md",
        "file",
    ]


async def test_size_limits_refuse_and_change_nothing(provider: WorkspaceProvider) -> None:
    with pytest.raises(WorkspaceLimitError) as caught:
        await provider.write_file(ref(), "big.bin", b"x" * 3001)
    assert (caught.value.size, caught.value.limit, caught.value.what) == (3001, 3000, "file")
    assert str(caught.value) == "'big.bin': file size 3001 bytes is over the 3000 limit"
    await provider.write_file(ref(), "one", b"x" * 3000)
    with pytest.raises(WorkspaceLimitError) as total:
        await provider.write_file(ref(), "two", b"x" * 2001)
    assert (total.value.size, total.value.what) == (5001, "workspace")
    assert [entry.path for entry in await provider.list_files(ref(), "", 100)] == ["one"]
    # Replacing a file counts its new size, not both.
    await provider.write_file(ref(), "two", b"x" * 2000)
    await provider.write_file(ref(), "one", b"y" * 3000)
    assert await provider.read_file(ref(), "one") == b"y" * 3000


async def test_workspaces_are_isolated_by_session_and_name(provider: WorkspaceProvider) -> None:
    others = [ref("s2"), ref("s1", "cache")]
    for other in others:
        await provider.open(other)
    await provider.write_file(ref(), "idea.md", b"mine")
    for other in others:
        assert await provider.list_files(other, "", 100) == []
        with pytest.raises(WorkspaceFileNotFoundError):
            await provider.read_file(other, "idea.md")


async def test_an_unopened_workspace_fails(provider: WorkspaceProvider) -> None:
    with pytest.raises(WorkspaceFailedError, match="it is not open"):
        await provider.read_file(ref("never-opened"), "x")
    await provider.close(ref())
    with pytest.raises(WorkspaceFailedError, match="it is not open"):
        await provider.write_file(ref(), "x", b"x")


async def test_concurrent_writes_all_land(provider: WorkspaceProvider) -> None:
    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg:
            for number in range(20):
                tg.start_soon(provider.write_file, ref(), f"d{number % 3}/f{number}", b"12345")
    entries = await provider.list_files(ref(), "", 100)
    assert len(entries) == 20
    assert {entry.size for entry in entries} == {5}


async def test_memory_forgets_at_close_local_keeps_files(tmp_path: Path) -> None:
    memory = MemoryWorkspaceProvider()
    local = LocalWorkspaceProvider(tmp_path)
    for made in (memory, local):
        await made.open(ref())
        await made.write_file(ref(), "kept.md", b"x")
        await made.close(ref())
        await made.open(ref())
    assert await memory.list_files(ref(), "", 10) == []
    assert [entry.path for entry in await local.list_files(ref(), "", 10)] == ["kept.md"]
    assert memory.is_open(ref())


def test_provider_limits_are_checked(tmp_path: Path) -> None:
    for bad in (0, -1, 1.5, True, "10"):
        with pytest.raises(UsageError, match="max_file_bytes must be an int >= 1"):
            MemoryWorkspaceProvider(max_file_bytes=bad)  # type: ignore[arg-type]
        with pytest.raises(UsageError, match="max_workspace_bytes must be an int >= 1"):
            LocalWorkspaceProvider(tmp_path, max_workspace_bytes=bad)  # type: ignore[arg-type]


# --- the local provider's containment ------------------------------------------------


@pytest.fixture
async def local(tmp_path: Path) -> LocalWorkspaceProvider:
    made = LocalWorkspaceProvider(tmp_path / "root", max_file_bytes=1000)
    await made.open(ref())
    return made


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the root, holding ``secret.txt``."""
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "secret.txt").write_text("top secret")
    return directory


def test_a_workspace_is_a_directory_per_session_under_the_root(tmp_path: Path) -> None:
    made = LocalWorkspaceProvider(tmp_path)
    assert made.directory(ref("parent-1", "notes")) == tmp_path / "parent-1" / "notes"
    # Escaped one-to-one; "." and ".." (valid session ids) never name a parent.
    names = {session_directory_name(sid) for sid in (".", "..", "a.b", "a_db", "a_b")}
    assert names == {"_d", "_d_d", "a_db", "a__db", "a__b"}
    long = session_directory_name("x" * 256)
    assert len(long) <= 120
    assert long != session_directory_name("x" * 255)
    relative = LocalWorkspaceProvider("relative-root")
    assert relative.root.is_absolute()


async def test_a_link_out_of_the_root_is_refused_for_every_operation(
    local: LocalWorkspaceProvider, outside: Path
) -> None:
    base = local.directory(ref())
    (base / "escape").symlink_to(outside)
    (base / "secret-link").symlink_to(outside / "secret.txt")
    for call in (
        local.read_file(ref(), "escape/secret.txt"),
        local.read_file(ref(), "secret-link"),
        local.write_file(ref(), "escape/secret.txt", b"overwritten"),
        local.write_file(ref(), "escape/new.txt", b"planted"),
        local.write_file(ref(), "secret-link", b"overwritten"),
        local.delete_file(ref(), "escape/secret.txt"),
        local.list_files(ref(), "escape", 10),
    ):
        with pytest.raises(WorkspacePathError, match="leads out of the workspace"):
            await call
    assert (outside / "secret.txt").read_text() == "top secret"
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    # Listing the whole workspace neither follows nor shows links.
    assert await local.list_files(ref(), "", 10) == []


async def test_a_link_that_stays_inside_is_followed(local: LocalWorkspaceProvider) -> None:
    await local.write_file(ref(), "real/idea.md", b"inside")
    base = local.directory(ref())
    (base / "alias").symlink_to(base / "real")
    assert await local.read_file(ref(), "alias/idea.md") == b"inside"


async def test_a_fifo_is_refused_not_opened_blocking(local: LocalWorkspaceProvider) -> None:
    os.mkfifo(local.directory(ref()) / "pipe")
    with anyio.fail_after(LIMIT), pytest.raises(WorkspacePathError, match="not a regular file"):
        await local.read_file(ref(), "pipe")
    with pytest.raises(WorkspacePathError, match="not a regular file"):
        await local.write_file(ref(), "pipe", b"x")


async def test_a_file_too_large_to_read_is_refused(local: LocalWorkspaceProvider) -> None:
    (local.directory(ref()) / "huge.log").write_bytes(b"x" * 1001)
    with pytest.raises(WorkspaceLimitError, match="1001 bytes is over the 1000 limit"):
        await local.read_file(ref(), "huge.log")


async def test_a_write_leaves_no_temporary_file(local: LocalWorkspaceProvider) -> None:
    await local.write_file(ref(), "notes/idea.md", b"one")
    await local.write_file(ref(), "notes/idea.md", b"two")
    assert os.listdir(local.directory(ref()) / "notes") == ["idea.md"]


# --- wiring (seed 000, "Workspace Wiring") ------------------------------------------------


def wired_agents() -> list[Any]:
    """A parent with a memory workspace whose sub-agent (reachable only through it) uses 'cloud'."""
    vault = Workspace("vault", "cloud")
    child = define_agent("archivist", output_schema=Answer, workspaces=[vault])
    parent = define_agent(
        "researcher",
        workspaces=[Workspace("notes", "memory")],
        tools=[create_sub_agent_tool(child, Query)],
    )
    return [parent]


def test_strict_wiring_names_every_agent_and_its_missing_kinds() -> None:
    with pytest.raises(AgentServerError) as caught:
        AgentExecutor(
            MemoryEventStore(),
            wired_agents(),
            workspace_providers={"memory": MemoryWorkspaceProvider()},
            workspace_provider_kinds=["memory"],
        )
    assert caught.value.code == "WORKSPACE_WIRING"
    assert caught.value.message == (
        "agent 'archivist' declares workspace kind(s) 'cloud' that "
        "workspace_provider_kinds does not cover"
    )


def test_strict_wiring_refuses_a_listed_kind_without_a_provider() -> None:
    with pytest.raises(AgentServerError) as caught:
        AgentExecutor(
            MemoryEventStore(),
            wired_agents(),
            workspace_providers={"memory": MemoryWorkspaceProvider()},
            workspace_provider_kinds=["memory", "cloud"],
        )
    assert caught.value.code == "WORKSPACE_WIRING"
    assert "lists 'cloud' but the executor has no provider of that kind" in caught.value.message


NO_MODEL = ScriptedLLM([])
"""A default model for executors built only to check their wiring (no agent runs)."""


def test_strict_wiring_that_covers_every_kind_is_silent(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="helix_agents")
    providers = {"memory": MemoryWorkspaceProvider(), "cloud": MemoryWorkspaceProvider()}
    executor = AgentExecutor(
        MemoryEventStore(),
        wired_agents(),
        llm=NO_MODEL,
        workspace_providers=providers,
        workspace_provider_kinds=("memory", "cloud"),
    )
    assert set(executor.workspaces.providers) == {"memory", "cloud"}
    assert caplog.records == []
    # Strict with an empty list is strict too.
    with pytest.raises(AgentServerError, match="WORKSPACE_WIRING"):
        AgentExecutor(MemoryEventStore(), wired_agents(), workspace_provider_kinds=[])


def test_soft_wiring_warns_when_an_agent_declares_workspaces(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="helix_agents")
    AgentExecutor(
        MemoryEventStore(),
        wired_agents(),
        llm=NO_MODEL,
        workspace_providers={"memory": MemoryWorkspaceProvider()},
    )
    [record] = caplog.records
    message = record.getMessage()
    assert record.levelno == logging.WARNING
    assert "workspace_provider_kinds is unset" in message
    assert "'archivist', 'researcher' declare workspaces" in message
    assert "no provider of kind 'cloud'" in message
    assert "WorkspaceFailedError" in message
    caplog.clear()
    AgentExecutor(MemoryEventStore(), [define_agent("plain")], llm=NO_MODEL)
    assert caplog.records == []


def test_the_agent_server_checks_the_wiring_too(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryEventStore()
    with pytest.raises(AgentServerError) as caught:
        AgentServer(
            wired_agents(),
            store,
            workspace_providers={"memory": MemoryWorkspaceProvider()},
            workspace_provider_kinds=["memory"],
        )
    assert caught.value.code == "WORKSPACE_WIRING"
    assert "'archivist'" in caught.value.message
    # With an executor of yours, the server checks its agents against your kinds.
    executor = AgentExecutor(store, workspace_providers={"memory": MemoryWorkspaceProvider()})
    with pytest.raises(AgentServerError, match="agent 'archivist' declares workspace kind"):
        AgentServer(wired_agents(), store, executor=executor, workspace_provider_kinds=["memory"])
    with pytest.raises(UsageError, match="give workspace_providers to the executor"):
        AgentServer(
            wired_agents(),
            store,
            executor=executor,
            workspace_providers={"memory": MemoryWorkspaceProvider()},
        )
    caplog.set_level(logging.WARNING, logger="helix_agents")
    server = AgentServer(wired_agents(), store, llm=NO_MODEL, workspace_providers={})
    assert server.agent_types == ["researcher"]
    assert any("workspace_provider_kinds is unset" in r.getMessage() for r in caplog.records)


def test_wiring_options_are_checked() -> None:
    store = MemoryEventStore()
    with pytest.raises(UsageError, match="must be a list of kinds"):
        AgentExecutor(store, workspace_provider_kinds="memory")
    with pytest.raises(UsageError, match="invalid kind"):
        AgentExecutor(store, workspace_provider_kinds=["no spaces"])
    with pytest.raises(UsageError, match="lacks open, close, read_file"):
        AgentExecutor(store, workspace_providers={"memory": object()})  # type: ignore[dict-item]
    with pytest.raises(UsageError, match="invalid kind"):
        AgentExecutor(store, workspace_providers={"a b": MemoryWorkspaceProvider()})
    with pytest.raises(UsageError, match="must be a mapping"):
        AgentExecutor(store, workspace_providers=[MemoryWorkspaceProvider()])  # type: ignore[arg-type]
