"""A shard's durable copy at the checkpoint location: one changelog file per batch, a snapshot every K batches.

Layout under ``<checkpoint>/rocks/shard-NNNN/`` (any ``pyarrow.fs`` URI: a local directory, HDFS, S3):

    changelog/<batch>.<prev+1>.bin   the batch's writes; ``prev`` is the shard's previous batch, so the
                                     listing alone gives the chain back to a snapshot
    snapshot/<batch>/...             a RocksDB checkpoint (hard-linked SSTs, copied) taken after <batch>
    snapshot/<batch>.done            written last: only snapshots with a marker are used

Restore = the newest complete snapshot the chain reaches, plus the changelogs after it, in order.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from pyarrow import fs as pafs

from app.errors import ArbiterError

MAGIC = b"ARBCL1\n"
_HEAD = struct.Struct(">qqI")
_LEN = struct.Struct(">i")
_CRC = struct.Struct(">I")

Entry = tuple[bytes, bytes | None]  # (key, value); None deletes


class CheckpointCorrupt(ArbiterError):
    """A changelog or snapshot at the checkpoint location is unreadable or the chain is broken."""

    code = "CHECKPOINT_CORRUPT"


@dataclass(frozen=True, slots=True)
class Changelog:
    """The writes of one shard for one batch and the shard's batch before it (-1 for none)."""

    batch_id: int
    prev: int
    entries: list[Entry]


def encode_changelog(batch_id: int, prev: int, entries: list[Entry]) -> bytes:
    """Return the framed bytes of a changelog, with a CRC32 trailer."""
    parts = [MAGIC, _HEAD.pack(batch_id, prev, len(entries))]
    for key, value in entries:
        parts.append(_LEN.pack(len(key)))
        parts.append(key)
        if value is None:
            parts.append(_LEN.pack(-1))
        else:
            parts.append(_LEN.pack(len(value)))
            parts.append(value)
    body = b"".join(parts)
    return body + _CRC.pack(zlib.crc32(body))


def decode_changelog(data: bytes) -> Changelog:
    """Parse ``encode_changelog``'s bytes; raise ``CheckpointCorrupt`` on any damage."""
    if len(data) < len(MAGIC) + _HEAD.size + _CRC.size or not data.startswith(MAGIC):
        raise CheckpointCorrupt("not a changelog (bad magic or truncated)")
    body, (crc,) = data[:-_CRC.size], _CRC.unpack_from(data, len(data) - _CRC.size)
    if zlib.crc32(body) != crc:
        raise CheckpointCorrupt("changelog checksum mismatch")
    batch_id, prev, n = _HEAD.unpack_from(body, len(MAGIC))
    pos = len(MAGIC) + _HEAD.size
    entries: list[Entry] = []
    try:
        for _ in range(n):
            (klen,) = _LEN.unpack_from(body, pos)
            pos += 4
            key = body[pos:pos + klen]
            pos += klen
            (vlen,) = _LEN.unpack_from(body, pos)
            pos += 4
            if vlen < 0:
                entries.append((key, None))
            else:
                entries.append((key, body[pos:pos + vlen]))
                pos += vlen
    except struct.error as e:
        raise CheckpointCorrupt(f"truncated changelog entry: {e}") from e
    if pos != len(body):
        raise CheckpointCorrupt(f"{len(body) - pos} stray bytes after the changelog's entries")
    return Changelog(batch_id, prev, entries)


def filesystem_of(uri: str) -> tuple[pafs.FileSystem, str]:
    """Return the filesystem and path of ``uri``; a plain path is a local directory."""
    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    try:
        return pafs.FileSystem.from_uri(uri)
    except (ValueError, TypeError, OSError) as e:
        raise CheckpointCorrupt(f"cannot open checkpoint location {uri}: {e}") from e


class ShardStore:
    """The checkpoint-location side of one shard."""

    def __init__(self, checkpoint: str, partition: int, *, fsync: bool = True) -> None:
        self.fsync = fsync
        self.fs, root = filesystem_of(checkpoint)
        self.base = f"{root.rstrip('/')}/rocks/shard-{partition:04d}"
        self.local = isinstance(self.fs, pafs.LocalFileSystem)

    # --- changelogs ---------------------------------------------------------------------------
    def changelogs(self) -> dict[int, int]:
        """Return ``{batch_id: prev}`` for every changelog present."""
        out: dict[int, int] = {}
        for info in self._list(f"{self.base}/changelog"):
            parts = info.base_name.split(".")
            if len(parts) == 3 and parts[2] == "bin" and parts[0].isdigit() and parts[1].isdigit():
                out[int(parts[0])] = int(parts[1]) - 1
        return out

    def _changelog_path(self, batch_id: int, prev: int) -> str:
        return f"{self.base}/changelog/{batch_id:020d}.{prev + 1:020d}.bin"

    def put_changelog(self, data: bytes) -> None:
        """Store a changelog durably (write then rename where the filesystem has renames)."""
        if not data.startswith(MAGIC) or len(data) < len(MAGIC) + _HEAD.size + _CRC.size:
            raise CheckpointCorrupt("not a changelog (bad magic or truncated)")
        batch_id, prev, _ = _HEAD.unpack_from(data, len(MAGIC))  # just framed by encode_changelog: no re-parse
        self._write(self._changelog_path(batch_id, prev), data)

    def read_changelog(self, batch_id: int, prev: int) -> tuple[Changelog, bytes]:
        """Return the changelog of ``batch_id`` and its bytes; raise ``CheckpointCorrupt`` if damaged or mislabelled."""
        with self.fs.open_input_stream(self._changelog_path(batch_id, prev)) as f:
            data = f.read()
        log = decode_changelog(data)
        if (log.batch_id, log.prev) != (batch_id, prev):
            raise CheckpointCorrupt(f"{self._changelog_path(batch_id, prev)} holds batch {log.batch_id}/{log.prev}")
        return log, data

    # --- snapshots ----------------------------------------------------------------------------
    def snapshots(self) -> list[int]:
        """Return the batch ids of complete snapshots, oldest first."""
        ids = [int(i.base_name[:-5]) for i in self._list(f"{self.base}/snapshot")
               if i.base_name.endswith(".done") and i.base_name[:-5].isdigit()]
        return sorted(ids)

    def put_snapshot(self, batch_id: int, local_dir: Path) -> None:
        """Upload a local RocksDB checkpoint directory as the snapshot after ``batch_id``."""
        dest = f"{self.base}/snapshot/{batch_id:020d}"
        self.fs.create_dir(dest, recursive=True)
        pafs.copy_files(str(local_dir), dest, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=self.fs)
        self._write(f"{dest}.done", b"")

    def fetch_snapshot(self, batch_id: int, local_dir: Path) -> None:
        """Download the snapshot after ``batch_id`` into the empty directory ``local_dir``."""
        local_dir.mkdir(parents=True, exist_ok=True)
        pafs.copy_files(f"{self.base}/snapshot/{batch_id:020d}", str(local_dir), source_filesystem=self.fs,
                        destination_filesystem=pafs.LocalFileSystem())

    def cleanup(self, keep: int) -> None:
        """Keep the newest ``keep`` snapshots and the changelogs after the oldest of them; delete the rest."""
        snaps = self.snapshots()
        if len(snaps) <= keep:
            return
        oldest_kept = snaps[-keep]
        for s in snaps[:-keep]:
            self.fs.delete_file(f"{self.base}/snapshot/{s:020d}.done")  # unmark first: never a half-deleted snapshot
            self.fs.delete_dir(f"{self.base}/snapshot/{s:020d}")
        for info in self._list(f"{self.base}/snapshot"):  # uploads that never completed
            name = info.base_name
            if info.type == pafs.FileType.Directory and name.isdigit() and int(name) < oldest_kept:
                self.fs.delete_dir(info.path)
        for batch_id, prev in self.changelogs().items():
            if batch_id <= oldest_kept:
                self.fs.delete_file(self._changelog_path(batch_id, prev))

    # --- plumbing -----------------------------------------------------------------------------
    def _list(self, path: str) -> list[pafs.FileInfo]:
        return list(self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)))

    def _write(self, path: str, data: bytes) -> None:
        parent = path.rsplit("/", 1)[0]
        self.fs.create_dir(parent, recursive=True)
        if not self.local:  # object stores make a closed upload visible at once, whole or not at all
            with self.fs.open_output_stream(path) as f:
                f.write(data)
            return
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
