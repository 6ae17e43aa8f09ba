"""Records written to a closed generation's commands topic after a rescale switched away from it: rejected, parked.

After the switch nothing decides a closed generation's topic: the validator reads the current one. A producer that
writes to Kafka directly and was not pointed at the new topic would lose its records there. ``LateRecords`` (run
by ``arbiter validator`` beside its query) reads each closed generation's tail — every record past the offsets its
validator committed (``seed.committed_offsets``: where the rescale found it drained) — and turns each into a
``MISROUTED`` rejection on the rejections topic that names the topic to write to instead, with the record's whole
bytes parked (``app.validator.parking``): ``arbiter parked redrive <topic>[p]@o`` sends it to the current
generation, signed, once someone decided it should be.

A rejection rather than a forward: a forwarded command would be decided after commands its producer never saw
(its expected version likely stale) and the producer would never learn it writes to the wrong topic; a
rejection is an answer it can read, and nothing is decided behind anyone's back. ``MISROUTED`` rather than a new
code: it already says "this record is not where its object's commands are decided", every consumer knows it, and
a new code would be a new version of the rejection schema. Everything written derives from the record and the
generations alone (``late_outputs``), so a pass redone after a crash writes the same bytes (identical copies, as
a replayed micro-batch writes) and ``arbiter verify`` expects exactly these outputs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

from confluent_kafka import Consumer, TopicPartition

from app.errors import BrokerUnavailable
from app.limits import MESSAGE_CHARS, PARKED_MARGIN_BYTES, size_limits
from app.settings import Settings
from app.signing import checker_for, verdict
from app.validator.outputs import OutputRecord, outcome_record
from app.validator.parking import park
from commands import ReasonCode
from commands.rejection import clip, keep_original, reject_record

log = logging.getLogger("arbiter.rescale")

#: How often ``LateRecords`` looks at the closed generations' tails.
LATE_INTERVAL_S = 5.0
_PARKED = frozenset({ReasonCode.MISROUTED})


def late_outputs(key: bytes | None, value: bytes | None, signature: bytes | None, topic: str, partition: int,
                 offset: int, closed: Settings, successor: str) -> list[OutputRecord]:
    """Return what a record at ``topic[partition]@offset`` of a closed generation gives: its ``MISROUTED``
    rejection and its parked copy (``closed``: that generation's settings; ``successor``: the topic that replaced
    it)."""
    sizes = size_limits(closed.max_message_bytes)
    state, _ = verdict(checker_for(closed), key, value, signature)
    why = clip(f"{topic}[{partition}]@{offset} was written after a rescale closed this commands topic; nothing "
               f"decides it: write to {successor} (or a newer generation; `arbiter rescale --status`)", MESSAGE_CHARS)
    rejection = reject_record(keep_original(topic, partition, offset, key, value, sizes.keep_bytes),
                              ReasonCode.MISROUTED, why)
    rejection, copy = park(rejection, key, value, topic, partition, offset, signature, closed, state, _PARKED)
    return [outcome_record(rejection, closed, partition), *([copy] if copy is not None else [])]


def closed_offsets(checkpoint: str, topic: str) -> dict[int, int] | None:
    """Return, per partition of a closed generation's ``topic``, the first offset its validator did not decide;
    None when its checkpoint holds no offsets at all (gone, or never started): then nothing says where it ended,
    and treating the whole topic as late would reject commands that were decided."""
    from pyarrow import fs as pafs

    from app.rescale.seed import committed_offsets
    from app.validator.rocks.checkpoint import filesystem_of

    fs, root = filesystem_of(checkpoint)
    if fs.get_file_info(f"{root}/offsets").type == pafs.FileType.NotFound:
        return None
    return committed_offsets(checkpoint, topic)


class LateRecords:
    """Reject and park, every ``interval_s``, what arrived on the closed generations' topics since the last pass.

    Its progress is the consumer group ``arbiter-late-<commands topic>`` (committed after the outputs are
    flushed; a pass cut short is redone with the same bytes). The closed generations are read once: the validator
    that runs this starts again at every switch.
    """

    def __init__(self, settings: Settings, interval_s: float = LATE_INTERVAL_S) -> None:
        from app.rescale.generation import every, overlay

        gens = every(settings)
        self.settings = settings
        self.interval_s = interval_s
        self.closed = [(overlay(settings, g), g.checkpoint, nxt.topic) for g, nxt in zip(gens, gens[1:], strict=False)]
        self.handled = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="arbiter-late-records", daemon=True)

    def start(self) -> LateRecords:
        if self.closed:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while True:
            try:
                self.sweep()
            except Exception as e:  # noqa: BLE001 - logged; nothing was committed, so the next pass does it again
                log.warning("late records of closed generations not handled, tried again in %g s: %s",
                            self.interval_s, e)
            if self._stop.wait(self.interval_s):
                return

    def sweep(self) -> int:
        """Reject and park every record past each closed generation's end not handled yet; return how many."""
        done = 0
        c = Consumer({"bootstrap.servers": self.settings.kafka_bootstrap, "log_level": 0,
                      "group.id": f"arbiter-late-{self.settings.topic_commands}", "enable.auto.commit": False,
                      **self.settings.kafka_config})
        try:
            for closed, checkpoint, successor in self.closed:
                ends = closed_offsets(checkpoint, closed.topic_commands)
                if ends is None:
                    log.error("%s: its generation's checkpoint %s holds no offsets, so nothing says which of its "
                              "records were decided: its late records are not handled", closed.topic_commands,
                              checkpoint)
                    continue
                done += self._sweep_topic(c, closed, ends, successor)
        finally:
            c.close()
        self.handled += done
        return done

    def _sweep_topic(self, c: Consumer, closed: Settings, ends: Mapping[int, int], successor: str) -> int:
        from app.signing import SIGNATURE_HEADER
        from app.validator.topic_io import producer

        topic = closed.topic_commands
        parts = [TopicPartition(topic, p) for p in range(closed.partitions)]
        committed = {tp.partition: tp.offset for tp in c.committed(parts, timeout=10)}
        todo: dict[int, tuple[int, int]] = {}
        for p in range(closed.partitions):
            start = max(ends.get(p, 0), committed.get(p, -1))
            high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            if high > start:
                todo[p] = (start, high)
        if not todo:
            return 0
        handled = 0
        errors: list[str] = []
        prod = producer(self.settings, **{"message.max.bytes": str(closed.max_message_bytes + PARKED_MARGIN_BYTES)})

        def send(records: list[OutputRecord]) -> None:
            for t, k, v, at, headers in records:
                while True:
                    try:
                        prod.produce(t, key=k, value=v, partition=at, headers=list(headers),
                                     on_delivery=lambda err, _m: errors.append(str(err)) if err is not None else None)
                        break
                    except BufferError:  # the local queue is full: let deliveries drain, then retry this record
                        prod.poll(0.1)
                prod.poll(0)

        c.assign([TopicPartition(topic, p, start) for p, (start, _) in todo.items()])
        left, deadline = set(todo), time.monotonic() + 60
        while left:
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"reading the late records of {topic}: partitions {sorted(left)} not read")
            batch = c.consume(num_messages=1000, timeout=0.2)
            if not batch:  # a partition whose last offsets hold no record (a gap) is read once its position is there
                left -= {tp.partition for tp in c.position([TopicPartition(topic, p) for p in left])
                         if tp.offset >= todo[tp.partition][1]}
            for m in batch:
                if m.error() is not None:
                    raise BrokerUnavailable(f"reading the late records of {topic}: {m.error()}")
                p, o = m.partition(), m.offset()
                if m.topic() != topic or p not in left or o >= todo[p][1]:
                    continue
                # as the archive keeps it (and verify reads it): a header without a value is empty bytes
                signature = next((b"" if v is None else bytes(v) for k, v in m.headers() or ()
                                  if k == SIGNATURE_HEADER), None)
                send(late_outputs(m.key(), m.value(), signature, topic, p, o, closed, successor))
                handled += 1
                log.warning("%s[%d]@%d arrived after this generation was closed: rejected MISROUTED and parked",
                            topic, p, o)
                if o >= todo[p][1] - 1:
                    left.discard(p)
        if prod.flush(60) != 0 or errors:
            raise BrokerUnavailable(f"producing the late records' rejections failed: {errors[:3] or 'flush timed out'}")
        c.commit(offsets=[TopicPartition(topic, p, high) for p, (_, high) in todo.items()], asynchronous=False)
        return handled
