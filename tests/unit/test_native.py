"""The mypyc build writes exactly the pure sources' bytes, and is used only when it matches them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.native import loader as native
from app.native.build import build, missing_toolchain
from app.native.check import run
from commands import EventType, ReasonCode

pytestmark = pytest.mark.unit

# What one fresh interpreter ends up with. argv: a root to activate() (or "" for app's own import) and a case:
# "commands-first" imports commands before app, "off" keeps ARBITER_NATIVE=off, "typo" sets it to "of".
PROBE = """
import json, os, sys
root, case = sys.argv[1:]
if case == "commands-first":
    import commands
import app  # with a root to probe, ARBITER_NATIVE=off keeps this one from taking the real build
from app.native import loader as native
if root and case != "off":
    del os.environ["ARBITER_NATIVE"]
if case == "typo":
    os.environ["ARBITER_NATIVE"] = "of"
active = native.activate(root) if root else native.status().startswith("compiled")
import commands, schemas.codec
print(json.dumps({"active": active, "commands": commands.__file__, "status": native.status()}))
"""


def probe(root: str = "", case: str = "") -> dict[str, Any]:
    """Run PROBE in a fresh interpreter, from the repository root."""
    env = {k: v for k, v in os.environ.items() if k != "ARBITER_NATIVE"}
    if root or case == "off":
        env["ARBITER_NATIVE"] = "off"
    done = subprocess.run([sys.executable, "-c", PROBE, root, case], cwd=native.ROOT, env=env,
                          capture_output=True, text=True, check=True, timeout=120)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def corpus_in_subprocess(native_env: str | None) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "ARBITER_NATIVE"}
    if native_env is not None:
        env["ARBITER_NATIVE"] = native_env
    code = "import json, app; from app.native.check import report; print(json.dumps(report()))"
    done = subprocess.run([sys.executable, "-c", code], cwd=native.ROOT, env=env, capture_output=True, text=True,
                          check=True, timeout=300)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.fixture(scope="module")
def built() -> str:
    """The build for the current sources, compiled here if missing (~15 s); skipped only without a toolchain."""
    problem = missing_toolchain()
    if problem is not None:
        pytest.skip(f"cannot compile here: {problem}")
    assert build(), "the toolchain is there but the mypyc build failed (see the warning above)"
    return native.build_dir()


def test_compiled_build_writes_the_pure_sources_bytes(built: str) -> None:
    compiled = corpus_in_subprocess(None)
    pure = corpus_in_subprocess("off")
    for module, where in compiled["files"].items():
        assert where.startswith(built + os.sep) and where.endswith(native.SUFFIX), f"{module} is not compiled: {where}"
    for module, where in pure["files"].items():
        assert where.startswith(native.ROOT) and where.endswith(".py"), f"{module} is not pure: {where}"
    assert compiled["outcomes"] == pure["outcomes"]
    assert compiled["digest"] == pure["digest"]
    assert run()[0] == pure["digest"]  # and this process, compiled or not, agrees


def test_the_corpus_covers_every_path() -> None:
    digest, seen = run()
    # MISROUTED and UNAUTHENTICATED come from app.validator.decode (a record's partition and signature), not decide,
    # RULES_VERSION_UNKNOWN from the validator's rules versions, UNIQUE_VIOLATION and OBJECT_HELD from commands.unique
    outcomes = {t.value for t in EventType} | {r.value for r in ReasonCode
                                               if r not in (ReasonCode.MISROUTED, ReasonCode.UNAUTHENTICATED,
                                                            ReasonCode.RULES_VERSION_UNKNOWN,
                                                            ReasonCode.UNIQUE_VIOLATION, ReasonCode.OBJECT_HELD)}
    outcomes.discard(ReasonCode.UNSUPPORTED_SCHEMA.value)  # only undecodable records have it
    assert outcomes <= set(seen), outcomes - set(seen)
    assert {"undecodable MALFORMED", "undecodable UNSUPPORTED_SCHEMA", "recent 4", "recent 16", "pickled"} <= set(seen)
    assert seen[ReasonCode.DUPLICATE.value] >= 20 and seen[EventType.UPDATED.value] >= 200
    assert run(seed=8)[0] != digest


def test_importing_app_first_loads_the_compiled_modules(built: str) -> None:
    got = probe()
    assert got["active"] is True
    assert got["commands"].startswith(built + os.sep) and got["commands"].endswith(native.SUFFIX)
    assert got["status"] == f"compiled (mypyc, {os.path.basename(built)})"


def test_importing_commands_before_app_keeps_pure_python(built: str) -> None:
    got = probe(case="commands-first")
    assert got["commands"] == os.path.join(native.ROOT, "commands", "__init__.py")
    assert got["status"] == "pure Python (commands imported before app)"


def test_arbiter_native_off_keeps_pure_python(built: str) -> None:
    got = probe(case="off")
    assert got["commands"] == os.path.join(native.ROOT, "commands", "__init__.py")
    assert got["status"] == "pure Python (ARBITER_NATIVE=off)"


@pytest.fixture
def fake_root(tmp_path: Path) -> Path:
    """A copy of both packages with a stand-in build for them (plain .py files, tagged by a marker)."""
    for package in native.PACKAGES:
        shutil.copytree(Path(native.ROOT) / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__", f"*{native.SUFFIX}"))
    build = Path(native.build_dir(root=str(tmp_path)))
    for package in native.PACKAGES:
        shutil.copytree(tmp_path / package, build / package)
    return tmp_path


def test_a_build_for_the_current_sources_is_activated(fake_root: Path) -> None:
    got = probe(str(fake_root))
    assert got["active"] is True
    assert got["commands"] == native.build_dir(root=str(fake_root)) + "/commands/__init__.py"


def test_a_stale_build_is_not_used(fake_root: Path) -> None:
    decide = fake_root / "commands" / "decide.py"
    decide.write_text(decide.read_text() + "# changed\n")
    got = probe(str(fake_root))
    assert got["active"] is False
    assert got["status"] == "pure Python (no build for these sources; run: arbiter native build)"
    assert not got["commands"].startswith(str(fake_root))


def test_off_and_imported_win_over_a_current_build(fake_root: Path) -> None:
    assert probe(str(fake_root), case="off")["status"] == "pure Python (ARBITER_NATIVE=off)"
    got = probe(str(fake_root), case="typo")
    assert got["active"] is False and got["status"] == "pure Python (ARBITER_NATIVE='of' is neither auto nor off)"
    got = probe(str(fake_root), case="commands-first")
    assert got["active"] is False and got["status"] == "pure Python (commands imported before app)"
    assert not got["commands"].startswith(str(fake_root))


def test_the_digest_covers_data_files_and_ignores_bytecode(fake_root: Path) -> None:
    before = native.sources_digest(str(fake_root))
    (fake_root / "schemas" / "__pycache__").mkdir(exist_ok=True)
    (fake_root / "schemas" / "__pycache__" / "x.pyc").write_bytes(b"cache")
    assert native.sources_digest(str(fake_root)) == before
    ids = fake_root / "schemas" / "ids.json"
    ids.write_text(ids.read_text() + " ")
    assert native.sources_digest(str(fake_root)) != before
