"""confluent-kafka (librdkafka 2.16) against a real pulllog broker.

Every test starts its own broker (the ``pulllog_broker`` fixture) and talks to it with
librdkafka's producer, consumer and admin client, as an application would. Expected
partitions for keyed messages come from kafka-python's port of Kafka's murmur2 (an
independent implementation), not from pulllog or librdkafka.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from kafka.partitioner.default import murmur2
from waits import expired_fetches

TIMEOUT_S = 30
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BULK_MESSAGES = 100_000
BULK_PARTITIONS = 4


# ---------------------------------------------------------------------------- helpers


def admin_client(broker: Any) -> AdminClient:
    # Keep the client in a variable while its futures are pending (a collected AdminClient
    # fails them with _DESTROY), and local to the test, so it is gone before the broker stops.
    return AdminClient({"bootstrap.servers": broker.bootstrap_servers})


def create_topic(broker: Any, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    client = admin_client(broker)
    client.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(TIMEOUT_S)


def admin_error(future: Any) -> KafkaError:
    """The KafkaError an admin future fails with (the test fails if it succeeds)."""
    with pytest.raises(KafkaException) as caught:
        future.result(TIMEOUT_S)
    return caught.value.args[0]


def kafka_partition(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner for a keyed record: toPositive(murmur2(key)) % n."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


@dataclass(frozen=True, slots=True)
class Delivery:
    error: KafkaError | None
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp: tuple[int, int]


def produce(broker: Any, topic: str, messages: Iterable[tuple[bytes | None, bytes]], *,
            partition: int | None = None, timestamps: Iterable[int] | None = None,
            **config: Any) -> list[Delivery]:
    """Produce (key, value) pairs, flush, and return every delivery report in report order."""
    settings = {"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5,
                "partitioner": "murmur2_random", **{k.replace("_", "."): v for k, v in config.items()}}
    producer = Producer(settings)
    reports: list[Delivery] = []

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        reports.append(Delivery(err, msg.partition(), msg.offset(), msg.key(), msg.value(), msg.timestamp()))

    stamps = iter(timestamps) if timestamps is not None else None
    for key, value in messages:
        extra: dict[str, Any] = {}
        if partition is not None:
            extra["partition"] = partition
        if stamps is not None:
            extra["timestamp"] = next(stamps)
        producer.produce(topic, value, key, on_delivery=on_delivery, **extra)
    assert producer.flush(TIMEOUT_S) == 0, "messages still queued after flush"
    return reports


def consume(broker: Any, topic: str, partitions: int, count: int, **config: Any) -> list[Any]:
    """Assign every partition from offset 0 and read ``count`` messages in batches."""
    settings = {"bootstrap.servers": broker.bootstrap_servers, "group.id": "pulllog-interop",
                "enable.auto.commit": False, **{k.replace("_", "."): v for k, v in config.items()}}
    consumer = Consumer(settings)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    messages: list[Any] = []
    deadline = time.monotonic() + TIMEOUT_S * 2
    try:
        while len(messages) < count and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=min(10_000, count - len(messages)), timeout=1.0):
                assert msg.error() is None, msg.error()
                messages.append(msg)
    finally:
        consumer.close()
    assert len(messages) == count, f"consumed {len(messages)} of {count} messages"
    return messages


def by_partition(pairs: Iterable[tuple[int, Any]]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = defaultdict(list)
    for partition, item in pairs:
        out[partition].append(item)
    return dict(out)


def config_entries(broker: Any, resource: ConfigResource) -> dict[str, Any]:
    client = admin_client(broker)
    return client.describe_configs([resource])[resource].result(TIMEOUT_S)


def partition_batches(broker: Any, topic: str, partition: int) -> list[Any]:
    def read() -> list[Any]:
        return broker.broker.topics.partition(topic, partition).log.read_batches(0, 64 << 20)

    return broker.call(read)


# ---------------------------------------------------------------------------- bulk round trip


_BLOB = bytes(range(256)) * 2


def bulk_messages(codec: str, keyed: bool) -> list[tuple[bytes | None, bytes]]:
    """Unique values of varied length covering every byte value; keys repeat (1000 users)."""
    out = []
    for i in range(BULK_MESSAGES):
        value = b"%s-%06d|" % (codec.encode(), i) + _BLOB[i % 256 : i % 256 + i % 97]
        out.append((b"user-%d" % (i % 1000) if keyed else None, value))
    return out


def test_the_murmur2_oracle_matches_kafkas_java_partitioner() -> None:
    # Values from Kafka's UtilsTest.testMurmur2 (Java ints, shown unsigned here).
    assert murmur2(b"21") == -973932308 & 0xFFFFFFFF
    assert murmur2(b"foobar") == -790332482 & 0xFFFFFFFF
    assert murmur2(b"a-little-bit-long-string") == -985981536 & 0xFFFFFFFF


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "unkeyed"])
@pytest.mark.parametrize("codec", CODECS)
def test_100k_messages_round_trip_byte_identical_in_partition_order(pulllog_broker, codec: str, keyed: bool) -> None:
    topic = f"bulk-{codec}"
    create_topic(pulllog_broker, topic, BULK_PARTITIONS)
    messages = bulk_messages(codec, keyed)

    # sticky.partitioning.linger.ms=0: a null key goes to a random partition per message, so
    # the spread below does not depend on how fast this machine produces.
    reports = produce(pulllog_broker, topic, messages, compression_type=codec, batch_num_messages=10_000,
                      queue_buffering_max_messages=BULK_MESSAGES * 2, queue_buffering_max_kbytes=1 << 20,
                      sticky_partitioning_linger_ms=0)

    assert len(reports) == BULK_MESSAGES
    assert [r for r in reports if r.error is not None] == []
    if keyed:
        assert all(r.partition == kafka_partition(r.key, BULK_PARTITIONS) for r in reports)  # type: ignore[arg-type]
    else:
        assert len({r.partition for r in reports}) == BULK_PARTITIONS  # murmur2_random spreads null keys
    # What each partition should hold: the messages sent to it, in the order they were
    # produced, at offsets 0, 1, 2, ... (values are unique, so they identify the reports).
    partition_of = {r.value: r.partition for r in reports}
    offset_of = {r.value: r.offset for r in reports}
    expected = by_partition((partition_of[value], (key, value)) for key, value in messages)
    for p, sent in expected.items():
        assert [offset_of[value] for _key, value in sent] == list(range(len(sent)))

    consumed = consume(pulllog_broker, topic, BULK_PARTITIONS, BULK_MESSAGES)

    got = by_partition((m.partition(), (m.key(), m.value())) for m in consumed)
    assert got.keys() == expected.keys()
    for p in expected:
        assert got[p] == expected[p], f"partition {p} differs"
    # The producer really compressed (librdkafka silently falls back to none when it thinks
    # the broker cannot take a codec), and the broker stored those batches as they came.
    stored = [b for p in expected for b in partition_batches(pulllog_broker, topic, p)]
    in_codec = sum(b.header.records_count for b in stored if b.header.compression.name.lower() == codec)
    assert in_codec >= BULK_MESSAGES * 0.9, sorted({b.header.compression.name for b in stored})


# ---------------------------------------------------------------------------- producer settings


def test_idempotent_producer_gets_a_producer_id_and_delivers_everything(pulllog_broker) -> None:
    create_topic(pulllog_broker, "idempotent", 3)
    messages = [(b"k%d" % (i % 10), b"v%d" % i) for i in range(3000)]

    reports = produce(pulllog_broker, "idempotent", messages, enable_idempotence=True)

    assert len(reports) == len(messages) and all(r.error is None for r in reports)
    consumed = consume(pulllog_broker, "idempotent", 3, len(messages))
    assert sorted(m.value() for m in consumed) == sorted(v for _k, v in messages)
    for p in range(3):
        batches = partition_batches(pulllog_broker, "idempotent", p)
        assert batches and all(b.header.producer_id >= 0 and b.header.base_sequence >= 0 for b in batches)
        assert len({b.header.producer_id for b in batches}) == 1  # one InitProducerId, one id


def test_idempotent_100k_messages_arrive_exactly_once_and_in_order(pulllog_broker) -> None:
    # Small batches and 5 requests in flight per partition: the broker's sequence checks see
    # pipelined batches, and every stored batch must follow its predecessor's sequence.
    create_topic(pulllog_broker, "idempotent-bulk", BULK_PARTITIONS)
    messages = [(b"user-%d" % (i % 1000), b"%06d" % i) for i in range(BULK_MESSAGES)]

    reports = produce(pulllog_broker, "idempotent-bulk", messages, enable_idempotence=True,
                      batch_num_messages=200, max_in_flight_requests_per_connection=5,
                      queue_buffering_max_messages=BULK_MESSAGES * 2, queue_buffering_max_kbytes=1 << 20)

    assert len(reports) == BULK_MESSAGES and [r for r in reports if r.error is not None] == []
    expected = by_partition((kafka_partition(k, BULK_PARTITIONS), v) for k, v in messages)
    consumed = consume(pulllog_broker, "idempotent-bulk", BULK_PARTITIONS, BULK_MESSAGES)
    got = by_partition((m.partition(), m.value()) for m in consumed)
    assert got == expected, "each partition holds every message once, in produce order"
    for p in range(BULK_PARTITIONS):
        batches = partition_batches(pulllog_broker, "idempotent-bulk", p)
        assert len(batches) > 5
        seq = 0
        for b in batches:
            assert b.header.base_sequence == seq
            seq += b.header.records_count


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_produce_with_acks_delivers(pulllog_broker, acks: str) -> None:
    create_topic(pulllog_broker, "acks")
    messages = [(None, b"acks=%s #%d" % (acks.encode(), i)) for i in range(500)]

    reports = produce(pulllog_broker, "acks", messages, acks=acks)

    assert len(reports) == len(messages) and all(r.error is None for r in reports)
    assert [m.value() for m in consume(pulllog_broker, "acks", 1, len(messages))] == [v for _k, v in messages]


# ---------------------------------------------------------------------------- admin: topics


def test_create_topics_creates_the_partitions_asked_for(pulllog_broker) -> None:
    admin = admin_client(pulllog_broker)
    futures = admin.create_topics([NewTopic("orders", 6, 1), NewTopic("audit", 1, 1)])

    assert {name: f.result(TIMEOUT_S) for name, f in futures.items()} == {"orders": None, "audit": None}
    topics = admin.list_topics(timeout=TIMEOUT_S).topics
    assert {name: len(t.partitions) for name, t in topics.items()} == {"orders": 6, "audit": 1}


def test_list_topics_of_the_whole_cluster(pulllog_broker) -> None:
    # librdkafka >= 2.x pads the null topics array of this Metadata v12 request to 4 bytes
    # (confluentinc/librdkafka#5049); the broker must read it as "all topics".
    admin = admin_client(pulllog_broker)
    create_topic(pulllog_broker, "orders", 3)
    create_topic(pulllog_broker, "audit")

    cluster = admin.list_topics(timeout=TIMEOUT_S)

    assert [(b.id, f"{b.host}:{b.port}") for b in cluster.brokers.values()] == [(0, pulllog_broker.bootstrap_servers)]
    assert {name: len(t.partitions) for name, t in cluster.topics.items()} == {"orders": 3, "audit": 1}


def test_create_existing_topic_fails_with_topic_already_exists(pulllog_broker) -> None:
    admin = admin_client(pulllog_broker)
    create_topic(pulllog_broker, "orders")

    futures = admin.create_topics([NewTopic("orders", 1, 1)])

    assert admin_error(futures["orders"]).code() == KafkaError.TOPIC_ALREADY_EXISTS


def test_create_topic_with_zero_partitions_fails_with_invalid_partitions(pulllog_broker) -> None:
    admin = admin_client(pulllog_broker)
    futures = admin.create_topics([NewTopic("empty", 0, 1)])

    assert admin_error(futures["empty"]).code() == KafkaError.INVALID_PARTITIONS


def test_create_topic_with_replication_factor_3_fails_with_invalid_replication_factor(pulllog_broker) -> None:
    admin = admin_client(pulllog_broker)
    futures = admin.create_topics([NewTopic("replicated", 1, 3)])

    assert admin_error(futures["replicated"]).code() == KafkaError.INVALID_REPLICATION_FACTOR


def test_create_topic_with_a_bad_config_fails_with_invalid_config(pulllog_broker) -> None:
    admin = admin_client(pulllog_broker)
    futures = admin.create_topics([NewTopic("bad", 1, 1, config={"retention.ms": "soon"})])

    error = admin_error(futures["bad"])
    assert error.code() == KafkaError.INVALID_CONFIG and "retention.ms" in error.str()


def test_create_topics_with_validate_only_creates_nothing(pulllog_broker) -> None:
    admin = admin_client(pulllog_broker)
    futures = admin.create_topics([NewTopic("dry-run", 3, 1)], validate_only=True)

    assert futures["dry-run"].result(TIMEOUT_S) is None
    assert "dry-run" not in admin.list_topics(timeout=TIMEOUT_S).topics


def test_delete_topics_removes_the_topic(pulllog_broker) -> None:
    admin = admin_client(pulllog_broker)
    create_topic(pulllog_broker, "doomed", 2)

    futures = admin.delete_topics(["doomed"])

    assert futures["doomed"].result(TIMEOUT_S) is None
    assert "doomed" not in admin.list_topics(timeout=TIMEOUT_S).topics


def test_delete_missing_topic_fails_with_unknown_topic_or_partition(pulllog_broker) -> None:
    admin = admin_client(pulllog_broker)
    futures = admin.delete_topics(["never-was"])

    assert admin_error(futures["never-was"]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_create_partitions_grows_the_topic_and_the_new_partitions_take_writes(pulllog_broker) -> None:
    admin = admin_client(pulllog_broker)
    create_topic(pulllog_broker, "growing", 2)

    futures = admin.create_partitions([NewPartitions("growing", 5)])

    assert futures["growing"].result(TIMEOUT_S) is None
    assert len(admin.list_topics("growing", timeout=TIMEOUT_S).topics["growing"].partitions) == 5
    [report] = produce(pulllog_broker, "growing", [(None, b"into the new partition")], partition=4)
    assert report.error is None and (report.partition, report.offset) == (4, 0)


def test_create_partitions_cannot_shrink_a_topic(pulllog_broker) -> None:
    admin = admin_client(pulllog_broker)
    create_topic(pulllog_broker, "steady", 3)

    futures = admin.create_partitions([NewPartitions("steady", 2)])

    assert admin_error(futures["steady"]).code() == KafkaError.INVALID_PARTITIONS


# ---------------------------------------------------------------------------- admin: configs


def test_describe_configs_of_a_topic_shows_overrides_and_defaults(pulllog_broker) -> None:
    create_topic(pulllog_broker, "described", config={"retention.ms": "3600000"})

    entries = config_entries(pulllog_broker, ConfigResource(ResourceType.TOPIC, "described"))

    retention = entries["retention.ms"]
    assert retention.value == "3600000" and retention.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not retention.is_default
    policy = entries["cleanup.policy"]
    assert policy.value == "delete" and policy.is_default


def test_describe_configs_of_the_broker(pulllog_broker) -> None:
    entries = config_entries(pulllog_broker, ConfigResource(ResourceType.BROKER, "0"))

    assert entries["num.partitions"].value == "1"
    assert entries["log.dirs"].value == str(pulllog_broker.data_dir)
    # Read-only but for the dynamic broker configs pulllog implements: the broker log defaults.
    writable = {name for name, e in entries.items() if not e.is_read_only}
    assert "log.retention.ms" in writable and "message.max.bytes" in writable
    assert "log.dirs" not in writable and "num.partitions" not in writable


def test_describe_configs_of_a_missing_topic_fails_with_unknown_topic_or_partition(pulllog_broker) -> None:
    admin = admin_client(pulllog_broker)
    resource = ConfigResource(ResourceType.TOPIC, "missing")

    future = admin.describe_configs([resource])[resource]

    assert admin_error(future).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_incremental_alter_configs_sets_and_deletes_a_topic_config(pulllog_broker) -> None:
    admin = admin_client(pulllog_broker)
    create_topic(pulllog_broker, "tuned")
    resource = ConfigResource(ResourceType.TOPIC, "tuned", incremental_configs=[
        ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)])

    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT_S)

    described = ConfigResource(ResourceType.TOPIC, "tuned")
    assert config_entries(pulllog_broker, described)["retention.ms"].value == "60000"
    assert pulllog_broker.broker.topics.get("tuned").config.retention_ms == 60000  # the log's own config
    reset = ConfigResource(ResourceType.TOPIC, "tuned", incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([reset])[reset].result(TIMEOUT_S)
    assert config_entries(pulllog_broker, described)["retention.ms"].is_default


def test_lowering_max_message_bytes_rejects_a_larger_message_with_msg_size_too_large(pulllog_broker) -> None:
    admin = admin_client(pulllog_broker)
    create_topic(pulllog_broker, "small-only")
    resource = ConfigResource(ResourceType.TOPIC, "small-only", incremental_configs=[
        ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT_S)

    [too_large] = produce(pulllog_broker, "small-only", [(None, b"x" * 5000)])
    [small] = produce(pulllog_broker, "small-only", [(None, b"x" * 100)])

    assert too_large.error is not None and too_large.error.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert small.error is None and small.offset == 0


# ---------------------------------------------------------------------------- offsets and timestamps


def list_offsets(broker: Any, topic: str, spec: OffsetSpec) -> Any:
    client, tp = admin_client(broker), TopicPartition(topic, 0)
    return client.list_offsets({tp: spec})[tp].result(TIMEOUT_S)


def produce_with_timestamps(broker: Any, topic: str, timestamps: list[int]) -> None:
    create_topic(broker, topic)
    messages = [(None, b"at %d" % ts) for ts in timestamps]
    reports = produce(broker, topic, messages, timestamps=timestamps)
    assert all(r.error is None for r in reports)


def test_list_offsets_earliest_and_latest(pulllog_broker) -> None:
    produce_with_timestamps(pulllog_broker, "clock", [1000, 2000, 3000])

    assert list_offsets(pulllog_broker, "clock", OffsetSpec.earliest()).offset == 0
    assert list_offsets(pulllog_broker, "clock", OffsetSpec.latest()).offset == 3


def test_list_offsets_by_timestamp_finds_the_first_record_at_or_after_it(pulllog_broker) -> None:
    produce_with_timestamps(pulllog_broker, "clock", [1000, 2000, 3000])

    found = {ts: list_offsets(pulllog_broker, "clock", OffsetSpec.for_timestamp(ts)) for ts in (0, 2000, 2500, 3001)}

    assert {ts: (r.offset, r.timestamp) for ts, r in found.items()} == {
        0: (0, 1000), 2000: (1, 2000), 2500: (2, 3000), 3001: (-1, -1)}


def test_list_offsets_max_timestamp_finds_the_latest_stamped_record(pulllog_broker) -> None:
    produce_with_timestamps(pulllog_broker, "clock", [1000, 5000, 3000])

    result = list_offsets(pulllog_broker, "clock", OffsetSpec.max_timestamp())

    assert (result.offset, result.timestamp) == (1, 5000)


def test_consumer_offsets_for_times_and_watermarks(pulllog_broker) -> None:
    produce_with_timestamps(pulllog_broker, "clock", [1000, 2000, 3000])
    consumer = Consumer({"bootstrap.servers": pulllog_broker.bootstrap_servers, "group.id": "pulllog-interop"})
    try:
        [found] = consumer.offsets_for_times([TopicPartition("clock", 0, 1500)], timeout=TIMEOUT_S)
        watermarks = consumer.get_watermark_offsets(TopicPartition("clock", 0), timeout=TIMEOUT_S)
    finally:
        consumer.close()

    assert found.error is None and found.offset == 1
    assert watermarks == (0, 3)


def test_delete_records_moves_the_low_watermark(pulllog_broker) -> None:
    admin = admin_client(pulllog_broker)
    create_topic(pulllog_broker, "trimmed")
    produce(pulllog_broker, "trimmed", [(None, b"m%d" % i) for i in range(10)])

    tp = TopicPartition("trimmed", 0, 4)
    deleted = admin.delete_records([tp])[tp].result(TIMEOUT_S)

    assert deleted.low_watermark == 4
    assert list_offsets(pulllog_broker, "trimmed", OffsetSpec.earliest()).offset == 4
    consumer = Consumer({"bootstrap.servers": pulllog_broker.bootstrap_servers, "group.id": "pulllog-interop",
                         "enable.auto.commit": False})
    try:
        assert consumer.get_watermark_offsets(TopicPartition("trimmed", 0), timeout=TIMEOUT_S) == (4, 10)
        consumer.assign([TopicPartition("trimmed", 0, OFFSET_BEGINNING)])
        first = consumer.poll(TIMEOUT_S)
    finally:
        consumer.close()
    assert first is not None and first.error() is None and (first.offset(), first.value()) == (4, b"m4")


def test_log_append_time_topic_stamps_messages_with_broker_time(pulllog_broker) -> None:
    create_topic(pulllog_broker, "stamped", config={"message.timestamp.type": "LogAppendTime"})
    before = time.time_ns() // 1_000_000

    [report] = produce(pulllog_broker, "stamped", [(None, b"when?")], timestamps=[1_000_000])
    after = time.time_ns() // 1_000_000
    [msg] = consume(pulllog_broker, "stamped", 1, 1)

    kind, stamp = msg.timestamp()
    assert kind == TIMESTAMP_LOG_APPEND_TIME and before <= stamp <= after
    assert report.timestamp == (TIMESTAMP_LOG_APPEND_TIME, stamp)  # from the produce response


def test_create_time_topic_keeps_the_producers_timestamp(pulllog_broker) -> None:
    create_topic(pulllog_broker, "created")

    produce(pulllog_broker, "created", [(None, b"then")], timestamps=[1_000_000])
    [msg] = consume(pulllog_broker, "created", 1, 1)

    assert msg.timestamp() == (TIMESTAMP_CREATE_TIME, 1_000_000)


def test_compacted_topic_rejects_a_message_without_a_key(pulllog_broker) -> None:
    create_topic(pulllog_broker, "compacted", config={"cleanup.policy": "compact"})

    [keyed] = produce(pulllog_broker, "compacted", [(b"user-1", b"v1")])
    [keyless] = produce(pulllog_broker, "compacted", [(None, b"v2")])

    assert keyed.error is None and keyed.offset == 0
    assert keyless.error is not None and keyless.error.code() == KafkaError.INVALID_RECORD


# ---------------------------------------------------------------------------- long poll


# Longer than the test runs: only the produce can answer the parked fetch.
LONG_POLL_MS = 20_000


def test_long_poll_fetch_returns_as_soon_as_a_produce_satisfies_it(pulllog_broker, record_property) -> None:
    create_topic(pulllog_broker, "live")
    consumer = Consumer({"bootstrap.servers": pulllog_broker.bootstrap_servers, "group.id": "pulllog-interop",
                         "enable.auto.commit": False, "fetch.wait.max.ms": LONG_POLL_MS, "fetch.min.bytes": 1})
    producer = Producer({"bootstrap.servers": pulllog_broker.bootstrap_servers, "linger.ms": 0})
    producer.list_topics("live", timeout=TIMEOUT_S)  # connected, metadata known: time only the produce
    purgatory = pulllog_broker.broker.fetch_purgatory
    try:
        consumer.assign([TopicPartition("live", 0, 0)])
        deadline = time.monotonic() + TIMEOUT_S
        while pulllog_broker.call(purgatory.watched, ("live", 0)) == 0:  # the fetch is parked
            assert consumer.poll(0.05) is None
            assert time.monotonic() < deadline, "the consumer's fetch never reached the purgatory"

        produced_at = time.perf_counter()
        producer.produce("live", b"wake up")
        producer.flush(TIMEOUT_S)
        msg = consumer.poll(TIMEOUT_S)
        latency_s = time.perf_counter() - produced_at
    finally:
        consumer.close()

    assert msg is not None and msg.error() is None and msg.value() == b"wake up"
    # Reported, not asserted: a loaded machine says nothing about the broker.
    record_property("long_poll_latency_ms", round(latency_s * 1000, 2))
    print(f"long-poll latency, produce -> consume: {latency_s * 1000:.1f} ms (fetch.wait.max.ms={LONG_POLL_MS})")
    assert expired_fetches(pulllog_broker) == 0, "the parked fetch answered at its deadline, not when the record came"
