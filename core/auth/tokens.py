"""The :class:`Authenticator` seam, and the static bearer tokens behind it.

A gateway's ``auth`` is one of (``create_http_app(auth=...)``):

- an :class:`Authenticator` (``JwtAuthenticator``, or yours): headers to identity;
- ``{token: Identity}``: static tokens, one identity each;
- a collection of tokens, or an async ``token -> bool`` check (the old forms):
  each accepted token is :data:`~.identity.DEFAULT_IDENTITY`, so a gateway
  set up before identities behaves as it did.

:func:`authenticator_of` turns any of them into an ``Authenticator``.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Protocol, runtime_checkable

from helix_agents.errors import UsageError

from .identity import DEFAULT_IDENTITY, Identity

__all__ = [
    "Auth",
    "Authenticator",
    "FirstOf",
    "StaticTokens",
    "TokenCheck",
    "authenticator_of",
    "bearer_token",
    "parse_token_line",
]


@runtime_checkable
class Authenticator(Protocol):
    """Who a request comes from: its headers to an :class:`Identity`, or None (``401``)."""

    async def authenticate(self, headers: Mapping[str, str]) -> Identity | None:
        """The identity the request's headers prove, or None when they prove none."""
        ...


Auth = Authenticator | Mapping[str, Identity] | Collection[str] | Callable[[str], Awaitable[bool]]
"""What a gateway's ``auth`` may be (see the module)."""


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an ``Authorization: Bearer`` header, or None (a plain dict's key may
    be spelt either way; Starlette's headers ignore case)."""
    header = headers.get("authorization") or headers.get("Authorization") or ""
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def _token_matches(token: str, candidate: str) -> bool:
    """``token == candidate``, compared as bytes in constant time.

    Header values arrive as Latin-1 text (any byte is one character); the
    tokens we accept are compared as UTF-8, so a non-ASCII token is refused,
    never an error.
    """
    return hmac.compare_digest(token.encode("latin-1", errors="replace"), candidate.encode())


class StaticTokens:
    """Static bearer tokens, each mapped to its identity.

    Raises:
        UsageError: no token, an empty token, or a value that is not an ``Identity``.
    """

    def __init__(self, tokens: Mapping[str, Identity]) -> None:
        if not tokens:
            raise UsageError("static tokens: give at least one token")
        for token, identity in tokens.items():
            if not isinstance(token, str) or not token.strip():
                raise UsageError("static tokens: a token must be a non-empty string")
            if not isinstance(identity, Identity):
                raise UsageError(
                    f"static tokens: a token maps to an Identity, not {type(identity).__name__}"
                )
        self._tokens = dict(tokens)

    async def authenticate(self, headers: Mapping[str, str]) -> Identity | None:
        """The identity of the request's token, if it is one of ours."""
        token = bearer_token(headers)
        if token is None:
            return None
        found = None
        for candidate, identity in self._tokens.items():  # every one compared: no timing
            if _token_matches(token, candidate):
                found = identity
        return found


class TokenCheck:
    """The old ``token -> bool`` form: an accepted token is :data:`DEFAULT_IDENTITY`."""

    def __init__(self, check: Callable[[str], Awaitable[bool]]) -> None:
        self._check = check

    async def authenticate(self, headers: Mapping[str, str]) -> Identity | None:
        """:data:`DEFAULT_IDENTITY` when the check accepts the request's token."""
        token = bearer_token(headers)
        if token is None or not await self._check(token):
            return None
        return DEFAULT_IDENTITY


class FirstOf:
    """Several authenticators: the identity of the first that finds one (tokens, then JWTs)."""

    def __init__(self, *authenticators: Authenticator) -> None:
        self._authenticators = authenticators

    async def authenticate(self, headers: Mapping[str, str]) -> Identity | None:
        """The first identity one of them finds, or None."""
        for authenticator in self._authenticators:
            identity = await authenticator.authenticate(headers)
            if identity is not None:
                return identity
        return None


def authenticator_of(auth: Auth) -> Authenticator:
    """``auth`` in any of its forms (see the module) as an :class:`Authenticator`.

    Raises:
        UsageError: a form that is none of these.
    """
    if isinstance(auth, Authenticator):
        return auth
    if isinstance(auth, Mapping):
        return StaticTokens(auth)
    if callable(auth):
        return TokenCheck(auth)
    if isinstance(auth, str):
        raise UsageError("auth: give a list of tokens, not one string")
    if isinstance(auth, Collection):
        return StaticTokens(dict.fromkeys(auth, DEFAULT_IDENTITY))
    raise UsageError(f"auth must be tokens, an Authenticator or a check, not {type(auth).__name__}")


def parse_token_line(line: str) -> tuple[str, Identity]:
    """A token file's line: ``TOKEN [user=U] [tenant=T] [roles=R1,R2]``.

    A token alone is :data:`DEFAULT_IDENTITY` (the old form: every permission,
    nothing recorded); with any field, an identity of those fields.

    Raises:
        UsageError: a field that is not ``user``, ``tenant`` or ``roles``, given twice, or empty.
    """
    token, *fields = line.split()
    if not fields:
        return token, DEFAULT_IDENTITY
    given: dict[str, str] = {}
    for field in fields:
        name, sep, value = field.partition("=")
        if not sep or name not in ("user", "tenant", "roles") or not value:
            raise UsageError(f"token file: {field!r} is not user=NAME, tenant=NAME or roles=R1,R2")
        if name in given:
            raise UsageError(f"token file: {name} is given twice on one line")
        given[name] = value
    roles = frozenset(role for role in given.get("roles", "").split(",") if role)
    return token, Identity(user=given.get("user"), tenant=given.get("tenant"), roles=roles)
