"""Unique values on the real pipeline (issue 53): a broker, the rocksdb validator in Spark, a kill -9 mid-race.

50 clients race for 10 e-mail addresses of a type whose rules declare ``email`` unique. Claims travel as signed
protocol records on the commands topic between the users' partitions and the index entries' (docs/concepts/
multi-object.md); the validator is killed with SIGKILL while claims are in flight and restarted from its
checkpoint. Exactly 10 creates win, the other 40 are refused ``UNIQUE_VIOLATION``, and the events and rejections
topics hold exactly what the sequential oracle predicts from the commands topic (protocol records included).
"""

from __future__ import annotations

import json
import random
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.rules.deploy import deploy
from app.settings import Settings
from app.validator.job import drain
from app.validator.multi import MULTI_CONTROL
from app.validator.topic_io import read_all
from commands import CreateObject, Event, Rejection
from schemas import codec
from tests.integration.validator_oracle import (
    assert_topics_equal_the_topic_oracle,
    decided,
    kill_mid_stream,
    send_commands,
    start_validator,
    topic_outputs,
)

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 27, 23, 0, tzinfo=UTC)
RULES = json.dumps({"rules": 1, "types": {"user": {"tracked": {"email": "/email"}, "unique": ["email"]}}})


def _race(clients: int, values: int) -> list[CreateObject]:
    return [CreateObject(f"c{n}", f"user-{n}", f"client-{n}", T0 + timedelta(milliseconds=n),
                         document=json.dumps({"email": f"{n % values}@example.com"}), object_type="user")
            for n in range(clients)]


def test_fifty_clients_racing_for_ten_values_under_a_kill_9_make_exactly_ten_winners(
        spark, settings: Settings, tmp_path: Path) -> None:  # noqa: ANN001
    s = settings.model_copy(update={"max_offsets_per_trigger": 8})
    deploy(s, RULES, principal="ops")
    commands = _race(50, 10)
    random.Random(53).shuffle(commands)
    # Fifty producers at once: their order on each partition is the race's.
    threads = [threading.Thread(target=send_commands, args=(s, commands[i::5])) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log = tmp_path / "job.log"
    at_kill = kill_mid_stream(start_validator(s, log), s, commands, log)
    for _ in range(8):  # restarts from the killed job's checkpoint; each drain reads what the last one wrote
        drain(spark, s, timeout=180)
        if {c.command_id for c in commands} <= {cid for _, cid in decided(s)[1]}:
            break
    drain(spark, s, timeout=180)  # the releases and stray answers the last decisions sent, if any
    outcomes = {(o.object_id, o.command_id): o for o in (codec.decode_outcome(r[2]) for r in topic_outputs(s))}
    winners = sorted(oid for (oid, _), o in outcomes.items() if isinstance(o, Event))
    refused = Counter(o.reason.value for o in outcomes.values() if isinstance(o, Rejection))
    assert len(winners) == 10 and refused == Counter({"UNIQUE_VIOLATION": 40}), (winners, refused)
    assert len({n % 10 for n in (int(w.split("-")[1]) for w in winners)}) == 10  # one winner per value
    assert len(at_kill) < len(commands)
    protocol = [r for r in read_all(s, s.topic_commands) if dict(r.headers).get("arbiter-control") == MULTI_CONTROL]
    assert len(protocol) >= 50  # a claim per create and an answer per claim, at least
    assert_topics_equal_the_topic_oracle(s)
