"""A shard's durable copy at the checkpoint location: one changelog file per batch, a snapshot every K batches.

Layout under ``<checkpoint>/rocks/shard-NNNN/`` (any ``pyarrow.fs`` URI: a local directory, HDFS, S3):

    changelog/<batch>.<prev+1>.bin   the batch's writes; ``prev`` is the shard's previous batch, so the
                                     listing alone gives the chain back to a snapshot
    snapshot/<batch>/...             a RocksDB checkpoint taken after <batch>: its small files (MANIFEST,
                                     OPTIONS, CURRENT...) and ``files.json``, which names its SST files
    snapshot/sst/<name>-<uid>.sst    SST files, uploaded once and shared by every snapshot that lists them
    snapshot/<batch>.done            written last: only snapshots with a marker are used
    snapshot/seed/..., seed.done     a rescale's seed (``app.rescale``): the state before this checkpoint's
                                     first batch, a full copy; what a chain back to batch -1 starts from

Incremental snapshots: an SST file is immutable, so a snapshot uploads only the SST files no kept snapshot of
the same local database (its *lineage*) has uploaded yet, and lists the rest; its upload cost follows what
changed since the last snapshot, not the size of the state (as Spark's own RocksDB state store does). A
database restored from a snapshot starts a new lineage (file numbers after a restore may repeat those of
another copy), seeded with the files it was restored from. Cleanup deletes SST files no kept snapshot lists.
A snapshot written before this layout (SST files inside ``<batch>/``, no ``files.json``) still restores.

Restore = the newest complete snapshot the chain reaches, plus the changelogs after it, in order.
"""

from __future__ import annotations

import json
import os
import struct
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

from pyarrow import fs as pafs

from app.errors import ArbiterError

MAGIC = b"ARBCL2\n"     # 64-bit entry lengths
MAGIC_V1 = b"ARBCL1\n"  # 32-bit entry lengths: written by earlier versions, still read
_HEAD = struct.Struct(">qqI")
_LEN = struct.Struct(">q")
_LEN_V1 = struct.Struct(">i")
_CRC = struct.Struct(">I")

Entry = tuple[bytes, bytes | None]  # (key, value); None deletes


FILES = "files.json"
SEED = "seed"
SST_DIR = "sst"


@dataclass(frozen=True, slots=True)
class SnapshotFiles:
    """A snapshot's SST list: ``"<local name>:<size>"`` → the shared remote file, and the lineage that wrote it."""

    lineage: str
    sst: dict[str, str]

    def dumps(self) -> bytes:
        return json.dumps({"lineage": self.lineage, "sst": self.sst}, sort_keys=True).encode()

    @classmethod
    def parse(cls, data: bytes) -> SnapshotFiles:
        try:
            raw = json.loads(data)
            return cls(str(raw["lineage"]), {str(k): str(v) for k, v in raw["sst"].items()})
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CheckpointCorrupt(f"unreadable snapshot file list: {e}") from e


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
    """Parse ``encode_changelog``'s bytes (or an earlier version's); raise ``CheckpointCorrupt`` on any damage."""
    if len(data) < len(MAGIC) + _HEAD.size + _CRC.size or not data.startswith((MAGIC, MAGIC_V1)):
        raise CheckpointCorrupt("not a changelog (bad magic or truncated)")
    body, (crc,) = data[:-_CRC.size], _CRC.unpack_from(data, len(data) - _CRC.size)
    if zlib.crc32(body) != crc:
        raise CheckpointCorrupt("changelog checksum mismatch")
    batch_id, prev, n = _HEAD.unpack_from(body, len(MAGIC))
    pos = len(MAGIC) + _HEAD.size
    length = _LEN if data.startswith(MAGIC) else _LEN_V1
    entries: list[Entry] = []
    try:
        for _ in range(n):
            (klen,) = length.unpack_from(body, pos)
            pos += length.size
            key = body[pos:pos + klen]
            pos += klen
            (vlen,) = length.unpack_from(body, pos)
            pos += length.size
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
        if not data.startswith((MAGIC, MAGIC_V1)) or len(data) < len(MAGIC) + _HEAD.size + _CRC.size:
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

    def manifests(self) -> dict[int, SnapshotFiles]:
        """Return the SST lists of the complete snapshots that have one (``files.json``), by batch id."""
        out: dict[int, SnapshotFiles] = {}
        for batch_id in self.snapshots():
            try:
                with self.fs.open_input_stream(f"{self.base}/snapshot/{batch_id:020d}/{FILES}") as f:
                    out[batch_id] = SnapshotFiles.parse(f.read())
            except FileNotFoundError:
                continue  # a snapshot of the full-copy layout
        return out

    def put_snapshot(self, batch_id: int, local_dir: Path, lineage: str, seed: dict[str, str] | None = None) -> int:
        """Upload a local RocksDB checkpoint directory as the snapshot after ``batch_id``; return the bytes uploaded.

        An SST file already uploaded by a kept snapshot of the same ``lineage`` (or in ``seed``: the files this
        database was restored from), with the same name and size, is listed, not uploaded again.
        """
        kept = self.manifests()
        referenced = {r for m in kept.values() for r in m.sst.values()}
        known = {k: r for k, r in (seed or {}).items() if r in referenced}
        for m in kept.values():
            if m.lineage == lineage:
                known.update({k: r for k, r in m.sst.items() if r in referenced})
        dest = f"{self.base}/snapshot/{batch_id:020d}"
        self.fs.create_dir(dest, recursive=True)
        self.fs.create_dir(f"{self.base}/snapshot/{SST_DIR}", recursive=True)
        local = pafs.LocalFileSystem()
        listed: dict[str, str] = {}
        uploaded = 0
        for f in sorted(local_dir.iterdir()):
            if not f.is_file():
                continue
            size = f.stat().st_size
            if f.suffix == ".sst":
                key = f"{f.name}:{size}"
                remote = known.get(key)
                if remote is None:
                    remote = f"{f.stem}-{uuid.uuid4().hex[:12]}.sst"
                    pafs.copy_files(str(f), f"{self.base}/snapshot/{SST_DIR}/{remote}", source_filesystem=local,
                                    destination_filesystem=self.fs)
                    uploaded += size
                listed[key] = remote
            else:
                pafs.copy_files(str(f), f"{dest}/{f.name}", source_filesystem=local, destination_filesystem=self.fs)
                uploaded += size
        self._write(f"{dest}/{FILES}", SnapshotFiles(lineage, listed).dumps())
        self._write(f"{dest}.done", b"")
        return uploaded

    def fetch_snapshot(self, batch_id: int, local_dir: Path) -> dict[str, str]:
        """Download the snapshot after ``batch_id`` into the empty directory ``local_dir``; return its SST list."""
        local_dir.mkdir(parents=True, exist_ok=True)
        local = pafs.LocalFileSystem()
        src = f"{self.base}/snapshot/{batch_id:020d}"
        listed: dict[str, str] = {}
        for info in self._list(src):
            if info.type != pafs.FileType.File:
                continue
            if info.base_name == FILES:
                with self.fs.open_input_stream(info.path) as f:
                    listed = SnapshotFiles.parse(f.read()).sst
                continue
            pafs.copy_files(info.path, str(local_dir / info.base_name), source_filesystem=self.fs,
                            destination_filesystem=local)
        for key, remote in listed.items():
            name = key.rsplit(":", 1)[0]
            pafs.copy_files(f"{self.base}/snapshot/{SST_DIR}/{remote}", str(local_dir / name),
                            source_filesystem=self.fs, destination_filesystem=local)
        return listed

    # --- the seed of a rescaled checkpoint (app.rescale) -------------------------------------------
    def has_seed(self) -> bool:
        """Return whether a complete rescale seed is present (its marker is written last)."""
        return self.fs.get_file_info(f"{self.base}/snapshot/{SEED}.done").type == pafs.FileType.File

    def put_seed(self, local_dir: Path) -> None:
        """Upload the RocksDB checkpoint ``local_dir`` whole as this shard's seed; the marker goes last."""
        dest = f"{self.base}/snapshot/{SEED}"
        self.fs.create_dir(dest, recursive=True)
        local = pafs.LocalFileSystem()
        for f in sorted(local_dir.iterdir()):
            if f.is_file():
                pafs.copy_files(str(f), f"{dest}/{f.name}", source_filesystem=local, destination_filesystem=self.fs)
        self._write(f"{dest}.done", b"")

    def fetch_seed(self, local_dir: Path) -> None:
        """Download the seed into the empty directory ``local_dir``."""
        local_dir.mkdir(parents=True, exist_ok=True)
        for info in self._list(f"{self.base}/snapshot/{SEED}"):
            if info.type == pafs.FileType.File:
                pafs.copy_files(info.path, str(local_dir / info.base_name), source_filesystem=self.fs,
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
        referenced = {r for m in self.manifests().values() for r in m.sst.values()}
        for info in self._list(f"{self.base}/snapshot/{SST_DIR}"):  # SST files no kept snapshot lists
            if info.base_name not in referenced:
                self.fs.delete_file(info.path)
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
        if self.fsync:
            fsync_dir(parent)  # the rename itself is durable only once the directory entry is on disk


def fsync_dir(path: str) -> None:
    """fsync the directory ``path``, making the entries renamed into it survive a machine crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
