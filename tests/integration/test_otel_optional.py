"""OpenTelemetry is optional (specs/otel.md): without the extra, nothing changes.

Each check runs in a fresh interpreter, so ``sys.modules`` shows exactly what
importing helix-agents and running a session (with no tracer) pulled in:
with OpenTelemetry installed, it is never imported; with it missing (an
import hook refuses it, as if the extra were not installed), everything
but ``helix_agents.otel`` works, and that one says how to install it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

RUN_A_SESSION = """
import sys

import anyio

import helix_agents
import helix_agents.server
import helix_agents.stores
import helix_agents.transports
from helix_agents import AgentExecutor, define_agent
from helix_agents.models import ScriptedLLM
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore


async def main() -> None:
    agent = define_agent("a", llm=ScriptedLLM(["hi"]))
    async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
        result = await (await executor.execute(agent, "go")).result()
    assert result.status == "completed", result
    create_http_app(AgentServer([agent], MemoryEventStore()))


anyio.run(main)
loaded = sorted(name for name in sys.modules if name.split(".")[0] == "opentelemetry")
print("loaded:", loaded)
"""

BLOCK_OPENTELEMETRY = """
import sys


class NotInstalled:
    # refuses opentelemetry as a missing distribution would
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NotInstalled())
"""

TRY_OTEL = """
try:
    import helix_agents.otel
except ImportError as exc:
    print("otel:", exc)
else:
    print("otel: imported")
"""


def _python(source: str, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(source)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_with_otel_installed_but_no_tracer_opentelemetry_is_never_imported(
    tmp_path: Path,
) -> None:
    out = _python(RUN_A_SESSION, tmp_path)
    assert "loaded: []" in out


def test_without_otel_everything_but_helix_agents_otel_works(tmp_path: Path) -> None:
    out = _python(BLOCK_OPENTELEMETRY + RUN_A_SESSION + TRY_OTEL, tmp_path)
    assert "loaded: []" in out
    assert "otel: helix_agents.otel needs OpenTelemetry: pip install 'helix-agents[otel]'" in out


def test_the_check_itself_sees_an_import(tmp_path: Path) -> None:
    """Importing helix_agents.otel does load OpenTelemetry: the checks above can see one."""
    out = _python(
        RUN_A_SESSION.replace("import helix_agents\n", "import helix_agents.otel\n"), tmp_path
    )
    assert "'opentelemetry.trace'" in out


GLOBAL_PROVIDER = """
import anyio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from helix_agents import AgentExecutor, define_agent
from helix_agents.models import ScriptedLLM
from helix_agents.otel import OtelTracer
from helix_agents.stores import MemoryEventStore

tracer = OtelTracer()  # made before any provider is set: it looks the global one up per span
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)


async def main() -> None:
    agent = define_agent("a", llm=ScriptedLLM(["hi"]))
    async with AgentExecutor(MemoryEventStore(), [agent], tracer=tracer) as executor:
        await (await executor.execute(agent, "go")).result()


anyio.run(main)
print("spans:", sorted(span.name for span in exporter.get_finished_spans()))
"""


def test_an_otel_tracer_uses_the_global_provider_even_one_set_later(tmp_path: Path) -> None:
    out = _python(GLOBAL_PROVIDER, tmp_path)
    assert "spans: ['chat', 'invoke_agent a', 'start_session a']" in out
