"""The documentation's code snippets, found by their title, so tests run them literally as printed (issue 39).

A runnable snippet is a fenced block with a title: ```` ```python title="consumer.py" ````. The site shows the title
above the block; a test takes the block with ``snippet("consumer.py")`` and runs its text unchanged (any address or
topic it needs comes from the environment, as a reader's own run would set it). ``tests/unit/test_docs_site.py``
holds every Python and SQL block of the docs to a title that some test names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: Pages not held to the rule: the benchmark diary quotes the commands and code of past runs as they were.
ARCHIVED = {"benchmarks.md"}
FENCE = re.compile(r"^(?P<indent>[ ]*)```(?P<lang>[\w-]*)(?P<attrs>[^\n]*)\n(?P<code>.*?)^(?P=indent)```[ ]*$",
                   re.M | re.S)
TITLE = re.compile(r'title="([^"]+)"')


@dataclass(frozen=True, slots=True)
class Snippet:
    """One fenced code block of a docs page."""

    page: str   # relative to docs/, or README.md
    lang: str
    title: str  # "" when the block has none
    code: str
    line: int


def snippets() -> list[Snippet]:
    """Return every fenced code block of the docs pages (Markdown under ``docs/``, then the README), in page order."""
    out = []
    for path in [*sorted(DOCS.rglob("*.md")), ROOT / "README.md"]:
        text = path.read_text("utf-8")
        for m in FENCE.finditer(text):
            title = TITLE.search(m.group("attrs"))
            indent = len(m.group("indent"))
            code = "".join(line[indent:] for line in m.group("code").splitlines(keepends=True))
            page = "README.md" if path.parent == ROOT else str(path.relative_to(DOCS))
            out.append(Snippet(page, m.group("lang"), title.group(1) if title else "", code,
                               text.count("\n", 0, m.start()) + 1))
    return out


def snippet(title: str) -> str:
    """Return the code of the one docs block titled ``title``, as printed; fail if none or several have it."""
    found = [s for s in snippets() if s.title == title]
    assert len(found) == 1, f"{len(found)} docs blocks are titled {title!r}"
    return found[0].code


def run_shell(title: str, env: dict[str, str], timeout: float = 600) -> str:
    """Run the docs' shell block ``title`` as printed, from the repository's root (where a reader runs it), with bash
    stopping at the first failing command or pipe; return its output, failing with it on a non-zero exit."""
    import subprocess

    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", snippet(title)], cwd=ROOT, env=env,  # noqa: S603, S607
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{title} exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout
