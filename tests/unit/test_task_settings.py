"""What the validator ships to Spark tasks carries no secret (issue 25): the API's signing secret, the PostgreSQL
DSN and librdkafka's passwords stay on the driver."""

from __future__ import annotations

import pickle

import pytest
from pydantic import SecretStr
from pyspark import cloudpickle

from app.settings import Settings
from app.validator.rocks.query import ShardTasks
from app.validator.rocks.wire import settings_bytes, settings_from
from app.validator.spark.processor import ValidatorProcessor

pytestmark = pytest.mark.unit

SECRETS = ("signing-secret-0123456789abcdef0123456789", "pg-password-s3cr3t", "sasl-password-s3cr3t")


def secret_settings() -> Settings:
    return Settings(auth_secret=SecretStr(SECRETS[0]),
                    postgres_dsn=SecretStr(f"postgresql://arbiter:{SECRETS[1]}@db/arbiter"),
                    kafka_config={"sasl.password": SECRETS[2], "security.protocol": "SASL_SSL"})


@pytest.mark.parametrize("task", [lambda s: ShardTasks(s, "/tmp/checkpoint"), ValidatorProcessor],  # noqa: S108
                         ids=["rocksdb ShardTasks", "spark ValidatorProcessor"])
def test_what_is_pickled_into_tasks_holds_no_secret(task: object) -> None:
    shipped = task(secret_settings())  # type: ignore[operator]
    for dump in (pickle.dumps(shipped), cloudpickle.dumps(shipped)):
        for secret in SECRETS:
            assert secret.encode() not in dump, f"{secret!r} is pickled into the task"


def test_shard_servers_get_no_secret_and_keep_the_rest() -> None:
    s = secret_settings()
    wire = settings_bytes(s)
    assert not any(secret.encode() in wire for secret in SECRETS)
    back = settings_from(wire)
    assert (back.partitions, back.rocks_memory_mb, back.dedup_ttl_ms) == (s.partitions, s.rocks_memory_mb, s.dedup_ttl_ms)
