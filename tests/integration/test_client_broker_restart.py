"""A program using only the Python client (clients/python/examples/shared_counters.py) drives two racing users
through a broker restart: the real validator process, DB projection and API run on a broker of this module's own,
stopped and started while the program writes. Nothing is lost and nothing is applied twice.

Runs on ``own_broker`` (tests/integration/conftest.py: a broker apart from the session's, started once for the
tests that stop it) so stopping it does not disturb the session broker.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.api.main import create_app
from app.local.kafka_broker import LocalBroker
from app.settings import Settings
from app.topics import ensure_lease_topic, ensure_topics
from tests.integration.test_api_support import db_projection_running, served, token
from tests.integration.validator_oracle import ROOT, start_validator, stop_validator

pytestmark = pytest.mark.integration

PROGRAM = ROOT / "clients" / "python" / "examples" / "shared_counters.py"
# The program is frozen (SIGSTOP) while the broker shuts down, so it is still writing when the broker has gone
# however fast the machine: before, ten rounds could all be decided during the shutdown on an idle machine (CI saw no
# retry at all), and thirty rounds were run only to outlast it (240 decided writes, most of this test's time).
OBJECTS, ROUNDS = 4, 10
# At most this many outages, each until a write met it or OUTAGE_S passed (see the test).
OUTAGES, OUTAGE_S = 4, 30.0


def api_total(url: str, s: Settings, name: str) -> float:
    """The sum of the API's counter ``name`` over its labels, from its /metrics."""
    r = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {token(s, 'operator')}"}, timeout=10)
    assert r.status_code == 200, r.text
    return sum(float(line.rsplit(" ", 1)[1]) for line in r.text.splitlines()
               if line.startswith((f"{name}{{", f"{name} ")))


def produce_failures(url: str, s: Settings) -> float:
    """The commands the broker did not acknowledge: each answered 503 BROKER_UNAVAILABLE, which the client retries."""
    return api_total(url, s, "arbiter_api_produce_failures_total")


def test_a_client_program_loses_nothing_through_a_broker_restart(
        own_broker: LocalBroker, base_settings: Settings, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    s = base_settings.model_copy(update={
        "kafka_bootstrap": own_broker.bootstrap, "partitions": 2, "topic_commands": f"commands-{tag}",
        "topic_events": f"events-{tag}", "topic_rejections": f"rejections-{tag}", "var_dir": tmp_path / "var",
        "topic_validator_leases": f"leases-{tag}", "state_backend": "rocksdb", "produce_timeout_s": 2.0,
        "retry_after_s": 1})
    ensure_topics(s)
    ensure_lease_topic(s)
    log = tmp_path / "validator.log"
    job = start_validator(s, log, {"ARBITER_TOPIC_VALIDATOR_LEASES": s.topic_validator_leases,
                                   "ARBITER_LEASE_SESSION_TIMEOUT_MS": "2000"})
    lines: list[dict[str, Any]] = []
    refused = 0.0  # the API's count of commands it did not store, read once the program is done
    try:
        with db_projection_running(s), served(create_app(s)) as url:
            program = subprocess.Popen(  # noqa: S603 - our own example program
                [sys.executable, str(PROGRAM), url, token(s, "alice"), token(s, "bob"), "--objects", str(OBJECTS),
                 "--rounds", str(ROUNDS), "--tag", tag], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                reader = threading.Thread(target=lambda: lines.extend(json.loads(x) for x in program.stdout), daemon=True)  # type: ignore[union-attr]
                reader.start()
                deadline = time.monotonic() + 300
                while not any(x.get("phase") == "round" for x in lines):  # the racers are writing
                    assert program.poll() is None, program.stderr.read()  # type: ignore[union-attr]
                    assert job.poll() is None, log.read_text()[-4000:]
                    assert time.monotonic() < deadline, "the program made no round in 300 s"
                    time.sleep(0.2)
                # The broker goes away while the racers write, and stays away until a write of the program has met
                # the outage (the API answered 503 BROKER_UNAVAILABLE after the produce timeout, which the program
                # retries). A racer whose write was produced just before the stop waits for its decision until the
                # broker is back; when both do, no write meets that outage, so the broker is restarted and stopped
                # again (a fixed 5 s outage left "the program never met the outage" to chance under load).
                for _ in range(OUTAGES):
                    assert program.poll() is None, "the program finished before the broker went: no outage to go through"
                    failed_before = produce_failures(url, s)
                    program.send_signal(signal.SIGSTOP)  # mid-round: it cannot finish while the broker shuts down
                    try:
                        # Every command produced so far is decided and its outcome seen by the API before the broker
                        # goes, so neither racer is left waiting for a decision the outage holds back: the next thing
                        # each does that needs the broker is a write, which meets the outage (before, a racer waiting
                        # for its decision let most outages pass unmet, and each unmet one cost a broker restart and
                        # the validator's return: ~40 s, up to four times).
                        settle = time.monotonic() + 60
                        while api_total(url, s, "arbiter_api_outcomes_total") < \
                                api_total(url, s, "arbiter_api_commands_produced_total") and time.monotonic() < settle:
                            time.sleep(0.1)
                        own_broker.stop()
                    finally:
                        program.send_signal(signal.SIGCONT)
                    deadline = time.monotonic() + OUTAGE_S
                    while produce_failures(url, s) <= failed_before and time.monotonic() < deadline \
                            and program.poll() is None:
                        time.sleep(0.2)
                    met = produce_failures(url, s) > failed_before
                    own_broker.start(Settings())
                    if met:
                        break
                    # back: wait until the racers write again (their held writes decided) before the next outage
                    produced = api_total(url, s, "arbiter_api_commands_produced_total")
                    deadline = time.monotonic() + 180
                    while api_total(url, s, "arbiter_api_commands_produced_total") < produced + 2 \
                            and program.poll() is None:
                        assert time.monotonic() < deadline, "the program wrote nothing in 180 s after the broker came back"
                        time.sleep(0.2)
                program.wait(400)
                # every 503 BROKER_UNAVAILABLE the program met is a command the API counts as not stored (a keyed
                # write's claim refused while the broker was away went uncounted, and the outages above went unseen)
                refused = produce_failures(url, s)
            finally:  # a failure above leaves no program running (or stopped) behind
                if program.poll() is None:
                    program.kill()
            reader.join(10)
            # kept beside the validator's log for whoever reads a failure: the program's phases and summary
            (tmp_path / "program.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
            # a racer's failure ends the program with a "failed" phase (why) and exit 1
            assert program.returncode == 0, (lines[-1:], program.stderr.read())  # type: ignore[union-attr]
    finally:
        stop_validator(job)
    done = lines[-1]
    assert done["phase"] == "done", lines
    ids = [f"{tag}-{i}" for i in range(OBJECTS)]
    last = 2 + 2 * ROUNDS  # created, bob made editor, then every increment of both racers
    assert done["counters"] == {oid: 2 * ROUNDS for oid in ids}, done
    assert done["versions"] == {oid: last for oid in ids}, done
    assert done["history"] == {oid: list(range(1, last + 1)) for oid in ids}, done
    for oid in ids:  # each racer's increment of each round applied exactly once
        assert sorted(done["logs"][oid]) == sorted(f"{w}{r}" for w in "ab" for r in range(ROUNDS)), done["logs"][oid]
    outage = {code: n for code, n in done["retries"].items() if code in ("BROKER_UNAVAILABLE", "TRANSPORT_FAILED")}
    assert refused >= done["retries"].get("BROKER_UNAVAILABLE", 0), (refused, done["retries"])
    assert outage, f"the program never met the outage: {done['retries']}"
    print(f"retries by the client program through the restart: {done['retries']}")  # shown with -s
