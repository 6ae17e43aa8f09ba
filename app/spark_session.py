"""Build the SparkSession every Arbiter job uses: the Kafka connector on the classpath, the project's Python."""

from __future__ import annotations

import os
import sys

from app.local.jars import spark_connector_jars
from app.settings import Settings, checkpoint_uri

CHECKPOINT_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
# Spark's default (FileContext-based) renames each offset- and commit-log file through Hadoop's FileContext,
# which without Hadoop's native library runs `readlink` in a child process for every rename: with the `chmod`
# Hadoop also forks, ~100 ms of every micro-batch on this machine (strace of the driver JVM; docs/benchmarks.md).
# The FileSystem-based manager, also Spark's, renames with java.io (atomic on a local disk and on HDFS).
FILESYSTEM_CHECKPOINTS = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"


def spark_session(settings: Settings, app_name: str = "arbiter", extra_conf: dict[str, str] | None = None):  # noqa: ANN201
    """Create (or return the running) SparkSession for ``settings.spark_master``.

    ``PYSPARK_PYTHON`` is set to this interpreter: Python workers must import ``commands`` and ``schemas``.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    jars = ",".join(str(j) for j in spark_connector_jars(settings))
    # C1 only (the default): with C2 the JVM kept 0.1-0.3 core of compiler threads busy for minutes re-compiling
    # Spark's planner and task code at the top tier, and measured no faster (docs/benchmarks.md, fifth pass).
    # Executors of a cluster get the same flag below.
    jit = " -XX:TieredStopAtLevel=1" if settings.spark_jit == "c1" else ""
    builder = (
        SparkSession.builder.appName(app_name)
        .master(settings.spark_master)
        .config("spark.jars", jars)
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(settings.partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(settings.path(settings.var_dir) / "spark-warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={settings.path(settings.var_dir)}{jit}")
        .config("spark.python.worker.reuse", "true")
    )
    conf = {**settings.spark_conf, **(extra_conf or {})}
    if jit:
        conf.setdefault("spark.executor.extraJavaOptions", jit.strip())
    if CHECKPOINT_FILE_MANAGER not in conf and _is_local(checkpoint_uri(settings)):
        conf[CHECKPOINT_FILE_MANAGER] = FILESYSTEM_CHECKPOINTS
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _is_local(uri: str) -> bool:
    """Whether ``uri`` is a local path (no scheme, or ``file:``): the FileSystem-based checkpoint manager is for those."""
    return "://" not in uri or uri.startswith("file:")
