"""What the API lets through fits the validator's limits, so a request it accepts is never MALFORMED for size."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.api.callers.auth import PRINCIPAL_PATTERN
from app.api.models import IDEMPOTENCY_KEY_PATTERN, OBJECT_ID_PATTERN
from app.api.writes.submit import new_object_id
from commands import DEFAULT_LIMITS

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("pattern", [OBJECT_ID_PATTERN, IDEMPOTENCY_KEY_PATTERN, PRINCIPAL_PATTERN])
def test_the_longest_allowed_id_fits_max_id_bytes(pattern: str) -> None:
    m = re.search(r"\{([01]),(\d+)\}\$$", pattern)
    assert m is not None
    longest = int(m.group(2)) + (1 - int(m.group(1)))  # {0,n} after a first character: n + 1
    assert longest <= DEFAULT_LIMITS.max_id_bytes
    assert re.fullmatch(pattern, "x" * longest)
    assert not re.fullmatch(pattern, "x" * (longest + 1))


@pytest.mark.parametrize("pattern", [OBJECT_ID_PATTERN, PRINCIPAL_PATTERN])
@pytest.mark.parametrize("name", [".", "..", ".hidden"])
def test_ids_that_urls_would_rewrite_are_refused(pattern: str, name: str) -> None:
    assert not re.fullmatch(pattern, name)  # clients turn /objects/. into /objects: such an id could not be read


@pytest.mark.parametrize("pattern", [OBJECT_ID_PATTERN, IDEMPOTENCY_KEY_PATTERN, PRINCIPAL_PATTERN])
@given(data=st.data())
def test_every_allowed_id_fits_max_id_bytes(pattern: str, data: st.DataObject) -> None:
    value = data.draw(st.from_regex(pattern, fullmatch=True))
    assert len(value.encode("utf-8")) <= DEFAULT_LIMITS.max_id_bytes


def test_an_object_created_without_an_id_gets_one_per_principal_and_key() -> None:
    assert new_object_id("alice", "K") == new_object_id("alice", "K")  # a retry lands on the same object
    assert new_object_id("alice", "K") != new_object_id("bob", "K")
    assert new_object_id("alice", "K") != new_object_id("alice", "L")
    assert re.fullmatch(OBJECT_ID_PATTERN, new_object_id("alice", "K"))
