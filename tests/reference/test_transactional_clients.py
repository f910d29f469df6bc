"""Transactions end to end with real clients: pulllog's transactional Producer and
read_committed Consumer, librdkafka's (confluent-kafka) producer and consumer.

Every test runs against Apache Kafka itself (the reference broker, one JVM per run): the
clients were built against it first. The ``txn_broker`` fixture names the brokers.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer as RdConsumer
from confluent_kafka import Producer as RdProducer
from waits import wait_until

from pulllog import Admin, Consumer, Producer, TopicPartition
from pulllog.client.admin import NewTopic, OffsetSpec
from pulllog.client.transactions import (
    AbortableTransactionError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionState,
)


@pytest.fixture(params=["kafka"])
def txn_broker(request: pytest.FixtureRequest) -> Iterator[str]:
    """The bootstrap servers of a broker with transactions (the JVM starts once per run)."""
    yield request.getfixturevalue("kafka_reference_broker").bootstrap_servers


_topics = iter(range(1_000_000))


async def new_topic(bootstrap: str, name: str, partitions: int = 2, **configs: str) -> str:
    topic = f"{name}-{next(_topics)}"
    async with Admin(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions=partitions, configs=configs or None)])
    return topic


async def settled_ends(bootstrap: str, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """The partitions' log end offsets once no transaction is open on them (the last stable
    offset caught up with the high watermark: every marker is written)."""
    async with Admin(bootstrap) as admin:
        async def settled() -> dict[TopicPartition, int] | None:
            hw = await admin.list_offsets({tp: OffsetSpec.LATEST for tp in tps})
            lso = await admin.list_offsets({tp: OffsetSpec.LATEST for tp in tps}, read_committed=True)
            ends = {tp: hw[tp].offset for tp in tps}  # type: ignore[union-attr]
            return ends if all(lso[tp].offset == ends[tp] for tp in tps) else None  # type: ignore[union-attr]
        return await wait_until(settled, "every transaction on the partitions is complete")


async def read_to_end(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[tuple[int, bytes]]:
    """(partition, value) of every record ``isolation`` shows, reading until the consumer's
    position reaches each partition's settled end (past the last marker)."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    ends = await settled_ends(bootstrap, tps)
    got: list[tuple[int, bytes]] = []
    async with Consumer(bootstrap, isolation_level=isolation, auto_offset_reset="earliest") as consumer:
        consumer.assign(tps)

        async def at_end() -> bool:
            batch = await consumer.getmany(timeout_ms=200)
            got.extend((r.partition, r.value) for records in batch.values() for r in records)  # type: ignore[misc]
            return all([await consumer.position(tp) == ends[tp] for tp in tps])
        await wait_until(at_end, f"the consumer reached the ends {ends}")
    return sorted(got)


async def transactional(bootstrap: str, transactional_id: str, **settings: Any) -> Producer:
    producer = Producer(bootstrap, transactional_id=transactional_id, **settings)
    await producer.start()
    await producer.init_transactions()
    return producer


# ---------------------------------------------------------------------------- pulllog's producer


async def test_read_committed_sees_committed_records_only(txn_broker: str) -> None:
    topic = await new_topic(txn_broker, "commit-abort")
    producer = await transactional(txn_broker, f"{topic}-tx")
    try:
        async with producer.transaction():
            for i in range(4):
                await producer.send(topic, b"committed-%d" % i, partition=i % 2)
        producer.begin_transaction()
        for i in range(4):
            await producer.send(topic, b"aborted-%d" % i, partition=i % 2)
        await producer.flush()  # on the broker, not just queued
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send(topic, b"last", partition=1)
        assert producer.transaction_state is TransactionState.READY
    finally:
        await producer.close()
    committed = [(0, b"committed-0"), (0, b"committed-2"), (1, b"committed-1"), (1, b"committed-3"), (1, b"last")]
    assert await read_to_end(txn_broker, topic, 2, "read_committed") == committed
    everything = await read_to_end(txn_broker, topic, 2, "read_uncommitted")
    assert everything == sorted(committed + [(p, b"aborted-%d" % i) for i, p in ((0, 0), (1, 1), (2, 0), (3, 1))])


async def test_a_fetch_that_returns_only_a_marker_moves_the_position(txn_broker: str) -> None:
    topic = await new_topic(txn_broker, "marker-only", partitions=1)
    tp = TopicPartition(topic, 0)
    producer = await transactional(txn_broker, f"{topic}-tx")
    try:
        async with producer.transaction():
            await producer.send(topic, b"x", partition=0)
    finally:
        await producer.close()
    (end,) = (await settled_ends(txn_broker, [tp])).values()
    assert end == 2  # the record, then the commit marker
    async with Consumer(txn_broker, isolation_level="read_committed") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 1)  # the marker: the fetch holds a control batch and nothing else

        async def moved() -> bool:
            assert await consumer.getmany(timeout_ms=200) == {}
            return await consumer.position(tp) == end
        await wait_until(moved, "the position moved past the commit marker")


async def test_back_to_back_transactions_do_not_wait_retry_backoff_ms(txn_broker: str) -> None:
    """Kafka answers EndTxn before its markers are written, so the next transaction's first
    AddPartitionsToTxn often hears CONCURRENT_TRANSACTIONS: that one is retried within
    milliseconds, not after retry_backoff_ms (here far longer than the test's bound)."""
    topic = await new_topic(txn_broker, "back-to-back", partitions=1)
    # the coordinator of the id loaded (a fresh broker answers NOT_COORDINATOR for a while,
    # retried after retry_backoff_ms) before the producer under test starts
    await (await transactional(txn_broker, f"{topic}-tx")).close()
    producer = await transactional(txn_broker, f"{topic}-tx", retry_backoff_ms=120_000)
    try:
        async with asyncio.timeout(60):  # a bound: each retry at retry_backoff_ms would pass it
            for i in range(20):
                async with producer.transaction():
                    await producer.send(topic, b"%d" % i, partition=0)
    finally:
        await producer.close()
    assert await read_to_end(txn_broker, topic, 1, "read_committed") == sorted((0, b"%d" % i) for i in range(20))


async def test_records_not_sent_when_the_transaction_aborts_fail(txn_broker: str) -> None:
    topic = await new_topic(txn_broker, "unsent", partitions=1)
    producer = await transactional(txn_broker, f"{topic}-tx", linger_ms=60_000)
    try:
        producer.begin_transaction()
        future = await producer.send(topic, b"never sent", partition=0)  # lingers, unsent
        await producer.abort_transaction()
        with pytest.raises(TransactionAbortedError):
            await future
        async with producer.transaction():
            await producer.send(topic, b"sent", partition=0)
    finally:
        await producer.close()
    assert await read_to_end(txn_broker, topic, 1, "read_uncommitted") == [(0, b"sent")]


async def test_async_with_aborts_when_the_block_raises(txn_broker: str) -> None:
    topic = await new_topic(txn_broker, "async-with", partitions=1)
    producer = await transactional(txn_broker, f"{topic}-tx")
    try:
        with pytest.raises(RuntimeError, match="the application failed"):
            async with producer.transaction():
                await (await producer.send(topic, b"half done", partition=0))
                raise RuntimeError("the application failed")
        assert producer.transaction_state is TransactionState.READY
    finally:
        await producer.close()
    assert await read_to_end(txn_broker, topic, 1, "read_committed") == []
    assert await read_to_end(txn_broker, topic, 1, "read_uncommitted") == [(0, b"half done")]


async def test_a_failed_record_makes_the_transaction_abortable_then_the_producer_goes_on(txn_broker: str) -> None:
    topic = await new_topic(txn_broker, "abortable", partitions=1, **{"max.message.bytes": "2000"})
    producer = await transactional(txn_broker, f"{topic}-tx")
    try:
        producer.begin_transaction()
        await (await producer.send(topic, b"fine", partition=0))
        too_large = await producer.send(topic, b"x" * 5000, partition=0)
        with pytest.raises(Exception, match="MESSAGE_TOO_LARGE"):
            await too_large
        with pytest.raises(AbortableTransactionError):
            await producer.commit_transaction()
        assert producer.transaction_state is TransactionState.ABORTABLE_ERROR
        epoch = producer.producer_epoch
        await producer.abort_transaction()
        # the failed batch had a sequence number: the abort took a new epoch (KIP-360)
        assert producer.producer_epoch == epoch + 1
        async with producer.transaction():
            await producer.send(topic, b"after", partition=0)
    finally:
        await producer.close()
    assert await read_to_end(txn_broker, topic, 1, "read_committed") == [(0, b"after")]


async def test_close_aborts_an_open_transaction(txn_broker: str) -> None:
    topic = await new_topic(txn_broker, "close-aborts", partitions=1)
    # a timeout far beyond the test's wait: only the abort at close() can settle the partition
    producer = await transactional(txn_broker, f"{topic}-tx", transaction_timeout_ms=600_000)
    try:
        producer.begin_transaction()
        await (await producer.send(topic, b"left open", partition=0))
    finally:
        await producer.close()
    assert await read_to_end(txn_broker, topic, 1, "read_committed") == []


async def test_a_second_instance_fences_the_first(txn_broker: str) -> None:
    topic = await new_topic(txn_broker, "fencing", partitions=1)
    first = await transactional(txn_broker, f"{topic}-tx")
    second: Producer | None = None
    try:
        first.begin_transaction()
        await (await first.send(topic, b"zombie", partition=0))
        # the coordinator aborts the first instance's transaction, then gives a new epoch
        second = await transactional(txn_broker, f"{topic}-tx")
        assert second.producer_id == first.producer_id and second.producer_epoch > first.producer_epoch
        with pytest.raises(ProducerFencedError):
            await first.commit_transaction()
        assert first.transaction_state is TransactionState.FATAL_ERROR
        with pytest.raises(ProducerFencedError):
            first.begin_transaction()
        async with second.transaction():
            await second.send(topic, b"successor", partition=0)
    finally:
        await first.close()
        if second is not None:
            await second.close()
    assert await read_to_end(txn_broker, topic, 1, "read_committed") == [(0, b"successor")]


async def test_send_offsets_to_transaction_commits_the_groups_offsets_with_the_transaction(txn_broker: str) -> None:
    source = await new_topic(txn_broker, "eos-in", partitions=1)
    sink = await new_topic(txn_broker, "eos-out", partitions=1)
    group = f"{source}-group"
    tp = TopicPartition(source, 0)
    async with Producer(txn_broker) as plain:
        for i in range(6):
            await plain.send(source, b"%d" % i, partition=0)
    producer = await transactional(txn_broker, f"{source}-tx")
    try:
        async with Consumer(txn_broker, group_id=group, auto_offset_reset="earliest",
                            isolation_level="read_committed", enable_auto_commit=False) as consumer:
            consumer.subscribe([source])
            records = []
            while len(records) < 6:
                batch = await consumer.getmany(timeout_ms=500)
                records += [r for rs in batch.values() for r in rs]
            metadata = consumer.group_metadata()
            assert metadata.group_id == group and metadata.generation_id >= 1 and metadata.member_id

            # aborted: the output and the offsets vanish together
            producer.begin_transaction()
            for r in records[:3]:
                await producer.send(sink, r.value.upper(), partition=0)  # type: ignore[union-attr]
            await producer.send_offsets_to_transaction({tp: records[2].offset + 1}, metadata)
            await producer.abort_transaction()
            assert await consumer.committed(tp) is None

            # committed: both at once
            async with producer.transaction():
                for r in records:
                    await producer.send(sink, b"out-" + r.value, partition=0)  # type: ignore[operator]
                await producer.send_offsets_to_transaction({tp: records[-1].offset + 1}, metadata)
            await wait_until(lambda: consumer.committed(tp), "the transaction's offset is committed")
            assert await consumer.committed(tp) == 6
    finally:
        await producer.close()
    assert await read_to_end(txn_broker, sink, 1, "read_committed") == [(0, b"out-%d" % i) for i in range(6)]


# ---------------------------------------------------------------------------- librdkafka


def _rd_transaction(bootstrap: str, transactional_id: str, topic: str, values: list[bytes], commit: bool) -> None:
    producer = RdProducer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(60)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value, partition=0)
    producer.flush(60)
    if commit:
        producer.commit_transaction(60)
    else:
        producer.abort_transaction(60)


async def test_a_librdkafka_transaction_read_by_pulllog_read_committed(txn_broker: str) -> None:
    topic = await new_topic(txn_broker, "rd-to-pulllog", partitions=1)
    for values, commit in (([b"c1", b"c2"], True), ([b"a1", b"a2", b"a3"], False), ([b"c3"], True)):
        await asyncio.to_thread(_rd_transaction, txn_broker, f"{topic}-tx", topic, values, commit)
    assert await read_to_end(txn_broker, topic, 1, "read_committed") == [(0, b"c1"), (0, b"c2"), (0, b"c3")]


def _rd_read_committed(bootstrap: str, topic: str, end: int) -> list[bytes]:
    consumer = RdConsumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-rd", "auto.offset.reset": "earliest",
                           "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        values: list[bytes] = []
        position = 0
        while position < end:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
            positions = consumer.position(consumer.assignment())
            position = positions[0].offset if positions else 0
        return values
    finally:
        consumer.close()


async def test_a_pulllog_transaction_read_by_librdkafka_read_committed(txn_broker: str) -> None:
    topic = await new_topic(txn_broker, "pulllog-to-rd", partitions=1)
    producer = await transactional(txn_broker, f"{topic}-tx")
    try:
        async with producer.transaction():
            await producer.send_batch(topic, [b"c1", b"c2"], partition=0)
        producer.begin_transaction()
        await producer.send(topic, b"a1", partition=0)
        await producer.flush()
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send(topic, b"c3", partition=0)
    finally:
        await producer.close()
    (end,) = (await settled_ends(txn_broker, [TopicPartition(topic, 0)])).values()
    assert await asyncio.to_thread(_rd_read_committed, txn_broker, topic, end) == [b"c1", b"c2", b"c3"]


# ---------------------------------------------------------------------------- the CLI


async def test_cli_consume_isolation_level(txn_broker: str) -> None:
    topic = await new_topic(txn_broker, "cli", partitions=1)
    producer = await transactional(txn_broker, f"{topic}-tx")
    try:
        async with producer.transaction():
            await producer.send(topic, b"committed", partition=0)
        producer.begin_transaction()
        await producer.send(topic, b"aborted", partition=0)
        await producer.flush()
        await producer.abort_transaction()
    finally:
        await producer.close()
    await settled_ends(txn_broker, [TopicPartition(topic, 0)])

    def consume(*extra: str) -> bytes:
        result = subprocess.run([sys.executable, "-m", "pulllog.cli.main", "consume", topic,
                                 "--bootstrap-server", txn_broker, *extra], capture_output=True, timeout=120)
        assert result.returncode == 0, result.stderr
        return result.stdout
    assert await asyncio.to_thread(consume, "--isolation-level", "read_committed") == b"committed\n"
    assert await asyncio.to_thread(consume) == b"committed\naborted\n"
