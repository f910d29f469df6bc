"""aiokafka, an independent pure-Python asyncio client, against a real pulllog broker.

Every test starts a fresh broker (the ``pulllog_broker`` fixture) and talks to it with
aiokafka's own producer, consumer and admin client; nothing is mocked. Consumers use
manual assignment and never commit: the group coordinator APIs are not implemented yet.

aiokafka 0.14 sends ApiVersions v0, then for each request the newest version it implements
inside our range. Its newest versions are older than ours, so against pulllog it sends
Metadata v5, Produce v7, Fetch v11, ListOffsets v3, InitProducerId v0, CreateTopics v3,
DeleteTopics v3, DescribeConfigs v2, CreatePartitions v1 and DeleteRecords v2: the broker
must keep serving those old versions. (Against a broker without the group or transaction
APIs, an aiokafka group consumer or transactional producer retries forever instead of
failing.) aiokafka has no class for INVALID_RECORD (87) and reports it as UnknownError, as
it would against Apache Kafka.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import for_code
from waits import TIMEOUT_S, expired_fetches, parked_fetches, wait_until


from sample_records import BASE_TIMESTAMP_MS, CODECS, as_received, as_sent, sample_records

ACKS = [0, 1, "all"]
NO_RECORDS_YET_S = 15.0
# Longer than any test runs: only the record a test waits for can answer its long poll.
LONG_POLL_MS = 30_000


def producer(broker, **options) -> AIOKafkaProducer:
    return AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers, **options)


def consumer(broker, **options) -> AIOKafkaConsumer:
    options.setdefault("enable_auto_commit", False)
    options.setdefault("auto_offset_reset", "earliest")
    return AIOKafkaConsumer(bootstrap_servers=broker.bootstrap_servers, **options)


@contextlib.asynccontextmanager
async def admin(broker) -> AsyncIterator[AIOKafkaAdminClient]:
    client = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def produce_all(broker, topic: str, records: list[dict], *, partition: int | None = 0, **options) -> None:
    """Send every record before waiting for any, so they travel in shared batches."""
    p = producer(broker, **options)
    await p.start()
    try:
        futures = [await p.send(topic, partition=partition, **r) for r in records]
        await p.flush()
        await asyncio.gather(*futures)
    finally:
        await p.stop()


async def consume_from_beginning(broker, tps: list[TopicPartition], count: int, **options) -> list:
    """Assign ``tps``, seek to the beginning and read until ``count`` records arrived."""
    c = consumer(broker, **options)
    await c.start()
    try:
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        return await read_at_least(c, count)
    finally:
        await c.stop()


async def read_at_least(c: AIOKafkaConsumer, count: int) -> list:
    messages: list = []
    deadline = time.monotonic() + NO_RECORDS_YET_S
    while len(messages) < count:
        assert time.monotonic() < deadline, f"got {len(messages)} of {count} records"
        for batch in (await c.getmany(timeout_ms=500)).values():
            messages.extend(batch)
    return messages


def stored_batches(broker, topic: str, partition: int) -> list:
    """Headers of the batches as the broker keeps them on disk (read on the broker's loop)."""
    def read() -> list:
        return [b.header for b in broker.broker.topics.partition(topic, partition).log.read_batches(0)]
    return broker.call(read)


def raise_errors(results) -> None:
    for result in results:
        name, code = result[0], result[1]
        if code:
            raise for_code(code)(f"{name}: {result}")


# ---------------------------------------------------------------------------- produce and consume


@pytest.mark.parametrize("acks", ACKS, ids=lambda a: f"acks={a}")
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c or "none")
@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "unkeyed"])
async def test_records_come_back_byte_identical_in_order(pulllog_broker, keyed, codec, acks) -> None:
    records = sample_records(40, keyed=keyed)
    await produce_all(pulllog_broker, "events", records, compression_type=codec, acks=acks)

    messages = await consume_from_beginning(pulllog_broker, [TopicPartition("events", 0)], len(records))

    assert [m.offset for m in messages] == list(range(len(records)))
    assert [as_received(m) for m in messages] == [as_sent(r) for r in records]
    assert {m.timestamp_type for m in messages} == {0}  # CreateTime, as the producer set it
    stored = stored_batches(pulllog_broker, "events", 0)
    assert {b.compression.name.lower() for b in stored} == {codec or "none"}
    assert len(stored) < len(records)  # the records really travelled in shared batches


async def test_keyed_records_keep_their_order_within_each_partition(pulllog_broker) -> None:
    async with admin(pulllog_broker) as a:
        raise_errors((await a.create_topics([NewTopic("orders", 3, 1)])).topic_errors)
    records = [{"key": b"customer-%d" % (i % 6), "value": b"order-%d" % i} for i in range(60)]
    await produce_all(pulllog_broker, "orders", records, partition=None, compression_type="lz4")

    tps = [TopicPartition("orders", p) for p in range(3)]
    messages = await consume_from_beginning(pulllog_broker, tps, len(records))

    partitions_of_key: dict[bytes, set[int]] = {}
    for m in messages:
        partitions_of_key.setdefault(m.key, set()).add(m.partition)
    assert all(len(p) == 1 for p in partitions_of_key.values())
    for key in partitions_of_key:
        assert [m.value for m in messages if m.key == key] == [r["value"] for r in records if r["key"] == key]


async def test_seek_into_the_middle_of_a_compressed_batch_starts_at_that_offset(pulllog_broker) -> None:
    records = sample_records(30, keyed=True)
    await produce_all(pulllog_broker, "events", records, compression_type="zstd")
    tp = TopicPartition("events", 0)
    c = consumer(pulllog_broker)
    await c.start()
    try:
        c.assign([tp])
        c.seek(tp, 17)
        messages = await read_at_least(c, len(records) - 17)
    finally:
        await c.stop()
    assert [m.offset for m in messages] == list(range(17, 30))
    assert [as_received(m) for m in messages] == [as_sent(r) for r in records[17:]]


async def test_getmany_returns_records_of_every_assigned_partition(pulllog_broker) -> None:
    async with admin(pulllog_broker) as a:
        raise_errors((await a.create_topics([NewTopic("pair", 2, 1)])).topic_errors)
    for partition in range(2):
        await produce_all(pulllog_broker, "pair", [{"value": b"p%d-%d" % (partition, i)} for i in range(10)],
                          partition=partition)
    tps = [TopicPartition("pair", 0), TopicPartition("pair", 1)]
    c = consumer(pulllog_broker)
    await c.start()
    try:
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        by_partition: dict[TopicPartition, list[bytes]] = {tp: [] for tp in tps}
        deadline = time.monotonic() + NO_RECORDS_YET_S
        while any(len(v) < 10 for v in by_partition.values()):
            assert time.monotonic() < deadline
            for tp, batch in (await c.getmany(*tps, timeout_ms=500, max_records=7)).items():
                assert len(batch) <= 7
                by_partition[tp].extend(m.value for m in batch)
    finally:
        await c.stop()
    assert by_partition == {tp: [b"p%d-%d" % (tp.partition, i) for i in range(10)] for tp in tps}


async def test_small_max_partition_fetch_bytes_still_reads_every_batch(pulllog_broker) -> None:
    # Each 4 KiB value is its own batch (linger 0, send_and_wait); a 1 KiB fetch limit is
    # smaller than one batch, so the broker must still hand over one whole batch per fetch.
    p = producer(pulllog_broker)
    await p.start()
    try:
        values = [random.Random(i).randbytes(4096) for i in range(8)]
        for v in values:
            await p.send_and_wait("big", v, partition=0)
    finally:
        await p.stop()
    messages = await consume_from_beginning(pulllog_broker, [TopicPartition("big", 0)], 8,
                                            max_partition_fetch_bytes=1024)
    assert [m.value for m in messages] == values


async def test_consumer_waiting_at_the_end_gets_a_new_record_promptly(pulllog_broker) -> None:
    tp = TopicPartition("live", 0)
    await produce_all(pulllog_broker, "live", [{"value": b"first"}])
    c = consumer(pulllog_broker, fetch_max_wait_ms=LONG_POLL_MS)
    await c.start()
    try:
        c.assign([tp])
        await c.seek_to_beginning(tp)
        assert [m.value for m in await read_at_least(c, 1)] == [b"first"]
        waiting = asyncio.ensure_future(c.getone())
        await wait_until(lambda: parked_fetches(pulllog_broker, "live") >= 1, "the consumer's fetch at offset 1 is parked")
        assert not waiting.done()
        await produce_all(pulllog_broker, "live", [{"value": b"second"}])
        message = await asyncio.wait_for(waiting, TIMEOUT_S)
    finally:
        await c.stop()
    assert (message.offset, message.value) == (1, b"second")
    assert expired_fetches(pulllog_broker) == 0, "a long poll answered at its deadline, not when the record arrived"


async def test_fetch_min_bytes_counts_the_bytes_already_waiting(pulllog_broker) -> None:
    # ~870 bytes wait at the fetch offset, short of fetch_min_bytes=1000; ~370 more arrive
    # later. The long poll must answer then (870 + 370 >= 1000), not at fetch_max_wait_ms.
    tp = TopicPartition("trickle", 0)
    await produce_all(pulllog_broker, "trickle", [{"value": b"a" * 800}])
    c = consumer(pulllog_broker, fetch_min_bytes=1000, fetch_max_wait_ms=LONG_POLL_MS)
    await c.start()
    try:
        c.assign([tp])
        await c.seek_to_beginning(tp)
        waiting = asyncio.ensure_future(read_at_least(c, 1))
        await wait_until(lambda: parked_fetches(pulllog_broker, "trickle") >= 1, "the consumer's fetch is parked")
        assert not waiting.done(), "the broker answered before fetch_min_bytes were available"
        await produce_all(pulllog_broker, "trickle", [{"value": b"b" * 300}])
        messages = await asyncio.wait_for(waiting, TIMEOUT_S)
        messages += await read_at_least(c, 2 - len(messages))
    finally:
        await c.stop()
    assert [len(m.value) for m in messages] == [800, 300]
    assert expired_fetches(pulllog_broker) == 0, "a long poll answered at its deadline, not once fetch_min_bytes were there"


async def test_log_append_time_topic_stamps_the_broker_time_on_every_record(pulllog_broker) -> None:
    # The broker rewrites the batch header (timestamp type, max timestamp) and its CRC;
    # aiokafka checks that CRC on every batch it reads.
    async with admin(pulllog_broker) as a:
        topic = NewTopic("stamped", 1, 1, topic_configs={"message.timestamp.type": "LogAppendTime"})
        raise_errors((await a.create_topics([topic])).topic_errors)
    before = int(time.time() * 1000)
    p = producer(pulllog_broker, compression_type="snappy")
    await p.start()
    try:
        metadata = await p.send_and_wait("stamped", b"v", key=b"k", timestamp_ms=1234)
    finally:
        await p.stop()
    after = int(time.time() * 1000)

    [message] = await consume_from_beginning(pulllog_broker, [TopicPartition("stamped", 0)], 1, check_crcs=True)
    assert metadata.timestamp_type == 1 and before <= metadata.timestamp <= after
    assert (message.timestamp_type, message.timestamp) == (1, metadata.timestamp)


async def test_consumer_beyond_the_end_resets_to_the_earliest_offset(pulllog_broker) -> None:
    tp = TopicPartition("events", 0)
    await produce_all(pulllog_broker, "events", [{"value": b"v%d" % i} for i in range(3)])
    c = consumer(pulllog_broker, auto_offset_reset="earliest")
    await c.start()
    try:
        c.assign([tp])
        c.seek(tp, 100)  # OFFSET_OUT_OF_RANGE from the broker, then ListOffsets EARLIEST
        assert [m.value for m in await read_at_least(c, 3)] == [b"v0", b"v1", b"v2"]
    finally:
        await c.stop()


# ---------------------------------------------------------------------------- idempotence


async def test_idempotent_producer_writes_batches_with_its_producer_id(pulllog_broker) -> None:
    records = sample_records(25, keyed=True)
    await produce_all(pulllog_broker, "exactly-once", records, enable_idempotence=True, compression_type="gzip")

    messages = await consume_from_beginning(pulllog_broker, [TopicPartition("exactly-once", 0)], len(records))
    assert [as_received(m) for m in messages] == [as_sent(r) for r in records]

    headers = stored_batches(pulllog_broker, "exactly-once", 0)
    assert {h.producer_id for h in headers} != {-1} and len({h.producer_id for h in headers}) == 1
    assert {h.producer_epoch for h in headers} == {0}
    assert headers[0].base_sequence == 0
    for before, after in zip(headers, headers[1:]):
        assert after.base_sequence == before.base_sequence + before.records_count


# ---------------------------------------------------------------------------- list offsets


async def test_end_and_beginning_offsets_follow_produce_and_delete_records(pulllog_broker) -> None:
    tp = TopicPartition("events", 0)
    await produce_all(pulllog_broker, "events", sample_records(12, keyed=False))
    c = consumer(pulllog_broker)
    await c.start()
    try:
        assert await c.beginning_offsets([tp]) == {tp: 0}
        assert await c.end_offsets([tp]) == {tp: 12}
        async with admin(pulllog_broker) as a:
            assert await a.delete_records({tp: RecordsToDelete(5)}) == {tp: 5}
        assert await c.beginning_offsets([tp]) == {tp: 5}
        assert await c.end_offsets([tp]) == {tp: 12}
    finally:
        await c.stop()


async def test_offsets_for_times_finds_the_first_record_at_or_after_a_timestamp(pulllog_broker) -> None:
    tp = TopicPartition("events", 0)
    records = sample_records(20, keyed=False)  # timestamps BASE + 0, 10, 20, ...
    await produce_all(pulllog_broker, "events", records[:10], compression_type="snappy")
    await produce_all(pulllog_broker, "events", records[10:])
    c = consumer(pulllog_broker)
    await c.start()
    try:
        found = await c.offsets_for_times({tp: BASE_TIMESTAMP_MS + 55})
        assert (found[tp].offset, found[tp].timestamp) == (6, BASE_TIMESTAMP_MS + 60)
        found = await c.offsets_for_times({tp: BASE_TIMESTAMP_MS + 120})
        assert (found[tp].offset, found[tp].timestamp) == (12, BASE_TIMESTAMP_MS + 120)
        found = await c.offsets_for_times({tp: 0})
        assert (found[tp].offset, found[tp].timestamp) == (0, BASE_TIMESTAMP_MS)
        assert await c.offsets_for_times({tp: BASE_TIMESTAMP_MS + 10_000}) == {tp: None}
    finally:
        await c.stop()


# ---------------------------------------------------------------------------- admin


async def test_admin_creates_lists_and_deletes_topics(pulllog_broker) -> None:
    async with admin(pulllog_broker) as a:
        created = await a.create_topics([NewTopic("alpha", 3, 1), NewTopic("beta", 1, 1)])
        raise_errors(created.topic_errors)
        assert set(await a.list_topics()) == {"alpha", "beta"}
        described = {t["topic"]: t for t in await a.describe_topics(["alpha"])}
        assert sorted(p["partition"] for p in described["alpha"]["partitions"]) == [0, 1, 2]

        deleted = await a.delete_topics(["alpha"])
        assert [(name, code) for name, code, *_ in deleted.topic_error_codes] == [("alpha", 0)]
        assert await a.list_topics() == ["beta"]


async def test_admin_create_topics_reports_kafka_error_codes(pulllog_broker) -> None:
    async with admin(pulllog_broker) as a:
        raise_errors((await a.create_topics([NewTopic("taken", 1, 1)])).topic_errors)
        response = await a.create_topics([NewTopic("taken", 1, 1), NewTopic("bad name!", 1, 1),
                                          NewTopic("replicated", 1, 3)])
    codes = {name: for_code(code).__name__ for name, code, *_ in response.topic_errors}
    assert codes == {"taken": "TopicAlreadyExistsError", "bad name!": "InvalidTopicError",
                     "replicated": "InvalidReplicationFactorError"}


async def test_admin_describe_configs_shows_topic_overrides_and_defaults(pulllog_broker) -> None:
    async with admin(pulllog_broker) as a:
        topic = NewTopic("configured", 1, 1, topic_configs={"retention.ms": "3600000", "cleanup.policy": "compact"})
        raise_errors((await a.create_topics([topic])).topic_errors)
        [response] = await a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "configured")])
    [(code, _message, _type, name, entries)] = response.resources
    assert (code, name) == (0, "configured")
    configs = {e[0]: e for e in entries}
    DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5
    assert configs["retention.ms"][1:2] == ("3600000",) and configs["retention.ms"][3] == DYNAMIC_TOPIC_CONFIG
    assert configs["cleanup.policy"][1] == "compact" and configs["cleanup.policy"][3] == DYNAMIC_TOPIC_CONFIG
    assert configs["segment.bytes"][3] == DEFAULT_CONFIG


async def test_admin_create_partitions_then_produce_to_a_new_partition(pulllog_broker) -> None:
    async with admin(pulllog_broker) as a:
        raise_errors((await a.create_topics([NewTopic("growing", 1, 1)])).topic_errors)
        await a.create_partitions({"growing": NewPartitions(4)})
        [described] = await a.describe_topics(["growing"])
    assert sorted(p["partition"] for p in described["partitions"]) == [0, 1, 2, 3]
    await produce_all(pulllog_broker, "growing", [{"value": b"on partition 3"}], partition=3)
    messages = await consume_from_beginning(pulllog_broker, [TopicPartition("growing", 3)], 1)
    assert [(m.partition, m.value) for m in messages] == [(3, b"on partition 3")]
