"""Arbiter's development issuer: short-lived EdDSA JWTs signed with a local key pair, and the JWKS that checks them.

For running without an identity provider (``./dev run``, the tests, the benchmarks). The key pairs live in
``<var_dir>/identity/<kid>.pem`` (private keys, mode 0600), created once and never overwritten; the newest signs,
every one is in the JWKS, so a new key (``arbiter token --new-key``) overlaps the old one until its file is removed.
Its tokens are checked by ``app.api.callers.tokens.TokenVerifier`` exactly like a provider's; the API also serves the
JWKS and a discovery document (``/.well-known/jwks.json``, ``/.well-known/openid-configuration``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from app.api.callers.auth import is_principal
from commands.errors import ArbiterError

ALGORITHM = "EdDSA"


def _kid(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.urlsafe_b64encode(hashlib.sha256(raw).digest()[:12]).decode().rstrip("=")


def _write_new_key(directory: Path) -> Path:
    """Create a key pair file atomically (a reader never sees half a key); return its path."""
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    path = directory / f"{time.time_ns():020d}-{_kid(key.public_key())}.pem"
    tmp = directory / f".{path.name}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)
    return path


class LocalIssuer:
    """Sign and publish Arbiter's own development tokens; ``open`` creates the first key pair if there is none."""

    def __init__(self, directory: Path, issuer: str, audience: str, groups_claim: str = "groups") -> None:
        self.directory, self.issuer, self.audience, self.groups_claim = directory, issuer, audience, groups_claim
        self._loaded: tuple[list[Path], list[tuple[str, Ed25519PrivateKey]]] = ([], [])

    @classmethod
    def open(cls, directory: Path, issuer: str, audience: str, groups_claim: str = "groups") -> LocalIssuer:
        """Return the issuer of ``directory``, creating it and a first key pair unless one exists (idempotent)."""
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not cls._paths(directory):
            _write_new_key(directory)  # two processes racing here both write one: both keys are then valid
        return cls(directory, issuer, audience, groups_claim)

    @staticmethod
    def _paths(directory: Path) -> list[Path]:
        return sorted(directory.glob("[0-9]*-*.pem"))

    def new_key(self) -> str:
        """Add a key pair that signs from now on; the older ones stay in the JWKS. Return its kid."""
        return _write_new_key(self.directory).stem.split("-", 1)[1]

    def _keys(self) -> list[tuple[str, Ed25519PrivateKey]]:
        paths = self._paths(self.directory)
        if paths == self._loaded[0]:  # parsed again only when a key file came or went
            return self._loaded[1]
        keys = []
        for path in paths:
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
            if isinstance(key, Ed25519PrivateKey):
                keys.append((path.stem.split("-", 1)[1], key))
        if not keys:
            raise ArbiterError(f"no key pair in {self.directory}", code="NO_SIGNING_KEY")
        self._loaded = (paths, keys)
        return keys

    def jwks(self) -> dict[str, Any]:
        """Return the JWK Set of every key pair (public halves only)."""
        out = []
        for kid, key in self._keys():
            jwk = json.loads(jwt.algorithms.OKPAlgorithm.to_jwk(key.public_key()))
            out.append({**jwk, "kid": kid, "use": "sig", "alg": ALGORITHM})
        return {"keys": out}

    def discovery(self, base_url: str) -> dict[str, Any]:
        """Return the OIDC discovery document, its ``jwks_uri`` under ``base_url`` (the API serving it)."""
        return {"issuer": self.issuer, "jwks_uri": base_url.rstrip("/") + "/.well-known/jwks.json",
                "id_token_signing_alg_values_supported": [ALGORITHM], "response_types_supported": ["token"],
                "subject_types_supported": ["public"]}

    def issue(self, principal: str, ttl_s: int, *, scopes: Iterable[str], groups: Iterable[str] = (),
              now: float | None = None) -> str:
        """Return a JWT for ``principal`` with ``scopes`` (and ``groups``), valid for ``ttl_s`` seconds."""
        if not is_principal(principal):
            raise ArbiterError(f"principal {principal!r} is not 1-128 characters of [A-Za-z0-9._@:+-]",
                               code="MALFORMED")
        kid, key = self._keys()[-1]
        iat = int(time.time() if now is None else now)
        claims = {"iss": self.issuer, "aud": self.audience, "sub": principal, "iat": iat, "nbf": iat,
                  "exp": iat + ttl_s, "jti": str(uuid.uuid4()), "scope": " ".join(scopes)}
        if groups:
            claims[self.groups_claim] = list(groups)
        return jwt.encode(claims, key, algorithm=ALGORITHM, headers={"kid": kid})
