"""The suite's own guarantees, checked by running pytest on this file in a child process.

A caller's ``ARBITER_*`` variables do not reach the tests' settings, and a skipped test fails the run unless
``tests/conftest.py`` allows it. The inner tests do their real work only when ``HYGIENE_INNER`` is set.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.settings import Settings

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
INNER = os.environ.get("HYGIENE_INNER", "")


#: The child runs without schemathesis' pytest plugin (loaded through its entry point, it was a third of each child's
#: 3.5 CPU s): no test the children collect uses it, and the hooks checked here are tests/conftest.py's.
CHILD = ("-q", "-p", "no:cacheprovider", "-p", "no:schemathesis")


def _inner(test: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", f"{__file__}::{test}", *CHILD, *args],
                          cwd=ROOT, env={**os.environ, "HYGIENE_INNER": test, **env}, text=True, capture_output=True,
                          timeout=120)


def test_inner_settings_are_the_defaults() -> None:
    if INNER == "test_inner_settings_are_the_defaults":
        assert not [n for n in os.environ if n.startswith("ARBITER_")]
        assert Settings().partitions == 8 and Settings().state_backend == "rocksdb"


def test_inner_skip() -> None:
    if INNER == "test_inner_skip":
        pytest.skip("a test that cannot run here")


def test_caller_arbiter_variables_do_not_reach_the_suite() -> None:
    run = _inner("test_inner_settings_are_the_defaults", ARBITER_PARTITIONS="3", ARBITER_STATE_BACKEND="spark")
    assert run.returncode == 0, run.stdout + run.stderr


def test_a_skip_not_on_the_allow_list_fails_the_run() -> None:
    run = _inner("test_inner_skip")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "counted as a failure" in run.stdout


def test_the_e2e_step_fails_when_its_checks_did_not_run_and_pass() -> None:
    # CI's e2e step runs with --require-e2e: a run in which the compose demo was not collected, deselected or
    # skipped fails, whatever else passed
    run = _inner("test_inner_settings_are_the_defaults", "--require-e2e")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "END-TO-END CHECK DID NOT RUN AND PASS (--require-e2e): tests/integration/test_compose_demo.py::" in run.stdout
    assert _inner("test_inner_settings_are_the_defaults").returncode == 0


def test_the_suite_deselects_the_e2e_checks() -> None:
    # ./dev test (pytest without -m) never starts the compose demo; its own step (-m e2e, --require-e2e) fails
    # loudly if it selects nothing, so one collection here is enough
    run = subprocess.run([sys.executable, "-m", "pytest", "tests/integration/test_compose_demo.py", *CHILD,
                          "--collect-only"], cwd=ROOT, text=True, capture_output=True, timeout=120)
    assert "1 deselected" in run.stdout and "test_the_compose_demo" not in run.stdout, run.stdout + run.stderr


def test_integration_tests_use_no_stand_ins() -> None:
    """Integration tests run the real validator and read model: a fake read model, or outcomes written onto the
    topics by the test, belong to unit tests (issue 14)."""
    for path in sorted((ROOT / "tests" / "integration").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        for stand_in in ("FakeReadModel", "fake_read_model", "read_model=", "encode_outcome(", "produce_outcome"):
            assert stand_in not in text, f"{path.relative_to(ROOT)} uses {stand_in!r}"
