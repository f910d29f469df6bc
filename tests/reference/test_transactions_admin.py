"""The admin side of transactions (KIP-664, ``kafka-transactions.sh``): pulllog's Admin and
``pulllog transactions``, against Apache Kafka and against pulllog, with transactions made by
librdkafka's transactional producer (confluent-kafka).

Names are unique per test: each broker is shared by the tests (Kafka's by the session).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import pytest
from click.testing import CliRunner
from kio.schema.errors import ErrorCode

from pulllog.cli.main import main
from pulllog.client.admin import Admin, OffsetSpec
from pulllog.client.errors import KafkaError
from pulllog.client.types import TopicPartition
from pulllog.testing import BrokerThread

TIMEOUT_S = 60
# One partition each for pulllog's internal topics (Kafka's reference broker uses 5 and 50).
INTERNAL_TOPICS = {"offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1"}


@pytest.fixture(scope="module")
def pulllog_txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    with BrokerThread(tmp_path_factory.mktemp("pulllog-txn-admin"), properties=INTERNAL_TOPICS) as broker:
        yield broker


@pytest.fixture(params=["kafka", "pulllog"])
def bootstrap(request: pytest.FixtureRequest) -> str:
    """The same test against Apache Kafka and against pulllog."""
    fixture = "kafka_reference_broker" if request.param == "kafka" else "pulllog_txn_broker"
    return str(request.getfixturevalue(fixture).bootstrap_servers)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([confluent_kafka.admin.NewTopic(topic, partitions, 1)])[topic].result(TIMEOUT_S)


class Transactions:
    """librdkafka transactional producers, closed at the end (before their broker stops)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.producers: list[confluent_kafka.Producer] = []

    def open(self, transactional_id: str, topic: str, records: int = 3, partition: int = 0) -> confluent_kafka.Producer:
        """A transaction with ``records`` records in ``topic``-``partition``, left open."""
        producer = confluent_kafka.Producer({"bootstrap.servers": self.bootstrap, "transactional.id": transactional_id,
                                             "transaction.timeout.ms": 60_000})
        self.producers.append(producer)
        producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
        for i in range(records):
            producer.produce(topic, b"v%d" % i, partition=partition)
        producer.flush(TIMEOUT_S)
        return producer

    def committed(self, transactional_id: str, topic: str) -> None:
        self.open(transactional_id, topic).commit_transaction(TIMEOUT_S)

    def initialized(self, transactional_id: str) -> None:
        """A producer id for the transactional id, and no transaction yet (state Empty)."""
        producer = confluent_kafka.Producer({"bootstrap.servers": self.bootstrap, "transactional.id": transactional_id})
        self.producers.append(producer)
        producer.init_transactions(TIMEOUT_S)


@pytest.fixture
def txns(bootstrap: str) -> Iterator[Transactions]:
    t = Transactions(bootstrap)
    yield t
    for producer in t.producers:
        producer.close(5)


def _run(fn: Any, bootstrap: str) -> Any:
    async def body() -> Any:
        async with Admin(bootstrap) as admin:
            return await fn(admin)
    return asyncio.run(body())


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["transactions", *args])
    return result.exit_code, result.stdout, result.stderr


def test_list_and_describe_transactions(bootstrap: str, txns: Transactions) -> None:
    topic, done, ongoing, empty = _name("txn-list"), _name("done"), _name("ongoing"), _name("empty")
    _create_topic(bootstrap, topic)
    txns.committed(done, topic)
    txns.open(ongoing, topic)
    txns.initialized(empty)

    listed = {t.transactional_id: t for t in _run(lambda a: a.list_transactions(), bootstrap)}
    assert listed[done].state == "CompleteCommit" and listed[ongoing].state == "Ongoing"
    only_ongoing = _run(lambda a: a.list_transactions(states=["Ongoing"]), bootstrap)
    assert ongoing in [t.transactional_id for t in only_ongoing] and done not in [t.transactional_id for t in only_ongoing]
    by_producer = _run(lambda a: a.list_transactions(producer_ids=[listed[done].producer_id]), bootstrap)
    assert [t.transactional_id for t in by_producer] == [done]
    # The duration filter (v1+) is by the last transaction's start time, whatever the state.
    started = [t.transactional_id for t in _run(lambda a: a.list_transactions(min_duration_ms=0), bootstrap)]
    assert {done, ongoing, empty} <= set(started)
    hour = [t.transactional_id for t in _run(lambda a: a.list_transactions(min_duration_ms=3_600_000), bootstrap)]
    assert done not in hour and ongoing not in hour

    described = _run(lambda a: a.describe_transactions([done, ongoing]), bootstrap)
    assert described[ongoing].state == "Ongoing" and described[ongoing].partitions == (TopicPartition(topic, 0),)
    assert described[ongoing].start_time_ms is not None and described[ongoing].timeout_ms == 60_000
    assert described[done].partitions == () and described[done].producer_id == listed[done].producer_id
    # No transaction yet: Kafka answers a start time of -1.
    assert (listed[empty].state, _run(lambda a: a.describe_transaction(empty), bootstrap).start_time_ms) == \
        ("Empty", None)
    with pytest.raises(KafkaError) as unknown:
        _run(lambda a: a.describe_transaction(_name("never-used")), bootstrap)
    assert unknown.value.code == ErrorCode.transactional_id_not_found

    code, out, _ = _cli("list", "--json", "--state", "Ongoing", "--bootstrap-server", bootstrap)
    assert code == 0 and ongoing in [json.loads(line)["transactional_id"] for line in out.splitlines()]
    code, out, _ = _cli("describe", ongoing, "--bootstrap-server", bootstrap)
    assert code == 0 and "TransactionState" in out and "Ongoing" in out and f"{topic}-0" in out
    code, _, err = _cli("describe", _name("never-used"), "--bootstrap-server", bootstrap)
    assert code == 1 and err.startswith("error: ") and len(err.strip().splitlines()) == 1


def test_describe_producers_and_abort_an_open_transaction(bootstrap: str, txns: Transactions) -> None:
    topic, committed, ongoing = _name("txn-abort"), _name("committed"), _name("ongoing")
    _create_topic(bootstrap, topic)
    txns.committed(committed, topic)  # offsets 0-2 and its marker at 3
    txns.open(ongoing, topic)  # offsets 4-6, open
    tp = TopicPartition(topic, 0)
    producer_id = _run(lambda a: a.describe_transaction(ongoing), bootstrap).producer_id

    producers = {s.producer_id: s for s in _run(lambda a: a.describe_producers([tp]), bootstrap)[tp]}
    assert producers[producer_id].current_txn_start_offset == 4
    assert producers[producer_id].last_sequence == 2
    assert [s.current_txn_start_offset for pid, s in producers.items() if pid != producer_id] == [None]
    lso = _run(lambda a: a.list_offsets({tp: OffsetSpec.LATEST}, read_committed=True), bootstrap)[tp]
    assert lso is not None and lso.offset == 4

    code, out, _ = _cli("describe-producers", topic, "--json", "--bootstrap-server", bootstrap)
    assert code == 0
    rows = {row["producer_id"]: row for row in map(json.loads, out.splitlines())}
    assert rows[producer_id]["current_transaction_start_offset"] == 4
    # Not hanging: its coordinator lists the partition in the ongoing transaction.
    code, out, _ = _cli("find-hanging", "--topic", topic, "--max-transaction-timeout", "0", "--json",
                        "--bootstrap-server", bootstrap)
    assert code == 0 and out == ""

    code, out, err = _cli("abort", "--topic", topic, "--partition", "0", "--start-offset", "99",
                          "--bootstrap-server", bootstrap)
    assert code == 1 and "no open transaction starting at offset 99" in err
    code, out, err = _cli("abort", "--topic", topic, "--partition", "0", "--start-offset", "4",
                          "--bootstrap-server", bootstrap)
    assert code == 0, err
    assert f"aborted producer {producer_id}'s transaction in {topic}-0" in out
    after = {s.producer_id: s for s in _run(lambda a: a.describe_producers([tp]), bootstrap)[tp]}
    assert after[producer_id].current_txn_start_offset is None
    lso = _run(lambda a: a.list_offsets({tp: OffsetSpec.LATEST}, read_committed=True), bootstrap)[tp]
    assert lso is not None and lso.offset == 8  # past the abort marker at 7


def test_cli_usage_errors_are_one_line(bootstrap: str) -> None:
    for args in (["abort", "--topic", "t", "--partition", "0"],
                 ["abort", "--topic", "t", "--partition", "0", "--start-offset", "1", "--producer-id", "2"],
                 ["abort", "--topic", "t", "--partition", "0", "--producer-id", "2", "--producer-epoch", "1"],
                 ["find-hanging", "--partition", "0"]):
        code, _, err = _cli(*args, "--bootstrap-server", bootstrap)
        assert code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1, (args, err)
    code, _, err = _cli("describe-producers", _name("ghost"), "--bootstrap-server", bootstrap)
    assert code == 1 and "does not exist" in err
