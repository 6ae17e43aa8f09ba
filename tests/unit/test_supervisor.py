"""The supervisor restarts children that exit, with growing backoff, and says so; tiny child processes, no Kafka."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.errors import SetupError
from app.run.restart import Backoff, read_components, write_status
from app.run.supervisor import Service, Supervisor

pytestmark = pytest.mark.unit

# A child that counts its runs in the file named by argv[1] and behaves by run: RUNS[n] = (seconds up, exit code);
# runs past the table repeat its last entry. Exit code None: sleep on, until stopped.
CHILD = """
import pathlib, subprocess, sys, time
runs, counter = eval(sys.argv[2]), pathlib.Path(sys.argv[1])
n = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(n))
up, code = runs[min(n, len(runs)) - 1]
print(f"run {n} up {up} then {code}", flush=True)
if len(sys.argv) > 3:  # leave a grandchild in our process group; its pid in <argv[3]>.<run>
    kid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    pathlib.Path(f"{sys.argv[3]}.tmp").write_text(str(kid.pid))
    pathlib.Path(f"{sys.argv[3]}.tmp").replace(f"{sys.argv[3]}.{n}")
time.sleep(up)
if code is None:
    time.sleep(120)
sys.exit(code)
"""

TINY = Backoff(initial=0.05, cap=0.2, reset_after=2.0)


def child(tmp: Path, name: str, runs: list[tuple[float, int | None]], grandchild: Path | None = None) -> Service:
    argv = [sys.executable, "-c", CHILD, str(tmp / f"{name}.count"), repr(runs)]
    return Service(name, argv + ([str(grandchild)] if grandchild else []), ready=lambda: True, timeout=10)


class Harness:
    def __init__(self, tmp: Path, backoff: Backoff = TINY, **kw: Any) -> None:
        self.messages: list[str] = []
        self.status_file = tmp / "status" / "components.json"
        self.sup = Supervisor(tmp / "run", tmp / "logs", status_file=self.status_file, backoff=backoff,
                              report=self.messages.append, **kw)

    def status(self) -> dict[str, dict[str, Any]]:
        return {c["name"]: c for c in json.loads(self.status_file.read_text())["components"]}

    def pump(self, until: Callable[[dict[str, dict[str, Any]]], bool], deadline: float = 30.0) -> dict[str, Any]:
        """Call ``check`` until the status file satisfies ``until``; generous deadline, no timing asserted."""
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            self.sup.check()
            if until(st := self.status()):
                return st
            time.sleep(0.02)
        raise AssertionError(f"not reached in {deadline}s: {self.status()}\n" + "\n".join(self.messages))

    def delays(self, name: str) -> list[float]:
        return [float(m) for m in re.findall(rf"^{name} \(pid \d+\) .*?restart #\d+ in ([\d.]+) s", "\n".join(self.messages),
                                             flags=re.M)]


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path)
    yield harness
    harness.sup.stop_all(timeout=5)


def gone(pid: int, deadline: float = 10.0) -> bool:
    """True once ``pid`` no longer runs (a zombie waiting for init to reap it counts as gone)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (ProcessLookupError, FileNotFoundError):
            return True
        time.sleep(0.05)
    return False


def test_backoff_doubles_to_the_cap() -> None:
    assert [Backoff(1, 60).delay(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert Backoff(1, 60).delay(10_000) == 60


def test_exiting_child_is_restarted_with_growing_backoff(h: Harness, tmp_path: Path) -> None:
    h.sup.start(child(tmp_path, "flaky", [(0.2, 3)]))
    first = int((tmp_path / "run" / "flaky.pid").read_text())
    st = h.pump(lambda s: s["flaky"]["restarts"] >= 4 and s["flaky"]["state"] == "running")["flaky"]
    assert h.delays("flaky")[:4] == [0.05, 0.1, 0.2, 0.2]  # doubling, capped
    assert st["last_exit_code"] == 3 and st["last_failure_at"]
    assert st["last_failure"] == "exit code 3; last log line: run 4 up 0.2 then 3"  # run 4's exit caused restart #4
    assert st["pid"] != first and int((tmp_path / "run" / "flaky.pid").read_text()) == st["pid"]
    assert "flaky restarted (pid" in "\n".join(h.messages)
    log = (tmp_path / "logs" / "flaky.log").read_text()
    assert "run 1 up" in log and "run 4 up" in log and "--- arbiter run: restart #3 of flaky" in log  # appended


def test_failure_names_the_error_code_the_child_printed_before_its_last_line(h: Harness, tmp_path: Path) -> None:
    svc = child(tmp_path, "leased", [(0.2, 2)])
    svc.argv[2] = CHILD.replace("time.sleep(up)", "time.sleep(up); print('arbiter: error [CHECKPOINT_LEASED]: held by "
                                "arbiter-validator@b:pid7', flush=True); print('INFO shutting down', flush=True)")
    h.sup.start(svc)
    st = h.pump(lambda s: s["leased"]["state"] == "restarting")["leased"]
    assert st["last_failure"] == "exit code 2; arbiter: error [CHECKPOINT_LEASED]: held by arbiter-validator@b:pid7"


def test_failure_names_the_signal_restart_and_log_tail(h: Harness, tmp_path: Path) -> None:
    svc = child(tmp_path, "killed", [(0.2, None)])
    svc.argv[2] = CHILD.replace("time.sleep(up)", "time.sleep(up); import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    h.sup.start(svc)
    st = h.pump(lambda s: s["killed"]["state"] == "restarting")["killed"]
    assert st["last_exit_code"] == -9 and st["pid"] is None
    assert st["last_failure"] == "killed by SIGKILL; last log line: run 1 up 0.2 then None"
    assert st["restarts"] == 0 and st["backoff_s"] == 0.05 and st["next_restart_at"]
    said = h.messages[0]
    assert said.startswith("killed (pid ") and "killed by SIGKILL" in said and "restart #1 in 0.05 s" in said, said
    assert str(tmp_path / "logs" / "killed.log") in said and "run 1 up 0.2 then None" in said, said


def test_child_that_stays_up_resets_the_backoff(h: Harness, tmp_path: Path) -> None:
    # runs 1-2 crash at once, run 3 stays up longer than reset_after (2 s), runs 4+ crash at once again
    h.sup.start(child(tmp_path, "settles", [(0.2, 3), (0.2, 3), (3.0, 4), (0.2, 5)]))
    h.pump(lambda s: s["settles"]["restarts"] >= 5, deadline=60)
    assert h.delays("settles")[:5] == [0.05, 0.1, 0.05, 0.1, 0.2]


def wait_for(path: Path, deadline: float = 30.0) -> int:
    end = time.monotonic() + deadline
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.02)
    return int(path.read_text())


def test_stop_all_stops_restarted_children_by_pid(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.sup.start(child(tmp_path, "svc", [(0.2, 3), (0.0, None)], grandchild=tmp_path / "grandchild"))
    h.sup.monitor(interval=0.05)  # the thread `arbiter run` uses; stop_all must end it before stopping the children
    deadline = time.monotonic() + 30
    while not (h.status_file.exists() and (st := h.status()["svc"])["restarts"] == 1 and st["state"] == "running"):
        assert time.monotonic() < deadline, h.messages
        time.sleep(0.05)
    pid = int((tmp_path / "run" / "svc.pid").read_text())
    assert pid == st["pid"]
    grandchild = wait_for(tmp_path / "grandchild.2")
    h.sup.stop_all(timeout=5)
    assert gone(pid) and gone(grandchild)  # the restarted child and what it started in its group
    assert not (tmp_path / "run" / "svc.pid").exists() and not h.status_file.exists()
    assert h.sup._watcher is None and h.sup.services == []


def test_orphans_of_a_crashed_child_are_killed_before_its_restart(h: Harness, tmp_path: Path) -> None:
    # e.g. the validator's Spark JVM: left running, it would hold the state locks the restarted validator needs
    h.sup.start(child(tmp_path, "driver", [(0.5, 1), (0.0, None)], grandchild=tmp_path / "grandchild"))
    orphan = wait_for(tmp_path / "grandchild.1")
    h.pump(lambda s: s["driver"]["last_exit_code"] == 1)
    assert gone(orphan)


def test_flapping_child_never_blocks_monitoring_of_others(tmp_path: Path) -> None:
    # flappy exits first and waits 10 min for its restart; the monitor thread must still see steady exit meanwhile
    h = Harness(tmp_path, backoff=Backoff(initial=600, cap=600, reset_after=600))
    try:
        h.sup.start(child(tmp_path, "flappy", [(0.1, 2)]))
        h.sup.start(child(tmp_path, "steady", [(1.5, 5), (0.0, None)]))
        h.sup.monitor(interval=0.05)
        deadline = time.monotonic() + 60
        while not ((st := h.status())["flappy"]["state"] == "restarting" and st["steady"]["state"] == "restarting"):
            assert time.monotonic() < deadline, f"{st}\n{h.messages}"
            time.sleep(0.05)
        assert st["steady"]["last_exit_code"] == 5 and st["flappy"]["last_exit_code"] == 2
    finally:
        h.sup.stop_all(timeout=5)

    h = Harness(tmp_path / "again")
    try:  # with a short backoff both are restarted, interleaved: flappy keeps flapping, steady comes back and stays
        h.sup.start(child(tmp_path / "again", "flappy", [(0.1, 2)]))
        h.sup.start(child(tmp_path / "again", "steady", [(1.0, 5), (0.0, None)]))
        st = h.pump(lambda s: s["steady"]["restarts"] == 1 and s["steady"]["state"] == "running"
                    and s["flappy"]["restarts"] >= 3)
        assert st["steady"]["last_exit_code"] == 5
        os.kill(st["steady"]["pid"], 0)  # running (raises if not)
    finally:
        h.sup.stop_all(timeout=5)


def test_gives_up_after_max_restarts(tmp_path: Path) -> None:
    h = Harness(tmp_path, max_restarts=2)
    try:
        h.sup.start(child(tmp_path, "doomed", [(0.1, 7)]))
        st = h.pump(lambda s: s["doomed"]["state"] == "failed")["doomed"]
        assert st["restarts"] == 2 and st["last_exit_code"] == 7 and "gave up after 2 restarts" in st["last_failure"]
        assert "not restarting it" in h.messages[-1]
    finally:
        h.sup.stop_all(timeout=5)


def test_start_up_still_fails_fast(h: Harness, tmp_path: Path) -> None:
    with pytest.raises(SetupError, match="exited with code 2"):
        h.sup.start(Service("broken", [sys.executable, "-c", "import sys; sys.exit(2)"], ready=lambda: False, timeout=30))
    assert h.status()["broken"]["state"] == "failed"
    h.sup.check()  # a start-up failure is not restarted
    assert h.status()["broken"]["restarts"] == 0 and h.messages == []
    with pytest.raises(SetupError, match="not healthy within"):
        h.sup.start(Service("slow", [sys.executable, "-c", "import time; time.sleep(60)"], ready=lambda: False, timeout=0.5))


def test_a_service_spawned_ahead_fails_the_start_of_another_when_it_exits(h: Harness, tmp_path: Path) -> None:
    """``arbiter run`` spawns the archive beside the validator and waits for it later: its exit meanwhile fails the
    start at once, naming it, as its own start would."""
    ahead = Service("ahead", [sys.executable, "-c", "import sys; sys.exit(3)"], ready=lambda: False, timeout=30)
    h.sup.spawn(ahead)
    with pytest.raises(SetupError, match="ahead exited with code 3"):
        h.sup.start(Service("waited", [sys.executable, "-c", "import time; time.sleep(60)"], ready=lambda: False,
                            timeout=30))
    assert h.status()["ahead"]["state"] == "failed" and h.status()["waited"]["state"] == "starting"
    ready = Service("ready", [sys.executable, "-c", "import time; time.sleep(60)"], ready=lambda: True, timeout=30)
    h.sup.spawn(ready)
    h.sup.wait_ready(ready, progress=h.messages.append)
    assert h.status()["ready"]["state"] == "running" and h.messages[-1].startswith("      ready ready (pid ")


def test_status_file_of_a_gone_supervisor_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "components.json"
    assert read_components(path) == []
    write_status(path, [])
    assert read_components(path) == [] and json.loads(path.read_text())["supervisor_pid"] == os.getpid()
    path.write_text(json.dumps({"supervisor_pid": 2**22 + 1, "components": [{"name": "api"}]}))  # beyond pid_max
    assert read_components(path) == []
    path.write_text(json.dumps({"supervisor_pid": os.getpid(), "components": [{"name": "api"}]}))
    assert read_components(path) == [{"name": "api"}]
