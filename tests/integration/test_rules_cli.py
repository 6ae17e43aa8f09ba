"""``arbiter rules deploy|show`` and ``arbiter audit show arbiter:rules`` in subprocesses against the real broker:
every deploy lands in the audit trail with who deployed which version, its digest and where it took over."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app.settings import Settings
from commands.rules import canonical_rules, rules_digest
from tests.integration.validator_oracle import RULES_V1, RULES_V2, validator_env

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def arbiter(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``arbiter ARGS`` for ``settings`` in a child process."""
    env = {**validator_env(settings), "ARBITER_PROJECTION_METRICS_PORTS": "{}"}  # binds no fixed port
    return subprocess.run([sys.executable, "-m", "app.cli", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def deployed_offsets(out: str, topic: str) -> dict[int, int]:
    """The ``<topic>[p]@offset`` lines ``arbiter rules deploy`` prints."""
    return {int(p): int(o) for p, o in re.findall(rf"^  {re.escape(topic)}\[(\d+)\]@(\d+)$", out, re.MULTILINE)}


def test_rules_show_all_lists_every_version_and_the_audit_shows_who_deployed_which_and_where(
        settings: Settings, tmp_path: Path) -> None:
    s = settings
    none = arbiter(s, "rules", "show", "--all")
    assert none.returncode == 0 and none.stdout.strip() == "no rules deployed", none.stdout + none.stderr
    files = {}
    for name, text in (("v1", RULES_V1), ("v2", RULES_V2)):
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(text)
    runs = [arbiter(s, "rules", "deploy", str(files["v1"]), "--operator", "ops:alice"),
            arbiter(s, "rules", "deploy", str(files["v2"]), "--operator", "ops:bob"),
            arbiter(s, "rules", "deploy", str(files["v2"]), "--operator", "ops:carol")]  # finishes v2 again
    for r in runs:
        assert r.returncode == 0, r.stdout + r.stderr
    assert "already the newest version" in runs[2].stdout
    offsets = [deployed_offsets(r.stdout, s.topic_commands) for r in runs]
    assert all(set(o) == set(range(s.partitions)) for o in offsets), offsets
    digests = {1: rules_digest(canonical_rules(RULES_V1)), 2: rules_digest(canonical_rules(RULES_V2))}

    every = arbiter(s, "rules", "show", "--all")
    assert every.returncode == 0, every.stderr
    lines = [json.loads(line) for line in every.stdout.splitlines()]
    assert [(d["version"], d["deployed_by"], d["digest"]) for d in lines] == [
        (1, "ops:alice", digests[1]), (2, "ops:bob", digests[2])]  # carol's repeat is no new version
    assert all(d["deployed_at"] for d in lines)
    newest = arbiter(s, "rules", "show", "--document")
    shown = newest.stdout.splitlines()
    assert json.loads(shown[0])["version"] == 2 and shown[1] == canonical_rules(RULES_V2), newest.stdout

    project = arbiter(s, "project", "audit", "--until-caught-up")
    assert project.returncode == 0, project.stderr
    # a deploy is no broken record
    assert re.search(r"stopped: 5 records in \d+ batches, 0 undecodable", project.stderr), project.stderr
    audit = arbiter(s, "audit", "show", "arbiter:rules")
    assert audit.returncode == 0, audit.stdout + audit.stderr
    rows = audit.stdout.splitlines()
    deployed = [r for r in rows if " DEPLOYED " in r]
    placed = [r for r in rows if " PLACED " in r]
    assert len(rows) == len(deployed) + len(placed) == 5, audit.stdout
    for row, (version, who) in zip(deployed, [(1, "ops:alice"), (2, "ops:bob")], strict=True):
        assert f" v{version} " in row and f" deployed_by={who} " in row and digests[version] in row, row
    for row, (version, who), where in zip(placed, [(1, "ops:alice"), (2, "ops:bob"), (2, "ops:carol")], offsets,
                                          strict=True):
        assert f" v{version} " in row and f" deployed_by={who} " in row and digests[version] in row, row
        assert all(f"{s.topic_commands}[{p}]@{o}" in row for p, o in where.items()), (row, where)
    verify = arbiter(s, "audit", "verify")
    assert verify.returncode == 0 and "audit trail intact" in verify.stdout, verify.stdout
    assert f"{s.rules_topic}[0]: 5 records" in verify.stdout, verify.stdout
