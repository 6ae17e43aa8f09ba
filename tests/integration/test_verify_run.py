"""``arbiter verify replay`` and ``arbiter rules what-if`` as a user runs them: ``arbiter run`` plays its scenario
(the order rules deployed, then a limit raised; a deletion) and a mixed load (creates, updates, grants, deletes,
garbage) runs on it; the run stops (the package's played run: test_pipeline_e2e's, when it ran first). ``rules
what-if`` with the order example's finance guard tightened lists the flips a hand-written sequential ``decide`` over
the commands topic predicts, and its HTML report opens in headless Chromium; then ``arbiter erase`` purges a deleted
object, and the replay — a subprocess, like every command here — proves the history clean with the erased object
apart, and finds an outcome record forged on the events topic at its coordinates. One history serves both tests
(the erasure and the forgery come last).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from app.limits import size_limits
from app.rules.control import CONTROL_HEADER, is_control
from app.settings import Settings
from app.signing import SIGNATURE_HEADER, checker_for
from app.validator.decode import decode_record
from app.validator.fold import limits_for
from app.validator.rules import NO_RULES, ShardRules, control_step, rules_checker
from app.validator.topic_io import produce_with_headers, read_all
from commands import Event, ObjectState, Rejection, decide
from commands.rules import canonical_rules, compile_rules
from projections import archived
from tests.docs_snippets import ROOT, run_shell
from tests.integration.played_run import Run, settle, start_run, stop_run
from tests.integration.played_run import run_env as _env
from tests.integration.test_api_support import module_settings_for

pytestmark = pytest.mark.integration


def _cli(settings: Settings, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], env=_env(settings, 0), text=True,
                          capture_output=True, timeout=timeout)


ORDERS = Path(__file__).resolve().parents[2] / "docs" / "examples" / "rules" / "orders.yaml"
#: The candidate: the finance guard tightened from 10,000 to 1,000.
TIGHTER = ORDERS.read_text().replace("next.amount > 10000", "next.amount > 1000")


@pytest.fixture(scope="module")
def history(played_run: Run, base_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """``arbiter run`` with its scenario, a mixed load on it, settled (every command decided, projected and archived),
    then stopped: the package's played run as test_pipeline_e2e left it (its loads, status page and clean stop), or,
    if that test did not take it, with a load of this fixture's own (on a run of its own if that test failed)."""
    if played_run.settled:
        yield played_run.settings
        return
    played_run.claimed = True  # a later test_pipeline_e2e starts a run of its own
    run = played_run if played_run.serving() else start_run(module_settings_for(base_settings, tmp_path_factory,
                                                                                "verify-run"))
    try:
        assert run.serving(), "\n".join(run.lines[-60:])
        load = _cli(run.settings, "load", "--via", "topic", "--rate", "100", "--duration", "6", "--objects", "20",
                    "--wait", "60", timeout=300)
        assert load.returncode == 0, load.stdout[-2000:] + load.stderr[-2000:]
        settle(run.settings)
    finally:
        stop_run(run)
    run.settled = True
    yield run.settings


def _commands_on_topic(settings: Settings) -> int:
    """Records on the commands topic that the validator decides (control records switch rules instead)."""
    return sum(not is_control(next((v for k, v in r.headers if k == CONTROL_HEADER), None))
               for r in read_all(settings, settings.topic_commands))


def _replay(settings: Settings, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    done = _cli(settings, "verify", "replay", "--json", *args)
    assert done.stdout.strip(), done.stderr[-4000:]
    return done, json.loads(done.stdout.strip().splitlines()[-1])


def _a_deleted_object(settings: Settings) -> str:
    root = archived.local_root(settings.archive_location)
    for path in archived.topic_files(root, settings.topic_events):
        t = pq.read_table(path, columns=["object_id", "type", "timestamp_ms"])
        deleted = t.filter(pc.equal(t.column("type"), "DELETED")).sort_by("timestamp_ms")
        if deleted.num_rows:
            return str(deleted.column("object_id")[0].as_py())
    raise AssertionError("the run deleted nothing")


def _hand_flips(settings: Settings, candidate: str) -> Counter[tuple[str, str, str, str]]:
    """(rule, direction, reason, command id) of each decision that flips when ``candidate`` replaces every rules
    version from the start: every record of the commands topic in (partition, offset) order, decided by a sequential
    ``decide`` twice — under the version its partition's control records put in force, and under the candidate."""
    sizes, limits, checker = size_limits(settings.max_message_bytes), limits_for(settings), checker_for(settings)
    cand = compile_rules(candidate, version=1_000)
    now: dict[str | None, ObjectState | None] = {}
    then: dict[str | None, ObjectState | None] = {}
    shards: dict[int, ShardRules] = {}
    out: Counter[tuple[str, str, str, str]] = Counter()
    for r in sorted(read_all(settings, settings.topic_commands), key=lambda r: (r.partition, r.offset)):
        headers = dict(r.headers)
        if is_control(headers.get(CONTROL_HEADER)):
            shards[r.partition] = control_step(shards.get(r.partition, NO_RULES), r.key, r.value,
                                               headers.get(SIGNATURE_HEADER), r.topic, r.partition, r.offset,
                                               rules_checker(settings), sizes.keep_bytes).rules
            continue
        item, _ = decode_record(r.key, r.value, r.topic, r.partition, r.offset, partitions=settings.partitions,
                                keep=sizes.keep_bytes, id_bytes=sizes.max_id_bytes,
                                signature=headers.get(SIGNATURE_HEADER), checker=checker)
        if isinstance(item, Rejection):
            continue  # undecodable: refused alike under any rules
        shard = shards.get(r.partition, NO_RULES)
        rules = shard.ruleset(shard.active)
        a = decide(now.get(item.object_id), item, limits, rules=rules)
        b = decide(then.get(item.object_id), item, limits, rules=cand)
        if a.accepted:
            now[item.object_id] = a.state
        if b.accepted:
            then[item.object_id] = b.state
        if a.accepted != b.accepted:
            no = b.outcome if a.accepted else a.outcome
            assert isinstance(no, Rejection) and not isinstance(no, Event)
            out[(no.rule or "-", "accepted->rejected" if a.accepted else "rejected->accepted", no.reason.value,
                 item.command_id)] += 1
    return out


def test_rules_what_if_on_the_order_example_lists_the_flips_a_sequential_decide_predicts(
        history: Settings, tmp_path: Path) -> None:
    from tests.integration.browser import chromium, console_errors

    candidate = tmp_path / "tighter.yaml"
    candidate.write_text(TIGHTER)
    page = tmp_path / "what-if.html"
    done = _cli(history, "rules", "what-if", str(candidate), "--html", str(page))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    want = _hand_flips(history, canonical_rules(TIGHTER))
    assert any(d == "accepted->rejected" for _, d, _, _ in want), "the candidate must flip something"
    assert report["flips"] == sum(want.values())
    by_rule: dict[str, Counter[str]] = {}
    for (rule, direction, reason, _), n in want.items():
        by_rule.setdefault(rule, Counter())[f"{direction} {reason}"] += n
    assert {rule: dict(r["by"]) for rule, r in report["rules"].items()} == {k: dict(v) for k, v in by_rule.items()}
    assert {(s["command_id"], s["direction"]) for r in report["rules"].values() for s in r["samples"]} <= \
        {(c, d) for _, d, _, c in want}
    assert "order:finance-approves-large" in report["rules"]
    with chromium(tmp_path / "profile") as driver:
        driver.get(page.as_uri())
        assert "Rule order:finance-approves-large" in driver.find_element("tag name", "body").text
        assert driver.find_elements("css selector", "svg rect"), "the chart draws the flips"
        assert console_errors(driver) == []


def test_verify_replay_proves_a_run_clean_reports_an_erasure_apart_and_finds_a_forged_record(
        history: Settings) -> None:
    commands = _commands_on_topic(history)
    done, report = _replay(history)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    assert report["divergences"] == 0 and report["commands"] == commands > 100, report
    assert report["expected"] == report["stored"] >= commands
    assert len(report["rules_versions"]) >= 2, report  # the scenario deploys the order rules, then raises a limit
    assert report["erased"]["objects"] == 0

    victim = _a_deleted_object(history)
    erase = _cli(history, "erase", victim, "--reason", "test")
    assert erase.returncode == 0, erase.stdout + erase.stderr[-3000:]
    assert "row value(s) erased" in erase.stdout, erase.stdout
    done, after = _replay(history)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    assert after["divergences"] == 0, after
    assert after["erased"]["objects"] == 1 and after["erased"]["first"] == [victim], after
    assert after["commands"] + after["erased"]["commands"] == commands
    assert after["objects"] + 1 == report["objects"]

    # a forged outcome: a real event of another object, one byte changed, put on the events topic under its key
    event = next(r for r in read_all(history, history.topic_events) if r.key != victim.encode())
    forged = event.value[:-1] + bytes([event.value[-1] ^ 0x01])
    [(partition, where)] = produce_with_headers(history, [(event.key, forged, list(event.headers), event.partition)],
                                                history.topic_events)
    assert partition == event.partition
    plain = _cli(history, "verify", "replay", "--tail")
    assert plain.returncode == 1, plain.stdout[-4000:] + plain.stderr[-3000:]
    assert f"divergent: {history.topic_events}[{event.partition}]@{where}" in plain.stdout, plain.stdout
    assert "1 divergences" in plain.stdout and "1 erased objects" in plain.stdout, plain.stdout


def test_the_rules_quick_starts_run_as_printed(history: Settings) -> None:
    """The README's rules quick start and the rules page's deploy block, line for line as printed, on this run's
    history (last in this module: they deploy a new version)."""
    env = _env(history, 0)
    out = run_shell("rules-quick-start.sh", env)  # bash -e: verify replay's exit 1 on a divergence fails it
    assert "orders.yaml: OK, digest" in out and re.search(r"^rules version \d+ \([^)]+\) deployed, deployed_by ", out, re.M), out
    assert (ROOT / "var" / "flips.html").is_file()
    out = run_shell("rules-deploy.sh", env)
    assert "already the newest version" in out and "finance-approves-large" in out, out
