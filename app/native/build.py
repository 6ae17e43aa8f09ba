"""Compile ``commands/`` and ``schemas/`` with mypyc into ``.cache/native/<digest>/``, check it, install it atomically.

Kept apart from ``app.native.loader`` so that module, imported by every process, stays cheap to import.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from importlib.util import find_spec
from typing import Any

from app.native.loader import COMPILED, INTERPRETED, NATIVE_DIR, PACKAGES, ROOT, SUFFIX, sources_digest

BUILD_LOG = os.path.join(NATIVE_DIR, "build.log")  # kept only when a build failed
_STALE_TEMP_SECONDS = 3600  # an unfinished build dir older than this is from a crashed build
# Runs the corpus in a fresh interpreter: with the build in argv[1] loaded as activate() loads one, or pure.
_CHECK = """
import json, sys
if sys.argv[1]:
    from app.native.loader import use_build
    use_build(sys.argv[1])
from app.native.check import report
print(json.dumps(report()))
"""


def _warn(problem: str) -> None:
    print(f"native: {problem}; using pure Python", file=sys.stderr, flush=True)


def missing_toolchain() -> str | None:
    """Return what is missing to compile (mypyc, setuptools, a C compiler, Python headers), or None."""
    for module, package in (("mypyc", "mypy"), ("setuptools", "setuptools")):
        if find_spec(module) is None:
            return f"{module} is not installed (pip install {package})"
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    if shutil.which(shlex.split(cc)[0]) is None:
        return f"no C compiler ({cc}) found (e.g. apt install gcc)"
    include = sysconfig.get_paths()["include"]
    if not os.path.isfile(os.path.join(include, "Python.h")):
        return f"no Python headers ({include}/Python.h) (e.g. apt install python3-dev)"
    return None


def compile_into_cache(digest: str, *, force: bool = False) -> bool:
    """Build the sources whose digest is ``digest`` unless built; return whether the build is there now."""
    target = os.path.join(NATIVE_DIR, digest)
    if os.path.isdir(target) and not force:
        _prune(keep=digest)
        return True
    problem = missing_toolchain()
    if problem is not None:
        _warn(problem)
        return False
    os.makedirs(NATIVE_DIR, exist_ok=True)
    started = time.monotonic()
    tmp = tempfile.mkdtemp(prefix=f".build-{digest}-", dir=NATIVE_DIR)
    try:
        problem = _compile(tmp, digest) or _check(tmp)
        if problem is not None:
            _warn(problem)
            return False
        _install(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _prune(keep=digest)
    with contextlib.suppress(FileNotFoundError):
        os.remove(BUILD_LOG)
    print(f"native: compiled {' and '.join(p + '/' for p in PACKAGES)} with mypyc in {time.monotonic() - started:.0f} s "
          f"({os.path.relpath(target, ROOT)})", flush=True)
    return True


def _compile(tmp: str, digest: str) -> str | None:
    for package in PACKAGES:
        shutil.copytree(os.path.join(ROOT, package), os.path.join(tmp, package),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", f"*{SUFFIX}"))
    if sources_digest(tmp) != digest:
        return "the sources changed while being copied; run the build again"
    # mypy would otherwise pick up whatever config it finds above the build dir.
    with open(os.path.join(tmp, "mypy.ini"), "w") as f:
        f.write("[mypy]\n")
    with open(os.path.join(tmp, "build.log"), "wb") as log:
        done = subprocess.run([sys.executable, "-m", "mypyc", *compiled_paths()], cwd=tmp, stdout=log,  # noqa: S603
                              stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        shutil.copyfile(os.path.join(tmp, "build.log"), BUILD_LOG)
        return f"mypyc failed (exit {done.returncode}, log in {os.path.relpath(BUILD_LOG, ROOT)})"
    missing = [p for p in compiled_paths() if not os.path.isfile(os.path.join(tmp, p[:-3] + SUFFIX))]
    if missing:
        return f"mypyc built no extension for {', '.join(missing)}"
    for leftover in ("build", ".mypy_cache"):
        shutil.rmtree(os.path.join(tmp, leftover), ignore_errors=True)
    for leftover in ("mypy.ini", "build.log"):
        os.remove(os.path.join(tmp, leftover))
    return None


def compiled_paths() -> list[str]:
    """Return the relative paths of the modules to compile: COMPILED, directories expanded, less INTERPRETED."""
    paths = []
    for path in COMPILED:
        if path.endswith("/"):
            paths += [path + f for f in sorted(os.listdir(os.path.join(ROOT, path))) if f.endswith(".py")]
        else:
            paths.append(path)
    return [p for p in paths if p not in INTERPRETED]


def _run_corpus(build: str) -> dict[str, Any]:
    env = {**os.environ, "ARBITER_NATIVE": "off"}  # the interpreter's own app import must not pick a build
    done = subprocess.run([sys.executable, "-c", _CHECK, build], cwd=ROOT, env=env,  # noqa: S603
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the corpus run {'under the build ' if build else ''}failed: {tail}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _check(tmp: str) -> str | None:
    """Return why the build in ``tmp`` must not be used, or None if it writes the pure sources' bytes."""
    try:
        compiled, pure = _run_corpus(tmp), _run_corpus("")
    except RuntimeError as e:
        return str(e)
    not_native = [m for m, f in compiled["files"].items() if not (f.startswith(tmp) and f.endswith(SUFFIX))]
    if not_native:
        return f"the build did not load compiled {', '.join(not_native)}"
    if compiled["digest"] != pure["digest"]:
        return f"the build's outputs differ from the pure sources' ({compiled['digest'][:12]} != {pure['digest'][:12]})"
    return None


def _install(tmp: str, target: str) -> None:
    # A directory appears whole by rename, so a crashed build is never taken for a complete one.
    os.chmod(tmp, 0o755)  # noqa: S103  (mkdtemp makes it 0700; others running this checkout may read it)
    if os.path.isdir(target):  # a forced rebuild: move the old one out of the way first
        old = tempfile.mkdtemp(prefix=".old-", dir=NATIVE_DIR)
        os.rename(target, os.path.join(old, "build"))
        shutil.rmtree(old, ignore_errors=True)
    try:
        os.rename(tmp, target)
    except OSError:
        if not os.path.isdir(target):  # not just a concurrent build that finished first
            raise


def _prune(keep: str) -> None:
    """Remove other digests' builds, and unfinished ones old enough to be from a crashed build."""
    now = time.time()
    for name in os.listdir(NATIVE_DIR):
        path = os.path.join(NATIVE_DIR, name)
        if name == keep or not os.path.isdir(path):
            continue
        if name.startswith(".") and now - os.path.getmtime(path) < _STALE_TEMP_SECONDS:
            continue  # possibly a build running now
        shutil.rmtree(path, ignore_errors=True)


def build(force: bool = False) -> bool:
    """Compile the current sources unless already built; return whether the build is there now.

    Any problem (no C compiler, no Python headers, mypyc failing, outputs differing from the pure
    sources') prints one warning line and returns False: the pure-Python packages stay in use.
    """
    return compile_into_cache(sources_digest(), force=force)
