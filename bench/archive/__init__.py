"""The archive's benchmark: its throughput beside Spark's own pass-through and the validator, and a rebuild from it."""
