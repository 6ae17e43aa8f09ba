"""``python -m bench.validator.idle "1 second" "100 milliseconds" "0 seconds"``: the validator's CPU when idle.

For each trigger interval, starts the (default, rocksdb) validator query on empty topics, lets it settle for
10 s, then reports the CPU the driver JVM and the broker used over 20 s, as a share of one core. The JVM
polls the broker's latest offsets once per trigger, so a shorter trigger costs CPU even with no traffic.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from app.settings import Settings
from app.spark_session import spark_session
from app.topics import ensure_topics
from app.validator.job import build_query
from bench.harness import throwaway_broker


def cpu_seconds(pid: int) -> float:
    """Return the user + system CPU seconds ``pid`` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.validator.idle")
    ap.add_argument("triggers", nargs="*", default=["1 second", "100 milliseconds", "0 seconds"])
    ap.add_argument("--seconds", type=float, default=20)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="arbiter-bench-idle-"))
    with throwaway_broker(work) as broker:
        spark = spark_session(Settings(kafka_bootstrap=broker.bootstrap, var_dir=work / "var"), app_name="arbiter-idle")
        kafka = broker.running_pid()
        children = subprocess.check_output(["pgrep", "-P", str(os.getpid()), "java"]).split()  # noqa: S603, S607
        jvm = next(int(p) for p in children if int(p) != kafka)  # the broker is a java child of ours too
        try:
            for trigger in args.triggers:
                tag = uuid.uuid4().hex[:6]
                s = Settings(kafka_bootstrap=broker.bootstrap, var_dir=work / "var", topic_commands=f"idle-c-{tag}",
                             topic_events=f"idle-e-{tag}", topic_rejections=f"idle-r-{tag}", trigger_interval=trigger,
                             checkpoint_location=str(work / f"checkpoint-{tag}"))
                ensure_topics(s)
                query = build_query(spark, s)
                try:
                    time.sleep(10)
                    j0, b0, t0 = cpu_seconds(jvm), cpu_seconds(kafka) if kafka else 0.0, time.monotonic()
                    time.sleep(args.seconds)
                    dt = time.monotonic() - t0
                    b1 = cpu_seconds(kafka) if kafka else 0.0
                    print(f"trigger {trigger}: idle driver JVM {(cpu_seconds(jvm) - j0) / dt * 100:.1f} % of a core, "
                          f"broker {(b1 - b0) / dt * 100:.1f} %", flush=True)
                finally:
                    query.stop()
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
