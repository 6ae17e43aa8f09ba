"""The validator: Spark Structured Streaming from the commands topic to the events and rejections topics.

The shared parts, used by both state backends: ``job`` (the driver's run and drain), ``backend`` (the one
interface a backend implements) and ``backends`` (the one place that chooses it), ``source`` and ``sink`` (the
Kafka ends of the query), ``decode``, ``fold`` and ``outputs`` (bytes to commands, ``decide`` over a run of
records, records out), ``owner``, ``lease`` and ``lock`` (one writer per checkpoint), ``layout`` (the
checkpoint's recorded shape), ``progress`` and ``metrics`` (what the driver publishes), ``murmur2`` (Kafka's
partitioner), ``pyworker`` and ``topic_io`` (Python-worker and small Kafka helpers). The backends: ``spark/``
(the reference ``transformWithState``) and ``rocks/`` (RocksDB shard servers). A backend may import the shared
parts and the wiring at the top of ``app``; the shared parts import a backend only through ``backends``.
"""
