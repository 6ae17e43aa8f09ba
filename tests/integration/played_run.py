"""``arbiter run`` as a user starts it, for the tests that claim it: started, read until it serves, settled, stopped.

One played run serves two modules (the package fixture ``played_run``): ``test_pipeline_e2e`` checks its scenario,
status page and loads while it serves, settles it and stops it cleanly; ``test_verify_run`` replays the history it
left. Each start costs a validator's and an archive's Spark start plus the scenario (a minute and more on 2 cores).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from app.local.kafka_broker import free_port
from app.rescale.seed import lag
from app.settings import Settings, checkpoint_uri
from projections import archived
from tests.integration.test_archive import _watermarks as watermarks
from tests.integration.test_backup_drill import _caught_up as caught_up

#: The archive's trigger in these runs (the default, a minute, would archive nothing while the test looks)
ARCHIVE_EVERY = "2 seconds"


def run_env(settings: Settings, api_port: int) -> dict[str, str]:
    """The environment of an ``arbiter`` command on ``settings``' broker and topics."""
    return {**os.environ,
            "ARBITER_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
            "ARBITER_KAFKA_PORT": str(free_port()),  # not the session broker's: `run` must not manage it
            "ARBITER_TOPIC_COMMANDS": settings.topic_commands,
            "ARBITER_TOPIC_EVENTS": settings.topic_events,
            "ARBITER_TOPIC_REJECTIONS": settings.topic_rejections,
            "ARBITER_PARTITIONS": str(settings.partitions),
            "ARBITER_VAR_DIR": str(settings.path(settings.var_dir)),
            "ARBITER_API_PORT": str(api_port),
            "ARBITER_TRIGGER_INTERVAL": "200 milliseconds",
            "PYTHONUNBUFFERED": "1"}


class Run:
    """A running ``arbiter run``: its process, the lines it printed up to "Serving", its API and metrics ports."""

    def __init__(self, proc: subprocess.Popen[str], lines: list[str], api: str, settings: Settings,
                 metrics: dict[str, int]) -> None:
        self.proc, self.lines, self.api, self.settings, self.metrics = proc, lines, api, settings, metrics
        self.var = settings.path(settings.var_dir)
        self.claimed = False  # a test took it while it serves
        self.settled = False  # stopped after ``settle``: its history is whole in the topics, projections and archive

    def serving(self) -> bool:
        return self.proc.poll() is None and any(line.startswith("Serving") for line in self.lines)


def start_run(settings: Settings, timeout: float = 480) -> Run:
    """Start ``arbiter run`` (its scenario, then serving) on ``settings``; return once it serves (or has exited)."""
    port = free_port()
    metrics = {"validator": free_port(), "db": free_port(), "audit": free_port(), "log": free_port()}
    env = {**run_env(settings, port), "ARBITER_VALIDATOR_METRICS_PORT": str(metrics["validator"]),
           "ARBITER_ARCHIVE_TRIGGER_INTERVAL": ARCHIVE_EVERY,
           "ARBITER_PROJECTION_METRICS_PORTS": json.dumps({k: v for k, v in metrics.items() if k != "validator"})}
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "run"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    lines: list[str] = []
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("Serving") or time.monotonic() > deadline:
            break
    return Run(proc, lines, f"http://127.0.0.1:{port}", settings, metrics)


def stop_run(run: Run, timeout: float = 120) -> None:
    """Ctrl-C, as a user would (SIGKILL to its process group if it outlives ``timeout``)."""
    if run.proc.poll() is None:
        os.killpg(run.proc.pid, signal.SIGINT)
        try:
            run.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(run.proc.pid, signal.SIGKILL)
            run.proc.wait()


def settle(settings: Settings, timeout: float = 180.0) -> None:
    """Wait until a running pipeline has decided every command, its projections have read every decision (erase
    takes liveness from the audit trail) and its archive (every ``ARCHIVE_EVERY``) has committed every record: what
    a replay of its history needs, with nothing left to do after a stop."""
    deadline = time.monotonic() + timeout
    while behind := lag(settings, checkpoint_uri(settings), settings.topic_commands, settings.partitions):
        assert time.monotonic() < deadline, f"the validator has not decided {behind}"
        time.sleep(0.2)
    caught_up(settings, timeout=max(1.0, deadline - time.monotonic()))
    root = archived.local_root(settings.archive_location)
    topics = (settings.topic_commands, settings.topic_events, settings.topic_rejections, settings.parked_topic)
    while True:
        want = {t: {p: hi for p, (_, hi) in watermarks(settings, t).items() if hi} for t in topics}
        have = {t: archived.ends(*archived.read_topic(root, t)[:2], t) for t in topics}
        if have == want:
            return
        assert time.monotonic() < deadline, f"the archive is behind the topics: {have} != {want}"
        time.sleep(0.5)
