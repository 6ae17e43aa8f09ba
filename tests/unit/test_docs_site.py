"""The documentation site (issue 39): it builds with no warning or broken link, its reference pages and numbers
are the code's, every runnable snippet is run by a test, and the README stays short and shows the same picture."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from app.limits import size_limits
from app.settings import Settings
from tests.docs_snippets import ARCHIVED, DOCS, ROOT, snippets

pytestmark = pytest.mark.unit
RUNNABLE = {"python", "py", "sql"}


def _gen_docs():  # noqa: ANN202 - the module
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the site once, strictly: any warning (a broken link or anchor, a page left out of the nav) fails."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})  # Material's notice about MkDocs 2
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    return out


def test_the_site_builds_strictly_with_every_page(site: Path) -> None:
    for page in ("getting-started", "concepts", "api", "consuming", "operations/running", "security", "cluster",
                 "performance", "benchmarks", "reference/settings", "reference/limits", "reference/codes",
                 "reference/cli"):
        assert (site / page / "index.html").is_file(), page
    gen = _gen_docs()
    leftovers = [str(p.relative_to(site)) for p in site.rglob("*.html") if gen.GEN.search(p.read_text("utf-8"))]
    assert leftovers == []


def test_the_reference_pages_hold_the_codes_figures(site: Path) -> None:
    """Generated, not typed: the figures on the pages are the ones the code computes now."""
    limits = (site / "reference" / "limits" / "index.html").read_text("utf-8")
    sizes = size_limits(Settings().max_message_bytes)
    for figure in (sizes.max_record_bytes, sizes.max_document_bytes, sizes.keep_bytes):
        assert f"{figure:,}" in limits
    settings = (site / "reference" / "settings" / "index.html").read_text("utf-8")
    assert all(f"ARBITER_{name.upper()}" in settings for name in Settings.model_fields)
    codes = (site / "reference" / "codes" / "index.html").read_text("utf-8")
    from app.api.problems import STATUS
    assert all(str(code) in codes for code in STATUS)
    cli = (site / "reference" / "cli" / "index.html").read_text("utf-8")
    assert "arbiter backup" in cli and "--until-caught-up" in cli


def test_an_unknown_generated_name_fails_the_build() -> None:
    gen = _gen_docs()
    assert gen.render("at most {{gen limits.max_document_bytes}} bytes") == \
        f"at most {size_limits(Settings().max_message_bytes).max_document_bytes:,} bytes"
    with pytest.raises(KeyError, match="limits.no_such_limit"):
        gen.render("{{gen limits.no_such_limit}}", "page.md")


def test_no_derived_size_is_typed_by_hand() -> None:
    """The stale numbers of issue 39 came from copying computed limits into prose: only {{gen NAME}} may say them.

    Refused: any figure the limits chain derives, and any byte count within 8 KiB of ``max_message_bytes`` (where
    every record size lives: a stale copy of one is there too)."""
    m = Settings().max_message_bytes
    names = ("max_record_bytes", "max_document_bytes", "max_object_body_bytes", "identity_bytes",
             "parked_max_message_bytes", "sink.max.request.size", "api_producer.message.max.bytes")
    derived = {int(_gen_docs().values()[f"limits.{name}"].replace(",", "")) for name in names}
    typed = []
    pages = [p for p in DOCS.rglob("*.md") if str(p.relative_to(DOCS)) not in ARCHIVED] + [ROOT / "README.md"]
    for page in pages:
        for number in re.findall(r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?![\d,])|(?<![\w.,])\d{4,}(?![\w,])",
                                 page.read_text("utf-8")):
            value = int(number.replace(",", ""))
            if value in derived or abs(value - m) <= 8192:
                typed.append((str(page.relative_to(ROOT)), number))
    assert typed == [], "write {{gen limits.NAME}} (python scripts/gen_docs.py --names lists them)"


def test_every_runnable_snippet_is_run_by_a_test() -> None:
    tests = "\n".join(p.read_text("utf-8") for p in (ROOT / "tests").rglob("*.py"))
    found = [s for s in snippets() if s.lang in RUNNABLE and s.page not in ARCHIVED]
    assert len(found) >= 5
    untitled = [f"{s.page}:{s.line}" for s in found if not s.title]
    assert untitled == [], "give each block a title=\"…\" and run it with tests.docs_snippets.snippet(title)"
    unrun = [f"{s.page}:{s.line} {s.title}" for s in found if f'snippet("{s.title}")' not in tests]
    assert unrun == []


#: The docs' shell blocks no test runs, each with why: every other shell block is run as printed by the test that
#: names its title (``snippet("<title>")``), against a live pipeline.
NOT_RUN_HERE = {
    "quick-start.sh": "./dev run and ./dev test themselves: CI runs ./dev test (.ci/run), and "
                      "tests/integration/test_pipeline_e2e.py runs what ./dev run starts (arbiter run)",
    "keycloak.sh": "needs a Keycloak realm and its client secret; none runs here (the API page says it was not run)",
    "cluster-validator.sh": "needs a Spark standalone master and HDFS at the hosts it names (docs/cluster.md's proof "
                            "runs scripts/validator_cluster_proof.py on a local cluster)",
    "compose-walkthrough.sh": "Docker: scripts/compose_check/flow.py follows these steps against docker compose in "
                              "the compose check, CI's step after ./dev test",
    "compose-reset.sh": "Docker, and git pull: scripts/compose_check/flow.py keeps the data volume out with tar",
    "verify-and-what-if.sh": "candidate.yaml is the reader's own candidate; tests/integration/test_verify_run.py runs "
                             "archive run --once, verify replay and rules what-if on a run's history",
    "rescale.sh": "rescales a live pipeline: tests/integration/test_rescale.py runs arbiter rescale under load",
    "drill.sh": "the production-shape drill is a script, not a timed test: its --check form is CI's own step in "
                ".ci/run, after the e2e step",
}


def test_every_shell_block_is_run_as_printed_or_says_why_not() -> None:
    tests = "\n".join(p.read_text("utf-8") for p in (ROOT / "tests").rglob("*.py"))
    found = [s for s in snippets() if s.lang in {"bash", "sh", "shell", "console"} and s.page not in ARCHIVED]
    assert len(found) >= 8
    untitled = [f"{s.page}:{s.line}" for s in found if not s.title]
    assert untitled == [], "give each shell block a title=\"…\": run it with run_shell(title), or add it to NOT_RUN_HERE"
    unrun = [f"{s.page}:{s.line} {s.title}" for s in found
             if s.title not in NOT_RUN_HERE and f'snippet("{s.title}")' not in tests
             and f'run_shell("{s.title}"' not in tests]
    assert unrun == []
    assert {s.title for s in found} >= set(NOT_RUN_HERE), "NOT_RUN_HERE names a block the docs no longer have"
    # a block printed without a language is still a shell block if it runs arbiter: it must say so
    bare = [f"{s.page}:{s.line}" for s in snippets() if s.lang == "" and s.page not in ARCHIVED
            and re.search(r"^(\.venv/bin/)?arbiter ", s.code, re.M)]
    assert bare == [], "mark shell blocks ```bash"
    # the CLI as a reader of a fresh clone has it: .venv/bin/arbiter (./dev prints that too), never a bare arbiter
    bare_cli = [f"{s.page}:{s.line}" for s in found if re.search(r"(^|[;&|(] *)arbiter ", s.code, re.M)
                and s.title not in {"compose-walkthrough.sh", "compose-reset.sh"}]
    assert bare_cli == []


def _mermaid(text: str) -> list[str]:
    return re.findall(r"^```mermaid\n(.*?)^```", text, flags=re.M | re.S)


def test_the_readme_is_short_and_shows_the_docs_picture() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    assert len(readme.splitlines()) <= 100, "the README is what Arbiter is, the quick start, the picture and links"
    pictures = {tuple(_mermaid(readme)), tuple(_mermaid((DOCS / "index.md").read_text("utf-8"))),
                tuple(_mermaid((DOCS / "concepts" / "architecture.md").read_text("utf-8")))}
    assert len(pictures) == 1 and len(next(iter(pictures))) == 1, "one diagram, the same in all three"
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert links and [link for link in links if not (ROOT / link).is_file()] == []


def _parses(line: str) -> str:
    """Return "" if ``line`` (an ``arbiter …`` command as the docs print it) parses with the CLI's own parser, or
    names a command whose required arguments it leaves out; else argparse's complaint."""
    from app.cli import build_parser

    words = [re.sub(r"^<[^>]+>$", "x", w) for w in shlex.split(line)[1:]]
    words = ["1" if re.fullmatch(r"[A-Z]{1,4}", w) else w for w in words]  # N, S, TEXT, DIR: placeholders
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            build_parser().parse_args(words)
    except SystemExit:
        complaint = err.getvalue()
        if "the following arguments are required" not in complaint and "invalid choice: 'x'" not in complaint:
            return complaint.strip().splitlines()[-1]
    return ""


def test_every_arbiter_command_the_docs_print_parses() -> None:
    """A flag renamed or a choice dropped in app/cli/ shows here, not in a reader's terminal."""
    spans = set()
    for page in [p for p in DOCS.rglob("*.md") if str(p.relative_to(DOCS)) not in ARCHIVED] + [ROOT / "README.md"]:
        text = page.read_text("utf-8")
        spans |= {m for m in re.findall(r"`(arbiter [^`]+)`", text) if not re.search(r"[|\[…=]|\.\.\.", m)}
        for s in snippets():
            if s.lang in {"bash", "sh"}:
                spans |= {"arbiter " + part.split("arbiter ", 1)[1]
                          for line in s.code.splitlines()
                          for part in re.split(r"&&|;|\|\|", line.split(" #")[0])
                          if re.search(r"(^|/| )arbiter ", part)}
    assert len(spans) > 20
    refused = {line: why for line in sorted(spans) if (why := _parses(line))}
    assert refused == {}
    assert _parses("arbiter load --via kafka")  # the check itself: a choice the parser does not have
