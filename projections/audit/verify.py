"""``audit verify`` (recompute every chain, name the first broken record) and ``audit show`` (one object's history)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from rocksdict import Rdict

from commands import Event
from projections.audit import store
from projections.audit.chain import (
    GENESIS,
    Entry,
    Head,
    erasure_of,
    link,
    parse_chain_key,
    restart_of,
    unpack_entry,
)
from projections.audit.deploys import catalog_record
from projections.rocks import prefixed
from schemas import codec
from schemas.codec import DecodeError
from schemas.generations import generation_record
from schemas.rules_control import Deploy, Placed

TP = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Problem:
    """The first broken record of one chain: ``kind`` is tampered, missing, hole, head or erased."""

    topic: str
    partition: int
    kind: str
    seq: int
    offset: int | None
    message: str

    def __str__(self) -> str:
        at = f" offset {self.offset}" if self.offset is not None else ""
        return f"{self.topic}[{self.partition}] record #{self.seq}{at}: {self.kind}: {self.message}"


@dataclass
class VerifyReport:
    entries: dict[TP, int] = field(default_factory=dict)
    heads: dict[TP, str] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    starts: dict[TP, int] = field(default_factory=dict)       # the offset each chain starts at
    restarts: list[str] = field(default_factory=list)         # operator restarts recorded in the chains
    erased: dict[TP, int] = field(default_factory=dict)       # entries whose value was erased (issue 30)

    @property
    def ok(self) -> bool:
        return not self.problems


@contextmanager
def reader(path: Path) -> Iterator[Rdict]:
    """Open the audit store read-only beside a running audit projection."""
    if not (path / "CURRENT").exists():
        raise FileNotFoundError(f"no audit store at {path}")
    secondary = Path(tempfile.mkdtemp(prefix="audit-reader-"))
    db = store.open_reader(path, secondary)
    try:
        yield db
    finally:
        db.close()
        shutil.rmtree(secondary, ignore_errors=True)


def verify(path: Path) -> VerifyReport:
    """Recompute every chain from its genesis and compare with the stored hashes, seqs and heads; check that each
    chain's offsets run on without a hole from its first record, except across a recorded restart."""
    report = VerifyReport()
    with reader(path) as db:
        heads = store.heads(db)
        chains: dict[TP, list[tuple[bytes, bytes]]] = {}
        for k, v in prefixed(db, b"r"):
            chains.setdefault(parse_chain_key(k), []).append((k, v))
        for tp in sorted(set(chains) | set(heads)):
            _verify_chain(tp, chains.get(tp, []), heads.get(tp), report)
    return report


def _verify_chain(tp: TP, rows: list[tuple[bytes, bytes]], head: Head | None, report: VerifyReport) -> None:
    prev, expect, last_offset = GENESIS, 0, None
    next_offset: int | None = None  # the offset the next record must have; None before the chain's first record
    topic, partition = tp
    report.entries[tp] = len(rows)
    dropped: list[int] = []            # erased entries, each to be named by a later erasure entry
    recorded: dict[int, int] = {}      # erased seq -> seq of the erasure entry naming it
    for k, v in rows:
        seq = int.from_bytes(k[-8:], "big")
        try:
            stored, entry = unpack_entry(k, v)
            restart = restart_of(entry)
            erasure = erasure_of(entry)
        except ValueError as e:
            report.problems.append(Problem(topic, partition, "tampered", seq, None, f"unreadable entry ({e})"))
            return
        if seq != expect:
            after = f" after offset {last_offset}" if last_offset is not None else " at the start"
            report.problems.append(Problem(topic, partition, "missing", expect, None,
                                           f"records #{expect}..#{seq - 1} are gone{after}; next: offset {entry.offset}"))
            return
        if link(prev, entry) != stored:
            report.problems.append(Problem(topic, partition, "tampered", seq, None if entry.offset < 0 else entry.offset,
                                           "hash does not match the record's contents and its predecessor"))
            return
        if entry.erased is not None:
            dropped.append(seq)
        if erasure is not None:
            recorded.update((int(n), seq) for n in erasure["seqs"])  # type: ignore[attr-defined]
        elif restart is not None:
            resume_at = int(restart["to"])  # type: ignore[call-overload]
            report.restarts.append(f"{topic}[{partition}] record #{seq}: resumed at offset {resume_at}, offsets "
                                   f"from {restart.get('from')} never read ({restart.get('reason')})")
            next_offset = resume_at
        else:
            if next_offset is None:
                report.starts[tp] = entry.offset
            elif entry.offset != next_offset:
                report.problems.append(Problem(
                    topic, partition, "hole", seq, entry.offset,
                    f"offsets {next_offset}..{entry.offset - 1} are not in the chain and no restart is recorded: "
                    "records lost before the audit projection read them" if entry.offset > next_offset else
                    f"offset {entry.offset} follows offset {next_offset - 1}: out of order"))
                return
            next_offset, last_offset = entry.offset + 1, entry.offset
        prev, expect = stored, seq + 1
    if dropped:
        report.erased[tp] = len(dropped)
    unrecorded = [n for n in dropped if recorded.get(n, -1) <= n]
    if unrecorded:
        report.problems.append(Problem(topic, partition, "erased", unrecorded[0], None,
                                       "the record's value was dropped but no later erasure entry names it"))
        return
    if head is None:
        report.problems.append(Problem(topic, partition, "head", expect, None, "chain head is missing"))
        return
    report.heads[tp] = head.hash.hex()
    if head.next_seq != expect:
        after = f" after offset {last_offset}" if last_offset is not None else " at the start"
        report.problems.append(Problem(topic, partition, "missing", expect, None,
                                       f"records #{expect}..#{head.next_seq - 1} are gone{after}; head counts {head.next_seq}"))
    elif head.hash != prev:
        report.problems.append(Problem(topic, partition, "head", expect, None, "chain head hash does not match the last record"))
    elif next_offset is not None and head.next_offset != next_offset:
        report.problems.append(Problem(topic, partition, "head", expect, None,
                                       f"chain head resumes at offset {head.next_offset}, the chain ends before "
                                       f"offset {next_offset}"))


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One decision about an object, as audited."""

    occurred_at: datetime | None
    outcome: str          # ACCEPTED, REJECTED, UNDECODABLE, ERASED; DEPLOYED, CLAIM-LOST or PLACED for rules deploys;
    #                       PAUSED or RESCALED for a rescale's generation records
    what: str             # event type, reason code, or the decode error
    version: int | None
    command_id: str | None
    principal: str | None
    where: str
    detail: str = ""
    issuer: str | None = None  # the iss and jti of the token that sent the command (issue 27; None before it)
    jti: str | None = None

    def __str__(self) -> str:
        at = self.occurred_at.isoformat() if self.occurred_at else "-"
        ver = f"v{self.version}" if self.version is not None else "-"
        token = f" token={self.issuer}#{self.jti or '-'}" if self.issuer else ""
        return (f"{at}  {self.outcome:<11} {self.what:<16} {ver:<5} command={self.command_id or '-'} "
                f"{'deployed_by' if self.what == 'RULES' else 'by'}={self.principal or '-'}{token} at {self.where}"
                f"{'  ' + self.detail if self.detail else ''}")


def _history_entry(entry: Entry) -> HistoryEntry:
    where = f"{entry.topic}[{entry.partition}]@{entry.offset}"
    if entry.erased is not None:
        return HistoryEntry(None, "ERASED", "ERASED", None, None, None, where,
                            f"value erased (sha256 {entry.erased.digest.hex()[:16]}, {entry.erased.length} bytes)")
    deploy = catalog_record(entry.value)
    if isinstance(deploy, Deploy):  # a rules deploy's claim on the catalog: who deployed which version
        return HistoryEntry(deploy.deployed_at, "DEPLOYED", "RULES", deploy.version, None, deploy.principal, where,
                            f"digest {deploy.digest}", deploy.issuer)
    if isinstance(deploy, Placed):  # where its control records landed: from there on each shard decides under it
        offsets = " ".join(f"{deploy.topic}[{p}]@{o}" for p, o in sorted(deploy.offsets.items()))
        return HistoryEntry(deploy.placed_at, "PLACED", "RULES", deploy.version, None, deploy.principal, where,
                            f"digest {deploy.digest} control records {offsets}")
    generation = generation_record(entry.value)
    if generation is not None:  # a rescale's step: writes paused on a generation, or a new one current
        at = _instant(generation.at)
        return HistoryEntry(at, "PAUSED" if generation.paused else "RESCALED", "GENERATION", generation.number, None,
                            generation.by or None, where, f"commands topic {generation.topic}, {generation.partitions} "
                            f"partitions, checkpoint {generation.checkpoint}")
    try:
        out = codec.decode_outcome(entry.value or b"")
    except DecodeError as e:
        return HistoryEntry(None, "UNDECODABLE", e.reason.value, None, None, None, where, str(e))
    if isinstance(out, Event):
        return HistoryEntry(out.occurred_at, "ACCEPTED", out.type.value, out.version, out.command_id, out.principal,
                            where, issuer=out.issuer, jti=out.jti)
    return HistoryEntry(out.occurred_at, "REJECTED", out.reason.value, out.current_version, out.command_id,
                        out.principal, where, out.message, out.issuer, out.jti)


def _instant(text: str) -> datetime | None:
    """Return the ISO 8601 instant ``text`` names, or None (empty or not one: shown as ``-``, never a crash)."""
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def _claims_that_won(entries: list[HistoryEntry]) -> list[HistoryEntry]:
    """Mark the rules claims (in catalog order) that did not win as ``CLAIM-LOST``: as ``app.rules.catalog.winners``,
    the first claim of ``previous + 1`` wins, and any other (a racing deploy refused ``RULES_CONFLICT``, a stray
    number) never became a version. The audit keeps no record headers, so it cannot tell a forged claim: the
    catalog's own reading (``arbiter rules show --all``) checks signatures."""
    last = 0
    out: list[HistoryEntry] = []
    for h in entries:
        if h.outcome == "DEPLOYED":
            if h.version == last + 1:
                last += 1
            else:
                h = replace(h, outcome="CLAIM-LOST", detail=f"{h.detail}; not version {last + 1}, the next one: it "
                            "never became a version")
        out.append(h)
    return out


def history(path: Path, object_id: str) -> list[HistoryEntry]:
    """Return every audited decision about ``object_id``, oldest command first."""
    prefix = b"x" + object_id.encode() + b"\x00"
    out: list[HistoryEntry] = []
    with reader(path) as db:
        for ek, raw in store.indexed(db, prefix):
            try:
                _, entry = unpack_entry(ek, raw)
            except ValueError as e:
                out.append(HistoryEntry(None, "UNREADABLE", "TAMPERED", None, None, None, ek.hex(), str(e)))
                continue
            out.append(_history_entry(entry))
    out = _claims_that_won(out)
    # Each command's issued_at orders accepted and rejected commands alike (a client retry carries its first
    # attempt's issued_at, so it sorts there); ties keep index order: events topic first, then chain order.
    return sorted(out, key=lambda h: (h.occurred_at is None, h.occurred_at.timestamp() if h.occurred_at else 0.0))
