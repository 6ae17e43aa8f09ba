"""Rescale: change the commands topic's partition count with the validator's state intact (``arbiter rescale``).

``errors`` (the named refusals), ``split`` (the pure core: old shards' entries to N new shards by murmur2),
``generation`` (the durable record of which commands topic, partition count and checkpoint are current, and
the settings it gives), ``seed`` (old shards read from and new shards written to the checkpoint location) and
``steps`` (the resumable step machine). It may import ``app.validator`` and the wiring at the top of ``app``;
the validator and the API import only ``generation`` from here, to read the current generation at start.
"""
