"""``JwtAuthenticator``: a bearer JWT, verified with a key or a JWKS, as an :class:`Identity`.

Verified with PyJWT (the ``jwt`` extra, ``pyjwt[crypto]``; why PyJWT:
``specs/auth.md``). The key is a shared secret (HS256/384/512) or a PEM
public key (RS, PS, ES, EdDSA); a JWKS URL is read with PyJWT's
``PyJWKClient`` (its keys cached, refetched when a token names a key it does
not hold). A token must carry ``exp``; ``iss`` and ``aud`` are checked when
configured. Claims name the identity: ``sub`` the user, ``tenant`` the
tenant, ``roles`` the roles (a list, or a space-separated string); each
claim's name is configurable, and a dotted name reaches into an object
(``realm_access.roles``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio.to_thread

from helix_agents.errors import UsageError

from .identity import Identity
from .tokens import bearer_token

__all__ = ["ASYMMETRIC_ALGORITHMS", "HMAC_ALGORITHMS", "JwtAuthenticator"]

log = logging.getLogger("helix_agents.server")

HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")
"""The algorithms a shared secret verifies."""

ASYMMETRIC_ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)
"""The algorithms a public key (a PEM file, a JWKS) verifies."""


def _claim(claims: Mapping[str, Any], name: str) -> Any:
    """The claim ``name``; a dotted name reaches into objects (None when absent)."""
    value: Any = claims
    for part in name.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _roles(value: Any) -> frozenset[str]:
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list | tuple):
        return frozenset(role for role in value if isinstance(role, str))
    return frozenset()


class JwtAuthenticator:
    """Bearer JWTs verified with ``key`` (a secret or PEM public key) or ``jwks_url``.

    Args:
        key: a shared secret or a PEM public key (text or bytes); or
        key_file: a file holding one (its surrounding whitespace ignored);
        jwks_url: a JWKS document's URL (exactly one of the three).
        algorithms: the accepted ``alg``s; by default those of the key's kind.
        issuer: the ``iss`` a token must carry (unchecked when None).
        audience: the ``aud`` a token must carry (a token with an ``aud`` is
            refused when None, as PyJWT does).
        user_claim, tenant_claim, roles_claim: the claims naming the identity.
        leeway: seconds of clock skew allowed on ``exp``, ``nbf`` and ``iat``.
        jwks_lifespan: seconds the JWKS is cached.

    Raises:
        UsageError: not exactly one key source, an unreadable key file, or
            algorithms that do not fit the key's kind.
    """

    def __init__(
        self,
        *,
        key: str | bytes | None = None,
        key_file: str | Path | None = None,
        jwks_url: str | None = None,
        algorithms: Sequence[str] | None = None,
        issuer: str | None = None,
        audience: str | None = None,
        user_claim: str = "sub",
        tenant_claim: str = "tenant",
        roles_claim: str = "roles",
        leeway: float = 30.0,
        jwks_lifespan: float = 300.0,
    ) -> None:
        import jwt  # the jwt extra: a gateway without JWTs never needs it

        if sum(given is not None for given in (key, key_file, jwks_url)) != 1:
            raise UsageError("JwtAuthenticator: give exactly one of key, key_file and jwks_url")
        if key_file is not None:
            try:
                key = Path(key_file).read_text().strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise UsageError(f"cannot read the JWT key file {str(key_file)!r}: {exc}") from exc
            if not key:
                raise UsageError(f"the JWT key file {str(key_file)!r} is empty")
        self._jwt = jwt
        self._key = key
        self._jwks = (
            None
            if jwks_url is None
            else jwt.PyJWKClient(jwks_url, cache_keys=True, lifespan=jwks_lifespan, timeout=10)
        )
        text = key.decode(errors="replace") if isinstance(key, bytes) else key
        public = jwks_url is not None or (text is not None and text.startswith("-----BEGIN"))
        kind = ASYMMETRIC_ALGORITHMS if public else HMAC_ALGORITHMS
        chosen = tuple(algorithms) if algorithms else kind
        wrong = sorted(set(chosen) - set(kind))
        if wrong:
            raise UsageError(
                f"JwtAuthenticator: {', '.join(wrong)} cannot be verified with "
                f"{'a public key' if public else 'a shared secret'}"
            )
        self._algorithms = list(chosen)
        self._issuer = issuer
        self._audience = audience
        self._claims = (user_claim, tenant_claim, roles_claim)
        self._leeway = leeway

    async def authenticate(self, headers: Mapping[str, str]) -> Identity | None:
        """The identity of the request's JWT, or None when it has none that verifies."""
        token = bearer_token(headers)
        if token is None:
            return None
        jwt = self._jwt
        try:
            key: Any = self._key
            if self._jwks is not None:  # a blocking fetch when the key is not cached
                fetch = self._jwks.get_signing_key_from_jwt
                key = (await anyio.to_thread.run_sync(fetch, token)).key
            claims = jwt.decode(
                token,
                key,
                algorithms=self._algorithms,
                issuer=self._issuer,
                audience=self._audience,
                leeway=self._leeway,
                options={"require": ["exp"]},
            )
        except jwt.PyJWKClientConnectionError as exc:
            log.warning("JWT: the JWKS could not be fetched: %s", exc)
            return None
        except jwt.PyJWTError:
            return None
        user_claim, tenant_claim, roles_claim = self._claims
        user, tenant = _claim(claims, user_claim), _claim(claims, tenant_claim)
        return Identity(
            user=user if isinstance(user, str) and user else None,
            tenant=tenant if isinstance(tenant, str) and tenant else None,
            roles=_roles(_claim(claims, roles_claim)),
        )
