"""The validator session's row-projection mode: interpreted projections instead of Java generated per task.

Every task of a micro-batch builds its row projections afresh (two per Kafka partition reader, one per project, the
``mapInArrow`` output and the Kafka writer), and with Spark's default each one generates, canonicalises and looks up
Java source before its first row; the driver also generates whole-stage code for each batch's plan. At a few
records per batch that generation, not the rows, was the JVM's largest cost (docs/benchmarks.md, "The validator's
JVM per micro-batch"); interpreted projections skip it.
"""

from __future__ import annotations

from app.settings import Settings

FACTORY_MODE = "spark.sql.codegen.factoryMode"
WHOLE_STAGE = "spark.sql.codegen.wholeStage"


def codegen_conf(settings: Settings) -> dict[str, str]:
    """Return the session options ``validator_codegen`` asks for; a key the user set in ``spark_conf`` is left out."""
    if settings.validator_codegen == "compiled":
        return {}
    conf = {FACTORY_MODE: "NO_CODEGEN", WHOLE_STAGE: "false"}
    return {k: v for k, v in conf.items() if k not in settings.spark_conf}
