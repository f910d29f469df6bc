"""pulllog's own 3-broker cluster (a private ZooKeeper and ``pulllog serve --broker-id N
--zookeeper ...`` on 127.0.0.N, from scripts/zk_cluster.py) behind the interface of
scripts/kafka_cluster.KafkaCluster, so the same client tests run against either:
``bootstrap_servers``, ``nodes`` (each with ``alive``), ``kill(n)``, ``shutdown(n)``,
``restart(n)``, ``stop()``.

The brokers get the settings the Kafka cluster has (replication factor 3 everywhere,
min.insync.replicas=2) and a 3 s ZooKeeper session, so a SIGKILLed broker is noticed as
quickly as a Kafka node is fenced. A broker listens on a port the kernel picks at its
first start and comes back on the same port when restarted, as a deployed broker does;
``bootstrap_servers`` names each broker's address.
"""

from __future__ import annotations

import time
from pathlib import Path

import zk_cluster  # scripts/, on sys.path through tests/conftest.py

NODE_IDS = (1, 2, 3)
SESSION_TIMEOUT_MS = 3000
SETTINGS = (
    f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}",
    "default.replication.factor=3",
    "min.insync.replicas=2",
    "offsets.topic.replication.factor=3",
    "offsets.topic.num.partitions=5",
    "transaction.state.log.replication.factor=3",
    "transaction.state.log.min.isr=2",
    "transaction.state.log.num.partitions=5",
    "group.initial.rebalance.delay.ms=0",
    "auto.leader.rebalance.enable=false",
)


class _Node:
    def __init__(self, broker: zk_cluster.BrokerProcess) -> None:
        self.broker = broker

    @property
    def alive(self) -> bool:
        return self.broker.proc is not None and self.broker.proc.poll() is None


class PulllogCluster:
    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.zookeeper = zk_cluster.ZooKeeper(base_dir / "zookeeper")
        self.nodes: dict[int, _Node] = {}

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(node.broker.bootstrap_servers for node in self.nodes.values())

    def start(self) -> PulllogCluster:
        self.zookeeper.start()
        try:
            for broker in zk_cluster.start_brokers(self.zookeeper.connect + "/pulllog", self.base_dir, len(NODE_IDS),
                                                   SETTINGS):
                self.nodes[broker.broker_id] = _Node(broker)
        except BaseException:
            self.stop()
            raise
        return self

    def kill(self, node_id: int) -> None:
        self.nodes[node_id].broker.kill()

    def shutdown(self, node_id: int) -> None:
        self.nodes[node_id].broker.stop()

    def restart(self, node_id: int, timeout_s: float = 60.0) -> None:
        """Start the broker again with its data. After a SIGKILL its old ZooKeeper session
        holds its registration until it expires, and the start is refused until then (as
        Kafka's): try again until ``timeout_s``."""
        broker = self.nodes[node_id].broker
        deadline = time.monotonic() + timeout_s
        while True:
            broker.stderr_lines.clear()
            try:
                broker.start()
                return
            except RuntimeError:
                if time.monotonic() > deadline or not any("already registered" in line for line in broker.stderr_lines):
                    raise
            time.sleep(SESSION_TIMEOUT_MS / 1000 / 4)

    def stop(self) -> None:
        for node in self.nodes.values():
            node.broker.stop()
        self.zookeeper.stop()
