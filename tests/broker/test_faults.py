"""The fault hook (``broker.faults``): injected errors, delays, lost requests and dropped
connections, seen by real clients on a real broker."""

from __future__ import annotations

import struct
from pathlib import Path

import confluent_kafka
import pytest
from kafka_wire import WireClient, fetch, produce
from kio.schema.errors import ErrorCode
from log_contents import all_values
from waits import TIMEOUT_S, block_until, connection_count, log_end_offset

from pulllog.client.producer import Producer
from pulllog.records import build_batch
from pulllog.net.build import build, request_class
from pulllog.net.protocol import encode_request
from pulllog.testing import BrokerThread

PRODUCE, FETCH, JOIN_GROUP, HEARTBEAT, CREATE_TOPICS = 0, 1, 11, 12, 19


def create_topic(broker: BrokerThread, name: str, partitions: int = 1) -> None:
    assert broker.broker is not None
    broker.call(broker.broker.topics.create, name, partitions, {})


def stored_values(broker: BrokerThread, topic: str, partition: int = 0) -> list[bytes | None]:
    assert broker.broker is not None
    return broker.call(lambda b: all_values(b.topics.partition(topic, partition).log), broker.broker)


def produce_request(topic: str, partition: int, records: bytes, correlation_id: int) -> bytes:
    body = build(request_class("produce", 9), {
        "transactional_id": None, "acks": 1, "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
    return encode_request(body, correlation_id=correlation_id, client_id="faults-test")


# ---------------------------------------------------------------------------- retries by real clients


async def test_pulllog_producer_retries_not_leader_until_the_broker_takes_the_record(
        pulllog_broker: BrokerThread) -> None:
    create_topic(pulllog_broker, "moved")
    assert pulllog_broker.broker is not None
    rule = pulllog_broker.faults.fail(PRODUCE, ErrorCode.not_leader_or_follower, topic="moved", times=3)
    async with Producer(pulllog_broker.bootstrap_servers, retry_backoff_ms=10) as producer:
        metadata = await producer.send_and_wait("moved", b"once")
    assert rule.fired == 3 and rule.spent  # three attempts refused, the fourth appended
    assert metadata.offset == 0
    assert stored_values(pulllog_broker, "moved") == [b"once"]


def test_librdkafka_retries_not_leader_until_the_broker_takes_the_record(pulllog_broker: BrokerThread) -> None:
    create_topic(pulllog_broker, "moved")
    assert pulllog_broker.broker is not None
    rule = pulllog_broker.faults.fail(PRODUCE, ErrorCode.not_leader_or_follower, topic="moved", times=3)
    producer = confluent_kafka.Producer({"bootstrap.servers": pulllog_broker.bootstrap_servers,
                                         "retry.backoff.ms": 10, "enable.idempotence": False})
    reports: list[tuple[object, int]] = []
    producer.produce("moved", b"once", partition=0, on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert producer.flush(TIMEOUT_S) == 0
    assert reports == [(None, 0)]
    assert rule.fired == 3
    assert stored_values(pulllog_broker, "moved") == [b"once"]


async def test_a_non_retriable_error_reaches_the_producer_s_caller(pulllog_broker: BrokerThread) -> None:
    create_topic(pulllog_broker, "refused")
    assert pulllog_broker.broker is not None
    rule = pulllog_broker.faults.fail(PRODUCE, ErrorCode.topic_authorization_failed, topic="refused")
    async with Producer(pulllog_broker.bootstrap_servers) as producer:
        with pytest.raises(Exception, match="(?i)topic_authorization_failed|authoriz"):
            await producer.send_and_wait("refused", b"no")
    assert rule.fired == 1
    assert log_end_offset(pulllog_broker, "refused") == 0


# ---------------------------------------------------------------------------- matching and budget


def test_a_rule_fires_only_for_its_topic_partition_and_only_times_times(pulllog_broker: BrokerThread) -> None:
    create_topic(pulllog_broker, "two", 2)
    assert pulllog_broker.broker is not None
    rule = pulllog_broker.faults.fail(PRODUCE, ErrorCode.not_leader_or_follower, topic="two", partition=1,
                                             times=2)
    batch = build_batch([(b"k", b"v")])
    with WireClient(pulllog_broker.port) as c:
        assert produce(c, "two", 0, batch).responses[0].partition_responses[0].error_code == ErrorCode.none
        codes = [produce(c, "two", 1, batch).responses[0].partition_responses[0].error_code for _ in range(3)]
    assert codes == [ErrorCode.not_leader_or_follower] * 2 + [ErrorCode.none]
    assert rule.fired == 2 and not pulllog_broker.faults  # spent: the fast path is back
    assert (log_end_offset(pulllog_broker, "two", 0), log_end_offset(pulllog_broker, "two", 1)) == (1, 1)


def test_fetch_and_join_group_answer_the_injected_error(pulllog_broker: BrokerThread) -> None:
    create_topic(pulllog_broker, "f")
    assert pulllog_broker.broker is not None
    faults = pulllog_broker.faults
    faults.fail(FETCH, ErrorCode.not_leader_or_follower, topic="f")
    faults.fail(JOIN_GROUP, ErrorCode.coordinator_load_in_progress, group="g")
    with WireClient(pulllog_broker.port) as c:
        part = fetch(c, "f", 0, 0).responses[0].partitions[0]
        assert part.error_code == ErrorCode.not_leader_or_follower and not part.records
        assert fetch(c, "f", 0, 0).responses[0].partitions[0].error_code == ErrorCode.none
        join = c.call("join_group", 5, {"group_id": "g", "session_timeout": 10000, "rebalance_timeout": 10000,
                                        "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                                        "protocols": [{"name": "range", "metadata": b""}]})
        assert join.error_code == ErrorCode.coordinator_load_in_progress


def test_failing_an_api_whose_answer_has_no_error_code_is_refused(pulllog_broker: BrokerThread) -> None:
    assert pulllog_broker.broker is not None
    with pytest.raises(ValueError, match="no top-level error code; inject a delay or a dropped connection"):
        pulllog_broker.faults.fail(CREATE_TOPICS, ErrorCode.not_controller)  # a code per topic, set by its handler
    with pytest.raises(ValueError, match="no API with key 999"):
        pulllog_broker.faults.delay(999, 10)


# ---------------------------------------------------------------------------- delays, losses, disconnects


def test_a_delayed_produce_is_appended_only_after_its_delay(pulllog_broker: BrokerThread) -> None:
    create_topic(pulllog_broker, "slow")
    assert pulllog_broker.broker is not None
    # Long enough that the test sees the request held; the answer still comes, late.
    rule = pulllog_broker.faults.delay(PRODUCE, 2000, topic="slow")
    with WireClient(pulllog_broker.port, timeout=TIMEOUT_S) as c:
        c.send_raw(produce_request("slow", 0, build_batch([(b"k", b"v")]), correlation_id=7))
        block_until(lambda: rule.fired == 1, "the broker holds the Produce")
        assert log_end_offset(pulllog_broker, "slow") == 0
        frame = c.read_frame()
    assert struct.unpack_from(">i", frame)[0] == 7
    assert log_end_offset(pulllog_broker, "slow") == 1


def test_drop_before_handling_loses_the_request_with_its_connection(pulllog_broker: BrokerThread) -> None:
    create_topic(pulllog_broker, "cut")
    assert pulllog_broker.broker is not None
    rule = pulllog_broker.faults.drop_connection(PRODUCE, topic="cut")
    with WireClient(pulllog_broker.port) as c:
        with pytest.raises(ConnectionError):
            produce(c, "cut", 0, build_batch([(b"k", b"v")]))
    assert rule.fired == 1 and log_end_offset(pulllog_broker, "cut") == 0
    block_until(lambda: connection_count(pulllog_broker) == 0, "the broker let go of the dropped connection")
    with WireClient(pulllog_broker.port) as c:  # the next connection is served normally
        assert produce(c, "cut", 0, build_batch([(b"k", b"v")])).responses[0].partition_responses[0].base_offset == 0


def test_drop_after_handling_appends_but_loses_the_answer(pulllog_broker: BrokerThread) -> None:
    create_topic(pulllog_broker, "unheard")
    assert pulllog_broker.broker is not None
    pulllog_broker.faults.drop_connection(PRODUCE, topic="unheard", after_handling=True)
    with WireClient(pulllog_broker.port) as c:
        with pytest.raises(ConnectionError):
            produce(c, "unheard", 0, build_batch([(b"k", b"v")]))
    assert log_end_offset(pulllog_broker, "unheard") == 1
    assert pulllog_broker.broker.internal_errors == 0  # an injected fault is no handler failure


def test_a_lost_request_is_neither_appended_nor_answered_and_later_ones_are(pulllog_broker: BrokerThread) -> None:
    create_topic(pulllog_broker, "gap")
    assert pulllog_broker.broker is not None
    rule = pulllog_broker.faults.lose_request(PRODUCE, topic="gap")
    with WireClient(pulllog_broker.port) as c:
        c.send_raw(produce_request("gap", 0, build_batch([(b"k", b"lost")]), correlation_id=1))
        c.send_raw(produce_request("gap", 0, build_batch([(b"k", b"kept")]), correlation_id=2))
        frame = c.read_frame()
    assert struct.unpack_from(">i", frame)[0] == 2  # the first one is never answered
    assert rule.fired == 1
    assert stored_values(pulllog_broker, "gap") == [b"kept"]


async def test_faults_are_reachable_on_a_broker_in_the_test_s_own_loop(tmp_path: Path) -> None:
    from pulllog.broker import Broker
    async with Broker(data_dir=tmp_path, port=0) as broker:
        broker.topics.create("own", 1, {})
        rule = broker.faults.fail(HEARTBEAT, ErrorCode.rebalance_in_progress, group="own")
        async with Producer(broker.bootstrap_servers, retry_backoff_ms=10) as producer:
            await producer.send_and_wait("own", b"x")  # a Produce is no Heartbeat: untouched
        assert rule.fired == 0 and broker.faults
        assert log_end_offset(broker, "own") == 1
        broker.faults.clear()
        assert not broker.faults


def test_every_spreads_a_rule_over_the_matching_requests(pulllog_broker: BrokerThread) -> None:
    create_topic(pulllog_broker, "spread")
    rule = pulllog_broker.faults.fail(PRODUCE, ErrorCode.not_leader_or_follower, topic="spread", every=3, times=2)
    batch = build_batch([(b"k", b"v")])
    with WireClient(pulllog_broker.port) as c:
        codes = [produce(c, "spread", 0, batch).responses[0].partition_responses[0].error_code for _ in range(8)]
    refused = ErrorCode.not_leader_or_follower
    assert codes == [ErrorCode.none, ErrorCode.none, refused, ErrorCode.none, ErrorCode.none, refused,
                     ErrorCode.none, ErrorCode.none]
    assert (rule.matched, rule.fired) == (6, 2)  # spent after the 6th: later requests do not count
    assert log_end_offset(pulllog_broker, "spread") == 6


def test_observe_counts_requests_and_changes_nothing(pulllog_broker: BrokerThread) -> None:
    create_topic(pulllog_broker, "watched")
    seen = pulllog_broker.faults.observe(PRODUCE, topic="watched")
    with WireClient(pulllog_broker.port) as c:
        offsets = [produce(c, "watched", 0, build_batch([(b"k", b"v")])).responses[0].partition_responses[0].base_offset
                   for _ in range(3)]
    assert offsets == [0, 1, 2] and seen.fired == 3
