"""Temporal alone, for the side-by-side run: ``BareWorkflow`` runs ``count`` no-op regular
activities in a row (a module of its own: Temporal's sandbox imports it again)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow

__all__ = ["BareWorkflow", "noop"]


@activity.defn(name="bench_noop")
async def noop(value: int) -> int:
    """Nothing: the floor's activity."""
    return value


@workflow.defn(name="bench_bare")
class BareWorkflow:
    """``count`` no-op regular activities, one after the other."""

    @workflow.run
    async def run(self, count: int) -> int:
        """Run them; return ``count``."""
        for n in range(count):
            await workflow.execute_activity(noop, n, start_to_close_timeout=timedelta(seconds=60))
        return count
