"""The README's front page: its snippets run as written, its lists are whole.

The real-model snippet (``openai:``, OpenAI's Responses API) runs against a
fake OpenAI server on uvicorn (loopback), reached
through ``OPENAI_BASE_URL``; so does
the served counter of "Serving an agent...", a real ``helix-agents serve``
subprocess that the README's own ``curl`` lines are sent to (with httpx).
The same snippet runs on ``anthropic:`` and ``google:`` with only its model
string and the key changed, each on its provider's fake (reached through
``ANTHROPIC_BASE_URL``, ``GOOGLE_GEMINI_BASE_URL``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import anyio
import httpx
import pytest
from anyio.abc import Process
from conversation_fakes import WIRES, Call, Conversation, Offered, Said, answering
from provider_fakes import FakeAnthropic, FakeGemini
from responses_fake import FakeResponses, Turn
from servers import listen_port, serve
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
QUICKSTART = (
    "python3 -m pip install . && python3 -m helix_agents.server demo\n"
    "python3 -m pip install -e '.[dev]' --config-settings editable_mode=strict "
    "&& python3 -m pytest\n"
)


SERVING = "Serving an agent and starting a session with curl"


def block(heading: str) -> str:
    """The first fenced block under ``heading``."""
    section = README.read_text(encoding="utf-8").split(f"\n## {heading}\n", 1)[1]
    match = re.search(r"```(?:python)?\n(.*?)```", section, re.DOTALL)
    assert match is not None, heading
    return match.group(1)


def fake_openai(requests: list[dict[str, Any]]) -> Starlette:
    """First a word_count call, then a text answer quoting the tool's result (the Responses
    API, which ``openai:`` speaks)."""

    async def responses(request: Request) -> Response:
        body = await request.json()
        requests.append(body)
        results = [i["output"] for i in body["input"] if i.get("type") == "function_call_output"]
        if results:
            turn = Turn().message([f"It has {results[0]} words."])
        else:
            arguments = json.dumps({"text": "logs make recovery a replay"})
            turn = Turn().call("c1", "word_count", [arguments])
        return turn.completed().reply()()

    return Starlette(
        routes=[
            Route("/v1/responses", responses, methods=["POST"]),
        ]
    )


SNIPPET_MODEL = "openai:gpt-4o-mini"
"""The model string of "A real model in ten lines"."""


class Provider(NamedTuple):
    """A provider the real-model snippet runs on: its model string, its key's variable, its
    API root's variable (pointed at its fake), its fake's wire."""

    model: str
    key: str
    base_url: str
    wire: str


PROVIDERS = {
    "openai": Provider(SNIPPET_MODEL, "OPENAI_API_KEY", "OPENAI_BASE_URL", "responses"),
    "anthropic": Provider(
        "anthropic:claude-haiku-4-5", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "anthropic"
    ),
    "google": Provider(
        "google:gemini-2.5-flash", "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "gemini"
    ),
}
MODEL_VARIABLES = ("OPENAI_", "ANTHROPIC_", "GEMINI_", "GOOGLE_")
"""The prefixes of every provider's variables: none reaches the snippet but what a test sets."""


def counting(c: Conversation) -> Said:
    """The model the snippet meets: it calls word_count, then answers with its result."""
    if c.results:
        return Said(text=(f"It has {c.results[0]} words.",))
    return Said(calls=(Call("w1", "word_count", {"text": "logs make recovery a replay"}),))


def on_provider(provider: str, tmp_path: Path) -> Path:
    """The snippet with its model string swapped for ``provider``'s (and nothing else)."""
    snippet = block("A real model in ten lines")
    assert snippet.count(SNIPPET_MODEL) == 1, "the snippet names its model once"
    path = tmp_path / "real.py"
    path.write_text(snippet.replace(SNIPPET_MODEL, PROVIDERS[provider].model))
    return path


def test_the_quickstart_commands_are_kept_exactly() -> None:
    assert block("Quickstart") == QUICKSTART


async def test_the_real_model_snippet_runs_as_written(tmp_path: Path) -> None:
    snippet = block("A real model in ten lines")
    assert len(snippet.strip().splitlines()) <= 14
    (tmp_path / "real.py").write_text(snippet)
    requests: list[dict[str, Any]] = []
    with anyio.fail_after(60):
        async with serve(fake_openai(requests)) as url:
            env = {**os.environ, "OPENAI_BASE_URL": f"{url}/v1", "OPENAI_API_KEY": "sk-test"}
            done = await anyio.run_process(
                [sys.executable, "real.py"], cwd=tmp_path, env=env, check=False
            )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode() == "It has 5 words.\n"
    first = requests[0]
    assert first["model"] == "gpt-4o-mini"
    [spec] = first["tools"]  # the Responses API's function tool: openai: speaks it
    assert spec["name"] == "word_count"
    assert spec["description"] == "Count the words of a text."
    assert spec["parameters"]["required"] == ["text"]


@pytest.mark.parametrize("provider", list(PROVIDERS))
async def test_the_real_model_snippet_runs_on_each_provider_by_its_string_and_key(
    tmp_path: Path, provider: str
) -> None:
    """Only the model string and the key change (and the API root, to reach the fake)."""
    spec = PROVIDERS[provider]
    script = on_provider(provider, tmp_path)
    fake: FakeAnthropic | FakeGemini | FakeResponses
    if spec.wire == "anthropic":
        fake = FakeAnthropic()
    elif spec.wire == "gemini":
        fake = FakeGemini()
    else:
        fake = FakeResponses()
    fake.answer = answering(spec.wire, counting)
    app = fake.app() if isinstance(fake, FakeResponses) else fake.app
    env = {k: v for k, v in os.environ.items() if not k.startswith(MODEL_VARIABLES)}
    with anyio.fail_after(60):
        async with serve(app) as url:
            root = f"{url}/v1" if provider == "openai" else url
            env |= {spec.key: "key-of-the-test", spec.base_url: root}
            done = await anyio.run_process(
                [sys.executable, script.name], cwd=tmp_path, env=env, check=False
            )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode() == "It has 5 words.\n"
    assert done.stderr == b""  # no SDK's warning either
    first, second = (WIRES[spec.wire].read(request.body) for request in fake.requests)
    assert first.tools == {  # the tool's spec, as the provider's API takes it
        "word_count": Offered(
            "Count the words of a text.",
            {
                "additionalProperties": False,
                "properties": {"text": {"title": "Text", "type": "string"}},
                "required": ["text"],
                "title": "WordCountInput",
                "type": "object",
            },
        )
    }
    assert second.results == ["5"]
    assert all("key-of-the-test" in str(request.headers) for request in fake.requests)
    model = spec.model.partition(":")[2]
    for request in fake.requests:  # Gemini names the model in the path, the others in the body
        assert request.body.get("model") == model or f"/models/{model}:" in str(request)


@pytest.mark.parametrize(
    ("provider", "line"),
    [
        ("anthropic", "needs an Anthropic API key: set ANTHROPIC_API_KEY"),
        ("google", "needs a Gemini API key: set GEMINI_API_KEY or GOOGLE_API_KEY"),
    ],
)
async def test_the_snippet_on_another_provider_without_its_key_names_it(
    tmp_path: Path, provider: str, line: str
) -> None:
    script = on_provider(provider, tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(MODEL_VARIABLES)}
    env["OPENAI_API_KEY"] = "sk-another-providers-key"  # not the one it needs
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [sys.executable, script.name], cwd=tmp_path, env=env, check=False
        )
    assert done.returncode == 1
    last = done.stderr.decode().splitlines()[-1]
    assert f"model '{PROVIDERS[provider].model}' {line}" in last, last


async def test_the_real_model_snippet_without_a_key_names_the_variable(tmp_path: Path) -> None:
    (tmp_path / "real.py").write_text(block("A real model in ten lines"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [sys.executable, "real.py"], cwd=tmp_path, env=env, check=False
        )
    assert done.returncode == 1
    assert "set OPENAI_API_KEY" in done.stderr.decode().splitlines()[-1]


async def test_the_using_it_snippet_names_the_agents(tmp_path: Path) -> None:
    (tmp_path / "snippet.py").write_text(block("Using it"))
    with anyio.fail_after(60):
        done = await anyio.run_process([sys.executable, "snippet.py"], cwd=tmp_path)
    out = done.stdout.decode().splitlines()
    assert out[-1] == "completed answer='Because a log replays.'"
    assert {line.split()[1] for line in out[:-1]} == {"lead", "researcher"}


def test_every_example_is_listed_and_the_specs_are_linked() -> None:
    text = README.read_text(encoding="utf-8")
    for path in sorted((ROOT / "examples").glob("*.py")):
        assert f"(examples/{path.name})" in text, path.name
    for spec in sorted((ROOT / "specs").glob("*.md")):
        assert f"(specs/{spec.name})" in text, spec.name
    assert "\n## Contributing\n" in text
    assert "helix-agents chat" in text


async def test_the_answering_snippet_pauses_lists_answers_and_completes(tmp_path: Path) -> None:
    snippet = block("Answering people in code")
    assert "requires_approval=True" in snippet
    assert 'execute="client"' in snippet
    (tmp_path / "answering.py").write_text(snippet)
    with anyio.fail_after(60):
        done = await anyio.run_process([sys.executable, "answering.py"], cwd=tmp_path)
    first, *entries, last = done.stdout.decode().splitlines()
    assert first == "paused"  # result() returned the pause, it did not raise
    # what waits, anywhere in the tree: kind, tool, arguments, the call id to answer
    assert sorted(line.rsplit(" ", 1)[0] for line in entries) == [
        "approval send_email {'to': 'ops'}",
        "client_tool pick_date {'question': 'When?'}",
    ]
    assert all(line.rsplit(" ", 1)[1].startswith("call_") for line in entries)
    assert last == "completed Ops are told; the review is on Friday."


async def test_the_testing_snippet_passes_under_pytest_and_fails_when_broken(
    tmp_path: Path,
) -> None:
    """The section's test file runs as a user's would: ``helix`` from the package's plugin."""
    snippet = block("Testing your agents")
    (tmp_path / "test_writer.py").write_text(snippet)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_writer.py"]
    with anyio.fail_after(120):
        done = await anyio.run_process(command, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    assert "1 passed" in done.stdout.decode()
    # Strict by default: the same test with a misspelled tool fails, naming it.
    broken = snippet.replace('ScriptedLLM.call("publish"', 'ScriptedLLM.call("publsh"')
    (tmp_path / "test_writer.py").write_text(broken)
    with anyio.fail_after(120):
        done = await anyio.run_process(command, cwd=tmp_path, check=False)
    assert done.returncode == 1
    assert "strict: the model called an unknown tool 'publsh'" in done.stdout.decode()


def curl_requests(commands: str, base: str) -> list[tuple[str, str, Any]]:
    """(method, URL on ``base``, JSON body or None) of each ``curl`` line of ``commands``.

    Fails on a curl option it does not know, so the README cannot say more
    than the test sends.
    """
    requests: list[tuple[str, str, Any]] = []
    for line in commands.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if not words or words[0] != "curl":
            continue
        method, body, url = "GET", None, None
        options = iter(words[1:])
        for word in options:
            if word in ("-s", "-N", "-sN"):
                continue
            if word == "-H":
                assert next(options).lower() == "content-type: application/json", line
            elif word == "-d":
                method, body = "POST", json.loads(next(options))
            else:
                assert not word.startswith("-"), f"unknown option {word} in {line}"
                assert url is None, f"two URLs in {line}"
                url = word
        assert url is not None, line
        parts = urlsplit(f"http://{url}")
        assert parts.netloc == "localhost:4000", url  # the port the serve line names
        requests.append((method, f"{base}{parts.path}?{parts.query}".rstrip("?"), body))
    return requests


async def test_the_serving_commands_start_a_session_the_inspector_lists(tmp_path: Path) -> None:
    commands = block(SERVING)
    serve_line, *_ = (line for line in commands.splitlines() if line.startswith("helix-agents"))
    words = shlex.split(serve_line)
    assert words[:3] == ["helix-agents", "serve", "mymodule:agents"], serve_line
    assert words[3:] == ["--port", "4000"], serve_line
    # mymodule.py as the README says: the counter, with agents = [agent] for its print line
    counter = block("A real model in ten lines").splitlines()
    assert counter[-1].startswith("print(")
    (tmp_path / "mymodule.py").write_text("\n".join([*counter[:-1], "agents = [agent]\n"]))
    port = listen_port()
    base = f"http://127.0.0.1:{port}"
    requests = curl_requests(commands, base)
    assert [(method, url.split("?")[0]) for method, url, _ in requests] == [
        ("POST", f"{base}/start"),
        ("GET", f"{base}/sse"),
        ("GET", f"{base}/status"),
    ]
    [(_, _, start_body), *_] = requests
    session = start_body["sessionId"]
    model_calls: list[dict[str, Any]] = []
    log = (tmp_path / "serve.log").open("wb")
    with anyio.fail_after(90):
        async with serve(fake_openai(model_calls)) as model_url:
            env = {**os.environ, "OPENAI_BASE_URL": f"{model_url}/v1", "OPENAI_API_KEY": "sk-t"}
            command = [sys.executable, "-m", "helix_agents.server", *words[1:4], str(port)]
            process = await anyio.open_process(
                command, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT
            )
            try:
                async with httpx.AsyncClient(timeout=30) as client:
                    await _wait_listening(client, base, process)
                    answers = [
                        await client.request(method, url, json=body)
                        for method, url, body in requests
                    ]
                    listed = await client.get(f"{base}/sessions", params={"topLevel": "true"})
                    inspector = await client.get(f"{base}/ui")
            finally:
                process.terminate()  # the one process this test started
                await process.wait()
                log.close()
    output = (tmp_path / "serve.log").read_text(errors="replace")
    for answer in answers:
        assert answer.status_code == 200, (answer.request.url, answer.text, output)
    started, streamed, status = answers
    assert started.json()["sessionId"] == session
    assert "event: end" in streamed.text
    assert "It has 5 words." in streamed.text
    assert status.json()["status"] == "completed"
    assert status.json()["output"] == "It has 5 words."
    assert [s["sessionId"] for s in listed.json()["sessions"]] == [session]
    assert inspector.status_code == 200
    assert inspector.headers["content-type"].startswith("text/html")
    assert model_calls[0]["model"] == "gpt-4o-mini"


async def _wait_listening(client: httpx.AsyncClient, base: str, process: Process) -> None:
    """Poll ``/health`` until the server answers (a subprocess gives no other signal)."""
    while True:
        assert process.returncode is None, "the server exited before answering (serve.log)"
        try:
            if (await client.get(f"{base}/health")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await anyio.sleep(0.1)
