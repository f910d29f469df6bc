"""pulllog's Producer against a real broker (the ``pulllog_broker`` fixture).

What the producer wrote is checked from the outside: by independent consumers
(confluent-kafka / librdkafka and aiokafka), or by reading the batches the broker stored in
its data directory with ``pulllog.log``, which shows batch boundaries, codecs, producer ids
and sequence numbers exactly as they went over the wire.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
import confluent_kafka
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioTopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from waits import connection_count, log_end_offset, wait_until

from pulllog.client.accumulator import ProducerBatch, encode_headers
from pulllog.client.errors import KafkaError, UnknownTopicError
from pulllog.client.partitioner import (
    RoundRobinPartitioner,
    StickyPartitioner,
    murmur2,
    murmur2_partition,
)
from pulllog.client.producer import (
    BatchMetadata,
    BufferExhaustedError,
    DeliveryTimeoutError,
    Producer,
    ProducerClosedError,
)
from pulllog.client.types import RecordMetadata
from pulllog.records import Compression, RecordBatch, build_batch
from pulllog.records.batch import iter_batches
from pulllog.testing import BrokerThread

from sample_records import as_sent, sample_records

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]
WAIT_S = 30  # generous: only a hung client should ever hit it
METADATA = 3  # the API key
BASE_TIMESTAMP_MS = 1_700_000_000_000


# ---------------------------------------------------------------------------- helpers


def create_topic(broker: BrokerThread, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    assert broker.broker is not None
    broker.call(broker.broker.topics.create, name, partitions, config or {})


def stored_batches(broker: BrokerThread, topic: str, partition: int = 0) -> list[RecordBatch]:
    """Every batch the broker wrote for a partition, read from its segment files."""
    batches = []
    for segment in sorted((Path(broker.data_dir) / f"{topic}-{partition}").glob("*.log")):
        data = segment.read_bytes()
        batches.extend(RecordBatch.from_bytes(data, pos) for pos, _header in iter_batches(data))
    return batches


def stored_values(broker: BrokerThread, topic: str, partition: int = 0) -> list[bytes | None]:
    return [r.value for b in stored_batches(broker, topic, partition) for r in b.records()]


async def produce_samples(broker: BrokerThread, topic: str, records: list[dict[str, Any]],
                          **options: Any) -> dict[int, list[tuple[Any, ...]]]:
    """Send with pulllog; return what was sent per partition, in send order."""
    by_partition: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    async with Producer(broker.bootstrap_servers, **options) as producer:
        futures = [await producer.send(topic, r["value"], key=r["key"], headers=r["headers"],
                                       timestamp=r["timestamp_ms"]) for r in records]
        for record, future in zip(records, futures):
            metadata = await future
            by_partition[metadata.partition].append(as_sent(record))
    return by_partition


def consume_with_confluent(broker: BrokerThread, topic: str, partitions: int, count: int) -> list[Any]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "check",
                                         "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
    messages: list[Any] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(messages) < count and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                assert message.error() is None, message.error()
                messages.append(message)
    finally:
        consumer.close()
    return messages


async def consume_with_aiokafka(broker: BrokerThread, topic: str, partitions: int, count: int) -> list[Any]:
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap_servers, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    messages: list[Any] = []
    try:
        consumer.assign([AioTopicPartition(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + WAIT_S
        while len(messages) < count and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                messages.extend(batch)
    finally:
        await consumer.stop()
    return messages


# ---------------------------------------------------------------------------- encoding (no broker)

optional_bytes = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=8), optional_bytes), max_size=3)
records = st.lists(
    st.tuples(optional_bytes, optional_bytes, st.integers(-10_000, 20_000_000), headers, st.booleans()),
    min_size=1, max_size=80)


def encode_as_the_producer_does(items: list[tuple[Any, ...]], codec: Compression) -> bytes:
    """Records through ProducerBatch, alternating single appends and message sets."""
    loop = asyncio.new_event_loop()
    try:
        batch = ProducerBatch("t", 0, BASE_TIMESTAMP_MS + items[0][2], 0.0, loop)
        pending: list[tuple[Any, ...]] = []
        for key, value, ts_delta, hdrs, in_a_set in items:
            if in_a_set:
                pending.append((key, value, hdrs, BASE_TIMESTAMP_MS + ts_delta))
                continue
            if pending:
                batch.extend(pending, BASE_TIMESTAMP_MS, None)
                pending = []
            batch.append(key, value, encode_headers(hdrs), BASE_TIMESTAMP_MS + ts_delta)
        if pending:
            batch.extend(pending, BASE_TIMESTAMP_MS, None)
        return batch.seal(codec, 42, 3, 1000)
    finally:
        loop.close()


@settings(max_examples=150, deadline=None)
@given(records)
def test_producer_batches_are_byte_identical_to_the_reference_codec(items: list[tuple[Any, ...]]) -> None:
    ours = encode_as_the_producer_does(items, Compression.NONE)
    reference = build_batch([(k, v, BASE_TIMESTAMP_MS + ts, h) for k, v, ts, h, _ in items],
                            producer_id=42, producer_epoch=3, base_sequence=1000)
    assert ours == reference


@pytest.mark.parametrize("codec", [Compression(c) for c in range(5)], ids=lambda c: c.name.lower())
def test_kafka_python_decodes_producer_batches(codec: Compression) -> None:
    from kafka.record.default_records import DefaultRecordBatch

    items = [(b"k%d" % i if i % 3 else None, (b"value %d " % i) * (i % 9) if i % 7 else None,
              i * 3 - 50, [("h", b"%d" % i), ("n", None)][: i % 3], i % 2 == 0) for i in range(200)]
    theirs = DefaultRecordBatch(bytearray(encode_as_the_producer_does(items, codec)))
    assert theirs.validate_crc() and theirs.compression_type == int(codec)
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (42, 3, 1000)
    got = [(r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in theirs]
    assert got == [(i, k, v, BASE_TIMESTAMP_MS + ts, h) for i, (k, v, ts, h, _) in enumerate(items)]


# ---------------------------------------------------------------------------- partitioning (no broker)


def test_murmur2_matches_the_java_clients_test_vectors() -> None:
    # From Kafka's UtilsTest.testMurmur2
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107


def test_the_sticky_partitioner_moves_on_only_when_its_batch_closes() -> None:
    sticky = StickyPartitioner(random.Random(1))
    partitions = [0, 1, 2, 3]
    first = sticky.partition("t", None, partitions, partitions)
    assert {sticky.partition("t", None, partitions, partitions) for _ in range(100)} == {first}
    sticky.batch_closed("t", (first + 1) % 4, partitions, partitions)  # another partition's batch
    assert sticky.partition("t", None, partitions, partitions) == first
    sticky.batch_closed("t", first, partitions, partitions)
    assert sticky.partition("t", None, partitions, partitions) != first


def test_the_round_robin_partitioner_takes_available_partitions_in_turn() -> None:
    rr = RoundRobinPartitioner()
    assert [rr.partition("t", None, [0, 1, 2], [0, 2]) for _ in range(4)] == [0, 2, 0, 2]
    assert rr.partition("t", b"key", [0, 1, 2], [0, 2]) == murmur2_partition(b"key", 3)


# ---------------------------------------------------------------------------- sending


async def test_send_resolves_to_where_the_record_landed(pulllog_broker: BrokerThread) -> None:
    async with Producer(pulllog_broker.bootstrap_servers) as producer:
        first = await producer.send("greetings", b"hello", timestamp=BASE_TIMESTAMP_MS)
        second = await producer.send("greetings", b"world", key=b"k", headers=[("h", b"v")])
        assert asyncio.isfuture(first)  # a RecordFuture: asyncio treats it as a future
        assert await first == RecordMetadata("greetings", 0, 0, BASE_TIMESTAMP_MS)
        metadata = await second
        assert (metadata.topic, metadata.partition, metadata.offset) == ("greetings", 0, 1)
        assert abs(metadata.timestamp - time.time() * 1000) < 60_000
    assert stored_values(pulllog_broker, "greetings") == [b"hello", b"world"]


async def test_send_and_wait_returns_the_metadata(pulllog_broker: BrokerThread) -> None:
    async with Producer(pulllog_broker.bootstrap_servers) as producer:
        metadata = await producer.send_and_wait("events", b"one", timestamp=BASE_TIMESTAMP_MS + 1)
    assert metadata == RecordMetadata("events", 0, 0, BASE_TIMESTAMP_MS + 1)


async def test_a_new_topic_is_auto_created_by_the_first_send(pulllog_broker: BrokerThread) -> None:
    assert pulllog_broker.broker is not None
    async with Producer(pulllog_broker.bootstrap_servers) as producer:
        await producer.send_and_wait("brand-new", b"x")
    assert "brand-new" in pulllog_broker.broker.topics.topics


async def test_send_batch_appends_a_message_set_contiguously_with_one_future(pulllog_broker: BrokerThread) -> None:
    create_topic(pulllog_broker, "sets", 3)
    items = [b"plain", None, (b"key", b"keyed"), (None, b"with headers", [("h", b"1")]),
             (b"k2", b"own timestamp", (), BASE_TIMESTAMP_MS)]
    async with Producer(pulllog_broker.bootstrap_servers) as producer:
        await producer.send_and_wait("sets", b"before", partition=2)
        future = await producer.send_batch("sets", items, partition=2, timestamp=BASE_TIMESTAMP_MS + 5)
        batch = await future
    assert batch == BatchMetadata("sets", 2, 1, 5, BASE_TIMESTAMP_MS + 5)
    assert list(batch.offsets) == [1, 2, 3, 4, 5]
    stored = stored_batches(pulllog_broker, "sets", 2)[-1]
    assert stored.header.base_offset == 1 and stored.header.records_count == 5  # one RecordBatch
    records = stored.records()
    assert [(r.key, r.value) for r in records] == [
        (None, b"plain"), (None, None), (b"key", b"keyed"), (None, b"with headers"), (b"k2", b"own timestamp")]
    assert records[3].headers == (("h", b"1"),)
    assert [r.timestamp for r in records] == [BASE_TIMESTAMP_MS + 5] * 4 + [BASE_TIMESTAMP_MS]


async def test_send_queues_the_record_when_called_and_raises_from_the_await(pulllog_broker: BrokerThread) -> None:
    """send() is not a coroutine function: with nothing to wait for, the call itself appends
    the record (the awaitable only hands its future over), in the order of the calls; what is
    wrong with a record is still raised by the await, as from a coroutine."""
    create_topic(pulllog_broker, "eager", 3)
    async with Producer(pulllog_broker.bootstrap_servers) as producer:
        await producer.send_and_wait("eager", b"first", partition=0)  # the topic's metadata is known
        pending = [producer.send("eager", bytes([i]), partition=1) for i in range(5)]  # none awaited yet
        await producer.flush()
        assert stored_values(pulllog_broker, "eager", 1) == [bytes([i]) for i in range(5)]
        futures = [await p for p in pending]
        assert [(await f).offset for f in futures] == [0, 1, 2, 3, 4]
        refused = producer.send("eager", "text")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="encode it first"):
            await refused
        missing = producer.send("eager", b"x", partition=7)
        with pytest.raises(KafkaError, match="partition 7 does not exist"):
            await missing


async def test_send_to_a_partition_the_topic_lacks_raises_a_clear_error(pulllog_broker: BrokerThread) -> None:
    create_topic(pulllog_broker, "three", 3)
    async with Producer(pulllog_broker.bootstrap_servers) as producer:
        with pytest.raises(KafkaError, match=r"partitions 0\.\.2; partition 7 does not exist") as caught:
            await producer.send("three", b"x", partition=7)
    assert caught.value.code == ErrorCode.unknown_topic_or_partition


async def test_a_str_value_is_refused_with_a_hint_to_encode_it(pulllog_broker: BrokerThread) -> None:
    async with Producer(pulllog_broker.bootstrap_servers) as producer:
        with pytest.raises(TypeError, match=r"value must be bytes or None, not str; encode it first"):
            await producer.send("t", "text")  # type: ignore[arg-type]
        assert (await producer.send_and_wait("t", b"bytes are fine")).offset == 0


async def test_send_before_start_and_after_close_raise_producer_closed(pulllog_broker: BrokerThread) -> None:
    producer = Producer(pulllog_broker.bootstrap_servers)
    with pytest.raises(ProducerClosedError, match="not started"):
        await producer.send("t", b"x")
    await producer.start()
    await producer.close()
    with pytest.raises(ProducerClosedError, match="closed"):
        await producer.send("t", b"x")


async def test_start_fails_fast_when_no_broker_answers() -> None:
    producer = Producer("127.0.0.1:1")
    with pytest.raises(ConnectionError, match=r"127\.0\.0\.1:1.*pulllog serve"):
        await producer.start()


# ---------------------------------------------------------------------------- partitioning


async def test_keyed_records_land_where_confluent_kafka_murmur2_random_puts_them(pulllog_broker: BrokerThread) -> None:
    create_topic(pulllog_broker, "keyed-rdkafka", 7)
    create_topic(pulllog_broker, "keyed-pulllog", 7)
    keys = [b"user-%d" % i for i in range(150)] + [bytes([i]) * (i % 13 + 1) for i in range(1, 50)]

    rd_partition: dict[bytes, int] = {}
    rd = confluent_kafka.Producer({"bootstrap.servers": pulllog_broker.bootstrap_servers,
                                   "partitioner": "murmur2_random", "linger.ms": 5})

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        rd_partition[msg.key()] = msg.partition()

    for key in keys:
        rd.produce("keyed-rdkafka", b"v", key, on_delivery=delivered)
    assert rd.flush(WAIT_S) == 0

    async with Producer(pulllog_broker.bootstrap_servers) as producer:
        futures = [await producer.send("keyed-pulllog", b"v", key=key) for key in keys]
        ours = {key: (await f).partition for key, f in zip(keys, futures)}

    assert ours == rd_partition
    assert len(set(ours.values())) == 7  # the keys really spread over every partition


async def test_records_without_keys_stick_to_one_partition_until_its_batch_is_full(
        pulllog_broker: BrokerThread) -> None:
    create_topic(pulllog_broker, "sticky", 4)
    value = b"v" * 100
    async with Producer(pulllog_broker.bootstrap_servers, linger_ms=60_000, batch_size=4096) as producer:
        futures = [await producer.send("sticky", b"%04d" % i + value) for i in range(600)]
        await producer.flush()
        placed = [(await f).partition for f in futures]

    # a run of consecutive records per partition, switching only when a batch fills
    runs = [1]
    for before, after in zip(placed, placed[1:]):
        if after == before:
            runs[-1] += 1
        else:
            runs.append(1)
    assert min(runs[:-1]) >= 30  # 4 KiB of ~110-byte records: never a switch mid-batch
    assert len(set(placed)) > 1  # and it did move on
    for partition in range(4):
        for batch in stored_batches(pulllog_broker, "sticky", partition):
            numbers = [int(r.value[:4]) for r in batch.records()]  # type: ignore[index]
            assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))  # one run per batch


async def test_round_robin_spreads_records_without_keys_evenly(pulllog_broker: BrokerThread) -> None:
    create_topic(pulllog_broker, "rr", 4)
    async with Producer(pulllog_broker.bootstrap_servers, partitioner="round_robin") as producer:
        futures = [await producer.send("rr", b"x") for _ in range(40)]
        placed = [(await f).partition for f in futures]
    assert sorted(placed.count(p) for p in range(4)) == [10, 10, 10, 10]


async def test_a_callable_partitioner_chooses_the_partition(pulllog_broker: BrokerThread) -> None:
    create_topic(pulllog_broker, "custom", 3)
    seen = []

    def last_partition(key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
        seen.append((key, list(all_partitions)))
        return all_partitions[-1]

    async with Producer(pulllog_broker.bootstrap_servers, partitioner=last_partition) as producer:
        metadata = await producer.send_and_wait("custom", b"x", key=b"k")
    assert metadata.partition == 2 and seen == [(b"k", [0, 1, 2])]


# ---------------------------------------------------------------------------- batching and codecs


async def test_batches_form_under_load_even_with_linger_zero(pulllog_broker: BrokerThread) -> None:
    async with Producer(pulllog_broker.bootstrap_servers, linger_ms=0) as producer:
        futures = [await producer.send("load", b"x" * 200) for _ in range(3000)]
        await asyncio.gather(*futures)
    batches = stored_batches(pulllog_broker, "load")
    assert sum(b.header.records_count for b in batches) == 3000
    assert len(batches) < 300  # while one batch is in flight the next one fills


@pytest.mark.parametrize("codec", CODECS, ids=[str(c) for c in CODECS])
async def test_batches_are_stored_with_the_chosen_codec(pulllog_broker: BrokerThread, codec: str | None) -> None:
    async with Producer(pulllog_broker.bootstrap_servers, compression=codec, linger_ms=50) as producer:
        futures = [await producer.send("codec", b"compressible " * 20) for _ in range(100)]
        await asyncio.gather(*futures)
    batches = stored_batches(pulllog_broker, "codec")
    assert {b.header.compression for b in batches} == {Compression.parse(codec)}
    assert [r.value for b in batches for r in b.records()] == [b"compressible " * 20] * 100


@pytest.mark.parametrize("codec", CODECS, ids=[str(c) for c in CODECS])
async def test_confluent_kafka_reads_back_what_we_produced_byte_for_byte(
        pulllog_broker: BrokerThread, codec: str | None) -> None:
    create_topic(pulllog_broker, "cross", 3)
    records = sample_records(300, null_header_values=True)
    sent = await produce_samples(pulllog_broker, "cross", records, compression=codec, linger_ms=5)

    messages = consume_with_confluent(pulllog_broker, "cross", 3, len(records))
    received: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for m in sorted(messages, key=lambda m: (m.partition(), m.offset())):
        received[m.partition()].append((m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1]))
        assert m.timestamp()[0] == confluent_kafka.TIMESTAMP_CREATE_TIME
    assert received == sent


@pytest.mark.parametrize("codec", CODECS, ids=[str(c) for c in CODECS])
async def test_aiokafka_reads_back_what_we_produced_byte_for_byte(
        pulllog_broker: BrokerThread, codec: str | None) -> None:
    create_topic(pulllog_broker, "cross", 3)
    records = sample_records(300, null_header_values=True, seed=12)
    sent = await produce_samples(pulllog_broker, "cross", records, compression=codec, linger_ms=5)

    messages = await consume_with_aiokafka(pulllog_broker, "cross", 3, len(records))
    received: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for m in sorted(messages, key=lambda m: (m.partition, m.offset)):
        received[m.partition].append((m.key, m.value, tuple(m.headers), m.timestamp))
    assert received == sent


# ---------------------------------------------------------------------------- acks


@pytest.mark.parametrize("acks", [0, 1, "all"])
async def test_every_acks_setting_delivers_the_records(pulllog_broker: BrokerThread, acks: int | str) -> None:
    async with Producer(pulllog_broker.bootstrap_servers, acks=acks) as producer:
        futures = [await producer.send("acks", b"%d" % i) for i in range(50)]
        offsets = [(await f).offset for f in futures]
    if acks == 0:
        assert offsets == [-1] * 50  # nobody answered, so nobody said where
        await wait_until(lambda: log_end_offset(pulllog_broker, "acks") == 50, "the broker appended all 50")
    else:
        assert offsets == list(range(50))
    assert stored_values(pulllog_broker, "acks") == [b"%d" % i for i in range(50)]



# ---------------------------------------------------------------------------- the futures send() returns


async def test_record_futures_work_with_gather_wait_wait_for_shield_and_as_completed(
        pulllog_broker: BrokerThread) -> None:
    async with Producer(pulllog_broker.bootstrap_servers) as producer:
        futures = [await producer.send("asyncio", b"%d" % i) for i in range(6)]
        assert all(asyncio.isfuture(f) for f in futures)
        assert asyncio.ensure_future(futures[0]) is futures[0]
        gathered = await asyncio.gather(*futures[:2])
        done, pending = await asyncio.wait(futures[2:4])
        assert pending == set() and done == set(futures[2:4])
        waited = await asyncio.wait_for(futures[4], WAIT_S)
        shielded = await asyncio.shield(futures[5])
        in_completion_order = [await f for f in asyncio.as_completed(futures)]
        assert await futures[0] == gathered[0]  # awaiting again gives the same answer
    assert [m.offset for m in gathered] == [0, 1]
    assert [f.result().offset for f in futures] == list(range(6))
    assert (waited.offset, shielded.offset) == (4, 5)
    assert sorted(m.offset for m in in_completion_order) == list(range(6))
    assert all(m.topic == "asyncio" and m.partition == 0 for m in gathered)


async def test_done_callbacks_get_the_record_future_once_in_their_context(pulllog_broker: BrokerThread) -> None:
    import contextvars
    tag: contextvars.ContextVar[str] = contextvars.ContextVar("tag", default="none")
    calls: list[tuple[int, str]] = []
    never: list[Any] = []
    async with Producer(pulllog_broker.bootstrap_servers, linger_ms=600_000) as producer:
        futures = [await producer.send("callbacks", b"%d" % i) for i in range(3)]
        context = contextvars.copy_context()
        context.run(tag.set, "mine")
        futures[0].add_done_callback(lambda f: calls.append((f.result().offset, tag.get())), context=context)
        futures[1].add_done_callback(lambda f: calls.append((f.result().offset, tag.get())))
        futures[1].add_done_callback(never.append)
        assert futures[1].remove_done_callback(never.append) == 1
        assert not any(f.done() for f in futures)  # lingering: nothing was sent yet
        await producer.flush()
        await asyncio.sleep(0)
        assert sorted(calls) == [(0, "mine"), (1, "none")]
        late: list[Any] = []
        futures[2].add_done_callback(late.append)  # done already: called soon, not at once
        assert late == []
        await asyncio.sleep(0)
        assert late == [futures[2]]
    assert never == [] and len(calls) == 2


async def test_a_raising_callback_is_reported_and_the_others_still_run_in_order(pulllog_broker: BrokerThread) -> None:
    calls: list[str] = []
    reported: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: reported.append(context))

    def boom(_future: Any) -> None:
        calls.append("boom")
        raise ValueError("callback bug")

    async with Producer(pulllog_broker.bootstrap_servers, linger_ms=600_000) as producer:
        first = await producer.send("raising", b"a")
        second = await producer.send("raising", b"b")
        first.add_done_callback(lambda f: calls.append("first-1"))
        first.add_done_callback(boom)
        first.add_done_callback(lambda f: calls.append("first-3"))
        second.add_done_callback(calls.append)
        assert second.remove_done_callback(calls.append) == 1
        second.add_done_callback(lambda f: calls.append("second-again"))  # listed once, told once
        await producer.flush()
        await asyncio.sleep(0)
    assert calls == ["first-1", "boom", "first-3", "second-again"]
    assert [type(c["exception"]) for c in reported] == [ValueError] and reported[0]["future"] is first


async def test_cancelling_a_record_future_detaches_only_it_and_the_record_is_still_sent(
        pulllog_broker: BrokerThread) -> None:
    async with Producer(pulllog_broker.bootstrap_servers, linger_ms=600_000) as producer:
        futures = [await producer.send("detach", b"%d" % i) for i in range(4)]
        told: list[bool] = []
        futures[0].add_done_callback(lambda f: told.append(f.cancelled()))
        assert futures[0].cancel("not interested") and futures[0].cancelled() and futures[0].done()
        assert not futures[0].cancel()
        with pytest.raises(asyncio.CancelledError, match="not interested"):
            futures[0].result()
        waiter = asyncio.ensure_future(_await(futures[1]))
        await asyncio.sleep(0)
        waiter.cancel()  # the task waits on the record's own future: only that one is cancelled
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert futures[1].cancelled() and not futures[2].done()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(futures[2], 0.05)  # gives up on it, and cancels it
        assert futures[2].cancelled() and not futures[3].done()
        await producer.flush()  # the batch is sent, the cancelled records with it
        assert (await futures[3]).offset == 3 and futures[1].cancelled()
    assert told == [True]
    assert stored_values(pulllog_broker, "detach") == [b"0", b"1", b"2", b"3"]


async def _await(future: Any) -> Any:
    return await future


async def test_a_failed_batch_fails_every_record_future_with_the_same_error(pulllog_broker: BrokerThread) -> None:
    # a message set stays whole in one batch, so a set that alone is too large is not split:
    # its batch fails as a whole, and the records sent with send() in the same batch with it
    create_topic(pulllog_broker, "tiny", 1, {"max.message.bytes": "2000"})
    async with Producer(pulllog_broker.bootstrap_servers, linger_ms=600_000) as producer:
        whole = await producer.send_batch("tiny", [b"x" * 500] * 8, partition=0)  # ~4 KB, one set
        await producer.flush()
    error = whole.exception()
    assert isinstance(error, KafkaError) and error.code == ErrorCode.message_too_large
    for _ in range(2):  # raising it again and again keeps working
        with pytest.raises(KafkaError, match="MESSAGE_TOO_LARGE"):
            await whole


SPLIT_RECORDS, SPLIT_VALUE_BYTES = 500, 1000


@pytest.mark.parametrize("options", [{}, {"enable_idempotence": False, "acks": 1, "max_in_flight": 1},
                                     {"compression": "zstd"}],
                         ids=["idempotent", "not-idempotent", "idempotent-zstd"])
async def test_a_batch_over_max_message_bytes_is_split_and_its_records_sent_in_order(
        pulllog_broker: BrokerThread, options: dict[str, Any]) -> None:
    # The default batch_size (256 KiB) against a topic that takes 10,000 bytes: the batches
    # that pile up are refused (MESSAGE_TOO_LARGE), split in halves until they fit, and every
    # record lands once, in send order (Kafka's split-and-reenqueue). Without idempotence
    # order is strict with max_in_flight=1 only, as in Kafka.
    from pulllog import Consumer, TopicPartition

    create_topic(pulllog_broker, "bounded", 1, {"max.message.bytes": "10000"})
    noise = random.Random(17)  # values that do not compress: a compressed batch must be split too
    values = [b"%04d" % i + noise.randbytes(SPLIT_VALUE_BYTES - 4) for i in range(SPLIT_RECORDS)]
    async with Producer(pulllog_broker.bootstrap_servers, **options) as producer:
        futures = [await producer.send("bounded", v, partition=0) for v in values]
        metadata = await asyncio.wait_for(asyncio.gather(*futures), WAIT_S)
    assert [m.offset for m in metadata] == list(range(SPLIT_RECORDS))
    assert len(stored_batches(pulllog_broker, "bounded")) > 1, "the records went in several batches"
    async with Consumer(pulllog_broker.bootstrap_servers, auto_offset_reset="earliest",
                        fetch_max_wait_ms=100) as consumer:
        consumer.assign([TopicPartition("bounded", 0)])
        read: list[Any] = []
        async with asyncio.timeout(WAIT_S):
            while len(read) < SPLIT_RECORDS:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    read.extend(records)
    assert [(r.offset, r.value) for r in read] == list(enumerate(values))


@pytest.mark.parametrize("idempotent", [True, False])
async def test_only_the_record_too_large_alone_fails_when_its_batch_is_split(
        pulllog_broker: BrokerThread, idempotent: bool) -> None:
    create_topic(pulllog_broker, "bounded", 1, {"max.message.bytes": "10000"})
    options: dict[str, Any] = {} if idempotent else {"enable_idempotence": False, "acks": 1, "max_in_flight": 1}
    small = [b"%04d" % i + b"v" * 996 for i in range(40)]
    async with Producer(pulllog_broker.bootstrap_servers, linger_ms=600_000, **options) as producer:
        before = [await producer.send("bounded", v, partition=0) for v in small[:20]]
        too_large = await producer.send("bounded", b"x" * 20_000, partition=0)
        after = [await producer.send("bounded", v, partition=0) for v in small[20:]]
        fitting = await producer.send_batch("bounded", small[:3], partition=0)  # a set stays whole
        await producer.flush()
        with pytest.raises(KafkaError, match=r"^MESSAGE_TOO_LARGE producing 1 record\(s\)") as refused:
            await too_large
        assert refused.value.code == ErrorCode.message_too_large
        offsets = [(await f).offset for f in before + after]
        set_metadata = await fitting
    assert offsets == list(range(40))
    assert (set_metadata.base_offset, set_metadata.count) == (40, 3)
    assert stored_values(pulllog_broker, "bounded") == small + small[:3]


async def test_log_append_time_topics_report_the_brokers_time_for_each_record(pulllog_broker: BrokerThread) -> None:
    create_topic(pulllog_broker, "appended", 1, {"message.timestamp.type": "LogAppendTime"})
    async with Producer(pulllog_broker.bootstrap_servers) as producer:
        futures = [await producer.send("appended", b"x", timestamp=BASE_TIMESTAMP_MS) for _ in range(3)]
        metadata = await asyncio.gather(*futures)
    assert [m.offset for m in metadata] == [0, 1, 2]
    assert all(abs(m.timestamp - time.time() * 1000) < 60_000 for m in metadata)


# ---------------------------------------------------------------------------- errors, retries, back-pressure


async def test_a_record_over_the_topics_max_message_bytes_fails_with_message_too_large(
        pulllog_broker: BrokerThread) -> None:
    create_topic(pulllog_broker, "small", 1, {"max.message.bytes": "2000"})
    async with Producer(pulllog_broker.bootstrap_servers) as producer:
        big = await producer.send("small", b"x" * 5000)
        with pytest.raises(KafkaError, match=r"^MESSAGE_TOO_LARGE producing 1 record\(s\) to small-0") as caught:
            await big
        assert caught.value.code == ErrorCode.message_too_large and not caught.value.retriable
        assert (await producer.send_and_wait("small", b"fits")).offset == 0  # the partition carries on


async def test_a_keyless_record_for_a_compacted_topic_fails_with_invalid_record_and_the_reason(
        pulllog_broker: BrokerThread) -> None:
    create_topic(pulllog_broker, "compacted", 1, {"cleanup.policy": "compact"})
    async with Producer(pulllog_broker.bootstrap_servers) as producer:
        keyless = await producer.send("compacted", b"no key")
        with pytest.raises(KafkaError, match=r"^INVALID_RECORD producing 1 record\(s\) to compacted-0: .*"
                                             r"record 0: compacted topic cannot accept a record without a key"):
            await keyless
        assert (await producer.send_and_wait("compacted", b"keyed", key=b"k")).offset == 0


async def test_a_record_over_max_request_size_fails_its_future_without_reaching_the_broker(
        pulllog_broker: BrokerThread) -> None:
    async with Producer(pulllog_broker.bootstrap_servers, max_request_size=10_000) as producer:
        future = await producer.send("limits", b"x" * 20_000)
        with pytest.raises(KafkaError, match=r"MESSAGE_TOO_LARGE: .* more than max_request_size=10000") as caught:
            await future
        assert caught.value.code == ErrorCode.message_too_large
    assert stored_values(pulllog_broker, "limits") == []


async def test_send_raises_when_the_buffer_stays_full_past_max_block_ms(pulllog_broker: BrokerThread) -> None:
    producer = Producer(pulllog_broker.bootstrap_servers, buffer_memory=8192, max_block_ms=300)
    await producer.start()
    queued = []
    try:
        await producer.send_and_wait("pressure", b"warm up")
        pulllog_broker.stop()  # nothing will be acknowledged from now on
        with pytest.raises(BufferExhaustedError, match=r"waited max_block_ms=300 for buffer space.*buffer_memory=8192"):
            for _ in range(100):  # 100 KB into an 8 KiB buffer
                queued.append(await producer.send("pressure", b"x" * 1000))
        assert 0 < len(queued) < 10
    finally:
        await producer.close(timeout=0.2)
    for future in queued:  # close gave up on them
        with pytest.raises(ProducerClosedError, match="closed before the record was sent"):
            await future


async def test_sending_to_a_missing_topic_without_auto_create_raises_unknown_topic(tmp_path: Path) -> None:
    with BrokerThread(tmp_path / "data", auto_create_topics=False) as broker:
        async with Producer(broker.bootstrap_servers, max_block_ms=300) as producer:
            with pytest.raises(UnknownTopicError, match=r"'nowhere' does not exist and the broker did not create it"):
                await producer.send("nowhere", b"x")


async def test_records_sent_while_the_broker_restarts_arrive_in_order(tmp_path: Path) -> None:
    broker = BrokerThread(tmp_path / "data").start()
    port = broker.port
    try:
        async with Producer(broker.bootstrap_servers, retry_backoff_ms=50) as producer:
            await producer.send_and_wait("restart", b"before")
            broker.stop()
            futures = [await producer.send("restart", b"during %02d" % i) for i in range(20)]
            await wait_until(lambda: any(b.last_error is not None for b in producer._acc.incomplete),
                             "a send failed against the stopped broker")
            assert not any(f.done() for f in futures)
            broker = BrokerThread(tmp_path / "data", port=port).start()
            offsets = [(await f).offset for f in futures]
        assert offsets == list(range(1, 21))
        assert stored_values(broker, "restart") == [b"before"] + [b"during %02d" % i for i in range(20)]
    finally:
        broker.stop()


async def test_unknown_topic_errors_refresh_metadata_and_retry_until_the_topic_is_back(tmp_path: Path) -> None:
    with BrokerThread(tmp_path / "data", auto_create_topics=False) as broker:
        assert broker.broker is not None
        create_topic(broker, "comes-back", 1)
        async with Producer(broker.bootstrap_servers, retry_backoff_ms=20) as producer:
            await producer.send_and_wait("comes-back", b"first life")
            broker.call(broker.broker.delete_topic, "comes-back")
            asked = broker.broker.faults.observe(METADATA, topic="comes-back")
            future = await producer.send("comes-back", b"second life")
            # UNKNOWN_TOPIC_OR_PARTITION, metadata without the topic, again and again
            await wait_until(lambda: asked.fired >= 2, "the producer asked twice for the topic's metadata")
            assert not future.done()
            create_topic(broker, "comes-back", 1)
            assert (await future).offset == 0
        assert stored_values(broker, "comes-back") == [b"second life"]


async def test_a_record_nobody_acknowledges_fails_after_delivery_timeout_ms(pulllog_broker: BrokerThread) -> None:
    async with Producer(pulllog_broker.bootstrap_servers, delivery_timeout_ms=500, retry_backoff_ms=50) as producer:
        await producer.send_and_wait("late", b"warm up")
        pulllog_broker.stop()
        future = await producer.send("late", b"lost")
        with pytest.raises(DeliveryTimeoutError, match=r"1 record\(s\) for late-0 not acknowledged within "
                                                       r"delivery_timeout_ms=500; last error: .*127\.0\.0\.1"):
            await future


# ---------------------------------------------------------------------------- lifecycle


async def test_close_sends_records_that_were_still_lingering(pulllog_broker: BrokerThread) -> None:
    producer = Producer(pulllog_broker.bootstrap_servers, linger_ms=600_000)
    await producer.start()
    futures = [await producer.send("pending", b"%d" % i) for i in range(100)]
    assert not any(f.done() for f in futures)
    await producer.close()
    assert [f.result().offset for f in futures] == list(range(100))
    assert len(stored_values(pulllog_broker, "pending")) == 100


async def test_flush_sends_lingering_records_and_waits_for_them(pulllog_broker: BrokerThread) -> None:
    async with Producer(pulllog_broker.bootstrap_servers, linger_ms=600_000) as producer:
        futures = [await producer.send("flushed", b"%d" % i) for i in range(10)]
        await producer.flush()
        assert all(f.done() for f in futures)
        assert len(stored_values(pulllog_broker, "flushed")) == 10


async def test_the_sender_task_is_gone_after_close(pulllog_broker: BrokerThread) -> None:
    producer = Producer(pulllog_broker.bootstrap_servers)
    await producer.start()
    await producer.send_and_wait("t", b"x")
    sender = producer.sender_task
    assert sender is not None and not sender.done()
    await producer.close()
    assert sender.done() and producer.sender_task is None
    leftovers = [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("pulllog-")]
    assert leftovers == []


async def test_close_right_after_start_still_shuts_the_supervisor_down(pulllog_broker: BrokerThread) -> None:
    # close() before the supervisor task ever ran: it must still close the connections
    producer = Producer(pulllog_broker.bootstrap_servers)
    await producer.start()
    assert pulllog_broker.call(lambda: len(pulllog_broker.broker.connections)) == 1
    supervisor = producer.sender_task
    await producer.close()
    assert supervisor is not None and supervisor.done() and not supervisor.cancelled()
    await wait_until(lambda: connection_count(pulllog_broker) == 0, "the broker saw the producer's connection close")
    leftovers = [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("pulllog-")]
    assert leftovers == []


def test_the_producer_works_under_anyio_on_asyncio(pulllog_broker: BrokerThread) -> None:
    async def main() -> RecordMetadata:
        async with Producer(pulllog_broker.bootstrap_servers) as producer:
            return await producer.send_and_wait("anyio", b"x")

    assert anyio.run(main, backend="asyncio").offset == 0


def test_a_cancelled_anyio_scope_closes_the_producer_at_once_and_fails_what_was_unsent(
        pulllog_broker: BrokerThread) -> None:
    async def main() -> tuple[list[str], BaseException | None]:
        with anyio.move_on_after(0.5):
            async with Producer(pulllog_broker.bootstrap_servers, linger_ms=600_000) as producer:
                lingering = await producer.send("cancelled", b"x")
                await anyio.sleep(60)  # cancelled here; the cancelled scope also cuts close()'s flush short
        leftovers = [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("pulllog-")]
        return leftovers, lingering.exception()

    leftovers, error = anyio.run(main, backend="asyncio")
    assert leftovers == []
    assert isinstance(error, ProducerClosedError)


# ---------------------------------------------------------------------------- idempotence


async def test_idempotence_stamps_producer_id_epoch_and_increasing_sequences(pulllog_broker: BrokerThread) -> None:
    async with Producer(pulllog_broker.bootstrap_servers, enable_idempotence=True) as producer:
        assert producer.acks == -1 and producer.producer_id >= 0 and producer.producer_epoch == 0
        for size in (3, 5, 1, 7):
            futures = [await producer.send("idem", b"x") for _ in range(size)]
            await asyncio.gather(*futures)
        await producer.send_batch("idem", [b"y"] * 4)
        await producer.flush()
    headers = [b.header for b in stored_batches(pulllog_broker, "idem")]
    assert {(h.producer_id, h.producer_epoch) for h in headers} == {(producer.producer_id, 0)}
    expected = 0
    for h in headers:
        assert h.base_sequence == expected
        expected += h.records_count
    assert expected == 20


def test_idempotence_with_acks_1_is_refused() -> None:
    with pytest.raises(ValueError, match="enable_idempotence=True needs acks='all'"):
        Producer(acks=1, enable_idempotence=True)


@pytest.mark.parametrize(("options", "acks", "idempotent"), [
    ({}, -1, True),  # Kafka 3.0+: idempotence on, acks=all
    ({"acks": "all"}, -1, True),
    ({"acks": 1}, 1, False),  # acks 0 or 1 set, idempotence not: it turns off
    ({"acks": 0}, 0, False),
    ({"enable_idempotence": False}, -1, False),  # acks stays "all"
    ({"max_in_flight": 6}, -1, False),  # beyond the broker's window of 5 batches
    ({"enable_idempotence": True, "max_in_flight": 5}, -1, True),
])
def test_acks_and_idempotence_default_as_in_kafka_3(options: dict[str, object], acks: int, idempotent: bool) -> None:
    producer = Producer(**options)  # type: ignore[arg-type]
    assert (producer.acks, producer.enable_idempotence) == (acks, idempotent)


def test_idempotence_with_more_than_5_in_flight_is_refused() -> None:
    with pytest.raises(ValueError, match="max_in_flight <= 5"):
        Producer(enable_idempotence=True, max_in_flight=6)


async def test_the_default_producer_is_idempotent_on_the_wire(pulllog_broker: BrokerThread) -> None:
    async with Producer(pulllog_broker.bootstrap_servers) as producer:
        await (await producer.send_batch("default-idem", [b"a", b"b"]))
    headers = [b.header for b in stored_batches(pulllog_broker, "default-idem")]
    assert [(h.producer_id, h.base_sequence) for h in headers] == [(producer.producer_id, 0)]
    assert producer.producer_id >= 0
