"""``arbiter load``: drive a mixed workload through the API or straight onto the commands topic, then summarise.

Both modes are open-loop: command i is due at start + i/rate whatever became of the earlier ones, and latency is
timed from that due time. Through the API each request is its own task (``app.load.openloop``), so a slow answer never
delays the next send and the summary reports the rate sent and the rate completed apart.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from collections import defaultdict

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

from app.api.callers.auth import USER_SCOPES
from app.api.callers.identity import local_issuer
from app.errors import BrokerUnavailable, SetupError
from app.load.openloop import Answer, Sample, Summary, drive, summarize
from app.load.workload import (
    Http1Pool,
    Tally,
    Workload,
    api_headers,
    api_request,
    outcomes,
    paced,
    progress_line,
    schedule_count,
    send_http,
    summary,
)
from app.settings import Settings, get_settings
from app.signing import signer_for
from schemas import codec
from schemas.wire import DecodeError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("load", help="drive a realistic mixed workload open-loop and report outcomes and latency")
    p.add_argument("--rate", type=float, default=200.0, help="commands per second, on a fixed schedule")
    p.add_argument("--objects", type=int, default=1000, help="distinct object ids")
    p.add_argument("--duration", type=float, default=10.0, help="seconds of schedule (rate x duration commands)")
    p.add_argument("--via", choices=["api", "topic"], default="topic", help="through the REST API or onto the topic")
    p.add_argument("--api", default=None, help="API base URL (default http://<api_host>:<api_port>)")
    p.add_argument("--wait", type=float, default=10.0, help="topic mode: seconds to wait for the last decisions")
    p.add_argument("--prefer-wait", type=float, default=10.0,
                   help="API mode: Prefer: wait=<seconds> on every request; 0 sends none (202 once produced)")
    p.add_argument("--connections", type=int, default=512, help="API mode: most concurrent connections")
    p.add_argument("--timeout", type=float, default=None, help="API mode: seconds per request (default prefer-wait + 20)")
    p.add_argument("--garbage", type=float, default=0.01, help="share of raw garbage records (topic mode)")
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(handler=_load)


def _load(args: argparse.Namespace) -> int:
    s = get_settings()
    work = Workload(args.objects, seed=args.seed, garbage_ratio=args.garbage if args.via == "topic" else 0.0)
    tally = Tally()
    if args.via == "topic":
        _drive_topic(s, args, work, tally)
    else:
        _drive_api(s, args, work, tally)
    return 0


class OutcomeWatcher(threading.Thread):
    """Reads events and rejections from their current ends and times each decision against its send time."""

    def __init__(self, s: Settings, tally: Tally) -> None:
        super().__init__(daemon=True)
        self.tally = tally
        self.sent_at: dict[str, list[float]] = defaultdict(list)
        self.lock = threading.Lock()
        self.stop_flag = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": s.kafka_bootstrap, "group.id": "arbiter-load",
                                  "enable.auto.commit": False, "log_level": 0})
        md = self.consumer.list_topics(timeout=10)
        tps = [TopicPartition(t, p, OFFSET_END) for t in (s.topic_events, s.topic_rejections)
               for p in (md.topics[t].partitions if t in md.topics else {})]
        self.consumer.assign(tps)
        for tp in tps:  # resolve OFFSET_END now, so nothing decided after this point is missed
            self.consumer.seek(TopicPartition(tp.topic, tp.partition, self.consumer.get_watermark_offsets(tp)[1]))

    def sent(self, command_id: str, due: float) -> None:
        """Note that ``command_id`` was due at ``due`` (time.monotonic()); its decision is timed from then."""
        with self.lock:
            self.sent_at[command_id].append(due)

    def run(self) -> None:
        while not self.stop_flag.is_set():
            for msg in self.consumer.consume(num_messages=500, timeout=0.2):
                if msg.error() is not None or msg.value() is None:
                    continue
                try:
                    outcome = codec.decode_outcome(msg.value())
                except DecodeError:
                    continue
                latency = None
                if outcome.command_id is not None:
                    with self.lock:
                        times = self.sent_at.get(outcome.command_id)
                        if times:
                            latency = (time.monotonic() - times.pop(0)) * 1000
                self.tally.record(outcome, latency)
        self.consumer.close()


def _finish(args: argparse.Namespace, tally: Tally, expected: int, sent: int, start: float) -> None:
    deadline = time.monotonic() + args.wait
    while tally.decided() < expected and time.monotonic() < deadline:
        sys.stderr.write(progress_line(time.monotonic() - start, args.duration, sent, tally))
        time.sleep(0.3)
    sys.stderr.write(progress_line(time.monotonic() - start, args.duration, sent, tally) + "\n")


def _drive_topic(s: Settings, args: argparse.Namespace, work: Workload, tally: Tally) -> None:
    from app.rescale.generation import current_generation_settings

    s = current_generation_settings(s)  # the current generation's commands topic (app.rescale)
    watcher = OutcomeWatcher(s, tally)
    watcher.start()
    producer = Producer({"bootstrap.servers": s.kafka_bootstrap, "partitioner": "murmur2_random", "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5, **s.kafka_config})
    failed: list[str] = []

    def on_delivery(err, _msg) -> None:  # noqa: ANN001
        if err is not None:
            failed.append(str(err))

    signer = signer_for(s)
    start = time.monotonic()
    sent = 0
    last_draw = 0.0
    for _, due in paced(args.rate, args.duration):
        cmd, garbage = work.next()
        if cmd is None:
            producer.produce(s.topic_commands, key=b"garbage", value=garbage, on_delivery=on_delivery)
        else:
            watcher.sent(cmd.command_id, due)
            key, value = cmd.object_id.encode(), codec.encode_command(cmd)
            producer.produce(s.topic_commands, key=key, value=value, on_delivery=on_delivery,
                             headers=signer.headers(key, value))  # signed as the API signs
        sent += 1
        producer.poll(0)
        if time.monotonic() - last_draw > 0.3:
            sys.stderr.write(progress_line(time.monotonic() - start, args.duration, sent, tally))
            last_draw = time.monotonic()
    if producer.flush(30) or failed:
        raise BrokerUnavailable(f"{len(failed)} commands were not acknowledged by the broker: {failed[:3]}")
    elapsed = time.monotonic() - start
    _finish(args, tally, sent, sent, start)
    watcher.stop_flag.set()
    watcher.join(5)
    summary(tally, sent, elapsed, args.rate, None if tally.last_at is None else tally.last_at - start)


def _drive_api(s: Settings, args: argparse.Namespace, work: Workload, tally: Tally) -> None:
    """Send the workload to the API open-loop (request i at start + i/rate), then summarise what came back."""
    count = schedule_count(args.rate, args.duration)
    prefer = args.prefer_wait or None
    timeout = args.timeout or (prefer or 0) + 20.0
    result = asyncio.run(_api_run(s, args, work, tally, prefer, timeout, count))
    api_summary(result, tally, prefer, timeout)


async def _api_run(s: Settings, args: argparse.Namespace, work: Workload, tally: Tally, prefer: float | None,
                   timeout: float, count: int) -> Summary:
    base = args.api or f"http://{s.api_host}:{s.api_port}"
    issuer = local_issuer(s)
    tokens: dict[str, str] = {}
    sent = [0]

    async def send(_i: int) -> Answer:
        cmd, _garbage = work.next()  # no garbage in API mode; called in index order, before the first await
        assert cmd is not None
        if cmd.principal not in tokens:
            tokens[cmd.principal] = issuer.issue(cmd.principal, 3600, scopes=USER_SCOPES)
        method, path, body = api_request(cmd)
        headers = api_headers(tokens[cmd.principal], method, cmd.command_id, cmd.expected_version, prefer)
        sent[0] += 1
        return await send_http(client, method, path, headers, body, timeout, key=cmd.command_id)

    def done(sample: Sample) -> None:
        outcome = sample.answer.outcome
        if outcome is not None and outcome != "queued":
            tally.count(None if outcome == "accepted" else outcome, sample.latency * 1000)

    try:
        client = Http1Pool(base, args.connections)
    except ValueError as e:
        raise SetupError(f"--api: {e}") from e
    t0 = time.monotonic()
    progress = asyncio.ensure_future(_progress(t0, args.duration, sent, tally))
    try:
        samples = await drive(send, args.rate, range(count), t0=t0, on_done=done)
    finally:
        progress.cancel()
        await client.close()
    sys.stderr.write(progress_line(time.monotonic() - t0, args.duration, sent[0], tally) + "\n")
    return summarize(samples, args.rate, t0)


async def _progress(t0: float, duration: float, sent: list[int], tally: Tally) -> None:
    while True:
        sys.stderr.write(progress_line(time.monotonic() - t0, duration, sent[0], tally))
        await asyncio.sleep(0.3)


def api_summary(r: Summary, tally: Tally, prefer: float | None, timeout: float) -> None:
    """Print the API mode's summary: sent/s and completed/s apart, outcomes, errors, latency from the schedule."""
    print()
    print(f"sent {r.requests} requests ({r.sent_per_s:.0f}/s; offered {r.offered:g}/s); completed {r.ok} without error "
          f"in {r.span_s:.1f}s ({r.completed_per_s:.0f}/s); {sum(r.errors.values())} errors")
    outcomes(tally)
    if prefer:
        print(f"  undecided within Prefer: wait={prefer:g} (202)  {r.outcomes.get('queued', 0)}")
    else:
        print(f"  queued (202, no Prefer: wait; decisions not followed)  {r.outcomes.get('queued', 0)}")
    for kind, n in sorted(r.errors.items()):
        print(f"  error {kind:<30} {n}")
    lat = r.latency
    print(f"latency from scheduled send to answer: p50 {lat['p50'] * 1000:.0f} ms, p90 {lat['p90'] * 1000:.0f} ms, "
          f"p99 {lat['p99'] * 1000:.0f} ms, max {lat['max'] * 1000:.0f} ms ({r.requests} requests; timeout {timeout:g}s)")
    print(f"client: sends left up to {r.send_lag['max'] * 1000:.0f} ms late (p99 {r.send_lag['p99'] * 1000:.0f} ms); "
          f"at most {r.peak_in_flight} requests in flight")
