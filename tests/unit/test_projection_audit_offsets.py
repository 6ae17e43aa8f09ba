"""The audit trail has no holes: the projection refuses a forward jump, verify checks offsets run on, and an
operator's restart is a hashed entry of the chain (rocksdict on disk, no broker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from projections.audit import AuditProjection, verify
from projections.audit.chain import GENESIS, Entry, Head, entry_key, head_key, link, pack_entry, pack_head
from projections.audit.projection import AuditOffsetGap
from projections.audit.store import open_primary
from projections.runner import Item, Record

pytestmark = pytest.mark.unit


def _items(*offsets: int) -> list[Item]:
    return [Item(Record("events", 0, o, b"o", b"v%d" % o, 1_700_000_000_000 + o), None, "junk") for o in offsets]


def _chain_as_appended_before(path: Path, offsets: list[int]) -> None:
    """Write a chain as the audit projection before issue 24 appended it: any forward jump taken."""
    db = open_primary(path)
    h, seq = GENESIS, 0
    for seq, off in enumerate(offsets):
        e = Entry("events", 0, seq, off, 0, b"o", b"v")
        h = link(h, e)
        db[entry_key("events", 0, seq)] = pack_entry(h, e)
    db[head_key("events", 0)] = pack_head(Head(h, seq + 1, offsets[-1] + 1))
    db.close()


def test_verify_names_the_first_hole_in_a_chains_offsets(tmp_path: Path) -> None:
    """Offsets 0-2 then 500-501: every seq and hash is right, and it verified as intact."""
    _chain_as_appended_before(tmp_path / "audit", [0, 1, 2, 500, 501])
    report = verify(tmp_path / "audit")
    assert not report.ok
    (problem,) = report.problems
    assert (problem.kind, problem.seq, problem.offset) == ("hole", 3, 500)
    assert "offsets 3..499" in str(problem)


def test_a_chain_from_a_later_first_offset_is_whole(tmp_path: Path) -> None:
    """Retention may have deleted the start before the projection first ran: the chain starts where it starts."""
    _chain_as_appended_before(tmp_path / "audit", [40, 41, 42])
    report = verify(tmp_path / "audit")
    assert report.ok and report.starts == {("events", 0): 40}


def test_the_projection_refuses_a_forward_jump_and_appends_nothing_of_the_batch(tmp_path: Path) -> None:
    proj = AuditProjection(tmp_path / "audit", sync=False)
    proj.apply(_items(0, 1, 2))
    with pytest.raises(AuditOffsetGap) as gap:
        proj.apply(_items(3, 500, 501))
    assert gap.value.code == "AUDIT_OFFSET_GAP" and "offsets 4..499" in gap.value.message
    proj.close()
    report = verify(tmp_path / "audit")
    assert report.ok and report.entries == {("events", 0): 3}


def test_an_operator_restart_is_a_hashed_entry_and_the_chain_verifies_across_it(tmp_path: Path) -> None:
    path = tmp_path / "audit"
    proj = AuditProjection(path, sync=False)
    proj.apply(_items(0, 1, 2))
    proj.restart_at(("events", 0), 3, 500, "operator restart with --reset-out-of-range earliest")
    proj.apply(_items(500, 501))
    proj.close()
    reopened = AuditProjection(path, sync=False)
    assert reopened.start_offsets([("events", 0)]) == {("events", 0): 502}
    reopened.close()
    report = verify(path)
    assert report.ok, report.problems
    assert report.entries == {("events", 0): 6}
    (restart,) = report.restarts
    assert "record #3: resumed at offset 500, offsets from 3 never read" in restart

    # The restart entry is part of the chain: removing it (and renumbering nothing) breaks the chain.
    db = open_primary(path)
    del db[entry_key("events", 0, 3)]
    db.close()
    assert [p.kind for p in verify(path).problems] == ["missing"]


def _chain_with(path: Path, records: list[int | tuple[str, int]]) -> None:
    """Write a chain whose seqs, hashes and head are right: each record an offset, or ("restart", resume offset)."""
    from projections.audit.chain import RESTART_OFFSET, restart_value

    db = open_primary(path)
    h, next_offset = GENESIS, 0
    for seq, r in enumerate(records):
        if isinstance(r, tuple):
            e = Entry("events", 0, seq, RESTART_OFFSET, 0, None, restart_value(next_offset, r[1], "test", 0))
            next_offset = r[1]
        else:
            e = Entry("events", 0, seq, r, 0, b"o", b"v")
            next_offset = r + 1
        h = link(h, e)
        db[entry_key("events", 0, seq)] = pack_entry(h, e)
    db[head_key("events", 0)] = pack_head(Head(h, len(records), next_offset))
    db.close()


@pytest.mark.parametrize(("offsets", "seq", "offset"), [([0, 1, 2, 2, 3], 3, 2), ([0, 1, 2, 1], 3, 1),
                                                        ([5, 6, 0], 2, 0)])
def test_verify_names_a_repeated_or_backward_offset(tmp_path: Path, offsets: list[int], seq: int,
                                                    offset: int) -> None:
    """Every seq and hash is right; the offsets go back (a record twice, or history rewritten): not intact."""
    _chain_with(tmp_path / "audit", list(offsets))
    (problem,) = verify(tmp_path / "audit").problems
    assert (problem.kind, problem.seq, problem.offset) == ("hole", seq, offset)
    assert "out of order" in str(problem)


@pytest.mark.parametrize(("resumed", "words"), [(600, "offsets 500..599"), (400, "out of order"),
                                                (501, "offsets 500..500")])
def test_verify_holds_a_chain_to_the_offset_its_restart_records(tmp_path: Path, resumed: int, words: str) -> None:
    """A restart says "resumed at 500": records from anywhere else after it are a problem, named at the first."""
    _chain_with(tmp_path / "audit", [0, 1, 2, ("restart", 500), 500, 501])
    assert verify(tmp_path / "audit").ok
    _chain_with(tmp_path / "other", [0, 1, 2, ("restart", 500), resumed, resumed + 1])
    (problem,) = verify(tmp_path / "other").problems
    assert (problem.kind, problem.seq, problem.offset) == ("hole", 4, resumed) and words in str(problem)
