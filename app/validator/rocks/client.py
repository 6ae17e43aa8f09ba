"""The task side of the shard servers: find (or start) the server of a shard's lane, send it rows, get sink rows.

Each host runs ``lanes`` shard servers per checkpoint; partition ``p`` always goes to lane ``p mod lanes``, so a
shard is held open by one process however Spark places its tasks. A task that holds several partitions
talks to their lanes in parallel (one thread per lane; the waits are socket reads, outside the GIL).

A request whose server sends nothing for ``shard_request_timeout_s`` fails the task with ``SHARD_SERVER_TIMEOUT``
(a stalled server keeps its shard locked; Spark's task retry or the validator's restart goes on from there).
A request is repeated when the server dies under it or cannot be reached (a new server is started): the
shard's batch-id memo makes a repeat re-emit the same records, so Spark's at-least-once task model and a
server crash together still give one decision per command.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from app.settings import Settings
from app.validator.lock import FileLock
from app.validator.rocks.shard import rocks_root
from app.validator.rocks.wire import (
    Reply,
    Request,
    ShardRequestFailed,
    ShardServerTimeout,
    ShardServerUnavailable,
    decode_reply,
    encode_request,
    recv_frame,
    send_frame,
    settings_bytes,
)

SPAWN_TIMEOUT_S = 60.0
_connections: dict[Path, socket.socket] = {}  # this process's open connection per server (a worker runs one task at a time)
_connections_guard = threading.Lock()


def lanes(settings: Settings) -> int:
    """Return how many shard servers serve this host: ``shard_servers``, else one per core up to one per partition."""
    return settings.shard_servers or max(1, min(settings.partitions, os.cpu_count() or 1))


def socket_dir() -> Path:
    """Return this user's private directory for the servers' sockets (short paths: Unix sockets allow ~100 bytes)."""
    base = Path(tempfile.gettempdir()) / f"arbiter-{os.getuid()}"
    base.mkdir(mode=0o700, exist_ok=True)
    st = os.stat(base)
    if st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077:
        raise ShardServerUnavailable(f"{base} must be a directory owned by uid {os.getuid()} with mode 0700")
    return base


def socket_path(settings: Settings, checkpoint: str, lane: int) -> Path:
    """Return the socket of ``lane``'s server for this checkpoint's local shards on this host."""
    digest = hashlib.sha256(str(rocks_root(settings, checkpoint)).encode()).hexdigest()[:20]
    return socket_dir() / f"shards-{digest}-{lane}.sock"


_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_executor_pid: int | None = None


def _lane_pool(size: int) -> ThreadPoolExecutor:
    """Return this process's lane threads (kept between tasks: starting and joining threads per task costs)."""
    global _pool, _pool_size
    if _pool is None or _pool_size < size:
        if _pool is not None:
            _pool.shutdown(wait=False)
        _pool, _pool_size = ThreadPoolExecutor(size, thread_name_prefix="shard-lane"), size
    return _pool


def executor_pid() -> int:
    """Return the executor JVM's pid (``find_executor_pid``), found once per process."""
    global _executor_pid
    if _executor_pid is None:
        _executor_pid = find_executor_pid()
    return _executor_pid


def find_executor_pid() -> int:
    """Return the pid of the executor JVM this Python worker serves (its nearest ``java`` ancestor), else our own.

    A shard server stays up while an executor it serves is alive: not tied to one Python worker, which Spark
    may retire, nor outliving the executor (a killed validator leaves no server holding its shards).
    """
    pid = os.getppid()
    for _ in range(6):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat_line = f.read()
        except OSError:
            break
        if stat_line[stat_line.index(b"(") + 1:stat_line.rindex(b")")] == b"java":
            return pid
        pid = int(stat_line[stat_line.rindex(b")") + 2:].split()[1])
        if pid <= 1:
            break
    return os.getpid()


class ShardClient:
    """Send one task's shard runs to their servers; one instance per task."""

    def __init__(self, settings: Settings, checkpoint: str, settings_wire: bytes | None = None) -> None:
        self.settings = settings
        self.checkpoint = checkpoint
        self.lanes = lanes(settings)
        self.settings_wire = settings_wire or settings_bytes(settings)
        self.executor = executor_pid()

    def run_all(self, batch_id: int, now_ms: int, runs: Sequence[tuple[int, bytes]]) -> list[Reply]:
        """Send ``(partition, rows as Arrow IPC)`` runs; return the replies in the same order."""
        requests = [Request(batch_id, now_ms, p, self.executor, self.settings_wire, self.checkpoint, rows)
                    for p, rows in runs]
        by_lane: dict[int, list[int]] = {}
        for i, r in enumerate(requests):
            by_lane.setdefault(r.partition % self.lanes, []).append(i)
        replies: list[Reply | None] = [None] * len(requests)

        def lane_work(lane: int, idx: list[int]) -> None:
            for i in idx:
                replies[i] = self._call(lane, requests[i])

        if len(by_lane) == 1:
            ((lane, idx),) = by_lane.items()
            lane_work(lane, idx)
        else:
            pool = _lane_pool(len(by_lane))
            for f in [pool.submit(lane_work, lane, idx) for lane, idx in by_lane.items()]:
                f.result()
        out: list[Reply] = []
        for r, reply in zip(requests, replies, strict=True):
            assert reply is not None
            if not reply.ok:
                raise ShardRequestFailed(f"shard {r.partition} batch {r.batch_id}: {reply.text}")
            out.append(reply)
        return out

    def _call(self, lane: int, request: Request) -> Reply:
        """Send one request and read its reply, reconnecting (and starting a server) until the deadline."""
        path = socket_path(self.settings, self.checkpoint, lane)
        frame = encode_request(request)
        deadline = time.monotonic() + SPAWN_TIMEOUT_S + self.settings.shard_lock_timeout_s
        delay = 0.05
        while True:
            try:
                sock = self._connection(path)
                send_frame(sock, frame)
                body = recv_frame(sock)
                if body is None:
                    raise ConnectionError("the shard server closed the connection")
                return decode_reply(body)
            except TimeoutError as e:
                # A stalled server still holds the shard's lock: a repeat would queue behind it. Fail the task.
                _drop(path)
                raise ShardServerTimeout(
                    f"the shard server on {path} sent nothing for {self.settings.shard_request_timeout_s:g} s "
                    f"(ARBITER_SHARD_REQUEST_TIMEOUT_S) on shard {request.partition} batch {request.batch_id}: "
                    "it is stalled; the task fails instead of waiting forever") from e
            except OSError as e:  # ConnectionError included: the server went away; the request is safe to repeat
                _drop(path)
                if time.monotonic() > deadline:
                    raise ShardServerUnavailable(f"no shard server answered on {path}: {e}") from e
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _connection(self, path: Path) -> socket.socket:
        with _connections_guard:
            sock = _connections.get(path)
        if sock is not None:
            return sock
        sock = _connect(path) or self._spawn(path)
        sock.settimeout(self.settings.shard_request_timeout_s)  # every send and read: a stalled server fails the task
        with _connections_guard:
            _connections[path] = sock
        return sock

    def _spawn(self, path: Path) -> socket.socket:
        """Start the lane's server (one spawner at a time per socket) and return a connection to it."""
        lock = FileLock(rocks_root(self.settings, self.checkpoint) / f"{path.stem}.spawn")  # kept with the shards
        lock.acquire(SPAWN_TIMEOUT_S)
        try:
            sock = _connect(path)  # another task may have started it while we waited
            if sock is not None:
                return sock
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
            proc = subprocess.Popen(  # noqa: S603 - our own module, by the running interpreter
                [sys.executable, "-m", "app.validator.rocks.server", "--socket", str(path),
                 "--executor-pid", str(self.executor), "--idle-s", str(self.settings.shard_server_idle_s)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env, close_fds=True)
            threading.Thread(target=proc.wait, name="shard-server-reaper", daemon=True).start()
            deadline = time.monotonic() + SPAWN_TIMEOUT_S
            while time.monotonic() < deadline:
                sock = _connect(path)
                if sock is not None:
                    return sock
                if proc.poll() is not None:
                    raise ShardServerUnavailable(f"the shard server for {path} exited with {proc.returncode} at start")
                time.sleep(0.02)
            raise ShardServerUnavailable(f"the shard server for {path} did not listen within {SPAWN_TIMEOUT_S} s")
        finally:
            lock.release()


def start_servers(settings: Settings, checkpoint: str) -> int:
    """Start this host's shard servers of ``checkpoint`` now (those not running yet); return how many lanes answer.

    For a rescale's hand-over (``app.rescale.handover``): a new generation's checkpoint has servers of its own,
    and a server started by its first batch's task costs that batch a Python start and the imports of the
    decision path. Started earlier, by the driver, a server watches the driver's process (``executor_pid``
    here) and, from its first request on, the executor's. It opens no shard: a shard is restored by its first
    request, from the seed the switch published.
    """
    client = ShardClient(settings, checkpoint)
    for lane in range(client.lanes):
        path = socket_path(settings, checkpoint, lane)
        client._connection(path)
        _drop(path)  # tasks connect on their own; the driver keeps no connection
    return client.lanes


def _connect(path: Path) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    return sock


def _drop(path: Path) -> None:
    with _connections_guard:
        sock = _connections.pop(path, None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.close()
