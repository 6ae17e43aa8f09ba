"""The client example that the broker-restart test runs (clients/python/examples/shared_counters.py), against a
scripted server: its summary reads back what both racers wrote, and a racer that fails fails the program."""

from __future__ import annotations

import importlib.util
import json
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from arbiter_client import Accepted, BrokerUnavailable, Document, HistoryEvent

pytestmark = pytest.mark.unit

PROGRAM = Path(__file__).resolve().parents[2] / "clients" / "python" / "examples" / "shared_counters.py"


class Server:
    """The truth (every version of each document) and a read model that serves a caller's own writes at once and
    another caller's only after a few reads: what read-your-writes promises, and no more."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.versions: dict[str, list[dict[str, Any]]] = {}
        self.projected: dict[str, int] = {}  # versions the read model serves to anyone
        self.writes: dict[tuple[str, str], int] = {}  # (who, object) -> increments made

    def write(self, who: str, oid: str, doc: dict[str, Any]) -> int:
        with self.lock:
            self.versions.setdefault(oid, []).append(doc)
            self.lock.notify_all()
            return len(self.versions[oid])


class FakeClient:
    """The few calls the program makes, on ``Server``; bob's increment of an object waits for alice's of that round,
    so bob writes each object last."""

    def __init__(self, server: Server, who: str, fail: bool = False) -> None:
        self.server, self.who, self.fail, self.mine = server, who, fail, {}

    def create(self, document: dict[str, Any], oid: str) -> Accepted:
        return self._accepted(oid, self.server.write(self.who, oid, document))

    def grant(self, oid: str, principal: str, role: str) -> Accepted:
        return self._accepted(oid, self.server.write(self.who, oid, self.server.versions[oid][-1]))

    def update_with_retry(self, oid: str, fn: Any, attempts: int) -> Accepted:  # noqa: ANN401
        s = self.server
        if self.fail:
            raise BrokerUnavailable("the broker did not acknowledge", code="BROKER_UNAVAILABLE", status=503)
        with s.lock:
            key = (self.who, oid)
            if self.who == "bob":
                s.lock.wait_for(lambda: s.writes.get(("alice", oid), 0) > s.writes.get(key, 0), timeout=10)
            s.writes[key] = s.writes.get(key, 0) + 1
            return self._accepted(oid, s.write(self.who, oid, fn(json.loads(json.dumps(s.versions[oid][-1])))))

    def _accepted(self, oid: str, version: int) -> Accepted:
        self.mine[oid] = version
        return Accepted(f"k{version}", oid, version, "UPDATED", None)

    def get(self, oid: str) -> Document:
        s = self.server
        with s.lock:
            served = max(s.projected.get(oid, 0), self.mine.get(oid, 0))
            s.projected[oid] = min(s.projected.get(oid, 0) + 1, len(s.versions[oid]))  # catching up, slowly
            return Document(oid, served, s.versions[oid][served - 1])

    def history(self, oid: str, page_size: int) -> list[HistoryEvent]:
        n = max(self.server.projected.get(oid, 0), self.mine.get(oid, 0))
        return [HistoryEvent("UPDATED", v, self.who, "", f"k{v}") for v in range(1, n + 1)]

    def close(self) -> None:
        pass


def program(server: Server, failing: str = "") -> ModuleType:
    spec = importlib.util.spec_from_file_location("shared_counters", PROGRAM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.Client = lambda url, token, **_: FakeClient(server, token, fail=token == failing)  # type: ignore[attr-defined]
    return module


def run(module: ModuleType, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict[str, Any]]]:
    code = module.main(["http://arbiter.test", "alice", "bob", "--objects", "2", "--rounds", "3", "--tag", "t"])
    return code, [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_the_summary_reads_back_the_other_racers_last_write(capsys: pytest.CaptureFixture[str]) -> None:
    """alice reads back last, but bob wrote last: her read-your-writes read alone would miss his last increment."""
    code, lines = run(program(Server()), capsys)
    done = lines[-1]
    assert code == 0 and done["phase"] == "done", lines
    assert done["counters"] == {"t-0": 6, "t-1": 6} and done["versions"] == {"t-0": 8, "t-1": 8}, done
    assert done["history"] == {oid: list(range(1, 9)) for oid in ("t-0", "t-1")}, done
    assert sorted(done["logs"]["t-0"]) == sorted(f"{w}{r}" for w in "ab" for r in range(3)), done


def test_a_racer_that_fails_fails_the_program(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = run(program(Server(), failing="bob"), capsys)
    assert code == 1 and lines[-1]["phase"] == "failed", lines
    assert [e.split(":")[:2] for e in lines[-1]["errors"]] == [["b", " BrokerUnavailable"]], lines
