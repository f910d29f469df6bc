"""The transaction coordinator over a real TopicManager (``__transaction_state`` on disk), no
wire. Markers go to a writer that records them (the broker's writes real control batches:
tests/txn/test_transactions_end_to_end.py); it can be told to fail partitions, as a full disk
would. Time is a clock the test moves."""

from __future__ import annotations

import errno
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from pulllog.broker.topics import TopicManager
from pulllog.log import LogConfig
from pulllog.txn.coordinator import (
    AddPartitionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    InitProducerIdResult,
    ListTransactionsRequest,
    TransactionCoordinator,
)
from pulllog.txn.records import TRANSACTION_STATE_TOPIC

TX = "tx-1"
A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


class RecordingMarkers:
    """Records each marker call; partitions in ``failing`` answer KAFKA_STORAGE_ERROR."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, bool, tuple[tuple[str, int], ...]]] = []
        self.failing: set[tuple[str, int]] = set()

    def __call__(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                 partitions: Sequence[tuple[str, int]]) -> Mapping[tuple[str, int], ErrorCode]:
        self.calls.append((producer_id, producer_epoch, commit, tuple(partitions)))
        return {tp: ErrorCode.kafka_storage_error if tp in self.failing else ErrorCode.none for tp in partitions}


class FullDisk:
    """The broker's topics, except that appends to ``__transaction_state`` raise ENOSPC while
    ``full`` is set (a real TopicManager underneath)."""

    def __init__(self, topics: TopicManager) -> None:
        self.topics = topics
        self.full = False

    def partition_logs(self, name: str) -> Any:
        logs = self.topics.partition_logs(name)
        if logs is None or name != TRANSACTION_STATE_TOPIC:
            return logs
        return [_FailingAppends(log, self) for log in logs]

    def create(self, name: str, partitions: int, configs: Mapping[str, str] | None = None) -> object:
        return self.topics.create(name, partitions, configs)

    def offline_reason(self, name: str) -> str | None:
        return self.topics.offline_reason(name)


class _FailingAppends:
    def __init__(self, log: Any, disk: FullDisk) -> None:
        self.log, self.disk = log, disk

    def __getattr__(self, name: str) -> Any:
        return getattr(self.log, name)

    def append(self, data: bytes) -> Any:
        if self.disk.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.log.append(data)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000_000

    def __call__(self) -> int:
        return self.now


class Setup:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.clock = Clock()
        self.markers = RecordingMarkers()
        self.ids = iter(range(1000, 2000))
        self.topics = TopicManager(data_dir, LogConfig())
        self.topics.load()
        self.coordinator = self.new_coordinator()

    def new_coordinator(self) -> TransactionCoordinator:
        self.disk = FullDisk(self.topics)
        return TransactionCoordinator(self.disk, self.markers, lambda: next(self.ids), state_partitions=3,
                                      clock=self.clock)

    def restart(self) -> TransactionCoordinator:
        """A new coordinator (and topic manager) over the same data directory, as after a crash."""
        self.topics.close()
        self.topics = TopicManager(self.data_dir, LogConfig())
        self.topics.load()
        self.coordinator = self.new_coordinator()
        self.coordinator.load()
        return self.coordinator

    def init(self, timeout_ms: int = 60_000, producer_id: int = -1, epoch: int = -1) -> InitProducerIdResult:
        return self.coordinator.init_producer_id(InitProducerIdRequest(TX, timeout_ms, producer_id, epoch))

    def add(self, producer: InitProducerIdResult, *partitions: tuple[str, int]) -> ErrorCode:
        codes = self.coordinator.add_partitions(
            AddPartitionsRequest(TX, producer.producer_id, producer.producer_epoch, partitions))
        (code,) = set(codes.values())
        return code

    def end(self, producer: InitProducerIdResult, commit: bool) -> ErrorCode:
        return self.coordinator.end_txn(EndTxnRequest(TX, producer.producer_id, producer.producer_epoch, commit))

    def state(self) -> str:
        return self.coordinator.describe(TX).state


@pytest.fixture
def s(tmp_path: Path) -> Iterator[Setup]:
    setup = Setup(tmp_path)
    yield setup
    setup.topics.close()


def test_a_new_id_gets_a_producer_id_and_epoch_0_logged_in_transaction_state(s: Setup) -> None:
    first = s.init()
    assert (first.error, first.producer_id, first.producer_epoch) == (ErrorCode.none, 1000, 0)
    assert s.topics.find(TRANSACTION_STATE_TOPIC) is not None
    assert s.restart().describe(TX).producer_epoch == 0
    again = s.init()
    assert (again.producer_id, again.producer_epoch) == (1000, 1)


@pytest.mark.parametrize("timeout_ms", [0, 900_001])
def test_a_timeout_over_the_maximum_is_refused(s: Setup, timeout_ms: int) -> None:
    assert s.init(timeout_ms).error == ErrorCode.invalid_transaction_timeout
    assert s.coordinator.describe(TX).error == ErrorCode.transactional_id_not_found


def test_commit_writes_prepare_then_markers_then_complete(s: Setup) -> None:
    p = s.init()
    assert s.add(p, A0, B0) == ErrorCode.none
    assert s.add(p, A1) == ErrorCode.none
    assert s.state() == "Ongoing"
    assert s.end(p, commit=True) == ErrorCode.none
    assert s.markers.calls == [(p.producer_id, p.producer_epoch, True, (A0, A1, B0))]
    assert s.state() == "CompleteCommit" and s.coordinator.describe(TX).partitions == ()
    assert s.end(p, commit=True) == ErrorCode.none  # a retry of a complete commit
    assert s.end(p, commit=False) == ErrorCode.invalid_txn_state
    assert len(s.markers.calls) == 1
    assert s.restart().describe(TX).state == "CompleteCommit"


def test_end_txn_without_a_transaction_is_an_invalid_state(s: Setup) -> None:
    p = s.init()
    assert s.end(p, commit=True) == ErrorCode.invalid_txn_state
    assert s.end(InitProducerIdResult(ErrorCode.none, p.producer_id + 1, 0), commit=True) == \
        ErrorCode.invalid_producer_id_mapping


def test_a_new_instance_fences_the_old_one_and_aborts_its_transaction_first(s: Setup) -> None:
    old = s.init()
    s.add(old, A0)
    assert s.init().error == ErrorCode.concurrent_transactions
    # The abort went out with a bumped epoch, so the old instance's late writes are refused.
    assert s.markers.calls == [(old.producer_id, old.producer_epoch + 1, False, (A0,))]
    assert s.state() == "CompleteAbort"
    new = s.init()  # the client's retry
    assert (new.error, new.producer_epoch) == (ErrorCode.none, old.producer_epoch + 2)
    assert s.add(old, A1) == ErrorCode.producer_fenced
    assert s.end(old, commit=True) == ErrorCode.producer_fenced


def test_markers_that_fail_are_retried_and_a_restart_completes_the_commit(s: Setup) -> None:
    p = s.init()
    s.add(p, A0, B0)
    s.markers.failing = {B0}
    assert s.end(p, commit=True) == ErrorCode.none  # decided: PrepareCommit is logged
    d = s.coordinator.describe(TX)
    assert (d.state, d.partitions) == ("PrepareCommit", (B0,))  # only the partition still without its marker
    assert s.add(p, A1) == ErrorCode.concurrent_transactions
    assert s.init().error == ErrorCode.concurrent_transactions
    s.coordinator.complete_pending()
    assert s.state() == "PrepareCommit"
    # A crash now: the log says PrepareCommit with both partitions; loading resumes the markers.
    s.markers.failing = set()
    s.markers.calls.clear()
    assert s.restart().describe(TX).state == "CompleteCommit"
    assert s.markers.calls == [(p.producer_id, p.producer_epoch, True, (A0, B0))]


def test_an_expired_transaction_is_fenced_and_aborted(s: Setup) -> None:
    p = s.init(timeout_ms=10_000)
    s.add(p, A0)
    s.clock.now += 10_000
    assert s.coordinator.abort_timed_out() == 0
    s.clock.now += 1
    assert s.coordinator.abort_timed_out() == 1
    assert s.markers.calls == [(p.producer_id, p.producer_epoch + 1, False, (A0,))]
    assert s.state() == "CompleteAbort"
    assert s.end(p, commit=True) == ErrorCode.producer_fenced


def test_an_ongoing_transaction_survives_a_restart_and_then_times_out(s: Setup) -> None:
    p = s.init(timeout_ms=10_000)
    s.add(p, A0, A1)
    coordinator = s.restart()
    assert coordinator.describe(TX).partitions == (A0, A1)
    s.clock.now += 10_001
    assert coordinator.abort_timed_out() == 1
    assert s.markers.calls == [(p.producer_id, p.producer_epoch + 1, False, (A0, A1))]


def test_an_idle_transactional_id_expires(s: Setup) -> None:
    p = s.init()
    s.add(p, A0)
    s.end(p, commit=False)
    s.clock.now += 7 * 24 * 3600 * 1000 - 1
    assert s.coordinator.expire_transactional_ids() == 0
    s.clock.now += 1
    assert s.coordinator.expire_transactional_ids() == 1
    assert s.coordinator.describe(TX).error == ErrorCode.transactional_id_not_found
    assert s.restart().describe(TX).error == ErrorCode.transactional_id_not_found
    assert s.init().producer_id != p.producer_id  # a new producer id for the returning id


def test_verify_answers_per_partition(s: Setup) -> None:
    p = s.init()
    s.add(p, A0)
    verify = s.coordinator.verify
    assert verify(TX, p.producer_id, p.producer_epoch, [A0, A1]) == {A0: ErrorCode.none,
                                                                     A1: ErrorCode.transaction_abortable}
    assert verify(TX, p.producer_id, p.producer_epoch - 1, [A0]) == {A0: ErrorCode.producer_fenced}
    assert verify("other", p.producer_id, p.producer_epoch, [A0]) == {A0: ErrorCode.invalid_producer_id_mapping}
    s.end(p, commit=True)
    assert verify(TX, p.producer_id, p.producer_epoch, [A0]) == {A0: ErrorCode.transaction_abortable}


def test_kip_360_a_producer_bumps_its_own_epoch_and_a_retry_gets_the_same_one(s: Setup) -> None:
    p = s.init()
    bumped = s.init(producer_id=p.producer_id, epoch=p.producer_epoch)
    assert (bumped.producer_id, bumped.producer_epoch) == (p.producer_id, p.producer_epoch + 1)
    retry = s.init(producer_id=p.producer_id, epoch=p.producer_epoch)
    assert retry.producer_epoch == bumped.producer_epoch
    assert s.init(producer_id=p.producer_id + 7, epoch=0).error == ErrorCode.producer_fenced
    assert s.init(producer_id=p.producer_id, epoch=p.producer_epoch - 1).error == ErrorCode.producer_fenced


def test_an_exhausted_epoch_rotates_the_producer_id(s: Setup) -> None:
    p = s.init()
    s.coordinator.transactions[TX].producer_epoch = 2**15 - 2
    rotated = s.init()
    assert rotated.producer_id != p.producer_id and rotated.producer_epoch == 0


def test_list_filters_by_state_producer_and_pattern(s: Setup) -> None:
    p = s.init()
    s.add(p, A0)
    other = s.coordinator.init_producer_id(InitProducerIdRequest("batch-7", 60_000))
    listed = s.coordinator.list_transactions(ListTransactionsRequest(frozenset({"Ongoing", "Bogus"})))
    assert listed.unknown_states == ("Bogus",)
    assert [(t.transactional_id, t.state) for t in listed.transactions] == [(TX, "Ongoing")]
    by_producer = s.coordinator.list_transactions(ListTransactionsRequest(producer_ids=frozenset({other.producer_id})))
    assert [t.transactional_id for t in by_producer.transactions] == ["batch-7"]
    by_pattern = s.coordinator.list_transactions(ListTransactionsRequest(id_pattern="batch-\\d"))
    assert [t.transactional_id for t in by_pattern.transactions] == ["batch-7"]
    assert s.coordinator.list_transactions(ListTransactionsRequest(id_pattern="(")).error == \
        ErrorCode.invalid_regular_expression
    s.clock.now += 5_000
    only_unknown = s.coordinator.list_transactions(ListTransactionsRequest(frozenset({"Bogus"})))
    assert only_unknown.transactions == ()
    longer = s.coordinator.list_transactions(ListTransactionsRequest(frozenset({"Ongoing"}), min_duration_ms=4_000))
    assert [t.transactional_id for t in longer.transactions] == [TX]
    shorter = s.coordinator.list_transactions(ListTransactionsRequest(frozenset({"Ongoing"}), min_duration_ms=5_000))
    assert shorter.transactions == ()


def test_a_full_disk_refuses_init_with_a_retriable_error_and_logs_nothing(s: Setup) -> None:
    p = s.init()
    s.disk.full = True
    assert s.init().error == ErrorCode.not_coordinator
    assert s.coordinator.describe(TX).producer_epoch == p.producer_epoch  # unchanged
    s.disk.full = False
    assert s.init().producer_epoch == p.producer_epoch + 1


def test_a_commit_whose_complete_record_cannot_be_logged_is_completed_later(s: Setup) -> None:
    p = s.init()
    s.add(p, A0)
    calls = s.markers.calls

    class FillAfterMarkers(RecordingMarkers):
        def __call__(self, *args: Any) -> Mapping[tuple[str, int], ErrorCode]:
            s.disk.full = not self.calls  # the first markers are written; then the disk fills
            return RecordingMarkers.__call__(self, *args)

    s.coordinator.markers = FillAfterMarkers()
    assert s.end(p, commit=True) == ErrorCode.none  # decided once PrepareCommit is logged
    assert s.state() == "PrepareCommit" and s.coordinator.describe(TX).partitions == ()
    assert s.end(p, commit=True) == ErrorCode.concurrent_transactions
    s.disk.full = False
    s.coordinator.complete_pending()
    assert s.state() == "CompleteCommit"
    assert calls == []


def test_a_fence_whose_abort_cannot_be_logged_bumps_the_epoch_once(s: Setup) -> None:
    old = s.init()
    s.add(old, A0)
    s.disk.full = True
    assert s.init().error == ErrorCode.not_coordinator
    assert s.state() == "Ongoing" and s.markers.calls == []
    s.disk.full = False
    assert s.init().error == ErrorCode.concurrent_transactions
    assert s.markers.calls == [(old.producer_id, old.producer_epoch + 1, False, (A0,))]
    assert s.init().producer_epoch == old.producer_epoch + 2
