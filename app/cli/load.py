"""``arbiter load``: drive a mixed workload through the API or straight onto the commands topic, then summarise."""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

from app.api.auth import issue_token
from app.errors import BrokerUnavailable
from app.load import Tally, Workload, paced, progress_line, summary
from app.settings import Settings, get_settings
from commands import Command, CreateObject, DeleteObject, GrantEditor, RevokeEditor, UpdateObject
from schemas import codec
from schemas.wire import DecodeError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("load", help="drive a realistic mixed workload and report outcomes and latency")
    p.add_argument("--rate", type=float, default=200.0, help="commands per second")
    p.add_argument("--objects", type=int, default=1000, help="distinct object ids")
    p.add_argument("--duration", type=float, default=10.0, help="seconds to send for")
    p.add_argument("--via", choices=["api", "topic"], default="topic", help="through the REST API or onto the topic")
    p.add_argument("--api", default=None, help="API base URL (default http://<api_host>:<api_port>)")
    p.add_argument("--wait", type=float, default=10.0, help="seconds to wait for the last decisions")
    p.add_argument("--garbage", type=float, default=0.01, help="share of raw garbage records (topic mode)")
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(handler=_load)


def _load(args: argparse.Namespace) -> int:
    s = get_settings()
    work = Workload(args.objects, seed=args.seed, garbage_ratio=args.garbage if args.via == "topic" else 0.0)
    tally = Tally()
    drive = _drive_topic if args.via == "topic" else _drive_api
    sent, elapsed = drive(s, args, work, tally)
    summary(tally, sent, elapsed)
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

    def sent(self, command_id: str) -> None:
        with self.lock:
            self.sent_at[command_id].append(time.monotonic())

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


def _drive_topic(s: Settings, args: argparse.Namespace, work: Workload, tally: Tally) -> tuple[int, float]:
    watcher = OutcomeWatcher(s, tally)
    watcher.start()
    producer = Producer({"bootstrap.servers": s.kafka_bootstrap, "partitioner": "murmur2_random", "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5, **s.kafka_config})
    failed: list[str] = []

    def on_delivery(err, _msg) -> None:  # noqa: ANN001
        if err is not None:
            failed.append(str(err))

    start = time.monotonic()
    sent = 0
    last_draw = 0.0
    for _ in paced(args.rate, args.duration):
        cmd, garbage = work.next()
        if cmd is None:
            producer.produce(s.topic_commands, key=b"garbage", value=garbage, on_delivery=on_delivery)
        else:
            watcher.sent(cmd.command_id)
            producer.produce(s.topic_commands, key=cmd.object_id.encode(), value=codec.encode_command(cmd),
                             on_delivery=on_delivery)
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
    return sent, elapsed


def _request(cmd: Command) -> tuple[str, str, dict[str, object] | None]:
    oid = cmd.object_id
    if isinstance(cmd, CreateObject):
        return "POST", "/objects", {"id": oid, "document": json.loads(cmd.document)}
    if isinstance(cmd, UpdateObject):
        return "PATCH", f"/objects/{oid}", json.loads(cmd.patch)
    if isinstance(cmd, DeleteObject):
        return "DELETE", f"/objects/{oid}", None
    if isinstance(cmd, GrantEditor | RevokeEditor):
        return ("PUT" if isinstance(cmd, GrantEditor) else "DELETE"), f"/objects/{oid}/editors/{cmd.editor}", None
    raise TypeError(cmd)


def _drive_api(s: Settings, args: argparse.Namespace, work: Workload, tally: Tally) -> tuple[int, float]:
    import httpx

    base = args.api or f"http://{s.api_host}:{s.api_port}"
    secret = s.auth_secret.get_secret_value()
    tokens: dict[str, str] = {}
    client = httpx.Client(base_url=base, timeout=30.0, limits=httpx.Limits(max_connections=64))
    counts = {"sent": 0}

    def send(cmd: Command) -> None:
        if cmd.principal not in tokens:
            tokens[cmd.principal] = issue_token(secret, cmd.principal, 3600)
        method, path, body = _request(cmd)
        headers = {"Authorization": f"Bearer {tokens[cmd.principal]}", "Idempotency-Key": cmd.command_id,
                   "Prefer": "wait=10"}
        if cmd.expected_version is not None:
            headers["If-Match"] = f'"{cmd.expected_version}"'
        if body is not None:
            headers["Content-Type"] = "application/merge-patch+json" if method == "PATCH" else "application/json"
        t0 = time.monotonic()
        r = client.request(method, path, headers=headers, content=None if body is None else json.dumps(body))
        latency = (time.monotonic() - t0) * 1000
        if r.status_code in (200, 201, 204):
            tally.count(None, latency)
        elif r.status_code == 202:
            pass  # queued but undecided within the wait: counted as sent, not decided
        else:
            try:
                reason = r.json().get("reason") or r.json().get("code") or f"HTTP_{r.status_code}"
            except ValueError:
                reason = f"HTTP_{r.status_code}"
            tally.count(str(reason), latency)

    start = time.monotonic()
    last_draw = 0.0
    with ThreadPoolExecutor(max_workers=32) as pool:
        futures = []
        for _ in paced(args.rate, args.duration):
            cmd, _garbage = work.next()
            if cmd is not None:
                futures.append(pool.submit(send, cmd))
                counts["sent"] += 1
            if time.monotonic() - last_draw > 0.3:
                sys.stderr.write(progress_line(time.monotonic() - start, args.duration, counts["sent"], tally))
                last_draw = time.monotonic()
        elapsed = time.monotonic() - start  # the sending phase; the answers still in flight are awaited below
        for f in futures:
            f.result()
    sys.stderr.write(progress_line(time.monotonic() - start, args.duration, counts["sent"], tally) + "\n")
    client.close()
    return counts["sent"], elapsed

