"""Serve one process's Prometheus registry on its own port (the validator's and each projection's ``/metrics``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)


class MetricsServer:
    """A started HTTP server thread serving ``registry``; ``close()`` stops it."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:  # noqa: ANN401 - wsgiref's server
        self.server, self.thread = server, thread

    @property
    def port(self) -> int:
        return int(self.server.server_port)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def serve_metrics(what: str, host: str, port: int, collectors: Iterable[Collector]) -> MetricsServer | None:
    """Serve ``collectors`` (read at each scrape) on ``host:port``; None when port is 0 or cannot be bound.

    A port in use is logged, not raised: metrics are for operators and never stop the stream.
    """
    if port == 0:
        return None
    registry = CollectorRegistry()
    for c in collectors:
        registry.register(c)
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as e:
        log.warning("%s metrics not served on %s:%d: %s", what, host, port, e)
        return None
    log.info("%s metrics on http://%s:%d/metrics", what, host, server.server_port)
    return MetricsServer(server, thread)
