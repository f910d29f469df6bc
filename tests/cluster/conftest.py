"""Fixtures of the cluster tests: one private ZooKeeper per test session, and brokers that are
``pulllog serve --broker-id N --zookeeper ...`` processes on 127.0.0.N (scripts/zk_cluster.py
starts both). Each cluster lives under its own chroot, so clusters of different tests never
see each other's znodes. Every process is stopped by its PID.

Skips (with the reason) only when Java or Debian's zookeeper package is missing;
scripts/test.sh installs both, so CI runs these tests.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import zk_cluster  # scripts/, on sys.path through tests/conftest.py

if TYPE_CHECKING:
    from kazoo.client import KazooClient

_chroots = itertools.count(1)


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zk_cluster.ZooKeeper]:
    why = zk_cluster.missing_tools()
    if why:
        pytest.skip(why)
    zk = zk_cluster.ZooKeeper(tmp_path_factory.mktemp("zookeeper")).start()
    try:
        yield zk
    finally:
        zk.stop()


@pytest.fixture(scope="session")
def zk_client(zookeeper: zk_cluster.ZooKeeper) -> Iterator[KazooClient]:
    """A test's own ZooKeeper session, to read the znodes the brokers write."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zookeeper.connect)
    client.start(timeout=30)
    try:
        yield client
    finally:
        client.stop()
        client.close()


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


@pytest.fixture(scope="module")
def cluster(zookeeper: zk_cluster.ZooKeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three brokers, shared by a module's tests that only look (none stops a broker)."""
    cluster = Cluster(zookeeper, tmp_path_factory.mktemp("cluster")).start(3)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def own_cluster(zookeeper: zk_cluster.ZooKeeper, tmp_path: Path) -> Iterator[Cluster]:
    """A test's own brokers (it starts them, with what overrides it likes, and may kill them)."""
    cluster = Cluster(zookeeper, tmp_path)
    try:
        yield cluster
    finally:
        cluster.stop()
