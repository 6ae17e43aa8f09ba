"""Rescale: change the commands topic's partition count with the validator's state intact (``arbiter rescale``).

``errors`` (the named refusals), ``split`` (the pure core: old shards' entries to N new shards by murmur2),
``generation`` (the durable record of which commands topic, partition count and checkpoint are current, and
the settings it gives), ``seed`` (old shards read from and new shards written to the checkpoint location),
``steps`` (the resumable step machine), ``handover`` (a running validator moved to the new generation at the
switch, in its process) and ``late`` (records written to a closed generation: rejected, parked).
It may import ``app.validator`` and the wiring at the top of ``app``; the validator imports ``generation``,
``handover`` and ``late`` from here, the API and the status page ``generation``, ``app.verify`` ``generation``, ``split`` and
``late``.
"""
