"""Produce -> consume through a three-broker cluster with replication factor 3 (librdkafka):
ZooKeeper, the controller, every broker's views and the replica manager together."""

from __future__ import annotations

import json
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from waits import block_until
from zk_brokers import Cluster


def _produce(bootstrap: str, topic: str, values: list[bytes], partitions: int = 1) -> None:
    """acks=all, idempotent; record i to partition i % partitions."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    failed: list[Any] = []
    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=i % partitions,
                         on_delivery=lambda err, _msg: failed.append(err) if err else None)
    assert producer.flush(60) == 0 and failed == []


def _consume(bootstrap: str, topic: str, partitions: int, count: int) -> dict[int, list[bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[bytes]] = {}
    try:
        def read() -> bool:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.setdefault(message.partition(), []).append(message.value())
            return sum(len(v) for v in got.values()) >= count
        block_until(read, f"{count} records are consumed", interval_s=0)
    finally:
        consumer.close()
    return got


def test_records_produced_with_acks_all_are_consumed_from_a_three_broker_rf3_topic(cluster: Cluster) -> None:
    bootstrap = ",".join(b.bootstrap_servers for b in cluster.brokers.values())
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("replicated", 3, 3, config={"min.insync.replicas": "2"})],
                        operation_timeout=30)["replicated"].result()
    values = [f"record-{i}".encode() for i in range(300)]
    _produce(bootstrap, "replicated", values, partitions=3)
    got = _consume(bootstrap, "replicated", 3, len(values))
    assert got == {p: values[p::3] for p in range(3)}  # every partition (each led by another broker), in order
    leaders = {m.leader for m in admin.list_topics("replicated", timeout=30).topics["replicated"].partitions.values()}
    assert leaders == {1, 2, 3}


def test_acknowledged_records_survive_the_leaders_sigkill(own_cluster: Cluster, zk_client: Any) -> None:
    own_cluster.overrides = ("zookeeper.session.timeout.ms=2000",)
    own_cluster.start(3)
    bootstrap = ",".join(b.bootstrap_servers for b in own_cluster.brokers.values())
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("survivor", 1, replica_assignment=[[1, 2, 3]],
                                  config={"min.insync.replicas": "2"})], operation_timeout=30)["survivor"].result()
    first = [f"before-{i}".encode() for i in range(100)]
    _produce(bootstrap, "survivor", first)
    own_cluster.broker(1).kill()  # the leader
    state_path = own_cluster.path("/brokers/topics/survivor/partitions/0/state")
    block_until(lambda: json.loads(zk_client.get(state_path)[0])["leader"] in (2, 3), "a new leader is elected")
    then = [f"after-{i}".encode() for i in range(100)]
    survivors = ",".join(b.bootstrap_servers for i, b in own_cluster.brokers.items() if i != 1)
    _produce(survivors, "survivor", then)
    assert _consume(survivors, "survivor", 1, 200) == {0: first + then}
