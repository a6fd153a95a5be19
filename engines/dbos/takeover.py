"""``Takeover``: on Postgres, a worker's pending workflows move on when the worker dies.

Open-source DBOS recovers a process's pending workflows when a process with
the same executor id starts again; nothing moves them to another process
by itself. So every worker sharing a Postgres system database beats in a
small table of its own (``helix_dbos_executors``: executor id, last beat on
the database's clock, the silence after which it declares itself dead, and
``host:pid``),
and each looks for executors silent longer than they declared: the one
that deletes a dead executor's row (one wins) asks DBOS to recover that
executor's workflows, which go back on DBOS's queue for any live worker.
The steps are idempotent against the log, so a workflow taken over mid step
goes on with no gap and no duplicate.

The beats come from a thread of their own, every fifth of the silence, so a
busy or stalled event loop (a step, a slow tool) never makes its worker look
dead; only a dead or frozen process, or one cut from the database, falls
silent. A worker judges others only when its own last beat is within its
silence: after the database was unreachable for a while (every worker
silent), each first beats again and judges a beat later, so no live worker
is taken for dead because the database was away.

A worker presumed dead while it is alive (a whole process frozen longer than
the silence it declared) would run its workflows' steps alongside the
taker's: the silence (``takeover_after``, default 2 s) is well above a beat's
round trip and a thread's wait for the interpreter.
"""

from __future__ import annotations

import logging
import os
import socket
import threading

import anyio
import sqlalchemy as sa
from dbos import DBOS

from helix_agents.errors import TransportError

__all__ = ["Takeover"]

log = logging.getLogger("helix_agents.dbos")

_TABLE = "helix_dbos_executors"


class Takeover:
    """Beats for ``executor_id`` and takes over dead executors' workflows (see the module doc)."""

    def __init__(self, url: str, executor_id: str, dead_after: float) -> None:
        self.executor_id = executor_id
        self.process = f"{socket.gethostname()}:{os.getpid()}"
        """Where the executor runs (host name and process id), for operators."""
        self.dead_after = dead_after
        self._stop = threading.Event()
        self._engine = sa.create_engine(
            sa.make_url(url).set(drivername="postgresql+psycopg"), pool_size=1, max_overflow=0
        )

    def _beat(self, *, judge: bool = True) -> list[str]:
        """Beat, and claim the executors found dead (their rows deleted by this worker).

        ``judge``: look for dead executors at all (only when this one's own last
        beat is within its silence: see the module doc).
        """
        with self._engine.begin() as db:
            fresh = db.execute(
                sa.text(
                    f"SELECT beat_at >= now() - make_interval(secs => dead_after) FROM {_TABLE} "
                    "WHERE executor_id = :me"
                ),
                {"me": self.executor_id},
            ).scalar()
            db.execute(
                sa.text(
                    f"INSERT INTO {_TABLE} VALUES (:me, now(), :after, :process) "
                    "ON CONFLICT (executor_id) DO UPDATE SET beat_at = now(), dead_after = :after"
                ),
                {"me": self.executor_id, "after": self.dead_after, "process": self.process},
            )
            if not (judge and fresh):
                return []
            # Each executor is judged by the silence it declared, not by the judge's own.
            dead = db.execute(
                sa.text(
                    f"DELETE FROM {_TABLE} WHERE executor_id <> :me "
                    "AND beat_at < now() - make_interval(secs => dead_after) RETURNING executor_id"
                ),
                {"me": self.executor_id},
            )
            return [row[0] for row in dead]

    def _leave(self) -> None:
        # Marked silent, not deleted: a live worker recovers what this one left pending.
        with self._engine.begin() as db:
            db.execute(
                sa.text(f"UPDATE {_TABLE} SET beat_at = 'epoch' WHERE executor_id = :me"),
                {"me": self.executor_id},
            )

    def _first(self) -> None:
        with self._engine.begin() as db:
            db.execute(
                sa.text(
                    f"CREATE TABLE IF NOT EXISTS {_TABLE} (executor_id text PRIMARY KEY, "
                    "beat_at timestamptz NOT NULL, dead_after double precision NOT NULL, "
                    "process text NOT NULL)"
                )
            )
        self._beat(judge=False)

    async def first_beat(self) -> None:
        """Beat once, as soon as DBOS has launched (retried: workers may race to make the table).

        Raises:
            TransportError: the database refused every attempt.
        """
        for attempt in range(5):
            try:
                await anyio.to_thread.run_sync(self._first)
                return
            except sa.exc.SQLAlchemyError as exc:
                log.warning("first executor beat failed (attempt %d): %s", attempt + 1, exc)
                await anyio.sleep(0.2 * 2**attempt)
        raise TransportError(f"cannot beat in the DBOS system database for {self.executor_id}")

    def _beating(self) -> None:
        """The beating thread: beat every fifth of ``dead_after``; recover the dead's workflows."""
        while not self._stop.wait(self.dead_after / 5):
            try:
                dead = self._beat()
                if dead:
                    log.warning("executors %s went silent: recovering their workflows", dead)
                    DBOS._recover_pending_workflows(dead)
            except sa.exc.SQLAlchemyError as exc:
                log.warning("executor beat failed: %s", exc)
            except Exception:  # the beat must go on, whatever one round met
                log.exception("executor beat of %s failed", self.executor_id)

    async def run(self) -> None:
        """Beat from a thread of its own until cancelled; then leave (marked silent)."""
        thread = threading.Thread(
            target=self._beating, name=f"helix-beat-{self.executor_id}", daemon=True
        )
        thread.start()
        try:
            await anyio.sleep_forever()
        finally:
            self._stop.set()
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(thread.join)
                try:
                    await anyio.to_thread.run_sync(self._leave)
                except sa.exc.SQLAlchemyError as exc:
                    log.warning("executor leave failed: %s", exc)
                await anyio.to_thread.run_sync(self._engine.dispose)
