"""An identity provider as far as Arbiter sees one, for tests: a discovery document and a JWKS served over HTTP on
127.0.0.1 by a real server, whose keys can rotate and whose JWKS can be made slow or down."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

AUDIENCE = "arbiter-api"


class Provider:
    """An identity provider as far as Arbiter sees one: a discovery document and a JWKS over HTTP."""

    def __init__(self, realm: str = "test") -> None:
        self.keys: dict[str, rsa.RSAPrivateKey] = {}
        self.published: list[str] = []
        self.jwks_fetches = 0
        self.jwks_delay_s = 0.0  # how long the JWKS endpoint takes to answer
        self.jwks_gate: threading.Event | None = None  # if set, the JWKS endpoint answers once the gate opens
        self.jwks_down = False  # the JWKS endpoint answers 503
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path == f"/realms/{realm}/.well-known/openid-configuration":
                    body: dict[str, Any] = {"issuer": provider.issuer, "jwks_uri": provider.base + "/certs"}
                elif self.path == "/certs":
                    provider.jwks_fetches += 1
                    time.sleep(provider.jwks_delay_s)
                    if provider.jwks_gate is not None:
                        provider.jwks_gate.wait(60)
                    if provider.jwks_down:
                        self.send_error(503)
                        return
                    body = {"keys": [provider.jwk(k) for k in provider.published]}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:  # noqa: ANN401
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_port}"
        self.issuer = self.base + f"/realms/{realm}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def add_key(self, kid: str, *, publish: bool = True) -> None:
        self.keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        if publish:
            self.published.append(kid)

    def jwk(self, kid: str) -> dict[str, Any]:
        return {**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.keys[kid].public_key())), "kid": kid,
                "use": "sig", "alg": "RS256"}

    def public_pem(self, kid: str) -> bytes:
        return self.keys[kid].public_key().public_bytes(serialization.Encoding.PEM,
                                                         serialization.PublicFormat.SubjectPublicKeyInfo)

    def token(self, kid: str = "k1", **claims: Any) -> str:  # noqa: ANN401
        now = int(time.time())
        body = {"iss": self.issuer, "aud": AUDIENCE, "sub": "alice", "iat": now, "nbf": now, "exp": now + 300,
                "jti": "j-1", "scope": "openid arbiter:read arbiter:write", "groups": ["/team-a", "team b"], **claims}
        return jwt.encode({k: v for k, v in body.items() if v is not None}, self.keys[kid], algorithm="RS256",
                          headers={"kid": kid})

    def close(self) -> None:
        if self.jwks_gate is not None:
            self.jwks_gate.set()  # a held answer is released, so the server's threads can be joined
        self.server.shutdown()
        self.server.server_close()
