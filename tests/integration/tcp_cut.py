"""A loopback TCP relay whose open connections a test can cut, to force real disconnects of long-lived streams."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Relay:
    """Accepts on a free loopback port and relays each connection to ``target``; ``cut()`` closes every open one."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.accepted = 0
        self.answered = bytearray()  # every byte the target sent back, over every connection: what to wait on
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:  # the server is gone (the test is ending): drop the client
                client.close()
                continue
            with self._lock:
                self._open |= {client, upstream}
                self.accepted += 1
            for a, b, keep in ((client, upstream, None), (upstream, client, self.answered)):
                threading.Thread(target=self._pump, args=(a, b, keep), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, keep: bytearray | None) -> None:
        try:
            while data := src.recv(65536):
                if keep is not None:
                    keep += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            self._close(src, dst)

    def _close(self, *socks: socket.socket) -> None:
        for s in socks:
            with self._lock:
                self._open.discard(s)
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def cut(self) -> None:
        """Close every connection open through the relay now (as a network failure would)."""
        with self._lock:
            socks = list(self._open)
        self._close(*socks)

    def close(self) -> None:
        self.listener.close()
        self.cut()


@contextmanager
def relay_to(url: str) -> Iterator[tuple[str, Relay]]:
    """Yield the relay's URL for ``url`` (``http://127.0.0.1:<port>``) and the relay; close it at the end."""
    relay = Relay(int(url.rsplit(":", 1)[1]))
    try:
        yield f"http://127.0.0.1:{relay.port}", relay
    finally:
        relay.close()


def group_coordinator_ready(bootstrap: str, timeout: float = 120.0) -> None:
    """Wait until the broker answers a consumer-group request (its group coordinator loaded).

    The validator's lease check gives a fresh broker 15 s for that; on a loaded machine a session broker's first
    group request can take longer, and the test would fail on start-up, not on what it tests.
    """
    import time

    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.describe_consumer_groups(["arbiter-warm-up"], request_timeout=10)["arbiter-warm-up"].result(timeout=15)
            return
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
