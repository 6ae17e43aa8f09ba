"""The parking lot's operations: list, show, redrive and discard parked command records (docs/operations/parking-lot.md).

Holds ``lot``. May import the wiring at the top of ``app``, ``app.signing``, ``app.validator.topic_io`` (plain
Kafka reads and writes), ``commands`` and ``schemas``; the CLI and the status page import it.
"""
