"""pulllog's Consumer against a real broker (the ``pulllog_broker`` fixture).

Records are written by librdkafka (confluent-kafka), an independent producer, or as exact
batches over the wire when a test needs to know where batch boundaries are.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer as RdProducer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_wire import WireClient, produce
from waits import expired_fetches, parked_fetches, wait_until

from pulllog.client.consumer import (
    Consumer,
    ConsumerClosedError,
    CorruptRecordError,
    NoOffsetForPartitionError,
    OffsetAndTimestamp,
    OffsetOutOfRangeError,
)
from pulllog.client.types import ConsumerRecord, TopicPartition
from pulllog.records import build_batch
from pulllog.records.compression import Compression
from pulllog.records.batch import iter_batches
from pulllog.records.control import build_control_batch
from pulllog.testing import BrokerThread

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
WAIT_S = 30  # generous: only a hung consumer should ever hit it


# ---------------------------------------------------------------------------- helpers


def create_topic(broker: Any, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(WAIT_S)


def rdkafka_produce(broker: Any, topic: str, messages: list[dict[str, Any]], **config: Any) -> list[tuple[int, int]]:
    """Produce with librdkafka; returns (partition, offset) per message, in order."""
    producer = RdProducer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5, **config})
    placed: list[tuple[int, int] | None] = [None] * len(messages)

    def delivered(index: int):
        def report(err: Any, msg: Any) -> None:
            assert err is None, err
            placed[index] = (msg.partition(), msg.offset())
        return report

    for i, m in enumerate(messages):
        producer.produce(topic, on_delivery=delivered(i), **m)
        producer.poll(0)
    assert producer.flush(WAIT_S) == 0
    assert all(p is not None for p in placed)
    return placed  # type: ignore[return-value]


def produce_values(broker: Any, topic: str, values: list[bytes], partition: int = 0) -> None:
    rdkafka_produce(broker, topic, [{"value": v, "partition": partition} for v in values])


def produce_batch(broker: Any, topic: str, records: list[tuple[bytes | None, bytes | None]],
                  partition: int = 0, **kwargs: Any) -> None:
    """Exactly one batch, as built here (the broker assigns its offsets)."""
    with WireClient(broker.port) as c:
        resp = produce(c, topic, partition, build_batch(records, **kwargs))
    assert resp.responses[0].partition_responses[0].error_code.value == 0


def stored_codecs(data_dir: Path, topic: str) -> set[Compression]:
    """The codecs of the batches in the topic's segment files: what the consumer had to decode."""
    codecs = set()
    for segment in data_dir.glob(f"{topic}-*/*.log"):
        codecs |= {header.compression for _pos, header in iter_batches(segment.read_bytes())}
    return codecs


async def read(consumer: Consumer, count: int) -> list[ConsumerRecord]:
    """Exactly ``count`` records through getmany, within WAIT_S."""
    out: list[ConsumerRecord] = []
    async with asyncio.timeout(WAIT_S):
        while len(out) < count:
            for records in (await consumer.getmany(timeout_ms=200, max_records=count - len(out))).values():
                out.extend(records)
    return out


def consumer_for(broker: Any, **options: Any) -> Consumer:
    options.setdefault("fetch_max_wait_ms", 100)
    return Consumer(broker.bootstrap_servers, client_id="test-consumer", **options)


# ---------------------------------------------------------------------------- cross-client


@pytest.mark.parametrize("codec", CODECS)
async def test_confluent_kafka_records_arrive_byte_identical(pulllog_broker, codec: str) -> None:
    create_topic(pulllog_broker, "cross", partitions=3)
    rng = random.Random(codec)
    base_ts = 1_700_000_000_000
    messages = []
    for i in range(600):
        key = None if i % 7 == 0 else b"key-%d" % rng.randrange(50)
        # compressible, else librdkafka sends the batch uncompressed
        value = None if i % 97 == 5 else (rng.randbytes(16) * 2000)[:rng.choice([0, 1, 200, 1000, 20_000])]
        headers = [("trace", rng.randbytes(8)), ("empty", b""), ("null", None)] if i % 3 == 0 else None
        messages.append({"key": key, "value": value, "headers": headers, "timestamp": base_ts + i})
    placed = rdkafka_produce(pulllog_broker, "cross", messages, **{"compression.type": codec})

    expected: dict[int, list[tuple[int, Any]]] = defaultdict(list)
    for (partition, offset), m in zip(placed, messages, strict=True):
        expected[partition].append((offset, m))
    assert len(expected) == 3, "the keys should spread over every partition"
    assert stored_codecs(pulllog_broker.data_dir, "cross") == {Compression.parse(codec)}

    async with consumer_for(pulllog_broker, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("cross", p) for p in range(3)])
        got = await read(consumer, len(messages))

    by_partition: dict[int, list[ConsumerRecord]] = defaultdict(list)
    for r in got:
        by_partition[r.partition].append(r)
    for partition, want in expected.items():
        records = by_partition[partition]
        assert [r.offset for r in records] == [offset for offset, _ in want]  # in order, none missing
        for r, (_offset, m) in zip(records, want, strict=True):
            assert r.topic == "cross"
            assert r.key == m["key"]
            assert r.value == m["value"]
            assert r.headers == tuple(m["headers"] or ())
            assert (r.timestamp, r.timestamp_type) == (m["timestamp"], 0)


async def test_log_append_time_topic_gives_every_record_the_brokers_time(pulllog_broker) -> None:
    create_topic(pulllog_broker, "appended", config={"message.timestamp.type": "LogAppendTime"})
    rdkafka_produce(pulllog_broker, "appended", [{"value": b"v", "timestamp": 1000 + i} for i in range(5)])
    async with consumer_for(pulllog_broker, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("appended", 0)])
        records = await read(consumer, 5)
    assert {r.timestamp_type for r in records} == {1}
    assert all(r.timestamp > 1_600_000_000_000 for r in records)  # the broker's clock, not 1000 + i


# ---------------------------------------------------------------------------- the never-ending stream


async def test_iterator_waits_for_a_later_produce_then_yields_it(pulllog_broker) -> None:
    produce_values(pulllog_broker, "stream", [b"before"])
    async with consumer_for(pulllog_broker, auto_offset_reset="latest", fetch_max_wait_ms=100) as consumer:
        consumer.assign([TopicPartition("stream", 0)])
        assert await consumer.position(TopicPartition("stream", 0)) == 1

        async def first_record() -> ConsumerRecord:
            async for record in consumer:
                return record
            raise AssertionError("the iterator ended")

        waiter = asyncio.create_task(first_record())
        await wait_until(lambda: expired_fetches(pulllog_broker) >= 3, "three long polls came back empty")
        assert not waiter.done(), "the iterator must wait for new records, not end"
        await asyncio.to_thread(produce_values, pulllog_broker, "stream", [b"later"])
        record = await asyncio.wait_for(waiter, WAIT_S)
    assert (record.offset, record.value) == (1, b"later")


async def test_iterator_ends_when_the_consumer_is_closed(pulllog_broker) -> None:
    produce_values(pulllog_broker, "closing", [b"x"])
    consumer = consumer_for(pulllog_broker, auto_offset_reset="latest")
    await consumer.start()
    consumer.assign([TopicPartition("closing", 0)])
    seen: list[ConsumerRecord] = []

    async def iterate() -> None:
        async for record in consumer:
            seen.append(record)

    task = asyncio.create_task(iterate())
    await wait_until(lambda: parked_fetches(pulllog_broker, "closing") >= 1, "the iterator's fetch is parked")
    await consumer.close()
    await asyncio.wait_for(task, WAIT_S)  # ended, not cancelled
    assert seen == []


async def test_a_topic_created_after_assign_is_read_once_it_exists(pulllog_broker) -> None:
    async with consumer_for(pulllog_broker, auto_offset_reset="earliest", retry_backoff_ms=50) as consumer:
        consumer.assign([TopicPartition("not-yet", 0)])
        assert await consumer.getmany(timeout_ms=300) == {}
        await asyncio.to_thread(produce_values, pulllog_broker, "not-yet", [b"hello"])
        record = await asyncio.wait_for(consumer.getone(), WAIT_S)
    assert (record.offset, record.value) == (0, b"hello")


async def test_consumer_carries_on_after_the_broker_restarts(tmp_path) -> None:
    data_dir = tmp_path / "data"
    broker = BrokerThread(data_dir).start()
    port = broker.port
    try:
        produce_values(broker, "restart", [b"a", b"b"])
        async with Consumer(broker.bootstrap_servers, auto_offset_reset="earliest", fetch_max_wait_ms=100,
                            retry_backoff_ms=50) as consumer:
            consumer.assign([TopicPartition("restart", 0)])
            before = await read(consumer, 2)
            state = consumer._subscriptions.state(TopicPartition("restart", 0))
            backed_off_until = state.retry_at
            await asyncio.to_thread(broker.stop)
            await wait_until(lambda: state.retry_at > backed_off_until,
                             "a fetch failed against the stopped broker and the fetcher backed off")
            broker = BrokerThread(data_dir, port=port).start()
            await asyncio.to_thread(produce_values, broker, "restart", [b"c"])
            after = await read(consumer, 1)
    finally:
        broker.stop()
    assert [(r.offset, r.value) for r in before + after] == [(0, b"a"), (1, b"b"), (2, b"c")]


# ---------------------------------------------------------------------------- positions


async def test_seek_reads_from_the_given_offset(pulllog_broker) -> None:
    produce_values(pulllog_broker, "seek", [b"%d" % i for i in range(20)])
    tp = TopicPartition("seek", 0)
    async with consumer_for(pulllog_broker, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        await read(consumer, 20)
        consumer.seek(tp, 7)
        records = await read(consumer, 3)
    assert [(r.offset, r.value) for r in records] == [(7, b"7"), (8, b"8"), (9, b"9")]


async def test_seek_to_beginning_reads_the_partition_again(pulllog_broker) -> None:
    produce_values(pulllog_broker, "again", [b"a", b"b", b"c"])
    tp = TopicPartition("again", 0)
    async with consumer_for(pulllog_broker, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        first = await read(consumer, 3)
        await consumer.seek_to_beginning(tp)
        assert await consumer.position(tp) == 0
        second = await read(consumer, 3)
    assert [r.value for r in first] == [r.value for r in second] == [b"a", b"b", b"c"]


async def test_seek_to_end_skips_what_is_there_and_reads_what_comes(pulllog_broker) -> None:
    produce_values(pulllog_broker, "end", [b"old"] * 5)
    tp = TopicPartition("end", 0)
    async with consumer_for(pulllog_broker, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        await consumer.seek_to_end()
        assert await consumer.position(tp) == 5
        produce_values(pulllog_broker, "end", [b"new"])
        records = await read(consumer, 1)
    assert [(r.offset, r.value) for r in records] == [(5, b"new")]


async def test_position_is_the_offset_after_the_last_record_read(pulllog_broker) -> None:
    produce_values(pulllog_broker, "pos", [b"x"] * 10)
    tp = TopicPartition("pos", 0)
    async with consumer_for(pulllog_broker, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        assert await consumer.position(tp) == 0
        records = await read(consumer, 4)
        assert records[-1].offset == 3
        assert await consumer.position(tp) == 4
        assert consumer.highwater(tp) == 10


async def test_offsets_for_times_finds_the_first_record_at_or_after_a_time(pulllog_broker) -> None:
    rdkafka_produce(pulllog_broker, "times", [{"value": b"%d" % i, "timestamp": 10_000 + 1000 * i} for i in range(5)])
    tp = TopicPartition("times", 0)
    async with consumer_for(pulllog_broker) as consumer:
        consumer.assign([tp])
        found = await consumer.offsets_for_times({tp: 12_500})
        assert found == {tp: OffsetAndTimestamp(3, 13_000)}
        assert await consumer.offsets_for_times({tp: 99_000}) == {tp: None}
        consumer.seek(tp, found[tp].offset)
        records = await read(consumer, 2)
    assert [r.timestamp for r in records] == [13_000, 14_000]


async def test_beginning_and_end_offsets_span_the_log(pulllog_broker) -> None:
    produce_values(pulllog_broker, "span", [b"x"] * 8)
    tp = TopicPartition("span", 0)
    async with consumer_for(pulllog_broker) as consumer:
        assert await consumer.beginning_offsets([tp]) == {tp: 0}
        assert await consumer.end_offsets([tp]) == {tp: 8}


async def test_committed_is_none_for_a_partition_the_group_never_committed(pulllog_broker) -> None:
    async with consumer_for(pulllog_broker, group_id="later") as consumer:
        consumer.assign([TopicPartition("groupless", 0)])
        assert await consumer.committed(TopicPartition("groupless", 0)) is None
        with pytest.raises(ValueError, match="assign"):
            consumer.subscribe("groupless")  # assign() and subscribe() do not mix


# ---------------------------------------------------------------------------- auto_offset_reset


async def test_auto_offset_reset_earliest_starts_at_the_first_record(pulllog_broker) -> None:
    produce_values(pulllog_broker, "early", [b"first", b"second"])
    async with consumer_for(pulllog_broker, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("early", 0)])
        record = await asyncio.wait_for(consumer.getone(), WAIT_S)
    assert (record.offset, record.value) == (0, b"first")


async def test_auto_offset_reset_latest_starts_after_the_last_record(pulllog_broker) -> None:
    produce_values(pulllog_broker, "late", [b"first", b"second"])
    tp = TopicPartition("late", 0)
    async with consumer_for(pulllog_broker, auto_offset_reset="latest") as consumer:
        consumer.assign([tp])
        assert await consumer.position(tp) == 2
        assert await consumer.getmany(timeout_ms=300) == {}
        produce_values(pulllog_broker, "late", [b"third"])
        record = await asyncio.wait_for(consumer.getone(), WAIT_S)
    assert (record.offset, record.value) == (2, b"third")


async def test_auto_offset_reset_none_without_a_position_raises_naming_the_range(pulllog_broker) -> None:
    produce_values(pulllog_broker, "strict", [b"x"] * 3)
    async with consumer_for(pulllog_broker, auto_offset_reset="none") as consumer:
        consumer.assign([TopicPartition("strict", 0)])
        with pytest.raises(NoOffsetForPartitionError, match=r"strict-0 has no position.*valid offsets are 0\.\.2"):
            await asyncio.wait_for(consumer.getone(), WAIT_S)


async def test_offset_out_of_range_with_reset_none_raises_naming_the_range(pulllog_broker) -> None:
    produce_values(pulllog_broker, "strict", [b"x"] * 3)
    tp = TopicPartition("strict", 0)
    async with consumer_for(pulllog_broker, auto_offset_reset="none") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 50)
        with pytest.raises(OffsetOutOfRangeError, match=r"offset 50 is out of range for strict-0.*0\.\.2") as caught:
            await asyncio.wait_for(consumer.getone(), WAIT_S)
        assert (caught.value.log_start_offset, caught.value.high_watermark) == (0, 3)
        consumer.seek(tp, 1)  # the error stays until the application moves the position
        record = await asyncio.wait_for(consumer.getone(), WAIT_S)
    assert record.offset == 1


async def test_offset_out_of_range_with_reset_earliest_starts_over(pulllog_broker) -> None:
    produce_values(pulllog_broker, "lenient", [b"a", b"b"])
    tp = TopicPartition("lenient", 0)
    async with consumer_for(pulllog_broker, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 1000)
        record = await asyncio.wait_for(consumer.getone(), WAIT_S)
    assert (record.offset, record.value) == (0, b"a")


# ---------------------------------------------------------------------------- batches and fetch sizes


async def test_reading_from_the_middle_of_a_batch_starts_at_the_requested_offset(pulllog_broker) -> None:
    produce_batch(pulllog_broker, "middle", [(None, b"%d" % i) for i in range(10)])
    tp = TopicPartition("middle", 0)
    async with consumer_for(pulllog_broker) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 6)
        records = await read(consumer, 4)
    assert [(r.offset, r.value) for r in records] == [(6, b"6"), (7, b"7"), (8, b"8"), (9, b"9")]


async def test_batch_larger_than_max_partition_fetch_bytes_is_still_read(pulllog_broker) -> None:
    for _ in range(3):
        produce_batch(pulllog_broker, "big", [(None, os.urandom(1000)) for _ in range(10)])  # ~10 KB batches
    async with consumer_for(pulllog_broker, auto_offset_reset="earliest", max_partition_fetch_bytes=1024,
                            fetch_max_bytes=1024) as consumer:
        consumer.assign([TopicPartition("big", 0)])
        records = await read(consumer, 30)
    assert [r.offset for r in records] == list(range(30))


async def test_partial_batch_at_the_end_of_a_response_is_fetched_again_whole(pulllog_broker) -> None:
    create_topic(pulllog_broker, "cut", partitions=2)
    written: dict[int, list[bytes]] = defaultdict(list)
    for partition in (0, 1):
        for b in range(6):
            values = [b"%d-%d-%d" % (partition, b, i) + bytes(90) for i in range(10)]
            produce_batch(pulllog_broker, "cut", [(None, v) for v in values], partition=partition)
            written[partition] += values
    # ~1 KB batches, 2.5 KB per partition and response: most responses end inside a batch
    async with consumer_for(pulllog_broker, auto_offset_reset="earliest", max_partition_fetch_bytes=2500,
                            fetch_max_bytes=2500) as consumer:
        consumer.assign([TopicPartition("cut", 0), TopicPartition("cut", 1)])
        records = await read(consumer, 120)
    for partition in (0, 1):
        mine = [r for r in records if r.partition == partition]
        assert [r.offset for r in mine] == list(range(60))
        assert [r.value for r in mine] == written[partition]


async def test_next_fetch_is_in_flight_while_the_application_holds_records(pulllog_broker) -> None:
    for _ in range(4):
        produce_batch(pulllog_broker, "ahead", [(None, bytes(500)) for _ in range(4)])  # ~2 KB batches
    tp = TopicPartition("ahead", 0)
    async with consumer_for(pulllog_broker, auto_offset_reset="earliest", max_partition_fetch_bytes=2500) as consumer:
        consumer.assign([tp])
        first = await read(consumer, 1)
        # Without reading further, the fetcher has the next response too (and then stops).
        state = consumer._subscriptions.state(tp)
        await wait_until(lambda: len(state.chunks) >= 2, "the fetcher buffered the next response")
        # That it then stops can only show over time: a window in which a third fetch would
        # land (the absence of an event), not a wait for one.
        await asyncio.sleep(0.3)
        assert len(state.chunks) == 2
        rest = await read(consumer, 15)
    assert [r.offset for r in first + rest] == list(range(16))


async def test_transaction_markers_are_not_returned(pulllog_broker) -> None:
    produce_batch(pulllog_broker, "markers", [(None, b"plain")])
    # Markers are written by the transaction coordinator, not produced: append them as it will.
    log = pulllog_broker.call(lambda: pulllog_broker.broker.topics.topics["markers"].partitions[0].log)
    pulllog_broker.call(log.append, build_batch([(None, b"in-txn")], producer_id=7, producer_epoch=0,
                                                base_sequence=0, transactional=True))
    pulllog_broker.call(log.append, build_control_batch(7, 0, True, 0, 0))
    produce_batch(pulllog_broker, "markers", [(None, b"after")])
    tp = TopicPartition("markers", 0)
    async with consumer_for(pulllog_broker, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        records = await read(consumer, 3)
        assert [(r.offset, r.value) for r in records] == [(0, b"plain"), (1, b"in-txn"), (3, b"after")]
        assert await consumer.position(tp) == 4


# ---------------------------------------------------------------------------- CRC


def corrupt_batch(data_dir: Path, topic: str, batch_index: int) -> None:
    """Flip a byte in the records of the batch_index-th batch of partition 0, in place (the
    broker sends from the open file, so it serves the damaged bytes)."""
    segment = data_dir / f"{topic}-0" / f"{0:020d}.log"
    with open(segment, "r+b") as f:
        data = f.read()
        pos = 0
        for _ in range(batch_index):
            pos += 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
        target = pos + 61 + 20  # inside the first record's value
        f.seek(target)
        f.write(bytes([data[target] ^ 0xFF]))


async def test_check_crcs_catches_a_corrupted_batch(pulllog_broker) -> None:
    for b in range(3):
        produce_batch(pulllog_broker, "damaged", [(None, b"batch-%d-%d-" % (b, i) + bytes(30)) for i in range(5)])
    corrupt_batch(pulllog_broker.data_dir, "damaged", 1)
    tp = TopicPartition("damaged", 0)
    async with consumer_for(pulllog_broker, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        good = await read(consumer, 5)
        with pytest.raises(CorruptRecordError, match=r"offsets 5\.\.9 of damaged-0 failed its CRC-32C check.*"
                                                     r"seek to offset 10"):
            await read(consumer, 1)
        consumer.seek(tp, 10)
        after = await read(consumer, 5)
    assert [r.offset for r in good + after] == list(range(5)) + list(range(10, 15))


async def test_without_check_crcs_a_damaged_value_is_delivered(pulllog_broker) -> None:
    produce_batch(pulllog_broker, "unchecked", [(None, b"x" * 40) for i in range(3)])
    corrupt_batch(pulllog_broker.data_dir, "unchecked", 0)
    async with consumer_for(pulllog_broker, auto_offset_reset="earliest", check_crcs=False) as consumer:
        consumer.assign([TopicPartition("unchecked", 0)])
        records = await read(consumer, 3)
    assert records[0].value != b"x" * 40 and records[1].value == b"x" * 40


# ---------------------------------------------------------------------------- getmany, getone, close


async def test_getmany_returns_at_most_max_records(pulllog_broker) -> None:
    produce_values(pulllog_broker, "many", [b"x"] * 50)
    tp = TopicPartition("many", 0)
    async with consumer_for(pulllog_broker, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        await consumer.position(tp)
        batch = await consumer.getmany(timeout_ms=WAIT_S * 1000, max_records=7)
        assert [r.offset for r in batch[tp]] == list(range(7))
        batch = await consumer.getmany(timeout_ms=WAIT_S * 1000, max_records=7)
        assert [r.offset for r in batch[tp]] == list(range(7, 14))


async def test_getmany_without_max_records_returns_at_most_max_poll_records(pulllog_broker) -> None:
    produce_values(pulllog_broker, "capped", [b"x"] * 50)
    tp = TopicPartition("capped", 0)
    async with consumer_for(pulllog_broker, auto_offset_reset="earliest", max_poll_records=20) as consumer:
        consumer.assign([tp])
        await wait_until(lambda: consumer.highwater(tp) is not None and len(consumer._subscriptions.state(tp).chunks) > 0,
                         "all 50 records are buffered")
        batch = await consumer.getmany()
    assert [r.offset for r in batch[tp]] == list(range(20))


async def test_getmany_returns_nothing_when_its_timeout_passes_without_records(pulllog_broker) -> None:
    produce_values(pulllog_broker, "quiet", [b"x"])
    async with consumer_for(pulllog_broker, auto_offset_reset="latest") as consumer:
        consumer.assign([TopicPartition("quiet", 0)])
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await consumer.getmany(timeout_ms=300) == {}
        assert loop.time() - started >= 0.25


async def test_getone_of_one_partition_ignores_the_others(pulllog_broker) -> None:
    create_topic(pulllog_broker, "pick", partitions=2)
    produce_values(pulllog_broker, "pick", [b"zero"], partition=0)
    produce_values(pulllog_broker, "pick", [b"one"], partition=1)
    async with consumer_for(pulllog_broker, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("pick", 0), TopicPartition("pick", 1)])
        record = await asyncio.wait_for(consumer.getone(TopicPartition("pick", 1)), WAIT_S)
    assert (record.partition, record.value) == (1, b"one")


async def test_close_leaves_no_running_tasks(pulllog_broker) -> None:
    produce_values(pulllog_broker, "tidy", [b"x"] * 3)
    before = asyncio.all_tasks()
    consumer = consumer_for(pulllog_broker, auto_offset_reset="latest", fetch_max_wait_ms=5000)
    await consumer.start()
    consumer.assign([TopicPartition("tidy", 0)])
    assert await consumer.getmany(timeout_ms=300) == {}  # a 5 s long poll is in flight now
    await consumer.close()
    assert asyncio.all_tasks() == before
    with pytest.raises(ConsumerClosedError):
        await consumer.getone()
