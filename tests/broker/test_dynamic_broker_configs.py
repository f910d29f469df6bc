"""Broker-level log defaults set at run time (Kafka's dynamic broker configs): per broker and
cluster-wide (entity ""), applied at once to topics without an override, kept across a
restart, reported by DescribeConfigs with their source. The answers themselves are compared
with Kafka's in tests/reference/test_differential.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kafka_wire import WireClient

from pulllog.testing import BrokerThread

BROKER, TOPIC = 4, 2
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, DYNAMIC_TOPIC_CONFIG = 2, 3, 1


def _alter(c: WireClient, entity: str, ops: list[tuple[str, int, str | None]]) -> int:
    answer = c.call("incremental_alter_configs", 1, {"resources": [{
        "resource_type": BROKER, "resource_name": entity,
        "configs": [{"name": n, "config_operation": o, "value": v} for n, o, v in ops]}], "validate_only": False})
    return int(answer.responses[0].error_code)


def _described(c: WireClient, resource_type: int, name: str, key: str) -> Any:
    answer = c.call("describe_configs", 4, {"resources": [{"resource_type": resource_type, "resource_name": name,
                                                           "configuration_keys": [key]}],
                                            "include_synonyms": True, "include_documentation": False})
    (entry,) = answer.results[0].configs
    return entry


def _create(c: WireClient, name: str, configs: dict[str, str]) -> None:
    answer = c.call("create_topics", 7, {"topics": [{
        "name": name, "num_partitions": 1, "replication_factor": -1, "assignments": [],
        "configs": [{"name": k, "value": v} for k, v in configs.items()]}], "timeout_ms": 10_000, "validate_only": False})
    assert answer.topics[0].error_code == 0


def test_a_dynamic_default_applies_to_topics_without_an_override_and_survives_a_restart(tmp_path: Path) -> None:
    with BrokerThread(tmp_path, port=0) as broker, WireClient(broker.port) as c:
        _create(c, "plain", {})
        _create(c, "own", {"retention.ms": "5000"})
        assert _alter(c, "", [("log.retention.ms", 0, "3600000")]) == 0
        assert _alter(c, "0", [("message.max.bytes", 0, "2000")]) == 0
        assert broker.broker.topics.get("plain").partitions[0].log.config.retention_ms == 3_600_000
        assert broker.broker.topics.get("own").partitions[0].log.config.retention_ms == 5000

    with BrokerThread(tmp_path, port=0) as broker, WireClient(broker.port) as c:
        plain = _described(c, TOPIC, "plain", "retention.ms")
        assert (plain.value, plain.config_source) == ("3600000", DYNAMIC_DEFAULT_BROKER_CONFIG)
        own = _described(c, TOPIC, "own", "retention.ms")
        assert (own.value, own.config_source) == ("5000", DYNAMIC_TOPIC_CONFIG)
        limit = _described(c, BROKER, "0", "message.max.bytes")
        assert (limit.value, limit.config_source, limit.read_only) == ("2000", DYNAMIC_BROKER_CONFIG, False)
        assert broker.broker.topics.get("plain").partitions[0].log.config.max_message_bytes == 2000
        assert _alter(c, "", [("log.retention.ms", 1, None)]) == 0
        assert broker.broker.topics.get("plain").partitions[0].log.config.retention_ms == 7 * 24 * 3_600_000


def test_a_static_broker_config_and_another_broker_are_refused(tmp_path: Path) -> None:
    invalid_request = 42
    with BrokerThread(tmp_path, port=0) as broker, WireClient(broker.port) as c:
        assert _alter(c, "", [("num.partitions", 0, "3")]) == invalid_request
        assert _alter(c, "7", [("log.retention.ms", 0, "1")]) == invalid_request
        assert broker.broker.topics.dynamic == {}
