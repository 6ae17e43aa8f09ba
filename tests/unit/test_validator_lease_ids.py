"""The lease's names: one group per checkpoint, one static member per (host, local directory, checkpoint)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.settings import Settings
from app.validator.lease import client_id, instance_id, lease_group
from app.validator.owner import lease_config

pytestmark = pytest.mark.unit


def test_each_checkpoint_has_its_own_group() -> None:
    assert lease_group("s3://b/ck") == lease_group("s3://b/ck")
    assert lease_group("s3://b/ck") != lease_group("s3://b/ck2")
    assert lease_group("s3://b/ck").startswith("arbiter-validator-lease-")
    assert len(lease_group("s3://b/ck")) == len("arbiter-validator-lease-") + 16


def test_the_instance_is_the_same_driver_only_for_the_same_host_directory_and_checkpoint(tmp_path: Path) -> None:
    one = instance_id("h1", tmp_path / "var", "s3://b/ck")
    assert one == instance_id("h1", tmp_path / "var", "s3://b/ck")
    assert one == instance_id("h1", tmp_path / "x" / ".." / "var", "s3://b/ck")  # one directory, two spellings
    others = {instance_id("h2", tmp_path / "var", "s3://b/ck"), instance_id("h1", tmp_path / "var2", "s3://b/ck"),
              instance_id("h1", tmp_path / "var", "s3://b/ck2")}
    assert one not in others and len(others) == 3
    assert instance_id("a\0b", "c", "d") != instance_id("a", "b\0c", "d")  # fields cannot run into each other


def test_the_client_id_names_host_and_pid() -> None:
    assert client_id("host-a", 4242) == "arbiter-validator@host-a:pid4242"


def test_a_drivers_lease_config_follows_its_settings(tmp_path: Path) -> None:
    s = Settings(var_dir=tmp_path / "a", lease_session_timeout_ms=4000, topic_validator_leases="leases",
                 kafka_config={"security.protocol": "SSL", "linger.ms": "5"})
    c = lease_config(s, "s3://b/ck")
    assert (c.topic, c.session_timeout_ms, c.acquire_timeout_s) == ("leases", 4000, 8.0)
    assert c.kafka_config == {"security.protocol": "SSL"}  # connection options only, no producer tuning
    assert c.instance_id != lease_config(s.model_copy(update={"var_dir": tmp_path / "b"}), "s3://b/ck").instance_id
    assert lease_config(s.model_copy(update={"lease_acquire_timeout_s": 3.0}), "s3://b/ck").acquire_timeout_s == 3.0
