"""The shipped pytest fixture serves a real librdkafka client."""

import confluent_kafka


def test_pulllog_broker_fixture_serves_confluent_kafka(pulllog_broker) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": pulllog_broker.bootstrap_servers})
    producer.produce("fixture-topic", b"hello")
    assert producer.flush(10) == 0
    consumer = confluent_kafka.Consumer({"bootstrap.servers": pulllog_broker.bootstrap_servers,
                                         "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition("fixture-topic", 0, 0)])
    msg = consumer.poll(10)
    consumer.close()
    assert msg is not None and msg.error() is None and msg.value() == b"hello"
