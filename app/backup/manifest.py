"""The backup manifest: each component's offsets, every file with its size and SHA-256, versions; and ``verify``."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.errors import ArbiterError

MANIFEST = "manifest.json"
FORMAT = 1
_CHUNK = 1 << 20


class BackupInvalid(ArbiterError):
    """A backup (or a restored copy) does not match its manifest, or has none."""

    code = "BACKUP_INVALID"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def copy_hashed(src: Path, dst: Path) -> str:
    """Copy ``src`` to ``dst`` (fsynced) and return the SHA-256 of the bytes copied."""
    h = hashlib.sha256()
    dst.parent.mkdir(parents=True, exist_ok=True)
    with src.open("rb") as fi, dst.open("wb") as fo:
        while chunk := fi.read(_CHUNK):
            h.update(chunk)
            fo.write(chunk)
        fo.flush()
        os.fsync(fo.fileno())
    shutil.copystat(src, dst)
    return h.hexdigest()


def file_entry(rel: str, path: Path, digest: str | None = None) -> dict[str, Any]:
    return {"path": rel, "size": path.stat().st_size, "sha256": digest or sha256_file(path)}


def tree_entries(root: Path, prefix: str) -> list[dict[str, Any]]:
    """Every regular file under ``root``, hashed, named ``<prefix>/<relative path>``."""
    return [file_entry(f"{prefix}/{p.relative_to(root).as_posix()}", p)
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()]


def write(directory: Path, manifest: dict[str, Any]) -> Path:
    path = directory / MANIFEST
    tmp = directory / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
    return path


def read(directory: Path) -> dict[str, Any]:
    path = directory / MANIFEST
    if not path.is_file():
        raise BackupInvalid(f"{directory} holds no {MANIFEST}: not a backup (or an unfinished one)")
    manifest: dict[str, Any] = json.loads(path.read_text())
    if manifest.get("format") != FORMAT:
        raise BackupInvalid(f"{path}: backup format {manifest.get('format')!r}, this Arbiter reads {FORMAT}")
    return manifest


@dataclass
class VerifyResult:
    """Files checked and what differs: missing, wrong size or hash, and files the manifest does not list."""

    checked: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_files(manifest: dict[str, Any], locate: dict[str, Path], *, extra: bool = True) -> VerifyResult:
    """Re-hash each manifest file at ``locate[its first path part] / the rest``; with ``extra``, files under a
    located root that the manifest does not list are problems too."""
    result = VerifyResult()
    listed: dict[str, set[Path]] = {}
    for f in manifest["files"]:
        top, _, rest = f["path"].partition("/")
        if top not in locate:
            continue
        path = locate[top] / rest
        listed.setdefault(top, set()).add(path)
        result.checked += 1
        if not path.is_file():
            result.problems.append(f"{f['path']}: missing ({path})")
        elif path.stat().st_size != f["size"]:
            result.problems.append(f"{f['path']}: {path.stat().st_size} bytes, the manifest says {f['size']}")
        elif sha256_file(path) != f["sha256"]:
            result.problems.append(f"{f['path']}: SHA-256 differs from the manifest ({path})")
    if extra:
        for top, root in locate.items():
            if not root.is_dir():
                continue
            for p in sorted(root.rglob("*")):
                if p.is_file() and not p.is_symlink() and p not in listed.get(top, set()) and p.name != "job.lock":
                    result.problems.append(f"{top}/{p.relative_to(root).as_posix()}: not in the manifest ({p})")
    return result
