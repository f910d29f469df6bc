"""The znode formats of Kafka's ZooKeeper mode, and zookeeper.connect, without a ZooKeeper."""

from __future__ import annotations

import json

import pytest

from pulllog.broker.config import BrokerConfig, ConfigError
from pulllog.cluster.znodes import (
    BrokerRegistration,
    ControllerRegistration,
    ZnodeFormatError,
    decode_epoch,
    encode_epoch,
    parse_zookeeper_connect,
)


def test_a_broker_registration_is_kafkas_version_5_json() -> None:
    raw = BrokerRegistration(2, "127.0.0.2", 9092, timestamp_ms=1795631376871).encode()
    assert json.loads(raw) == {
        "features": {}, "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
        "endpoints": ["PLAINTEXT://127.0.0.2:9092"], "jmx_port": -1, "port": 9092, "host": "127.0.0.2",
        "version": 5, "timestamp": "1795631376871"}
    assert BrokerRegistration.decode(2, raw) == BrokerRegistration(2, "127.0.0.2", 9092, None, 1795631376871)


def test_a_kafka_brokers_registration_is_read_from_its_plaintext_endpoint() -> None:
    # A Kafka broker whose first listener is not PLAINTEXT writes host null and port -1.
    raw = json.dumps({"listener_security_protocol_map": {"SSL": "SSL", "PLAINTEXT": "PLAINTEXT"},
                      "endpoints": ["SSL://kafka1:9093", "PLAINTEXT://kafka1:9092"], "jmx_port": -1,
                      "host": None, "port": -1, "rack": "r1", "timestamp": "1", "version": 4}).encode()
    assert BrokerRegistration.decode(7, raw) == BrokerRegistration(7, "kafka1", 9092, "r1", 1)
    with pytest.raises(ZnodeFormatError, match="no PLAINTEXT endpoint"):
        BrokerRegistration.decode(7, b'{"endpoints": ["SSL://kafka1:9093"], "host": null, "port": -1}')
    with pytest.raises(ZnodeFormatError, match="not JSON"):
        BrokerRegistration.decode(7, b"\xff")


def test_the_controller_and_its_epoch() -> None:
    raw = ControllerRegistration(3, timestamp_ms=42).encode()
    assert json.loads(raw) == {"version": 1, "brokerid": 3, "timestamp": "42"}
    assert ControllerRegistration.decode(raw) == ControllerRegistration(3, 42)
    assert encode_epoch(12) == b"12" and decode_epoch(b"12") == 12
    with pytest.raises(ZnodeFormatError):
        decode_epoch(b"twelve")
    with pytest.raises(ZnodeFormatError):
        ControllerRegistration.decode(b'{"version": 1}')


@pytest.mark.parametrize("connect, hosts, chroot", [
    ("127.0.0.1:2181", "127.0.0.1:2181", ""),
    ("zk1:2181,zk2:2181/kafka/prod/", "zk1:2181,zk2:2181", "/kafka/prod"),
    ("zk1:2181/", "zk1:2181", ""),
])
def test_zookeeper_connect_splits_into_hosts_and_a_chroot(connect: str, hosts: str, chroot: str) -> None:
    assert parse_zookeeper_connect(connect) == (hosts, chroot)
    assert BrokerConfig.load({"zookeeper.connect": connect}).zookeeper_connect == connect


@pytest.mark.parametrize("connect", ["", "zk1", "/chroot", "zk1:2181,zk2", "zk1:port"])
def test_a_bad_zookeeper_connect_is_refused_naming_the_setting(connect: str) -> None:
    with pytest.raises(ConfigError, match=r"^zookeeper.connect=.*expected HOST:PORT\[,HOST:PORT...\]\[/chroot\]"):
        BrokerConfig.load({"zookeeper.connect": connect})


def test_a_single_broker_has_no_zookeeper_and_the_timeouts_take_kafkas_defaults() -> None:
    config = BrokerConfig.load({})
    assert config.zookeeper_connect is None and config.ignored == ()
    assert config.zookeeper_session_timeout_ms == 18_000
    assert config.describe()["zookeeper.connection.timeout.ms"] == "18000"
    assert BrokerConfig.load({"zookeeper.session.timeout.ms": "6000"}).describe()[
        "zookeeper.connection.timeout.ms"] == "6000"


# ---------------------------------------------------------------------- topics (Kafka's ZkData)

def test_a_topic_assignment_is_kafkas_version_3_json_with_the_topic_id() -> None:
    import uuid

    from pulllog.cluster.znodes import TopicAssignment, encode_topic_id

    topic_id = uuid.UUID("c94dd56d-75a4-47d6-bc0b-bb04af567894")
    raw = TopicAssignment("orders", topic_id, {1: (2, 3, 1), 0: (1, 2, 3)}).encode()
    assert json.loads(raw) == {"version": 3, "partitions": {"0": [1, 2, 3], "1": [2, 3, 1]},
                               "adding_replicas": {}, "removing_replicas": {}, "topic_id": "yU3VbXWkR9a8C7sEr1Z4lA"}
    assert encode_topic_id(topic_id) == "yU3VbXWkR9a8C7sEr1Z4lA"  # Kafka's Uuid.toString
    assert TopicAssignment.decode("orders", raw) == TopicAssignment("orders", topic_id, {0: (1, 2, 3), 1: (2, 3, 1)})


def test_a_topic_assignment_written_by_an_old_kafka_has_a_stable_derived_id() -> None:
    from pulllog.cluster.znodes import TopicAssignment

    raw = b'{"version":1,"partitions":{"0":[1]}}'
    first, second = TopicAssignment.decode("t", raw), TopicAssignment.decode("t", raw)
    assert first.partitions == {0: (1,)} and first.topic_id == second.topic_id
    with pytest.raises(ZnodeFormatError, match="not a list of broker ids"):
        TopicAssignment.decode("t", b'{"version":3,"partitions":{"0":"1"}}')
    with pytest.raises(ZnodeFormatError, match="topic id"):
        TopicAssignment.decode("t", b'{"version":3,"partitions":{},"topic_id":"!!"}')


def test_a_partition_state_is_kafkas_leader_and_isr_json() -> None:
    from pulllog.cluster.state import LeaderAndIsr
    from pulllog.cluster.znodes import decode_partition_state, encode_partition_state, partition_state_path

    raw = encode_partition_state(LeaderAndIsr(2, 5, (2, 3), 4, zk_version=9))
    assert json.loads(raw) == {"controller_epoch": 4, "leader": 2, "version": 1, "leader_epoch": 5, "isr": [2, 3]}
    assert decode_partition_state("t", 0, raw, 9) == LeaderAndIsr(2, 5, (2, 3), 4, 9)
    # Kafka 3.2+ writes leader_recovery_state when not 0; it is read and left aside
    kafka = b'{"controller_epoch":1,"leader":-1,"version":1,"leader_epoch":3,"isr":[1],"leader_recovery_state":0}'
    assert decode_partition_state("t", 1, kafka) == LeaderAndIsr(-1, 3, (1,), 1)
    assert partition_state_path("t", 1) == "/brokers/topics/t/partitions/1/state"
    with pytest.raises(ZnodeFormatError, match="/brokers/topics/t/partitions/0/state"):
        decode_partition_state("t", 0, b'{"leader":"1"}')


def test_topic_configs_deletions_and_preferred_elections_are_kafkas_formats() -> None:
    from pulllog.cluster.znodes import (
        decode_preferred_election,
        decode_topic_config,
        delete_topic_path,
        encode_preferred_election,
        encode_topic_config,
        topic_config_path,
    )

    raw = encode_topic_config({"retention.ms": "1000", "cleanup.policy": "compact"})
    assert json.loads(raw) == {"version": 1, "config": {"cleanup.policy": "compact", "retention.ms": "1000"}}
    assert decode_topic_config("t", raw) == {"cleanup.policy": "compact", "retention.ms": "1000"}
    assert decode_topic_config("t", b"") == {}
    assert topic_config_path("t") == "/config/topics/t" and delete_topic_path("t") == "/admin/delete_topics/t"
    raw = encode_preferred_election([("t", 0), ("u", 2)])
    assert json.loads(raw) == {"version": 1, "partitions": [{"topic": "t", "partition": 0},
                                                            {"topic": "u", "partition": 2}]}
    assert decode_preferred_election(raw) == [("t", 0), ("u", 2)]


def test_the_cluster_id_znode_is_kafkas_json() -> None:
    from pulllog.cluster.znodes import decode_cluster_id, encode_cluster_id

    assert json.loads(encode_cluster_id("Qh7n5FjdTzSVXZ4ecp2Hvw")) == {"version": "1", "id": "Qh7n5FjdTzSVXZ4ecp2Hvw"}
    assert decode_cluster_id(b'{"version":"1","id":"abc"}') == "abc"
    with pytest.raises(ZnodeFormatError, match="/cluster/id"):
        decode_cluster_id(b'{"version":"1"}')
