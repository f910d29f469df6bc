"""librdkafka's transactional producer (confluent-kafka) against pulllog, end to end: commits
are visible to read_committed consumers, aborts are not, a second instance of a transactional
id fences the first, a broker restart in the middle of a transaction loses nothing, and the
wire answers for what librdkafka never sends (a produce outside the transaction, the admin
APIs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_wire import WireClient
from kio.schema.errors import ErrorCode
from txn_helpers import read_values, txn_state

from pulllog.records import build_batch
from pulllog.testing import BrokerThread


def _create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


_open: list[Producer] = []


@pytest.fixture(autouse=True)
def _close_producers(pulllog_broker: Any) -> Iterator[None]:
    """Close every producer a test made while its broker still runs (librdkafka would
    otherwise keep reconnecting to a stopped broker until garbage collection)."""
    yield
    while _open:
        _open.pop().close(5)


def _producer(bootstrap: str, transactional_id: str, **extra: Any) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5,
                         **extra})
    _open.append(producer)
    return producer


def test_a_commit_is_read_committed_and_an_abort_is_not(pulllog_broker: Any) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    _create(bootstrap, "orders", 2)
    producer = _producer(bootstrap, "orders-tx")
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(4):
        producer.produce("orders", f"committed-{i}".encode(), partition=i % 2)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(4):
        producer.produce("orders", f"aborted-{i}".encode(), partition=i % 2)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce("orders", b"after", partition=0)
    producer.commit_transaction(30)

    assert read_values(bootstrap, "orders", 2) == [b"committed-0", b"committed-2", b"after",
                                                   b"committed-1", b"committed-3"]
    uncommitted = read_values(bootstrap, "orders", 2, isolation="read_uncommitted")
    assert sorted(uncommitted) == sorted([*(f"committed-{i}".encode() for i in range(4)),
                                          *(f"aborted-{i}".encode() for i in range(4)), b"after"])
    assert txn_state(pulllog_broker, "orders-tx") == "CompleteCommit"


def test_an_open_transaction_holds_read_committed_consumers_back(pulllog_broker: Any) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    _create(bootstrap, "lso")
    producer = _producer(bootstrap, "lso-tx")
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("lso", b"pending")
    producer.flush(30)
    assert txn_state(pulllog_broker, "lso-tx") == "Ongoing"
    assert read_values(bootstrap, "lso") == []
    producer.commit_transaction(30)
    assert read_values(bootstrap, "lso") == [b"pending"]


def test_a_second_instance_fences_the_first(pulllog_broker: Any) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    _create(bootstrap, "fence")
    first = _producer(bootstrap, "fence-tx")
    first.init_transactions(30)
    first.begin_transaction()
    first.produce("fence", b"zombie")
    first.flush(30)

    second = _producer(bootstrap, "fence-tx")
    second.init_transactions(30)  # aborts the first one's open transaction (CONCURRENT_TRANSACTIONS meanwhile)
    second.begin_transaction()
    second.produce("fence", b"live")
    second.commit_transaction(30)

    with pytest.raises(KafkaException) as raised:
        first.produce("fence", b"late")
        first.commit_transaction(30)
    assert raised.value.args[0].fatal()
    assert raised.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                           KafkaError.INVALID_PRODUCER_EPOCH)
    assert read_values(bootstrap, "fence") == [b"live"]


def test_a_broker_restart_in_the_middle_of_a_transaction(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    broker = BrokerThread(data_dir).start()
    port = broker.port
    bootstrap = broker.bootstrap_servers
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "restart-tx", "linger.ms": 5})
    try:
        _create(bootstrap, "restart", 2)
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("restart", b"before", partition=0)
        producer.flush(30)
        broker.stop()
        broker = BrokerThread(data_dir, port=port).start()
        assert txn_state(broker, "restart-tx") == "Ongoing"  # loaded from __transaction_state
        producer.produce("restart", b"after", partition=1)
        producer.commit_transaction(60)
        assert read_values(bootstrap, "restart", 2) == [b"before", b"after"]
    finally:
        producer.close(5)
        broker.stop()


def test_send_offsets_to_transaction_commits_the_groups_offsets_with_the_output(pulllog_broker: Any) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    _create(bootstrap, "input")
    _create(bootstrap, "output")
    feeder = Producer({"bootstrap.servers": bootstrap})
    for i in range(5):
        feeder.produce("input", f"in-{i}".encode())
    feeder.flush(30)
    feeder.close(5)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe(["input"])
    producer = _producer(bootstrap, "eos-tx")
    producer.init_transactions(30)

    def process(n: int) -> None:
        producer.begin_transaction()
        got = 0
        while got < n:
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue
            producer.produce("output", msg.value().replace(b"in", b"out"))
            got += 1
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)

    try:
        process(3)
        producer.abort_transaction(30)  # the offsets go with the output: nothing committed
        committed = consumer.committed([KafkaTopicPartition("input", 0)], 30)
        assert committed[0].offset < 0
        consumer.seek(KafkaTopicPartition("input", 0, 0))
        process(5)
        producer.commit_transaction(30)
        assert consumer.committed([KafkaTopicPartition("input", 0)], 30)[0].offset == 5
    finally:
        consumer.close()
    assert read_values(bootstrap, "output") == [f"out-{i}".encode() for i in range(5)]


def test_a_transactional_produce_to_a_partition_not_added_is_refused(pulllog_broker: Any) -> None:
    bootstrap = pulllog_broker.bootstrap_servers
    _create(bootstrap, "strict", 2)
    with WireClient(pulllog_broker.port) as c:
        init = c.call("init_producer_id", 4, {"transactional_id": "strict-tx", "transaction_timeout": 60_000,
                                              "producer_id": -1, "producer_epoch": -1})
        pid, epoch = init.producer_id, init.producer_epoch
        added = c.call("add_partitions_to_txn", 3, {
            "v3_and_below_transactional_id": "strict-tx", "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": "strict", "partitions": [0]}]})
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0

        def produce(partition: int) -> int:
            batch = build_batch([(None, b"v")], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                                transactional=True)
            resp = c.call("produce", 9, {"transactional_id": "strict-tx", "acks": -1, "timeout": 5000, "topic_data": [
                {"name": "strict", "partition_data": [{"index": partition, "records": batch}]}]})
            return int(resp.responses[0].partition_responses[0].error_code)

        assert produce(1) == ErrorCode.invalid_txn_state
        assert produce(0) == ErrorCode.none
        anonymous = c.call("produce", 9, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
            {"name": "strict", "partition_data": [{"index": 0, "records": build_batch(
                [(None, b"v")], producer_id=pid, producer_epoch=epoch, base_sequence=1, transactional=True)}]}]})
        assert anonymous.responses[0].partition_responses[0].error_code == \
            ErrorCode.transactional_id_authorization_failed

        described = c.call("describe_transactions", 0, {"transactional_ids": ["strict-tx", "nobody"]})
        mine, unknown = described.transaction_states
        assert (mine.error_code, mine.transaction_state, mine.producer_id) == (0, "Ongoing", pid)
        assert [(t.topic, list(t.partitions)) for t in mine.topics] == [("strict", [0])]
        assert unknown.error_code == ErrorCode.transactional_id_not_found
        listed = c.call("list_transactions", 1, {"state_filters": ["Ongoing"], "producer_id_filters": [],
                                                 "duration_filter": -1})
        assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == \
            [("strict-tx", "Ongoing")]
        ended = c.call("end_txn", 3, {"transactional_id": "strict-tx", "producer_id": pid, "producer_epoch": epoch,
                                      "committed": False})
        assert ended.error_code == 0
        # the abort's marker closed the partition's transaction: a batch of the same epoch is
        # checked again (not waved through as part of an open transaction) and refused
        assert produce(0) == ErrorCode.invalid_txn_state
    assert read_values(bootstrap, "strict", 2) == []


async def test_aiokafkas_transactional_producer_commits_and_aborts(pulllog_broker: Any) -> None:
    from aiokafka import AIOKafkaProducer

    bootstrap = pulllog_broker.bootstrap_servers
    _create(bootstrap, "aio")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-tx")
    await producer.start()
    try:
        async with producer.transaction():
            await producer.send_and_wait("aio", b"committed")
        await producer.begin_transaction()
        await producer.send_and_wait("aio", b"aborted")
        await producer.abort_transaction()
    finally:
        await producer.stop()
    assert txn_state(pulllog_broker, "aio-tx") == "CompleteAbort"
    assert read_values(bootstrap, "aio") == [b"committed"]
