"""ElectLeaders (43) on a single broker: it leads every partition already."""

from __future__ import annotations

from confluent_kafka import ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pulllog.testing import BrokerThread


def test_a_single_broker_answers_election_not_needed_per_partition(pulllog_broker: BrokerThread) -> None:
    admin = AdminClient({"bootstrap.servers": pulllog_broker.bootstrap_servers})
    admin.create_topics([NewTopic("solo", 2, 1)], operation_timeout=30)["solo"].result()
    for election in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        result = admin.elect_leaders(election, [TopicPartition("solo", 0), TopicPartition("solo", 5)]).result()
        assert result[TopicPartition("solo", 0)].name() == "ELECTION_NOT_NEEDED"
        assert result[TopicPartition("solo", 5)].name() == "UNKNOWN_TOPIC_OR_PART"  # librdkafka's name
    try:
        everything = admin.elect_leaders(ElectionType.PREFERRED, None).result()
    except KafkaException as exc:  # librdkafka reports an all-partitions election's errors as a whole
        raise AssertionError(exc) from None
    assert {tp.partition for tp in everything if tp.topic == "solo"} == {0, 1}
