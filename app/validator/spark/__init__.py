"""The reference state backend: Spark's ``transformWithState`` with its RocksDB state store provider.

Holds: ``query`` (the streaming plan: Kafka source, group by object id, ``ValidatorProcessor``, Kafka sink),
``processor`` (the ``StatefulProcessor`` folding each object's commands with the shared ``app.validator.fold``),
``backend`` (the ``StateBackend`` the driver uses). May import the shared parts of ``app.validator`` and the
wiring at the top of ``app``; never ``app.validator.rocks``.
"""
