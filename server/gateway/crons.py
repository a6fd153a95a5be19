"""``/crons``: the store's schedules over HTTP (``specs/server.md``, "Schedules").

``POST /crons`` makes one (a :class:`~helix_agents.schedules.ScheduleRequest`),
``GET /crons`` lists the caller's tenant's, ``GET /crons/{cronId}`` shows one,
``POST /crons/{cronId}/pause`` and ``/resume`` stop and restart its ticks,
``DELETE /crons/{cronId}`` ends it. A schedule is its creator's, as a session
is: its ``start`` is checked as ``POST /start`` checks a start (the sessions it
names within reach, the owner set from the identity), and every run it starts
carries that owner. One out of reach is ``NOT_FOUND``, as one that does not exist.
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from helix_agents.auth import authorize
from helix_agents.errors import AgentServerError
from helix_agents.protocol import RemoteStartRequest
from helix_agents.schedules import Schedule, ScheduleRequest, Schedules, tick_session_id
from helix_agents.server.edge import checked_id, checked_start, decode

from .context import gateway_of
from .middleware import identity_of
from .responses import json_response

__all__ = [
    "CRON_MODELS",
    "CronList",
    "cron_schemas",
    "create_cron",
    "delete_cron",
    "get_cron",
    "list_crons",
    "pause_cron",
    "resume_cron",
]


class CronList(msgspec.Struct, frozen=True, rename="camel"):
    """``GET /crons``'s answer: the schedules within the caller's reach, by id."""

    crons: list[Schedule]


CRON_MODELS: list[type[msgspec.Struct]] = [ScheduleRequest, Schedule, CronList]
"""The bodies' structs, for the OpenAPI document's components."""


def cron_schemas(components: dict[str, Any]) -> None:
    """Sharpen the generated ``ScheduleRequest`` schema to what ``POST /crons`` checks.

    One clock (``cron``, with an optional ``timezone``, or ``intervalSeconds``),
    one thing to start (``start``: ``POST /start``'s body without ``sessionId``,
    ``CronStart``; ``turn``: ``POST /message``'s without ``messageId``,
    ``CronTurn``), an id's characters. What no schema says (an expression's
    fields, a zone's name, an agent type served) the server checks (400).
    """
    start = copy.deepcopy(components["RemoteStartRequest"])
    start["title"] = "CronStart"
    start["description"] = "What each tick starts: a POST /start body without its sessionId"
    del start["properties"]["sessionId"]
    start["required"] = [name for name in start["required"] if name != "sessionId"]
    start["not"] = {"required": ["sessionId"]}
    components["CronStart"] = start
    turn = copy.deepcopy(components["RemoteMessageRequest"])
    turn["title"] = "CronTurn"
    turn["description"] = (
        "Each tick a new turn of sessionId: a POST /message body without messageId"
    )
    del turn["properties"]["messageId"]
    turn["not"] = {"required": ["messageId"]}
    components["CronTurn"] = turn
    schema = components["ScheduleRequest"]
    properties = schema["properties"]

    def optional(value: dict[str, Any]) -> dict[str, Any]:
        return {"anyOf": [value, {"type": "null"}], "default": None}

    properties["id"] = optional({"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"})
    properties["cron"] = optional(
        {
            "type": "string",
            "maxLength": 200,
            "description": "5 fields: minute hour day-of-month month day-of-week",
        }
    )
    properties["timezone"] = optional(
        {"type": "string", "maxLength": 100, "description": "An IANA name (default UTC)"}
    )
    properties["intervalSeconds"] = optional({"type": "integer", "minimum": 1, "maximum": 31622400})
    properties["start"] = optional({"$ref": "#/components/schemas/CronStart"})
    properties["turn"] = optional({"$ref": "#/components/schemas/CronTurn"})
    absent = {"type": "null"}
    schema["allOf"] = [
        {
            "oneOf": [
                {
                    "required": ["cron"],
                    "properties": {"cron": {"type": "string"}, "intervalSeconds": absent},
                },
                {
                    "required": ["intervalSeconds"],
                    "properties": {
                        "intervalSeconds": {"type": "integer"},
                        "cron": absent,
                        "timezone": absent,
                    },
                },
            ]
        },
        {
            "oneOf": [
                {
                    "required": ["start"],
                    "properties": {"start": {"type": "object"}, "turn": absent},
                },
                {"required": ["turn"], "properties": {"turn": {"type": "object"}, "start": absent}},
            ]
        },
    ]


def _schedules(request: Request) -> Schedules:
    schedules = gateway_of(request).schedules
    if schedules is None:
        raise AgentServerError("NOT_FOUND", "this gateway holds no store for schedules")
    return schedules


async def create_cron(request: Request) -> Response:
    """``POST /crons``: make a schedule (checked whole first; a bad one stores nothing)."""
    identity = identity_of(request)
    authorize(identity, "write")
    body = decode(await request.body(), ScheduleRequest)
    schedules = _schedules(request)
    gate = gateway_of(request).gate
    owner = identity.principal
    if body.start is not None:
        # Checked as POST /start checks a start: the sessions it names within reach, and
        # its owner the caller (or, for an admin, the one it names).
        if "sessionId" in body.start:
            raise AgentServerError(
                "INVALID_REQUEST",
                "a schedule's start has no sessionId: each tick's is cron.ID.TICK",
            )
        probe = {**body.start, "sessionId": tick_session_id("probe", 0)}
        start = checked_start(decode(msgspec.json.encode(probe), RemoteStartRequest))
        owner = (await gate.start(identity, start)).owner
        await _webhook_allowed(request, start)
    elif body.turn is not None:
        await gate.session(identity, "write", checked_id(body.turn.get("sessionId")))
    return json_response(await schedules.create(body, owner=owner))


async def _webhook_allowed(request: Request, start: RemoteStartRequest) -> None:
    """A webhook the start names is checked as ``POST /start`` checks it (the allow-list).

    A fleet's gateway has no deliverer: its hosts check it at each tick's start.
    """
    server = gateway_of(request).server
    if server is not None:
        await server.executor.service.check_webhook(start)


async def _reachable(request: Request, action: str) -> str:
    """The path's schedule id, its schedule within the caller's reach (else ``NOT_FOUND``)."""
    identity = identity_of(request)
    authorize(identity, "write" if action == "write" else "read")
    schedule_id = request.path_params["cronId"]
    entry = await _schedules(request).entry(schedule_id)
    if not identity.owns(entry.created.owner):
        raise AgentServerError("NOT_FOUND", f"schedule not found: {schedule_id[:80]}")
    return str(schedule_id)


async def list_crons(request: Request) -> Response:
    """``GET /crons``: the schedules of the caller's tenant (every one for an admin)."""
    identity = identity_of(request)
    authorize(identity, "read")
    tenant = gateway_of(request).gate.tenant_filter(identity)
    return json_response(CronList(crons=await _schedules(request).list(tenant)))


async def get_cron(request: Request) -> Response:
    """``GET /crons/{cronId}``: one schedule."""
    schedule_id = await _reachable(request, "read")
    return json_response(await _schedules(request).get(schedule_id))


async def pause_cron(request: Request) -> Response:
    """``POST /crons/{cronId}/pause``: no ticks until resumed."""
    schedule_id = await _reachable(request, "write")
    return json_response(await _schedules(request).pause(schedule_id))


async def resume_cron(request: Request) -> Response:
    """``POST /crons/{cronId}/resume``: ticks again, from now."""
    schedule_id = await _reachable(request, "write")
    return json_response(await _schedules(request).resume(schedule_id))


async def delete_cron(request: Request) -> Response:
    """``DELETE /crons/{cronId}``: the schedule is gone (the runs it started stay)."""
    schedule_id = await _reachable(request, "write")
    await _schedules(request).delete(schedule_id)
    return json_response({"ok": True})
