"""librdkafka settings Arbiter's long-lived clients share (each still overridden by ``kafka_config``)."""

from __future__ import annotations

#: librdkafka backs off up to 10 s between connection attempts to a broker that refused them, so a client that
#: lived through a broker restart could wait that long after the broker is back before it produces or fetches
#: again. The Java client's default cap is 1 s; so is Arbiter's.
RECONNECT = {"reconnect.backoff.max.ms": 1000}
