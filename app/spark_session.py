"""Build the SparkSession every Arbiter job uses: the Kafka connector on the classpath, the project's Python."""

from __future__ import annotations

import os
import sys

from app.jars import spark_connector_jars
from app.settings import Settings


def spark_session(settings: Settings, app_name: str = "arbiter", extra_conf: dict[str, str] | None = None):  # noqa: ANN201
    """Create (or return the running) SparkSession for ``settings.spark_master``.

    ``PYSPARK_PYTHON`` is set to this interpreter: Python workers must import ``commands`` and ``schemas``.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    jars = ",".join(str(j) for j in spark_connector_jars(settings))
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
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={settings.path(settings.var_dir)}")
        .config("spark.python.worker.reuse", "true")
    )
    for key, value in {**settings.spark_conf, **(extra_conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
