"""A program using only arbiter_client: two users share documents and race increments on them, all writes through
the client's retries (503 while the broker is away, timeouts, If-Match conflicts), then read everything back.

    python shared_counters.py <api-url> <alice-token> <bob-token> [--objects N] [--rounds R] [--tag T]

Prints one JSON line per phase on stdout ({"phase": ...}) and, at the end, a summary: per object the counter read
back (once the read model serves the last version either user wrote) and its history's versions, and how many
retries the client made and why. A racer that fails ends the program with a "failed" phase naming why, exit 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import Counter
from typing import Any

from arbiter_client import ArbiterError, Client, RetryPolicy


def say(**fields: Any) -> None:  # noqa: ANN401
    print(json.dumps(fields), flush=True)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("alice")
    p.add_argument("bob")
    p.add_argument("--objects", type=int, default=6)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--tag", default="s")
    args = p.parse_args(argv)
    retries: Counter[str] = Counter()
    lock = threading.Lock()

    def count(error: ArbiterError, _wait: float) -> None:
        with lock:
            retries[error.code] += 1

    # patient: a broker restart takes tens of seconds, and the validator must take its lease back after it
    policy = RetryPolicy(attempts=200, max_backoff_s=2.0)
    alice = Client(args.url, args.alice, retry=policy, wait_s=20, follow_timeout_s=240, on_retry=count)
    bob = Client(args.url, args.bob, retry=policy, wait_s=20, follow_timeout_s=240, on_retry=count)
    ids = [f"{args.tag}-{i}" for i in range(args.objects)]
    for oid in ids:
        alice.create({"n": 0, "log": []}, oid)
        alice.grant(oid, "bob", "editor")
    say(phase="created", objects=len(ids))

    last: dict[str, int] = {}  # per object, the highest version either racer was accepted at
    failures: list[str] = []

    def racer(client: Client, who: str) -> None:
        try:
            for r in range(args.rounds):
                for oid in ids:
                    outcome = client.update_with_retry(
                        oid, lambda d, r=r: {**d, "n": d["n"] + 1, "log": [*d["log"], f"{who}{r}"]}, attempts=50)
                    with lock:
                        last[oid] = max(last.get(oid, 0), outcome.version)
                say(phase="round", who=who, round=r)
        except Exception as e:  # noqa: BLE001 - any failure of a racer is the program's failure, reported below
            with lock:
                failures.append(f"{who}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=racer, args=(c, w)) for c, w in ((alice, "a"), (bob, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        say(phase="failed", errors=failures, retries=dict(retries))
        return 1

    def read_back(oid: str) -> Any:  # noqa: ANN401 - a Document
        # alice's reads wait for her own writes only: bob's last one may still be on its way to the read model
        deadline = time.monotonic() + 240
        while (document := alice.get(oid)).version < last.get(oid, 0) and time.monotonic() < deadline:
            time.sleep(0.1)
        return document

    final = {oid: read_back(oid) for oid in ids}
    history = {oid: [e.version for e in alice.history(oid, page_size=7)] for oid in ids}
    say(phase="done", counters={oid: d.document["n"] for oid, d in final.items()},
        logs={oid: d.document["log"] for oid, d in final.items()}, versions={oid: d.version for oid, d in final.items()},
        history=history, retries=dict(retries))
    alice.close()
    bob.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
