"""send()'s common case in C (``records.encoding.SendPath``) against the Python ``send()``.

With the extension built, ``Producer.start()`` makes the producer's ``send`` a ``SendPath``:
it appends a record to the partition the Python ``send()`` armed it for and calls the Python
``send()`` for everything else. These tests send the same records through both ways to a
real broker and compare what the broker stored byte for byte, what the futures say, and the
buffer_memory accounting; and they check when the C path is not used.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from pulllog.client.errors import KafkaError
from pulllog.client.partitioner import StickyPartitioner
from pulllog.client.producer import Producer, ProducerClosedError
from pulllog.client.transactions import (
    AbortableTransactionError,
    Outcome,
    TransactionStateError,
)
from pulllog.records.encoding import SendPath
from pulllog.testing import BrokerThread

needs_c = pytest.mark.skipif(SendPath is None, reason="the C extension is not built (PULLLOG_NO_EXTENSIONS)")

BASE_TIMESTAMP_MS = 1_700_000_000_000
PARTITIONS = 3
_examples = itertools.count()  # a fresh pair of topics per example (hypothesis seeds ``random``)


def create_topic(broker: BrokerThread, name: str, partitions: int) -> None:
    assert broker.broker is not None
    broker.call(broker.broker.topics.create, name, partitions, {})


def segment_bytes(broker: BrokerThread, topic: str, partition: int) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((Path(broker.data_dir) / f"{topic}-{partition}").glob("*.log")))


def counting_send(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the calls of the Python send() (the C path's fallback is that same function)."""
    calls = [0]
    python_send = Producer.send

    def send(self: Producer, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return python_send(self, *args, **kwargs)

    send.__doc__ = python_send.__doc__
    monkeypatch.setattr(Producer, "send", send)
    return calls


# a record: value, key, headers, partition, timestamp offset, whether to pass arguments by keyword
record = st.tuples(
    st.none() | st.binary(max_size=300) | st.binary(max_size=300).map(bytearray),
    st.none() | st.none() | st.binary(max_size=12),
    st.none() | st.none() | st.none() | st.just([("h", b"v")]),
    st.none() | st.integers(0, PARTITIONS - 1),
    st.integers(-1_000, 100_000),
    st.booleans(),
)
# or a message set (send_batch) to one partition: it may open a batch the Python send() did not
message_set = st.tuples(st.just("set"), st.lists(st.binary(max_size=100), min_size=1, max_size=5),
                        st.integers(0, PARTITIONS - 1))


async def send_all(broker: BrokerThread, topic: str, records: list[tuple[Any, ...]], use_c: bool,
                   batch_size: int = 1_500) -> tuple[list[tuple[int, int, int]], bool, list[tuple[int, int, int]]]:
    """Send ``records`` (batches close by size only: linger_ms is long); return the futures'
    (partition, offset, timestamp), whether the memory held adds up, and the open batches'
    (partition, records, buffer_memory held) before the final flush."""
    create_topic(broker, topic, PARTITIONS)
    producer = Producer(broker.bootstrap_servers, acks=1, batch_size=batch_size, linger_ms=600_000,
                        partitioner=StickyPartitioner(random.Random(7)))
    producer.use_send_path = use_c
    async with producer:
        await producer.partitions_for(topic)
        futures = []
        for op in records:
            if op[0] == "set":
                await producer.send_batch(topic, op[1], partition=op[2], timestamp=BASE_TIMESTAMP_MS)
                continue
            value, key, headers, partition, ts, by_keyword = op
            if by_keyword:
                futures.append(await producer.send(topic=topic, value=value, key=key, headers=headers,
                                                   partition=partition, timestamp=BASE_TIMESTAMP_MS + ts))
            else:
                futures.append(await producer.send(topic, value, key, headers, partition, BASE_TIMESTAMP_MS + ts))
        acc = producer._acc
        assert acc is not None
        held = acc.pool.available + sum(b.reserved for b in acc.incomplete) == acc.pool.total
        # the open batches are not sent yet (linger_ms): what they hold is the same both ways
        open_batches = sorted((q.partition, q.open.count, q.open.reserved) for q in acc.queues.values() if q.open)
        await producer.flush()
        assert acc.pool.available == acc.pool.total
    return [(m.partition, m.offset, m.timestamp) for m in [f.result() for f in futures]], held, open_batches


async def assert_both_paths_store_the_same(broker: BrokerThread, name: str, records: list[tuple[Any, ...]],
                                           **options: Any) -> None:
    """The same records through the Python send() and through the C path, each into its own
    topic: the same offsets and timestamps, the same memory accounting, the same log bytes."""
    python = await send_all(broker, f"{name}-py", records, use_c=False, **options)
    c = await send_all(broker, f"{name}-c", records, use_c=True, **options)
    assert c == python
    assert python[1], "the memory held by unsent records and the pool's free bytes add up to buffer_memory"
    for partition in range(PARTITIONS):
        assert segment_bytes(broker, f"{name}-c", partition) == segment_bytes(broker, f"{name}-py", partition)


@needs_c
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(record | message_set, min_size=1, max_size=120))
async def test_the_c_send_path_stores_what_the_python_send_stores(pulllog_broker: BrokerThread,
                                                                  records: list[tuple[Any, ...]]) -> None:
    await assert_both_paths_store_the_same(pulllog_broker, f"sendpath-{next(_examples)}", records)


@needs_c
async def test_the_c_send_path_takes_the_records_of_an_open_batch(pulllog_broker: BrokerThread,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python send() runs about once per batch: for the record that opens it.

    With linger_ms=0 the sender also takes an open batch early whenever its partition has
    nothing in flight, so how many batches (and Python calls) the records make depended on
    when the broker answered: under load the count once went past the bound. A long linger
    closes a batch only when it is full (or at the flush), so the count is the records'."""
    calls = counting_send(monkeypatch)
    create_topic(pulllog_broker, "plain", 2)
    async with Producer(pulllog_broker.bootstrap_servers, acks=1, batch_size=4_096, linger_ms=60_000) as producer:
        assert isinstance(producer.send, SendPath)
        futures = [await producer.send("plain", b"x" * 100, partition=i % 2 if i >= 1_000 else 0)
                   for i in range(2_000)]
        futures += [await producer.send("plain", b"y" * 100) for _ in range(1_000)]  # sticky
        futures += [await producer.send("plain", b"z" * 100, key=b"k", partition=1) for _ in range(500)]
        await producer.flush()
    assert all(f.done() and f.exception() is None for f in futures)
    offsets = [f.result().offset for f in futures if f.result().partition == 0]
    assert offsets == list(range(len(offsets)))
    # 1,000 records alternating partitions take the Python path; the rest about one per batch
    # of ~35 records
    assert 1_000 < calls[0] < 1_000 + 2_500 // 20


@needs_c
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(record | message_set, min_size=1, max_size=60))
async def test_the_c_send_path_opens_batches_as_the_python_send_does(pulllog_broker: BrokerThread,
                                                                     records: list[tuple[Any, ...]]) -> None:
    """batch_size=1: every record opens (and closes) its own batch, which the C path does
    itself for an explicit partition; the broker stores the same bytes either way."""
    await assert_both_paths_store_the_same(pulllog_broker, f"sendpath-open-{next(_examples)}", records, batch_size=1)


@needs_c
async def test_the_c_send_path_opens_the_batches_of_a_batch_size_1_producer(pulllog_broker: BrokerThread,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """With batch_size=1 every record opens a batch: the Python send() runs for the first
    record of an explicit partition only, and the C path opens, closes and yields after the
    others as the Python path does (the order kept, every 16th busy batch a loop turn)."""
    calls = counting_send(monkeypatch)
    create_topic(pulllog_broker, "ones", 2)
    async with Producer(pulllog_broker.bootstrap_servers, acks=1, batch_size=1) as producer:
        await producer.partitions_for("ones")
        futures = [await producer.send("ones", b"v%d" % i, partition=1) for i in range(600)]
        assert calls[0] == 1
        sticky = [await producer.send("ones", b"s") for _ in range(20)]  # the sticky partition moves: Python
        assert calls[0] >= 1 + 20
        await producer.flush()
        assert producer._acc is not None and producer._acc.pool.available == producer._acc.pool.total
    assert [f.result().offset for f in futures] == list(range(600))
    assert all(f.done() and f.exception() is None for f in sticky)


@needs_c
async def test_the_c_set_path_opens_the_batches_of_a_batch_size_1_producer(pulllog_broker: BrokerThread,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """send_batch() with batch_size=1: each set opens its own batch, in C (SetPath) after the
    first set of an explicit partition; sets it cannot take (headers, an open batch, no
    partition) go to the Python send_batch(), and the offsets follow the order of the calls."""
    from pulllog.records.encoding import SetPath

    calls = [0]
    python_send_batch = Producer.send_batch

    def send_batch(self: Producer, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return python_send_batch(self, *args, **kwargs)

    monkeypatch.setattr(Producer, "send_batch", send_batch)
    create_topic(pulllog_broker, "setsof", 2)
    async with Producer(pulllog_broker.bootstrap_servers, acks=1, batch_size=1) as producer:
        await producer.partitions_for("setsof")
        # (patched on the class before start(): the instance's send_batch is a SetPath in front of it)
        assert isinstance(producer.send_batch, SetPath)
        sets = [await producer.send_batch("setsof", [b"a%d" % i, (b"k", b"v"), None], partition=1)
                for i in range(200)]
        assert calls[0] == 1
        sets.append(await producer.send_batch("setsof", [(b"k", b"v", [("h", b"1")])], partition=1))
        sets.append(await producer.send_batch("setsof", (b"t",), partition=1, timestamp=BASE_TIMESTAMP_MS))
        assert calls[0] == 2  # the headers went to Python; the tuple of one value did not
        await producer.flush()
        assert producer._acc is not None and producer._acc.pool.available == producer._acc.pool.total
    metadata = [f.result() for f in sets]
    assert [m.base_offset for m in metadata] == list(range(0, 600, 3)) + [600, 601]
    assert metadata[-1].timestamp == BASE_TIMESTAMP_MS and metadata[0].count == 3


@needs_c
async def test_the_c_send_path_falls_back_after_close(pulllog_broker: BrokerThread) -> None:
    create_topic(pulllog_broker, "closed", 1)
    producer = Producer(pulllog_broker.bootstrap_servers, acks=1)
    async with producer:
        await (await producer.send("closed", b"a", partition=0))
        await producer.send("closed", b"b", partition=0)
    with pytest.raises(ProducerClosedError):
        await producer.send("closed", b"c", partition=0)


@needs_c
async def test_the_c_send_path_waits_for_buffer_memory_as_the_python_send_does(pulllog_broker: BrokerThread) -> None:
    """With buffer_memory for a few records only, sends wait for acknowledgements (the C path
    never takes memory that is not free, nor jumps a waiter)."""
    create_topic(pulllog_broker, "tight", 1)
    async with Producer(pulllog_broker.bootstrap_servers, acks=1, buffer_memory=2_000) as producer:
        futures = [await producer.send("tight", b"v" * 200, partition=0) for _ in range(300)]
        acc = producer._acc
        assert acc is not None
        assert acc.pool.available >= 0
        await producer.flush()
        assert acc.pool.available == acc.pool.total
    assert [f.result().offset for f in futures] == list(range(300))


@needs_c
async def test_no_c_send_path_for_a_subclass_that_overrides_send(pulllog_broker: BrokerThread) -> None:
    class Counting(Producer):
        sent = 0

        def send(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            self.sent += 1
            return super().send(*args, **kwargs)

    create_topic(pulllog_broker, "sub", 1)
    async with Counting(pulllog_broker.bootstrap_servers, acks=1) as producer:
        for _ in range(50):
            await producer.send("sub", b"v", partition=0)
        assert producer.sent == 50
        assert not isinstance(producer.send, SendPath)


def test_a_send_path_needs_slotted_queues_batches_and_pool() -> None:
    if SendPath is None:
        pytest.skip("the C extension is not built")

    class Loose:
        pass

    with pytest.raises(TypeError, match="is not a slot"):
        SendPath(print, Loose(), print, Loose, Loose, 10, 10, 10, 10)


def test_a_send_path_is_armed_only_with_the_queue_type_it_was_made_for() -> None:
    if SendPath is None:
        pytest.skip("the C extension is not built")

    class Queue:
        __slots__ = ("open",)

    class Batch:
        __slots__ = ("records",)

    class Pool:
        __slots__ = ("available", "waiters")

    path = SendPath(print, Pool(), print, Queue, Batch, 10, 10, 10, 10)
    path.arm(Queue(), "t", 0, False)
    # its slot offsets are Queue's: any other object would be read as raw memory at them
    with pytest.raises(TypeError, match="the queue must be a"):
        path.arm(Batch(), "t", 0, False)


@needs_c
async def test_a_record_without_partition_follows_the_sticky_partitioner_after_its_batch_closes(
        pulllog_broker: BrokerThread) -> None:
    """The C path takes partition=None as the sticky partition it was armed with; when the
    sender takes that batch (here at a flush) the partitioner moves on, and a message set that
    then opens a new batch on the old partition must not draw the next record there."""
    create_topic(pulllog_broker, "sticky", PARTITIONS)
    async with Producer(pulllog_broker.bootstrap_servers, acks=1, linger_ms=600_000,
                        partitioner=StickyPartitioner(random.Random(3))) as producer:
        everything = list(range(PARTITIONS))

        def sticky() -> int:
            return producer._partitioner.partition("sticky", None, everything, everything)

        await producer.partitions_for("sticky")
        sent = await producer.send("sticky", b"v")
        await producer.flush()  # its batch is sent: the sticky partition moves on
        first = sent.result()
        assert sticky() != first.partition
        await producer.send_batch("sticky", [b"set"], partition=first.partition)  # stays open (linger)
        expected = sticky()
        future = await producer.send("sticky", b"next")
        await producer.flush()
    assert future.result().partition == expected


@needs_c
async def test_a_transactional_producer_takes_the_c_send_path_only_while_the_transaction_lets_it(
        pulllog_broker: BrokerThread, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside a transaction the C path appends to the partition the transaction passed last;
    every end of that (commit, a new partition starting, a send outside a transaction) goes
    back to the Python send(), which checks the transaction and adds the partition again."""
    calls = counting_send(monkeypatch)
    create_topic(pulllog_broker, "txn-fast", 2)
    async with Producer(pulllog_broker.bootstrap_servers, transactional_id="txn-fast", batch_size=4_096,
                        linger_ms=600_000) as producer:  # batches close when full or flushed only
        assert isinstance(producer.send, SendPath)
        await producer.init_transactions()
        first: list[Any] = []
        for _ in range(3):  # each transaction re-adds partition 0 (the path armed for it last)
            producer.begin_transaction()
            first.append(await producer.send("txn-fast", b"x" * 100, partition=0))
            await producer.flush()  # partition 0 is no longer starting: the transaction lets its sends through
            before = calls[0]
            first += [await producer.send("txn-fast", b"x" * 100, partition=0) for _ in range(1_999)]
            assert calls[0] - before < 2_000 // 10, "the C path took most records of the open batches"
            await producer.commit_transaction()
            with pytest.raises(TransactionStateError):  # no transaction: the Python send() refuses
                await producer.send("txn-fast", b"late", partition=0)
        producer.begin_transaction()  # an abort with a batch open: its records fail, and so does a send after it
        await producer.send("txn-fast", b"x", partition=0)
        await producer.flush()
        aborted = [await producer.send("txn-fast", b"x" * 100, partition=0) for _ in range(10)]
        await producer.abort_transaction()
        with pytest.raises(TransactionStateError):
            await producer.send("txn-fast", b"late", partition=0)
        producer.begin_transaction()  # an abortable error (the sender's, here told directly) with a batch open
        await producer.send("txn-fast", b"x", partition=0)
        await producer.flush()
        await producer.send("txn-fast", b"x", partition=0)  # opens a batch: the C path is armed for it
        txn = producer._txn
        assert txn is not None
        txn.fail(Outcome.ABORTABLE, KafkaError(ErrorCode.request_timed_out, "a Produce timed out"))
        with pytest.raises(AbortableTransactionError):  # at once, not in the record's future
            await producer.send("txn-fast", b"late", partition=0)
        await producer.abort_transaction()
        producer.begin_transaction()
        mixed = [await producer.send("txn-fast", b"y" * 100, partition=i % 2) for i in range(200)]
        mixed += [await producer.send("txn-fast", b"z" * 100, partition=0) for _ in range(500)]
        await producer.commit_transaction()
    assert all(f.done() and f.exception() is None for f in first + mixed)
    assert all(f.done() and f.exception() is not None for f in aborted)
    offsets = [f.result().offset for f in first]
    assert offsets == sorted(offsets) and len(set(offsets)) == 6_000


@needs_c
async def test_a_new_batch_is_what_the_classes_init_makes() -> None:
    """RecordAccumulator.new_batch copies templates in C (SlotsMaker); every slot of the batch
    and of its ProduceResult must be what ProducerBatch.__init__ and ProduceResult.__init__ set."""
    import asyncio
    import time

    from pulllog.client.accumulator import ProducerBatch, RecordAccumulator
    from pulllog.client.record_future import ProduceResult

    loop = asyncio.get_running_loop()
    acc = RecordAccumulator(batch_size=1, buffer_memory=1 << 20, loop=loop, on_batch_closed=lambda t, p: None,
                            wake=lambda: None)
    before = time.monotonic()
    made = acc.new_batch("topic", 3, BASE_TIMESTAMP_MS)
    built = ProducerBatch("topic", 3, BASE_TIMESTAMP_MS, made.created, loop)
    assert type(made) is ProducerBatch and before <= made.created <= time.monotonic()
    for name in ProducerBatch.__slots__:
        if name not in ("records", "result"):
            assert getattr(made, name) == getattr(built, name), name
    assert type(made.result) is ProduceResult and made.result is not built.result
    for name in ProduceResult.__slots__:
        assert getattr(made.result, name) == getattr(built.result, name), name
    assert type(made.records) is type(built.records)
    assert made.records.result is made.result
    assert (made.records.base_timestamp, made.records.records_count) == (BASE_TIMESTAMP_MS, 0)
    # each batch its own builder and result: a record in one is not in another
    other = acc.new_batch("topic", 3, BASE_TIMESTAMP_MS)
    made.records.add_record(None, b"v", b"\x00", BASE_TIMESTAMP_MS)
    assert (made.records.records_count, other.records.records_count) == (1, 0)
    assert other.result is not made.result and not made.result.finished
    made.result.set_acknowledged(5, -1)
    assert made.result.finished and made.result.done.done() and not other.result.finished


@needs_c
def test_a_request_and_a_sets_metadata_are_what_the_classes_init_makes() -> None:
    """The sender copies a template for each Produce request (_Request) and for each message
    set's BatchMetadata (SlotsMaker): every slot must be what their __init__ sets."""
    from pulllog.client import sender as sender_module
    from pulllog.client.record_future import BatchMetadata

    made = sender_module._new_batch_metadata("topic", 2, 40, 50, BASE_TIMESTAMP_MS)
    assert type(made) is BatchMetadata and made == BatchMetadata("topic", 2, 40, 50, BASE_TIMESTAMP_MS)
    assert made.last_offset == 89 and hash(made) == hash(BatchMetadata("topic", 2, 40, 50, BASE_TIMESTAMP_MS))

    class Encoder:
        version = 9

    for transactional_id, batches in ((None, ["b"]), (None, ["b", "c"]), ("txn", ["b"])):
        fake_sender: Any = type("S", (), {"_transactional_id": transactional_id})()
        encoder: Any = Encoder()
        built = sender_module._Request(fake_sender, 1, "conn", batches, encoder, 12.5)  # type: ignore[arg-type]
        one = batches[0] if len(batches) == 1 and transactional_id is None else None
        made_request = sender_module._make_request(fake_sender, 1, "conn", batches, encoder, 9, 12.5, one)
        assert type(made_request) is sender_module._Request
        for name in sender_module._Request.__slots__:
            assert getattr(made_request, name) == getattr(built, name), name


async def test_send_batch_appends_at_once_and_raises_from_the_await(pulllog_broker: BrokerThread) -> None:
    """send_batch() is no coroutine function: a set that needs no wait is appended by the call
    itself; what is wrong with a set is raised by the await, as from the coroutine it was."""
    import inspect

    create_topic(pulllog_broker, "sets", 2)
    async with Producer(pulllog_broker.bootstrap_servers, acks=1, batch_size=1) as producer:
        await producer.partitions_for("sets")
        assert producer._acc is not None
        sending = producer.send_batch("sets", [b"a", b"b"], partition=1)
        assert not inspect.iscoroutinefunction(Producer.send_batch)
        assert producer._acc.incomplete  # appended before the await
        first = await sending
        second = await producer.send_batch("sets", iter([(b"k", b"c"), b"d", None]), partition=1)
        with pytest.raises(ValueError):
            await producer.send_batch("sets", [], partition=1)
        bad = producer.send_batch("sets", [b"ok", 5], partition=1)
        with pytest.raises(TypeError):
            await bad
        with pytest.raises(KafkaError):
            await producer.send_batch("sets", [b"x"], partition=7)
        metadata = [await first, await second]
    assert [(m.partition, m.base_offset, m.count) for m in metadata] == [(1, 0, 2), (1, 2, 3)]
    assert metadata[0].topic == "sets"
