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


def test_a_patch_its_types_patch_schema_refuses_is_answered_422_early_and_never_produced(
        client: TestClient, module_settings: Settings) -> None:
    """The API started as ``arbiter api`` starts it learns an object's type and owner from the audit trail, so the
    owner's patch that its type's patch schema refuses is a 422 naming rule, pointer and version, and nothing is
    produced; another principal's patch is left to the validator (produced, 202)."""
    import json

    from app.read_models import audit_root
    from app.run.scenario import ORDERS
    from commands import CreateObject, decide
    from commands.rules import compile_rules
    from projections.audit import AuditProjection
    from projections.runner import Item, Record
    from schemas import codec

    s = module_settings
    deployer = auth(s, "ops", scopes=(RULES, READ))
    put = client.put("/rules", content=ORDERS.read_text(), headers={**deployer, "Content-Type": "application/yaml"})
    assert put.status_code == 201, put.text
    newest = deployed(s)[-1]
    version = newest.version
    assert put.json()["version"] == version
    rules = compile_rules(newest.document, version=version)
    doc = {"title": "chairs", "priority": 3, "customer": "acme", "amount": 500, "status": "draft"}
    created = decide(None, CreateObject("pc", "patched-order", "alice", newest.deployed_at,
                                        document=json.dumps(doc), object_type="order"), rules=rules).outcome
    audit = AuditProjection(audit_root(s), sync=False)  # as the audit projection appends the validator's event
    audit.apply([Item(Record(s.topic_events, 0, 0, b"patched-order", codec.encode_outcome(created), 0), created)])
    audit.close()

    refused = client.patch("/objects/patched-order", json={"priority": 9}, headers=auth(s))
    body = is_problem(refused, 422, "RULE_VIOLATED")
    assert (body["rule"], body["rule_pointers"], body["rules_version"]) == ("order:patch_schema", ["/priority"], version)
    assert refused.headers["arbiter-rules-version"] == str(version)
    other = client.patch("/objects/patched-order", json={"priority": 9}, headers=auth(s, "bob"))
    assert other.status_code == 202, other.text  # not the owner the audit trail knows: the validator decides
    keys = [r.key for r in read_all(s, s.topic_commands) if dict(r.headers).get(CONTROL_HEADER) is None]
    assert keys == [b"patched-order"], keys  # bob's only: the refused patch was never produced


def test_the_status_page_and_metrics_show_the_rules_version_per_partition_and_rejections_per_rule(
        client: TestClient, module_settings: Settings) -> None:
    """Decisions read from the real events and rejections topics move the status page's rules figures and the
    ``arbiter_rules_version`` / ``arbiter_api_rule_rejections_total`` series (issue 36, "What every decision says")."""
    import time
    from datetime import UTC, datetime

    from app.api.callers.auth import OPERATE
    from app.run.scenario import ORDERS
    from app.validator.murmur2 import partition_for
    from app.validator.topic_io import produce
    from commands import CreateObject, UpdateObject, decide
    from commands.rules import canonical_rules, compile_rules
    from schemas import codec

    s = module_settings
    rules = compile_rules(canonical_rules(ORDERS.read_text()), version=7)
    at = datetime(2026, 11, 2, tzinfo=UTC)
    doc = '{"title":"t","priority":1,"customer":"c","amount":1,"status":"draft"}'
    made = decide(None, CreateObject("sc", "status-order", "alice", at, document=doc, object_type="order"), rules=rules)
    refused = decide(made.state, UpdateObject("su", "status-order", "alice", at, patch='{"status":"approved"}'),
                     rules=rules).outcome
    assert refused.rule == "order:status-flow"  # type: ignore[union-attr]
    produce(s, [(b"status-order", codec.encode_outcome(made.outcome))], s.topic_events)
    produce(s, [(b"status-order", codec.encode_outcome(refused))], s.topic_rejections)
    partition = partition_for(b"status-order", s.partitions)
    operator = auth(s, "operator", (OPERATE,))
    deadline = time.monotonic() + 30
    while True:
        page = client.get("/status.json", headers=operator).json()
        metrics = client.get("/metrics", headers=operator).text
        shown = (page["rules_version_by_partition"].get(str(partition)), page["rejections_by_rule"])
        if shown[0] == 7 and shown[1].get("order:status-flow (v7)") == 1:
            break
        assert time.monotonic() < deadline, (shown, page)
        time.sleep(0.5)
    assert f'arbiter_rules_version{{partition="{partition}"}} 7.0' in metrics, metrics
    assert 'arbiter_api_rule_rejections_total{rule="order:status-flow",rules_version="7"} 1.0' in metrics, metrics
