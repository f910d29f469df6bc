"""Transactions in a partition log: open transactions hold the last stable offset, markers
end them, aborts go to the segment's ``.txnindex`` (Kafka's format), and all of it survives
clean restarts, crashes, truncation, retention and compaction."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from pulllog.log import Log, LogConfig
from pulllog.log.cleaner import clean
from pulllog.log.producer_state import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
    decode_snapshot,
)
from pulllog.records import build_batch

T0 = 1_700_000_000_000


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def open_log(directory: Path, **config: object) -> Log:
    return Log.open(directory, LogConfig(**config), clock=Clock())  # type: ignore[arg-type]


class Producer:
    """A transactional producer's batches, sequence numbers kept as a client keeps them."""

    def __init__(self, pid: int, epoch: int = 0) -> None:
        self.pid, self.epoch, self.seq = pid, epoch, 0

    def batch(self, count: int = 1, *, key: bytes | None = None, transactional: bool = True) -> bytes:
        data = build_batch([(key, b"%d-%d" % (self.pid, self.seq + i), T0) for i in range(count)],
                           producer_id=self.pid, producer_epoch=self.epoch, base_sequence=self.seq,
                           transactional=transactional)
        self.seq += count
        return data


def plain(value: bytes = b"x", key: bytes | None = None) -> bytes:
    return build_batch([(key, value, T0)])


def txnindex(log: Log) -> dict[int, list[tuple[int, ...]]]:
    """Every segment's .txnindex, decoded by hand from Kafka's 34-byte entries."""
    out: dict[int, list[tuple[int, ...]]] = {}
    for path in sorted(log.directory.glob("*.txnindex")):
        data = path.read_bytes()
        assert len(data) % 34 == 0
        out[int(path.name.split(".")[0])] = [struct.unpack_from(">hqqqq", data, p) for p in range(0, len(data), 34)]
    return out


# ---------------------------------------------------------------------------- LSO and markers


def test_an_open_transaction_holds_the_lso_at_its_first_offset_until_commit(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    p = Producer(7)
    log.append(plain())
    assert log.last_stable_offset == 1
    log.append(p.batch(2))  # offsets 1-2
    log.append(plain())  # 3: after the transaction's start, so not stable either
    assert log.last_stable_offset == 1 and log.high_watermark == 4
    assert log.write_txn_marker(7, 0, True, coordinator_epoch=0) == 4
    assert log.last_stable_offset == log.high_watermark == 5
    assert log.aborted_transactions(0, 5) == []
    assert txnindex(log) == {}, "a commit is not indexed"
    [marker] = [b for b in log.read_batches(4)]
    assert marker.header.is_control and marker.header.producer_id == 7


def test_an_abort_is_indexed_in_kafkas_format(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    p = Producer(9, epoch=3)
    log.append(plain())
    log.append(p.batch(2))  # 1-2
    assert log.write_txn_marker(9, 3, False, coordinator_epoch=5) == 3
    assert log.last_stable_offset == 4
    assert log.aborted_transactions(0, 4) == [(9, 1)]
    # version 0, producer id, first offset, last offset (the marker), LSO after the abort
    assert txnindex(log) == {0: [(0, 9, 1, 3, 4)]}
    view = {v.producer_id: v for v in log.producer_states()}[9]
    assert (view.producer_epoch, view.coordinator_epoch, view.current_txn_start_offset) == (3, 5, -1)


def test_the_lso_is_the_oldest_open_transaction_and_each_abort_records_the_lso_after_it(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    a, b = Producer(1), Producer(2)
    log.append(a.batch())  # 0
    log.append(b.batch())  # 1
    log.append(a.batch())  # 2
    assert log.last_stable_offset == 0
    assert log.write_txn_marker(2, 0, False, 0) == 3
    assert log.last_stable_offset == 0, "a's transaction is still open"
    assert log.write_txn_marker(1, 0, False, 0) == 4
    assert log.last_stable_offset == 5
    assert txnindex(log) == {0: [(0, 2, 1, 3, 0), (0, 1, 0, 4, 5)]}
    assert log.aborted_transactions(0, 5) == [(2, 1), (1, 0)]
    assert log.producer_states()[0].current_txn_start_offset == -1


def test_aborted_transactions_are_those_meeting_the_fetched_range(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    a = Producer(1)
    log.append(a.batch(2))  # 0-1
    log.write_txn_marker(1, 0, False, 0)  # 2
    log.append(plain())  # 3
    log.append(a.batch(2))  # 4-5
    log.write_txn_marker(1, 0, False, 0)  # 6
    assert log.aborted_transactions(0, 7) == [(1, 0), (1, 4)]
    assert log.aborted_transactions(3, 7) == [(1, 4)], "the first ended before the fetch offset"
    assert log.aborted_transactions(0, 4) == [(1, 0)], "the second starts at the upper bound"
    assert log.aborted_transactions(2, 3) == [(1, 0)], "the marker itself is in the range"


def test_an_empty_transaction_moves_nothing_and_indexes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(plain())
    log.write_txn_marker(4, 0, False, 0)
    assert log.last_stable_offset == 2 and txnindex(log) == {}


def test_markers_from_a_fenced_producer_or_coordinator_are_refused_and_not_written(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    p = Producer(5, epoch=2)
    log.append(p.batch())
    log.write_txn_marker(5, 2, True, coordinator_epoch=4)
    log.append(p.batch())
    end = log.log_end_offset
    with pytest.raises(InvalidProducerEpochError):
        log.write_txn_marker(5, 1, False, coordinator_epoch=4)
    with pytest.raises(TransactionCoordinatorFencedError):
        log.write_txn_marker(5, 2, False, coordinator_epoch=3)
    assert log.log_end_offset == end and log.last_stable_offset == 2
    # A coordinator fencing the producer aborts with the bumped epoch: accepted.
    log.write_txn_marker(5, 3, False, coordinator_epoch=4)
    assert log.last_stable_offset == log.log_end_offset
    with pytest.raises(InvalidProducerEpochError):
        log.append(p.batch())  # the old instance is fenced now


def test_a_plain_batch_from_a_producer_inside_a_transaction_is_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    p = Producer(3)
    log.append(p.batch())
    with pytest.raises(InvalidTxnStateError):
        log.append(p.batch(transactional=False))
    assert log.log_end_offset == 1


def test_a_producer_with_an_open_transaction_does_not_expire(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(Producer(1).batch())
    q = Producer(2)
    log.append(q.batch())
    log.write_txn_marker(2, 0, True, 0)
    assert log.remove_expired_producers(T0 + 10**9, expiration_ms=1000) == 1
    assert [v.producer_id for v in log.producer_states()] == [1]
    assert log.last_stable_offset == 0


# ---------------------------------------------------------------------------- restarts


def test_a_clean_restart_keeps_the_open_transaction_in_the_snapshot(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    p = Producer(8)
    log.append(plain())
    log.append(p.batch(2))  # 1-2
    log.write_txn_marker(8, 0, False, 1)  # 3
    log.append(p.batch())  # 4: a second transaction, left open
    log.close()
    snapshot = decode_snapshot((tmp_path / "t-0" / f"{5:020d}.snapshot").read_bytes())
    assert (snapshot[8].current_txn_first_offset, snapshot[8].coordinator_epoch) == (4, 1)
    log = open_log(tmp_path / "t-0")
    assert log.recovery.clean and log.last_stable_offset == 4
    assert log.aborted_transactions(0, 5) == [(8, 1)]
    log.write_txn_marker(8, 0, False, 1)
    assert log.last_stable_offset == 6
    assert log.aborted_transactions(0, 6) == [(8, 1), (8, 4)]


def test_a_crash_rebuilds_open_transactions_and_the_txnindex_from_the_log(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    p, q = Producer(1), Producer(2)
    log.append(p.batch())  # 0
    log.append(q.batch())  # 1
    log.write_txn_marker(1, 0, False, 0)  # 2
    log.append(p.batch())  # 3
    # No close: no snapshot, no clean-shutdown marker. The index is lost too.
    for path in (tmp_path / "t-0").glob("*.txnindex"):
        path.unlink()
    log = open_log(tmp_path / "t-0")
    assert not log.recovery.clean
    assert log.last_stable_offset == 1, "q's transaction is still open"
    assert txnindex(log) == {0: [(0, 1, 0, 2, 1)]}
    log.write_txn_marker(2, 0, True, 0)
    assert log.last_stable_offset == 3


def test_a_transaction_open_across_a_roll_survives_a_crash(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, segment_bytes=400)
    p = Producer(6)
    log.append(p.batch())  # offset 0, in the first segment
    while len(log.segments) < 3:
        log.append(plain(b"v" * 50))
    first_base_of_active = log.active_segment.base_offset
    log = open_log(directory, segment_bytes=400)  # crash: the snapshot at the last roll + replay
    assert log.last_stable_offset == 0
    marker = log.write_txn_marker(6, 0, False, 0)
    assert log.last_stable_offset == marker + 1
    # The entry is in the marker's segment, its data in the first one: a fetch there finds it.
    assert txnindex(log) == {first_base_of_active: [(0, 6, 0, marker, marker + 1)]}
    assert log.aborted_transactions(0, 1) == [(6, 0)]


def test_truncation_drops_the_abort_and_reopens_the_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    p = Producer(2)
    log.append(p.batch(2))
    marker = log.write_txn_marker(2, 0, False, 0)
    log.truncate_to(marker)
    assert txnindex(log) == {}
    assert log.aborted_transactions(0, 10) == []
    assert log.last_stable_offset == 0


# ---------------------------------------------------------------------------- retention, compaction


def test_retention_deletes_a_segments_txnindex_with_it(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=300, retention_bytes=0)
    p = Producer(1)
    log.append(p.batch())
    log.write_txn_marker(1, 0, False, 0)
    assert txnindex(log) == {0: [(0, 1, 0, 1, 2)]}
    while len(log.segments) < 3:
        log.append(plain(b"v" * 50))
    assert log.delete_old_segments() >= 1
    assert 0 not in txnindex(log)
    assert log.aborted_transactions(log.log_start_offset, log.log_end_offset) == []


def test_compaction_carries_the_txnindex_into_the_cleaned_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", cleanup_policy="compact", segment_bytes=10_000)
    p = Producer(1)
    log.append(plain(b"old", key=b"k"))  # 0
    log.roll()
    log.append(p.batch(key=b"k"))  # 1: aborted, must not supersede offset 0
    log.write_txn_marker(1, 0, False, 0)  # 2
    log.append(plain(b"new", key=b"j"))  # 3
    log.roll()
    log.append(plain(b"tail", key=b"z"))
    assert txnindex(log) == {1: [(0, 1, 1, 2, 3)]}
    stats = clean(log)
    assert stats.segments_cleaned >= 2
    assert txnindex(log) == {0: [(0, 1, 1, 2, 3)]}, "the old segments' entries, under the cleaned base"
    assert log.aborted_transactions(0, log.log_end_offset) == [(1, 1)]
    log.close()
    log = open_log(tmp_path / "t-0", cleanup_policy="compact", segment_bytes=10_000)
    assert log.aborted_transactions(0, log.log_end_offset) == [(1, 1)]


class Crash(Exception):
    """Stands in for the process dying at one step of the compaction swap."""


@pytest.mark.parametrize(
    ("method", "after", "when"),
    [("mark_deleted", 0, None), ("mark_deleted", 1, None), ("rename_suffix", 0, ".swap")],
    ids=["swap-before-delete", "swap-half-deleted", "swap-before-rename"],
)
def test_a_crash_mid_swap_keeps_the_aborted_transactions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str, after: int, when: str | None
) -> None:
    from pulllog.log import LogSegment

    directory = tmp_path / "t-0"
    log = open_log(directory, cleanup_policy="compact", segment_bytes=10_000)
    p = Producer(1)
    log.append(plain(b"old", key=b"k"))
    log.roll()
    log.append(p.batch(key=b"k"))  # 1
    log.write_txn_marker(1, 0, False, 0)  # 2
    log.roll()
    log.append(plain(b"new", key=b"j"))
    log.roll()
    log.append(plain(b"tail", key=b"z"))
    log.flush()
    real = getattr(LogSegment, method)
    calls = [0]

    def crashing(self: LogSegment, *args: object) -> object:
        if when is None or args[0] == when:
            if calls[0] >= after:
                raise Crash(method)
            calls[0] += 1
        return real(self, *args)

    monkeypatch.setattr(LogSegment, method, crashing)
    with pytest.raises(Crash):
        clean(log)
    monkeypatch.undo()
    reopened = open_log(directory, cleanup_policy="compact", segment_bytes=10_000)
    assert not [p for p in directory.iterdir() if p.suffix in (".swap", ".cleaned", ".deleted")]
    assert reopened.aborted_transactions(0, reopened.log_end_offset) == [(1, 1)]
    assert sum(len(entries) for entries in txnindex(reopened).values()) == 1
