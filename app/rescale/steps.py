"""The resumable step machine of ``arbiter rescale --partitions N``: pause, drain, topic, split, switch, done.

Each step is idempotent and its name is recorded at the checkpoint location before it starts
(``<checkpoint>/generations/plan.json``), so a rescale killed at any point is continued by running the same
command again: it redoes the step it was in and goes on. The old generation is never changed, only paused,
so until ``switch`` nothing a validator or the API uses has moved.

- pause: the generations topic gets the current generation marked paused; the API answers writes with 503
  and ``Retry-After`` until the switch (``app.rescale.generation.GenerationWatch``).
- drain: the validator must have committed every command of the old topic (``RESCALE_NOT_DRAINED`` names
  the lag otherwise; ``--wait`` waits for it). Per-object order follows: every command before the cut-over is
  decided before any after it, which goes to the new topic.
- topic: ``<commands>.g<k>`` is created with N partitions; the output topics keep their count.
- split: the old shards are restored from the checkpoint and split or merged by murmur2(object id) into N
  seeds of the new checkpoint (``app.rescale.split``); a seed already complete is kept.
- switch: the new generation is appended, unpaused: writes go to the new topic, and a running validator hands
  itself over to it (``app.rescale.handover``), reading it from its seeded checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from pyarrow import fs as pafs

from app.rescale.errors import BadRequest, InProgress, NotDrained
from app.rescale.generation import WATCH_INTERVAL_S, Generation, current, overlay, publish, successor
from app.rescale.seed import check_drained, remove_scratch, scratch_dir, split_into_seeds
from app.settings import Settings, checkpoint_uri
from app.validator.rocks.checkpoint import filesystem_of

log = logging.getLogger("arbiter.rescale")

STEPS = ("pause", "drain", "topic", "split", "switch", "done")
#: Fault injection for the kill -9 tests: the process SIGKILLs itself at the named point: "<step>" after a step,
#: or one inside a step: "pause:published" (paused, before the wait for the APIs), "drain:lagging" (the validator
#: is behind), "split:<n>" (after the n-th new seed) and "switch:late" (a write reached the old topic after the
#: drain: the plan is back at the drain, the stale seeds not yet deleted). Read from the environment of the
#: ``arbiter rescale`` process only.
KILL_AT = "ARBITER_RESCALE_KILL_AT"


@dataclass(frozen=True)
class Plan:
    """A rescale under way: from which generation, to how many partitions, and the step it reached."""

    source: Generation
    target: Generation
    step: str

    def dumps(self) -> bytes:
        return json.dumps({"source": asdict(self.source), "target": asdict(self.target), "step": self.step},
                          sort_keys=True, indent=1).encode()

    @classmethod
    def parse(cls, raw: bytes) -> Plan:
        body = json.loads(raw)
        return cls(Generation.parse(json.dumps(body["source"]).encode()),
                   Generation.parse(json.dumps(body["target"]).encode()), str(body["step"]))


def plan_path(settings: Settings) -> str:
    return f"{checkpoint_uri(settings).rstrip('/')}/generations/plan.json"


def read_plan(settings: Settings) -> Plan | None:
    fs, path = filesystem_of(plan_path(settings))
    try:
        with fs.open_input_stream(path) as f:
            return Plan.parse(f.read())
    except FileNotFoundError:
        return None


def write_plan(settings: Settings, plan: Plan) -> None:
    """Record ``plan`` (write then rename on a local directory, so a kill leaves the old or the new one)."""
    fs, path = filesystem_of(plan_path(settings))
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with fs.open_output_stream(tmp) as f:
        f.write(plan.dumps())
    fs.move(tmp, path)


def _discard_seeds(checkpoint: str) -> None:
    """Delete the shards (seeds) of a generation's checkpoint that never ran."""
    fs, root = filesystem_of(checkpoint)
    if fs.get_file_info(f"{root}/rocks").type == pafs.FileType.Directory:
        fs.delete_dir(f"{root}/rocks")


def _kill_point(name: str) -> None:
    if os.environ.get(KILL_AT) == name:
        log.warning("%s=%s: killing this process with SIGKILL", KILL_AT, name)
        os.kill(os.getpid(), signal.SIGKILL)


def rescale(settings: Settings, partitions: int, *, by: str = "arbiter rescale", wait_s: float = 0.0,
            report: Callable[[str], None] = print) -> Generation:
    """Take the pipeline of ``settings`` (unrescaled, as configured) to ``partitions``; return the new generation.

    Continues a rescale to the same count that was interrupted; refuses one to another count
    (``RESCALE_IN_PROGRESS``), a backend whose state it cannot split (``RESCALE_REFUSED``) and a pipeline
    not drained within ``wait_s`` (``RESCALE_NOT_DRAINED``).
    """
    if settings.state_backend != "rocksdb":
        raise BadRequest("rescale splits the rocksdb backend's shards; the spark backend's state lives in Spark's "
                         "state store, which cannot be repartitioned (ARBITER_STATE_BACKEND=rocksdb)")
    if settings.output_partitions is not None:  # names would be derived from a generation's, not the configured
        raise BadRequest("rescale takes the configured settings, not a generation's (generation_settings)")
    if not 1 <= partitions <= 10_000:  # Settings.partitions' bounds
        raise BadRequest(f"--partitions must be between 1 and 10000, not {partitions}")
    plan = read_plan(settings)
    if plan is not None and plan.step != "done":
        if plan.target.partitions != partitions:
            raise InProgress(f"a rescale from {plan.source.partitions} to {plan.target.partitions} partitions is at "
                             f"step {plan.step!r}: run `arbiter rescale --partitions {plan.target.partitions}` to "
                             "finish it first")
        report(f"continuing the rescale to {partitions} partitions at step {plan.step!r}")
    else:
        now = current(settings)
        if now.partitions == partitions:
            report(f"generation {now.number} ({now.topic}) already has {partitions} partitions: nothing to do")
            return now
        plan = Plan(now, successor(settings, now, partitions), "pause")
        write_plan(settings, plan)
    for step in STEPS[STEPS.index(plan.step):]:
        if step != plan.step:
            plan = replace(plan, step=step)
            write_plan(settings, plan)
        if step == "done":
            break
        t0 = time.monotonic()
        _STEP[step](settings, plan, by, wait_s)
        report(f"rescale {plan.source.partitions} -> {plan.target.partitions}: {step} done "
               f"({time.monotonic() - t0:.1f} s)")
        _kill_point(step)
    return plan.target


def _pause(settings: Settings, plan: Plan, by: str, wait_s: float) -> None:
    now = current(settings)
    if now.number == plan.source.number and not now.paused:
        publish(settings, replace(plan.source, paused=True), by)
    _kill_point("pause:published")
    # Every running API sees the pause within WATCH_INTERVAL_S; a write it produced just before is on the old
    # topic by the drain, or caught by the switch's check of the old topic's end offsets.
    time.sleep(2 * WATCH_INTERVAL_S)


def _drain(settings: Settings, plan: Plan, by: str, wait_s: float) -> None:
    # Seeds present now were split before a write reached the old topic (the switch found it, and was killed
    # before deleting them): they lack that write, and the split keeps a complete seed, so they go first.
    _discard_seeds(plan.target.checkpoint)
    src = plan.source
    deadline = time.monotonic() + wait_s
    while True:
        try:
            check_drained(settings, src.checkpoint, src.topic, src.partitions)
            return
        except NotDrained:
            _kill_point("drain:lagging")
            if time.monotonic() >= deadline:
                raise
            time.sleep(1.0)


def _topic(settings: Settings, plan: Plan, by: str, wait_s: float) -> None:
    from app.topics import ensure_topics

    ensure_topics(overlay(settings, plan.target), [plan.target.topic], plan.target.partitions)


def _split(settings: Settings, plan: Plan, by: str, wait_s: float) -> None:
    remove_scratch(settings)  # one rescale runs at a time: what is there, a kill -9 left
    scratch = scratch_dir(settings)
    try:
        routed, written = split_into_seeds(
            overlay(settings, plan.source), plan.source.checkpoint, plan.source.partitions, plan.target.checkpoint,
            plan.target.partitions, scratch, after_each=lambda p: _kill_point(f"split:{p + 1}"))
        log.info("split %d object(s) into %d seeds (%d written now)", routed, plan.target.partitions, written)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _switch(settings: Settings, plan: Plan, by: str, wait_s: float) -> None:
    if current(settings).number >= plan.target.number:
        return  # switched before a kill
    src = plan.source
    try:  # nothing reached the old topic after the drain (a write in flight at the pause, a direct producer)
        check_drained(settings, src.checkpoint, src.topic, src.partitions)
    except NotDrained as e:
        # Back to the drain first: were the seeds deleted first, a kill in between would leave the plan at the
        # switch, which a re-run would publish without them once the validator drained the late write.
        write_plan(settings, replace(plan, step="drain"))
        _kill_point("switch:late")
        _discard_seeds(plan.target.checkpoint)  # the seeds are stale: split again
        raise NotDrained(f"commands reached {src.topic} after the drain; the split is discarded. {e}") from e
    publish(settings, plan.target, by)


_STEP = {"pause": _pause, "drain": _drain, "topic": _topic, "split": _split, "switch": _switch}
