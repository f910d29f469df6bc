"""DescribeLogDirs (35) over the wire: one log dir, each partition's size in bytes."""

from __future__ import annotations

import confluent_kafka
import pytest
from kafka_wire import WireClient

from pulllog.testing import BrokerThread


def sizes(response) -> dict[tuple[str, int], int]:
    (result,) = response.results
    assert result.error_code == 0
    return {(t.name, p.partition_index): p.partition_size for t in result.topics for p in t.partitions}


@pytest.fixture
def broker(pulllog_broker: BrokerThread) -> BrokerThread:
    """Topics a (2 partitions, 3 records in a-1) and b (1 empty partition)."""
    pulllog_broker.call(pulllog_broker.broker.topics.create, "a", 2)
    pulllog_broker.call(pulllog_broker.broker.topics.create, "b", 1)
    producer = confluent_kafka.Producer({"bootstrap.servers": pulllog_broker.bootstrap_servers})
    for i in range(3):
        producer.produce("a", b"x" * 100, partition=1)
    assert producer.flush(10) == 0
    return pulllog_broker


def size_of(broker: BrokerThread, topic: str, partition: int) -> int:
    return broker.call(lambda: broker.broker.topics.partition(topic, partition).log.size_bytes)


@pytest.mark.parametrize("version", [1, 4])
def test_null_topics_describes_every_partition_with_its_size(broker: BrokerThread, version: int) -> None:
    with WireClient(broker.port) as client:
        response = client.call("describe_log_dirs", version, {"topics": None})

    assert sizes(response) == {("a", 0): 0, ("a", 1): size_of(broker, "a", 1), ("b", 0): 0}
    assert size_of(broker, "a", 1) > 300
    assert response.results[0].log_dir == str(broker.data_dir.resolve())


def test_named_partitions_only_and_unknown_ones_left_out(broker: BrokerThread) -> None:
    with WireClient(broker.port) as client:
        response = client.call("describe_log_dirs", 4, {"topics": [
            {"topic": "a", "partitions": [1, 9]}, {"topic": "ghost", "partitions": [0]}]})

    assert sizes(response) == {("a", 1): size_of(broker, "a", 1)}


def test_v4_reports_the_volume_size(broker: BrokerThread) -> None:
    with WireClient(broker.port) as client:
        (result,) = client.call("describe_log_dirs", 4, {"topics": []}).results

    assert result.total_bytes > 0 and 0 <= result.usable_bytes <= result.total_bytes
    assert result.topics == ()
