"""flush.ms and flush.messages fsyncs run on a worker thread: a slow disk never stalls the
event loop.

A gate around ``os.fsync`` holds the fsync of one partition's log file (the real fsync runs
once the gate opens, a delay fault as kfake injects one): while it is held, the broker still
answers other requests, and the partition's recovery point moves only once the fsync is done.
With flush.messages the Produce answer itself waits for the fsync (as in Kafka), requests
that arrive meanwhile share the next fsync, and a failed fsync answers KAFKA_STORAGE_ERROR.
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from pathlib import Path

import pytest

from kio.schema.errors import ErrorCode

from kafka_wire import WireClient, produce_request
from pulllog import Producer
from pulllog.records import build_batch
from pulllog.testing import BrokerThread
from waits import TIMEOUT_S, block_until, wait_until


class FsyncGate:
    """Holds every fsync of ``<partition dir>/*.log`` until ``release`` is set; counts them,
    and fails the first ``failures`` of them with EIO (after the gate) instead of syncing."""

    def __init__(self, partition_dir: str, *, failures: int = 0) -> None:
        self.partition_dir = partition_dir
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0
        self.failures = failures
        self._real = os.fsync

    def fsync(self, fd: int) -> None:
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = ""
        if f"/{self.partition_dir}/" in path and path.endswith(".log"):
            self.calls += 1
            self.entered.set()
            self.release.wait(TIMEOUT_S)
            if self.failures:
                self.failures -= 1
                raise OSError(errno.EIO, os.strerror(errno.EIO))
        self._real(fd)


def _recovery_point(broker: BrokerThread, topic: str) -> int:
    # Read from the test's thread on purpose: the broker's loop may be the thing that is stuck.
    return broker.broker.topics.partition_log(topic, 0).recovery_point  # type: ignore[union-attr]


async def test_a_slow_flush_ms_fsync_does_not_stall_the_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = FsyncGate("slow-0")
    monkeypatch.setattr(os, "fsync", gate.fsync)
    with BrokerThread(tmp_path / "data", properties={"log.flush.scheduler.interval.ms": "50"}) as broker:
        broker.call(lambda: broker.broker.topics.create("slow", 1, {"flush.ms": "1"}))
        broker.call(lambda: broker.broker.topics.create("fast", 1))
        try:
            async with Producer(broker.bootstrap_servers, acks=1) as producer:
                await asyncio.wait_for(producer.send_and_wait("slow", b"to be flushed"), TIMEOUT_S)
                await wait_until(gate.entered.is_set, "the flush.ms fsync of slow-0 started")
                # The fsync is held: the loop must still answer a Produce to another topic.
                answered = await asyncio.wait_for(producer.send_and_wait("fast", b"meanwhile"), TIMEOUT_S)
                assert answered.offset == 0
                assert _recovery_point(broker, "slow") == 0  # not on disk yet, not claimed to be
        finally:
            gate.release.set()
        await wait_until(lambda: _recovery_point(broker, "slow") == 1, "the recovery point moved after the fsync")


def _log_end_offset(broker: BrokerThread, topic: str) -> int:
    return broker.broker.topics.partition_log(topic, 0).log_end_offset  # type: ignore[union-attr]


def _produce_error(answer: object) -> int:
    return answer.responses[0].partition_responses[0].error_code  # type: ignore[attr-defined]


API_VERSIONS = ("api_versions", 3, {"client_software_name": "test", "client_software_version": "1"})
METADATA = ("metadata", 12, {"topics": None, "allow_auto_topic_creation": False,
                             "include_topic_authorized_operations": False})


def test_a_flush_messages_fsync_runs_off_the_loop_and_the_answer_waits_for_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = FsyncGate("held-0")
    monkeypatch.setattr(os, "fsync", gate.fsync)
    with BrokerThread(tmp_path / "data") as broker:
        broker.call(lambda: broker.broker.topics.create("held", 1, {"flush.messages": "1"}))
        try:
            with WireClient(broker.port) as producer, WireClient(broker.port) as other:
                produced = producer.send("produce", 9, produce_request("held", 0, build_batch([(None, b"durable")])))
                after = producer.send(*API_VERSIONS)  # pipelined behind the Produce
                assert gate.entered.wait(TIMEOUT_S), "the flush.messages fsync of held-0 never started"
                # The fsync is held on a worker thread: the loop answers another connection...
                other.call(*API_VERSIONS)
                other.call(*METADATA)
                # ...while the Produce waits for its fsync, and the request after it for its turn.
                assert not producer.has_answer()
                assert _recovery_point(broker, "held") == 0
                gate.release.set()
                correlation_id, answer = producer.receive("produce", 9)
                assert _recovery_point(broker, "held") == 1  # on disk before the answer came
                assert (correlation_id, _produce_error(answer)) == (produced, ErrorCode.none)
                assert producer.receive("api_versions", 3)[0] == after
        finally:
            gate.release.set()


def test_produce_requests_arriving_during_a_flush_share_the_next_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = FsyncGate("shared-0")
    monkeypatch.setattr(os, "fsync", gate.fsync)
    with BrokerThread(tmp_path / "data") as broker:
        broker.call(lambda: broker.broker.topics.create("shared", 1, {"flush.messages": "1"}))
        try:
            with WireClient(broker.port) as first, WireClient(broker.port) as pipelined, \
                    WireClient(broker.port) as another:
                first.send("produce", 9, produce_request("shared", 0, build_batch([(None, b"0")])))
                assert gate.entered.wait(TIMEOUT_S), "the first fsync never started"
                # While it is held: three requests pipelined on one connection, each sent once the
                # one before is appended (so each arrives while the connection awaits an answer),
                # and one on another connection.
                sent = []
                for i in (1, 2, 3):
                    sent.append(pipelined.send("produce", 9, produce_request("shared", 0, build_batch([(None, b"%d" % i)]))))
                    block_until(lambda: _log_end_offset(broker, "shared") == i + 1, f"record {i} is appended")
                another.send("produce", 9, produce_request("shared", 0, build_batch([(None, b"4")])))
                block_until(lambda: _log_end_offset(broker, "shared") == 5, "all five records are appended")
                gate.release.set()
                assert _produce_error(first.receive("produce", 9)[1]) == ErrorCode.none
                answers = [pipelined.receive("produce", 9) for _ in sent]
                assert [correlation_id for correlation_id, _ in answers] == sent  # in request order
                assert [_produce_error(a) for _, a in answers] == [ErrorCode.none] * 3
                assert _produce_error(another.receive("produce", 9)[1]) == ErrorCode.none
        finally:
            gate.release.set()
        assert _recovery_point(broker, "shared") == 5
        assert gate.calls == 2  # the held fsync, then one for the four requests that came meanwhile


def test_a_failed_flush_messages_fsync_answers_storage_error_and_keeps_the_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = FsyncGate("eio-0", failures=1)
    gate.release.set()
    monkeypatch.setattr(os, "fsync", gate.fsync)
    with BrokerThread(tmp_path / "data") as broker:
        broker.call(lambda: broker.broker.topics.create("eio", 1, {"flush.messages": "1"}))
        with WireClient(broker.port) as producer:
            failed = producer.call("produce", 9, produce_request("eio", 0, build_batch([(None, b"first")])))
            assert _produce_error(failed) == ErrorCode.kafka_storage_error
            assert _recovery_point(broker, "eio") == 0  # nothing claimed to be on disk
            # The retry (a plain producer appends it again) is flushed with the first record.
            retried = producer.call("produce", 9, produce_request("eio", 0, build_batch([(None, b"first")])))
            assert _produce_error(retried) == ErrorCode.none
            assert _recovery_point(broker, "eio") == 2
        assert gate.calls == 2


# The broker's own appends: with log.flush.interval.messages=1 every append of the group and
# transaction coordinators (and every marker) makes a flush due. One partition per internal topic.
OWN_APPENDS = {"log.flush.interval.messages": "1", "offsets.topic.num.partitions": "1",
               "transaction.state.log.num.partitions": "1"}


def _create(client: WireClient, name: str) -> None:
    answer = client.call("create_topics", 7, {
        "topics": [{"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout": 5000, "validate_only": False})
    assert answer.topics[0].error_code == ErrorCode.none


def _offset_commit(offset: int) -> dict[str, object]:
    return {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                     "committed_leader_epoch": -1, "committed_metadata": ""}]}]}


def _offsets_recovery_point(broker: BrokerThread) -> int:
    return _recovery_point(broker, "__consumer_offsets")


def test_an_offset_commit_is_answered_after_its_fsync_which_runs_off_the_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = FsyncGate("__consumer_offsets-0")
    monkeypatch.setattr(os, "fsync", gate.fsync)
    with BrokerThread(tmp_path / "data", properties=OWN_APPENDS) as broker:
        try:
            with WireClient(broker.port) as consumer, WireClient(broker.port) as other:
                _create(other, "t")
                consumer.send("offset_commit", 8, _offset_commit(7))
                assert gate.entered.wait(TIMEOUT_S), "the fsync of __consumer_offsets-0 never started"
                other.call(*API_VERSIONS)  # the loop answers another connection meanwhile
                other.call(*METADATA)
                assert not consumer.has_answer()
                assert _offsets_recovery_point(broker) == 0
                gate.release.set()
                _, answer = consumer.receive("offset_commit", 8)
                assert _offsets_recovery_point(broker) == 1  # on disk before the answer came
                assert answer.topics[0].partitions[0].error_code == ErrorCode.none
        finally:
            gate.release.set()


def test_a_failed_offset_commit_fsync_answers_storage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = FsyncGate("__consumer_offsets-0", failures=1)
    gate.release.set()
    monkeypatch.setattr(os, "fsync", gate.fsync)
    with BrokerThread(tmp_path / "data", properties=OWN_APPENDS) as broker, WireClient(broker.port) as consumer:
        _create(consumer, "t")
        failed = consumer.call("offset_commit", 8, _offset_commit(7))
        assert failed.topics[0].partitions[0].error_code == ErrorCode.kafka_storage_error
        assert _offsets_recovery_point(broker) == 0
        retried = consumer.call("offset_commit", 8, _offset_commit(7))
        assert retried.topics[0].partitions[0].error_code == ErrorCode.none
        assert _offsets_recovery_point(broker) == 2


def test_end_txn_is_answered_after_the_fsync_of_its_state_which_runs_off_the_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = FsyncGate("__transaction_state-0")
    gate.release.set()  # InitProducerId and AddPartitionsToTxn pass; EndTxn's fsync is held
    monkeypatch.setattr(os, "fsync", gate.fsync)
    with BrokerThread(tmp_path / "data", properties=OWN_APPENDS) as broker:
        try:
            with WireClient(broker.port) as producer, WireClient(broker.port) as other:
                _create(other, "t")
                init = producer.call("init_producer_id", 4, {"transactional_id": "tx", "transaction_timeout": 60_000,
                                                             "producer_id": -1, "producer_epoch": -1})
                assert init.error_code == ErrorCode.none
                ids = {"producer_id": init.producer_id, "producer_epoch": init.producer_epoch}
                added = producer.call("add_partitions_to_txn", 3, {
                    "v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": init.producer_id,
                    "v3_and_below_producer_epoch": init.producer_epoch,
                    "v3_and_below_topics": [{"name": "t", "partitions": [0]}]})
                assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
                state_written = _recovery_point(broker, "__transaction_state")
                gate.release.clear()
                gate.entered.clear()
                producer.send("end_txn", 3, {"transactional_id": "tx", **ids, "committed": True})
                assert gate.entered.wait(TIMEOUT_S), "the fsync of __transaction_state-0 never started"
                other.call(*API_VERSIONS)  # the loop answers another connection meanwhile
                other.call(*METADATA)
                assert not producer.has_answer()
                assert _recovery_point(broker, "__transaction_state") == state_written
                gate.release.set()
                _, answer = producer.receive("end_txn", 3)
                assert answer.error_code == ErrorCode.none
                # PrepareCommit and CompleteCommit, and the marker, are on disk before the answer
                assert _recovery_point(broker, "__transaction_state") == state_written + 2
                assert _recovery_point(broker, "t") == 1
        finally:
            gate.release.set()


def test_a_failed_transaction_state_fsync_answers_not_coordinator(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = FsyncGate("__transaction_state-0", failures=1)
    gate.release.set()
    monkeypatch.setattr(os, "fsync", gate.fsync)
    request = {"transactional_id": "tx", "transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1}
    with BrokerThread(tmp_path / "data", properties=OWN_APPENDS) as broker, WireClient(broker.port) as producer:
        # As a failed append: the client looks the coordinator up again and retries.
        assert producer.call("init_producer_id", 4, request).error_code == ErrorCode.not_coordinator
        assert _recovery_point(broker, "__transaction_state") == 0
        assert producer.call("init_producer_id", 4, request).error_code == ErrorCode.none
        assert _recovery_point(broker, "__transaction_state") == 2


def test_write_txn_markers_answers_after_the_markers_fsync_and_storage_error_when_it_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = FsyncGate("m-0", failures=1)
    gate.release.set()
    monkeypatch.setattr(os, "fsync", gate.fsync)
    request = {"markers": [{"producer_id": 7, "producer_epoch": 0, "transaction_result": False,
                            "topics": [{"name": "m", "partition_indexes": [0]}], "coordinator_epoch": 0}]}
    with BrokerThread(tmp_path / "data", properties=OWN_APPENDS) as broker, WireClient(broker.port) as admin:
        _create(admin, "m")
        failed = admin.call("write_txn_markers", 1, request)
        assert failed.markers[0].topics[0].partitions[0].error_code == ErrorCode.kafka_storage_error
        assert _recovery_point(broker, "m") == 0
        retried = admin.call("write_txn_markers", 1, request)
        assert retried.markers[0].topics[0].partitions[0].error_code == ErrorCode.none
        assert _recovery_point(broker, "m") == 2
