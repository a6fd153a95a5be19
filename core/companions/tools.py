"""The companion tools as the model sees them: names, JSON Schemas, argument checks.

Pure: no I/O. ``core/companions/parent.py`` runs them. The names, argument and result
shapes are the seeds' (specs/companions.md); a malformed call is an error
string here, which the runtime turns into the ``{"error": ...}`` result the
model reads, never an exception.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from helix_agents.agents.config import AgentConfig
from helix_agents.agents.tools import COMPANION_TOOL_PREFIX
from helix_agents.models.base import ToolSpec
from helix_agents.runtime.tool_runner import InvalidArguments, decode_arguments

__all__ = [
    "GET_CHILD_STATUS",
    "LIST_CHILDREN",
    "MAX_CHILD_NAME",
    "SEND_MESSAGE",
    "SPAWN_AGENT",
    "TERMINATE_CHILD",
    "WAIT_FOR_RESULT",
    "CompanionArgs",
    "check_arguments",
    "child_name_problem",
    "companion_specs",
    "companion_tool_names",
]

SPAWN_AGENT = COMPANION_TOOL_PREFIX + "spawnAgent"
"""Start a persistent child (or re-consult a completed one of that name)."""
SEND_MESSAGE = COMPANION_TOOL_PREFIX + "sendMessage"
"""Send a follow-up message to a child."""
LIST_CHILDREN = COMPANION_TOOL_PREFIX + "listChildren"
"""List the persistent children and their statuses."""
GET_CHILD_STATUS = COMPANION_TOOL_PREFIX + "getChildStatus"
"""One child's status and last output."""
TERMINATE_CHILD = COMPANION_TOOL_PREFIX + "terminateChild"
"""Stop a live child for good."""
WAIT_FOR_RESULT = COMPANION_TOOL_PREFIX + "waitForResult"
"""Wait for a child's outcome (only when a child type is blocking)."""

MAX_CHILD_NAME = 128
"""Longest child name, in characters."""

_NAME = re.compile(r"[A-Za-z0-9_\-]+")


@dataclass(frozen=True, kw_only=True)
class CompanionArgs:
    """A companion call's checked arguments (the fields its tool takes)."""

    agent: str = ""
    name: str | None = None
    message: str = ""
    timeout: float | None = None
    """Seconds (the tool takes milliseconds)."""


def companion_tool_names(agent: AgentConfig) -> tuple[str, ...]:
    """The companion tools ``agent`` gets: none without persistent agents."""
    if not agent.persistent_agents:
        return ()
    names: tuple[str, ...] = (
        SPAWN_AGENT,
        SEND_MESSAGE,
        LIST_CHILDREN,
        GET_CHILD_STATUS,
        TERMINATE_CHILD,
    )
    if any(entry.mode == "blocking" for entry in agent.persistent_agents):
        names = (*names, WAIT_FOR_RESULT)
    return names


def _name_property(what: str) -> dict[str, Any]:
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_CHILD_NAME,
        "pattern": "^[A-Za-z0-9_-]+$",
        "description": what,
    }


def companion_specs(agent: AgentConfig) -> list[ToolSpec]:
    """The companion tools of ``agent`` as the model sees them."""
    names = companion_tool_names(agent)
    if not names:
        return []
    kinds = "; ".join(
        f"{entry.agent.name} ({entry.mode}"
        + (
            f": {entry.description or entry.agent.description}"
            if entry.description or entry.agent.description
            else ""
        )
        + ")"
        for entry in agent.persistent_agents
    )
    child = _name_property("the child's name")
    specs = {
        SPAWN_AGENT: ToolSpec(
            name=SPAWN_AGENT,
            description=(
                "Start a persistent child agent, or re-consult a completed child of that name "
                "(it keeps its memory). A blocking child's result comes back inline; a "
                f"non-blocking child reports later. Types: {kinds}. Omit name for "
                "'<type>-<n>'; give distinct names to several children spawned at once."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "agent": {
                        "type": "string",
                        "enum": [entry.agent.name for entry in agent.persistent_agents],
                        "description": "the persistent agent type",
                    },
                    "initialMessage": {
                        "type": "string",
                        "minLength": 1,
                        "description": "what to ask the child",
                    },
                    "name": _name_property("a unique name (optional)"),
                },
                "required": ["agent", "initialMessage"],
            },
        ),
        SEND_MESSAGE: ToolSpec(
            name=SEND_MESSAGE,
            description=(
                "Send a follow-up message to a child: a running child takes it at its next "
                "step, a completed one continues with its memory. Returns {delivered}."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "name": child,
                    "message": {"type": "string", "minLength": 1},
                },
                "required": ["name", "message"],
            },
        ),
        LIST_CHILDREN: ToolSpec(
            name=LIST_CHILDREN,
            description="List the persistent children: [{name, agent, status}].",
            parameters={"type": "object", "properties": {}},
        ),
        GET_CHILD_STATUS: ToolSpec(
            name=GET_CHILD_STATUS,
            description="A child's status, and its output once it has completed.",
            parameters={"type": "object", "properties": {"name": child}, "required": ["name"]},
        ),
        TERMINATE_CHILD: ToolSpec(
            name=TERMINATE_CHILD,
            description="Stop a live child for good. Returns {name, terminated, status}.",
            parameters={"type": "object", "properties": {"name": child}, "required": ["name"]},
        ),
        WAIT_FOR_RESULT: ToolSpec(
            name=WAIT_FOR_RESULT,
            description=(
                "Wait until a child's turn ends and return its result; timeout in "
                "milliseconds (omit it to wait as long as it takes)."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "name": child,
                    "timeout": {"type": "number", "exclusiveMinimum": 0},
                },
                "required": ["name"],
            },
        ),
    }
    return [specs[name] for name in names]


def child_name_problem(name: object) -> str | None:
    """Why ``name`` is not a valid child name, or None."""
    if not isinstance(name, str):
        return "name must be a string"
    if not name:
        return "name must be non-empty"
    if len(name) > MAX_CHILD_NAME:
        return f"name must be at most {MAX_CHILD_NAME} characters (it has {len(name)})"
    if _NAME.fullmatch(name) is None:
        return "name may only contain letters, digits, '_' and '-'"
    return None


def _message_problem(field: str, value: object) -> str | None:
    if not isinstance(value, str):
        return f"{field} must be a string"
    if not value.strip():
        return f"{field} must be non-empty"
    return None


def check_arguments(
    tool_name: str, arguments: Any, agent: AgentConfig
) -> tuple[CompanionArgs | None, str | None]:
    """Check a companion call's arguments: ``(args, None)``, or ``(None, the error)``."""
    try:
        arguments = decode_arguments(arguments)  # a string is the model's malformed JSON
    except InvalidArguments as exc:
        return None, str(exc)
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None, "arguments must be a JSON object"
    if tool_name == LIST_CHILDREN:
        return CompanionArgs(), None
    if tool_name == SPAWN_AGENT:
        agent_type = arguments.get("agent")
        if not isinstance(agent_type, str) or agent.persistent(agent_type) is None:
            known = ", ".join(entry.agent.name for entry in agent.persistent_agents)
            return None, f"Unknown persistent agent type: {agent_type!r} (available: {known})"
        problem = _message_problem("initialMessage", arguments.get("initialMessage"))
        name = arguments.get("name")
        if problem is None and name is not None:
            problem = child_name_problem(name)
        if problem is not None:
            return None, problem
        return CompanionArgs(agent=agent_type, name=name, message=arguments["initialMessage"]), None
    problem = child_name_problem(arguments.get("name"))
    if problem is not None:
        return None, problem
    name = arguments["name"]
    if tool_name == SEND_MESSAGE:
        problem = _message_problem("message", arguments.get("message"))
        if problem is not None:
            return None, problem
        return CompanionArgs(name=name, message=arguments["message"]), None
    if tool_name == WAIT_FOR_RESULT:
        timeout = arguments.get("timeout")
        if timeout is None:
            return CompanionArgs(name=name), None
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            return None, "timeout must be a number of milliseconds"
        if not timeout > 0:
            return None, "timeout must be positive"
        return CompanionArgs(name=name, timeout=timeout / 1000), None
    return CompanionArgs(name=name), None
