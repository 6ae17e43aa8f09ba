"""The shard server: a long-lived process per host and lane that keeps its shards open between micro-batches.

Why: opening a shard per task per micro-batch cost more than deciding it (RocksDB open with its recovery
flush, a new MANIFEST and OPTIONS file and their fsyncs, then a close: ~6 ms of CPU and ~50 ms of wall time
per shard, eight shards a batch; docs/benchmarks.md, fourth pass). Spark hands a task to whichever Python
worker is idle, so a worker cannot keep its shards; this process can. Spark's tasks send it their rows as
Arrow (``wire``) and yield the sink rows it sends back.

Nothing about exactly-once changes: each request runs ``Shard.run`` on the shard, which writes the states,
the batch id, the output records and the changelog in one atomic write, uploads the changelog, and on a re-run
of the same batch re-emits the stored records. A request is therefore safe to repeat, which is what the task
does when the server dies under it. Before each request the held shard is checked against the disk and the
checkpoint location: if its directory was removed, or another process (another host's server, after Spark
moved the shard) has written a newer batch to the checkpoint, the shard is closed and opened again, which
restores it as ``open_shard`` always has.

Lifetime: started by the first task that needs it (``client``), it serves until every executor JVM that sent it a
request is gone, or it has had no request for ``shard_server_idle_s``, or it gets SIGTERM, SIGINT or SIGHUP (the
last is what PySpark's daemon sends its process group when the executor stops); then it stops accepting,
finishes the requests under way, closes its shards, removes its socket file and exits. It inherits the Python
worker's process group (PySpark's daemon leads its own) and the validator's session; a validator killed
outright loses its JVM, and the server notices that within a second.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from app.errors import ArbiterError
from app.run.pidfile import process_start, still_running
from app.settings import Settings
from app.validator.lock import FileLock
from app.validator.pyworker import freeze_imports_once
from app.validator.rocks.checkpoint import ShardStore
from app.validator.rocks.shard import Shard, open_shard, shard_dir
from app.validator.rocks.wire import (
    Reply,
    Request,
    decode_request,
    encode_reply,
    input_records,
    output_ipc,
    read_ipc,
    recv_frame,
    send_frame,
    settings_from,
)

log = logging.getLogger("arbiter.validator.shards")


@dataclass
class HeldShard:
    """An open shard, the lock file that makes this process its only writer on this host, and what identifies
    them on disk (a removed directory or lock file means the shard must be opened again)."""

    shard: Shard
    lock: FileLock
    path: Path
    dir_id: tuple[int, int]

    def still_on_disk(self) -> bool:
        try:
            st = os.stat(self.path)
            lock_st = os.stat(self.lock.path)
        except OSError:
            return False
        fd = self.lock.fd
        return (st.st_dev, st.st_ino) == self.dir_id and fd is not None and os.fstat(fd).st_ino == lock_st.st_ino

    def close(self) -> None:
        """Close the database and release the lock; a database whose files were removed may fail to flush (logged)."""
        try:
            self.shard.close()
        except Exception as e:  # noqa: BLE001 - the shard is dropped either way; its next use reopens or restores it
            log.warning("closing shard %s: %s", self.path, e)
        finally:
            self.lock.release()


@dataclass
class ShardServer:
    """Serve shard requests on the Unix socket ``path`` until no executor needs this process any more."""

    path: Path
    idle_s: float
    clients: dict[int, str | None] = field(default_factory=dict)  # executor pid -> its start time
    held: dict[tuple[str, int], HeldShard] = field(default_factory=dict)
    _guards: dict[tuple[str, int], threading.Lock] = field(default_factory=dict)
    _settings: dict[bytes, Settings] = field(default_factory=dict)
    _state: threading.Condition = field(default_factory=threading.Condition)
    _in_flight: int = 0
    _last_request: float = field(default_factory=time.monotonic)
    _closing: bool = False
    _totals: dict[tuple[str, int], Counter[str]] = field(default_factory=dict)  # counters of closed shard handles
    _stats_written: float = 0.0
    _stats_path: Path | None = None
    _stats_lock: threading.Lock = field(default_factory=threading.Lock)
    _opens: deque[dict[str, object]] = field(default_factory=lambda: deque(maxlen=OPENS_KEPT))
    hold_after: tuple[int, Path] | None = field(default_factory=lambda: hold_after_write(os.environ))

    def add_client(self, pid: int) -> None:
        with self._state:
            if pid not in self.clients:
                self.clients[pid] = process_start(pid)

    # --- serving ------------------------------------------------------------------------------
    def serve(self) -> None:
        """Bind, accept until closing, then drain and close every shard."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # a dead server's socket file; the spawner holds the spawn lock
        listener.bind(str(self.path))
        os.chmod(self.path, 0o600)
        bound = os.stat(self.path).st_ino
        listener.listen(64)
        listener.settimeout(0.5)
        threading.Thread(target=self._watch, name="watch", daemon=True).start()
        log.info("shard server %d serving on %s", os.getpid(), self.path)
        try:
            while not self._closing:
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                conn.settimeout(None)
                threading.Thread(target=self._connection, args=(conn,), name="conn", daemon=True).start()
        finally:
            listener.close()
            with contextlib.suppress(OSError):
                if os.stat(self.path).st_ino == bound:
                    self.path.unlink()
            with self._state:
                self._state.wait_for(lambda: self._in_flight == 0, timeout=600)
            self._write_stats(force=True)
            for key in list(self.held):
                self._drop(key)
            log.info("shard server %d stopped", os.getpid())

    def close(self) -> None:
        self._closing = True

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    frame = recv_frame(conn)
                except (ConnectionError, OSError):
                    return
                if frame is None:
                    return
                with self._state:
                    if self._closing:
                        return  # the client sees the connection close and asks again (a new server)
                    self._in_flight += 1
                    if self._in_flight == 1:
                        gc.disable()  # a batch makes many small acyclic objects: collect between requests instead
                try:
                    reply = self.handle(decode_request(frame))
                except ArbiterError as e:
                    reply = Reply(False, False, f"{e.code}: {e}", b"")
                except Exception as e:  # never a silent dropped connection: the task fails with the reason
                    log.exception("request failed")
                    reply = Reply(False, False, f"{ShardServerInternal.code}: {type(e).__name__}: {e}", b"")
                finally:
                    with self._state:
                        self._in_flight -= 1
                        self._last_request = time.monotonic()
                        if self._in_flight == 0:
                            freeze_imports_once()  # after the first request every import has happened
                            gc.enable()
                        self._state.notify_all()
                try:
                    send_frame(conn, encode_reply(reply))
                except OSError:
                    return

    def handle(self, request: Request) -> Reply:
        """Decide (or re-emit) one shard's share of one batch."""
        self.add_client(request.executor_pid)
        settings = self._settings.get(request.settings)
        if settings is None:
            settings = self._settings[request.settings] = settings_from(request.settings)
        key = (request.checkpoint, request.partition)
        with self._state:
            guard = self._guards.setdefault(key, threading.Lock())
        with guard:
            held = self._level(key, request, settings)
            try:
                records = input_records(read_ipc(request.rows))
                result = held.shard.run(request.batch_id, records, settings, request.now_ms)
            except ArbiterError:
                raise
            except Exception as e:
                log.exception("shard %s[%d] batch %d failed; closing it", request.checkpoint, request.partition,
                              request.batch_id)
                self._drop(key)
                raise ShardServerInternal(f"{type(e).__name__}: {e}") from e
            out = self._totals.setdefault(key, Counter())
            for topic, *_ in result.outputs:
                out["events_out" if topic == settings.topic_events else "rejections_out"] += 1
            out["replays"] += result.replayed
            if self.hold_after is not None and request.batch_id >= self.hold_after[0] and not result.replayed:
                self._hold_until_closing(self.hold_after[1], request)
            self._stats_path = settings.path(settings.var_dir) / "status" / "shards" / f"{self.path.stem}.json"
            self._write_stats()
            return Reply(True, result.replayed, result.restored_from, output_ipc(result.outputs))

    def _hold_until_closing(self, marker: Path, request: Request) -> None:
        """Never answer (``hold_after_write``); when told to close, die as a crashed server would, answering nothing."""
        log.warning("%s: holding the reply of shard %d batch %d until this server is stopped", HOLD_AFTER_WRITE,
                    request.partition, request.batch_id)
        marker.touch()
        while not self._closing:
            time.sleep(0.1)
        os._exit(1)

    def _level(self, key: tuple[str, int], request: Request, settings: Settings) -> HeldShard:
        """Return the held shard for ``key``, opened (and restored) again if the disk or the checkpoint moved on."""
        held = self.held.get(key)
        if held is not None:
            newest = max([*held.shard.store.changelogs(), *held.shard.store.snapshots()], default=-1)
            if not held.still_on_disk() or newest > held.shard.last_batch():
                self._drop(key)
                held = None
            else:
                held.shard.restored_from = "local"
                return held
        path = shard_dir(settings, request.checkpoint, request.partition)
        lock = FileLock(path.with_name(path.name + ".lock"))
        lock.acquire(settings.shard_lock_timeout_s)
        t0 = time.monotonic()
        try:
            store = ShardStore(request.checkpoint, request.partition, fsync=settings.checkpoint_fsync)
            shard = open_shard(path, store, request.batch_id, settings)
        except BaseException:
            lock.release()
            raise
        totals = self._totals.setdefault(key, Counter())
        totals["opens"] += 1
        ms = round((time.monotonic() - t0) * 1000)
        if shard.restored_from in ("changelogs", "snapshot", "seed"):
            totals["restores"] += 1
            totals["restore_ms"] += ms
        self._opens.append({"partition": request.partition, "batch": request.batch_id, "from": shard.restored_from,
                            "ms": ms, "bytes": shard.counters["restore_bytes"], "at_ms": int(time.time() * 1000)})
        st = os.stat(path)
        held = self.held[key] = HeldShard(shard, lock, path, (st.st_dev, st.st_ino))
        return held

    def _drop(self, key: tuple[str, int]) -> None:
        """Close a held shard, keeping what it counted."""
        held = self.held.pop(key, None)
        if held is not None:
            self._totals.setdefault(key, Counter()).update(held.shard.counters)
            held.close()

    # --- operations view ----------------------------------------------------------------------
    def stats(self) -> dict[str, object]:
        """Return this server's figures: per shard, RocksDB's own estimates and what the server counted.

        Counters are totals since the server started (a shard closed and opened again keeps counting); the
        block cache is one per process, shared by every shard, so it is given once.
        """
        shards: dict[str, dict[str, int]] = {}
        cache = 0
        for key, totals in list(self._totals.items()):
            held = self.held.get(key)
            figures = dict(totals + held.shard.counters) if held is not None else dict(totals)
            if held is not None:
                db = held.shard.db
                figures.update({name: int(db.property_int_value(prop) or 0) for name, prop in _ROCKS_PROPERTIES})
                cache = figures.pop("block_cache_usage_bytes")
                figures["last_batch"] = held.shard.last_batch()
            shards[str(key[1])] = figures
        return {"pid": os.getpid(), "socket": str(self.path), "updated_at_ms": int(time.time() * 1000),
                "block_cache_usage_bytes": cache, "shards": shards, "opens_log": list(self._opens)}

    def _write_stats(self, *, force: bool = False) -> None:
        """Write ``stats()`` to ``<var_dir>/status/shards/<socket>.json`` at most once a second (atomically)."""
        now = time.monotonic()
        if self._stats_path is None or (not force and now - self._stats_written < 1.0):
            return
        if not self._stats_lock.acquire(blocking=force):
            return  # another thread is writing them right now
        self._stats_written = now
        try:
            self._stats_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._stats_path.with_suffix(f".tmp-{os.getpid()}")
            tmp.write_text(json.dumps(self.stats(), sort_keys=True))
            os.replace(tmp, self._stats_path)
        except OSError as e:
            log.warning("cannot write shard stats to %s: %s", self._stats_path, e)
        finally:
            self._stats_lock.release()

    # --- lifetime -----------------------------------------------------------------------------
    def _watch(self) -> None:
        while not self._closing:
            time.sleep(1.0)
            if self._last_request > self._stats_written:  # the last batch before a quiet spell is written out too
                self._write_stats()
            with self._state:
                for pid, started in list(self.clients.items()):
                    if not still_running(pid, started):
                        del self.clients[pid]
                idle = time.monotonic() - self._last_request
                if self._in_flight == 0 and (not self.clients or idle > self.idle_s):
                    log.info("shard server %d closing: %s", os.getpid(),
                             "its executors are gone" if not self.clients else f"idle for {idle:.0f} s")
                    self._closing = True


_ROCKS_PROPERTIES = (("rows_estimate", "rocksdb.estimate-num-keys"), ("live_sst_bytes", "rocksdb.live-sst-files-size"),
                     ("memtable_bytes", "rocksdb.cur-size-all-mem-tables"),
                     ("block_cache_usage_bytes", "rocksdb.block-cache-usage"))


OPENS_KEPT = 256  # the last shard opens in the stats file: where each shard came from, at which batch, at what cost


HOLD_AFTER_WRITE = "ARBITER_FAULT_HOLD_AFTER_WRITE"  # "<batch id>:<marker file>", for the crash tests only


def hold_after_write(env: Mapping[str, str]) -> tuple[int, Path] | None:
    """Return the fault injection ``ARBITER_FAULT_HOLD_AFTER_WRITE`` asks for, or None (the normal case).

    Set (by a test, in the validator's environment), a server that has written a batch at or after that id
    touches the marker file and never answers: the batch is in the shard but Spark never commits it, so a
    process killed now must be followed by a replay of that batch id — the case the batch-id memo exists for.
    """
    raw = env.get(HOLD_AFTER_WRITE)
    if not raw:
        return None
    batch, _, marker = raw.partition(":")
    return int(batch), Path(marker)


class ShardServerInternal(ArbiterError):
    """The shard server failed a request with an unexpected error; the shard was closed and will be reopened."""

    code = "SHARD_SERVER_INTERNAL"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.validator.rocks.server", description=__doc__.split("\n")[0])
    parser.add_argument("--socket", required=True, type=Path)
    parser.add_argument("--executor-pid", required=True, type=int)
    parser.add_argument("--idle-s", type=float, default=300.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = ShardServer(args.socket, args.idle_s)
    server.add_client(args.executor_pid)
    # SIGHUP too: PySpark's daemon sends it to its whole process group (which this server inherits) when the
    # executor stops; its default action would end the server without closing its shards or removing its socket.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: server.close())
    server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
