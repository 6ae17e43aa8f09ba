"""Optional compiled decision core (``core/``, Rust through PyO3): found, digested and loaded like the mypyc build.

``app.native.core_build.build()`` compiles ``core/`` with maturin into ``.cache/core/<digest>/``, the digest covering
every byte of the crate's sources plus the Python version, and installs it only if the corpus of
``app.native.core_check`` decides exactly as the pure domain through it. ``load(mode)`` returns the module when a
build exists for the crate's sources of this moment and ``mode`` (``ARBITER_CORE``) is ``auto``; otherwise None, and
the shard server decides every record in Python, always valid. ``status()`` says which path runs and why.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

from app.native.loader import ROOT, SUFFIX, files_digest

# A checkout holds core/ beside app/; an installed package (the Docker image) finds it under $ARBITER_HOME.
HOME = ROOT if os.path.isdir(os.path.join(ROOT, "core")) else os.environ.get("ARBITER_HOME", ROOT)
CORE_SRC = os.path.join(HOME, "core")
CORE_DIR = os.path.join(HOME, ".cache", "core")
MODULE = "arbiter_core"
_SOURCES = ("Cargo.toml", "Cargo.lock", "pyproject.toml")

_module: ModuleType | None = None
_reason = "not loaded yet"


def source_files(root: str = CORE_SRC) -> list[str]:
    """Return the crate's source files relative to ``root``, sorted: its manifests and every file under ``src/``."""
    found = [name for name in _SOURCES if os.path.isfile(os.path.join(root, name))]
    for dirpath, _, filenames in os.walk(os.path.join(root, "src")):
        rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
        found += [f"{rel}/{name}" for name in filenames]
    return sorted(found)


def sources_digest(root: str = CORE_SRC) -> str:
    """Return 16 hex digits of sha256 over the crate's sources and this Python's version and extension suffix."""
    h = files_digest(root, source_files(root))
    h.update(f"\0python {sys.version} {SUFFIX}".encode())
    return h.hexdigest()[:16]


def build_dir(digest: str | None = None) -> str:
    """Return the directory of the build for ``digest`` (default: the crate's sources as they are now)."""
    return os.path.join(CORE_DIR, digest or sources_digest())


def import_from(path: str) -> ModuleType:
    """Import the core's extension module from the build directory ``path`` (not cached in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(MODULE, os.path.join(path, MODULE + SUFFIX))
    if spec is None or spec.loader is None:
        raise ImportError(f"no {MODULE}{SUFFIX} in {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load(mode: str = "auto") -> ModuleType | None:
    """Return the verified build of the crate's current sources, or None (pure path; ``status()`` says why)."""
    global _module, _reason
    if mode == "off":
        _reason = "ARBITER_CORE=off"
        return None
    if _module is not None:
        return _module
    try:
        path = build_dir()
    except OSError as e:
        _reason = f"cannot read core/: {e}"
        return None
    if not os.path.isfile(os.path.join(path, MODULE + SUFFIX)):
        _reason = "no build for core/'s sources; run: arbiter native build"
        return None
    try:
        _module = import_from(path)
    except ImportError as e:
        _reason = f"the build does not import: {e}"
        return None
    _reason = "active"
    return _module


def status(mode: str = "auto") -> str:
    """Return "compiled core (<digest>): <what it decides>" or "Python fold only (<reason>)"."""
    module = load(mode)
    if module is None:
        return f"Python fold only ({_reason})"
    return f"compiled core ({os.path.basename(build_dir())}): {module.SPEC}; the rest falls back to the Python fold"
