"""``helix-agents cron``: a server's schedules over HTTP (``command.py``)."""

from __future__ import annotations

from .command import add_cron_command, cron_command

__all__ = ["add_cron_command", "cron_command"]
