"""``LeaseKeeper``: one host's session leases in a JetStream KV bucket with a TTL.

A lease says which host may begin runs of a session. The keeper creates a
lease only where no host holds one (compare-and-set), puts it again while the
session runs (renewals every third of the TTL), and deletes it when the run
ends, only if no other host wrote it since. Leases are taken, and given back,
under the session's lock (:meth:`LeaseKeeper.hold`). Failures to reach
JetStream are logged and never end the host: the next renewal puts the lease.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager

import anyio
import msgspec
import nats.errors
from nats.aio.client import Client as NatsClient
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from helix_agents.ids import encode_session_token
from helix_agents.runtime.runs import SessionLocks
from helix_agents.stores.jetstream.inbox import (
    EXPECTED_LAST_SUBJECT_SEQ,
    WRONG_LAST_SEQUENCE,
    NatsInbox,
)

__all__ = [
    "DEFAULT_LEASE_TTL",
    "KV_TIMEOUT",
    "LEASE_BUCKET",
    "RENEWALS_AT_ONCE",
    "Lease",
    "LeaseKeeper",
    "lease_key",
]

LEASE_BUCKET = "helix_leases"
"""The JetStream KV bucket that holds the hosts' session leases."""
DEFAULT_LEASE_TTL = 3.0
"""Seconds a lease lives unless renewed: a dead host's sessions are taken over about this
long after its last renewal (plus one scan, a third of it). Renewals come every third of it."""
RENEWALS_AT_ONCE = 64
"""Lease renewals a host has in flight at once (a round is not one put after another)."""
KV_TIMEOUT = 5.0
"""Seconds a lease write waits for JetStream (nats-py's KV default)."""

log = logging.getLogger("helix_agents.server")


def lease_key(session_id: str) -> str:
    """A session's key in the lease bucket (its subject token, ``:`` escaped as ``_c``)."""
    return encode_session_token(session_id).replace(":", "_c")


class Lease(msgspec.Struct, kw_only=True):
    """What taking a session's lease found: who holds it, and our revision if we created it."""

    holder: str | None
    created: int | None = None


class LeaseKeeper:
    """The leases ``host_id`` holds in :data:`LEASE_BUCKET`, on the connection ``nc``."""

    def __init__(self, nc: NatsClient, host_id: str, *, ttl: float, replicas: int) -> None:
        self.nc = nc
        self.host_id = host_id
        self.ttl = ttl
        """Seconds a lease lives unless it is put again."""
        self.replicas = replicas
        """Copies JetStream keeps of the bucket, if this keeper creates it."""
        self.kv: KeyValue | None = None
        """The bucket, once :meth:`open` found or created it."""
        self.held: dict[str, int] = {}
        """Session -> revision of the lease this host last wrote."""
        self._inbox = NatsInbox(nc, KV_TIMEOUT)  # the lease writes (cheaper than nats-py's KV)
        self._opened = anyio.Event()
        self._locks = SessionLocks()

    async def open(self) -> None:
        """Find the bucket, or create it with this keeper's TTL and replicas."""
        js = self.nc.jetstream()
        try:
            self.kv = await js.key_value(LEASE_BUCKET)
        except BucketNotFoundError:
            self.kv = await js.create_key_value(
                bucket=LEASE_BUCKET, ttl=self.ttl, replicas=self.replicas
            )
        self._opened.set()

    def stop_waiting(self) -> None:
        """No lease is waited for any more (none is taken, if the bucket never opened)."""
        self._opened.set()

    async def wait_open(self) -> None:
        """Wait until :meth:`open` (or :meth:`stop_waiting`) ran."""
        await self._opened.wait()

    async def close(self) -> None:
        """Close the keeper's inbox (the connection may outlive it)."""
        await self._inbox.close()

    @asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[None]:
        """Hold ``session_id``'s lock: its lease is taken, and given back, under it."""
        async with self._locks.hold(session_id):
            yield

    async def take(self, session_id: str, patience: float = 0.0) -> Lease:
        """Create the session's lease for this host unless a host holds it; say who does.

        ``patience``: seconds to keep trying while JetStream does not answer (a
        node died and its streams are moving: about a second), so a run does
        not begin unleased for a blip; past it, the run may begin unleased and
        the next renewal puts the lease.
        """
        await self._opened.wait()  # a request that came in while the host was opening it
        if self.kv is None:
            return Lease(holder=None)
        deadline, pause = anyio.current_time() + patience, 0.05
        while True:
            try:
                for _ in range(3):  # a lease that expires between the two steps: try again
                    try:
                        revision = await self._create(session_id)
                        self.held[session_id] = revision
                        return Lease(holder=self.host_id, created=revision)
                    except (KeyWrongLastSequenceError, KeyNotFoundError):
                        holder = await self.holder(session_id)
                        if holder is not None:
                            return Lease(holder=holder)
                return Lease(holder=None)
            except Exception as exc:  # best effort: the next renewal puts it
                if anyio.current_time() + pause > deadline:
                    log.warning("could not take the lease of %s: %s", session_id, exc)
                    return Lease(holder=None)
                await anyio.sleep(pause)
                pause = min(pause * 2, 1.0)

    async def _create(self, session_id: str) -> int:
        """Write this host's lease only if the key has no live value; its revision.

        nats-py's ``KeyValue.create`` in one lighter publish; as there, a key
        whose last entry is a delete marker (a lease given back) is written on
        top of it, and a live key raises ``KeyWrongLastSequenceError``.
        """
        assert self.kv is not None
        key = lease_key(session_id)
        value = self.host_id.encode()
        ack = await self._inbox.publish(
            f"$KV.{LEASE_BUCKET}.{key}", value, {EXPECTED_LAST_SUBJECT_SEQ: "0"}
        )
        if ack.error is None:
            return ack.seq
        if ack.error.err_code not in WRONG_LAST_SEQUENCE:
            raise nats.errors.Error(f"lease of {session_id!r}: {ack.error.description}")
        try:
            await self.kv.get(key)
        except KeyNotFoundError as missing:
            if missing.entry is None:
                raise  # gone meanwhile (lapsed): the caller tries again
            # Its last entry is a marker (a lease given back): write over it.
            return await self.kv.update(key, value, last=missing.entry.revision)
        raise KeyWrongLastSequenceError(description=ack.error.description)

    async def put(self, session_id: str) -> None:
        """Write this host's lease whatever holds it (a renewal); a failure is logged."""
        if self.kv is None:
            return
        try:
            revision = await self.kv.put(lease_key(session_id), self.host_id.encode())
            self.held[session_id] = revision
        except Exception as exc:  # never the end of the host: the next renewal puts it again
            log.warning("could not put the lease of %s: %s", session_id, exc)

    async def drop(self, session_id: str) -> None:
        """Delete the lease this host last wrote, unless it was written since."""
        revision = self.held.pop(session_id, None)
        if self.kv is None or revision is None:
            return
        headers = {"KV-Operation": "DEL", EXPECTED_LAST_SUBJECT_SEQ: str(revision)}
        try:
            subject = f"$KV.{LEASE_BUCKET}.{lease_key(session_id)}"
            ack = await self._inbox.publish(subject, b"", headers)
            if ack.error is not None:
                raise nats.errors.Error(ack.error.description)
        except Exception as exc:  # written since: not ours to delete; it lapses
            log.debug("left the lease of %s: %s", session_id, exc)

    async def drop_idle(self, is_active: Callable[[str], bool]) -> None:
        """Give back the leases of sessions not ``is_active`` here."""
        for session_id in list(self.held):
            if not is_active(session_id):
                await self.drop(session_id)

    async def holder(self, session_id: str) -> str | None:
        """The host that holds ``session_id``'s live lease, or ``None``."""
        assert self.kv is not None
        try:
            entry = await self.kv.get(lease_key(session_id))
        except KeyNotFoundError:
            return None
        return entry.value.decode() if entry.value else None

    async def renew_forever(self, active: Callable[[], Iterable[str]]) -> None:
        """Put the lease of each ``active()`` session every third of the TTL.

        A round's puts go out together (:data:`RENEWALS_AT_ONCE` in flight),
        and the next round is due a third of the TTL after this one began, not
        after it ended: on a loaded machine a slow round does not push the next
        one back, and each lease gets two more chances before it lapses. A
        round that took longer than the TTL is logged (leases may have lapsed:
        their sessions may be taken over, which the claim keeps safe).
        """
        period = self.ttl / 3
        limiter = anyio.Semaphore(RENEWALS_AT_ONCE)

        async def renew(session_id: str) -> None:
            async with limiter:
                await self.put(session_id)  # a missed renewal is retried next round

        while True:
            began = anyio.current_time()
            async with anyio.create_task_group() as tg:
                for session_id in active():
                    tg.start_soon(renew, session_id)
            took = anyio.current_time() - began
            if took > self.ttl:
                log.warning("lease renewals took %.1f s, over the lease TTL (%g s)", took, self.ttl)
            await anyio.sleep(max(period - took, 0.0))
