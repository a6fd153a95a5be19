"""The OpenAPI operations of ``/crons`` (``crons.py``; specs/server.md, "Schedules")."""

from __future__ import annotations

from typing import Any

from .openapi_paths import Operation, error_answers, json_answer, json_body, security

__all__ = [
    "CREATE_CRON",
    "DELETE_CRON",
    "GET_CRON",
    "LIST_CRONS",
    "PAUSE_CRON",
    "RESUME_CRON",
]

_WRITE_ERRORS = ("400", "401", "403", "404", "405", "409", "413", "500", "503")
_READ_ERRORS = ("400", "401", "403", "404", "405", "500", "503")

_CRON_ID = {
    "name": "cronId",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "minLength": 1, "maxLength": 64, "pattern": "^[A-Za-z0-9_-]+$"},
    "description": "The schedule's id",
}


def _operation(
    operation_id: str,
    summary: str,
    answer: str,
    *,
    body: str | None = None,
    path: bool = False,
    write: bool = True,
) -> Operation:
    def operation(*, auth: bool) -> dict[str, Any]:
        built: dict[str, Any] = {"operationId": operation_id, "summary": summary, **security(auth)}
        if path:
            built["parameters"] = [_CRON_ID]
        if body is not None:
            built["requestBody"] = json_body(body)
        built["responses"] = {
            "200": json_answer(answer, summary),
            **error_answers(_WRITE_ERRORS if write else _READ_ERRORS, auth=auth),
        }
        return built

    return operation


CREATE_CRON = _operation(
    "createCron",
    "Make a schedule: a cron expression in a time zone, or an interval, that starts a "
    "session (start) or a new turn of one (turn) at each tick",
    "Schedule",
    body="ScheduleRequest",
)
LIST_CRONS = _operation("listCrons", "The schedules within reach, by id", "CronList", write=False)
GET_CRON = _operation("getCron", "One schedule", "Schedule", path=True, write=False)
PAUSE_CRON = _operation(
    "pauseCron", "Pause a schedule: no ticks until resumed", "Schedule", path=True
)
RESUME_CRON = _operation(
    "resumeCron", "Resume a schedule: its next tick after now fires", "Schedule", path=True
)
DELETE_CRON = _operation(
    "deleteCron", "Delete a schedule (the runs it started stay)", "_Ok", path=True
)
