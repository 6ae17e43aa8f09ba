"""``python -m bench.validator.floor_proc``: Spark's floor as a process, for ``bench.validator.batch_cost``.

The same session the validator builds (``app.spark_session`` with ``validator_codegen``'s options, settings from
the ``ARBITER_*`` environment), running a query that copies the commands topic to the events topic at the
validator's trigger interval, checkpointing where the validator would (so ``batch_cost`` reads its batches the
same way). ``FLOOR_PYTHON=1`` (the default) gives it the rocksdb query's shape, Kafka source → ``coalesce`` →
identity ``mapInArrow`` → Kafka sink; ``FLOOR_PYTHON=0`` is Kafka source → Kafka sink with no Python.
``FLOOR_ASYNC=1`` turns on Spark's ``asyncProgressTrackingEnabled`` (never on the validator: its shards commit
with Spark's commit log). What this process costs at a given rate is what any validator inside a Spark
micro-batch query pays before it decides anything.
"""

from __future__ import annotations

import os

from app.settings import Settings, checkpoint_uri
from app.spark_session import spark_session
from app.validator.codegen import codegen_conf
from bench.validator.latency import copy_query


def main() -> None:
    s = Settings()
    s = s.model_copy(update={"checkpoint_location": checkpoint_uri(s)})
    spark = spark_session(s, "arbiter-floor", extra_conf=codegen_conf(s))
    query = copy_query(spark, s, s.trigger_interval, os.environ.get("FLOOR_ASYNC", "0") == "1",
                       python=os.environ.get("FLOOR_PYTHON", "1") == "1")
    query.awaitTermination()


if __name__ == "__main__":
    main()
