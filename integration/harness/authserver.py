"""A small OAuth 2.1 authorization server on loopback, for the OAuth discovery tests: RFC 8414
metadata, RFC 7591 dynamic client registration, an authorization endpoint that approves at once
(it redirects with a code: no login page), and a token endpoint for the authorization code grant
with PKCE (S256) that issues RS256 JWTs for the resource asked for (RFC 8707), signed with a key
whose JWKS Envoy's jwt_authn verifies. It checks what a real one checks (registered client and
redirect URI, one use per code, the PKCE verifier) and records every request."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from .jwt import JwtKeys, make_jwt_keys
from .ports import BackgroundHttpServer

SCOPE = "mcp"


class AuthServer:
    """Started at once; `issuer` is `http://127.0.0.1:<port>`, `keys` sign its tokens. Tokens
    carry `sub` and `claims` (and `scope`: the scopes the authorization asked for, those of
    `scopes` only; `mcp` when it asked for none). close() when done."""

    def __init__(self, *, sub: str = "user-1", claims: dict[str, Any] | None = None,
                 scopes: tuple[str, ...] = (SCOPE,)) -> None:
        self.sub, self.claims, self.scopes = sub, dict(claims or {}), scopes
        self.requests: list[tuple[str, str]] = []  # (method, path without query)
        self.clients: dict[str, list[str]] = {}  # client_id -> redirect URIs
        self.codes: dict[str, dict[str, str]] = {}  # code -> what the authorization asked for
        self.issued: list[str] = []
        self._lock = threading.Lock()
        self.http = BackgroundHttpServer(self._handler())
        self.issuer = f"http://127.0.0.1:{self.http.port}"
        self.keys: JwtKeys = make_jwt_keys(issuer=self.issuer)

    def close(self) -> None:
        self.http.close()

    def metadata(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "registration_endpoint": f"{self.issuer}/register",
            "scopes_supported": list(self.scopes),
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"],
        }

    # -- the endpoints: (status, headers, JSON body or None) ---------------------------------------

    def register(self, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        uris = body.get("redirect_uris")
        if not (isinstance(uris, list) and uris and all(isinstance(u, str) for u in uris)):
            return 400, {}, {"error": "invalid_redirect_uri"}
        client_id = secrets.token_urlsafe(12)
        with self._lock:
            self.clients[client_id] = uris
        record = {**body, "client_id": client_id, "token_endpoint_auth_method": "none",
                  "grant_types": ["authorization_code"], "response_types": ["code"]}
        return 201, {}, record

    def authorize(self, q: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        redirect = q.get("redirect_uri", "")
        if redirect not in self.clients.get(q.get("client_id", ""), []):
            return 400, {}, {"error": "invalid_request", "error_description": "unknown client or redirect URI"}
        if q.get("response_type") != "code" or q.get("code_challenge_method") != "S256" or not q.get("code_challenge"):
            return 400, {}, {"error": "invalid_request", "error_description": "code with PKCE S256 only"}
        code = secrets.token_urlsafe(16)
        with self._lock:
            self.codes[code] = {k: q.get(k, "") for k in ("client_id", "redirect_uri", "code_challenge", "resource", "scope")}
        # Approved at once: back to the client with the code (and the issuer, RFC 9207).
        location = f"{redirect}?{urlencode({'code': code, 'state': q.get('state', ''), 'iss': self.issuer})}"
        return 302, {"location": location}, None

    def token(self, form: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        with self._lock:
            grant = self.codes.pop(form.get("code", ""), None)  # one use
        if form.get("grant_type") != "authorization_code" or grant is None:
            return 400, {}, {"error": "invalid_grant"}
        verifier = form.get("code_verifier", "")
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
        same = all(form.get(k) == grant[k] for k in ("client_id", "redirect_uri"))
        # The token is for the resource the authorization was for (RFC 8707): its audience.
        resource = form.get("resource", "")
        if challenge != grant["code_challenge"] or not same or not resource or resource != grant["resource"]:
            return 400, {}, {"error": "invalid_grant"}
        asked = grant["scope"].split()
        if any(s not in self.scopes for s in asked):
            return 400, {}, {"error": "invalid_scope"}
        scope = " ".join(asked) or SCOPE
        token = self.keys.mint({**self.claims, "scope": scope}, sub=self.sub, aud=resource)
        self.issued.append(token)
        return 200, {"cache-control": "no-store"}, {"access_token": token, "token_type": "Bearer",
                                                    "expires_in": 300, "scope": scope}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, headers: dict[str, str], body: Any) -> None:
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                if body is not None:
                    self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                url = urlsplit(self.path)
                server.requests.append(("GET", url.path))
                if url.path == "/.well-known/oauth-authorization-server":
                    self._answer(200, {}, server.metadata())
                elif url.path == "/authorize":
                    self._answer(*server.authorize({k: v[0] for k, v in parse_qs(url.query).items()}))
                else:
                    self._answer(404, {}, {"error": "not_found"})

            def do_POST(self) -> None:  # noqa: N802
                url = urlsplit(self.path)
                server.requests.append(("POST", url.path))
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                if url.path == "/register":
                    self._answer(*server.register(json.loads(raw or b"{}")))
                elif url.path == "/token":
                    form = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
                    self._answer(*server.token(form))
                else:
                    self._answer(404, {}, {"error": "not_found"})

            def log_message(self, *args: Any) -> None:
                pass

        return Handler
