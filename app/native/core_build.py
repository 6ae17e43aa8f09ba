"""Build ``core/`` with maturin into ``.cache/core/<digest>/``, check it against the pure domain, install it atomically.

Kept apart from ``app.native.core``, which the shard servers import. Any problem (no cargo, no maturin, a failing
build, a corpus that decides differently) prints one warning line: the Python fold stays the decision path.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from importlib.util import find_spec

from app.native.core import CORE_DIR, CORE_SRC, MODULE, build_dir, source_files, sources_digest
from app.native.loader import ROOT, SUFFIX

BUILD_LOG = os.path.join(CORE_DIR, "build.log")  # kept only when a build failed
_CHECK = """
import json, sys
from app.native.core import import_from
from app.native.core_check import report
print(json.dumps(report(import_from(sys.argv[1]))))
"""


def _warn(problem: str) -> None:
    print(f"core: {problem}; the shard servers decide in Python", file=sys.stderr, flush=True)


def missing_toolchain() -> str | None:
    """Return what is missing to build the core (cargo, maturin), or None."""
    if shutil.which("cargo") is None:
        return "no Rust toolchain (cargo) found (https://rustup.rs)"
    if find_spec("maturin") is None and shutil.which("maturin") is None:
        return "maturin is not installed (pip install maturin)"
    return None


def build(force: bool = False, quiet: bool = False) -> bool:
    """Build the crate's current sources unless built; return whether a verified build is there now."""
    digest = sources_digest()
    target = build_dir(digest)
    if os.path.isfile(os.path.join(target, MODULE + SUFFIX)) and not force:
        _prune(keep=digest)
        if not quiet:
            print(f"core: up to date ({os.path.relpath(target, ROOT)})")
        return True
    problem = missing_toolchain()
    if problem is not None:
        _warn(problem)
        return False
    os.makedirs(CORE_DIR, exist_ok=True)
    started = time.monotonic()
    tmp = tempfile.mkdtemp(prefix=f".build-{digest}-", dir=CORE_DIR)
    try:
        problem = _compile(tmp, digest) or _check(tmp)
        if problem is not None:
            _warn(problem)
            return False
        os.chmod(tmp, 0o755)  # noqa: S103  (mkdtemp makes it 0700; others running this checkout may read it)
        if os.path.isdir(target):
            shutil.rmtree(target, ignore_errors=True)
        os.rename(tmp, target)  # a directory appears whole: a crashed build is never taken for a complete one
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _prune(keep=digest)
    with contextlib.suppress(FileNotFoundError):
        os.remove(BUILD_LOG)
    print(f"core: built core/ with maturin in {time.monotonic() - started:.0f} s and checked it against the pure "
          f"domain ({os.path.relpath(target, ROOT)})", flush=True)
    return True


def _compile(tmp: str, digest: str) -> str | None:
    src = os.path.join(tmp, "src")
    for rel in source_files():
        os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
        shutil.copyfile(os.path.join(CORE_SRC, rel), os.path.join(src, rel))
    if sources_digest(src) != digest:
        return "core/ changed while being copied; run the build again"
    maturin = [sys.executable, "-m", "maturin"] if find_spec("maturin") else ["maturin"]
    wheels = os.path.join(tmp, "wheels")
    # The crate's target dir is shared between builds (incremental: seconds when only src/ changed).
    env = {**os.environ, "CARGO_TARGET_DIR": os.path.join(CORE_SRC, "target")}
    with open(os.path.join(tmp, "build.log"), "wb") as log:
        done = subprocess.run([*maturin, "build", "--release", "--quiet", "--interpreter", sys.executable,  # noqa: S603
                               "--manifest-path", os.path.join(src, "Cargo.toml"), "--out", wheels],
                              cwd=src, stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
    if done.returncode != 0:
        shutil.copyfile(os.path.join(tmp, "build.log"), BUILD_LOG)
        return f"maturin failed (exit {done.returncode}, log in {os.path.relpath(BUILD_LOG, ROOT)})"
    for wheel in os.listdir(wheels):
        with zipfile.ZipFile(os.path.join(wheels, wheel)) as z:
            for name in z.namelist():
                if os.path.basename(name).startswith(MODULE) and name.endswith(".so"):
                    with z.open(name) as so, open(os.path.join(tmp, MODULE + SUFFIX), "wb") as out:
                        shutil.copyfileobj(so, out)
    for leftover in ("src", "wheels", "build.log"):
        path = os.path.join(tmp, leftover)
        shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.remove(path)
    if not os.path.isfile(os.path.join(tmp, MODULE + SUFFIX)):
        return "maturin built no extension module"
    return None


def _check(tmp: str) -> str | None:
    """Return why the build in ``tmp`` must not be used, or None if its corpus decides as the pure domain."""
    env = {**os.environ, "ARBITER_NATIVE": "off"}
    done = subprocess.run([sys.executable, "-c", _CHECK, tmp], cwd=ROOT, env=env,  # noqa: S603
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"the corpus run under the build failed: {tail}"
    import json

    result = json.loads(done.stdout)
    if result["differences"]:
        return f"the build decides {result['differences']} of {result['streams']} corpus streams differently from the pure domain"
    if not result["core_records"]:
        return "the build decided none of the corpus itself"
    return None


def _prune(keep: str) -> None:
    now = time.time()
    for name in os.listdir(CORE_DIR):
        path = os.path.join(CORE_DIR, name)
        if name == keep or not os.path.isdir(path):
            continue
        if name.startswith(".") and now - os.path.getmtime(path) < 3600:
            continue  # possibly a build running now
        shutil.rmtree(path, ignore_errors=True)
