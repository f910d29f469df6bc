"""Issue 16's fault test, CI-sized: the leader of a random partition SIGKILLed at random moments
(after a seeded random number of acknowledged records) under an idempotent acks=all librdkafka
producer, three times, each broker restarted once its session is gone. Nothing acknowledged is
lost, duplicated or reordered, and the replicas' logs end up identical batch for batch.
scripts/cluster_faults.py holds the run (10 kills by hand); the seed is printed, and
PULLLOG_FAULTS_SEED replays one."""

from __future__ import annotations

import os
import random
from typing import Any

import cluster_faults  # scripts/, on sys.path through tests/conftest.py
from zk_brokers import Cluster


def test_acknowledged_records_survive_three_leader_kills_and_replicas_end_identical(
        own_cluster: Cluster, zk_client: Any) -> None:
    seed = int(os.environ.get("PULLLOG_FAULTS_SEED", random.randrange(2**32)))
    print(f"cluster_faults seed {seed} (PULLLOG_FAULTS_SEED={seed} replays it)")
    own_cluster.overrides = ("zookeeper.session.timeout.ms=2000",)
    own_cluster.start(3)
    cluster = cluster_faults.FaultCluster(own_cluster.brokers, zk_client, own_cluster.chroot)
    outcome = cluster_faults.run(cluster, partitions=3, kills=3, seed=seed, min_acks=200, max_acks=3000)
    assert len(outcome.killed) == 3
    assert outcome.problems == (), f"seed {seed}: {outcome.problems}"
