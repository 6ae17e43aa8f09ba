"""The fast state backend: one rocksdict database per command-topic partition, inside the Spark job."""

from app.validator.rocks.job import build_query

__all__ = ["build_query"]
