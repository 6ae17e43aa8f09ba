"""``Server-Timing`` (W3C) of a write answered after ``Prefer: wait``: how long producing, deciding and seeing took.

- ``produce``: from handing the command to the producer to the broker's acknowledgement (this process's clock).
- ``decide``: from that acknowledgement to the decision record's Kafka timestamp, set by the validator's producer as it
  wrote the event or rejection: the validator's wait for its micro-batch, the decision and its write. Two hosts'
  wall clocks when the validator runs elsewhere (clipped at 0); absent when the record has no timestamp.
- ``outcome``: from the acknowledgement to this process's outcome consumer handing the decision to the request
  (``decide`` plus the record's trip back). Absent when no decision came within the wait.
"""

from __future__ import annotations

from app.api.writes.summary import OutcomeSummary

HEADER = "Server-Timing"


def server_timing(produce_s: float, acked_ms: float, waited_s: float | None, outcome: OutcomeSummary | None) -> str:
    """Return the header's value: ``produce`` always, ``decide`` and ``outcome`` once ``outcome`` is known.

    ``acked_ms`` is the wall-clock time of the acknowledgement (ms since the epoch), ``waited_s`` the time from it
    to the decision's arrival (None without one).
    """
    parts = [f"produce;dur={produce_s * 1000:.1f}"]
    if outcome is not None:
        if outcome.written_ms is not None:
            parts.append(f"decide;dur={max(0.0, outcome.written_ms - acked_ms):.1f}")
        if waited_s is not None:
            parts.append(f"outcome;dur={waited_s * 1000:.1f}")
    return ", ".join(parts)
