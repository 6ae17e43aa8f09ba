"""Put Arbiter's schemas in a Confluent-compatible registry (``ARBITER_SCHEMA_REGISTRY_URL``) with confluent-kafka's client.

Arbiter writes the ids pinned in ``schemas/ids.json`` (the validator's tasks never ask a registry for an id, so
no registry answer can stop it or turn a record into a crash). At start, ``ensure_registered`` makes the
registry agree: each version, oldest first, is looked up (or registered) under its record-name subject and
under ``<topic>-value``, and each subject is set to BACKWARD_TRANSITIVE. A registry that gives a version
another id than the one on the topics is refused (``SchemaIdsDisagree``): stock consumers would read the
records with the wrong schema. A registry that cannot be reached is retried in the background
(``RegistryRegistration``): the validator runs meanwhile and the outcome is logged.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

try:  # the HTTP library confluent-kafka's client uses (httpx2 where installed, else httpx): its transport errors
    from httpx2 import HTTPError
except ImportError:
    from httpx import HTTPError

from app.contract.subjects import COMPATIBILITY, subject_versions
from app.errors import ArbiterError, SetupError
from app.settings import Settings

log = logging.getLogger("arbiter.contract.registry")

SUBJECT_NOT_FOUND, VERSION_NOT_FOUND, SCHEMA_NOT_FOUND = 40401, 40402, 40403


class SchemaIdsDisagree(SetupError):
    """The registry holds one of Arbiter's schema versions under another id than the one written on the topics."""

    code = "SCHEMA_IDS_DISAGREE"


class RegistryUnavailable(ArbiterError):
    """The schema registry could not be reached or answered with a server error."""

    code = "SCHEMA_REGISTRY_UNAVAILABLE"


def client(url: str) -> SchemaRegistryClient:
    """Return confluent-kafka's registry client for ``url``."""
    return SchemaRegistryClient({"url": url})


def ensure_registered(settings: Settings, registry: SchemaRegistryClient) -> dict[str, int]:
    """Make ``registry`` hold every subject's versions with Arbiter's ids; return the registry's ids by subject:version.

    Raises ``SchemaIdsDisagree`` when the registry has (or gives) another id, ``RegistryUnavailable`` when it
    cannot be reached.
    """
    found: dict[str, int] = {}
    try:
        for subject, versions in subject_versions(settings).items():
            for v in versions:
                schema = Schema(v.text, "AVRO")
                try:
                    schema_id = registry.lookup_schema(subject, schema).schema_id
                except SchemaRegistryError as e:
                    if e.error_code not in (SUBJECT_NOT_FOUND, SCHEMA_NOT_FOUND, VERSION_NOT_FOUND):
                        raise
                    schema_id = registry.register_schema(subject, schema)
                if schema_id != v.schema_id:
                    raise SchemaIdsDisagree(
                        f"the schema registry holds {v.subject} v{v.version} under subject {subject!r} as id "
                        f"{schema_id}, but Arbiter writes it with id {v.schema_id} (schemas/ids.json) on its topics; "
                        "stock consumers would read those records with the wrong schema. Import Arbiter's ids into "
                        "the registry (IMPORT mode) or use an empty registry whose ids start at 1001")
                found[f"{subject}:{v.version}"] = schema_id
            if registry.get_compatibility(subject) != COMPATIBILITY:
                registry.set_compatibility(subject, COMPATIBILITY)
    except SchemaRegistryError as e:
        if e.http_status_code is not None and e.http_status_code >= 500:
            raise RegistryUnavailable(f"schema registry: HTTP {e.http_status_code} {e.error_message}") from e
        raise SetupError(f"the schema registry refused Arbiter's schemas: {e}") from e
    except (HTTPError, OSError) as e:
        raise RegistryUnavailable(f"schema registry {settings.schema_registry_url}: {e}") from e
    return found


@dataclass
class RegistryRegistration:
    """``ensure_registered`` at start, then retried in a daemon thread while the registry cannot be reached."""

    settings: Settings
    retry_s: float = 5.0
    done: threading.Event = field(default_factory=threading.Event)
    attempts: int = 0
    last_error: str | None = None

    def start(self) -> RegistryRegistration:
        """Try once now: raise ``SchemaIdsDisagree`` (or ``SetupError``) at once; an outage is retried in the background."""
        url = self.settings.schema_registry_url
        if not url:
            self.done.set()
            return self
        if not self._attempt(client(url)):
            threading.Thread(target=self._retry, args=(url,), name="arbiter-registry", daemon=True).start()
        return self

    def _attempt(self, registry: SchemaRegistryClient) -> bool:
        self.attempts += 1
        try:
            ensure_registered(self.settings, registry)
        except RegistryUnavailable as e:
            self.last_error = str(e)
            log.warning("schema registry not reachable (attempt %d), retrying in %.0f s: %s",
                        self.attempts, self.retry_s, e)
            return False
        self.done.set()
        log.info("schema registry %s holds Arbiter's schemas with its ids", self.settings.schema_registry_url)
        return True

    def _retry(self, url: str) -> None:
        registry = client(url)
        while not self.done.wait(self.retry_s):
            try:
                if self._attempt(registry):
                    return
            except ArbiterError as e:  # ids disagree: the validator keeps writing; operators must act
                self.last_error = str(e)
                log.error("schema registry: %s", e)
                return
