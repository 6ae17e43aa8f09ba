"""Topics that already exist, on the real broker: settings that would lose commands are refused or raised."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka.admin import NewTopic

from app.settings import Settings
from app.topics import TopicUnsafe, admin, describe_configs, ensure_topics

pytestmark = pytest.mark.integration


def _own_topics(base_settings: Settings, **extra: object) -> Settings:
    tag = uuid.uuid4().hex[:10]
    return base_settings.model_copy(update={"topic_commands": f"commands-{tag}", "topic_events": f"events-{tag}",
                                            "topic_rejections": f"rejections-{tag}", **extra})


def _precreate(s: Settings, config: dict[str, str]) -> None:
    """Create the commands topic as an operator might have, before Arbiter first starts."""
    client = admin(s.kafka_bootstrap)  # kept referenced until its futures are done
    for f in client.create_topics([NewTopic(s.topic_commands, s.partitions, 1, config=config)]).values():
        f.result(timeout=30)
    # The create is acknowledged before every metadata answer lists the topic; ensure_topics must see it as existing.
    deadline = time.monotonic() + 30
    while s.topic_commands not in client.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{s.topic_commands} never appeared in the broker's metadata"
        time.sleep(0.1)


def _config(s: Settings, key: str) -> str:
    client = admin(s.kafka_bootstrap)
    return describe_configs(client, [s.topic_commands])[s.topic_commands][key].value


def test_a_compacted_commands_topic_is_refused_by_name(base_settings: Settings) -> None:
    s = _own_topics(base_settings)
    _precreate(s, {"cleanup.policy": "compact"})
    with pytest.raises(TopicUnsafe, match=f"topic '{s.topic_commands}' has cleanup.policy=compact") as e:
        ensure_topics(s)
    assert e.value.code == "TOPIC_UNSAFE"
    assert _config(s, "cleanup.policy") == "compact"  # refused, not changed behind the operator's back


def test_a_shorter_or_size_bounded_retention_is_raised_to_the_setting(base_settings: Settings) -> None:
    s = _own_topics(base_settings)
    _precreate(s, {"retention.ms": "60000", "retention.bytes": str(64 * 1024 * 1024)})
    ensure_topics(s)
    assert _config(s, "retention.ms") == str(s.retention_ms)
    assert _config(s, "retention.bytes") == "-1"
    forever = _own_topics(base_settings)
    _precreate(forever, {"retention.ms": "-1"})
    ensure_topics(forever)
    assert _config(forever, "retention.ms") == "-1"  # keeping commands forever is kept


def test_fewer_replicas_or_in_sync_replicas_than_the_settings_ask_are_refused(base_settings: Settings) -> None:
    s = _own_topics(base_settings, replication_factor=2)
    _precreate(s, {})
    with pytest.raises(TopicUnsafe, match=r"1 replica\(s\) per partition, below ARBITER_REPLICATION_FACTOR=2"):
        ensure_topics(s)
    isr = _own_topics(base_settings, min_insync_replicas=2)
    _precreate(isr, {"min.insync.replicas": "1"})
    with pytest.raises(TopicUnsafe, match="min.insync.replicas=1, below ARBITER_MIN_INSYNC_REPLICAS=2"):
        ensure_topics(isr)


def test_new_topics_are_led_when_setup_returns(base_settings: Settings) -> None:
    """Issue 38 item 2: a create is acknowledged before its partitions have leaders, and the watermark query that
    ``arbiter kafka topics`` makes at once failed NOT_LEADER_FOR_PARTITION on an empty broker. Setup now returns
    only once every partition is led, so the describe right after it answers (many partitions widen the window)."""
    from app.topics import describe

    s = _own_topics(base_settings, partitions=48)
    created = ensure_topics(s)
    assert set(created) >= {s.topic_commands, s.topic_events, s.topic_rejections}
    topics = admin(s.kafka_bootstrap).list_topics(timeout=10).topics
    for name in (s.topic_commands, s.topic_events, s.topic_rejections):
        leaders = [p.leader for p in topics[name].partitions.values()]
        assert len(leaders) == 48 and min(leaders) >= 0, (name, leaders)
    assert [(t.partitions, t.messages) for t in describe(s)] == [(48, 0)] * 3


def test_waiting_for_leaders_is_bounded(base_settings: Settings) -> None:
    """A topic that never gets a leader (here: never created) ends the wait with BrokerUnavailable, not a hang."""
    from app.errors import BrokerUnavailable
    from app.topics import wait_for_leaders

    started = time.monotonic()
    with pytest.raises(BrokerUnavailable, match="have no leader after 1 s"):
        wait_for_leaders(admin(base_settings.kafka_bootstrap), [f"absent-{uuid.uuid4().hex[:8]}"], timeout_s=1.0)
    assert time.monotonic() - started < 15
