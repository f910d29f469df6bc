"""Four independent clients through pulllog's 3-broker cluster (issue 16, "Must show": interop):
aiokafka, kafka-python, librdkafka (confluent-kafka) and pulllog's own, against a real ZooKeeper
and three ``pulllog serve --zookeeper`` brokers on 127.0.0.1, .2 and .3.

Every topic has 3 partitions, replication factor 3 and min.insync.replicas=2, and every
producer asks for acks=all, so each acknowledgement waits for the in-sync replicas. Record
``i`` of a run goes to partition ``i % 3``; a consumer's reading is compared with that split
exactly: every record once, each partition in send order. The partitions' leaders are spread
over the three brokers, so each client has to follow Metadata to three leaders (and to the
group coordinator, wherever ``__consumer_offsets`` put it).

The cases: each client produces and reads its records back as a group member; the records of
one client are read by each of the three others (assigned, no group); one consumer group of an
aiokafka and a kafka-python member splits the partitions between them (both speak the
``roundrobin`` assignor, so the group can choose it).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import zk_cluster  # scripts/, on sys.path through tests/conftest.py
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AIOTopicPartition
from cluster_helpers import partitions
from confluent_kafka import Consumer as RdConsumer
from confluent_kafka import Producer as RdProducer
from confluent_kafka import TopicPartition as RdTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from waits import TIMEOUT_S, wait_until
from zk_brokers import Cluster

from pulllog.client.consumer import Consumer as PulllogConsumer
from pulllog.client.producer import Producer as PulllogProducer
from pulllog.client.types import TopicPartition as PulllogTopicPartition

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 3
RECORDS = 300
CLIENTS = ("aiokafka", "kafka-python", "librdkafka", "pulllog")
POLL_MS = 200

_names = itertools.count(1)

# What a consumer read: partition -> values in the order they arrived.
Read = dict[int, list[bytes]]


@pytest.fixture(scope="module")
def rf3(zookeeper: zk_cluster.ZooKeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Three brokers whose defaults are those the issue asks for; yields their bootstrap list."""
    cluster = Cluster(zookeeper, tmp_path_factory.mktemp("interop"),
                      overrides=("default.replication.factor=3", "min.insync.replicas=2",
                                 "offsets.topic.replication.factor=3"))
    try:
        cluster.start(3)
        yield ",".join(b.bootstrap_servers for b in cluster.brokers.values())
    finally:
        cluster.stop()


async def _replicated_topic(bootstrap: str, what: str) -> str:
    """A new 3-partition RF=3 topic, returned once every partition is led and fully in sync on
    the brokers' views (so the first produce meets no election)."""
    topic = f"interop-{what}-{next(_names)}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})],
                                 operation_timeout=30)[topic]
    await asyncio.to_thread(future.result, TIMEOUT_S)

    async def ready() -> bool:
        found = await partitions(bootstrap, topic)
        return found is not None and len(found) == PARTITIONS and all(
            p.leader >= 0 and len(p.replicas) == 3 and set(p.isr) == set(p.replicas) for p in found.values())
    await wait_until(ready, f"{topic}'s {PARTITIONS} partitions are led and fully in sync")
    found = await partitions(bootstrap, topic)
    assert found is not None and {p.leader for p in found.values()} == {1, 2, 3}, "one leader on each broker"
    return topic


def _values(client: str, count: int = RECORDS) -> list[bytes]:
    return [f"{client}-{i}".encode() for i in range(count)]


def _expected(values: list[bytes]) -> Read:
    return {p: values[p::PARTITIONS] for p in range(PARTITIONS)}


def _total(read: Read) -> int:
    return sum(len(v) for v in read.values())


# ---------------------------------------------------------------------------- producers (acks=all)


async def _produce_aiokafka(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        futures = [await producer.send(topic, value, partition=i % PARTITIONS) for i, value in enumerate(values)]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def _produce_kafka_python(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        futures = [producer.send(topic, value, partition=i % PARTITIONS) for i, value in enumerate(values)]
        producer.flush(TIMEOUT_S)
        for future in futures:
            future.get(TIMEOUT_S)
    finally:
        producer.close(10)


def _produce_librdkafka(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = RdProducer({"bootstrap.servers": bootstrap, "acks": "all"})
    failed: list[Any] = []
    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=i % PARTITIONS,
                         on_delivery=lambda err, _msg: failed.append(err) if err else None)
    assert producer.flush(TIMEOUT_S) == 0 and failed == []


async def _produce_pulllog(bootstrap: str, topic: str, values: list[bytes]) -> None:
    async with PulllogProducer(bootstrap, acks="all", linger_ms=5) as producer:
        futures = [await producer.send(topic, value, partition=i % PARTITIONS) for i, value in enumerate(values)]
        await asyncio.gather(*futures)


# ---------------------------------------------------------------------------- consumers
# Each reads ``count`` records: as a member of ``group`` (subscribed), or with no group, all
# partitions assigned from the beginning. It stops at ``count``; a duplicate would then show as
# a missing record, a reordering as a different list.


async def _consume_aiokafka(bootstrap: str, topic: str, count: int, group: str | None) -> Read:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                enable_auto_commit=False)
    await consumer.start()
    read: Read = {}
    try:
        if group is None:
            consumer.assign([AIOTopicPartition(topic, p) for p in range(PARTITIONS)])
        else:
            consumer.subscribe([topic])

        async def more() -> bool:
            for tp, records in (await consumer.getmany(timeout_ms=POLL_MS)).items():
                read.setdefault(tp.partition, []).extend(r.value for r in records)
            return _total(read) >= count
        await wait_until(more, f"aiokafka reads {count} records of {topic}")
    finally:
        await consumer.stop()
    return read


def _consume_kafka_python(bootstrap: str, topic: str, count: int, group: str | None) -> Read:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    read: Read = {}
    try:
        if group is None:
            consumer.assign([KpTopicPartition(topic, p) for p in range(PARTITIONS)])
        else:
            consumer.subscribe([topic])
        _block_reading(lambda: _into(read, consumer.poll(timeout_ms=POLL_MS)), read, count, f"kafka-python reads {topic}")
    finally:
        consumer.close()
    return read


def _consume_librdkafka(bootstrap: str, topic: str, count: int, group: str | None) -> Read:
    consumer = RdConsumer({"bootstrap.servers": bootstrap, "group.id": group or f"unused-{topic}",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False})
    read: Read = {}

    def poll() -> None:
        message = consumer.poll(POLL_MS / 1000)
        if message is not None:
            assert message.error() is None, message.error()
            read.setdefault(message.partition(), []).append(message.value())
    try:
        if group is None:
            consumer.assign([RdTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        else:
            consumer.subscribe([topic])
        _block_reading(poll, read, count, f"librdkafka reads {topic}")
    finally:
        consumer.close()
    return read


async def _consume_pulllog(bootstrap: str, topic: str, count: int, group: str | None) -> Read:
    read: Read = {}
    async with PulllogConsumer(bootstrap, group_id=group, auto_offset_reset="earliest",
                               enable_auto_commit=False) as consumer:
        if group is None:
            consumer.assign([PulllogTopicPartition(topic, p) for p in range(PARTITIONS)])
        else:
            consumer.subscribe([topic])

        async def more() -> bool:
            for tp, records in (await consumer.getmany(timeout_ms=POLL_MS)).items():
                read.setdefault(tp.partition, []).extend(r.value for r in records)
            return _total(read) >= count
        await wait_until(more, f"pulllog reads {count} records of {topic}")
    return read


def _into(read: Read, polled: dict[Any, list[Any]]) -> None:
    for tp, records in polled.items():
        read.setdefault(tp.partition, []).extend(r.value for r in records)


def _block_reading(poll: Callable[[], None], read: Read, count: int, what: str) -> None:
    """Poll (a blocking client's call, on this thread) until ``count`` records were read."""
    deadline = time.monotonic() + TIMEOUT_S
    while _total(read) < count:
        assert time.monotonic() < deadline, f"{what}: {_total(read)} of {count} records after {TIMEOUT_S} s"
        poll()


# The blocking clients run on a thread, so every test drives all four from one event loop.
def _on_thread(fn: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    async def run(*args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)
    return run


PRODUCE: dict[str, Callable[[str, str, list[bytes]], Awaitable[None]]] = {
    "aiokafka": _produce_aiokafka,
    "kafka-python": _on_thread(_produce_kafka_python),
    "librdkafka": _on_thread(_produce_librdkafka),
    "pulllog": _produce_pulllog,
}
CONSUME: dict[str, Callable[[str, str, int, str | None], Awaitable[Read]]] = {
    "aiokafka": _consume_aiokafka,
    "kafka-python": _on_thread(_consume_kafka_python),
    "librdkafka": _on_thread(_consume_librdkafka),
    "pulllog": _consume_pulllog,
}


# ---------------------------------------------------------------------------- the cases


@pytest.mark.parametrize("client", CLIENTS)
async def test_a_client_reads_back_as_a_group_member_what_it_produced_with_acks_all(rf3: str, client: str) -> None:
    topic = await _replicated_topic(rf3, client)
    values = _values(client)
    await PRODUCE[client](rf3, topic, values)
    read = await CONSUME[client](rf3, topic, len(values), f"{topic}-group")
    assert read == _expected(values), "every record once, each partition in send order"


@pytest.mark.parametrize("producer", CLIENTS)
async def test_what_one_client_produced_every_other_client_reads(rf3: str, producer: str) -> None:
    topic = await _replicated_topic(rf3, f"from-{producer}")
    values = _values(producer)
    await PRODUCE[producer](rf3, topic, values)
    readers = [c for c in CLIENTS if c != producer]
    reads = await asyncio.gather(*(CONSUME[c](rf3, topic, len(values), None) for c in readers))
    for reader, read in zip(readers, reads):
        assert read == _expected(values), f"{reader} read {producer}'s records: each once, in partition order"


class _KafkaPythonMember:
    """A kafka-python group member polling on its own thread until stopped; what it read and
    its last assignment are read by the test's loop (lists and a set replaced whole)."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                      enable_auto_commit=False, client_id="kafka-python-member")
        self.consumer.subscribe([topic])
        self.read: Read = {}
        self.assigned: frozenset[int] = frozenset()
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kafka-python-member", daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                _into(self.read, self.consumer.poll(timeout_ms=POLL_MS))
                self.assigned = frozenset(tp.partition for tp in self.consumer.assignment())
        except Exception as e:  # noqa: BLE001 - reported by the test, not lost on the thread
            self.error = e
        finally:
            self.consumer.close()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT_S)


async def test_one_group_of_aiokafka_and_kafka_python_members_splits_the_partitions(rf3: str) -> None:
    topic = await _replicated_topic(rf3, "mixed-group")
    group = f"{topic}-group"
    aio = AIOKafkaConsumer(bootstrap_servers=rf3, group_id=group, auto_offset_reset="earliest",
                           enable_auto_commit=False)
    await aio.start()
    aio.subscribe([topic])
    aio_read: Read = {}
    kp = _KafkaPythonMember(rf3, topic, group)
    kp.start()
    try:
        def aio_assigned() -> frozenset[int]:
            return frozenset(tp.partition for tp in aio.assignment())

        async def split() -> bool:
            _into(aio_read, await aio.getmany(timeout_ms=POLL_MS))
            assert kp.error is None, kp.error
            mine, theirs = aio_assigned(), kp.assigned
            return bool(mine) and bool(theirs) and not mine & theirs and mine | theirs == set(range(PARTITIONS))
        await wait_until(split, "the two members split the 3 partitions between them")
        # Produced only now, so no record was read by a member that later gave its partition away.
        values = _values("mixed")
        await PRODUCE["librdkafka"](rf3, topic, values)

        async def all_read() -> bool:
            _into(aio_read, await aio.getmany(timeout_ms=POLL_MS))
            assert kp.error is None, kp.error
            return _total(aio_read) + _total(kp.read) >= len(values)
        await wait_until(all_read, f"the group reads all {len(values)} records")
        mine, theirs = aio_assigned(), kp.assigned
    finally:
        kp.stop()
        await aio.stop()
    expected = _expected(values)
    assert aio_read == {p: expected[p] for p in mine}, "aiokafka read its own partitions, each record once, in order"
    assert kp.read == {p: expected[p] for p in theirs}, "kafka-python read its own partitions, each once, in order"
