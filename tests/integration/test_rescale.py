"""``arbiter rescale`` end to end on a real broker and real Spark: 4 -> 6 -> 2 partitions with the state intact.

The suite's topics have 4 partitions, so the issue's 8 -> 12 -> 4 is run as 4 -> 6 -> 2 (a split, then a
merge to fewer than at the start) to keep the test inside its time budget.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.api.problems import ApiError
from app.api.writes.producer import CommandProducer
from app.rescale.errors import InProgress, NotDrained, WritesPaused
from app.rescale.generation import (
    GenerationWatch,
    current,
    first,
    generation_settings,
    history,
    overlay,
    publish,
    successor,
)
from app.rescale.steps import KILL_AT, read_plan, rescale
from app.rules.deploy import deploy
from app.settings import Settings
from app.topics import ensure_topics
from app.validator.headers import source
from app.validator.job import drain
from app.validator.murmur2 import partition_for
from app.validator.rocks.checkpoint import ShardStore
from app.validator.rules import NO_RULES, ShardRules, encode_shard_rules
from app.validator.topic_io import read_all
from commands import Command, CreateObject, DeleteObject, Event, ReasonCode, Rejection, UpdateObject
from schemas import codec
from tests.integration.test_api_support import api_client, auth
from tests.integration.validator_oracle import (
    ROOT,
    assert_topics_equal_the_topic_oracle,
    expected_from_records,
    send_commands,
    send_with_deploys,
    start_validator,
    stop_validator,
    topic_outputs,
    validator_env,
)

pytestmark = pytest.mark.integration

T0 = datetime(2025, 6, 1, tzinfo=UTC)
RULES_V3 = '{"rules": 1, "types": {}, "description": "v3"}'


def _commands(n: int, objects: int, start: int) -> list[Command]:
    """A mixed workload: creates, then updates by two principals (one not the owner), deletes and re-creates."""
    out: list[Command] = []
    for i in range(start, start + n):
        oid, at = f"k{i % objects}", T0 + timedelta(seconds=i)
        if i < objects or i % 89 == 1:
            out.append(CreateObject(f"c{i}", oid, "alice", at, document='{"a": 1}'))
        elif i % 97 == 0:
            out.append(DeleteObject(f"d{i}", oid, "alice", at))
        else:
            out.append(UpdateObject(f"u{i}", oid, "alice" if i % 5 else "bob", at, patch=f'{{"b": {i}}}'))
    return out


def _cli_rescale(s: Settings, partitions: int, tmp: Path, kill_at: str | None = None) -> subprocess.CompletedProcess[
        bytes]:
    env = validator_env(s) | ({KILL_AT: kill_at} if kill_at else {})
    return subprocess.run([sys.executable, "-m", "app.cli", "rescale", "--partitions", str(partitions), "--wait", "0"],
                          env=env, cwd=ROOT, capture_output=True, timeout=180)


def test_rescale_4_6_2_equals_the_oracle_across_generations_refuses_retries_and_resumes_after_kill_9(
        spark, settings: Settings, tmp_path: Path) -> None:  # noqa: ANN001
    s = settings.model_copy(update={"state_backend": "rocksdb", "snapshot_every": 2})
    assert s.partitions == 4
    gen0 = _commands(600, 60, 0)
    send_with_deploys(s, gen0)  # two rules deploys and a forged control record in generation 0

    # Not drained: the rescale pauses writes, then refuses, naming the lag; the plan stays at the drain.
    with pytest.raises(NotDrained, match="has not committed"):
        rescale(s, 6, wait_s=0)
    assert read_plan(s) is not None and read_plan(s).step == "drain"
    assert current(s).paused
    with pytest.raises(InProgress, match="--partitions 6"):
        rescale(s, 3)
    watch = GenerationWatch(s)  # what a running API sees: writes answer 503 with Retry-After, nothing produced
    producer = CommandProducer(s, generation=watch)
    with pytest.raises(ApiError) as paused:
        asyncio.run(producer.send("k1", codec.encode_command(gen0[1])))
    assert paused.value.code == "WRITES_PAUSED" and paused.value.headers["Retry-After"] == str(s.retry_after_s)
    with pytest.raises(WritesPaused):
        deploy(s, RULES_V3, principal="ops:test")

    # A running validator (as `arbiter run` keeps one) drains the paused generation while the rescale waits for
    # it, and stops by itself once the new generation is switched to; the supervisor would start it again.
    job = start_validator(s, tmp_path / "validator.log")
    try:
        g1 = rescale(s, 6, wait_s=180)
        assert job.wait(60) == 130, (tmp_path / "validator.log").read_text()[-3000:]
    finally:
        stop_validator(job)
    assert "is current: stopping this validator" in (tmp_path / "validator.log").read_text()
    assert (g1.number, g1.partitions, g1.topic) == (1, 6, f"{s.topic_commands}.g1")
    assert read_plan(s).step == "done" and not current(s).paused
    s1 = generation_settings(s)
    assert (s1.topic_commands, s1.partitions, s1.output_partitions) == (g1.topic, 6, 4)
    watch = GenerationWatch(s)
    assert CommandProducer(s, generation=watch)._follow() is None and watch.generation == current(s)

    # Generation 1: updates of objects from generation 0, a rules deploy, and retries across the cut-over.
    retries = [gen0[592], gen0[598]]  # accepted near generation 0's end: in their objects' dedup windows
    gen1 = _commands(300, 60, 600)
    send_commands(s1, gen1[:150] + retries)
    deploy(s, RULES_V3, principal="ops:test")  # the current generation's topic, every one of its partitions
    send_commands(s1, gen1[150:])
    drain(spark, s1, timeout=240)

    # kill -9 after the topic step (pause, drain and topic done), then in the split after the first new shard's
    # seed, then after the switch: each time the same command continues from the step it reached.
    topic = _cli_rescale(s, 2, tmp_path, kill_at="topic")
    assert topic.returncode == -9, topic.stderr.decode()[-2000:]
    assert read_plan(s).step == "topic" and current(s).paused
    killed = _cli_rescale(s, 2, tmp_path, kill_at="split:1")
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    assert b"continuing the rescale to 2 partitions at step 'topic'" in killed.stdout
    plan = read_plan(s)
    assert plan is not None and plan.step == "split"
    seeds = [ShardStore(plan.target.checkpoint, p).has_seed() for p in range(2)]
    assert seeds == [True, False], seeds
    assert current(s).paused and current(s).number == 1
    switched = _cli_rescale(s, 2, tmp_path, kill_at="switch")  # killed after the switch, before "done"
    assert switched.returncode == -9, switched.stderr.decode()[-2000:]
    assert b"continuing the rescale to 2 partitions at step 'split'" in switched.stdout
    assert read_plan(s).step == "switch" and current(s).number == 2
    done = _cli_rescale(s, 2, tmp_path)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert b"continuing the rescale to 2 partitions at step 'switch'" in done.stdout
    assert read_plan(s).step == "done"
    s2 = generation_settings(s)
    assert (s2.partitions, s2.topic_commands) == (2, f"{s.topic_commands}.g2")

    gen2 = _commands(200, 60, 900)
    retry2 = [gen1[13]]
    send_commands(s2, retry2 + gen2)
    drain(spark, s2, timeout=240)

    # The oracle, generation after generation: states carry on, each new partition starts on the common rules.
    states: dict = {}
    start, expected = NO_RULES, []
    for gs in (s, s1, s2):
        rules: dict[int, ShardRules] = {}
        expected += expected_from_records(read_all(gs, gs.topic_commands), gs, states=states, rules=rules, start=start)
        on = {encode_shard_rules(rules.get(p, start)) for p in range(gs.partitions)}
        assert len(on) == 1, on  # every partition ended on one rules version: no deploy half way
        start = rules.get(0, start)
    assert_topics_equal_the_topic_oracle(s, expected)

    # What the oracle shares with the validator (outcome_record) is checked apart too: the output topics kept
    # their 4 partitions and each object's outputs stayed on the partition its key hashes to among 4.
    outputs = topic_outputs(s)
    for topic, key, _, partition, headers in outputs:
        if key is not None and topic == s.topic_events:
            assert partition == partition_for(key, 4)
        assert dict(headers)["ce_source"] == source(s.topic_commands)  # the contract's constant in every generation
    # A retry across each cut-over is refused by the dedup window that travelled with its object.
    for cmd in retries + retry2:
        seen = [codec.decode_outcome(v) for _, k, v, _, _ in outputs if k == cmd.object_id.encode()]
        assert any(isinstance(o, Event) and o.command_id == cmd.command_id for o in seen), cmd
        assert any(isinstance(o, Rejection) and o.command_id == cmd.command_id and o.reason == ReasonCode.DUPLICATE
                   for o in seen), cmd
    # paused 0, 1; paused 1, 2: the history, each switch once although the last one was re-run after a kill
    assert [(g.number, g.paused) for g in history(s)] == [(0, True), (1, False), (1, True), (2, False)]
    # ... and the audit trail chains them: `arbiter audit show arbiter:generation` lists each step, then verifies.
    env = {**validator_env(s), "ARBITER_PROJECTION_METRICS_PORTS": "{}"}
    shown = ""
    for args in (("project", "audit", "--until-caught-up"), ("audit", "show", "arbiter:generation"),
                 ("audit", "verify")):
        done = subprocess.run([sys.executable, "-m", "app.cli", *args], env=env, cwd=ROOT, capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
        shown = done.stdout if args[1] == "show" else shown
    steps = re.findall(r"(PAUSED|RESCALED)\s+GENERATION\s+v(\d+)", shown)
    assert steps == [("PAUSED", "0"), ("RESCALED", "1"), ("PAUSED", "1"), ("RESCALED", "2")], shown


def _until(check, timeout: float = 15.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the API did not see the generation change in time"
        time.sleep(0.1)


def test_the_api_answers_writes_503_while_paused_and_writes_to_the_new_generation_after_the_switch(
        settings: Settings) -> None:
    """Over HTTP, on the real app and broker: the generations topic alone drives the API's writes."""
    s = settings
    g1 = successor(s, first(s), 3)
    ensure_topics(overlay(s, g1), [g1.topic], g1.partitions)
    with api_client(s) as client:
        watch = client.app.state.generation  # type: ignore[attr-defined]
        body = {"id": "before", "document": {"a": 1}}
        assert client.post("/objects", json=body, headers=auth(s)).status_code == 202
        publish(s, replace(first(s), paused=True), "test")
        _until(lambda: watch.generation.paused)
        paused = client.post("/objects", json={"id": "during", "document": {}}, headers=auth(s))
        assert paused.status_code == 503 and paused.headers["content-type"] == "application/problem+json"
        assert paused.json()["code"] == "WRITES_PAUSED" and paused.headers["retry-after"] == str(s.retry_after_s)
        batch = client.post("/commands:batch", json={"commands": [{"kind": "create", "object_id": "b1",
                                                                  "document": {}}]}, headers=auth(s))
        assert [(r["status"], r["code"]) for r in batch.json()["results"]] == [(503, "WRITES_PAUSED")], batch.text
        publish(s, g1, "test")
        _until(lambda: watch.generation.number == 1)
        assert client.post("/objects", json={"id": "after", "document": {}}, headers=auth(s)).status_code == 202
    assert [r.key for r in read_all(s, s.topic_commands)] == [b"before"]  # nothing reached the old topic after
    moved = read_all(s, g1.topic)
    assert [(r.key, r.partition) for r in moved] == [(b"after", partition_for(b"after", 3))]
