"""Optional mypyc build of the pure domain and codec: the same sources, compiled, 1.5-1.8x faster per command.

``app.native.build.build()`` compiles a full copy of ``commands/`` and ``schemas/`` with mypyc into ``.cache/native/<digest>/``
beside the sources, the digest covering every byte of them plus the Python and mypy versions, and installs
it only if a corpus run through it gives exactly the pure sources' bytes. ``activate()`` (run by
``app/__init__`` in every process, Spark's Python workers included) makes both packages import from that
directory when it matches the sources of this moment, and only if neither package is imported yet, so
a process never mixes compiled and pure classes and a stale build is never used. Without a build (no C
compiler, ``ARBITER_NATIVE=off``) the pure-Python packages are used, and they are always valid.
"""

from __future__ import annotations

import copyreg
import hashlib
import importlib.machinery
import importlib.util
import os
import sys
from importlib.machinery import ExtensionFileLoader, ModuleSpec, PathFinder
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # kept out of the import: this module runs in every process
    from collections.abc import Callable, Sequence
    from types import ModuleType

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository: app/native/..
NATIVE_DIR = os.path.join(ROOT, ".cache", "native")
PACKAGES = ("commands", "schemas")
# What mypyc compiles, relative to ROOT (a directory: each .py in it), the rest being copied as plain Python.
# commands/errors.py stays interpreted: app/ and schemas.wire subclass ArbiterError, and a compiled class
# refuses methods called on an interpreted subclass (TypeError in ArbiterError.__init__).
COMPILED = ("commands/", "schemas/binary.py", "schemas/compiled.py", "schemas/codec.py", "schemas/wire.py",
            "schemas/records.py")
INTERPRETED = ("commands/errors.py",)
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]  # e.g. .cpython-311-x86_64-linux-gnu.so
_SKIP_DIRS = {"__pycache__"}

_active = False
_reason = "app.native.loader.activate() has not run"


def _source_files(root: str) -> list[str]:
    """Return the paths of every file of both packages under ``root``, relative and sorted, without bytecode."""
    found = []
    for package in PACKAGES:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, package)):
            dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
            rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
            found += [f"{rel}/{name}" for name in filenames if not name.endswith((".pyc", SUFFIX))]
    return sorted(found)


def _mypy_release() -> bytes:
    """Return mypy's version file as bytes (b"" without mypy): importing mypy would cost ~40 ms per process."""
    spec = importlib.util.find_spec("mypy")
    if spec is None or spec.origin is None:
        return b""
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py"), "rb") as f:
            return f.read()
    except OSError:
        return b""


def files_digest(root: str, files: Sequence[str]) -> hashlib._Hash:
    """Return a sha256 fed with each of ``files`` (relative to ``root``): its path, its length, its bytes."""
    h = hashlib.sha256()
    for rel in files:
        with open(os.path.join(root, rel), "rb") as f:
            data = f.read()
        h.update(b"%s\0%d\0" % (rel.encode(), len(data)))
        h.update(data)
    return h


def sources_digest(root: str = ROOT) -> str:
    """Return 16 hex digits of sha256 over both packages' files under ``root``, the Python version and mypy's."""
    h = files_digest(root, _source_files(root))
    h.update(f"\0python {sys.version} {SUFFIX}\0compiled {COMPILED} but {INTERPRETED}\0mypy ".encode())
    h.update(_mypy_release())
    return h.hexdigest()[:16]


def build_dir(digest: str | None = None, root: str = ROOT) -> str:
    """Return the directory of the build for ``digest`` (default: the sources under ``root`` as they are now)."""
    return os.path.join(root, ".cache", "native", digest or sources_digest(root))


def activate(root: str = ROOT) -> bool:
    """Load both packages from their build (``use_build``) if one exists for the sources now under ``root``; return whether."""
    global _active, _reason
    if _active:
        return True
    mode = os.environ.get("ARBITER_NATIVE", "").strip().lower()
    if mode == "off":
        _reason = "ARBITER_NATIVE=off"
        return False
    if mode not in ("", "auto"):  # a typo must not silently mean either; pure Python is always valid
        _reason = f"ARBITER_NATIVE={mode!r} is neither auto nor off"
        return False
    imported = [p for p in PACKAGES if p in sys.modules]
    if imported:
        _reason = f"{' and '.join(imported)} imported before app"
        return False
    try:
        path = build_dir(root=root)
    except OSError as e:
        _reason = f"cannot read the sources: {e}"
        return False
    if not os.path.isdir(path):
        _reason = "no build for these sources; run: arbiter native build"
        return False
    use_build(path)
    _active = True
    _reason = "active"
    return True


def use_build(path: str) -> None:
    """Load ``commands`` and ``schemas`` from the build in ``path`` from now on (the build check uses it directly).

    A finder rather than sys.path[0]: whatever later puts the source root first on sys.path (pytest does)
    cannot make the not-yet-imported package come from the sources while the other is compiled.
    """
    names = {*PACKAGES, *(n[:-len(SUFFIX)] for n in os.listdir(path) if n.endswith(SUFFIX))}  # + mypyc's shared lib
    sys.meta_path.insert(0, _BuildFinder(path, frozenset(names)))


class _BuildFinder:
    """Find both packages' modules in one build's directory only, and mypyc's shared library there too."""

    def __init__(self, path: str, names: frozenset[str]) -> None:
        self.path = path
        self.names = names

    def find_spec(self, fullname: str, path: Sequence[str] | None = None, target: object = None) -> ModuleSpec | None:
        top = fullname.partition(".")[0]
        if top not in self.names:
            return None
        spec = PathFinder.find_spec(fullname, [self.path] if top == fullname else path)
        if spec is not None and type(spec.loader) is ExtensionFileLoader and top in PACKAGES:
            spec.loader = _DataclassPickling(fullname, spec.loader.path)
        return spec


class _DataclassPickling(ExtensionFileLoader):
    """Load a compiled module, then have its frozen dataclasses pickle and copy as the pure ones do.

    mypyc's own ``__setstate__`` sets attributes one by one, which a frozen dataclass refuses
    (FrozenInstanceError in ``pickle.loads`` and ``copy.deepcopy``); these rebuild through the constructor.
    """

    def exec_module(self, module: ModuleType) -> None:
        super().exec_module(module)
        # A package's compiled init imports its submodules through mypyc's shared library, not this loader.
        prefix = module.__name__ + "."
        for name, loaded in list(sys.modules.items()):
            if loaded is module or name.startswith(prefix):
                for value in vars(loaded).values():
                    params = getattr(value, "__dataclass_params__", None)
                    if isinstance(value, type) and value.__module__ == name and params is not None and params.frozen:
                        copyreg.pickle(value, _reduce_dataclass)


def _reduce_dataclass(obj: Any) -> tuple[Callable[[type, dict[str, Any]], Any], tuple[type, dict[str, Any]]]:
    import dataclasses  # already imported by the compiled modules

    return _rebuild_dataclass, (type(obj), {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init})


def _rebuild_dataclass(cls: type, values: dict[str, Any]) -> Any:
    """Return ``cls(**values)``: how a compiled frozen dataclass is unpickled (see _DataclassPickling)."""
    return cls(**values)


def status() -> str:
    """Return "compiled (mypyc, <digest>)" or "pure Python (<reason>)", from where commands.decide was loaded."""
    module = sys.modules.get("commands.decide")
    if module is None:
        import commands.decide  # noqa: F401  (what status reports is where this import lands)

        module = sys.modules["commands.decide"]
    where = module.__file__ or ""
    if where.endswith(SUFFIX):
        return f"compiled (mypyc, {os.path.basename(os.path.dirname(os.path.dirname(where)))})"
    reason = _reason if not _active else f"build finder installed but commands.decide is {where}"
    return f"pure Python ({reason})"

