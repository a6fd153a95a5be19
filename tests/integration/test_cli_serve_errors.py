"""``serve``'s mistakes are one line and an exit status, never a traceback (specs/cli.md).

A module that fails to import is named with its file and line (exit 2); a
port out of range is a usage error (exit 2); an address in use is reported
before the store is opened, so no SQLite file is left behind (exit 1).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ERROR_LINE = re.compile(r"helix-agents: error: \S.*")

GOOD_MODULE = """\
from helix_agents import define_agent
from helix_agents.models import ScriptedLLM

agents = [define_agent("echo", llm=ScriptedLLM(["hi"]))]
"""


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m helix_agents.server ARGS`` in ``cwd``, its output captured."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELIX_")}
    return subprocess.run(
        [sys.executable, "-m", "helix_agents.server", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def one_error_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The single error line of a run that must have failed with ``code``."""
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    line = result.stderr.strip()
    assert ERROR_LINE.fullmatch(line), line
    return line


BROKEN_MODULES = {
    # id: (source, the line it fails at, a piece of the message)
    "syntax-error": ("x = 1\nagents = (\n", 2, "SyntaxError: '(' was never closed"),
    "raises": ("x = 1\n\nagents = 1 / 0\n", 3, "ZeroDivisionError: division by zero"),
    "missing-dependency": (
        "import os\nimport no_such_package_xyz\n",
        2,
        "No module named 'no_such_package_xyz'",
    ),
    "bad-definition": (
        "from helix_agents import define_agent\n\nagents = [define_agent('a', tools='x')]\n",
        3,
        "UsageError: agent 'a': tools must be a list of tools",
    ),
}


@pytest.mark.parametrize(
    ("source", "line", "needle"), BROKEN_MODULES.values(), ids=BROKEN_MODULES.keys()
)
def test_a_module_that_fails_to_import_is_one_line_with_file_and_line(
    tmp_path: Path, source: str, line: int, needle: str
) -> None:
    (tmp_path / "broken.py").write_text(source)
    error = one_error_line(run(tmp_path, "serve", "broken:agents", "--store", "memory://"), 2)
    assert f"broken.py:{line}" in error
    assert needle in error


def test_a_module_that_does_not_exist_is_named(tmp_path: Path) -> None:
    error = one_error_line(run(tmp_path, "serve", "nowhere:agents"), 2)
    assert "cannot import 'nowhere'" in error
    assert not (tmp_path / "helix.db").exists()


@pytest.mark.parametrize(
    ("target", "missing"),
    [("nowhere.agents:agents", "nowhere"), ("pkg.nowhere:agents", "pkg.nowhere")],
)
def test_a_missing_package_on_the_module_path_is_named_without_a_file(
    tmp_path: Path, target: str, missing: str
) -> None:
    """Nothing of the user's failed: no file and line of the import machinery's own."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    error = one_error_line(run(tmp_path, "serve", target), 2)
    module = target.partition(":")[0]
    assert error == (f"helix-agents: error: cannot import {module!r}: no module named {missing!r}")


@pytest.mark.parametrize("port", ["99999", "0", "-1", "http"])
def test_a_port_out_of_range_is_a_usage_error(tmp_path: Path, port: str) -> None:
    (tmp_path / "good.py").write_text(GOOD_MODULE)
    error = one_error_line(run(tmp_path, "serve", "good:agents", "--port", port), 2)
    assert "--port" in error
    assert not (tmp_path / "helix.db").exists()


def test_an_address_in_use_is_one_line_before_the_store_is_created(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(GOOD_MODULE)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run(
            tmp_path, "serve", "good:agents", "--port", str(port), "--store", "sqlite:///s.db"
        )
    error = one_error_line(result, 1)
    assert f"127.0.0.1:{port}: address already in use" in error
    assert not (tmp_path / "s.db").exists()
    assert result.stdout == ""


def test_an_agent_with_no_model_fails_before_serving(tmp_path: Path) -> None:
    (tmp_path / "mute.py").write_text(
        "from helix_agents import define_agent\n\nagents = [define_agent('mute')]\n"
    )
    result = run(tmp_path, "serve", "mute:agents", "--store", "sqlite:///m.db")
    error = one_error_line(result, 2)
    assert "agent 'mute' has no model" in error
    assert result.stdout == ""


TREE_MODULE = """\
from pydantic import BaseModel

from helix_agents import create_sub_agent_tool, define_agent
from helix_agents.models import ScriptedLLM


class Task(BaseModel):
    query: str


class Note(BaseModel):
    note: str


checker = define_agent("checker", output_schema=Note, llm=ScriptedLLM(["ok"]))
lead = define_agent(
    "orchestrator", tools=[create_sub_agent_tool(checker, Task)], llm=ScriptedLLM(["hi"])
)
"""

COMMANDS_TAKING_A_TARGET = {
    # id: the command line after the command's name, MODULE:ATTR being tree:agents
    "serve": ["serve", "tree:agents", "--store", "memory://"],
    "chat": ["chat", "tree:agents", "--store", "memory://"],
    "host": ["host", "tree:agents", "--nats", "nats://127.0.0.1:9"],
    "worker": ["worker", "tree:agents", "--temporal", "127.0.0.1:9", "--store", "memory://"],
    "replay-rerun": ["replay", "--store", "memory://", "s1", "--rerun", "tree:agents"],
}


@pytest.mark.parametrize("argv", COMMANDS_TAKING_A_TARGET.values(), ids=COMMANDS_TAKING_A_TARGET)
def test_a_missing_attribute_lists_the_agents_the_module_holds(
    tmp_path: Path, argv: list[str]
) -> None:
    """Every command taking MODULE:ATTR says what the module does hold, and what to try."""
    (tmp_path / "tree.py").write_text(TREE_MODULE)
    error = one_error_line(run(tmp_path, *argv), 2)
    assert error == (
        "helix-agents: error: 'tree' has no attribute 'agents'; it holds agents: "
        "checker, lead (agent 'orchestrator'; delegates to checker); try tree:lead"
    )


def test_a_missing_attribute_suggests_the_collection_a_module_holds(tmp_path: Path) -> None:
    (tmp_path / "tree.py").write_text(TREE_MODULE + "\nAGENTS = [lead, checker]\n")
    error = one_error_line(run(tmp_path, "serve", "tree:agents"), 2)
    assert error.endswith(
        "it holds agents: AGENTS (a list: orchestrator, checker), checker, "
        "lead (agent 'orchestrator'; delegates to checker); try tree:AGENTS"
    )
    assert not (tmp_path / "helix.db").exists()


def test_a_missing_attribute_of_a_module_without_agents_says_so(tmp_path: Path) -> None:
    (tmp_path / "empty.py").write_text("import os\n\nnames = ['a', 'b']\nnothing = []\n")
    error = one_error_line(run(tmp_path, "serve", "empty:agents"), 2)
    assert error == (
        "helix-agents: error: 'empty' has no attribute 'agents'; it holds no agents "
        "(define one with define_agent at the module's top level)"
    )


@pytest.mark.parametrize(
    ("flags", "piece"),
    [
        (["--webhook-secret", "s", "--webhook-allow", "http://x/"], "not a CIDR"),
        (["--webhook-secret", "s", "--webhook-attempts", "0"], "attempts >= 1"),
        (["--nats", "nats://127.0.0.1:1", "--webhook-secret", "s"], "give them --webhook-secret"),
    ],
)
def test_a_bad_webhook_option_is_one_usage_line(
    tmp_path: Path, flags: list[str], piece: str
) -> None:
    (tmp_path / "good_agents.py").write_text(GOOD_MODULE)
    target = [] if "--nats" in flags else ["good_agents:agents"]
    result = run(tmp_path, "serve", *target, "--port", "9", *flags)
    assert piece in one_error_line(result, 2)
    assert not (tmp_path / "helix.db").exists()
