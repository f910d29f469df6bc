"""Issue 16's fault tests, CI-sized, under an idempotent acks=all librdkafka producer writing
sequence-numbered records to an RF=3, min.insync.replicas=2 topic of three partitions:

* the leader of a random partition SIGKILLed at random moments (after a seeded random number of
  acknowledged records), three times, each broker restarted once its session is gone;
* ZooKeeper SIGKILLed and restarted;
* a rolling restart of the three brokers, each leading nothing and out of every ISR by the time
  its process exits (controlled shutdown);
* the leader cut off from the other brokers, the clients and ZooKeeper by blackholing proxies:
  another leader is elected without it, an acks=all Produce sent to it straight is not
  acknowledged, and it rejoins the ISR once the cut heals.

Each time nothing acknowledged is lost, duplicated or reordered (read back from the leaders),
and once every ISR is full the replicas' segment files hold the same batches.
scripts/cluster_faults.py holds the runs (10 kills by hand); the seed is printed, and
PULLLOG_FAULTS_SEED replays one."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cluster_faults  # scripts/, on sys.path through tests/conftest.py
import pytest
import zk_cluster
from zk_brokers import Cluster

SESSION_TIMEOUT = ("zookeeper.session.timeout.ms=2000",)


def _seed() -> int:
    seed = int(os.environ.get("PULLLOG_FAULTS_SEED", random.randrange(2**32)))
    print(f"cluster_faults seed {seed} (PULLLOG_FAULTS_SEED={seed} replays it)")
    return seed


def test_acknowledged_records_survive_three_leader_kills_and_replicas_end_identical(
        own_cluster: Cluster, zk_client: Any) -> None:
    seed = _seed()
    own_cluster.overrides = SESSION_TIMEOUT
    own_cluster.start(3)
    cluster = cluster_faults.FaultCluster(own_cluster.brokers, zk_client, own_cluster.chroot)
    outcome = cluster_faults.run(cluster, partitions=3, kills=3, seed=seed, min_acks=200, max_acks=3000)
    assert len(outcome.killed) == 3
    assert outcome.problems == (), f"seed {seed}: {outcome.problems}"


def test_acknowledged_records_survive_a_rolling_restart(own_cluster: Cluster, zk_client: Any) -> None:
    seed = _seed()
    own_cluster.overrides = SESSION_TIMEOUT
    own_cluster.start(3)
    cluster = cluster_faults.FaultCluster(own_cluster.brokers, zk_client, own_cluster.chroot)
    outcome = cluster_faults.run(cluster, partitions=3, kills=0, seed=seed, min_acks=200, max_acks=3000,
                                 fault="rolling-restart", handover=True)
    assert [broker for _, broker in outcome.killed] == [1, 2, 3]
    assert outcome.problems == (), f"seed {seed}: {outcome.problems}"


@pytest.fixture
def own_zookeeper(zookeeper: zk_cluster.ZooKeeper, tmp_path: Path) -> Iterator[zk_cluster.ZooKeeper]:
    """A ZooKeeper of the test's own (the session's is shared, so it is not the one restarted);
    asks for the session's first, so the test skips as the others do without Java."""
    own = zk_cluster.ZooKeeper(tmp_path / "zookeeper").start()
    try:
        yield own
    finally:
        own.stop()


def test_acknowledged_records_survive_a_zookeeper_restart(own_zookeeper: zk_cluster.ZooKeeper,
                                                           tmp_path: Path) -> None:
    from kazoo.client import KazooClient

    seed = _seed()
    client = KazooClient(hosts=own_zookeeper.connect)
    client.start(timeout=30)
    own_cluster = Cluster(own_zookeeper, tmp_path, SESSION_TIMEOUT)
    try:
        own_cluster.start(3)
        cluster = cluster_faults.FaultCluster(own_cluster.brokers, client, own_cluster.chroot)
        outcome = cluster_faults.run(cluster, partitions=3, kills=0, seed=seed, min_acks=200, max_acks=3000,
                                     fault="zookeeper-restart", zookeeper=own_zookeeper)
        assert outcome.problems == (), f"seed {seed}: {outcome.problems}"
    finally:
        own_cluster.stop()
        client.stop()
        client.close()


def test_a_leader_cut_off_from_the_others_drops_out_of_the_isr_acknowledges_nothing_and_rejoins(
        zookeeper: zk_cluster.ZooKeeper, zk_client: Any, tmp_path: Path) -> None:
    seed = _seed()
    outcome = cluster_faults.cut_off_leader(zookeeper, f"/cut-off-{seed}", tmp_path, zk_client, seed,
                                            min_acks=200, max_acks=3000)
    assert outcome.problems == (), f"seed {seed}: {outcome.problems}"
