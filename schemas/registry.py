"""Optional Confluent-compatible schema registry over plain HTTP; the one place that reads its URL from the env.

Subjects use the record name strategy (``arbiter.Command``, ...). ``from_env()`` returns the repository's
codec when ``ARBITER_SCHEMA_REGISTRY_URL`` is unset; otherwise it registers every repository version,
oldest first, and returns a codec that writes the registry's ids and fetches unknown ids on demand.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from commands import ArbiterError
from schemas.catalog import SchemaCatalog, SchemaVersion
from schemas.codec import Codec, default_codec

ENV_URL = "ARBITER_SCHEMA_REGISTRY_URL"
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryError(ArbiterError):
    """The schema registry could not be reached or refused a request."""

    code = "SCHEMA_REGISTRY"


class RegistryClient:
    """The two calls Arbiter needs: register a schema under a subject, and fetch a schema by id."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode("utf-8") if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method,  # noqa: S310 - URL from settings
                                         headers={"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                return json.loads(response.read())
        except urllib.error.HTTPError as e:
            raise RegistryError(f"{method} {path}: HTTP {e.code} {e.read()[:200]!r}") from e
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise RegistryError(f"{method} {path}: {e}") from e

    def register(self, subject: str, schema_text: str) -> int:
        """Register ``schema_text`` under ``subject`` (idempotent) and return its id."""
        answer = self._call("POST", f"/subjects/{quote(subject, safe='')}/versions", {"schema": schema_text})
        return int(answer["id"])

    def schema(self, schema_id: int) -> dict[str, Any] | None:
        """Return the schema with ``schema_id``, or None if the registry does not know it."""
        try:
            answer = self._call("GET", f"/schemas/ids/{schema_id}")
        except RegistryError as e:
            if "HTTP 404" in str(e):
                return None
            raise
        schema: dict[str, Any] = json.loads(answer["schema"])
        return schema


def registry_codec(client: RegistryClient, repository: SchemaCatalog | None = None) -> Codec:
    """Register the repository's schema versions with ``client`` and return a codec using the registry ids."""
    repository = repository or SchemaCatalog.repository()
    renumbered = [SchemaVersion(v.subject, v.version, client.register(v.subject, v.text), v.schema)
                  for v in repository.versions()]
    return Codec(SchemaCatalog(renumbered), fetch=client.schema)


def from_env(environ: Mapping[str, str] | None = None) -> Codec:
    """Return the codec adapters should use: the registry's when ``ARBITER_SCHEMA_REGISTRY_URL`` is set."""
    url = (os.environ if environ is None else environ).get(ENV_URL, "").strip()
    if not url:
        return default_codec
    return registry_codec(RegistryClient(url))
