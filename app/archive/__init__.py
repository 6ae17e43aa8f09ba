"""The Parquet archive of the topics: the Spark query that writes it, its decoded columns, compaction.

Holds ``columns`` (decode a record's value into the columns a query needs), ``query`` (the streaming query: Kafka
to Spark's file sink, exactly once), ``compact`` (rewrite a finished date partition into fewer files). Reading the
archive without Spark is ``projections.archived``. May import the wiring at the top of ``app``, ``projections``,
``commands`` and ``schemas``.
"""
