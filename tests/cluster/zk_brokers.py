"""A cluster of ``pulllog serve --broker-id N --zookeeper ...`` processes under one chroot of a
test session's ZooKeeper (tests/cluster/conftest.py's fixtures build them). Its own module, not
the conftest: test modules import it by name, and a ``conftest`` name is shared by every test
directory that has one."""

from __future__ import annotations

import itertools
from pathlib import Path

import zk_cluster  # scripts/, on sys.path through tests/conftest.py

__all__ = ["Cluster"]

_chroots = itertools.count(1)


class Cluster:
    """Brokers 1..n under one chroot of the session's ZooKeeper."""

    def __init__(self, zookeeper: zk_cluster.ZooKeeper, base_dir: Path, overrides: tuple[str, ...] = ()) -> None:
        self.chroot = f"/cluster-{next(_chroots)}"
        self.connect = zookeeper.connect + self.chroot
        self.base_dir = base_dir
        self.overrides = overrides
        self.brokers: dict[int, zk_cluster.BrokerProcess] = {}

    def start(self, count: int) -> Cluster:
        for broker in zk_cluster.start_brokers(self.connect, self.base_dir, count, self.overrides):
            self.brokers[broker.broker_id] = broker
        return self

    def broker(self, broker_id: int) -> zk_cluster.BrokerProcess:
        return self.brokers[broker_id]

    def path(self, znode: str) -> str:
        return self.chroot + znode

    def stop(self) -> None:
        for broker in self.brokers.values():
            broker.stop()
