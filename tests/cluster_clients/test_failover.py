"""pulllog's clients follow leaders and coordinators across the brokers of a real 3-node Apache
Kafka cluster, while the broker they talk to is SIGKILLed (and started again afterwards).

Every record is numbered, so "nothing acknowledged lost, nothing duplicated, in order" is a
comparison of lists. Each test kills one broker at a moment chosen by state (so many records
acknowledged), waits for the cluster to move the role elsewhere only through what the clients
themselves must do, and the ``cluster`` fixture starts the node again for the next test.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator

import kafka_cluster as kc
import pytest
from cluster_helpers import coordinator, in_sync, leader
from waits import wait_until

from pulllog.client.admin import Admin, ElectionType
from pulllog.client.consumer import Consumer
from pulllog.client.producer import Producer
from pulllog.client.types import TopicPartition

pytestmark = pytest.mark.timeout(240)

TIMEOUT_S = 90.0
_names = itertools.count(1)


def _topic(what: str) -> str:
    return f"follow-{what}-{next(_names)}"


async def _replicated_topic(cluster: kc.KafkaCluster, name: str, partitions: int = 1) -> str:
    async with Admin(cluster.bootstrap_servers) as admin:
        await admin.create_topic(name, partitions, replication_factor=3, configs={"min.insync.replicas": "2"})
    for p in range(partitions):
        await wait_until(lambda p=p: _fully_in_sync(cluster, name, p), f"{name}-{p} has 3 in-sync replicas")
    return name


async def _fully_in_sync(cluster: kc.KafkaCluster, topic: str, partition: int) -> bool:
    isr = await in_sync(cluster.bootstrap_servers, topic, partition)
    return isr is not None and len(isr) == 3


class NumberedSender:
    """Sends 0, 1, 2, ... to one partition until stopped; remembers which were acknowledged."""

    def __init__(self, producer: Producer, topic: str, partition: int = 0) -> None:
        self.producer, self.topic, self.partition = producer, topic, partition
        self.acked: dict[int, int] = {}  # number -> offset
        self.failed: dict[int, BaseException] = {}
        self.sent = 0
        self._stop = asyncio.Event()

    async def run(self) -> None:
        pending: set[asyncio.Future[None]] = set()
        while not self._stop.is_set():
            n = self.sent
            future = await self.producer.send(self.topic, str(n).encode(), partition=self.partition)
            self.sent += 1
            pending.add(asyncio.ensure_future(self._outcome(n, future)))
            pending = {f for f in pending if not f.done()}
            if len(pending) > 200:  # keep a bounded window in flight
                await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            await asyncio.sleep(0.002)
        await asyncio.gather(*pending)

    async def _outcome(self, n: int, future: asyncio.Future[object]) -> None:
        try:
            metadata = await future
        except Exception as exc:  # noqa: BLE001 -- the test reports every failure
            self.failed[n] = exc
            return
        self.acked[n] = metadata.offset  # type: ignore[attr-defined]

    def stop(self) -> None:
        self._stop.set()


@contextlib.asynccontextmanager
async def _running(coro: object) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.ensure_future(coro)  # type: ignore[arg-type]
    try:
        yield task
    finally:
        if not task.done():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _consume_numbers(consumer: Consumer, into: list[int], tp: TopicPartition) -> None:
    async for record in consumer:
        assert record.topic == tp.topic and record.partition == tp.partition
        into.append(int(record.value))


async def test_idempotent_producer_and_consumer_follow_a_killed_leader(cluster: kc.KafkaCluster) -> None:
    """acks=all idempotent producing and assigned consuming go on through the SIGKILL of the
    partition's leader: every acknowledged record stored exactly once and in order, none
    failed, and the consumer reads all of them from the new leader."""
    topic = await _replicated_topic(cluster, _topic("leader"))
    tp = TopicPartition(topic, 0)
    first_leader = await leader(cluster.bootstrap_servers, topic)
    assert first_leader is not None
    consumed: list[int] = []
    async with Producer(cluster.bootstrap_servers, acks="all", enable_idempotence=True, linger_ms=5,
                        request_timeout_ms=10_000, delivery_timeout_ms=120_000, retry_backoff_ms=100) as producer, \
            Consumer(cluster.bootstrap_servers, auto_offset_reset="earliest", fetch_max_wait_ms=200,
                     request_timeout_ms=10_000) as consumer:
        consumer.assign([tp])
        sender = NumberedSender(producer, topic)
        async with _running(sender.run()) as sending, _running(_consume_numbers(consumer, consumed, tp)):
            await wait_until(lambda: len(sender.acked) >= 200 and len(consumed) >= 100,
                             "200 records acknowledged and 100 consumed before the kill")
            cluster.kill(first_leader)
            killed_at = sender.sent
            await wait_until(lambda: _moved(leader(cluster.bootstrap_servers, topic), first_leader),
                             "the partition has a new leader", TIMEOUT_S)
            await wait_until(lambda: any(n > killed_at for n in sender.acked),
                             "records sent after the kill acknowledged by the new leader", TIMEOUT_S)
            sender.stop()
            await asyncio.wait_for(sending, TIMEOUT_S)
            await producer.flush()
            last = max(sender.acked)
            await wait_until(lambda: bool(consumed) and consumed[-1] >= last,
                             f"the consumer read up to record {last} from the new leader", TIMEOUT_S)
    assert not sender.failed, f"{len(sender.failed)} record(s) failed, e.g. {next(iter(sender.failed.values()))!r}"
    assert sorted(sender.acked) == list(range(sender.sent))
    assert consumed == list(range(sender.sent)), "each record exactly once, in send order"
    by_offset = sorted(sender.acked.items(), key=lambda kv: kv[1])
    assert [n for n, _ in by_offset] == list(range(sender.sent)), "offsets in send order"


async def test_producer_and_consumer_follow_leadership_moved_off_live_brokers(cluster: kc.KafkaCluster) -> None:
    """Leadership moved by the cluster while every broker runs: a controlled shutdown of the
    leader (SIGTERM) and, once it is back, a preferred leader election that hands the
    partition back to it. The old leader answers NOT_LEADER_OR_FOLLOWER, and the producer and
    the consumer must look the leader up again; nothing failed, lost or duplicated."""
    topic = _topic("moved")
    async with Admin(cluster.bootstrap_servers) as admin:
        await admin.create_topic(topic, replica_assignment={0: [1, 2, 3]}, configs={"min.insync.replicas": "2"})
    await wait_until(lambda: _fully_in_sync(cluster, topic, 0), f"{topic}-0 has 3 in-sync replicas")
    tp = TopicPartition(topic, 0)
    consumed: list[int] = []
    async with Producer(cluster.bootstrap_servers, acks="all", linger_ms=5, request_timeout_ms=10_000,
                        delivery_timeout_ms=120_000) as producer, \
            Consumer(cluster.bootstrap_servers, auto_offset_reset="earliest", fetch_max_wait_ms=200,
                     request_timeout_ms=10_000) as consumer:
        consumer.assign([tp])
        sender = NumberedSender(producer, topic)
        async with _running(sender.run()) as sending, _running(_consume_numbers(consumer, consumed, tp)):
            await wait_until(lambda: len(sender.acked) >= 100 and len(consumed) >= 50, "records flow through broker 1")
            await asyncio.to_thread(cluster.shutdown, 1)
            moved_at = sender.sent
            await wait_until(lambda: any(n > moved_at for n in sender.acked),
                             "records sent after the controlled shutdown acknowledged", TIMEOUT_S)
            await asyncio.to_thread(cluster.restart, 1)
            await wait_until(lambda: _fully_in_sync(cluster, topic, 0), "broker 1 back in the ISR", TIMEOUT_S)
            async with Admin(cluster.bootstrap_servers) as admin:
                assert await admin.elect_leaders(ElectionType.PREFERRED, [tp]) == {tp: None}
            elected_at = sender.sent
            await wait_until(lambda: any(n > elected_at for n in sender.acked),
                             "records sent after the election acknowledged by broker 1", TIMEOUT_S)
            assert await leader(cluster.bootstrap_servers, topic) == 1
            sender.stop()
            await asyncio.wait_for(sending, TIMEOUT_S)
            last = max(sender.acked)
            await wait_until(lambda: bool(consumed) and consumed[-1] >= last,
                             f"the consumer read up to record {last}", TIMEOUT_S)
    assert not sender.failed, f"{len(sender.failed)} record(s) failed, e.g. {next(iter(sender.failed.values()))!r}"
    assert consumed == list(range(sender.sent)), "each record exactly once, in send order"


async def test_consumer_group_follows_its_coordinator(cluster: kc.KafkaCluster) -> None:
    """A group member goes on consuming and committing after the broker coordinating its group
    is SIGKILLed: FindCoordinator again, same generation or a new one, nothing skipped."""
    topic = await _replicated_topic(cluster, _topic("group"), partitions=3)
    group = f"{topic}-group"
    seen: dict[TopicPartition, list[int]] = {}
    async with Producer(cluster.bootstrap_servers, acks="all", linger_ms=1, request_timeout_ms=10_000,
                        delivery_timeout_ms=120_000) as producer, \
            Consumer(cluster.bootstrap_servers, group_id=group, auto_offset_reset="earliest",
                     session_timeout_ms=10_000, heartbeat_interval_ms=500, enable_auto_commit=False,
                     fetch_max_wait_ms=200, request_timeout_ms=10_000, retry_backoff_ms=100) as consumer:
        consumer.subscribe([topic])

        async def produce(start: int, count: int) -> None:
            futures = [await producer.send(topic, str(n).encode(), partition=n % 3) for n in range(start, start + count)]
            await asyncio.gather(*futures)

        async def consume_until(total: int) -> None:
            while sum(len(v) for v in seen.values()) < total:
                batch = await consumer.getmany(timeout_ms=500)
                for tp, records in batch.items():
                    seen.setdefault(tp, []).extend(int(r.value) for r in records)
                if batch:
                    await consumer.commit()

        await produce(0, 30)
        await asyncio.wait_for(consume_until(30), TIMEOUT_S)
        old = await coordinator(cluster.bootstrap_servers, group)
        assert old is not None
        cluster.kill(old)
        new = await wait_until(lambda: _moved(coordinator(cluster.bootstrap_servers, group), old),
                               "the group has a new coordinator", TIMEOUT_S)
        await produce(30, 30)
        await asyncio.wait_for(consume_until(60), TIMEOUT_S)
    everything = sorted(n for v in seen.values() for n in v)
    assert everything == list(range(60)), "every record once, none skipped across the coordinator's death"
    async with Admin(cluster.bootstrap_servers) as admin:
        assert await admin.find_coordinator(group) == new
        committed = await admin.list_group_offsets(group)
    assert {tp.partition: offset for tp, (offset, _) in committed.items()} == {0: 20, 1: 20, 2: 20}


async def _moved(found: object, old: int) -> int | None:
    node = await found  # type: ignore[misc]
    return node if node is not None and node != old else None


async def test_transactional_producer_follows_its_coordinator(cluster: kc.KafkaCluster) -> None:
    """A transactional producer whose coordinator's broker is SIGKILLed in the middle of a
    transaction (partitions added, records acknowledged) finishes it through the new
    transaction coordinator; read_committed sees both transactions' records once."""
    topic = await _replicated_topic(cluster, _topic("txn"))
    transactional_id = f"{topic}-txn"
    tp = TopicPartition(topic, 0)
    async with Producer(cluster.bootstrap_servers, transactional_id=transactional_id, linger_ms=1,
                        request_timeout_ms=10_000, delivery_timeout_ms=120_000, max_block_ms=120_000) as producer:
        await producer.init_transactions()
        async with producer.transaction():
            for n in range(10):
                await producer.send(topic, str(n).encode(), partition=0)
        old = await coordinator(cluster.bootstrap_servers, transactional_id, transactional=True)
        assert old is not None
        async with producer.transaction():
            await asyncio.gather(*[await producer.send(topic, str(n).encode(), partition=0) for n in range(10, 15)])
            cluster.kill(old)
            for n in range(15, 20):
                await producer.send(topic, str(n).encode(), partition=0)
    new = await coordinator(cluster.bootstrap_servers, transactional_id, transactional=True)
    assert new is not None and new != old
    values: list[int] = []
    async with Consumer(cluster.bootstrap_servers, isolation_level="read_committed",
                        auto_offset_reset="earliest", fetch_max_wait_ms=200) as consumer:
        consumer.assign([tp])

        async def read_all() -> None:
            while len(values) < 20:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    values.extend(int(r.value) for r in records)

        await asyncio.wait_for(read_all(), TIMEOUT_S)
    assert values == list(range(20))
