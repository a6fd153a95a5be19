"""``Gate``: one gateway's authentication and authorization, for every entrance.

Built once per app (``create_http_app``) from its ``auth`` and its store, and
handed to every entrance: the HTTP routes (their middleware and handlers),
the front-end streams, the inspector's data, MCP and A2A. It knows who a
request is (:meth:`Gate.identify`), whose a session is (its owner, read from
``session_created`` once and remembered), and records who changed a session
(``request_made``). The decision itself is :func:`~.identity.authorize`.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Mapping

import msgspec

from helix_agents import EventStore
from helix_agents.errors import AgentServerError, ConcurrencyConflict
from helix_agents.events import Principal, RequestAction, RequestMade, SessionCreated
from helix_agents.log.streaming import read_page
from helix_agents.protocol import RemoteStartRequest

from .identity import DEFAULT_IDENTITY, Action, Identity, authorize, not_found
from .tokens import Auth, authenticator_of

__all__ = ["IDENTITY_KEY", "Gate"]

log = logging.getLogger("helix_agents.server")

IDENTITY_KEY = "helix_identity"
"""Where an entrance keeps the request's identity in its ASGI scope's ``state``."""

_MAX_OWNERS = 10_000  # sessions whose owner is remembered (an owner never changes)


class Gate:
    """Who a request is and what it may touch, for one gateway (see the module).

    Args:
        auth: the gateway's ``auth`` in any form (``None``: no auth; every
            request is :data:`~.identity.DEFAULT_IDENTITY`).
        store: the target's event store, where owners are read and requests
            recorded (``None``: a gateway in front of another one; only an
            identity of every tenant reaches sessions through it).
    """

    def __init__(self, auth: Auth | None, store: EventStore | None) -> None:
        self.authenticator = None if auth is None else authenticator_of(auth)
        self.store = store
        self._owners: OrderedDict[str, Principal | None] = OrderedDict()
        self._heads: dict[str, int] = {}

    @property
    def required(self) -> bool:
        """Whether requests need a credential (the gateway has auth)."""
        return self.authenticator is not None

    async def identify(self, headers: Mapping[str, str]) -> Identity:
        """The request's identity; ``UNAUTHORIZED`` when it proves none."""
        if self.authenticator is None:
            return DEFAULT_IDENTITY
        identity = await self.authenticator.authenticate(headers)
        if identity is None:
            raise AgentServerError("UNAUTHORIZED", "missing or invalid bearer token")
        return identity

    async def identity_or_none(self, headers: Mapping[str, str]) -> Identity | None:
        """The request's identity, or None (for an entrance with its own refusal shape)."""
        try:
            return await self.identify(headers)
        except AgentServerError:
            return None

    async def owner(self, session_id: str) -> tuple[bool, Principal | None]:
        """Whether the session exists here, and its owner (None: it has none)."""
        if session_id in self._owners:
            self._owners.move_to_end(session_id)
            return True, self._owners[session_id]
        if self.store is None:
            return False, None
        events, _ = await read_page(self.store, session_id, 0, 1)
        if not events or not isinstance(events[0], SessionCreated):
            return False, None
        owner = events[0].owner
        self._owners[session_id] = owner
        if len(self._owners) > _MAX_OWNERS:
            self._owners.popitem(last=False)
        return True, owner

    async def session(self, identity: Identity, action: Action, session_id: str) -> None:
        """Raises unless ``identity`` may ``action`` session ``session_id`` (``authorize``).

        A session that does not exist is ``NOT_FOUND`` for an identity bound to
        its tenant, as one of another tenant's is; one of every tenant is not
        checked here (the target answers as it always has).
        """
        authorize(identity, action)
        if identity.all_tenants:
            return
        exists, owner = await self.owner(session_id)
        if not exists:
            raise not_found(session_id)
        authorize(identity, action, session_id=session_id, owner=owner)

    async def start(self, identity: Identity, request: RemoteStartRequest) -> RemoteStartRequest:
        """``request`` checked for ``identity``, its owner set: the start to forward.

        The owner is the identity's (``request.owner`` may name it, or anyone
        for an identity of every tenant: a parent server starting a remote
        child for its owner). The sessions it names (parent, root, workspaces)
        must be within reach, and an id taken by another tenant's session is
        ``ALREADY_RUNNING``, as a taken id always is.

        Raises:
            AgentServerError: ``FORBIDDEN`` (a reader, or another owner
                named), ``NOT_FOUND`` (a named session out of reach), ``ALREADY_RUNNING``.
        """
        authorize(identity, "write")
        owner = identity.principal
        if request.owner is not None and request.owner != owner:
            if not identity.all_tenants:
                raise AgentServerError("FORBIDDEN", "a start may name only its caller as owner")
            owner = request.owner
        if not identity.all_tenants:
            for related in (
                request.parent_session_id,
                request.root_session_id,
                request.workspace_session_id,
            ):
                if related is not None:
                    await self.session(identity, "write", related)
            await self.free_or_own(identity, request.session_id)
        if owner == request.owner:
            return request
        return msgspec.structs.replace(request, owner=owner)

    async def free_or_own(self, identity: Identity, session_id: str) -> None:
        """Refuse ``session_id`` for a new session when another tenant's session has it.

        Raises:
            AgentServerError: ``ALREADY_RUNNING`` (as a taken id always is: nothing of
                the session is told).
        """
        if identity.all_tenants:
            return
        exists, found = await self.owner(session_id)
        if exists and not identity.owns(found):
            raise AgentServerError("ALREADY_RUNNING", f"session id {session_id!r} is taken")

    def tenant_filter(self, identity: Identity) -> str | msgspec.UnsetType | None:
        """What a list of sessions is cut to: the identity's tenant (unset: every session)."""
        return msgspec.UNSET if identity.all_tenants else identity.tenant

    async def record(
        self,
        identity: Identity,
        session_id: str,
        action: RequestAction,
        ref: str | None = None,
    ) -> None:
        """Append ``request_made`` (who changed the session) once a request has succeeded.

        Nothing when the identity names nobody (no auth, the old token forms)
        or there is no store here. An answer or a message with a client id
        (``ref``) is recorded once: its identical repeat changes nothing, as
        the protocol says. A failure to record is logged, not raised: the
        request was carried out.
        """
        by = identity.principal
        if by is None or self.store is None:
            return
        event = RequestMade(action=action, by=by, ref=ref)
        head = self._heads.get(session_id, 0)
        try:
            if ref is not None:  # an answer or an identified message: once
                log_ = await self.store.read(session_id)
                if any(
                    isinstance(e, RequestMade) and (e.action, e.ref) == (action, ref) for e in log_
                ):
                    return
                head = log_[-1].seq if log_ else head
            for _ in range(20):
                stamped = msgspec.structs.replace(
                    event, session_id=session_id, seq=head + 1, ts=time.time()
                )
                try:
                    await self.store.append(session_id, [stamped], head)
                except ConcurrencyConflict as conflict:
                    head = conflict.actual_seq
                    continue
                self._heads[session_id] = head + 1
                if len(self._heads) > _MAX_OWNERS:
                    self._heads.clear()
                return
            log.warning("gateway: who made a request to %s was not recorded (busy)", session_id)
        except Exception as exc:
            log.warning("gateway: who made a request to %s was not recorded: %s", session_id, exc)
