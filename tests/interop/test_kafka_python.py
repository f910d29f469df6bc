"""kafka-python, an independent pure-Python blocking client, against a real pulllog broker.

Every test starts a fresh broker (the ``pulllog_broker`` fixture) and talks to it with
kafka-python's own producer, consumer and admin client; nothing is mocked. Consumers use
manual assignment and never commit: the group coordinator APIs are not implemented yet.

kafka-python 3 takes the highest version both sides speak, so it follows our ApiVersions
answer to the top of every range: ApiVersions v4, Metadata v12, Produce v9, Fetch v12,
ListOffsets v7, InitProducerId v4, CreateTopics v7, DeleteTopics v6, DescribeConfigs v4,
CreatePartitions v3 and DeleteRecords v2. From that table it infers "broker 3.0". Its
producer is idempotent by default whenever acks=all.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions
from kafka.errors import InvalidRecordError as KafkaInvalidRecordError
from kafka.errors import InvalidReplicationFactorError, InvalidTopicError, TopicAlreadyExistsError
from kafka.protocol.consumer.offsets import OffsetSpec
from waits import block_until, expired_fetches, parked_fetches


from sample_records import BASE_TIMESTAMP_MS, CODECS, as_received, as_sent, sample_records

ACKS = [0, 1, "all"]
NO_RECORDS_YET_S = 15.0
# Longer than any test runs: only the record a test waits for can answer its long poll.
LONG_POLL_MS = 20_000  # below kafka-python's request_timeout_ms (30 s), as it requires


def producer(broker, **options) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=broker.bootstrap_servers, **options)


def consumer(broker, **options) -> KafkaConsumer:
    options.setdefault("enable_auto_commit", False)
    options.setdefault("auto_offset_reset", "earliest")
    return KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, **options)


@pytest.fixture
def admin(pulllog_broker) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=pulllog_broker.bootstrap_servers)
    yield client
    client.close()


def produce_all(broker, topic: str, records: list[dict], *, partition: int | None = 0, **options) -> list:
    """Send every record before waiting for any, so they travel in shared batches."""
    p = producer(broker, **options)
    try:
        futures = [p.send(topic, partition=partition, **r) for r in records]
        p.flush(10)
        return [f.get(10) for f in futures]
    finally:
        p.close(10)


def read_at_least(c: KafkaConsumer, count: int) -> list:
    messages: list = []
    deadline = time.monotonic() + NO_RECORDS_YET_S
    while len(messages) < count:
        assert time.monotonic() < deadline, f"got {len(messages)} of {count} records"
        for batch in c.poll(timeout_ms=500).values():
            messages.extend(batch)
    return messages


def consume_from_beginning(broker, tps: list[TopicPartition], count: int, **options) -> list:
    """Assign ``tps``, seek to the beginning and poll until ``count`` records arrived."""
    c = consumer(broker, **options)
    try:
        c.assign(tps)
        c.seek_to_beginning(*tps)
        return read_at_least(c, count)
    finally:
        c.close()


def stored_batches(broker, topic: str, partition: int) -> list:
    """Headers of the batches as the broker keeps them on disk (read on the broker's loop)."""
    def read() -> list:
        return [b.header for b in broker.broker.topics.partition(topic, partition).log.read_batches(0)]
    return broker.call(read)


# ---------------------------------------------------------------------------- produce and consume


@pytest.mark.parametrize("acks", ACKS, ids=lambda a: f"acks={a}")
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c or "none")
@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "unkeyed"])
def test_records_come_back_byte_identical_in_order(pulllog_broker, keyed, codec, acks) -> None:
    records = sample_records(40, keyed=keyed)
    produce_all(pulllog_broker, "events", records, compression_type=codec, acks=acks, linger_ms=20)

    messages = consume_from_beginning(pulllog_broker, [TopicPartition("events", 0)], len(records))

    assert [m.offset for m in messages] == list(range(len(records)))
    assert [as_received(m) for m in messages] == [as_sent(r) for r in records]
    assert {m.timestamp_type for m in messages} == {0}  # CreateTime, as the producer set it
    stored = stored_batches(pulllog_broker, "events", 0)
    assert {b.compression.name.lower() for b in stored} == {codec or "none"}
    assert len(stored) < len(records)  # the records really travelled in shared batches


def test_seek_into_the_middle_of_a_compressed_batch_starts_at_that_offset(pulllog_broker) -> None:
    records = sample_records(30, keyed=True)
    produce_all(pulllog_broker, "events", records, compression_type="lz4", linger_ms=20)
    tp = TopicPartition("events", 0)
    c = consumer(pulllog_broker)
    try:
        c.assign([tp])
        c.seek(tp, 17)
        messages = read_at_least(c, len(records) - 17)
    finally:
        c.close()
    assert [m.offset for m in messages] == list(range(17, 30))
    assert [as_received(m) for m in messages] == [as_sent(r) for r in records[17:]]


def test_small_max_partition_fetch_bytes_still_reads_every_batch(pulllog_broker) -> None:
    # Each 4 KiB value is its own batch (sent and acknowledged one by one); a 1 KiB fetch
    # limit is smaller than one batch, so the broker must still hand over a whole batch.
    p = producer(pulllog_broker)
    try:
        values = [random.Random(i).randbytes(4096) for i in range(8)]
        for v in values:
            p.send("big", v, partition=0).get(10)
    finally:
        p.close(10)
    messages = consume_from_beginning(pulllog_broker, [TopicPartition("big", 0)], 8, max_partition_fetch_bytes=1024)
    assert [m.value for m in messages] == values


def test_consumer_waiting_at_the_end_gets_a_new_record_promptly(pulllog_broker) -> None:
    tp = TopicPartition("live", 0)
    produce_all(pulllog_broker, "live", [{"value": b"first"}])
    c = consumer(pulllog_broker, fetch_max_wait_ms=LONG_POLL_MS)
    p = producer(pulllog_broker)

    def produce_once_parked() -> None:
        block_until(lambda: parked_fetches(pulllog_broker, "live") >= 1, "the consumer's fetch at offset 1 is parked")
        p.send("live", b"second", partition=0).get(10)

    try:
        c.assign([tp])
        c.seek_to_beginning(tp)
        assert [m.value for m in read_at_least(c, 1)] == [b"first"]
        later = threading.Thread(target=produce_once_parked)
        later.start()
        [message] = read_at_least(c, 1)
        later.join()
    finally:
        c.close()
        p.close(10)
    assert (message.offset, message.value) == (1, b"second")
    assert expired_fetches(pulllog_broker) == 0, "a long poll answered at its deadline, not when the record arrived"


def test_fetch_min_bytes_counts_the_bytes_already_waiting(pulllog_broker) -> None:
    # ~870 bytes wait at the fetch offset, short of fetch_min_bytes=1000; ~370 more arrive
    # later. The long poll must answer then (870 + 370 >= 1000), not at fetch_max_wait_ms.
    tp = TopicPartition("trickle", 0)
    produce_all(pulllog_broker, "trickle", [{"value": b"a" * 800}])
    c = consumer(pulllog_broker, fetch_min_bytes=1000, fetch_max_wait_ms=LONG_POLL_MS)
    p = producer(pulllog_broker)
    produced = threading.Event()

    def produce_once_parked() -> None:
        block_until(lambda: parked_fetches(pulllog_broker, "trickle") >= 1, "the consumer's fetch is parked")
        produced.set()
        p.send("trickle", b"b" * 300, partition=0).get(10)

    try:
        c.assign([tp])
        c.seek_to_beginning(tp)
        later = threading.Thread(target=produce_once_parked)
        later.start()
        messages = read_at_least(c, 1)
        assert produced.is_set(), "the broker answered before fetch_min_bytes were available"
        later.join()
        messages += read_at_least(c, 2 - len(messages))
    finally:
        c.close()
        p.close(10)
    assert [len(m.value) for m in messages] == [800, 300]
    assert expired_fetches(pulllog_broker) == 0, "a long poll answered at its deadline, not once fetch_min_bytes were there"


def test_log_append_time_topic_stamps_the_broker_time_on_every_record(pulllog_broker, admin) -> None:
    # The broker rewrites the batch header (timestamp type, max timestamp) and its CRC;
    # kafka-python checks that CRC on every batch it reads.
    admin.create_topics({"stamped": {"configs": {"message.timestamp.type": "LogAppendTime"}}})
    before = int(time.time() * 1000)
    acknowledged = produce_all(pulllog_broker, "stamped", sample_records(5, keyed=True), compression_type="gzip")
    after = int(time.time() * 1000)

    messages = consume_from_beginning(pulllog_broker, [TopicPartition("stamped", 0)], 5, check_crcs=True)
    assert all(before <= md.timestamp <= after for md in acknowledged)  # not the producer's timestamps
    assert [(m.timestamp_type, m.timestamp) for m in messages] == [(1, md.timestamp) for md in acknowledged]


def test_consumer_beyond_the_end_resets_to_the_earliest_offset(pulllog_broker) -> None:
    tp = TopicPartition("events", 0)
    produce_all(pulllog_broker, "events", [{"value": b"v%d" % i} for i in range(3)])
    c = consumer(pulllog_broker, auto_offset_reset="earliest")
    try:
        c.assign([tp])
        c.seek(tp, 100)  # OFFSET_OUT_OF_RANGE from the broker, then ListOffsets EARLIEST
        assert [m.value for m in read_at_least(c, 3)] == [b"v0", b"v1", b"v2"]
    finally:
        c.close()


def test_unkeyed_record_to_a_compacted_topic_fails_with_invalid_record(pulllog_broker, admin) -> None:
    admin.create_topics({"table": {"configs": {"cleanup.policy": "compact"}}})
    p = producer(pulllog_broker, retries=0)
    try:
        with pytest.raises(KafkaInvalidRecordError, match="without a key"):
            p.send("table", b"no key", partition=0).get(10)
        assert p.send("table", b"keyed", key=b"k", partition=0).get(10).offset == 0
    finally:
        p.close(10)


def test_idempotent_producer_writes_batches_with_its_producer_id(pulllog_broker) -> None:
    records = sample_records(25, keyed=True)
    produce_all(pulllog_broker, "exactly-once", records, enable_idempotence=True, compression_type="zstd",
                linger_ms=5, batch_size=2048)

    messages = consume_from_beginning(pulllog_broker, [TopicPartition("exactly-once", 0)], len(records))
    assert [as_received(m) for m in messages] == [as_sent(r) for r in records]

    headers = stored_batches(pulllog_broker, "exactly-once", 0)
    assert len(headers) > 1
    assert {h.producer_id for h in headers} != {-1} and len({h.producer_id for h in headers}) == 1
    assert {h.producer_epoch for h in headers} == {0}
    assert headers[0].base_sequence == 0
    for before, after in zip(headers, headers[1:]):
        assert after.base_sequence == before.base_sequence + before.records_count


# ---------------------------------------------------------------------------- list offsets


def test_end_and_beginning_offsets_follow_produce_and_delete_records(pulllog_broker, admin) -> None:
    tp = TopicPartition("events", 0)
    produce_all(pulllog_broker, "events", sample_records(12, keyed=False))
    c = consumer(pulllog_broker)
    try:
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 12}
        admin.delete_records({tp: 5})
        assert c.beginning_offsets([tp]) == {tp: 5}
        assert c.end_offsets([tp]) == {tp: 12}
    finally:
        c.close()


def test_offsets_for_times_finds_the_first_record_at_or_after_a_timestamp(pulllog_broker) -> None:
    tp = TopicPartition("events", 0)
    records = sample_records(20, keyed=False)  # timestamps BASE + 0, 10, 20, ...
    produce_all(pulllog_broker, "events", records[:10], compression_type="gzip")
    produce_all(pulllog_broker, "events", records[10:])
    c = consumer(pulllog_broker)
    try:
        found = c.offsets_for_times({tp: BASE_TIMESTAMP_MS + 55})
        assert (found[tp].offset, found[tp].timestamp) == (6, BASE_TIMESTAMP_MS + 60)
        found = c.offsets_for_times({tp: BASE_TIMESTAMP_MS + 120})
        assert (found[tp].offset, found[tp].timestamp) == (12, BASE_TIMESTAMP_MS + 120)
        found = c.offsets_for_times({tp: 0})
        assert (found[tp].offset, found[tp].timestamp) == (0, BASE_TIMESTAMP_MS)
        assert c.offsets_for_times({tp: BASE_TIMESTAMP_MS + 10_000}) == {tp: None}
    finally:
        c.close()


def test_list_partition_offsets_finds_the_record_with_the_largest_timestamp(pulllog_broker, admin) -> None:
    tp = TopicPartition("events", 0)
    p = producer(pulllog_broker)
    try:
        for ts in [1_000, 5_000, 3_000, 5_000, 2_000]:  # one batch each, out of time order
            p.send("events", b"x", partition=0, timestamp_ms=ts).get(10)
    finally:
        p.close(10)
    found = admin.list_partition_offsets({tp: OffsetSpec.MAX_TIMESTAMP})[tp]
    assert (found.offset, found.timestamp) == (1, 5_000)
    assert admin.list_partition_offsets({tp: OffsetSpec.EARLIEST})[tp].offset == 0
    assert admin.list_partition_offsets({tp: OffsetSpec.LATEST})[tp].offset == 5


# ---------------------------------------------------------------------------- admin


def test_admin_creates_lists_and_deletes_topics(admin) -> None:
    created = admin.create_topics({"alpha": {"num_partitions": 3, "replication_factor": 1}, "beta": {}})
    assert {(t["name"], t["error_code"], t["num_partitions"]) for t in created["topics"]} == {
        ("alpha", 0, 3), ("beta", 0, 1)}
    assert set(admin.list_topics()) == {"alpha", "beta"}
    [alpha] = admin.describe_topics(["alpha"])
    assert sorted(p["partition_index"] for p in alpha["partitions"]) == [0, 1, 2]

    deleted = admin.delete_topics(["alpha"])
    assert [(t["name"], t["error_code"]) for t in deleted["topics"]] == [("alpha", 0)]
    assert admin.list_topics() == ["beta"]


def test_admin_create_topics_raises_kafka_errors(admin) -> None:
    admin.create_topics(["taken"])
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics(["taken"])
    with pytest.raises(InvalidTopicError):
        admin.create_topics(["bad name!"])
    with pytest.raises(InvalidReplicationFactorError):
        admin.create_topics({"replicated": {"num_partitions": 1, "replication_factor": 3}})


def test_admin_describe_configs_shows_topic_overrides_and_defaults(admin) -> None:
    admin.create_topics({"configured": {"configs": {"retention.ms": "3600000", "cleanup.policy": "compact"}}})
    resource = ConfigResource(ConfigResourceType.TOPIC, "configured")

    modified = admin.describe_configs([resource])["topic"]["configured"]
    everything = admin.describe_configs([resource], config_filter="all")["topic"]["configured"]

    overrides = {"retention.ms": "3600000", "cleanup.policy": "compact"}
    assert {name: c["value"] for name, c in modified.items()} == overrides
    assert {c["config_source"] for c in modified.values()} == {"DYNAMIC_TOPIC_CONFIG"}
    assert everything["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"


def test_admin_describe_configs_of_the_broker_are_read_only(pulllog_broker, admin) -> None:
    resource = ConfigResource(ConfigResourceType.BROKER, "0")
    configs = admin.describe_configs([resource], config_filter="all")["broker"]["0"]
    assert configs["num.partitions"]["value"] == "1"
    assert all(c["config_source"] == "STATIC_BROKER_CONFIG" for c in configs.values())
    # read-only but for the dynamic broker configs pulllog implements: the broker log defaults
    assert configs["log.dirs"]["read_only"] and not configs["log.retention.ms"]["read_only"]


def test_admin_create_partitions_then_produce_to_a_new_partition(pulllog_broker, admin) -> None:
    admin.create_topics({"growing": {"num_partitions": 1}})
    admin.create_partitions({"growing": NewPartitions(4)})
    [described] = admin.describe_topics(["growing"])
    assert sorted(p["partition_index"] for p in described["partitions"]) == [0, 1, 2, 3]

    produce_all(pulllog_broker, "growing", [{"value": b"on partition 3"}], partition=3)
    messages = consume_from_beginning(pulllog_broker, [TopicPartition("growing", 3)], 1)
    assert [(m.partition, m.value) for m in messages] == [(3, b"on partition 3")]
