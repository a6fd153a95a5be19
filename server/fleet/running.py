"""``RunningIndex``: the fleet's index of running sessions, a JetStream KV bucket.

A key per session a run may be under way of (``lease_key`` of its id), so the
orphan scan reads the sessions that may be running, not every session. The
log is the truth; the index only says where to look, and is kept so that a
wrong entry costs a read and nothing more:

- **Written before the run can begin.** The host's run guard puts the key
  once it holds the session's lease, before the ``run_started`` is appended.
  A host that dies between the two leaves an entry for a session that is not
  running (stale), never a running session without one.
- **Removed after the run ended**, by the host that ran it, under its lease:
  only if the run ended not running (its final state; or else the log), and
  only the entry it put (a purge of the key's messages up to that revision: a
  key written again since stays).
  A host that dies between its last append and the removal leaves a stale
  entry too.
- **A stale entry** is found by the scan (no live lease covers it): the scan
  takes the lease, reads the log, and removes the entry (at the revision it
  read under the lease) when the log says the session is not running. A
  takeover is decided by the log alone, so a stale entry never causes one.
- **A missing entry** can only come from a put that failed (JetStream
  unavailable for longer than the run's guard waits for it, ``BEGIN_PATIENCE``)
  while the append that began the run succeeded. The host puts it again every
  scan round while the run is active here; and a full sweep of every
  session's log (rare, ``sweep_every``) writes any that is missing.
- **A new bucket** (sessions that ran before it existed) is filled by one
  full sweep, after which the key :data:`REBUILT_KEY` says it is complete.

Keys are listed from the bucket's stream info (one request per 100,000
keys). Removals purge the key's message (KV buckets refuse message deletes;
a purge with a filter and a seq leaves no marker), so the listing holds only
the entries there are.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable

import anyio
import nats.errors
from nats.aio.client import Client as NatsClient
from nats.js.errors import BucketNotFoundError, KeyNotFoundError
from nats.js.kv import KeyValue

from helix_agents.errors import UsageError
from helix_agents.ids import decode_session_token
from helix_agents.log import EventStore, SessionState, project_state
from helix_agents.server.fleet.leases import KV_TIMEOUT, lease_key
from helix_agents.stores.jetstream.inbox import NatsInbox
from helix_agents.stores.jetstream.store import JetStreamEventStore

__all__ = [
    "REBUILT_KEY",
    "RUNNING_BUCKET",
    "RunningIndex",
    "bucket_for",
    "running_bucket",
    "session_of_key",
]

RUNNING_BUCKET = "helix_running"
"""The running index's bucket when the store names no stream (else ``helix_running_<stream>``)."""
REBUILT_KEY = "_rebuilt"
"""The key that says the bucket holds every running session (no session's key: ``_r``)."""

_API = "$JS.API"
_BUCKET = re.compile(r"[A-Za-z0-9_-]{1,128}")

log = logging.getLogger("helix_agents.server")


def running_bucket(stream: str | None) -> str:
    """The running index's bucket for the sessions of ``stream`` (its store's stream)."""
    return RUNNING_BUCKET if stream is None else f"{RUNNING_BUCKET}_{stream}"


def bucket_for(store: EventStore, name: str | None) -> str:
    """The running index's bucket: ``name``, checked, or else the one of ``store``'s stream.

    A store that is not a :class:`JetStreamEventStore` (a wrapped one) names
    no stream: its hosts share :data:`RUNNING_BUCKET` unless given a name.
    """
    if name is None:
        return running_bucket(store.stream if isinstance(store, JetStreamEventStore) else None)
    if not isinstance(name, str) or _BUCKET.fullmatch(name) is None:
        raise UsageError(
            f"running_bucket_name must be 1-128 characters of A-Za-z0-9_-, not {name!r}"
        )
    return name


def session_of_key(key: str) -> str:
    """The session id of a key (invert ``lease_key``); ``ValueError`` for any other key."""
    if not key or key == REBUILT_KEY:
        raise ValueError(f"not a session's key: {key!r}")
    token: list[str] = []
    index = 0
    while index < len(key):
        pair = key[index : index + 2]
        if pair == "_c":
            token.append(":")
            index += 2
        elif key[index] == "_":
            token.append(pair)
            index += 2
        else:
            token.append(key[index])
            index += 1
    return decode_session_token("".join(token))


class RunningIndex:
    """The running sessions of one stream in ``bucket``, on the connection ``nc``."""

    def __init__(self, nc: NatsClient, bucket: str, *, host_id: str, replicas: int) -> None:
        self.nc = nc
        self.bucket = bucket
        self.host_id = host_id
        """Written as each entry's value (who put it: for a person reading the bucket)."""
        self.replicas = replicas
        """Copies JetStream keeps of the bucket, if this index creates it."""
        self.kv: KeyValue | None = None
        """The bucket, once :meth:`open` found or created it."""
        self.unmarked: set[str] = set()
        """Sessions whose entry could not be put: put again each scan round while they run."""
        self.mine: dict[str, int] = {}
        """Session -> revision of the entry this host last put (removed at that revision)."""
        self._inbox = NatsInbox(nc, KV_TIMEOUT)  # puts, purges, listings (cheaper than nats-py's)
        self._value = json.dumps({"host": host_id}).encode()

    async def open(self) -> None:
        """Find the bucket, or create it (one entry per key, no TTL)."""
        js = self.nc.jetstream(timeout=KV_TIMEOUT)
        try:
            self.kv = await js.key_value(self.bucket)
        except BucketNotFoundError:
            self.kv = await js.create_key_value(
                bucket=self.bucket, history=1, replicas=self.replicas
            )

    async def close(self) -> None:
        """Close the index's inbox (the connection may outlive it)."""
        await self._inbox.close()

    async def mark(self, session_id: str, patience: float = 0.0) -> bool:
        """Put the session's entry; on a failure, log it, remember it, and say False.

        ``patience``: seconds to keep trying while JetStream does not answer (a
        node's streams moving), so a run about to begin is indexed before it
        does: a host that dies right after would otherwise leave a running
        session only a full sweep finds.
        """
        deadline, pause = anyio.current_time() + patience, 0.05
        while True:
            try:
                if self.kv is None:
                    raise nats.errors.Error("the bucket is not open")
                subject = f"$KV.{self.bucket}.{lease_key(session_id)}"
                ack = await self._inbox.publish(subject, self._value)
                if ack.error is not None:
                    raise nats.errors.Error(ack.error.description)
                break
            except Exception as exc:  # never the end of a run: put again at the next round
                if self.kv is not None and anyio.current_time() + pause <= deadline:
                    await anyio.sleep(pause)
                    pause = min(pause * 2, 1.0)
                    continue
                log.warning("could not index the run of %s: %s", session_id, exc)
                self.unmarked.add(session_id)
                return False
        self.mine[session_id] = ack.seq
        self.unmarked.discard(session_id)
        return True

    async def mark_again(self, is_executing: Callable[[str], bool]) -> None:
        """Put the entries that could not be put, of the sessions still executing here."""
        for session_id in list(self.unmarked):
            if is_executing(session_id):
                await self.mark(session_id)
            else:
                self.unmarked.discard(session_id)

    async def revision(self, session_id: str) -> int | None:
        """The revision of the session's entry, or None if it has none."""
        assert self.kv is not None
        try:
            entry = await self.kv.get(lease_key(session_id))
        except KeyNotFoundError:
            return None
        return entry.revision

    async def remove(self, session_id: str, revision: int) -> None:
        """Delete the entry at ``revision`` (not one written since); a failure is logged.

        A purge of the key's messages below ``revision + 1``: no delete marker
        is left, and an entry written since stays.
        """
        log.debug("running index: removing %s at revision %d", session_id, revision)
        subject = f"$KV.{self.bucket}.{lease_key(session_id)}"
        request = json.dumps({"filter": subject, "seq": revision + 1}).encode()
        try:
            reply = await self._inbox.ask(f"{_API}.STREAM.PURGE.KV_{self.bucket}", request)
            error = json.loads(reply.data).get("error")
        except (nats.errors.Error, OSError, ValueError) as exc:
            error = repr(exc)
        if error is not None:
            log.warning("could not remove %s from the running index: %s", session_id, error)

    async def remove_at_rest(
        self, session_id: str, store: EventStore, state: SessionState | None = None
    ) -> None:
        """Remove the session's entry if it is not running: after its run ended here.

        Called under the session's lease and lock, with no run of it executing
        here, so no run of it can begin meanwhile. Given the state the run here
        ended with (``state``) and the entry this host put for it, that entry is
        removed, without a read, if the state is not running: a purge at its
        revision leaves any entry put since (by a host that took the session
        over) in place. Else the log says: the entry is read, then the log, and
        the entry read is removed if the log says the session is not running.
        A run cut here (a store failure) stays indexed: an orphan, for a scan.
        A failure is logged (a stale entry: a scan removes it).
        """
        mine = self.mine.pop(session_id, None)
        try:
            if state is not None and mine is not None:
                if state.status != "running":
                    await self.remove(session_id, mine)
                return
            revision = await self.revision(session_id)
            if revision is None:
                return
            log_ = await store.read(session_id)
            if log_ and project_state(log_).status == "running":
                return
            await self.remove(session_id, revision)
        except Exception as exc:
            log.warning("could not take %s out of the running index: %r", session_id, exc)

    async def sessions(self) -> list[str]:
        """The sessions with an entry (one stream-info request per 100,000 keys)."""
        prefix = f"$KV.{self.bucket}."
        found: list[str] = []
        offset = 0
        while True:
            request = {"subjects_filter": f"{prefix}>", "offset": offset}
            reply = await self._inbox.ask(
                f"{_API}.STREAM.INFO.KV_{self.bucket}", json.dumps(request).encode()
            )
            response = json.loads(reply.data)
            if response.get("error") is not None:
                raise nats.errors.Error(f"running index: {response['error']}")
            subjects: dict[str, int] = response.get("state", {}).get("subjects") or {}
            for subject, count in subjects.items():
                if count > 0 and subject.startswith(prefix):
                    try:
                        found.append(session_of_key(subject[len(prefix) :]))
                    except ValueError:
                        continue  # the rebuilt marker, or a key this index never writes
            offset += len(subjects)
            if not subjects or offset >= int(response.get("total", 0)):
                return sorted(found)

    async def rebuilt(self) -> bool:
        """Whether a full sweep filled the bucket since it was created."""
        assert self.kv is not None
        try:
            await self.kv.get(REBUILT_KEY)
        except KeyNotFoundError:
            return False
        return True

    async def mark_rebuilt(self) -> None:
        """Say the bucket holds every running session (after a full sweep)."""
        assert self.kv is not None
        await self.kv.put(REBUILT_KEY, json.dumps({"host": self.host_id}).encode())
