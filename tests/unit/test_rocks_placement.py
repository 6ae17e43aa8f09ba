"""Where the rocksdb backend's shards live on a cluster: tasks per batch, the host's own rocks dir, moves counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.settings import Settings
from app.validator.rocks.query import shard_tasks
from app.validator.rocks.shard import host_settings, rocks_root
from bench.validator.cluster import ShardOpen, moves

pytestmark = pytest.mark.unit


def test_local_mode_coalesces_to_the_cores() -> None:
    assert shard_tasks(Settings(partitions=8), "local[2]", 2) == 2


def test_a_cluster_gets_one_task_per_partition_so_each_keeps_its_executor() -> None:
    assert shard_tasks(Settings(partitions=8), "spark://10.0.0.1:7077", 2) == 8
    assert shard_tasks(Settings(partitions=8), "yarn", 16) == 8


def test_an_explicit_shard_tasks_wins_everywhere() -> None:
    assert shard_tasks(Settings(partitions=8, shard_tasks=3), "spark://h:7077", 2) == 3
    assert shard_tasks(Settings(partitions=8, shard_tasks=3), "local[2]", 2) == 3


def test_the_hosts_own_rocks_dir_wins_over_the_drivers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    driver = Settings(var_dir=tmp_path / "driver-var")
    monkeypatch.delenv("ARBITER_ROCKS_DIR", raising=False)
    assert host_settings(driver) is driver
    monkeypatch.setenv("ARBITER_ROCKS_DIR", str(tmp_path / "host-disk"))
    here = host_settings(driver)
    assert rocks_root(here, "hdfs://nn/ckpt").parent == tmp_path / "host-disk"
    assert rocks_root(driver, "hdfs://nn/ckpt").parent == tmp_path / "driver-var" / "rocks"
    assert here.var_dir == driver.var_dir and here.partitions == driver.partitions


def _open(server: str, partition: int, batch: int) -> ShardOpen:
    return ShardOpen(server, partition, batch, "changelogs", 10, 100)


def test_a_move_is_an_open_on_another_host_not_a_first_open_or_a_reopen_on_the_same_host() -> None:
    opens = [_open("shards-aaaa-0", 0, 0), _open("shards-bbbb-1", 1, 0),  # first opens: not moves
             _open("shards-aaaa-0", 0, 3),                                # reopened on the same host: not a move
             _open("shards-bbbb-0", 0, 5),                                # host aaaa -> bbbb: a move
             _open("shards-aaaa-0", 0, 9)]                                # and back: a move
    assert [(o.partition, o.batch) for o in moves(opens)] == [(0, 5), (0, 9)]
