"""The PostgreSQL writer's write-behind: order, merging while the server is busy, errors never lost."""

from __future__ import annotations

import threading

import pytest

from projections.db.view import ObjectView
from projections.postgres.write_behind import Batch, WriteBehind

pytestmark = pytest.mark.unit


def v(version: int) -> ObjectView:
    return ObjectView({"n": version}, version, owner="alice")


class Server:
    """A fake ``write`` that blocks until released, recording what it was given."""

    def __init__(self) -> None:
        self.written: list[Batch] = []
        self.gate = threading.Event()
        self.fail: Exception | None = None

    def write(self, batch: Batch) -> None:
        assert self.gate.wait(10)
        if self.fail is not None:
            raise self.fail
        self.written.append(batch)


def test_batches_arriving_while_one_is_written_go_in_as_one_later_transaction() -> None:
    server = Server()
    wb = WriteBehind(server.write, max_rows=100, name="t")
    wb.put({"a": v(1)}, {("e", 0): 1}, {})
    wb.put({"a": v(2), "b": v(1)}, {("e", 0): 2}, {})
    wb.put({"a": v(3)}, {("e", 0): 3, ("e", 1): 1}, {"g": "{}"})
    assert wb.holds(["a"]) and wb.holds(["b"]) and not wb.holds(["c"])
    server.gate.set()
    wb.flush()
    assert [(b.views, b.offsets, b.gaps) for b in server.written] == [
        ({"a": v(1)}, {("e", 0): 1}, {}),
        ({"a": v(3), "b": v(1)}, {("e", 0): 3, ("e", 1): 1}, {"g": "{}"})]
    assert not wb.holds(["a", "b"])
    wb.close()


def test_a_failed_batch_is_raised_by_the_next_call_and_what_was_folded_after_it_is_dropped() -> None:
    server = Server()
    wb = WriteBehind(server.write, max_rows=100, name="t")
    server.fail = RuntimeError("server gone")
    wb.put({"a": v(1)}, {("e", 0): 1}, {})
    wb.put({"a": v(2)}, {("e", 0): 2}, {})  # merged, waiting
    server.gate.set()
    with pytest.raises(RuntimeError, match="server gone"):
        wb.flush()
    server.fail = None
    wb.flush()
    assert server.written == [], "the batch folded after the failed one must not be written"
    wb.close()


def test_a_full_merged_batch_waits_for_the_one_in_flight() -> None:
    server = Server()
    wb = WriteBehind(server.write, max_rows=2, name="t")
    wb.put({"a": v(1)}, {}, {})
    threading.Timer(0.2, server.gate.set).start()
    wb.put({"b": v(1), "c": v(1)}, {}, {})  # reaches max_rows: blocks until the first is written, then starts
    assert [list(b.views) for b in server.written] == [["a"]]
    wb.close()
    assert [list(b.views) for b in server.written] == [["a"], ["b", "c"]]
