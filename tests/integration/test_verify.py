"""``arbiter verify replay`` and ``arbiter rules what-if`` over a real pipeline run: the validator (real Spark, real
broker) decides a history with rules deploys in the middle, the archive copies it to Parquet, and the replay job
re-decides it. One history serves every test (the suite's time budget); the tampering test comes last.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from app.archive.query import start as start_archive
from app.rules.deploy import deploy
from app.settings import Settings
from app.topics import ensure_topics
from app.validator.fold import limits_for
from app.verify.html import render
from app.verify.replay import replay
from app.verify.whatif import what_if
from commands import CreateObject, DeleteObject, Event, UpdateObject, decide
from commands.rules import canonical_rules, compile_rules
from projections import archived
from tests.integration.validator_oracle import send_commands, send_with_deploys

pytestmark = pytest.mark.integration

ORDERS = Path(__file__).resolve().parents[2] / "docs" / "examples" / "rules" / "orders.yaml"
#: The candidate: the finance guard tightened from 10,000 to 1,000.
TIGHTER = ORDERS.read_text().replace("next.amount > 10000", "next.amount > 1000")


def _at(i: int) -> datetime:
    return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=i)


def _untyped() -> list[CreateObject | UpdateObject | DeleteObject]:
    out: list[CreateObject | UpdateObject | DeleteObject] = []
    for i in range(9):
        out.append(CreateObject(f"c{i}", f"plain-{i}", "alice", _at(i), document='{"n": 0}'))
        out.append(UpdateObject(f"u{i}", f"plain-{i}", "bob" if i % 3 == 0 else "alice", _at(i + 1), patch='{"n": 1}'))
        if i % 4 == 0:
            out.append(DeleteObject(f"d{i}", f"plain-{i}", "alice", _at(i + 2)))
            out.append(UpdateObject(f"late{i}", f"plain-{i}", "alice", _at(i + 3), patch='{"n": 2}'))  # DELETED
    return out


def _orders() -> list[CreateObject | UpdateObject]:
    """Orders of 500, 5,000 and 50,000, each submitted then approved by a non-finance caller (and by finance)."""
    out: list[CreateObject | UpdateObject] = []
    for i in range(12):
        amount = (500, 5000, 50000)[i % 3]
        oid = f"order-{i}"
        doc = f'{{"title": "t{i}", "priority": 2, "customer": "acme", "amount": {amount}, "status": "draft"}}'
        out.append(CreateObject(f"oc{i}", oid, "alice", _at(100 + i), document=doc, object_type="order"))
        out.append(UpdateObject(f"os{i}", oid, "alice", _at(200 + i), patch='{"status": "submitted"}'))
        out.append(UpdateObject(f"oa{i}", oid, "alice", _at(300 + i), patch='{"status": "approved"}'))
        out.append(UpdateObject(f"of{i}", oid, "carol", _at(400 + i), patch='{"status": "approved"}',
                                groups=("finance",)))
    return out


@pytest.fixture(scope="module")
def history(spark, base_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:  # noqa: ANN001
    """A pipeline run: untyped commands with two deploys and a forged control record, then the order rules and
    orders; decided by the validator, then archived."""
    from app.validator.job import drain

    tag = uuid.uuid4().hex[:10]
    tmp = tmp_path_factory.mktemp("verify")
    s = base_settings.model_copy(update={
        "topic_commands": f"commands-{tag}", "topic_events": f"events-{tag}", "topic_rejections": f"rejections-{tag}",
        "var_dir": tmp / "var", "archive_uri": str(tmp / "archive")})
    ensure_topics(s)
    send_with_deploys(s, _untyped())
    deploy(s, ORDERS.read_text(), principal="ops:test")
    send_commands(s, _orders())
    drain(spark, s, timeout=240)
    start_archive(spark, s, available_now=True).awaitTermination(240)
    yield s


def test_a_real_run_replays_clean(spark, history: Settings) -> None:  # noqa: ANN001
    report = replay(spark, history)
    assert report.divergences == 0, report.first
    commands = len(_untyped()) + len(_orders())
    assert report.commands == commands  # control records switch rules; they are no decisions
    assert report.expected == report.stored >= commands
    assert list(report.rules_versions) == [1, 2, 3]


def _sequential_flips(candidate: str) -> set[tuple[str, str]]:
    """(command id, direction) of each order command a sequential ``decide`` decides otherwise under the candidate."""
    limits = limits_for(Settings())
    now, cand = compile_rules(canonical_rules(ORDERS.read_text()), version=3), compile_rules(candidate, version=4)
    states: dict[str, object] = {}
    cstates: dict[str, object] = {}
    flipped = set()
    for c in _orders():
        a = decide(states.get(c.object_id), c, limits, rules=now)  # type: ignore[arg-type]
        b = decide(cstates.get(c.object_id), c, limits, rules=cand)  # type: ignore[arg-type]
        states[c.object_id], cstates[c.object_id] = a.state, b.state
        if isinstance(a.outcome, Event) != isinstance(b.outcome, Event):
            flipped.add((c.command_id, "accepted->rejected" if isinstance(a.outcome, Event) else "rejected->accepted"))
    return flipped


def test_what_if_a_tighter_guard_flips_what_a_sequential_decide_predicts(spark, history: Settings,  # noqa: ANN001
                                                                          tmp_path: Path) -> None:
    candidate = canonical_rules(TIGHTER)
    report = what_if(spark, history, candidate)
    assert report.commands == len(_untyped()) + len(_orders())  # decisions re-made, control records apart
    expected = _sequential_flips(candidate)
    assert expected, "the candidate must flip something, or the test proves nothing"
    assert {(f.command_id, f.direction) for f in report.flips} == expected
    tightened = {f for f in report.flips if f.direction == "accepted->rejected"}
    assert tightened and {f.rule for f in tightened} == {"order:finance-approves-large"}
    assert report.as_dict()["rules"]["order:finance-approves-large"]["by"]["accepted->rejected RULE_VIOLATED"] == len(
        tightened)

    from tests.integration.browser import chromium, console_errors

    page = tmp_path / "what-if.html"
    page.write_text(render(report), encoding="utf-8")
    with chromium(tmp_path / "profile") as driver:
        driver.get(page.as_uri())
        assert "Rule order:finance-approves-large" in driver.find_element("tag name", "body").text
        assert driver.find_elements("css selector", "svg rect"), "the chart draws the flips"
        assert console_errors(driver) == []


def test_explain_answers_for_a_refused_and_an_accepted_command(history: Settings, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``arbiter rules explain`` on the archived run: decide re-run with its hook on the folded state gives the
    decision the validator stored, and names each rule with its inputs (issue 52 "Explain")."""
    from app.cli import main
    from app.verify.explain import explain_command

    [refused] = explain_command(history, "oa2")  # order-2: 50,000 approved outside finance
    assert refused.matches_fold and refused.explanation is not None
    d = refused.as_dict()
    assert d["rules_version"] == 3 and d["object_id"] == "order-2" and d["object_type"] == "order"
    assert (d["outcome"]["status"], d["outcome"]["rule"]) == ("rejected", "order:finance-approves-large")
    assert d["tracked"]["before"] == {"amount": 50000, "customer": "acme", "status": "submitted"}
    assert d["tracked"]["after"]["status"] == "approved"
    assert [(s["rule"], s["result"]) for s in d["rules"]][-2:] == [("order:status-flow", "passed"),
                                                                   ("order:finance-approves-large", "refused")]
    assert d["rules"][-1]["inputs"]["caller.groups"] == []
    [accepted] = explain_command(history, "oa0", object_id="order-0", principal="alice")  # 500: no finance needed
    a = accepted.as_dict()
    assert accepted.matches_fold and a["outcome"]["status"] == "accepted" and a["rules_version"] == 3
    assert {s["result"] for s in a["rules"]} == {"passed"} and len(a["rules"]) == 6
    assert explain_command(history, "oa0", object_id="order-0", principal="bob") == []
    [plain] = explain_command(history, "u3")  # bob's update of alice's untyped object: a check before any rule
    assert plain.as_dict()["outcome"]["reason"] == "NOT_FOUND" and plain.as_dict()["rules"] == []
    monkeypatch.setattr("app.cli.rules.get_settings", lambda: history)
    assert main(["rules", "explain", "oa2"]) == 0
    out = capsys.readouterr().out
    assert "rejected RULE_VIOLATED [order:finance-approves-large]" in out and "rules version: 3" in out
    assert main(["rules", "explain", "no-such-command"]) == 1


def test_the_topics_tail_past_the_archive_replays_clean_too(spark, history: Settings) -> None:  # noqa: ANN001
    from app.validator.job import drain

    more = [CreateObject(f"t{i}", f"tail-{i}", "alice", _at(900 + i), document='{"n": 0}') for i in range(4)]
    more.append(UpdateObject("tu1", "plain-1", "alice", _at(950), patch='{"n": 5}'))  # an archived object goes on
    send_commands(history, more)
    drain(spark, history, timeout=240)
    archived_only, with_tail = replay(spark, history), replay(spark, history, tail=True)
    assert archived_only.divergences == 0 and with_tail.divergences == 0, with_tail.first
    assert with_tail.commands == archived_only.commands + len(more)
    assert with_tail.stored == archived_only.stored + len(more)
    candidate = canonical_rules(TIGHTER)
    assert what_if(spark, history, candidate, tail=True).commands == what_if(spark, history, candidate).commands \
        + len(more)  # what-if reads the tail too when asked (issue 52: it saw only the archive)


def _resized(line: str, path: Path) -> str:
    import json

    if path.name not in line:
        return line
    entry = json.loads(line)
    entry["size"] = path.stat().st_size
    return json.dumps(entry, separators=(",", ":"))


def test_a_record_tampered_in_the_archive_is_reported_with_its_coordinates(spark, history: Settings) -> None:  # noqa: ANN001
    root = archived.local_root(history.archive_location)
    for path in archived.files(root):
        if f"topic={history.topic_events}" not in str(path):
            continue
        table = pq.ParquetFile(path).read()
        if table.num_rows:
            break
    else:
        pytest.fail("no archived events")
    rows = table.to_pylist()
    victim = rows[0]
    value = bytearray(victim["value"])
    value[-1] ^= 0x01
    rows[0] = {**victim, "value": bytes(value)}
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)
    # as a forger would: drop Hadoop's checksum of the file and mend its size in the file sink's log
    path.with_name(f".{path.name}.crc").unlink(missing_ok=True)
    for entry in (root / "stream" / "_spark_metadata").iterdir():
        text = "" if entry.name.startswith(".") else entry.read_text()
        if path.name in text:
            entry.write_text("\n".join(_resized(line, path) for line in text.split("\n")))
            entry.with_name(f".{entry.name}.crc").unlink(missing_ok=True)
    report = replay(spark, history)
    assert report.divergences >= 1
    found = [(f.what, f.topic, f.partition, f.offset) for f in report.first]
    assert ("divergent", history.topic_events, victim["partition"], victim["offset"]) in found
