"""RS256 JWT minting against an inline JWKS (for Envoy's jwt_authn local_jwks)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import jwt as pyjwt  # PyJWT
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

ISSUER = "https://issuer.mcp-access.test"
AUDIENCE = "mcp-access"

_UNSET: Any = object()


def _rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass
class JwtKeys:
    """A signing key published in `jwks_json` under `kid`, plus a rogue key that is not published."""

    issuer: str
    audience: str
    kid: str
    private_key: rsa.RSAPrivateKey
    rogue_key: rsa.RSAPrivateKey

    @property
    def jwks(self) -> dict[str, Any]:
        jwk = json.loads(RSAAlgorithm.to_jwk(self.private_key.public_key()))
        jwk.update(kid=self.kid, alg="RS256", use="sig")
        return {"keys": [jwk]}

    @property
    def jwks_json(self) -> str:
        return json.dumps(self.jwks)

    def mint(
        self,
        claims: dict[str, Any] | None = None,
        *,
        sub: str | None = "agent-alpha",
        iss: str | None = _UNSET,
        aud: str | list[str] | None = _UNSET,
        exp: int | None = _UNSET,
        ttl: int = 300,
        kid: str | None = _UNSET,
        key: rsa.RSAPrivateKey | None = None,
    ) -> str:
        """An RS256 JWT. Defaults: iss/aud of these keys, exp=now+ttl, the published kid.
        Pass None for iss/aud/exp/sub/kid to leave that claim (header) out; `claims` are merged last."""
        now = int(time.time())
        payload: dict[str, Any] = {"iat": now}
        for k, v in (
            ("iss", self.issuer if iss is _UNSET else iss),
            ("aud", self.audience if aud is _UNSET else aud),
            ("exp", now + ttl if exp is _UNSET else exp),
            ("sub", sub),
        ):
            if v is not None:
                payload[k] = v
        payload.update(claims or {})
        headers = {"kid": self.kid if kid is _UNSET else kid}
        if headers["kid"] is None:
            del headers["kid"]
        return pyjwt.encode(payload, key or self.private_key, algorithm="RS256", headers=headers)

    def mint_untrusted(self, claims: dict[str, Any] | None = None, **kw: Any) -> str:
        """Same shape and kid as `mint`, but signed by a key that is NOT in the JWKS."""
        return self.mint(claims, key=self.rogue_key, **kw)

    def mint_expired(self, claims: dict[str, Any] | None = None, **kw: Any) -> str:
        return self.mint(claims, exp=int(time.time()) - 3600, **kw)


def make_jwt_keys(issuer: str = ISSUER, audience: str = AUDIENCE, kid: str = "mcp-access-test-1") -> JwtKeys:
    return JwtKeys(issuer=issuer, audience=audience, kid=kid, private_key=_rsa_key(), rogue_key=_rsa_key())
