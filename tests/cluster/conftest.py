"""Fixtures of the cluster tests: one private ZooKeeper per test session, and brokers that are
``pulllog serve --broker-id N --zookeeper ...`` processes on 127.0.0.N (scripts/zk_cluster.py
starts both). Each cluster lives under its own chroot, so clusters of different tests never
see each other's znodes. Every process is stopped by its PID.

Skips (with the reason) only when Java or Debian's zookeeper package is missing;
scripts/test.sh installs both, so CI runs these tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import zk_cluster  # scripts/, on sys.path through tests/conftest.py
from zk_brokers import Cluster

if TYPE_CHECKING:
    from kazoo.client import KazooClient


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
