"""Topics in a cluster: assignments and partition states in ZooKeeper (Kafka's formats), the
controller's elections, and every broker's Metadata, over real ZooKeeper and real brokers."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from waits import block_until
from zk_brokers import Cluster

from pulllog.client.connection import KafkaConnection
from pulllog.records import build_batch

SHORT_SESSION = ("zookeeper.session.timeout.ms=2000",)  # a SIGKILLed broker is gone in ~2 s


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _create(bootstrap: str, topic: NewTopic) -> None:
    admin = _admin(bootstrap)  # held until the answer: a client destroyed first fails its futures
    admin.create_topics([topic], operation_timeout=30, request_timeout=60)[topic.topic].result()


def _state(zk_client: Any, cluster: Cluster, topic: str, partition: int) -> tuple[dict[str, Any], int]:
    data, stat = zk_client.get(cluster.path(f"/brokers/topics/{topic}/partitions/{partition}/state"))
    return json.loads(data), stat.version


def _leaders(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]] | None:
    """partition -> (leader, replicas, ISR) from a broker's Metadata (librdkafka), or None."""
    meta = _admin(bootstrap).list_topics(topic, timeout=30)
    found = meta.topics.get(topic)
    if found is None or found.error is not None:
        return None
    return {p: (m.leader, list(m.replicas), list(m.isrs)) for p, m in found.partitions.items()}


def _live(cluster: Cluster, *, but: int) -> list[str]:
    return [b.bootstrap_servers for i, b in cluster.brokers.items() if i != but]


def test_a_topic_with_three_replicas_is_assigned_and_led_in_kafkas_format_and_every_broker_agrees(
        cluster: Cluster, zk_client: Any) -> None:
    _create(cluster.broker(2).bootstrap_servers, NewTopic("orders", 3, 3, config={"retention.ms": "60000"}))
    assignment = json.loads(zk_client.get(cluster.path("/brokers/topics/orders"))[0])
    assert set(assignment) == {"version", "partitions", "adding_replicas", "removing_replicas", "topic_id"}
    assert assignment["version"] == 3 and len(assignment["topic_id"]) == 22
    assert assignment["adding_replicas"] == {} and assignment["removing_replicas"] == {}
    replicas = {int(p): r for p, r in assignment["partitions"].items()}
    assert sorted(replicas) == [0, 1, 2] and all(sorted(r) == [1, 2, 3] for r in replicas.values())
    assert sorted(r[0] for r in replicas.values()) == [1, 2, 3]  # leaders spread over the brokers
    assert json.loads(zk_client.get(cluster.path("/config/topics/orders"))[0]) == {
        "version": 1, "config": {"retention.ms": "60000"}}
    expected = {}
    for partition, assigned in replicas.items():
        state, _version = _state(zk_client, cluster, "orders", partition)
        assert state == {"controller_epoch": 1, "leader": assigned[0], "version": 1, "leader_epoch": 0,
                         "isr": assigned}
        expected[partition] = (assigned[0], assigned, assigned)
    for broker in cluster.brokers.values():
        assert block_until(lambda b=broker: _leaders(b.bootstrap_servers, "orders") == expected,
                           f"broker {broker.broker_id}'s Metadata shows the leaders", interval_s=0.1)
    # one cluster id for all (the first broker's, in /cluster/id)
    admins = [_admin(b.bootstrap_servers) for b in cluster.brokers.values()]
    ids = {admin.describe_cluster(request_timeout=30).result().cluster_id for admin in admins}
    assert ids == {json.loads(zk_client.get(cluster.path("/cluster/id"))[0])["id"]}


def test_create_topics_with_more_replicas_than_live_brokers_is_invalid_replication_factor(cluster: Cluster,
                                                                                          zk_client: Any) -> None:
    with pytest.raises(KafkaException) as raised:
        _create(cluster.broker(1).bootstrap_servers, NewTopic("too-many", 1, 4))
    error = raised.value.args[0]
    assert error.name() == "INVALID_REPLICATION_FACTOR"
    assert error.str() == "Replication factor: 4 larger than available brokers: 3."
    assert zk_client.exists(cluster.path("/brokers/topics/too-many")) is None


def test_an_explicit_replica_assignment_is_kept(cluster: Cluster, zk_client: Any) -> None:
    _create(cluster.broker(3).bootstrap_servers, NewTopic("placed", 2, replica_assignment=[[3, 1], [2, 3]]))
    assert json.loads(zk_client.get(cluster.path("/brokers/topics/placed"))[0])["partitions"] == {
        "0": [3, 1], "1": [2, 3]}
    assert _state(zk_client, cluster, "placed", 1)[0]["leader"] == 2
    with pytest.raises(KafkaException) as raised:
        _create(cluster.broker(3).bootstrap_servers, NewTopic("nowhere", 1, replica_assignment=[[7]]))
    assert raised.value.args[0].name() == "INVALID_REPLICA_ASSIGNMENT"


async def _produce_and_fetch_codes(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    """Produce's and Fetch's error codes for one partition, asked of one broker directly."""
    host, port = bootstrap.rsplit(":", 1)
    conn = await KafkaConnection.connect(host, int(port))
    try:
        produced = await conn.request("produce", 9, {
            "transactional_id": None, "acks": 1, "timeout": 30_000, "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": build_batch([(None, b"x")])}]}]})
        fetched = await conn.request("fetch", 12, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "partitions": [{
                "partition": partition, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
    finally:
        await conn.close()
    return (int(produced.responses[0].partition_responses[0].error_code),
            int(fetched.responses[0].partitions[0].error_code))


def test_a_broker_holds_only_the_partitions_it_is_a_replica_of(cluster: Cluster) -> None:
    _create(cluster.broker(1).bootstrap_servers, NewTopic("sparse", 3, replica_assignment=[[1], [1], [2]]))
    expected = {0: (1, [1], [1]), 1: (1, [1], [1]), 2: (2, [2], [2])}
    for broker in cluster.brokers.values():
        block_until(lambda b=broker: _leaders(b.bootstrap_servers, "sparse") == expected,
                    f"broker {broker.broker_id}'s Metadata shows the leaders", interval_s=0.1)
    block_until(lambda: (cluster.broker(2).data_dir / "sparse-2").is_dir(), "broker 2 opens its replica")
    assert sorted(d.name for d in cluster.broker(1).data_dir.glob("sparse-*")) == ["sparse-0", "sparse-1"]
    assert sorted(d.name for d in cluster.broker(2).data_dir.glob("sparse-*")) == ["sparse-2"]
    assert not list(cluster.broker(3).data_dir.glob("sparse-*"))
    # A partition another broker hosts, asked of a broker with some of the topic or none of it.
    not_leader = (6, 6)  # NOT_LEADER_OR_FOLLOWER, so clients refresh their metadata and follow
    assert asyncio.run(_produce_and_fetch_codes(cluster.broker(2).bootstrap_servers, "sparse", 0)) == not_leader
    assert asyncio.run(_produce_and_fetch_codes(cluster.broker(3).bootstrap_servers, "sparse", 2)) == not_leader
    assert asyncio.run(_produce_and_fetch_codes(cluster.broker(2).bootstrap_servers, "sparse", 2)) == (0, 0)


def test_a_topic_is_deleted_cluster_wide(cluster: Cluster, zk_client: Any) -> None:
    _create(cluster.broker(1).bootstrap_servers, NewTopic("doomed", 2, 2))
    for broker in cluster.brokers.values():
        block_until(lambda b=broker: _leaders(b.bootstrap_servers, "doomed"), "every broker sees the topic")
    assert sum(len(list(b.data_dir.glob("doomed-*"))) for b in cluster.brokers.values()) >= 4  # the replicas' logs
    admin = _admin(cluster.broker(3).bootstrap_servers)
    admin.delete_topics(["doomed"], operation_timeout=30)["doomed"].result()
    assert zk_client.exists(cluster.path("/brokers/topics/doomed")) is None  # gone before the answer
    block_until(lambda: zk_client.exists(cluster.path("/config/topics/doomed")) is None
                and zk_client.get_children(cluster.path("/admin/delete_topics")) == [],
                "the controller removes the topic's config, then the delete request")
    for broker in cluster.brokers.values():
        block_until(lambda b=broker: "doomed" not in _admin(b.bootstrap_servers).list_topics(timeout=30).topics,
                    f"broker {broker.broker_id}'s Metadata no longer lists the topic", interval_s=0.1)
        block_until(lambda b=broker: not list(b.data_dir.glob("doomed-*")), f"broker {broker.broker_id} drops its logs")


def test_when_a_leader_is_killed_the_controller_elects_another_from_the_isr_with_the_next_epoch(
        own_cluster: Cluster, zk_client: Any) -> None:
    own_cluster.overrides = SHORT_SESSION
    own_cluster.start(3)
    _create(own_cluster.broker(1).bootstrap_servers, NewTopic("failover", 1, replica_assignment=[[3, 2, 1]]))
    before, _ = _state(zk_client, own_cluster, "failover", 0)
    assert before["leader"] == 3 and before["leader_epoch"] == 0
    own_cluster.broker(3).kill()
    after = block_until(lambda: (s := _state(zk_client, own_cluster, "failover", 0)[0])["leader"] != 3 and s,
                        "another leader is elected")
    assert after == {"controller_epoch": 1, "leader": 2, "version": 1, "leader_epoch": 1, "isr": [2, 1]}
    for bootstrap in _live(own_cluster, but=3):
        block_until(lambda b=bootstrap: _leaders(b, "failover") == {0: (2, [3, 2, 1], [2, 1])},
                    "the survivors' Metadata shows the new leader", interval_s=0.1)


def test_with_no_live_isr_replica_the_partition_has_no_leader_unless_unclean_election_is_enabled(
        own_cluster: Cluster, zk_client: Any) -> None:
    own_cluster.overrides = SHORT_SESSION
    own_cluster.start(3)
    bootstrap = own_cluster.broker(1).bootstrap_servers
    _create(bootstrap, NewTopic("clean", 1, replica_assignment=[[3, 2]]))
    _create(bootstrap, NewTopic("unclean", 1, replica_assignment=[[3, 2]],
                                config={"unclean.leader.election.enable": "true"}))
    for topic in ("clean", "unclean"):
        # The leader shrinks the ISR to itself (its follower lagged): its own conditional write.
        state, version = _state(zk_client, own_cluster, topic, 0)
        zk_client.set(own_cluster.path(f"/brokers/topics/{topic}/partitions/0/state"),
                      json.dumps({**state, "isr": [3]}).encode(), version=version)
    own_cluster.broker(3).kill()
    unclean = block_until(lambda: (s := _state(zk_client, own_cluster, "unclean", 0)[0])["leader"] != 3 and s,
                          "the unclean topic elects its live out-of-sync replica")
    assert unclean == {"controller_epoch": 1, "leader": 2, "version": 1, "leader_epoch": 1, "isr": [2]}
    clean = block_until(lambda: (s := _state(zk_client, own_cluster, "clean", 0)[0])["leader"] != 3 and s,
                        "the clean topic loses its leader")
    assert clean == {"controller_epoch": 1, "leader": -1, "version": 1, "leader_epoch": 1, "isr": [3]}
    admin = _admin(bootstrap)
    meta = block_until(lambda: (m := admin.list_topics("clean", timeout=30).topics["clean"].partitions[0]).error and m,
                       "Metadata reports the partition without a leader", interval_s=0.1)
    assert meta.leader == -1 and meta.error.name() == "LEADER_NOT_AVAILABLE"
    # The last in-sync replica returns: it leads again (clean), with the next epoch.
    own_cluster.broker(3).start()
    back = block_until(lambda: (s := _state(zk_client, own_cluster, "clean", 0)[0])["leader"] == 3 and s,
                       "the returning in-sync replica leads again")
    assert back["leader_epoch"] == 2 and back["isr"] == [3]


def test_a_new_controller_reads_every_state_and_finishes_an_election_its_predecessor_left(
        own_cluster: Cluster, zk_client: Any) -> None:
    own_cluster.overrides = SHORT_SESSION
    own_cluster.start(3)
    _create(own_cluster.broker(2).bootstrap_servers, NewTopic("left-over", 1, replica_assignment=[[3, 2]]))
    # What a controller that died mid-way leaves: a partition still led by a broker that is gone
    # (broker 9's death was never handled). Nothing else triggers the live controller.
    state, version = _state(zk_client, own_cluster, "left-over", 0)
    zk_client.set(own_cluster.path("/brokers/topics/left-over/partitions/0/state"),
                  json.dumps({**state, "leader": 9, "isr": [9, 2]}).encode(), version=version)
    own_cluster.broker(1).kill()  # the controller
    after = block_until(lambda: (s := _state(zk_client, own_cluster, "left-over", 0)[0])["leader"] != 9 and s,
                        "the new controller elects a live leader")
    new_controller = json.loads(zk_client.get(own_cluster.path("/controller"))[0])["brokerid"]
    assert new_controller in (2, 3)
    assert after == {"controller_epoch": 2, "leader": 2, "version": 1, "leader_epoch": 1, "isr": [2]}


def test_preferred_leader_election_moves_leadership_back_to_the_first_replica(own_cluster: Cluster,
                                                                               zk_client: Any) -> None:
    from confluent_kafka import ElectionType, TopicPartition

    own_cluster.start(2)
    bootstrap = own_cluster.broker(2).bootstrap_servers
    _create(bootstrap, NewTopic("preferred", 1, replica_assignment=[[1, 2]]))
    # After a failover broker 2 leads, and broker 1 is back in the ISR (the leader's doing).
    state, version = _state(zk_client, own_cluster, "preferred", 0)
    zk_client.set(own_cluster.path("/brokers/topics/preferred/partitions/0/state"),
                  json.dumps({**state, "leader": 2, "leader_epoch": 1, "isr": [2, 1]}).encode(), version=version)
    block_until(lambda: _leaders(bootstrap, "preferred") == {0: (2, [1, 2], [2, 1])}, "broker 2 leads")
    admin = _admin(bootstrap)
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("preferred", 0)]).result()
    assert result == {TopicPartition("preferred", 0): None}
    state, _ = _state(zk_client, own_cluster, "preferred", 0)
    assert (state["leader"], state["leader_epoch"], state["isr"]) == (1, 2, [2, 1])
    again = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("preferred", 0)]).result()
    assert again[TopicPartition("preferred", 0)].name() == "ELECTION_NOT_NEEDED"


def test_new_partitions_are_assigned_over_the_brokers_and_led(cluster: Cluster, zk_client: Any) -> None:
    from confluent_kafka.admin import NewPartitions

    bootstrap = cluster.broker(1).bootstrap_servers
    _create(bootstrap, NewTopic("growing", 1, 2))
    admin = _admin(bootstrap)
    admin.create_partitions([NewPartitions("growing", 4)], operation_timeout=30)["growing"].result()
    partitions = json.loads(zk_client.get(cluster.path("/brokers/topics/growing"))[0])["partitions"]
    assert sorted(partitions, key=int) == ["0", "1", "2", "3"]
    assert all(len(set(r)) == 2 and set(r) <= {1, 2, 3} for r in partitions.values())
    for partition in range(4):
        assert _state(zk_client, cluster, "growing", partition)[0]["leader"] == partitions[str(partition)][0]
    with pytest.raises(KafkaException) as raised:
        admin.create_partitions([NewPartitions("growing", 2)], operation_timeout=30)["growing"].result()
    assert raised.value.args[0].name() == "INVALID_PARTITIONS"


def test_metadata_auto_creates_a_topic_with_the_default_replication_factor(cluster: Cluster, zk_client: Any) -> None:
    from confluent_kafka import Producer

    # librdkafka's producer asks Metadata to create the topic it produces to (auto.create.topics.enable)
    producer = Producer({"bootstrap.servers": cluster.broker(2).bootstrap_servers})
    producer.list_topics("auto-made", timeout=30)
    block_until(lambda: zk_client.exists(cluster.path("/brokers/topics/auto-made")), "the topic is in ZooKeeper")
    assignment = json.loads(zk_client.get(cluster.path("/brokers/topics/auto-made"))[0])
    assert len(assignment["partitions"]) == 1 and len(assignment["partitions"]["0"]) == 1  # num.partitions, RF 1
    block_until(lambda: _leaders(cluster.broker(3).bootstrap_servers, "auto-made"), "another broker lists it")


def test_auto_leader_rebalance_moves_leadership_back_to_the_preferred_replica(own_cluster: Cluster,
                                                                             zk_client: Any) -> None:
    own_cluster.overrides = ("leader.imbalance.check.interval.seconds=1",)
    own_cluster.start(2)
    _create(own_cluster.broker(1).bootstrap_servers, NewTopic("rebalanced", 1, replica_assignment=[[1, 2]]))
    # After a failover broker 2 leads, and broker 1 is back in the ISR (the leader's doing).
    state, version = _state(zk_client, own_cluster, "rebalanced", 0)
    zk_client.set(own_cluster.path("/brokers/topics/rebalanced/partitions/0/state"),
                  json.dumps({**state, "leader": 2, "leader_epoch": 1, "isr": [2, 1]}).encode(), version=version)
    back = block_until(lambda: (s := _state(zk_client, own_cluster, "rebalanced", 0)[0])["leader"] == 1 and s,
                       "the periodic imbalance check makes broker 1 lead again")
    assert (back["leader_epoch"], back["isr"]) == (2, [2, 1])


def test_a_topics_config_is_altered_cluster_wide_through_zookeeper(cluster: Cluster, zk_client: Any) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    _create(cluster.broker(1).bootstrap_servers, NewTopic("tuned", 1, replica_assignment=[[1, 2]]))
    admin = _admin(cluster.broker(3).bootstrap_servers)  # not a replica of the topic
    resource = ConfigResource(ResourceType.TOPIC, "tuned", incremental_configs=[
        ConfigEntry("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result()
    assert json.loads(zk_client.get(cluster.path("/config/topics/tuned"))[0]) == {
        "version": 1, "config": {"retention.ms": "123456"}}

    def retention(bootstrap: str) -> str:
        client = _admin(bootstrap)
        described = client.describe_configs([ConfigResource(ResourceType.TOPIC, "tuned")])
        return next(iter(described.values())).result()["retention.ms"].value

    for broker in cluster.brokers.values():  # replicas and the broker that holds none
        block_until(lambda b=broker: retention(b.bootstrap_servers) == "123456",
                    f"broker {broker.broker_id} describes the new config", interval_s=0.1)
    for broker_id in (1, 2):  # the replicas' own copies of the topic took it too (their topic files)
        data_dir = cluster.broker(broker_id).data_dir
        block_until(lambda d=data_dir: any("123456" in f.read_text() for f in d.rglob("tuned.json")),
                    f"broker {broker_id}'s copy of the topic has the new config")


def test_deleting_a_topic_waits_for_its_replicas_to_be_live_and_the_returning_one_drops_its_logs(
        own_cluster: Cluster, zk_client: Any) -> None:
    own_cluster.overrides = SHORT_SESSION
    own_cluster.start(3)
    bootstrap = own_cluster.broker(1).bootstrap_servers
    _create(bootstrap, NewTopic("late", 1, replica_assignment=[[2, 3]]))
    block_until(lambda: list(own_cluster.broker(3).data_dir.glob("late-*")), "broker 3 holds a replica")
    own_cluster.broker(3).kill()
    block_until(lambda: sorted(zk_client.get_children(own_cluster.path("/brokers/ids"))) == ["1", "2"],
                "broker 3's session is over")
    admin = _admin(bootstrap)
    with pytest.raises(KafkaException) as raised:
        admin.delete_topics(["late"], operation_timeout=2, request_timeout=30)["late"].result()
    assert raised.value.args[0].name() == "REQUEST_TIMED_OUT"  # Kafka's answer while a replica is down
    assert zk_client.exists(own_cluster.path("/brokers/topics/late")) is not None  # marked for deletion
    assert zk_client.get_children(own_cluster.path("/admin/delete_topics")) == ["late"]
    own_cluster.broker(3).start()
    block_until(lambda: zk_client.exists(own_cluster.path("/brokers/topics/late")) is None
                and zk_client.get_children(own_cluster.path("/admin/delete_topics")) == [],
                "the controller finishes the deletion (the topic, then the request) once broker 3 is back")
    for broker in own_cluster.brokers.values():
        block_until(lambda b=broker: not list(b.data_dir.glob("late-*")), f"broker {broker.broker_id} drops its logs")
