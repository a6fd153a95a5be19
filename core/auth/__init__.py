"""Identities and who may do what: the gateway's authentication seam (``specs/auth.md``).

An :class:`Authenticator` turns a request's headers into an :class:`Identity`
(a user, its tenant, its roles): :class:`StaticTokens` (``{token: Identity}``),
:class:`JwtAuthenticator` (a JWT verified with a key or a JWKS; the ``jwt``
extra), or your own. :func:`authorize` is the one decision every entrance
makes before it touches a session.
"""

from __future__ import annotations

from .gate import IDENTITY_KEY, Gate
from .guarded import GuardedTransport
from .identity import (
    DEFAULT_IDENTITY,
    ROLE_PERMISSIONS,
    Action,
    Identity,
    Permission,
    authorize,
    decided_by,
    not_found,
)
from .jwt_auth import JwtAuthenticator
from .tokens import (
    Auth,
    Authenticator,
    FirstOf,
    StaticTokens,
    TokenCheck,
    authenticator_of,
    bearer_token,
    parse_token_line,
)

__all__ = [
    "DEFAULT_IDENTITY",
    "IDENTITY_KEY",
    "ROLE_PERMISSIONS",
    "Action",
    "Auth",
    "Authenticator",
    "FirstOf",
    "Gate",
    "GuardedTransport",
    "Identity",
    "JwtAuthenticator",
    "Permission",
    "StaticTokens",
    "TokenCheck",
    "authenticator_of",
    "authorize",
    "bearer_token",
    "decided_by",
    "not_found",
    "parse_token_line",
]
