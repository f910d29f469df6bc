"""Replication through ZooKeeper: the leader's own ISR changes (conditional writes of the
partition's state znode, leader epoch unchanged) and identical replicas on disk, with
``pulllog serve`` processes and librdkafka."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from waits import block_until
from zk_brokers import Cluster


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    failed: list[Any] = []
    for value in values:
        producer.produce(topic, value=value, on_delivery=lambda err, _msg: failed.append(err) if err else None)
    assert producer.flush(60) == 0 and failed == []


def _segments(data_dir: Path, partition_dir: str) -> bytes:
    """The partition's segment files, concatenated in offset order (the replicas' data, byte for byte)."""
    return b"".join(p.read_bytes() for p in sorted((data_dir / partition_dir).glob("*.log")))


def test_a_paused_follower_leaves_the_isr_and_rejoins_it_with_an_identical_log(own_cluster: Cluster,
                                                                               zk_client: Any) -> None:
    # The session outlives the pause: broker 3 stays registered, only its fetching stops.
    own_cluster.overrides = ("replica.lag.time.max.ms=1500", "zookeeper.session.timeout.ms=60000")
    own_cluster.start(3)
    bootstrap = ",".join(b.bootstrap_servers for b in own_cluster.brokers.values())
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("isr", 1, replica_assignment=[[1, 2, 3]], config={"min.insync.replicas": "2"})],
                        operation_timeout=30)["isr"].result()
    state_path = own_cluster.path("/brokers/topics/isr/partitions/0/state")

    def state() -> dict[str, Any]:
        return json.loads(zk_client.get(state_path)[0])

    block_until(lambda: state()["leader"] == 1 and sorted(state()["isr"]) == [1, 2, 3], "the partition is led by 1")
    epoch = state()["leader_epoch"]
    _produce(bootstrap, "isr", [b"a%d" % i for i in range(100)])
    follower = own_cluster.broker(3)
    assert follower.proc is not None
    os.kill(follower.proc.pid, signal.SIGSTOP)
    try:
        block_until(lambda: sorted(state()["isr"]) == [1, 2], "the leader shrank broker 3 out of the ISR")
        assert (state()["leader"], state()["leader_epoch"]) == (1, epoch)  # the leader's own write
        _produce(bootstrap, "isr", [b"b%d" % i for i in range(100)])  # acks=all with 2 of 3
    finally:
        os.kill(follower.proc.pid, signal.SIGCONT)
    block_until(lambda: sorted(state()["isr"]) == [1, 2, 3], "broker 3 caught up and rejoined the ISR")
    assert state()["leader_epoch"] == epoch
    dirs = [b.data_dir for b in own_cluster.brokers.values()]
    block_until(lambda: len({_segments(d, "isr-0") for d in dirs}) == 1 and len(_segments(dirs[0], "isr-0")) > 0,
                "the three replicas' segments are identical")
