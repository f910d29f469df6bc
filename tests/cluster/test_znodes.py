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
