"""``PUT /rules`` and ``GET /rules`` on the real broker: who may deploy, what a deploy writes, what a refusal says."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from app.api.callers.auth import READ, RULES
from app.errors import ArbiterError
from app.rules.catalog import deployed
from app.rules.control import CONTROL_HEADER, RULES_CONTROL, decode_control
from app.rules.deploy import deploy
from app.settings import Settings
from app.validator.topic_io import read_all
from tests.integration.test_api_support import TestClient, api_client, auth, is_problem, module_settings_for
from tests.integration.validator_oracle import RULES_V1, RULES_V2

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def module_settings(base_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return module_settings_for(base_settings, tmp_path_factory, "rules-api")


@pytest.fixture(scope="module")
def client(module_settings: Settings) -> Iterator[TestClient]:
    with api_client(module_settings) as c:
        yield c


def controls(settings: Settings) -> list[tuple[int, int]]:
    """(partition, version) of every rules control record on the commands topic, in (partition, offset) order."""
    return [(r.partition, decode_control(r.value).version) for r in read_all(settings, settings.topic_commands)
            if dict(r.headers).get(CONTROL_HEADER) == RULES_CONTROL]


def test_deploying_needs_the_rules_scope_and_a_document_that_compiles(client: TestClient,
                                                                       module_settings: Settings) -> None:
    is_problem(client.get("/rules", headers=auth(module_settings)), 404, "RULES_NOT_DEPLOYED")
    user = auth(module_settings)  # read, write, share: no arbiter:rules
    r = client.put("/rules", content=RULES_V1, headers={**user, "Content-Type": "application/json"})
    assert is_problem(r, 403, "INSUFFICIENT_SCOPE")["scope"] == RULES
    deployer = auth(module_settings, "ops", scopes=(RULES, READ))
    r = client.put("/rules", content=b"[1, 2", headers={**deployer, "Content-Type": "application/json"})
    assert is_problem(r, 422, "RULES_INVALID")["problems"]
    r = client.put("/rules", content=RULES_V1, headers={**deployer, "Content-Type": "text/plain"})
    is_problem(r, 415, "UNSUPPORTED_MEDIA_TYPE")
    assert controls(module_settings) == []  # nothing refused reached the commands topic

    r = client.put("/rules", content=RULES_V1, headers={**deployer, "Content-Type": "application/json"})
    assert r.status_code == 201, r.text
    body = r.json()
    assert (body["version"], body["deployed_by"], body["new"]) == (1, "ops", True)
    assert r.headers["arbiter-rules-version"] == "1"
    assert controls(module_settings) == [(p, 1) for p in range(module_settings.partitions)]  # one per partition
    got = client.get("/rules", headers=auth(module_settings)).json()
    assert (got["version"], got["deployed_by"], got["digest"]) == (1, "ops", body["digest"])

    again = client.put("/rules", content=RULES_V1, headers={**deployer, "Content-Type": "application/json"})
    assert (again.status_code, again.json()["version"], again.json()["new"]) == (200, 1, False)


def test_a_concurrent_double_deploy_gives_distinct_versions_or_a_conflict_never_two_documents_under_one_version(
        module_settings: Settings) -> None:
    s = module_settings.model_copy(update={"topic_commands": module_settings.topic_commands + "-race"})
    from app.topics import ensure_topics

    ensure_topics(s, [s.topic_commands])

    def attempt(text: str) -> int | str:
        try:
            return deploy(s, text, principal="ops").deploy.version
        except ArbiterError as e:
            return e.code

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(attempt, [RULES_V1, RULES_V2]))
    versions = [r for r in results if isinstance(r, int)]
    assert len(set(versions)) == len(versions) and set(results) - set(versions) <= {"RULES_CONFLICT"}, results
    catalog = deployed(s)
    assert [d.version for d in catalog] == sorted(versions)
    by_version: dict[int, set[str]] = {}
    for r in read_all(s, s.topic_commands):
        if dict(r.headers).get(CONTROL_HEADER) == RULES_CONTROL:
            d = decode_control(r.value)
            by_version.setdefault(d.version, set()).add(d.digest)
    assert all(len(digests) == 1 for digests in by_version.values()), by_version  # one document per version
