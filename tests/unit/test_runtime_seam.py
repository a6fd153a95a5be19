"""The runtime seam: which runtime runs the sessions is said once, when the executor is built.

A runtime serves one executor; an option it makes useless is refused; a
Temporal gateway's executor needs no model; a built executor (or server) has
no setter to change its runtime's parts afterwards. No engine is reached:
binding and construction only (the engines' integration tests run them).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from helix_agents import AgentExecutor, define_agent
from helix_agents.dbos import DbosOptions, DbosRuntime
from helix_agents.errors import UsageError
from helix_agents.models import ScriptedLLM
from helix_agents.runtime import Runtime, RuntimeParts
from helix_agents.runtime.service import ExecutorService
from helix_agents.server import AgentServer, NatsRuntime
from helix_agents.stores import MemoryEventStore
from helix_agents.temporal import TemporalRuntime, temporal_server
from helix_agents.workspaces import LocalWorkspaceProvider

modelled = define_agent("modelled", llm=ScriptedLLM(["hi"]))
modelless = define_agent("modelless")


def _dbos(tmp_path: Path) -> DbosRuntime:
    return DbosRuntime(DbosOptions(system_database=f"sqlite:///{tmp_path / 'dbos.sqlite'}"))


class Recording:
    """A runtime of the test's own: the built-in service, and a record of its lifespan."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.executor: AgentExecutor | None = None

    @property
    def runs_models(self) -> bool:
        return True

    @property
    def recovers_sessions(self) -> bool:
        return False

    def bind(self, executor: AgentExecutor) -> RuntimeParts:
        self.executor = executor
        return RuntimeParts(service=ExecutorService(executor.runs), stop_grace=3.0)

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        assert self.executor is not None
        self.seen.append(f"open, task group {self.executor.runs.task_group is not None}")
        yield
        self.seen.append(f"close, task group {self.executor.runs.task_group is not None}")


@pytest.mark.parametrize(
    "make",
    [
        lambda tmp: TemporalRuntime(),
        lambda tmp: TemporalRuntime(worker=True),
        _dbos,
        lambda tmp: NatsRuntime(object()),  # type: ignore[arg-type]
    ],
    ids=["temporal-gateway", "temporal-worker", "dbos", "nats"],
)
def test_a_runtime_given_to_two_executors_is_refused(make: Any, tmp_path: Path) -> None:
    runtime: Runtime = make(tmp_path)
    AgentExecutor(MemoryEventStore(), [modelled], runtime=runtime)
    with pytest.raises(UsageError, match="already runs"):
        AgentExecutor(MemoryEventStore(), [modelled], runtime=runtime)


def test_a_temporal_gateway_needs_no_model() -> None:
    with pytest.raises(UsageError, match="has no model"):
        AgentExecutor(MemoryEventStore(), [modelless])  # built in: it would run the agent
    executor = AgentExecutor(MemoryEventStore(), [modelless], runtime=TemporalRuntime())
    executor.require_models()
    server = temporal_server([modelless], MemoryEventStore())
    assert server.agent_types == ["modelless"]
    with pytest.raises(UsageError, match="has no model"):  # a worker runs the models
        AgentExecutor(MemoryEventStore(), [modelless], runtime=TemporalRuntime(worker=True))


@pytest.mark.parametrize(
    "option",
    [
        {"llm": ScriptedLLM(["hi"])},
        {"llm_override": ScriptedLLM(["hi"])},
        {"workspace_providers": {"local": LocalWorkspaceProvider("/tmp/unused-root")}},
    ],
    ids=["llm", "llm_override", "workspace_providers"],
)
def test_an_option_a_gateway_never_uses_is_refused(option: dict[str, Any]) -> None:
    with pytest.raises(UsageError, match="runs no model in this process"):
        AgentExecutor(MemoryEventStore(), [modelless], runtime=TemporalRuntime(), **option)


def test_a_server_refuses_a_runtime_that_would_do_nothing(tmp_path: Path) -> None:
    executor = AgentExecutor(MemoryEventStore(), [modelled])
    with pytest.raises(UsageError, match="give the runtime to the executor"):
        AgentServer([modelled], executor.store, executor=executor, runtime=TemporalRuntime())
    with pytest.raises(UsageError, match="give the model to the executor"):
        AgentServer([modelled], executor.store, executor=executor, llm=ScriptedLLM(["hi"]))
    with pytest.raises(UsageError, match="recover=True does nothing"):
        AgentServer([modelled], MemoryEventStore(), runtime=_dbos(tmp_path), recover=True)


def test_a_built_executor_and_server_have_no_setters() -> None:
    for cls in (AgentExecutor, AgentServer):
        setters = [
            name
            for name, member in vars(cls).items()
            if isinstance(member, property) and member.fset is not None
        ]
        assert setters == [], cls.__name__
    server = AgentServer([modelled], MemoryEventStore(), runtime=Recording())
    with pytest.raises(AttributeError):
        server.executor.run_guard = None  # type: ignore[misc]
    with pytest.raises(AttributeError):
        server.run_guard = None  # type: ignore[misc]


async def test_a_runtime_is_open_while_its_executor_is() -> None:
    runtime = Recording()
    executor = AgentExecutor(MemoryEventStore(), [modelled], runtime=runtime)
    assert executor.runtime is runtime
    assert executor.env.stop_grace == 3.0  # the runtime's, as none was given
    async with executor:
        assert runtime.seen == ["open, task group True"]
    assert runtime.seen == ["open, task group True", "close, task group True"]
    assert (
        AgentExecutor(MemoryEventStore(), runtime=Recording(), stop_grace=1.0).env.stop_grace == 1.0
    )
