"""What a new leader's first acks=all write waits for after a failover, beyond the election
(issue 16's failover target, scripts/bench_replication.py): nothing parked, nothing imported.

- A follower's fetcher to a broker is usually parked there (a Fetch waiting up to
  replica.fetch.wait.max.ms for partitions without writes); a partition that starts following
  that broker must not wait for the parked Fetch to come back before its own first Fetch.
  With replica.fetch.wait.max.ms at 20 s, an acks=all write to a new partition is
  acknowledged within its 10 s request timeout only if it does not.
- A follower whose Fetch the new leader refuses (it has not taken up the view yet) asks
  again soon, not after replica.fetch.backoff.ms.
- A follower answers an acks=all write NOT_LEADER_OR_FOLLOWER at once, so clients look again.
- A replica of a coordinator partition builds its coordinator while it follows, so becoming
  the leader in a failover does not import the coordinator on the event loop then.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import zk_cluster
from kafka_wire import WireClient
from kio.schema.errors import ErrorCode
from waits import block_until
from zk_brokers import Cluster

from pulllog.net.apis import ApiKey
from pulllog.records import build_batch
from pulllog.testing import BrokerThread

PARKED_FOR_MS = 20_000  # replica.fetch.wait.max.ms: a parked Fetch outlasts the write's timeout
WRITE_TIMEOUT_MS = 10_000


def _create(client: WireClient, topic: str, replicas: list[int]) -> None:
    answer = client.call("create_topics", 7, {
        "topics": [{"name": topic, "num_partitions": -1, "replication_factor": -1,
                    "assignments": [{"partition_index": 0, "broker_ids": replicas}],
                    "configs": [{"name": "min.insync.replicas", "value": str(len(replicas))}]}],
        "timeout_ms": 30_000, "validate_only": False})
    assert answer.topics[0].error_code == 0, answer.topics[0].error_message


def _write_acks_all(client: WireClient, topic: str) -> int:
    answer = client.call("produce", 9, {"transactional_id": None, "acks": -1, "timeout": WRITE_TIMEOUT_MS,
                                        "topic_data": [{"name": topic, "partition_data": [
                                            {"index": 0, "records": build_batch([(None, b"x")])}]}]})
    return int(answer.responses[0].partition_responses[0].error_code)


def test_a_partition_that_starts_following_a_broker_does_not_wait_for_a_parked_fetch(
        own_cluster: Cluster) -> None:
    own_cluster.overrides = (f"replica.fetch.wait.max.ms={PARKED_FOR_MS}",)
    own_cluster.start(2)
    leader = own_cluster.broker(1)
    host, port = leader.bootstrap_servers.rsplit(":", 1)
    with WireClient(int(port), host=host, timeout=WRITE_TIMEOUT_MS / 1000 + 20) as client:
        _create(client, "quiet", [1, 2])
        # Acknowledged once broker 2 fetched it; broker 2's next Fetch then parks at broker 1
        # (nothing more is written to "quiet").
        block_until(lambda: _write_acks_all(client, "quiet") == 0, "broker 2 follows quiet")
        _create(client, "fresh", [1, 2])
        # Broker 2 adds fresh to its fetcher for broker 1, whose Fetch is parked for 20 s.
        assert _write_acks_all(client, "fresh") == 0  # not REQUEST_TIMED_OUT (7)


def test_a_replica_of_a_coordinator_partition_builds_its_coordinator_while_it_follows(
        zookeeper: zk_cluster.ZooKeeper, tmp_path: Path) -> None:
    chroot = f"{zookeeper.connect}/takeup-{uuid.uuid4().hex[:8]}"

    def properties(broker_id: int) -> dict[str, str]:
        return {"zookeeper.connect": chroot, "broker.id": str(broker_id), "offsets.topic.replication.factor": "2",
                "offsets.topic.num.partitions": "1"}

    with BrokerThread(tmp_path / "1", properties=properties(1)) as one, \
            BrokerThread(tmp_path / "2", properties=properties(2)) as two:
        brokers = {1: one, 2: two}

        def offsets_state(broker: BrokerThread) -> Any:
            view = broker.call(lambda: broker.broker.partition_views.get(("__consumer_offsets", 0)))
            return view.state if view is not None else None

        block_until(lambda: all(b.call(lambda b=b: len(b.broker.cluster_view.brokers)) == 2
                                for b in brokers.values()), "both brokers see each other")
        with WireClient(one.port) as client:  # FindCoordinator creates __consumer_offsets (RF=2)
            block_until(lambda: client.call("find_coordinator", 4, {
                "key_type": 0, "coordinator_keys": ["g"]}).coordinators[0].error_code == 0,
                "the group's coordinator is elected")
        state = block_until(lambda: (s := offsets_state(one)) is not None and s.leader > 0 and s,
                            "__consumer_offsets-0 has a leader")
        follower = brokers[3 - state.leader]
        block_until(lambda: (s := offsets_state(follower)) is not None and s.leader == state.leader,
                    "the follower has the partition's view")
        assert follower.call(lambda: follower.broker._groups is not None)


def test_an_acks_all_write_to_a_follower_is_refused_not_held(cluster: Cluster) -> None:
    # librdkafka refreshes its metadata at once on NOT_LEADER_OR_FOLLOWER: a follower must
    # say so, not hold the write until its timeout (REQUEST_TIMED_OUT) as a leader would.
    leader_host, leader_port = cluster.broker(1).bootstrap_servers.rsplit(":", 1)
    with WireClient(int(leader_port), host=leader_host, timeout=30) as client:
        _create(client, "followed", [1, 2])
        block_until(lambda: _write_acks_all(client, "followed") == 0, "broker 2 follows the partition")
    host, port = cluster.broker(2).bootstrap_servers.rsplit(":", 1)
    with WireClient(int(port), host=host, timeout=WRITE_TIMEOUT_MS / 1000 + 20) as client:
        assert _write_acks_all(client, "followed") == 6  # NOT_LEADER_OR_FOLLOWER


def test_a_follower_asks_again_soon_when_its_leader_has_not_taken_up_the_view_yet(
        zookeeper: zk_cluster.ZooKeeper, tmp_path: Path) -> None:
    # In a failover the follower's view often arrives before the new leader's, and its first
    # Fetch is answered NOT_LEADER_OR_FOLLOWER. Here the leader answers so once, by a fault;
    # at replica.fetch.backoff.ms 20 s the acks=all write is acknowledged within its 10 s
    # timeout only if the follower asks again before the backoff is over.
    chroot = f"{zookeeper.connect}/behind-{uuid.uuid4().hex[:8]}"

    def properties(broker_id: int) -> dict[str, str]:
        return {"zookeeper.connect": chroot, "broker.id": str(broker_id),
                "replica.fetch.backoff.ms": str(PARKED_FOR_MS)}

    with BrokerThread(tmp_path / "1", properties=properties(1)) as one, \
            BrokerThread(tmp_path / "2", properties=properties(2)) as two:
        block_until(lambda: all(b.call(lambda b=b: len(b.broker.cluster_view.brokers)) == 2
                                for b in (one, two)), "both brokers see each other")
        refused = one.faults.fail(ApiKey.FETCH, ErrorCode.not_leader_or_follower, topic="fresh")
        with WireClient(one.port, timeout=WRITE_TIMEOUT_MS / 1000 + 20) as client:
            _create(client, "fresh", [1, 2])
            assert _write_acks_all(client, "fresh") == 0  # not REQUEST_TIMED_OUT (7)
        assert refused.fired == 1
