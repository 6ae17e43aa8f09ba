"""One Idempotency-Key names one object (issue 50 item 6): a principal's key used on a second object is 422
IDEMPOTENCY_KEY_REUSED and never produced, across API processes racing it, across restarts, on the batch route; the
validator and broker are the shared running Arbiter's (keys, objects and principals carry its tag)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from app.api.problems import ApiError
from app.api.writes.claims import KeyClaims
from app.api.writes.submit import now
from commands import UpdateObject
from tests.integration.test_api_support import (
    RunningArbiter,
    api_client,
    auth,
    consume_all,
    decided,
    is_problem,
)

pytestmark = pytest.mark.integration

WAIT = {"Prefer": "wait=120"}  # the first decision of a freshly started shared validator can take a while
PATCH = {"Content-Type": "application/merge-patch+json"}


def _commands_of(arbiter: RunningArbiter, *object_ids: str) -> list[Any]:
    """The records on the commands topic for ``object_ids`` (read to the end, then a moment more)."""
    from schemas import codec

    msgs = consume_all(arbiter.settings, arbiter.settings.topic_commands, 10**9, timeout=3.0)
    return [c for m in msgs if (c := codec.decode_command(m.value())).object_id in object_ids]


def test_a_key_used_on_a_second_object_is_refused_and_never_produced(arbiter: RunningArbiter) -> None:
    t, client, s = arbiter.tag, arbiter.client, arbiter.settings
    alice, bob = auth(s, f"alice-{t}"), auth(s, f"bob-{t}")
    key, x, y, z = f"k-{t}", f"x-{t}", f"y-{t}", f"z-{t}"
    first = decided(client.post("/objects", json={"id": x, "document": {"n": 1}},
                                headers={**alice, **WAIT, "Idempotency-Key": key}), 201, '"1"')
    other = client.post("/objects", json={"id": y, "document": {"n": 1}},
                        headers={**alice, **WAIT, "Idempotency-Key": key})
    body = is_problem(other, 422, "IDEMPOTENCY_KEY_REUSED")
    assert x in body["detail"] and body["command_id"] == key, body
    # the same key on a change of another (existing) object, and on the batch route: refused the same way
    decided(client.post("/objects", json={"id": z, "document": {}}, headers={**alice, **WAIT}), 201, '"1"')
    is_problem(client.patch(f"/objects/{z}", json={"n": 2}, headers={**alice, **WAIT, **PATCH, "Idempotency-Key": key}),
               422, "IDEMPOTENCY_KEY_REUSED")
    batch = client.post("/commands:batch", headers=alice, json={"commands": [
        {"kind": "update", "object_id": z, "patch": {"n": 3}, "idempotency_key": key},
        {"kind": "update", "object_id": z, "patch": {"n": 4}, "idempotency_key": f"fresh-{t}"}]})
    assert batch.status_code == 422 and batch.json()["code"] == "IDEMPOTENCY_KEY_REUSED", batch.text
    assert [r["status"] for r in batch.json()["results"]] == [422, 202], batch.text
    # a retry on the key's own object is the validator's DUPLICATE, answered as the original; another principal's
    # same key is another key
    decided(client.post("/objects", json={"id": x, "document": {"n": 1}},
                        headers={**alice, **WAIT, "Idempotency-Key": key}), 201, '"1"')
    decided(client.post("/objects", json={"id": y, "document": {"n": 1}},
                        headers={**bob, **WAIT, "Idempotency-Key": key}), 201, '"1"')
    # the key's one outcome: X's creation
    got = client.get(f"/commands/{key}", headers=alice).json()
    assert (got["object_id"], got["status"], got["event"]) == (x, "accepted", "CREATED") == (
        first.json()["object_id"], "accepted", first.json()["event"])
    # alice's key was produced for X only (twice: the request and its retry); Z got only the fresh key's patch
    mine = [(c.object_id, c.command_id) for c in _commands_of(arbiter, x, y, z) if c.principal == f"alice-{t}"
            and c.command_id in (key, f"fresh-{t}")]
    assert sorted(mine) == sorted([(x, key), (x, key), (z, f"fresh-{t}")]), mine  # partitions interleave


def test_two_api_processes_racing_one_key_for_two_objects_accept_exactly_one(arbiter: RunningArbiter) -> None:
    # Two processes' claims (each its own producer and fold), both appended before either reads back: the first in
    # the claims topic wins in both, the other is refused, for every one of 12 keys.
    s, t = arbiter.settings, arbiter.tag

    async def race() -> list[list[bool]]:
        a, b = await asyncio.gather(asyncio.to_thread(KeyClaims, s), asyncio.to_thread(KeyClaims, s))
        try:
            rounds = []
            for i in range(12):
                at = now()
                cmds = [UpdateObject(f"race-{t}-{i}", f"{o}-{t}-{i}", f"alice-{t}", at, patch="{}") for o in "xy"]
                outcomes = await asyncio.gather(a.check(cmds[0]), b.check(cmds[1]), return_exceptions=True)
                for o in outcomes:
                    assert o is None or (isinstance(o, ApiError) and o.code == "IDEMPOTENCY_KEY_REUSED"), o
                rounds.append([o is None for o in outcomes])
            return rounds
        finally:
            a.close()
            b.close()

    rounds = asyncio.run(race())
    assert all(sum(r) == 1 for r in rounds), rounds


def test_two_api_apps_at_once_then_a_restart_keep_one_object_per_key(arbiter: RunningArbiter) -> None:
    s, t = arbiter.settings, arbiter.tag
    alice = auth(s, f"alice-{t}")
    answers: dict[str, Any] = {}
    with api_client(s) as one, api_client(s) as two:
        go = threading.Barrier(2)

        def create(client: Any, obj: str) -> None:  # noqa: ANN401 - a TestClient
            go.wait()
            answers[obj] = client.post("/objects", json={"id": obj, "document": {}},
                                       headers={**alice, **WAIT, "Idempotency-Key": f"both-{t}"})

        threads = [threading.Thread(target=create, args=(c, f"{o}-{t}")) for c, o in ((one, "p"), (two, "q"))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    statuses = sorted((r.status_code, r.json().get("code")) for r in answers.values())
    assert statuses == [(201, None), (422, "IDEMPOTENCY_KEY_REUSED")], {o: r.text for o, r in answers.items()}
    winner = next(o for o, r in answers.items() if r.status_code == 201)
    loser = next(o for o in answers if o != winner)
    # a new API process (fresh fold, read from the claims topic) holds the key to the winner's object
    with api_client(s) as again:
        is_problem(again.post("/objects", json={"id": loser, "document": {}},
                              headers={**alice, **WAIT, "Idempotency-Key": f"both-{t}"}), 422, "IDEMPOTENCY_KEY_REUSED")
        decided(again.post("/objects", json={"id": winner, "document": {}},
                           headers={**alice, **WAIT, "Idempotency-Key": f"both-{t}"}), 201, '"1"')
    assert [c.object_id for c in _commands_of(arbiter, winner, loser)] == [winner, winner]


def _produce_claims(s: Any, records: list[tuple[bytes, bytes, list[tuple[str, bytes]] | None]]) -> None:  # noqa: ANN401
    """Produce ``records`` (key, value, headers) to the claims topic as any producer with access could."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": s.kafka_bootstrap, "partitioner": "murmur2_random", "acks": "all"})
    for key, value, headers in records:
        p.produce(s.claims_topic, value, key, headers=headers)
    assert p.flush(30) == 0


def test_a_forged_claim_can_neither_take_nor_block_a_key(arbiter: RunningArbiter) -> None:
    # Mallory can produce to the claims topic but holds no record key: her claims of alice's key for her own object,
    # unsigned, signed as a command with Arbiter's own key (a genuine command signature) and signed as a key claim
    # with a key of her own, come first in the log; alice's write with that key is still hers, and the skipped
    # records are counted on /healthz. A claim signed as the API signs one (the control) does take a key.
    from app.api.writes.claim_fold import claim_record
    from app.signing import KEY_CLAIM_DOMAIN, RecordSigner, signer_for
    from commands.claims import KeyClaim

    t, client, s = arbiter.tag, arbiter.client, arbiter.settings
    alice, principal = auth(s, f"alice-{t}"), f"alice-{t}"
    key, mine, theirs = f"fk-{t}", f"mine-{t}", f"theirs-{t}"
    skipped_before = client.get("/healthz").json()["claims_skipped"]
    k, v = claim_record(KeyClaim(principal, key, theirs, int(now().timestamp() * 1000)))
    mallory = RecordSigner({"m": b"mallory-s-own-key-of-enough-bytes"}, "m", KEY_CLAIM_DOMAIN)
    _produce_claims(s, [(k, v, None), (k, v, signer_for(s).headers(k, v)), (k, v, mallory.headers(k, v))])
    decided(client.post("/objects", json={"id": mine, "document": {}}, headers={**alice, **WAIT, "Idempotency-Key": key}),
            201, '"1"')
    is_problem(client.post("/objects", json={"id": theirs, "document": {}},
                           headers={**alice, **WAIT, "Idempotency-Key": key}), 422, "IDEMPOTENCY_KEY_REUSED")
    health = client.get("/healthz").json()
    assert health["claims_reader"] is True and health["claims_skipped"] >= skipped_before + 3, health
    figures = client.get("/status.json", headers=auth(s, "operator")).json()["claims"]  # the status page's figures
    assert figures["ready"] and figures["skipped"] >= skipped_before + 3 and figures["holders"] >= 1, figures
    # the control: the same record signed as the API signs a key claim takes the key from alice's next write
    k2, v2 = claim_record(KeyClaim(principal, f"{key}-2", theirs, int(now().timestamp() * 1000)))
    _produce_claims(s, [(k2, v2, signer_for(s, KEY_CLAIM_DOMAIN).headers(k2, v2))])
    is_problem(client.post("/objects", json={"id": f"{mine}-2", "document": {}},
                           headers={**alice, **WAIT, "Idempotency-Key": f"{key}-2"}), 422, "IDEMPOTENCY_KEY_REUSED")
    assert [c.object_id for c in _commands_of(arbiter, mine, theirs, f"{mine}-2")] == [mine]


def test_a_principal_holds_at_most_max_keys_keys(arbiter: RunningArbiter) -> None:
    # At the boundary (2 keys) a keyed write is accepted, one past it is 429 problem+json with Retry-After and
    # never produced; a retry of a held key and an unkeyed write still go through.
    t = arbiter.tag
    s = arbiter.settings.model_copy(update={"max_keys_per_principal": 2})
    alice = auth(s, f"alice-{t}")
    with api_client(s) as c:
        for i in (1, 2):
            r = c.post("/objects", json={"id": f"lim{i}-{t}", "document": {}}, headers={**alice, "Idempotency-Key": f"l{i}-{t}"})
            assert r.status_code == 202, r.text
        over = c.post("/objects", json={"id": f"lim3-{t}", "document": {}}, headers={**alice, "Idempotency-Key": f"l3-{t}"})
        body = is_problem(over, 429, "TOO_MANY_IDEMPOTENCY_KEYS")
        retry_after = int(over.headers["retry-after"])
        assert body["command_id"] == f"l3-{t}" and 1 <= retry_after <= s.dedup_ttl_ms // 1000, (body, over.headers)
        again = c.post("/objects", json={"id": f"lim1-{t}", "document": {}}, headers={**alice, "Idempotency-Key": f"l1-{t}"})
        assert again.status_code == 202, again.text
        free = c.post("/objects", json={"id": f"lim4-{t}", "document": {}}, headers=alice)
        assert free.status_code == 202, free.text
        # the batch route: the item beyond the bound is refused alone, the batch answered 429 with Retry-After
        batch = c.post("/commands:batch", headers=alice, json={"commands": [
            {"kind": "update", "object_id": f"lim1-{t}", "patch": {"n": 1}, "idempotency_key": f"l5-{t}"},
            {"kind": "update", "object_id": f"lim1-{t}", "patch": {"n": 2}}]})
        is_problem(batch, 429, "TOO_MANY_IDEMPOTENCY_KEYS")
        assert [r["status"] for r in batch.json()["results"]] == [429, 202], batch.text
        assert 1 <= int(batch.headers["retry-after"]) <= s.dedup_ttl_ms // 1000, batch.headers
    got = sorted((c.object_id, c.command_id) for c in _commands_of(arbiter, *(f"lim{i}-{t}" for i in (1, 2, 3, 4))))
    assert [o for o, _ in got] == sorted([f"lim1-{t}"] * 3 + [f"lim2-{t}", f"lim4-{t}"]), got
    assert f"l3-{t}" not in {k for _, k in got} and f"l5-{t}" not in {k for _, k in got}, got
