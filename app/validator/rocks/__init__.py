"""The fast state backend: one rocksdict database per command-topic partition, held open by shard servers.

Holds: ``query`` (the streaming plan: Kafka source, ``mapInArrow`` shard step, Kafka sink), ``client`` and
``wire`` (a task's requests to a shard server over a Unix socket), ``server`` (the long-lived shard server),
``shard`` (one shard's decide loop and its cache of decoded states), ``checkpoint`` (changelogs and snapshots
at the checkpoint location), ``frames`` (64-bit framing and bounded chunks of outputs and changelogs),
``memory`` (block cache and memtable budgets), ``stats`` and ``metrics`` (the servers' figures), ``backend``
(the ``StateBackend`` the driver uses). May import the shared parts of ``app.validator`` and the wiring at the
top of ``app``; never ``app.validator.spark``.
"""
