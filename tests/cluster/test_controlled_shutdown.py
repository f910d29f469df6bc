"""Controlled shutdown (Kafka's ``controlled.shutdown.enable``): a cluster member stopped
cleanly (SIGTERM) first has the controller move the leadership of its partitions to other
in-sync replicas and take it out of the ISRs, then deregisters and exits.

"Before it exits" is read from ZooKeeper's own order of writes: the partition's state znode
was last written (``mzxid``) before the broker's registration went (the last child change
of ``/brokers/ids``, its ``pzxid``). Without a controlled shutdown the controller elects only
after the registration is gone, so the order is the other way round."""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import zk_cluster
from confluent_kafka.admin import AdminClient, NewTopic
from waits import block_until
from zk_brokers import Cluster


def _state(zk: Any, cluster: Cluster, topic: str, partition: int) -> tuple[dict[str, Any], int]:
    data, stat = zk.get(cluster.path(f"/brokers/topics/{topic}/partitions/{partition}/state"))
    return json.loads(data), stat.mzxid


def _registrations_changed(zk: Any, cluster: Cluster) -> int:
    return zk.exists(cluster.path("/brokers/ids")).pzxid


def _create(cluster: Cluster, topic: str, assignment: list[list[int]]) -> None:
    bootstrap = ",".join(b.bootstrap_servers for b in cluster.brokers.values())
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, len(assignment), replica_assignment=assignment)],
                        operation_timeout=30)[topic].result()


def _stop_and_check_handed_over(zk: Any, cluster: Cluster, broker_id: int, topic: str, partitions: int) -> None:
    """SIGTERM the broker, wait for its exit; then no partition is led by it or has it in the ISR,
    and each state was written before its registration went."""
    assert cluster.broker(broker_id).stop() == 0
    deregistered = _registrations_changed(zk, cluster)
    for partition in range(partitions):
        state, written = _state(zk, cluster, topic, partition)
        assert state["leader"] != broker_id and broker_id not in state["isr"], (partition, state)
        assert written < deregistered, f"{topic}-{partition}'s state {state} was written after broker " \
                                       f"{broker_id} left (zxid {written} > {deregistered})"


def test_a_stopped_leader_hands_its_partitions_over_before_it_exits(own_cluster: Cluster, zk_client: Any) -> None:
    own_cluster.start(3)  # broker 1 started first: the controller
    # Partition 0 led by broker 2 (which asks the controller over the network), partition 1 led
    # by broker 1 (the controller: it runs the shutdown itself); each follows the other.
    _create(own_cluster, "handover", [[2, 3, 1], [1, 2, 3]])
    block_until(lambda: all(sorted(_state(zk_client, own_cluster, "handover", p)[0]["isr"]) == [1, 2, 3]
                            for p in range(2)), "every ISR is full")
    assert [_state(zk_client, own_cluster, "handover", p)[0]["leader"] for p in range(2)] == [2, 1]

    _stop_and_check_handed_over(zk_client, own_cluster, 2, "handover", 2)
    assert _state(zk_client, own_cluster, "handover", 0)[0]["leader"] == 3  # the next in the ISR, in order
    _stop_and_check_handed_over(zk_client, own_cluster, 1, "handover", 2)
    assert [_state(zk_client, own_cluster, "handover", p)[0]["leader"] for p in range(2)] == [3, 3]


def test_a_leader_with_no_other_replica_in_sync_stops_after_its_retries(own_cluster: Cluster,
                                                                       zk_client: Any) -> None:
    # Broker 2's session outlives its pause: it stays registered (so retries could help) but out of sync.
    overrides = ("replica.lag.time.max.ms=1000", "zookeeper.session.timeout.ms=60000",
                 "controlled.shutdown.max.retries=2", "controlled.shutdown.retry.backoff.ms=100")
    for broker_id in (1, 2):  # broker 1 first: the controller
        own_cluster.brokers[broker_id] = zk_cluster.BrokerProcess(
            broker_id, own_cluster.base_dir / f"broker-{broker_id}", own_cluster.connect, overrides=overrides,
            log_file=own_cluster.base_dir / f"broker-{broker_id}.log").start()
    _create(own_cluster, "alone", [[1, 2]])
    block_until(lambda: sorted(_state(zk_client, own_cluster, "alone", 0)[0]["isr"]) == [1, 2], "the ISR is full")
    follower = own_cluster.broker(2)
    assert follower.proc is not None
    os.kill(follower.proc.pid, signal.SIGSTOP)
    try:
        block_until(lambda: _state(zk_client, own_cluster, "alone", 0)[0]["isr"] == [1],
                    "the leader shrank the paused broker 2 out of the ISR")
        leader = own_cluster.broker(1)
        assert leader.stop() == 0
    finally:
        os.kill(follower.proc.pid, signal.SIGCONT)
    assert leader.log_file is not None
    logged = leader.log_file.read_text().splitlines()
    attempts = [line for line in logged if "controlled shutdown attempt" in line]
    assert len(attempts) == 2 and all("still leads alone-0" in line for line in attempts), logged[-20:]
    assert any("stopped cleanly" in line for line in logged), logged[-20:]
