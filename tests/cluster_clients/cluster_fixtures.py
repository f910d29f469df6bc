"""Fixtures of the clients-across-brokers tests, a plugin of tests/conftest.py
(``pytest_plugins``): a conftest.py here would be a second module named ``conftest`` beside
tests/cluster's, which its tests import by that name. Fixtures: a real 3-node Apache Kafka cluster (KRaft)
on 127.0.0.1-3 (scripts/kafka_cluster.py), started once per test session and stopped by PID.

``kafka_cluster`` is the session's cluster; ``cluster`` hands it to one test settled: every
node running (a node a previous test killed is started again first) and every partition's
in-sync replicas all its replicas, so each test starts from a whole cluster.

``PULLLOG_CLUSTER_CLIENTS=pulllog`` (or ``kafka,pulllog``) runs the same tests against
pulllog's own 3-broker cluster instead (or as well): tests/cluster_clients/pulllog_cluster.py,
a private ZooKeeper and ``pulllog serve --zookeeper`` brokers. The default is the Kafka
cluster alone until pulllog's cluster replicates (issue 16).

Skips (with the reason) only when Java or Maven is missing; scripts/test.sh installs both,
so CI runs these tests.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import kafka_cluster as kc  # scripts/, on sys.path through tests/conftest.py
import kafka_reference
import pytest
import zk_cluster
from cluster_clients.pulllog_cluster import PulllogCluster
from cluster_helpers import cluster_settled
from waits import wait_until

# Which clusters the tests run against: "kafka" (the default), "pulllog" (pulllog's own, once
# its cluster replicates: issue 16) or "kafka,pulllog".
CLUSTERS = [c.strip() for c in os.environ.get("PULLLOG_CLUSTER_CLIENTS", "kafka").split(",") if c.strip()]


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kc.KafkaCluster]:
    why = kafka_reference.missing_tools()
    if why:
        pytest.skip(why)
    cluster = kc.KafkaCluster(tmp_path_factory.mktemp("kafka-cluster")).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def pulllog_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulllogCluster]:
    why = zk_cluster.missing_tools()
    if why:
        pytest.skip(why)
    cluster = PulllogCluster(tmp_path_factory.mktemp("pulllog-cluster")).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=CLUSTERS)
async def cluster(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """The cluster of ``request.param`` (kafka or pulllog), settled."""
    chosen = request.getfixturevalue(f"{request.param}_cluster")
    for node_id, node in chosen.nodes.items():
        if not node.alive:
            await asyncio.to_thread(chosen.restart, node_id)
    await wait_until(lambda: cluster_settled(chosen), "every node is up and every partition fully in sync")
    yield chosen
