"""Fixtures of the clients-across-brokers tests: a real 3-node Apache Kafka cluster (KRaft)
on 127.0.0.1-3 (scripts/kafka_cluster.py), started once per test session and stopped by PID.

``kafka_cluster`` is the session's cluster; ``cluster`` hands it to one test settled: every
node running (a node a previous test killed is started again first) and every partition's
in-sync replicas all its replicas, so each test starts from a whole cluster.

Skips (with the reason) only when Java or Maven is missing; scripts/test.sh installs both,
so CI runs these tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import kafka_cluster as kc  # scripts/, on sys.path through tests/conftest.py
import kafka_reference
import pytest
from cluster_helpers import cluster_settled
from waits import wait_until


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


@pytest.fixture
async def cluster(kafka_cluster: kc.KafkaCluster) -> AsyncIterator[kc.KafkaCluster]:
    for node_id, node in kafka_cluster.nodes.items():
        if not node.alive:
            await asyncio.to_thread(kafka_cluster.restart, node_id)
    await wait_until(lambda: cluster_settled(kafka_cluster), "every node is up and every partition fully in sync")
    yield kafka_cluster
