"""A transaction over partitions led by three brokers: the coordinator sends each leader its
markers (WriteTxnMarkers over the inter-broker connection) and completes the transaction once
all are written, also when a leader dies between the markers."""

from __future__ import annotations

import json
import struct
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from waits import block_until
from zk_brokers import Cluster

from pulllog.net.coordinator_keys import partition_for


def _bootstrap(cluster: Cluster, without: int | None = None) -> str:
    return ",".join(b.bootstrap_servers for i, b in cluster.brokers.items() if i != without)


def _create(bootstrap: str, topic: str) -> None:
    """Three partitions, RF=3: Kafka's assignment gives each broker one partition to lead."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})],
                        operation_timeout=30)[topic].result()
    leaders = {m.leader for m in admin.list_topics(topic, timeout=30).topics[topic].partitions.values()}
    assert leaders == {1, 2, 3}


def _transaction(producer: Producer, topic: str, tag: str, commit: bool) -> list[bytes]:
    """Nine records, three to each partition; sent before the commit or abort (librdkafka's
    abort drops what it has not sent yet)."""
    producer.begin_transaction()
    values = [f"{tag}-{i}".encode() for i in range(9)]
    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=i % 3)
    assert producer.flush(60) == 0
    if commit:
        producer.commit_transaction(60)
    else:
        producer.abort_transaction(60)
    return values


def _read_committed(bootstrap: str, topic: str, partitions: int) -> dict[int, list[bytes]]:
    """Every partition up to its last stable offset (read_committed), once the LSO is past every
    transaction (the end offsets the consumer sees, which count the markers)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    try:
        def read() -> bool:
            message = consumer.poll(0.5)
            if message is not None:
                if message.error() is None:
                    got[message.partition()].append(message.value())
                elif message.error().code() == -191:  # _PARTITION_EOF
                    at_end.add(message.partition())
            return len(at_end) == partitions
        block_until(read, "every partition is read to its end", interval_s=0)
    finally:
        consumer.close()
    return got


def _end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{topic}"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)]
    finally:
        consumer.close()


def _control_batches(cluster: Cluster, broker_id: int, topic: str, partition: int) -> int:
    """Control batches (markers) in a replica's segment files, read from its data directory
    (v2 batch header: base offset 8, length 4, leader epoch 4, magic 1, CRC 4, attributes 2;
    attribute bit 5 = control)."""
    count = 0
    for path in cluster.broker(broker_id).data_dir.rglob(f"{topic}-{partition}/*.log"):
        data = path.read_bytes()
        position = 0
        while position + 23 <= len(data):
            (length,) = struct.unpack_from(">i", data, position + 8)
            if length <= 0 or position + 12 + length > len(data):
                break  # the end, or a batch still being written
            (attributes,) = struct.unpack_from(">h", data, position + 21)
            count += bool(attributes & 0x20)
            position += 12 + length
    return count


def _markers_everywhere(cluster: Cluster, topic: str, brokers: list[int], count: int) -> bool:
    """Every partition has at least ``count`` markers, the same number on each replica (a
    marker whose answer was lost is written again, as Kafka's coordinator retries it)."""
    for p in range(3):
        counts = {_control_batches(cluster, b, topic, p) for b in brokers}
        if len(counts) != 1 or counts.pop() < count:
            return False
    return True


def test_a_transaction_over_three_leaders_is_committed_and_aborted_on_each(cluster: Cluster) -> None:
    bootstrap = _bootstrap(cluster)
    _create(bootstrap, "txn-spread")
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "spread", "acks": "all"})
    producer.init_transactions(60)
    committed = _transaction(producer, "txn-spread", "committed", commit=True)
    _transaction(producer, "txn-spread", "aborted", commit=False)
    again = _transaction(producer, "txn-spread", "again", commit=True)
    got = _read_committed(bootstrap, "txn-spread", 3)
    assert got == {p: committed[p::3] + again[p::3] for p in range(3)}  # each once, nothing aborted
    # Three records of each transaction and its marker in each partition, on every replica.
    block_until(lambda: _end_offsets(bootstrap, "txn-spread", 3) == [12, 12, 12], "every marker is written")
    block_until(lambda: _markers_everywhere(cluster, "txn-spread", [1, 2, 3], 3), "every replica has the markers")


def test_the_coordinator_completes_the_commit_at_a_new_leader_after_a_sigkill(
        own_cluster: Cluster, zk_client: Any) -> None:
    own_cluster.overrides = ("zookeeper.session.timeout.ms=2000", "transaction.state.log.num.partitions=3")
    own_cluster.start(3)
    bootstrap = _bootstrap(own_cluster)
    _create(bootstrap, "txn-failover")
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "failover", "acks": "all"})
    producer.init_transactions(60)
    first = _transaction(producer, "txn-failover", "first", commit=True)
    coordinator = _leader(zk_client, own_cluster, "__transaction_state", partition_for("failover", 3))
    victim = next(b for b in (1, 2, 3) if b != coordinator)
    victims_partition = next(p for p in range(3) if _leader(zk_client, own_cluster, "txn-failover", p) == victim)
    producer.begin_transaction()
    second = [f"second-{i}".encode() for i in range(9)]
    for i, value in enumerate(second):
        producer.produce("txn-failover", value=value, partition=i % 3)
    assert producer.flush(60) == 0  # the records are in; the transaction is open
    # The leader of one of its partitions dies before its marker: the coordinator's other
    # markers go through, this one fails until the controller elects a new leader.
    own_cluster.broker(victim).kill()
    producer.commit_transaction(60)
    block_until(lambda: _leader(zk_client, own_cluster, "txn-failover", victims_partition) not in (victim, -1),
                f"txn-failover-{victims_partition} has a new leader")
    survivors = _bootstrap(own_cluster, without=victim)
    got = _read_committed(survivors, "txn-failover", 3)
    assert got == {p: first[p::3] + second[p::3] for p in range(3)}
    alive = [b for b in (1, 2, 3) if b != victim]
    block_until(lambda: _markers_everywhere(own_cluster, "txn-failover", alive, 2), "the live replicas have the markers")


def _leader(zk_client: Any, cluster: Cluster, topic: str, partition: int) -> int:
    path = cluster.path(f"/brokers/topics/{topic}/partitions/{partition}/state")
    block_until(lambda: zk_client.exists(path) is not None, f"{topic}-{partition} exists")
    return int(json.loads(zk_client.get(path)[0])["leader"])


def test_a_marker_waiting_for_a_leader_goes_when_one_is_elected(own_cluster: Cluster, zk_client: Any) -> None:
    """The only replica of a transaction's partition dies before the commit: the partition has
    no leader (-1) when the coordinator writes the markers, so that marker waits. Once the
    replica is back and leads again, the marker goes with the view that says so, as Kafka's
    marker channel re-queues on a metadata change: not at the coordinator's periodic retry
    (transaction.abort.timed.out.transaction.cleanup.interval.ms, an hour here)."""
    own_cluster.overrides = ("zookeeper.session.timeout.ms=2000", "transaction.state.log.num.partitions=3",
                             "transaction.abort.timed.out.transaction.cleanup.interval.ms=3600000")
    own_cluster.start(3)
    bootstrap = _bootstrap(own_cluster)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("txn-orphan", 3, 1)], operation_timeout=30)["txn-orphan"].result()
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "waiter", "acks": "all"})
    producer.init_transactions(60)
    coordinator = _leader(zk_client, own_cluster, "__transaction_state", partition_for("waiter", 3))
    victim = next(b for b in (1, 2, 3) if b != coordinator)
    orphan = next(p for p in range(3) if _leader(zk_client, own_cluster, "txn-orphan", p) == victim)
    producer.begin_transaction()
    values = [f"orphan-{i}".encode() for i in range(3)]
    for value in values:
        producer.produce("txn-orphan", value=value, partition=orphan)
    assert producer.flush(60) == 0
    own_cluster.broker(victim).kill()
    block_until(lambda: _leader(zk_client, own_cluster, "txn-orphan", orphan) == -1, "the partition has no leader")
    producer.commit_transaction(60)  # answered once PrepareCommit is logged; the marker waits
    own_cluster.broker(victim).start()
    block_until(lambda: _leader(zk_client, own_cluster, "txn-orphan", orphan) == victim, "it leads again")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "read-orphan", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition("txn-orphan", orphan, 0)])
    got: list[bytes] = []
    try:
        def read() -> bool:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
            return len(got) >= len(values)
        block_until(read, "the committed records are read (the marker is written)", interval_s=0)
    finally:
        consumer.close()
    assert got == values
    assert _control_batches(own_cluster, victim, "txn-orphan", orphan) == 1
