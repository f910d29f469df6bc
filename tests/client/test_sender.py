"""The accumulator's sender API and the Sender (``pulllog.client.accumulator``, ``.sender``).

The accumulator owns open and ready batches; the sender owns the batches in flight and
moves batches only through the accumulator's methods. The first tests drive those methods
by hand, as the sender does (no broker needed); the last ones run a real ``Sender`` with
a real accumulator and idempotence manager against a real broker, without a Producer.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from collections.abc import Iterator

import pytest

from pulllog.client.accumulator import ProducerBatch, RecordAccumulator, encode_headers
from pulllog.client.cluster import Cluster
from pulllog.client.idempotence import IdempotenceManager
from pulllog.client.producer_config import ProducerConfig
from pulllog.client.record_future import ProducerClosedError, RecordFuture
from pulllog.client.sender import Sender
from pulllog.records import Compression
from pulllog.testing import BrokerThread
from waits import wait_until

T0 = 1_700_000_000_000
NO_HEADERS = encode_headers(None)
WAIT_S = 30  # generous: only a hung sender should ever hit it


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def accumulator(loop: asyncio.AbstractEventLoop, batch_size: int = 1, buffer_memory: int = 1 << 20,
                closed: list[tuple[str, int]] | None = None) -> RecordAccumulator:
    """batch_size=1: every record is a batch of its own, closed at once."""
    return RecordAccumulator(batch_size=batch_size, buffer_memory=buffer_memory, loop=loop,
                             on_batch_closed=lambda t, p: (closed if closed is not None else []).append((t, p)),
                             wake=lambda: None)


def add(acc: RecordAccumulator, value: bytes, partition: int = 0, topic: str = "t") -> RecordFuture:
    size = len(value) + 24
    assert acc.pool.try_reserve(size)
    future = acc.append(topic, partition, None, value, NO_HEADERS, T0, size)
    assert future is not None
    return future


def values(batch: ProducerBatch) -> bytes:
    assert batch.records is not None
    return bytes(batch.records)


def drain_all(acc: RecordAccumulator, topic: str = "t", partition: int = 0) -> list[ProducerBatch]:
    q = acc.queue(topic, partition)
    out = []
    while (batch := acc.next_ready(q, 0.0, 60.0, lambda b: None)) is not None:
        acc.drain(q, batch)
        out.append(batch)
    return out


# ---------------------------------------------------------------------------- the accumulator's API


def test_draining_the_open_batch_closes_it_and_gives_it_the_next_order(loop: asyncio.AbstractEventLoop) -> None:
    closed: list[tuple[str, int]] = []
    acc = accumulator(loop, batch_size=1 << 16, closed=closed)
    add(acc, b"a")
    q = acc.queue("t", 0)
    assert acc.next_ready(q, 0.0, 60.0, lambda b: None) is None  # still open: not ready
    batch = acc.open_batch(q)
    assert batch is not None and batch.count == 1
    acc.drain(q, batch)
    assert batch.order == 0 and closed == [("t", 0)]
    assert acc.open_batch(q) is None and not acc.has_ready(q)
    add(acc, b"b")
    nxt = acc.open_batch(q)
    assert nxt is not None and nxt is not batch


def test_next_ready_hands_expired_batches_to_expire_and_returns_the_first_fresh_one(
        loop: asyncio.AbstractEventLoop) -> None:
    acc = accumulator(loop)
    for value in (b"old", b"older", b"fresh"):
        add(acc, value)
    q = acc.queue("t", 0)
    batches = list(acc.waiting())
    batches[0].created = batches[1].created = -100.0  # created long before delivery_timeout
    batches[2].created = 0.0
    expired: list[ProducerBatch] = []
    assert acc.next_ready(q, 10.0, 60.0, expired.append) is batches[2]
    assert expired == batches[:2] and list(acc.waiting()) == [batches[2]]


def test_reenqueued_batches_go_back_in_their_order_ahead_of_new_ones(loop: asyncio.AbstractEventLoop) -> None:
    acc = accumulator(loop)
    for value in (b"0", b"1", b"2"):
        add(acc, value)
    sent = drain_all(acc)
    assert [b.order for b in sent] == [0, 1, 2]
    add(acc, b"3")  # a new batch, behind the retries
    for batch in (sent[2], sent[0], sent[1]):  # answers fail in any order
        acc.reenqueue(batch, retry_at=5.0)
    assert [values(b)[-2:-1] for b in acc.waiting()] == [b"0", b"1", b"2", b"3"]
    assert all(b.attempts == 1 and b.retry_at == 5.0 for b in sent)
    assert not acc.earlier_ready(sent[0]) and acc.earlier_ready(sent[2])


def test_a_split_batch_keeps_its_place_its_memory_and_its_sets_whole(loop: asyncio.AbstractEventLoop) -> None:
    # MESSAGE_TOO_LARGE: the batch is cut in two near the middle, never inside a message set;
    # the pieces go back ahead of later batches, and each record's future reads its piece's
    acc = accumulator(loop, batch_size=1 << 16)
    futures = [add(acc, b"%d" % i) for i in range(2)]
    set_future = loop.create_future()
    items = [b"s0", b"s1", b"s2"]
    size = sum(len(v) + 24 for v in items)
    assert acc.pool.try_reserve(size)
    acc.append_set("t", 0, items, T0, set_future, size)
    futures.append(add(acc, b"3"))  # records 0, 1; the set 2..4; record 5
    q = acc.queue("t", 0)
    big = acc.open_batch(q)
    assert big is not None
    acc.drain(q, big)
    big.seal(Compression.NONE, -1, -1, -1)
    add(acc, b"later")
    acc.close(q)
    used = acc.pool.used
    pieces = acc.split(big)
    assert pieces is not None
    assert [p.count for p in pieces] == [2, 4]  # 3 would cut the set
    assert pieces[1].set_futures[0][:2] == (0, 3)
    assert sum(p.reserved for p in pieces) == used - (len(b"later") + 24) and big.reserved == 0
    acc.reenqueue_split(pieces)
    assert [b.count for b in acc.waiting()] == [2, 4, 1]
    assert big not in acc.incomplete and set(pieces) <= acc.incomplete
    pieces[0].result.set_acknowledged(10, -1)
    pieces[1].result.set_acknowledged(20, -1)
    loop.run_until_complete(asyncio.sleep(0))  # the big batch's result follows its pieces'
    assert big.done.done()
    assert [f.result().offset for f in futures] == [10, 11, 23]
    one = ProducerBatch("t", 0, T0, 0.0, loop)
    one.append(None, b"alone", NO_HEADERS, T0)
    one.seal(Compression.NONE, -1, -1, -1)
    assert acc.split(one) is None  # a single record cannot be cut: it fails


def test_waiting_lists_each_partitions_batches_in_order(loop: asyncio.AbstractEventLoop) -> None:
    acc = accumulator(loop)
    add(acc, b"a0")
    add(acc, b"b0", partition=1)
    add(acc, b"a1")
    assert [(b.partition, b.order) for b in acc.waiting()] == [(0, 0), (0, 1), (1, 0)]


def test_deallocate_gives_the_memory_back_and_abort_returns_what_is_incomplete(
        loop: asyncio.AbstractEventLoop) -> None:
    acc = accumulator(loop, buffer_memory=1000)
    add(acc, b"x" * 100)
    add(acc, b"y" * 100)
    first, second = drain_all(acc)
    assert acc.pool.available == 1000 - 2 * 124
    acc.deallocate(first)
    assert acc.pool.available == 1000 - 124 and acc.incomplete == {second}
    add(acc, b"z", partition=3)
    assert set(acc.abort()) == {second, *acc.incomplete} and len(acc.abort()) == 2
    assert list(acc.waiting()) == [] and acc.open_batch(acc.queue("t", 3)) is None


# ---------------------------------------------------------------------------- the Sender


async def _run_sender(broker: BrokerThread, topic: str, partitions: int, start: bool = True,
                      **options: object) -> tuple[Sender, RecordAccumulator, Cluster, asyncio.Task[None] | None]:
    broker.call(broker.broker.topics.create, topic, partitions, {})  # type: ignore[union-attr]
    config = ProducerConfig(broker.bootstrap_servers, **options)  # type: ignore[arg-type]
    cluster = Cluster(broker.bootstrap_servers)
    await cluster.refresh([topic])
    wakeup = asyncio.Event()
    acc = RecordAccumulator(batch_size=config.batch_bytes, buffer_memory=config.buffer_memory,
                            loop=asyncio.get_running_loop(), on_batch_closed=lambda t, p: None, wake=wakeup.set)
    idempotence = IdempotenceManager(enabled=bool(config.enable_idempotence))
    sender = Sender(config, cluster, acc, idempotence, wakeup, topics={topic: None},
                    on_metadata=lambda topics: None, on_failure=lambda error: None)
    if config.enable_idempotence:
        await sender.init_producer_id()
    return sender, acc, cluster, asyncio.get_running_loop().create_task(sender.run()) if start else None


async def test_the_sender_sends_every_partitions_batches_in_order_and_leaves_nothing_in_flight(
        pulllog_broker: BrokerThread) -> None:
    sender, acc, cluster, running = await _run_sender(pulllog_broker, "sent", 2, batch_size=1)
    try:
        futures = [add(acc, b"%d" % i, partition=i % 2, topic="sent") for i in range(20)]
        acc.flushing += 1
        sender.wake()
        done = await asyncio.wait_for(asyncio.gather(*futures), WAIT_S)
        assert [(m.partition, m.offset) for m in done] == [(i % 2, i // 2) for i in range(20)]
        assert sender.in_flight("sent", 0) == [] and sender.in_flight("sent", 1) == []
        assert acc.incomplete == set() and acc.pool.used == 0
    finally:
        sender.stop()
        await asyncio.wait_for(running, WAIT_S)
        await cluster.close()


async def test_stop_ends_run_and_leaves_no_task(pulllog_broker: BrokerThread) -> None:
    sender, acc, cluster, running = await _run_sender(pulllog_broker, "stopped", 1, linger_ms=600_000)
    lingering = add(acc, b"x", topic="stopped")
    await asyncio.sleep(0)  # the sender runs a pass: the batch lingers
    sender.stop()
    await asyncio.wait_for(running, WAIT_S)
    assert running.result() is None and sender.error is None
    sender.abort(RuntimeError("closed"))
    assert isinstance(lingering.exception(), RuntimeError)
    leftovers = [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("pulllog-producer")]
    assert leftovers == []
    await cluster.close()


async def test_requests_in_flight_are_no_tasks_and_stop_fails_their_records(pulllog_broker: BrokerThread) -> None:
    # A batch-1 producer makes a request per record: a task (and a future, and loop hops) per
    # request cost more than the record. The broker loses the Produce requests, so that five
    # stay in flight.
    sender, acc, cluster, running = await _run_sender(pulllog_broker, "held", 1, batch_size=1, acks=1)
    rule = pulllog_broker.faults.lose_request(0, topic="held", times=None)
    try:
        futures = [add(acc, b"%d" % i, topic="held") for i in range(8)]
        sender.wake()
        await wait_until(lambda: len(sender.in_flight("held", 0)) == 5, "five requests in flight")
        tasks = [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("pulllog-producer-request")]
        assert tasks == []
        sender.stop()
        await asyncio.wait_for(running, WAIT_S)
        assert all(isinstance(f.exception(), ProducerClosedError) for f in futures[:5])
        assert "in flight" in str(futures[0].exception())
        assert sender.in_flight("held", 0) == []
    finally:
        pulllog_broker.faults.clear()
        sender.stop()
        await asyncio.wait_for(running, WAIT_S)
        await cluster.close()


async def _one_pass(sender: Sender, cluster: Cluster, topic: str) -> None:
    """One sender pass by hand (``run()`` not started), its requests written."""
    await cluster.connection(cluster.topics[topic].partitions[0].leader)
    async with asyncio.TaskGroup() as tg:
        sender._pass(tg)
        sender._flush_held()


async def test_one_pass_fills_every_free_slot_of_a_partition_a_request_per_batch(
        pulllog_broker: BrokerThread) -> None:
    # batch_size=1: eight batches of one record. One pass (not one pass per request, each
    # walking every partition again) takes five of them, as many as the partition's in-flight
    # window, each in its own request (a partition appears once per request), in order.
    sender, acc, cluster, _ = await _run_sender(pulllog_broker, "filled", 1, batch_size=1, acks=1, start=False)
    try:
        futures = [add(acc, b"%d" % i, topic="filled") for i in range(8)]
        await _one_pass(sender, cluster, "filled")
        flying = sender.in_flight("filled", 0)
        assert [b.order for b in flying] == [0, 1, 2, 3, 4]
        assert sender._in_flight_by_node == {0: 5}
        running = asyncio.get_running_loop().create_task(sender.run())
        done = await asyncio.wait_for(asyncio.gather(*futures), WAIT_S)
        assert [m.offset for m in done] == list(range(8))
        sender.stop()
        await asyncio.wait_for(running, WAIT_S)
    finally:
        await cluster.close()


async def test_one_pass_keeps_to_max_in_flight_requests_per_broker(pulllog_broker: BrokerThread) -> None:
    # Three partitions with three batches each and two requests per broker: the first
    # request takes each partition's first batch, the second each one's second.
    sender, acc, cluster, _ = await _run_sender(pulllog_broker, "capped", 3, batch_size=1, acks=1,
                                                max_in_flight=2, start=False)
    try:
        futures = [add(acc, b"%d" % i, partition=i % 3, topic="capped") for i in range(9)]
        await _one_pass(sender, cluster, "capped")
        assert [[b.order for b in sender.in_flight("capped", p)] for p in range(3)] == [[0, 1]] * 3
        assert sender._in_flight_by_node == {0: 2}
        running = asyncio.get_running_loop().create_task(sender.run())
        done = await asyncio.wait_for(asyncio.gather(*futures), WAIT_S)
        assert [(m.partition, m.offset) for m in done] == [(i % 3, i // 3) for i in range(9)]
        sender.stop()
        await asyncio.wait_for(running, WAIT_S)
    finally:
        await cluster.close()


def _complete_frames(sock: socket.socket) -> int:
    """How many whole response frames wait unread in ``sock`` (peeked, not taken)."""
    try:
        data = sock.recv(1 << 20, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return 0
    frames, at = 0, 0
    while len(data) - at >= 4:
        (size,) = struct.unpack_from(">i", data, at)
        if len(data) - at - 4 < size:
            break
        frames, at = frames + 1, at + 4 + size
    return frames


async def test_a_partitions_batches_complete_in_order_when_their_answers_come_in_one_read(
        pulllog_broker: BrokerThread) -> None:
    # Batch 0 of partition 0 goes alone in request R1 (its acknowledgement is held back until
    # the sender has refilled the freed slots), batch 1 of partition 0 with partition 1's
    # batch in request R2 (decoded in full and completed at once). Both answers are read at
    # once (reading paused until both wait in the socket): batch 0 is still told first.
    sender, acc, cluster, _ = await _run_sender(pulllog_broker, "one-read", 2, batch_size=1, acks=1, start=False)
    conn = await cluster.connection(cluster.topics["one-read"].partitions[0].leader)
    assert cluster.topics["one-read"].partitions[1].leader == cluster.topics["one-read"].partitions[0].leader
    told: list[tuple[int, bytes]] = []
    try:
        first = add(acc, b"p0-0", partition=0, topic="one-read")
        async with asyncio.TaskGroup() as tg:
            sender._pass(tg)  # R1: partition 0's batch 0 alone
            later = [add(acc, b"p0-1", partition=0, topic="one-read"), add(acc, b"p1-0", partition=1, topic="one-read")]
            sender._pass(tg)  # R2: partition 0's batch 1 and partition 1's batch 0
        assert [len(r.batches) for r in sender._requests] == [1, 2]
        for future, name in [(first, b"p0-0"), *zip(later, [b"p0-1", b"p1-0"])]:
            future.add_done_callback(lambda f, n=name: told.append((f.result().partition, n)))
        transport = conn._transport
        assert transport is not None
        transport.pause_reading()
        sender._flush_held()
        with socket.socket(fileno=os.dup(transport.get_extra_info("socket").fileno())) as peek:
            await wait_until(lambda: _complete_frames(peek) == 2, "both answers waiting unread")
        transport.resume_reading()
        await asyncio.wait_for(asyncio.gather(first, *later), WAIT_S)
        await wait_until(lambda: len(told) == 3, "every done callback run")
        assert [n for p, n in told if p == 0] == [b"p0-0", b"p0-1"]
        assert first.result().offset == 0 and later[0].result().offset == 1
    finally:
        await cluster.close()


async def test_a_batch_expired_by_the_refill_pass_is_told_after_the_older_acknowledged_one(
        pulllog_broker: BrokerThread) -> None:
    # One batch of the partition in flight (max_in_flight=1), the next one waiting and past its
    # delivery timeout. The answer's acknowledgement is held back while the sender refills the
    # freed slot in the same turn; that pass expires the waiting batch: the acknowledged
    # (older) batch is still told first.
    sender, acc, cluster, _ = await _run_sender(pulllog_broker, "expiring", 1, batch_size=1, acks=1,
                                                max_in_flight=1, start=False)
    await cluster.connection(cluster.topics["expiring"].partitions[0].leader)
    told: list[bytes] = []
    try:
        async with asyncio.TaskGroup() as tg:
            sender._tg = tg  # run()'s, for the pass made when an answer is read
            first = add(acc, b"0", topic="expiring")
            sender._pass(tg)
            sender._flush_held()
            second = add(acc, b"1", topic="expiring")
            (waiting,) = acc.queue("expiring", 0).ready
            waiting.created -= sender.config.delivery_timeout_s  # its delivery timeout is over
            for future, name in [(first, b"0"), (second, b"1")]:
                future.add_done_callback(lambda f, n=name: told.append(n))
            await wait_until(lambda: len(told) == 2, "both outcomes told")
        assert told == [b"0", b"1"]
        assert first.result().offset == 0
        assert "delivery_timeout_ms" in str(second.exception())
    finally:
        sender._tg = None
        await cluster.close()
