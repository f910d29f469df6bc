"""Every broker's partition views follow the state znodes: after a leader's SIGKILL (and its
restart) each live broker's Metadata names the same live leader for every partition, the
leader ZooKeeper's state names; none keeps the killed broker, nor answers without a leader.
A view made before a state change that reaches the broker after the newer one (the watches
re-read on threads of their own after a reconnect) does not take the broker back."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from kafka_wire import WireClient
from waits import block_until
from zk_brokers import Cluster

from pulllog.broker import Broker
from pulllog.cluster.state import LeaderAndIsr, PartitionView

TOPIC = "followed"
PARTITIONS = 6


def _leaders(broker: Any) -> dict[int, int] | None:
    """Partition -> leader in ``broker``'s Metadata (-1 for an error); None when unreachable."""
    host, port = broker.bootstrap_servers.rsplit(":", 1)
    try:
        with WireClient(int(port), host=host, timeout=5) as c:
            answer = c.call("metadata", 12, {"topics": [{"name": TOPIC, "topic_id": None}],
                                             "allow_auto_topic_creation": False,
                                             "include_cluster_authorized_operations": False,
                                             "include_topic_authorized_operations": False})
    except OSError:
        return None
    (topic,) = answer.topics
    return {p.partition_index: (p.leader_id if p.error_code == 0 else -1) for p in topic.partitions}


def _zk_leaders(cluster: Cluster, zk_client: Any) -> dict[int, int]:
    out = {}
    for p in range(PARTITIONS):
        raw, _stat = zk_client.get(cluster.path(f"/brokers/topics/{TOPIC}/partitions/{p}/state"))
        out[p] = json.loads(raw)["leader"]
    return out


def _agreed(cluster: Cluster, zk_client: Any, live: set[int]) -> dict[int, int] | None:
    """The leaders when every live broker's Metadata and ZooKeeper name the same live ones."""
    truth = _zk_leaders(cluster, zk_client)
    if not set(truth.values()) <= live:
        return None  # the controller has not moved them yet
    for broker_id in live:
        if _leaders(cluster.broker(broker_id)) != truth:
            return None
    return truth


def test_every_broker_names_the_same_live_leader_after_sigkills(own_cluster: Cluster, zk_client: Any) -> None:
    own_cluster.overrides = ("zookeeper.session.timeout.ms=2000",)
    own_cluster.start(3)
    bootstrap = ",".join(b.bootstrap_servers for b in own_cluster.brokers.values())
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)], operation_timeout=30)[TOPIC].result()
    live = {1, 2, 3}
    leaders = block_until(lambda: _agreed(own_cluster, zk_client, live), "every broker names the same leaders")
    for round_ in range(4):
        victim = leaders[round_ % PARTITIONS]
        own_cluster.broker(victim).kill()
        live.discard(victim)
        leaders = block_until(lambda: _agreed(own_cluster, zk_client, live),
                              f"the brokers {sorted(live)} name the same live leaders after broker {victim}'s SIGKILL")
        assert victim not in leaders.values()
        own_cluster.broker(victim).start()
        live.add(victim)
        leaders = block_until(lambda: _agreed(own_cluster, zk_client, live),
                              f"every broker names the same leaders once broker {victim} is back")


async def test_a_view_older_than_the_one_kept_does_not_take_the_broker_back(tmp_path: Path) -> None:
    topic_id = uuid.uuid4()
    old = PartitionView("t", 0, topic_id, (1, 2, 3), LeaderAndIsr(1, 0, (1, 2, 3), 1, zk_version=0))
    new = PartitionView("t", 0, topic_id, (1, 2, 3), LeaderAndIsr(2, 1, (2, 3), 2, zk_version=1))
    async with Broker(tmp_path, port=0) as broker:
        broker._apply_partition_views([new], [])
        # The topic's views, made (by its config's watch) before the state changed, arrive last.
        broker._apply_partition_views([PartitionView("t", 0, topic_id, (1, 2, 3), old.state, {"retention.ms": "1"})], [])
        kept = broker.partition_views[("t", 0)]
        assert kept.state == new.state and kept.configs == {"retention.ms": "1"}
        # The same topic created again (a new id): its views start over.
        again = PartitionView("t", 0, uuid.uuid4(), (3,), LeaderAndIsr(3, 0, (3,), 2, zk_version=0))
        broker._apply_partition_views([again], [])
        assert broker.partition_views[("t", 0)] == again


async def test_a_client_asks_each_broker_in_turn_and_ignores_an_older_leader_epoch(own_cluster: Cluster) -> None:
    """One broker whose view lags cannot trap a client: its metadata requests go to the
    least-loaded connection, each broker in turn when all are idle (as Kafka's clients'
    least-loaded node), and an answer with an older leader epoch does not replace a newer one."""
    from pulllog.client.cluster import Cluster as ClientCluster
    from pulllog.client.cluster import PartitionInfo, TopicInfo, _keep_newer_leaders

    own_cluster.start(3)
    client = ClientCluster(",".join(b.bootstrap_servers for b in own_cluster.brokers.values()))
    try:
        await client.refresh()
        conns = [await client.connection(n) for n in (1, 2, 3)]
        asked = {id(await client.least_loaded_connection()) for _ in range(4)}  # and the bootstrap one
        assert asked >= {id(c) for c in conns}
        await client.refresh()  # and the request itself goes through it
    finally:
        await client.close()

    topic_id = uuid.uuid4()
    known = TopicInfo("t", topic_id, {0: PartitionInfo("t", 0, 2, (1, 2, 3), (2, 3), (), 5)})
    stale = TopicInfo("t", topic_id, {0: PartitionInfo("t", 0, 1, (1, 2, 3), (1, 2, 3), (), 4)})
    _keep_newer_leaders(stale, known)
    assert stale.partitions[0] == known.partitions[0]
    recreated = TopicInfo("t", uuid.uuid4(), {0: PartitionInfo("t", 0, 1, (1,), (1,), (), 0)})
    _keep_newer_leaders(recreated, known)
    assert recreated.partitions[0].leader == 1
