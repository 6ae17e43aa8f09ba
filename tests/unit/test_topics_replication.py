"""The topic tool's replication rule: on a multi-broker cluster a topic is created with a replication factor of at
least min.insync.replicas + 1; one broker (the embedded default) replicates nothing and is never refused."""

from __future__ import annotations

import pytest

from app.settings import Settings
from app.topics import replication_problem

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("rf", "isr", "brokers", "refused"), [
    (1, 1, 1, False),   # the embedded broker
    (3, 3, 1, False),   # one broker: nothing to check here (the broker refuses RF 3 itself)
    (2, 1, 3, False),   # boundary: RF = min.insync + 1
    (1, 1, 3, True),    # one past: every acknowledged record on one broker
    (3, 2, 3, False),   # production's 3 and 2
    (3, 3, 3, True),    # RF = min.insync: one broker lost stops acks=all writes
    (2, 2, 2, True),
])
def test_a_multi_broker_cluster_refuses_rf_below_min_insync_plus_one(rf: int, isr: int, brokers: int,
                                                                      refused: bool) -> None:
    problem = replication_problem(Settings(replication_factor=rf, min_insync_replicas=isr), brokers)
    assert (problem is not None) == refused
    if refused:
        assert problem is not None and f"ARBITER_REPLICATION_FACTOR={rf}" in problem and f"{brokers} brokers" in problem
