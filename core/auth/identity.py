"""Who a request comes from, and what they may do: :class:`Identity` and :func:`authorize`.

An identity names a user and the tenant it belongs to, with roles; the roles
give permissions (:data:`ROLE_PERMISSIONS`). Every entrance of the gateway
(the HTTP routes, the front-end streams, the inspector's data, MCP, A2A)
asks :func:`authorize` before it touches a session: the one decision of
``specs/auth.md``.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from helix_agents.errors import AgentServerError
from helix_agents.events import Principal
from helix_agents.protocol import DECIDED_BY_MAX

__all__ = [
    "DEFAULT_IDENTITY",
    "ROLE_PERMISSIONS",
    "Action",
    "Identity",
    "Permission",
    "authorize",
    "decided_by",
    "not_found",
]

Action = Literal["read", "write"]
"""What a request does to a session: look at it, or change it (start, answer, stop)."""

Permission = Literal["read", "write", "all_tenants"]
"""``read`` and ``write`` sessions; ``all_tenants``: those of every tenant, and sessions
without an owner."""

ROLE_PERMISSIONS: dict[str, frozenset[Permission]] = {
    "admin": frozenset({"read", "write", "all_tenants"}),
    "member": frozenset({"read", "write"}),
    "reader": frozenset({"read"}),
}
"""What each known role may do; an identity with no known role is a ``member``."""


class Identity(msgspec.Struct, frozen=True, kw_only=True):
    """An authenticated caller: ``user`` of ``tenant``, with ``roles`` (:data:`ROLE_PERMISSIONS`).

    A session started by an identity that names a user or a tenant is owned by
    it (``session_created.owner``); one that names neither (the identity the
    old token forms map to) leaves sessions without an owner.
    """

    user: str | None = None
    tenant: str | None = None
    roles: frozenset[str] = frozenset()

    @property
    def permissions(self) -> frozenset[Permission]:
        """The union of the roles' permissions (a ``member``'s when no role is known)."""
        known = [ROLE_PERMISSIONS[role] for role in self.roles if role in ROLE_PERMISSIONS]
        if not known:
            return ROLE_PERMISSIONS["member"]
        return frozenset().union(*known)

    @property
    def all_tenants(self) -> bool:
        """Whether it reaches every tenant's sessions (an ``admin``)."""
        return "all_tenants" in self.permissions

    @property
    def principal(self) -> Principal | None:
        """Who it is, as the log records it; None when it names neither user nor tenant."""
        if self.user is None and self.tenant is None:
            return None
        return Principal(tenant=self.tenant, user=self.user)

    def owns(self, owner: Principal | None) -> bool:
        """Whether a session owned by ``owner`` is within its reach (its tenant's, or all)."""
        if self.all_tenants:
            return True
        return owner is not None and owner.tenant == self.tenant


DEFAULT_IDENTITY = Identity(roles=frozenset({"admin"}))
"""The identity of a gateway without auth, and of every token of the old forms (a list
of tokens, a ``token -> bool`` check): every permission, no name (nothing recorded)."""


def decided_by(identity: Identity, given: str | None) -> str | None:
    """Who decided an approval (``approval_given.decided_by``): the identity's user when it
    names one (what the client said is then ignored), else what the client said."""
    if identity.user is None:
        return given
    return "".join(c for c in identity.user if c.isprintable())[:DECIDED_BY_MAX] or given


def not_found(session_id: str) -> AgentServerError:
    """The refusal of a session out of reach: the same as a session that does not exist."""
    return AgentServerError("NOT_FOUND", f"session {session_id!r} not found")


def authorize(
    identity: Identity,
    action: Action,
    *,
    session_id: str | None = None,
    owner: Principal | None = None,
) -> None:
    """The one authorization decision: raises unless ``identity`` may ``action``.

    Without ``session_id``, the permission alone is checked (a start, a list);
    with it, the session (owned by ``owner``) must also be within reach.

    Raises:
        AgentServerError: ``FORBIDDEN`` (403) when the identity's permissions
            lack ``action`` (a ``reader`` writing); ``NOT_FOUND`` (404) when the
            session belongs to another tenant, worded as for a session that
            does not exist (no existence leak).
    """
    if action not in identity.permissions:
        raise AgentServerError("FORBIDDEN", f"this identity may not {action} sessions")
    if session_id is not None and not identity.owns(owner):
        raise not_found(session_id)
