"""DescribeConfigs (32) v4 over the wire: each config carries the type Kafka declares for it."""

from __future__ import annotations

from kafka_wire import WireClient

from pulllog.testing import BrokerThread

# DescribeConfigsResponse.ConfigType wire ids (KIP-569)
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7
TOPIC, BROKER = 2, 4


def describe(client: WireClient, resource_type: int, name: str) -> dict[str, tuple[str, int]]:
    response = client.call("describe_configs", 4, {
        "resources": [{"resource_type": resource_type, "resource_name": name, "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False})
    (result,) = response.results
    assert result.error_code == 0, result
    return {c.name: (c.value, c.config_type) for c in result.configs}


def test_topic_configs_have_kafkas_types(pulllog_broker: BrokerThread) -> None:
    pulllog_broker.call(pulllog_broker.broker.topics.create, "typed", 1)
    with WireClient(pulllog_broker.port) as client:
        configs = describe(client, TOPIC, "typed")
    assert configs["cleanup.policy"] == ("delete", LIST)
    assert configs["retention.ms"][1] == LONG
    assert configs["segment.bytes"][1] == INT
    assert configs["min.cleanable.dirty.ratio"][1] == DOUBLE
    assert configs["preallocate"] == ("false", BOOLEAN)
    assert configs["compression.type"] == ("producer", STRING)


def test_every_reported_config_has_a_known_type(pulllog_broker: BrokerThread) -> None:
    pulllog_broker.call(pulllog_broker.broker.topics.create, "typed", 1)
    with WireClient(pulllog_broker.port) as client:
        for resource_type, name in ((TOPIC, "typed"), (BROKER, "0")):
            untyped = [n for n, (_v, t) in describe(client, resource_type, name).items() if t == 0]
            assert untyped == [], f"configs reported with UNKNOWN type: {untyped}"
