"""A rules document's shape is bounded before anything walks it: no YAML anchors or aliases, nesting at most
``MAX_DOCUMENT_DEPTH``; both are 422 RULES_INVALID at ``PUT /rules`` and exit 1 at ``arbiter rules check``."""

from __future__ import annotations

import argparse
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.exceptions import StarletteDeprecationWarning

with warnings.catch_warnings():  # starlette 1.x nudges towards "httpx2"; httpx is what the project pins
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

from app.api.callers.identity import dev_token
from app.api.main import create_app
from app.cli.rules import _check
from app.settings import Settings
from commands.rules import RulesInvalid, compile_rules
from commands.rules.bounds import MAX_DOCUMENT_DEPTH

pytestmark = pytest.mark.unit

SETTINGS = Settings()
#: Levels of ten references each (the issue's probe had nine: 10^9 leaves once walked, hours of CPU); five here, so
#: that a regression fails on its assertion instead of hanging.
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(4)) + "rules: 1\ntypes: {}\n"
NESTED_10KB = "[" * 5000 + "]" * 5000


def nested(depth: int) -> str:
    """Return a valid rules document whose lists and maps nest exactly ``depth`` deep (in a schema's examples)."""
    inner: Any = 1
    for _ in range(depth - 4):  # under the document, types, t and create_schema: the lists, examples the first
        inner = [inner]
    return json.dumps({"rules": 1, "types": {"t": {"create_schema": {"examples": inner}}}})


def test_nesting_at_the_bound_compiles_and_one_deeper_is_refused() -> None:
    compile_rules(nested(MAX_DOCUMENT_DEPTH), version=1)
    with pytest.raises(RulesInvalid) as refused:
        compile_rules(nested(MAX_DOCUMENT_DEPTH + 1), version=1)
    assert refused.value.problems == (f"(document): line 1: lists and maps nested deeper than {MAX_DOCUMENT_DEPTH}",)


@pytest.mark.parametrize("text", [LAUGHS, "rules: 1\ntypes: &t {}\n", "rules: 1\nbase: &b {x: 1}\ntypes: {t: {<<: *b}}\n"])
def test_anchors_and_aliases_are_refused(text: str) -> None:
    with pytest.raises(RulesInvalid) as refused:
        compile_rules(text, version=1)
    assert "anchors and aliases" in refused.value.problems[0]


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    app = create_app(SETTINGS)
    app.state.ctx = None  # refused before a producer is needed
    yield TestClient(app, raise_server_exceptions=False)


@pytest.mark.parametrize(("body", "words"), [(NESTED_10KB, "nested deeper"), (LAUGHS, "anchors and aliases"),
                                             (nested(MAX_DOCUMENT_DEPTH + 1), "nested deeper")])
def test_put_rules_answers_422_problem_json(client: TestClient, body: str, words: str) -> None:
    token = dev_token(SETTINGS, "ops", scopes=("arbiter:rules",), ttl_s=60)
    r = client.put("/rules", content=body.encode(), headers={"Authorization": f"Bearer {token}",
                                                             "Content-Type": "application/yaml"})
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    problem = r.json()
    assert problem["code"] == "RULES_INVALID" and any(words in p for p in problem["problems"]), problem


@pytest.mark.parametrize(("text", "words"), [(NESTED_10KB, "nested deeper"), (LAUGHS, "anchors and aliases")])
def test_rules_check_of_a_file_reports_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                                   words: str) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    assert _check(argparse.Namespace(file=path)) == 1
    assert words in capsys.readouterr().err
