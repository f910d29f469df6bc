"""pulllog's Admin client against a real broker: topics, partitions, configs and offsets.

Records are produced with confluent-kafka (librdkafka), an independent client, so the
offsets and timestamps the Admin reports are checked against data it did not write.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Sequence

import confluent_kafka
import pytest

from pulllog.client.admin import (
    Admin,
    AlterConfigOp,
    ConfigResource,
    ConfigSource,
    ListedOffset,
    NewTopic,
    OffsetSpec,
)
from pulllog.client.errors import (
    BrokerUnreachableError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    KafkaError,
    TopicAlreadyExistsError,
    UnknownTopicError,
)
from pulllog.client.types import TopicPartition
from pulllog.testing import BrokerThread

T0 = 1714564800000  # 2024-05-01T12:00:00.000Z


@pytest.fixture
async def admin(pulllog_broker: BrokerThread) -> AsyncIterator[Admin]:
    async with Admin(pulllog_broker.bootstrap_servers) as client:
        yield client


def produce(broker: BrokerThread, topic: str, partition: int, timestamps: Sequence[int]) -> None:
    """One record per timestamp, in order, through librdkafka."""
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    for i, ts in enumerate(timestamps):
        producer.produce(topic, value=b"value-%d" % i, partition=partition, timestamp=ts)
    assert producer.flush(10) == 0


def overrides(configs: dict) -> dict[str, str]:
    return {name: e.value for name, e in configs.items() if e.is_override}


# ---------------------------------------------------------------------------- create_topics


async def test_create_topic_with_partitions_and_configs(admin: Admin) -> None:
    created = await admin.create_topic("events", 3, configs={"retention.ms": "86400000"})

    assert (created.name, created.partitions, created.replication_factor) == ("events", 3, 1)
    assert created.topic_id is not None
    configs = await admin.describe_configs(ConfigResource.topic("events"))
    assert overrides(configs) == {"retention.ms": "86400000"}


async def test_create_topic_without_a_partition_count_uses_the_broker_default(tmp_path) -> None:
    with BrokerThread(tmp_path / "data", properties={"num.partitions": "4"}) as broker:
        async with Admin(broker.bootstrap_servers) as admin:
            created = await admin.create_topic("defaults")
            assert created.partitions == 4
            assert [(t.name, t.partitions) for t in await admin.list_topics()] == [("defaults", 4)]


async def test_create_topics_creates_several_at_once(admin: Admin) -> None:
    await admin.create_topics([NewTopic("a", 1), "b", NewTopic("c", 2, configs={"cleanup.policy": "compact"})])

    assert [(t.name, t.partitions) for t in await admin.list_topics()] == [("a", 1), ("b", 1), ("c", 2)]


async def test_create_topic_validate_only_creates_nothing(admin: Admin) -> None:
    would = await admin.create_topic("dry-run", 5, validate_only=True)

    assert (would.name, would.partitions, would.topic_id) == ("dry-run", 5, None)
    assert await admin.list_topics() == []


async def test_create_existing_topic_raises_topic_already_exists(admin: Admin) -> None:
    await admin.create_topic("x", 1)

    with pytest.raises(TopicAlreadyExistsError, match=r"^topic 'x' already exists$"):
        await admin.create_topic("x", 1)


async def test_create_topic_with_zero_partitions_raises_invalid_partitions(admin: Admin) -> None:
    with pytest.raises(InvalidPartitionsError, match="cannot create topic 'none': .*at least 1, not 0"):
        await admin.create_topic("none", 0)


async def test_create_topic_with_unknown_config_raises_invalid_config(admin: Admin) -> None:
    with pytest.raises(InvalidConfigError, match="cannot create topic 't': unknown topic config 'retention.hours'"):
        await admin.create_topic("t", 1, configs={"retention.hours": "1"})
    assert await admin.list_topics() == []


async def test_create_topic_with_bad_config_value_raises_invalid_config(admin: Admin) -> None:
    with pytest.raises(InvalidConfigError, match="segment.bytes='big': expected a whole number"):
        await admin.create_topic("t", 1, configs={"segment.bytes": "big"})


async def test_create_topic_with_illegal_name_raises_invalid_topic(admin: Admin) -> None:
    with pytest.raises(InvalidTopicError, match="has characters other than"):
        await admin.create_topic("no spaces please", 1)


async def test_create_topic_with_more_replicas_than_brokers_raises(admin: Admin) -> None:
    with pytest.raises(InvalidReplicationFactorError, match="replication factor 3"):
        await admin.create_topic("t", 1, replication_factor=3)


# ---------------------------------------------------------------------------- delete / list


async def test_delete_topic_removes_it_from_the_list(admin: Admin) -> None:
    await admin.create_topics(["keep", "drop"])

    await admin.delete_topic("drop")

    assert [t.name for t in await admin.list_topics()] == ["keep"]


async def test_delete_unknown_topic_raises_unknown_topic(admin: Admin) -> None:
    with pytest.raises(UnknownTopicError, match="topic 'ghost' does not exist"):
        await admin.delete_topic("ghost")


async def test_list_topics_is_sorted_by_name_with_partition_counts(admin: Admin) -> None:
    await admin.create_topic("zebra", 2)
    await admin.create_topic("apple", 5)

    listing = await admin.list_topics()

    assert [(t.name, t.partitions, t.internal) for t in listing] == [("apple", 5, False), ("zebra", 2, False)]
    assert all(t.topic_id is not None for t in listing)


# ---------------------------------------------------------------------------- describe_topics


async def test_describe_topic_shows_leaders_offsets_and_sizes(admin: Admin, pulllog_broker: BrokerThread) -> None:
    await admin.create_topic("events", 2)
    produce(pulllog_broker, "events", 1, [T0, T0 + 1, T0 + 2])

    topic = await admin.describe_topic("events")

    sizes = [pulllog_broker.call(lambda i=i: pulllog_broker.broker.topics.partition("events", i).log.size_bytes)
             for i in (0, 1)]
    assert sizes[0] == 0 and sizes[1] > 0
    assert [(p.partition, p.leader, p.replicas, p.isr, p.log_start_offset, p.log_end_offset, p.size_bytes)
            for p in topic.partitions] == [(0, 0, (0,), (0,), 0, 0, 0), (1, 0, (0,), (0,), 0, 3, sizes[1])]
    assert topic.size_bytes == sizes[1]


async def test_describe_topics_keeps_the_order_asked(admin: Admin) -> None:
    await admin.create_topics(["a", "b"])

    assert [t.name for t in await admin.describe_topics(["b", "a"])] == ["b", "a"]


async def test_describe_unknown_topic_raises_unknown_topic(admin: Admin) -> None:
    with pytest.raises(UnknownTopicError, match="topic 'ghost' does not exist; create it with `pulllog topic create"):
        await admin.describe_topic("ghost")


# ---------------------------------------------------------------------------- create_partitions


async def test_create_partitions_grows_the_topic(admin: Admin) -> None:
    await admin.create_topic("grow", 1)

    await admin.create_partitions("grow", 4)

    assert [p.partition for p in (await admin.describe_topic("grow")).partitions] == [0, 1, 2, 3]


async def test_create_partitions_validate_only_changes_nothing(admin: Admin) -> None:
    await admin.create_topic("grow", 1)

    await admin.create_partitions("grow", 4, validate_only=True)

    assert len((await admin.describe_topic("grow")).partitions) == 1


async def test_create_partitions_cannot_shrink_a_topic(admin: Admin) -> None:
    await admin.create_topic("shrink", 3)

    with pytest.raises(InvalidPartitionsError, match="topic 'shrink' has 3 partition.*must be larger, not 2"):
        await admin.create_partitions("shrink", 2)


async def test_create_partitions_for_unknown_topic_raises_unknown_topic(admin: Admin) -> None:
    with pytest.raises(UnknownTopicError):
        await admin.create_partitions("ghost", 2)


# ---------------------------------------------------------------------------- configs


async def test_describe_topic_configs_tells_overrides_from_defaults(admin: Admin) -> None:
    await admin.create_topic("t", 1, configs={"cleanup.policy": "compact"})

    configs = await admin.describe_configs(ConfigResource.topic("t"))

    assert configs["cleanup.policy"].value == "compact"
    assert configs["cleanup.policy"].source is ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert configs["retention.ms"].value == "604800000"
    assert configs["retention.ms"].is_default and not configs["retention.ms"].is_override


async def test_describe_topic_configs_shows_broker_level_defaults_as_broker_config(tmp_path) -> None:
    with BrokerThread(tmp_path / "data", properties={"log.retention.ms": "1000"}) as broker:
        async with Admin(broker.bootstrap_servers) as admin:
            await admin.create_topic("t", 1)
            entry = (await admin.describe_configs(ConfigResource.topic("t")))["retention.ms"]
    assert (entry.value, entry.source) == ("1000", ConfigSource.STATIC_BROKER_CONFIG)


async def test_describe_configs_with_keys_returns_only_those(admin: Admin) -> None:
    await admin.create_topic("t", 1)

    configs = await admin.describe_configs(ConfigResource.topic("t"), keys=["segment.bytes", "retention.ms"])

    assert sorted(configs) == ["retention.ms", "segment.bytes"]


async def test_describe_broker_configs(admin: Admin, pulllog_broker: BrokerThread) -> None:
    configs = await admin.describe_configs(ConfigResource.broker(0))

    assert configs["node.id"].value == "0"
    assert configs["advertised.listeners"].value == f"PLAINTEXT://{pulllog_broker.bootstrap_servers}"
    assert configs["log.dirs"].value == str(pulllog_broker.data_dir)
    assert configs["num.partitions"].read_only
    assert configs["num.partitions"].source is ConfigSource.STATIC_BROKER_CONFIG


async def test_describe_configs_of_any_broker_asks_the_one_that_answers(admin: Admin) -> None:
    configs = await admin.describe_configs(ConfigResource.broker())

    assert configs["broker.id"].value == "0"


async def test_describe_configs_of_unknown_topic_raises_unknown_topic(admin: Admin) -> None:
    with pytest.raises(UnknownTopicError, match="'ghost'"):
        await admin.describe_configs(ConfigResource.topic("ghost"))


async def test_alter_configs_replaces_every_override(admin: Admin) -> None:
    await admin.create_topic("t", 1, configs={"retention.ms": "1000", "segment.bytes": "100000"})

    await admin.alter_configs(ConfigResource.topic("t"), {"cleanup.policy": "compact"})

    assert overrides(await admin.describe_configs(ConfigResource.topic("t"))) == {"cleanup.policy": "compact"}


async def test_alter_configs_validate_only_changes_nothing(admin: Admin) -> None:
    await admin.create_topic("t", 1, configs={"retention.ms": "1000"})

    await admin.alter_configs(ConfigResource.topic("t"), {"retention.ms": "2000"}, validate_only=True)

    assert overrides(await admin.describe_configs(ConfigResource.topic("t"))) == {"retention.ms": "1000"}


async def test_alter_configs_with_invalid_value_raises_and_changes_nothing(admin: Admin) -> None:
    await admin.create_topic("t", 1, configs={"retention.ms": "1000"})

    with pytest.raises(InvalidConfigError, match="cannot alter configs of topic 't': retention.ms=-5"):
        await admin.alter_configs(ConfigResource.topic("t"), {"retention.ms": "-5"})

    assert overrides(await admin.describe_configs(ConfigResource.topic("t"))) == {"retention.ms": "1000"}


async def test_alter_configs_of_unknown_topic_raises_unknown_topic(admin: Admin) -> None:
    with pytest.raises(UnknownTopicError):
        await admin.alter_configs(ConfigResource.topic("ghost"), {"retention.ms": "1000"})


async def test_alter_a_static_broker_config_is_refused_with_the_reason(admin: Admin) -> None:
    with pytest.raises(KafkaError, match="cannot alter configs of broker 0: num.partitions: cannot be changed at run time"):
        await admin.alter_configs(ConfigResource.broker(0), {"num.partitions": "3"})


async def test_incremental_alter_configs_sets_and_deletes_only_the_named_configs(admin: Admin) -> None:
    await admin.create_topic("t", 1, configs={"retention.ms": "1000", "segment.bytes": "100000"})

    await admin.incremental_alter_configs(ConfigResource.topic("t"), [
        AlterConfigOp.set("max.message.bytes", "5000"), AlterConfigOp.delete("segment.bytes")])

    assert overrides(await admin.describe_configs(ConfigResource.topic("t"))) == {
        "retention.ms": "1000", "max.message.bytes": "5000"}


async def test_incremental_alter_configs_appends_to_a_list_config(admin: Admin) -> None:
    await admin.create_topic("t", 1)

    await admin.incremental_alter_configs(ConfigResource.topic("t"), [AlterConfigOp.append("cleanup.policy", "compact")])

    assert (await admin.describe_configs(ConfigResource.topic("t")))["cleanup.policy"].value == "compact,delete"


async def test_incremental_alter_configs_with_invalid_value_raises_invalid_config(admin: Admin) -> None:
    await admin.create_topic("t", 1)

    with pytest.raises(InvalidConfigError, match="cleanup.policy"):
        await admin.incremental_alter_configs(ConfigResource.topic("t"), [AlterConfigOp.set("cleanup.policy", "keep")])


# ---------------------------------------------------------------------------- list_offsets


async def test_list_offsets_earliest_and_latest(admin: Admin, pulllog_broker: BrokerThread) -> None:
    await admin.create_topic("t", 2)
    produce(pulllog_broker, "t", 0, [T0] * 5)
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)

    earliest = await admin.list_offsets({tp0: OffsetSpec.EARLIEST, tp1: OffsetSpec.EARLIEST})
    latest = await admin.list_offsets({tp0: OffsetSpec.LATEST, tp1: OffsetSpec.LATEST})

    assert {tp: o.offset for tp, o in earliest.items()} == {tp0: 0, tp1: 0}
    assert {tp: o.offset for tp, o in latest.items()} == {tp0: 5, tp1: 0}


async def test_list_offsets_for_a_timestamp_finds_the_first_record_at_or_after_it(
        admin: Admin, pulllog_broker: BrokerThread) -> None:
    await admin.create_topic("t", 1)
    produce(pulllog_broker, "t", 0, [T0, T0 + 1000, T0 + 2000])
    tp = TopicPartition("t", 0)

    found = await admin.list_offsets({tp: OffsetSpec.for_timestamp(T0 + 500)})

    assert found[tp] == ListedOffset(offset=1, timestamp=T0 + 1000, leader_epoch=0)


async def test_list_offsets_takes_a_plain_int_as_a_timestamp(admin: Admin, pulllog_broker: BrokerThread) -> None:
    await admin.create_topic("t", 1)
    produce(pulllog_broker, "t", 0, [T0, T0 + 1000])
    tp = TopicPartition("t", 0)

    assert (await admin.list_offsets({tp: T0 + 1000}))[tp].offset == 1


async def test_list_offsets_for_a_timestamp_after_the_last_record_is_none(
        admin: Admin, pulllog_broker: BrokerThread) -> None:
    await admin.create_topic("t", 1)
    produce(pulllog_broker, "t", 0, [T0, T0 + 1000])
    tp = TopicPartition("t", 0)

    assert await admin.list_offsets({tp: OffsetSpec.for_timestamp(T0 + 60_000)}) == {tp: None}


async def test_list_offsets_max_timestamp_finds_the_newest_record_not_the_last(
        admin: Admin, pulllog_broker: BrokerThread) -> None:
    await admin.create_topic("t", 1)
    produce(pulllog_broker, "t", 0, [T0, T0 + 5000, T0 + 1000])
    tp = TopicPartition("t", 0)

    found = (await admin.list_offsets({tp: OffsetSpec.MAX_TIMESTAMP}))[tp]

    assert (found.offset, found.timestamp) == (1, T0 + 5000)


async def test_list_offsets_of_a_missing_partition_raises_naming_it(admin: Admin) -> None:
    await admin.create_topic("t", 2)

    with pytest.raises(KafkaError, match=r"topic 't' has no partition 7 \(it has 2 partitions\)"):
        await admin.list_offsets({TopicPartition("t", 7): OffsetSpec.LATEST})


async def test_list_offsets_of_unknown_topic_raises_unknown_topic(admin: Admin) -> None:
    with pytest.raises(UnknownTopicError):
        await admin.list_offsets({TopicPartition("ghost", 0): OffsetSpec.LATEST})


async def test_a_negative_timestamp_is_refused_before_anything_is_sent(admin: Admin) -> None:
    with pytest.raises(ValueError, match="milliseconds since the epoch"):
        await admin.list_offsets({TopicPartition("t", 0): -5})


# ---------------------------------------------------------------------------- delete_records


async def test_delete_records_moves_the_log_start_offset(admin: Admin, pulllog_broker: BrokerThread) -> None:
    await admin.create_topic("t", 1)
    produce(pulllog_broker, "t", 0, [T0] * 10)
    tp = TopicPartition("t", 0)

    assert await admin.delete_records({tp: 4}) == {tp: 4}

    partition = (await admin.describe_topic("t")).partitions[0]
    assert (partition.log_start_offset, partition.log_end_offset) == (4, 10)


async def test_delete_records_before_minus_one_deletes_everything(admin: Admin, pulllog_broker: BrokerThread) -> None:
    await admin.create_topic("t", 1)
    produce(pulllog_broker, "t", 0, [T0] * 3)
    tp = TopicPartition("t", 0)

    assert await admin.delete_records({tp: -1}) == {tp: 3}


async def test_delete_records_past_the_high_watermark_raises_offset_out_of_range(
        admin: Admin, pulllog_broker: BrokerThread) -> None:
    await admin.create_topic("t", 1)
    produce(pulllog_broker, "t", 0, [T0] * 3)

    with pytest.raises(KafkaError, match="cannot delete records of t-0 before offset 50: it is past the high"):
        await admin.delete_records({TopicPartition("t", 0): 50})


# ---------------------------------------------------------------------------- connecting


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_unreachable_broker_raises_broker_unreachable_naming_the_address() -> None:
    port = _unused_port()

    with pytest.raises(BrokerUnreachableError, match=f"cannot connect to a broker at 127.0.0.1:{port} "
                                                     r"\(connection refused\).*`pulllog serve`"):
        async with Admin(f"127.0.0.1:{port}"):
            pass
