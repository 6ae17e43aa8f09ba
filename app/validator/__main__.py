"""``python -m app.validator`` (or ``spark-submit app/validator/__main__.py``): run the validator with ARBITER_* settings."""

from __future__ import annotations

import argparse
import logging
import sys

from app.settings import get_settings
from app.spark_session import spark_session
from app.validator.job import drain, run


def main(argv: list[str] | None = None) -> int:
    """Run the validator; ``--available-now`` drains what is on the topic, then exits."""
    parser = argparse.ArgumentParser(prog="python -m app.validator")
    parser.add_argument("--available-now", action="store_true", help="process every available command, then exit")
    parser.add_argument("--timeout", type=float, default=3600, help="with --available-now: give up after this many s")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = get_settings()
    spark = spark_session(settings, app_name="arbiter-validator")
    try:
        if args.available_now:
            drain(spark, settings, timeout=args.timeout)
        else:
            run(spark, settings)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
