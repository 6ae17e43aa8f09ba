"""``python -m bench.validator.header_exprs``: the JVM CPU of the source's header columns, lambda beside array_position.

A cached batch DataFrame of ``--rows`` records with the API's headers (a signature and a traceparent) is read with
each way of writing the four header columns (``app.validator.source.header_columns``), under interpreted and
generated row projections, into Spark's ``noop`` sink; rounds alternate, after one warm-up pass of each. No Kafka:
this is the expressions' own cost, the part ``bench.validator.jvm_half``'s ``headers`` shapes add to the floor.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
from pathlib import Path

from app.settings import Settings
from app.spark_session import spark_session
from app.validator.codegen import FACTORY_MODE, WHOLE_STAGE
from app.validator.source import HEADER_COLUMNS, header_columns
from bench.peer.cpu import by_component, delta

LAMBDA = [f"try_element_at(filter(headers, h -> h.key = '{name}'), 1).value AS {c}" for c, name in HEADER_COLUMNS]
MODES = {"interpreted": {FACTORY_MODE: "NO_CODEGEN", WHOLE_STAGE: "false"},
         "compiled": {FACTORY_MODE: "FALLBACK", WHOLE_STAGE: "true"}}


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.validator.header_exprs", description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    spark = spark_session(Settings(var_dir=Path(tempfile.mkdtemp(prefix="arbiter-bench-hdr-"))),
                          app_name="arbiter-bench-header-exprs")
    try:
        df = spark.range(args.rows).selectExpr(
            "array(named_struct('key', 'arbiter-signature', 'value', CAST(uuid() AS BINARY)), "
            "named_struct('key', 'traceparent', 'value', CAST(CAST(id AS STRING) AS BINARY))) AS headers").cache()
        df.count()
        variants = [(e, m) for e in ("lambda", "array_position") for m in MODES]
        for r in range(args.rounds + 1):
            for exprs, mode in variants:
                for k, v in MODES[mode].items():
                    spark.conf.set(k, v)
                cols = LAMBDA if exprs == "lambda" else header_columns()
                before = by_component()
                df.selectExpr(*cols).write.format("noop").mode("overwrite").save()
                jvm = delta(before, by_component()).get("spark_jvm", 0.0)
                if r:
                    print(f"round {r} {exprs:15s} {mode:12s} JVM CPU s per 1M rows {jvm * 1e6 / args.rows:6.2f}  "
                          f"load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
