"""The shard servers on their own (real server processes, real RocksDB, no Spark): what they decide equals the
in-process shard, a killed server's request is repeated on a new one with the same bytes, a held shard is opened
again when its directory is removed or another host's server moved the checkpoint on, and a server exits when
the executor it serves is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from app.settings import Settings
from app.validator.fold import OutputRecord
from app.validator.rocks.client import ShardClient, socket_path
from app.validator.rocks.shard import run_task, shard_dir
from app.validator.rocks.wire import ShardServerTimeout, read_ipc, table_ipc
from tests.unit.test_rocks_job import NOW, arrow, records_of
from tests.unit.test_rocks_shard import random_commands

pytestmark = pytest.mark.unit


def settings_at(tmp_path: Path, name: str, **extra: object) -> Settings:
    fields: dict[str, object] = {"partitions": 1, "var_dir": tmp_path / name, "snapshot_every": 1000,
                                 "rocks_memory_mb": 16, "rocks_write_buffer_mb": 4, "shard_servers": 1, **extra}
    return Settings(**fields)  # type: ignore[arg-type]


def rows(records: list) -> bytes:  # noqa: ANN001 - InputRecords
    return table_ipc(arrow(records))


def outputs(reply_rows: bytes) -> list[OutputRecord]:
    if not reply_rows:
        return []
    t = read_ipc(reply_rows)
    headers = [tuple((h["key"], h["value"]) for h in row) for row in t.column("headers").to_pylist()]
    return list(zip(t.column("topic").to_pylist(), t.column("key").to_pylist(), t.column("value").to_pylist(),
                    t.column("partition").to_pylist(), headers, strict=True))


def server_pids(s: Settings, ckpt: str) -> list[int]:
    """PIDs of the live servers of this checkpoint's lane 0 (by their command line)."""
    needle = str(socket_path(s, ckpt, 0)).encode()
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes()
            except OSError:
                continue
            if b"app.validator.rocks.server" in cmd and needle in cmd:
                found.append(int(d))
    return found


def stop_servers(s: Settings, ckpt: str) -> None:
    for pid in server_pids(s, ckpt):
        os.kill(pid, signal.SIGTERM)


def batches(n: int) -> list[list]:
    """``n`` consecutive batches of one partition's commands (offsets rising across batches)."""
    commands = random_commands(60 * n, 12, seed=7)
    return [commands[i * 60:(i + 1) * 60] for i in range(n)]


def test_the_server_decides_what_the_in_process_shard_decides(tmp_path: Path) -> None:
    s, ref = settings_at(tmp_path, "served"), settings_at(tmp_path, "in-process")
    ck, ck_ref = str(tmp_path / "ck"), str(tmp_path / "ck-ref")
    client = ShardClient(s, ck)
    try:
        for b, part in enumerate(batches(4)):
            (reply,) = client.run_all(b, NOW + b, [(0, rows(part))])
            assert reply.ok and not reply.replayed
            assert outputs(reply.rows) == run_task(ref, ck_ref, b, part, NOW + b).outputs
        assert len(server_pids(s, ck)) == 1  # one server held the shard for all four batches
    finally:
        stop_servers(s, ck)


def test_a_killed_server_is_replaced_and_the_repeated_request_gets_the_same_bytes(tmp_path: Path) -> None:
    s = settings_at(tmp_path, "killed")
    ck = str(tmp_path / "ck")
    client = ShardClient(s, ck)
    part = batches(1)[0]
    try:
        (first,) = client.run_all(0, NOW, [(0, rows(part))])
        (old,) = server_pids(s, ck)
        os.kill(old, signal.SIGKILL)  # after it applied batch 0: the retry must re-emit, not decide again
        (again,) = client.run_all(0, NOW, [(0, rows(part))])
        (new,) = server_pids(s, ck)
        assert new != old
        assert again.replayed and again.rows == first.rows
    finally:
        stop_servers(s, ck)


def test_a_removed_shard_directory_is_restored_from_the_checkpoint(tmp_path: Path) -> None:
    s = settings_at(tmp_path, "removed", snapshot_every=2)
    ref = settings_at(tmp_path, "removed-ref", snapshot_every=2)
    ck, ck_ref = str(tmp_path / "ck"), str(tmp_path / "ck-ref")
    client = ShardClient(s, ck)
    try:
        parts = batches(4)
        for b, part in enumerate(parts[:3]):
            client.run_all(b, NOW, [(0, rows(part))])
            run_task(ref, ck_ref, b, part, NOW)
        import shutil

        shutil.rmtree(shard_dir(s, ck, 0))
        (reply,) = client.run_all(3, NOW, [(0, rows(parts[3]))])
        assert reply.text == "snapshot"  # reopened from the checkpoint, not served from the deleted files
        assert outputs(reply.rows) == run_task(ref, ck_ref, 3, parts[3], NOW).outputs
        assert (shard_dir(s, ck, 0) / "CURRENT").is_file()
    finally:
        stop_servers(s, ck)


def test_a_shard_another_host_moved_on_is_reopened_and_restored(tmp_path: Path) -> None:
    """Two servers with their own local directories (two hosts) and one checkpoint: the shard goes A, B, A."""
    a, b = settings_at(tmp_path, "host-a"), settings_at(tmp_path, "host-b")
    ref = settings_at(tmp_path, "ref")
    ck, ck_ref = str(tmp_path / "ck"), str(tmp_path / "ck-ref")
    parts = batches(3)
    try:
        got = []
        for batch, (s, part) in enumerate(zip((a, b, a), parts, strict=True)):
            (reply,) = ShardClient(s, ck).run_all(batch, NOW, [(0, rows(part))])
            got.append((reply.text, outputs(reply.rows)))
        want = [run_task(ref, ck_ref, batch, part, NOW).outputs for batch, part in enumerate(parts)]
        assert [o for _, o in got] == want
        assert got[2][0] == "changelogs"  # A's held copy was behind B's batch 1: caught up from the checkpoint
    finally:
        stop_servers(a, ck)
        stop_servers(b, ck)


def test_the_server_exits_when_its_executor_is_gone(tmp_path: Path) -> None:
    s = settings_at(tmp_path, "orphan")
    ck = str(tmp_path / "ck")
    executor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        client = ShardClient(s, ck)
        client.executor = executor.pid  # as if this process were a Python worker of that JVM
        client.run_all(0, NOW, [(0, rows(records_of(0, 3)))])
        (server,) = server_pids(s, ck)
        executor.kill()
        executor.wait()
        deadline = time.monotonic() + 15
        while server_pids(s, ck) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not server_pids(s, ck), f"server {server} outlived its executor"
        assert not socket_path(s, ck, 0).exists()
    finally:
        executor.kill()
        stop_servers(s, ck)


def test_a_server_error_reaches_the_task_with_its_code(tmp_path: Path) -> None:
    s = settings_at(tmp_path, "refused")
    ck = str(tmp_path / "ck")
    client = ShardClient(s, ck)
    part = records_of(0, 4)
    try:
        client.run_all(0, NOW, [(0, rows(part))])
        from app.validator.rocks.wire import ShardRequestFailed

        with pytest.raises(ShardRequestFailed, match="SHARD_STATE: .*refusing to decide one batch twice"):
            client.run_all(0, NOW, [(0, rows(part[:2]))])  # batch 0 again, other offsets
        disordered = pa.concat_batches([arrow(part[2:]), arrow(part[:2])])
        with pytest.raises(ShardRequestFailed, match="SHARD_ORDER"):
            client.run_all(1, NOW, [(0, table_ipc(disordered))])
    finally:
        stop_servers(s, ck)


def test_the_server_writes_its_shards_figures_for_the_operations_view(tmp_path: Path) -> None:
    import json

    s = settings_at(tmp_path, "stats", snapshot_every=2)
    ck = str(tmp_path / "ck")
    client = ShardClient(s, ck)
    parts = batches(2)
    try:
        for b, part in enumerate(parts):
            client.run_all(b, NOW, [(0, rows(part))])
        stop_servers(s, ck)  # it writes its figures once more as it stops
        deadline = time.monotonic() + 15
        while server_pids(s, ck) and time.monotonic() < deadline:
            time.sleep(0.05)
        (path,) = (s.path(s.var_dir) / "status" / "shards").glob("*.json")
        figures = json.loads(path.read_text())["shards"]["0"]
        assert figures["batches"] == 2 and figures["records"] == sum(len(p) for p in parts)
        assert figures["snapshots"] == 1 and figures["snapshot_bytes"] > 0 and figures["changelog_bytes"] > 0
        assert figures["events_out"] + figures["rejections_out"] == sum(len(p) for p in parts)
        assert figures["opens"] == 1 and "restores" not in figures
    finally:
        stop_servers(s, ck)


def test_malformed_frames_get_an_error_reply_and_the_server_serves_on(tmp_path: Path) -> None:
    """Garbage on the socket (bad magic, a truncated header, rows that are not Arrow) is answered with a failed
    reply naming the problem; nothing is written to the shard, and a good request afterwards is decided."""
    import socket

    from app.validator.rocks.wire import MAGIC_REQUEST, decode_reply, recv_frame, send_frame

    s = settings_at(tmp_path, "garbage")
    ck = str(tmp_path / "ck")
    client = ShardClient(s, ck)
    part = records_of(0, 3)
    try:
        client.run_all(0, NOW, [(0, rows(part[:1]))])  # starts the server
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(socket_path(s, ck, 0)))
        bad_rows = encode_request_with_rows(client, 1, b"not an arrow stream")
        for frame, expected in [(b"HELLO", "SHARD_REQUEST_FAILED"), (MAGIC_REQUEST + b"\x00\x01", "SHARD_SERVER_INTERNAL"),
                                (bad_rows, "SHARD_SERVER_INTERNAL")]:
            send_frame(sock, frame)
            body = recv_frame(sock)
            assert body is not None
            reply = decode_reply(body)
            assert not reply.ok and reply.text.startswith(expected), reply.text
        sock.close()
        (good,) = client.run_all(1, NOW, [(0, rows(part[1:]))])  # batch 1 was not applied by the garbage
        assert good.ok and not good.replayed and len(outputs(good.rows)) == 2
    finally:
        stop_servers(s, ck)


def encode_request_with_rows(client: ShardClient, batch: int, data: bytes) -> bytes:
    from app.validator.rocks.wire import Request, encode_request

    return encode_request(Request(batch, NOW, 0, client.executor, client.settings_wire, client.checkpoint, data))


def test_a_stalled_server_fails_the_request_with_a_timeout_instead_of_hanging(tmp_path: Path) -> None:
    s = settings_at(tmp_path, "stalled", shard_request_timeout_s=2.0)
    ck = str(tmp_path / "ck")
    client = ShardClient(s, ck)
    parts = batches(2)
    client.run_all(0, NOW, [(0, rows(parts[0]))])
    (pid,) = server_pids(s, ck)
    os.kill(pid, signal.SIGSTOP)  # the process lives and its socket accepts, but nothing answers
    # Without a timeout the call below would wait forever: let the server go on after a while, so that the
    # code without one returns normally (and the test fails on "DID NOT RAISE") instead of hanging the suite.
    resume = threading.Timer(60, os.kill, (pid, signal.SIGCONT))
    resume.start()
    try:
        with pytest.raises(ShardServerTimeout, match="sent nothing for 2 s"):
            client.run_all(1, NOW, [(0, rows(parts[1]))])
    finally:
        resume.cancel()
        os.kill(pid, signal.SIGCONT)
        stop_servers(s, ck)
