"""Three real brokers in the test's event loop (127.0.0.1, .2, .3) and a small in-test controller.

The controller stands in for the cluster layer at the seam (see the replica manager's
docstring): it keeps each partition's leadership (``LeaderAndIsr``), hands every broker the
views (``broker.replicas.apply``) and implements ``broker.alter_isr`` as the cluster layer
does over ZooKeeper: a conditional write on the state's version, then a view to everyone.
The data path under test (logs, fetchers, Produce / Fetch / ListOffsets /
OffsetForLeaderEpoch) is the real one, over real sockets.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from pulllog.broker import Broker
from pulllog.cluster.state import LeaderAndIsr, PartitionView
from pulllog.log import Log

HOSTS = {1: "127.0.0.1", 2: "127.0.0.2", 3: "127.0.0.3"}


class TestController:
    """The seam's stand-in: leadership by partition, views to every live broker, alter_isr."""

    __test__ = False

    def __init__(self, root: Path, properties: Mapping[str, str]) -> None:
        self.root = root
        self.properties = dict(properties)
        self.brokers: dict[int, Broker] = {}
        self._serving: dict[int, asyncio.Task[None]] = {}
        self.states: dict[tuple[str, int], LeaderAndIsr] = {}
        self.assignments: dict[tuple[str, int], tuple[int, ...]] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self.ports: dict[int, int] = {}

    # ------------------------------------------------------------------ brokers

    async def start(self, broker_id: int) -> Broker:
        broker = Broker(data_dir=self.root / f"broker-{broker_id}", host=HOSTS[broker_id],
                        port=self.ports.get(broker_id, 0), properties={**self.properties, "broker.id": str(broker_id)})
        replicas = broker.enable_replication()
        replicas.address_of = self.address_of
        broker.alter_isr = lambda state, topic, partition, _id=broker_id: self.alter_isr(_id, state, topic, partition)  # type: ignore[method-assign]
        ready: asyncio.Future[Broker] = asyncio.get_running_loop().create_future()
        self._serving[broker_id] = asyncio.create_task(broker.serve(ready=ready))
        await ready
        self.brokers[broker_id] = broker
        self.ports[broker_id] = broker.port
        for key, replicas_of in self.assignments.items():
            if broker_id in replicas_of:
                broker.replicas.apply(self.view(key))  # type: ignore[union-attr]
        return broker

    async def stop(self, broker_id: int) -> None:
        broker = self.brokers.pop(broker_id)
        broker.stop()
        await self._serving.pop(broker_id)

    async def stop_all(self) -> None:
        for broker_id in list(self.brokers):
            await self.stop(broker_id)

    def address_of(self, broker_id: int) -> tuple[str, int] | None:
        broker = self.brokers.get(broker_id)
        return None if broker is None else (HOSTS[broker_id], broker.port)

    # ------------------------------------------------------------------ partitions

    def view(self, key: tuple[str, int]) -> PartitionView:
        topic, partition = key
        return PartitionView(topic, partition, self.topic_ids[topic], self.assignments[key], self.states.get(key),
                             self.configs.get(topic, {}))

    def create(self, topic: str, replicas: tuple[int, ...] = (1, 2, 3), *, partitions: int = 1,
               isr: tuple[int, ...] | None = None, configs: Mapping[str, str] | None = None) -> None:
        self.topic_ids[topic] = uuid.uuid4()
        self.configs[topic] = dict(configs or {})
        for p in range(partitions):
            key = (topic, p)
            self.assignments[key] = replicas
            self.states[key] = LeaderAndIsr(replicas[0], 0, isr or replicas, 1, 0)
            self.publish(key)

    def publish(self, key: tuple[str, int], only: tuple[int, ...] | None = None) -> None:
        """Every live replica (or ``only`` those) applies the partition's current view."""
        for broker_id in self.assignments[key]:
            broker = self.brokers.get(broker_id)
            if broker is not None and (only is None or broker_id in only):
                broker.replicas.apply(self.view(key))  # type: ignore[union-attr]

    def elect(self, key: tuple[str, int], leader: int, isr: tuple[int, ...] | None = None) -> LeaderAndIsr:
        old = self.states[key]
        new = LeaderAndIsr(leader, old.leader_epoch + 1, isr or old.isr, old.controller_epoch, old.zk_version + 1)
        self.states[key] = new
        self.publish(key)
        return new

    async def alter_isr(self, broker_id: int, state: LeaderAndIsr, topic: str, partition: int) -> LeaderAndIsr | None:
        key = (topic, partition)
        current = self.states[key]
        if state.zk_version != current.zk_version or state.leader != broker_id:
            return None  # a stale read: the writer waits for the next view
        written = replace(state, zk_version=current.zk_version + 1)
        self.states[key] = written
        asyncio.get_running_loop().call_soon(self.publish, key)  # as the state znode's watch would
        return written

    # ------------------------------------------------------------------ looking

    def log(self, broker_id: int, topic: str, partition: int = 0) -> Log:
        found = self.brokers[broker_id].topics.partition_log(topic, partition)
        assert isinstance(found, Log), found
        return found


def raw_log(log: Log) -> bytes:
    """Every byte of every segment in order: what replicas must agree on, batch for batch."""
    return b"".join(s.log_path.read_bytes() for s in log.segments)
