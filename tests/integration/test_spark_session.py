"""The Spark session's own defaults: the FileSystem-based checkpoint manager for a local checkpoint location."""

from __future__ import annotations

import pytest

from app.spark_session import CHECKPOINT_FILE_MANAGER, FILESYSTEM_CHECKPOINTS, _is_local
from app.validator.codegen import FACTORY_MODE, WHOLE_STAGE

pytestmark = pytest.mark.integration


def test_a_local_checkpoint_gets_the_filesystem_based_manager(spark) -> None:  # noqa: ANN001
    # The session every validator test runs in: its checkpoints are local directories, so every recovery test
    # (kill -9, lost local state, replays) exercises this manager.
    assert spark.conf.get(CHECKPOINT_FILE_MANAGER) == FILESYSTEM_CHECKPOINTS


@pytest.mark.parametrize(("uri", "local"), [("/var/arbiter/ck", True), ("var/ck", True), ("file:///tmp/ck", True),
                                            ("hdfs://nn:8020/ck", False), ("s3a://bucket/ck", False)])
def test_only_local_locations_count_as_local(uri: str, local: bool) -> None:
    assert _is_local(uri) is local


@pytest.mark.parametrize("key", [FACTORY_MODE, WHOLE_STAGE])
def test_the_projection_mode_keys_are_spark_s_and_settable_at_run_time(spark, key: str) -> None:  # noqa: ANN001
    # build_query sets them on a running session (validator_codegen); Spark takes an unknown or misspelt key
    # silently and changes nothing, so hold the names to SQLConf's registered, non-static entries.
    assert spark.conf.isModifiable(key)
