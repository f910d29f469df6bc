"""pulllog's transactional Producer restarts its pipeline at once in every transaction, and
that changes nothing of what a transaction means: its records are all committed or all
aborted, and a fenced producer stays fenced.

A partition's first batch of a transaction waits for AddPartitionsToTxn; while it does,
``send()`` yields to the event loop every few records (``pulllog.client.transactions``), so
that batch goes as soon as the coordinator answered, not when the application has filled it.
These tests send in a tight loop, the way a producer at full speed does, and never wait on
anything but ``send()`` itself.
"""

from __future__ import annotations

import inspect
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from waits import wait_for_listener, wait_until

from pulllog import Admin, Consumer, Producer, TopicPartition
from pulllog.client.admin import NewTopic, OffsetSpec
from pulllog.client.transactions import (
    AbortableTransactionError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionState,
    TransactionStateError,
)
from pulllog.client.errors import KafkaError

# A batch far bigger than the loops below fill: a batch that waited until it was full (or
# until the application yielded for another reason) is never acknowledged inside them.
BATCH_SIZE = 1_000_000
TIGHT_LOOP = 20_000  # records of ~30 bytes: about 600 KB, well inside one batch
PRODUCE, ADD_PARTITIONS_TO_TXN = 0, 24  # API keys


async def _create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions=partitions)])


@dataclass(frozen=True)
class ServedBroker:
    bootstrap_servers: str


@pytest.fixture
def broker_process(tmp_path: Path) -> Iterator[ServedBroker]:
    """`pulllog serve` in a process of its own. The tests that send in a tight loop need it: a
    broker thread in the test's process waits for the GIL while the client's loop runs (CPython
    hands the GIL over only after 5 ms without a change of holder, and every asyncio.sleep(0)'s
    epoll_wait(0) is one), so it would answer only once the loop ends, whatever the client does."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "serve.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "pulllog.cli.main", "serve", "--data-dir",
                                 str(tmp_path / "data"), "--listen", f"127.0.0.1:{port}"],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for_listener(port, proc, log)
        yield ServedBroker(f"127.0.0.1:{port}")
    finally:
        proc.kill()
        proc.wait()


async def read_committed(bootstrap: str, topic: str, partitions: int = 1) -> list[bytes]:
    """Every value a read_committed consumer reads, once no transaction is open on the topic
    (its last stable offsets caught up with its high watermarks: every marker is written)."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    async with Admin(bootstrap) as admin:
        async def settled() -> dict[TopicPartition, int] | None:
            hw = await admin.list_offsets({tp: OffsetSpec.LATEST for tp in tps})
            lso = await admin.list_offsets({tp: OffsetSpec.LATEST for tp in tps}, read_committed=True)
            ends = {tp: hw[tp].offset for tp in tps}  # type: ignore[union-attr]
            return ends if all(lso[tp].offset == ends[tp] for tp in tps) else None  # type: ignore[union-attr]
        ends = await wait_until(settled, f"every transaction on {topic} is complete")
    got: list[bytes] = []
    async with Consumer(bootstrap, isolation_level="read_committed", auto_offset_reset="earliest") as consumer:
        consumer.assign(tps)

        async def at_end() -> bool:
            batch = await consumer.getmany(timeout_ms=200)
            got.extend(r.value for records in batch.values() for r in records)  # type: ignore[misc]
            return all([await consumer.position(tp) == ends[tp] for tp in tps])
        await wait_until(at_end, f"the consumer reached the ends {ends}")
    return got


async def _send_until_acknowledged(producer: Producer, topic: str, partition: int, tag: bytes) -> int:
    """Send records to ``partition`` in a tight loop until the first one is acknowledged;
    return how many were sent (at most TIGHT_LOOP)."""
    first = await producer.send(topic, tag + b"-0", partition=partition)
    sent = 1
    while not first.done() and sent < TIGHT_LOOP:
        await producer.send(topic, tag + b"-%d" % sent, partition=partition)
        sent += 1
    assert first.done(), (
        f"the transaction's first record was not acknowledged while {sent} more were sent into its "
        "open batch: the batch waited to fill before AddPartitionsToTxn and its Produce went")
    assert first.exception() is None
    return sent


async def test_a_transactions_first_batch_goes_before_the_application_fills_it(broker_process: ServedBroker) -> None:
    bootstrap = broker_process.bootstrap_servers
    await _create(bootstrap, "pipeline", 2)
    async with Producer(bootstrap, transactional_id="pipeline-tx", batch_size=BATCH_SIZE) as producer:
        await producer.init_transactions()
        counts = []
        for txn in range(3):  # the first transaction, and those after a commit
            producer.begin_transaction()
            counts.append(await _send_until_acknowledged(producer, "pipeline", 0, b"t%d" % txn))
            # a second partition joining the transaction later restarts it the same way
            counts.append(await _send_until_acknowledged(producer, "pipeline", 1, b"t%d-p1" % txn))
            await producer.commit_transaction()
    assert len(await read_committed(bootstrap, "pipeline", 2)) == sum(counts)


@pytest.mark.parametrize("batch_size", [BATCH_SIZE, 4096], ids=["one batch", "many batches in flight"])
async def test_committed_and_aborted_transactions_stay_all_or_nothing(pulllog_broker: Any, batch_size: int) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    await _create(bootstrap, "all-or-nothing", 2)
    committed: list[bytes] = []
    async with Producer(bootstrap, transactional_id="aon-tx", batch_size=batch_size) as producer:
        await producer.init_transactions()
        for txn in range(4):
            producer.begin_transaction()
            values = [b"t%d-%d" % (txn, i) for i in range(500)]
            futures = [await producer.send("all-or-nothing", v, partition=i % 2) for i, v in enumerate(values)]
            if txn % 2:
                # aborted while its partitions may still be joining it: the records not sent
                # yet fail, those sent are aborted; none is ever read committed
                await producer.abort_transaction()
                assert all(f.done() for f in futures)
                assert all(f.exception() is None or isinstance(f.exception(), TransactionAbortedError)
                           for f in futures)
            else:
                await producer.commit_transaction()
                assert all(f.done() and f.exception() is None for f in futures)
                committed.extend(values)
            assert producer.transaction_state is TransactionState.READY
    got = await read_committed(bootstrap, "all-or-nothing", 2)
    assert sorted(got) == sorted(committed)


async def test_a_fenced_producer_cannot_commit_what_it_sent(broker_process: ServedBroker) -> None:
    bootstrap = broker_process.bootstrap_servers
    await _create(bootstrap, "fenced-pipeline")
    async with Producer(bootstrap, transactional_id="fenced-tx", batch_size=BATCH_SIZE) as first:
        await first.init_transactions()
        first.begin_transaction()
        await _send_until_acknowledged(first, "fenced-pipeline", 0, b"zombie")
        async with Producer(bootstrap, transactional_id="fenced-tx") as second:
            await second.init_transactions()  # aborts the first one's transaction, fences it
            with pytest.raises(ProducerFencedError):
                await first.commit_transaction()
            assert first.transaction_state is TransactionState.FATAL_ERROR
            async with second.transaction():
                await second.send("fenced-pipeline", b"successor", partition=0)
    assert await read_committed(bootstrap, "fenced-pipeline") == [b"successor"]


async def test_a_fenced_producer_with_batches_in_flight_commits_none_of_them(pulllog_broker: Any) -> None:
    """A zombie fenced while its later transaction's batches pipeline (several in flight from
    the first): whatever of them the broker stored is aborted, and the commit fails."""
    bootstrap = pulllog_broker.bootstrap_servers
    topic = "fenced-in-flight"
    await _create(bootstrap, topic)
    kept = [b"kept-%d" % i for i in range(100)]
    async with Producer(bootstrap, transactional_id="fenced-in-flight-tx", batch_size=4096) as first:
        await first.init_transactions()
        async with first.transaction():
            for value in kept:
                await first.send(topic, value, partition=0)
        first.begin_transaction()
        for i in range(2000):
            await first.send(topic, b"zombie-%d" % i, partition=0)
        async with Producer(bootstrap, transactional_id="fenced-in-flight-tx") as second:
            await second.init_transactions()  # aborts the first one's transaction, fences it
            # fenced at EndTxn (ProducerFencedError), or at a Produce that met the new epoch
            # (INVALID_PRODUCER_EPOCH from a partition: abortable, as in Kafka's KIP-588)
            with pytest.raises((ProducerFencedError, AbortableTransactionError)):
                await first.commit_transaction()
    assert await read_committed(bootstrap, topic) == kept


async def test_a_transactions_first_batch_that_fails_retriably_is_not_overtaken(pulllog_broker: Any) -> None:
    """A broker with no state for a producer takes any sequence (KIP-360), so a later batch
    that overtook a partition's first batch of the transaction would make that one's retry
    OUT_OF_ORDER_SEQUENCE_NUMBER for good (Kafka's verification of a transaction's first
    Produce answers a retriable error now and then, KIP-890). The first batch goes alone:
    the rest follow once it is acknowledged."""
    bootstrap = pulllog_broker.bootstrap_servers
    await _create(bootstrap, "first-alone")
    # many batches are ready by the time the partition is in the transaction
    pulllog_broker.faults.delay(ADD_PARTITIONS_TO_TXN, 300)
    refused = pulllog_broker.faults.fail(PRODUCE, ErrorCode.not_enough_replicas, topic="first-alone")
    async with Producer(bootstrap, transactional_id="first-alone-tx", batch_size=4096,
                        retry_backoff_ms=10) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        futures = [await producer.send("first-alone", b"%d" % i, partition=0) for i in range(2000)]
        await producer.commit_transaction()
    assert refused.fired == 1
    assert all(f.exception() is None for f in futures)
    assert sorted(await read_committed(bootstrap, "first-alone")) == sorted(b"%d" % i for i in range(2000))


async def test_a_later_transactions_batches_pipeline_behind_its_first(pulllog_broker: Any) -> None:
    """Once the leader holds the producer's sequence for a partition (a batch of the epoch
    was acknowledged there), the partition's first batch of a later transaction does not go
    alone: the batches behind it are in flight before it is answered. If it is lost, the
    broker refuses them as out of order, and they are resent behind it: the transaction
    still commits every record once, in order."""
    bootstrap = pulllog_broker.bootstrap_servers
    topic = "pipelined"
    await _create(bootstrap, topic)
    async with Producer(bootstrap, transactional_id="pipelined-tx", batch_size=4096, request_timeout_ms=3000,
                        retry_backoff_ms=10) as producer:
        await producer.init_transactions()
        async with producer.transaction():
            before = [await producer.send(topic, b"first-%d" % i, partition=0) for i in range(100)]
        lost = pulllog_broker.faults.lose_request(PRODUCE, topic=topic)  # never answered: timed out, resent
        behind = pulllog_broker.faults.observe(PRODUCE, topic=topic)  # every Produce after the lost one
        producer.begin_transaction()
        values = [b"second-%d" % i for i in range(TIGHT_LOOP)]
        first = await producer.send(topic, values[0], partition=0)
        futures = [first]

        def later_batches_went() -> bool:
            # Two Produce requests behind the lost one: later batches (refused as out of order,
            # resent every retry_backoff_ms) reached the broker before the first was answered.
            # Sent alone, the first's own retry would be the only one before its answer.
            return behind.fired >= 2 or first.done()

        for value in values[1:]:
            futures.append(await producer.send(topic, value, partition=0))
            if later_batches_went():
                break
        # On a loaded machine AddPartitionsToTxn may be answered only after the loop, with the
        # batches queued: wait for the broker's state, not for the loop.
        await wait_until(later_batches_went, "two Produce requests behind the lost one, or the first answered")
        assert not first.done(), "the later batches waited for the transaction's first batch to be answered"
        assert behind.fired >= 2
        await producer.commit_transaction()
    assert lost.fired == 1
    assert all(f.exception() is None for f in before + futures)
    sent = [b"first-%d" % i for i in range(100)] + values[:len(futures)]
    assert await read_committed(bootstrap, topic) == sent


async def test_a_running_partitions_records_take_the_fast_path_and_still_see_the_transaction_fail(
        pulllog_broker: Any) -> None:
    """Once a partition's pipeline runs in the transaction, send() to it appends at once, as an
    idempotent producer's does (no coroutine: it cost a third of a record's time); a record
    that failed still makes the next send() to that partition raise, and after the abort a
    send() outside a transaction is refused."""
    bootstrap = pulllog_broker.bootstrap_servers
    topic = "fast-path"
    await _create(bootstrap, topic)
    async with Producer(bootstrap, transactional_id="fast-path-tx", batch_size=4096) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await (await producer.send(topic, b"first", partition=0))  # acknowledged: the pipeline runs
        at_once = 0
        for i in range(200):  # a record that opens a batch yields to the sender; the others need not
            sending = producer.send(topic, b"more-%d" % i, partition=0)
            at_once += not inspect.iscoroutine(sending)
            await sending
        assert at_once, "every record to the transaction's running partition went through the coroutine"
        refused = pulllog_broker.faults.fail(PRODUCE, ErrorCode.invalid_record, topic=topic)
        failed = await producer.send(topic, b"x" * 5000, partition=0)  # a batch of its own
        with pytest.raises(KafkaError):
            await failed
        assert refused.fired == 1
        with pytest.raises(AbortableTransactionError):
            await producer.send(topic, b"after the failure", partition=0)
        await producer.abort_transaction()
        with pytest.raises(TransactionStateError):
            await producer.send(topic, b"outside a transaction", partition=0)
        async with producer.transaction():
            for i in range(100):
                await producer.send(topic, b"kept-%d" % i, partition=0)
    assert await read_committed(bootstrap, topic) == [b"kept-%d" % i for i in range(100)]


async def test_a_transaction_with_every_in_flight_slot_taken_yields_after_each_full_batch(pulllog_broker: Any) -> None:
    """A transaction starts with an empty buffer, so send() never waits for buffer space in
    it. While the partition's in-flight slots are all taken, a record that opens a batch of
    the default size (256 KiB) still yields to the loop, so the answers that free the slots
    are read at once, not after the application filled many more batches; and requests that
    are never answered (timed out, resent) change nothing of what the transaction commits."""
    bootstrap = pulllog_broker.bootstrap_servers
    topic = "busy-slots"
    await _create(bootstrap, topic)
    value = b"v" * 1000
    async with Producer(bootstrap, transactional_id="busy-slots-tx", request_timeout_ms=1000,
                        retry_backoff_ms=10) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await (await producer.send(topic, b"first", partition=0))  # the partition's pipeline runs
        sender = producer._sender  # whether the slots are taken is the point
        assert sender is not None
        lost = pulllog_broker.faults.lose_request(PRODUCE, topic=topic, times=5)  # every slot stays taken
        sent = [b"first"]
        opened_while_busy = yielded = 0
        while opened_while_busy < 6:
            busy = sender.partition_busy((topic, 0))
            value = b"%06d" % len(sent) + b"v" * 1000
            sending = producer.send(topic, value, partition=0)
            took_turn = inspect.iscoroutine(sending)
            future = await sending
            sent.append(value)
            if busy and future.relative_offset == 0:
                opened_while_busy += 1
                yielded += took_turn
        assert yielded == opened_while_busy, (
            f"only {yielded} of {opened_while_busy} full batches opened while every slot was taken yielded")
        await producer.commit_transaction()
    assert lost.fired == 5
    assert await read_committed(bootstrap, topic) == sent
