"""The log's replication pieces: high watermark, appends as follower, truncation, leader epochs."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from waits import block_until

from pulllog.log import Log
from pulllog.log.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochCache
from pulllog.log.log import FollowerAppendError
from pulllog.records import build_batch
from pulllog.records.batch import iter_batches, validate_batch


def batch(n: int, start: int = 0, **kw: object) -> bytes:
    return build_batch([(b"k%d" % (start + i), b"v%d" % (start + i), 1_700_000_000_000 + i) for i in range(n)], **kw)


def raw_log(log: Log) -> bytes:
    """Every byte of every segment, in order: what two replicas must agree on."""
    return b"".join(s.log_path.read_bytes() for s in log.segments)


def test_a_log_alone_has_its_high_watermark_at_the_log_end(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    log.append(batch(3))
    assert not log.replicated and log.high_watermark == log.log_end_offset == 3
    headers = [h for _p, h in iter_batches(raw_log(log))]
    assert [h.partition_leader_epoch for h in headers] == [-1]  # nothing stamped without a leader epoch
    assert not (tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT_FILE).exists()


def test_a_replicated_log_keeps_its_high_watermark_apart(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    log.append(batch(3))
    log.start_replication(1)
    log.append(batch(2))
    assert (log.high_watermark, log.log_end_offset) == (1, 5)
    assert log.last_stable_offset == 1
    assert log.read(1, 1 << 20, max_offset=log.high_watermark) is None
    assert log.update_high_watermark(9) and log.high_watermark == 5  # never past the log end
    assert not log.update_high_watermark(5)


def test_a_leader_stamps_its_epoch_and_starts_it_at_the_log_end(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    log.start_replication(0)
    log.become_leader(0)
    log.append(batch(2))
    log.become_leader(3)
    log.append(batch(1) + batch(1))
    headers = [h for _p, h in iter_batches(raw_log(log))]
    assert [h.partition_leader_epoch for h in headers] == [0, 3, 3]
    assert log.leader_epochs.entries == [(0, 0), (3, 2)]
    text = (tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT_FILE).read_text()
    assert text == "0\n2\n0 0\n3 2\n"  # Kafka's format: version, count, "epoch startOffset"
    data = raw_log(log)
    for pos, _header in iter_batches(data):
        validate_batch(data, pos)  # the stamp is outside the CRC'd part
    assert log.end_offset_for_epoch(3) == (3, 4)
    assert log.end_offset_for_epoch(0) == (0, 2)
    assert log.end_offset_for_epoch(1) == (0, 2)  # epochs 1, 2 wrote nothing: epoch 0's end
    assert log.end_offset_for_epoch(7) == (-1, -1)


def test_a_follower_appends_the_leaders_batches_byte_for_byte(tmp_path: Path) -> None:
    leader = Log.open(tmp_path / "leader" / "t-0")
    leader.start_replication(0)
    leader.become_leader(2)
    leader.append(batch(3))
    leader.append(batch(2, producer_id=5, producer_epoch=0, base_sequence=0))
    follower = Log.open(tmp_path / "follower" / "t-0")
    follower.start_replication(0)
    data = raw_log(leader)
    info = follower.append_as_follower(data + data[:30])  # a partial batch at the end is left
    assert info is not None and (info.first_offset, info.last_offset) == (0, 4)
    assert raw_log(follower) == data
    assert follower.log_end_offset == 5 and follower.high_watermark == 0
    assert follower.leader_epochs.entries == [(2, 0)]
    assert [v.producer_id for v in follower.producer_states()] == [5]
    with pytest.raises(FollowerAppendError):
        follower.append_as_follower(data)  # offsets 0..4 again: not a continuation
    assert follower.append_as_follower(data[:30]) is None


def test_truncation_cuts_segments_producers_epochs_and_the_high_watermark(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    log.start_replication(0)
    log.become_leader(0)
    log.append(batch(3))
    log.become_leader(1)
    log.append(batch(2, producer_id=9, producer_epoch=0, base_sequence=0))
    log.update_high_watermark(5)
    log.truncate_to(3)
    assert (log.log_end_offset, log.high_watermark) == (3, 3)
    assert log.leader_epochs.entries == [(0, 0)]
    assert log.producer_states() == []
    assert LeaderEpochCache(tmp_path / "t-0").entries == [(0, 0)]  # on disk too


def test_truncate_fully_starts_the_log_again_at_an_offset(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    log.start_replication(0)
    log.become_leader(0)
    log.append(batch(3))
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (100, 100, 100)
    leader = Log.open(tmp_path / "leader" / "t-0")
    leader.append_as_follower(batch(2, base_offset=100))
    log.append_as_follower(raw_log(leader))
    assert log.log_end_offset == 102


def test_epoch_cache_drops_what_a_new_entry_contradicts(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    cache.assign(1, 0)
    cache.assign(2, 10)
    cache.assign(4, 20)
    cache.assign(3, 15)  # a follower's history rewritten: epoch 4 at 20 cannot stand after it
    assert cache.entries == [(1, 0), (2, 10), (3, 15)]
    cache.assign(3, 18)  # the same epoch, later: kept as it was
    assert cache.entries[-1] == (3, 15)
    assert cache.end_offset_for(0, 30) == (0, 0)  # below the first epoch: its own start
    assert LeaderEpochCache(tmp_path).entries == cache.entries
    (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).write_text("junk")
    assert LeaderEpochCache(tmp_path).entries == []  # damaged: as if there were none


def test_a_new_leaders_epoch_counts_at_once_and_is_on_disk_after_a_clean_restart(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    log.start_replication(0)
    log.become_leader(1)
    log.append(batch(2))
    log.become_leader(4, flush=False)  # a failover's: written later, off the event loop
    assert log.leader_epochs.entries == [(1, 0), (4, 2)] and log.leader_epochs.dirty
    assert log.end_offset_for_epoch(1) == (1, 2)  # answered from memory already
    log.append(batch(1))
    log.close()  # nothing flushed it meanwhile: the close does
    again = Log.open(tmp_path / "t-0")
    assert again.leader_epochs.entries == [(1, 0), (4, 2)]


def _crashed_leader(directory: Path) -> Log:
    """A leader that took epochs 1 (offsets 0-1) and 4 (offsets 2-3, entry in memory only)
    and then 'crashed': never closed, its appends in the page cache, not flushed."""
    log = Log.open(directory)
    log.start_replication(0)
    log.become_leader(1)
    log.append(batch(2), defer_flush=True)
    log.become_leader(4, flush=False)  # a failover's: the checkpoint is written later
    log.append(batch(1), defer_flush=True)
    log.append(batch(1), defer_flush=True)
    assert LeaderEpochCache(directory).entries == [(1, 0)]  # the file lacks epoch 4
    return log


def test_recovery_rebuilds_the_epochs_the_checkpoint_lacks_from_the_batches(tmp_path: Path) -> None:
    _crashed_leader(tmp_path / "t-0")
    again = Log.open(tmp_path / "t-0")  # no clean-shutdown marker: recovered
    assert not again.recovery.clean
    assert again.leader_epochs.entries == [(1, 0), (4, 2)]  # epoch 4 from its first batch
    assert LeaderEpochCache(tmp_path / "t-0").entries == [(1, 0), (4, 2)]  # and on disk
    # OffsetsForLeaderEpoch answers from the whole history: a follower of epoch 1 keeps 0-1.
    assert again.end_offset_for_epoch(1) == (1, 2)
    assert again.end_offset_for_epoch(4) == (4, 4)


def test_recovery_without_any_epoch_checkpoint_rebuilds_it_from_the_batches(tmp_path: Path) -> None:
    _crashed_leader(tmp_path / "t-0")
    (tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT_FILE).unlink()
    again = Log.open(tmp_path / "t-0")
    assert again.leader_epochs.entries == [(1, 0), (4, 2)]


def test_recovery_drops_epochs_that_start_past_the_recovered_log_end(tmp_path: Path) -> None:
    log = _crashed_leader(tmp_path / "t-0")
    log.become_leader(6)  # written at once, starting at offset 4
    log.append(batch(1), defer_flush=True)
    tail = log.active_segment.log_path
    with open(tail, "r+b") as f:  # a torn tail: epoch 6's only batch is cut
        f.truncate(tail.stat().st_size - 5)
    again = Log.open(tmp_path / "t-0")
    assert again.log_end_offset == 4
    assert again.leader_epochs.entries == [(1, 0), (4, 2)]
    assert LeaderEpochCache(tmp_path / "t-0").entries == [(1, 0), (4, 2)]


def test_a_single_brokers_recovery_makes_no_epoch_checkpoint(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    log.append(batch(2, partition_leader_epoch=0), defer_flush=True)  # what most clients write there
    again = Log.open(tmp_path / "t-0", stamped_epochs=False)
    assert not again.recovery.clean and again.log_end_offset == 2
    assert not (tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT_FILE).exists()


def test_a_flush_writes_a_pending_epoch_entry_before_the_recovery_point_passes_it(tmp_path: Path) -> None:
    log = _crashed_leader(tmp_path / "t-0")
    log.flush()
    assert log.recovery_point == 4
    assert LeaderEpochCache(tmp_path / "t-0").entries == [(1, 0), (4, 2)]
    log.become_leader(5, flush=False)
    log.append(batch(1), defer_flush=True)
    pending = log.begin_flush()  # the broker's handed-off flush: fsyncs on a worker thread
    assert pending is not None
    worker = threading.Thread(target=pending.sync)
    worker.start()
    worker.join()
    assert log.complete_flush(pending) is None and log.recovery_point == 5
    assert LeaderEpochCache(tmp_path / "t-0").entries == [(1, 0), (4, 2), (5, 4)]
    # Recovery from that recovery point walks no batch of epochs 1-5: the file has them.
    again = Log.open(tmp_path / "t-0", recovery_point=5, clean=False)
    assert again.leader_epochs.entries == [(1, 0), (4, 2), (5, 4)]


def test_the_epoch_checkpoint_is_written_from_any_thread_newest_entries_winning(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    log.start_replication(0)
    log.become_leader(1)
    log.append(batch(2))
    log.become_leader(4, flush=False)
    log.leader_epochs.assign(5, 3, flush=False)
    worker = threading.Thread(target=log.flush_leader_epochs)  # the replica manager's worker
    worker.start()
    worker.join()
    assert not log.leader_epochs.dirty
    assert not (tmp_path / "t-0" / (LEADER_EPOCH_CHECKPOINT_FILE + ".tmp")).exists()
    assert LeaderEpochCache(tmp_path / "t-0").entries == [(1, 0), (4, 2), (5, 3)]


class _Announced:
    """A lock that sets ``event`` when a thread starts to take it."""

    def __init__(self, lock: threading.Lock, event: threading.Event) -> None:
        self.lock, self.event = lock, event

    def __enter__(self) -> None:
        self.event.set()
        self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


@pytest.mark.parametrize("handed_off", [True, False], ids=["begin_flush", "flush"])
def test_a_flush_does_not_trust_an_epoch_write_that_is_under_way_and_then_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, handed_off: bool) -> None:
    """The replica manager's worker writes a new leader's entry (5, 4) and fails after the
    log's flush began: the flush must not move the recovery point past 4 with the entry
    only in memory, or recovery (walking from the recovery point) never finds epoch 5."""
    log = _crashed_leader(tmp_path / "t-0")
    log.flush()
    log.become_leader(5, flush=False)  # (5, 4): queued for the worker
    cache = log.leader_epochs
    write = cache._write
    started, release = threading.Event(), threading.Event()

    def failing_write(entries: list[tuple[int, int]]) -> None:
        started.set()
        release.wait()
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache, "_write", failing_write)
    errors: list[OSError] = []

    def worker_flush() -> None:
        try:
            log.flush_leader_epochs()
        except OSError as exc:
            errors.append(exc)

    worker = threading.Thread(target=worker_flush)
    worker.start()
    assert started.wait(10)  # the worker holds the entries and is writing
    monkeypatch.setattr(cache, "_write", write)  # the next write succeeds
    waiting = threading.Event()  # the flush is waiting for the worker's write
    monkeypatch.setattr(cache, "_writing", _Announced(cache._writing, waiting))
    log.append(batch(2), defer_flush=True)  # offsets 4-5, stamped 5
    if handed_off:
        pending = log.begin_flush()
        assert pending is not None
        flusher = threading.Thread(target=pending.sync)
    else:
        flusher = threading.Thread(target=log.flush)
    flusher.start()
    # The flush either trusted the write under way (and is done) or waits for it.
    block_until(lambda: waiting.is_set() or not flusher.is_alive(), "the flush to wait or finish")
    release.set()  # the worker's write fails
    worker.join()
    flusher.join()
    assert len(errors) == 1
    if handed_off:
        assert log.complete_flush(pending) is None
    assert log.recovery_point == 6 and not cache.dirty
    assert LeaderEpochCache(tmp_path / "t-0").entries == [(1, 0), (4, 2), (5, 4)]
    # A crash now: recovery walks from 6 only, so the entry must come from the file.
    again = Log.open(tmp_path / "t-0", recovery_point=6, clean=False)
    assert again.leader_epochs.entries == [(1, 0), (4, 2), (5, 4)]
    assert again.end_offset_for_epoch(4) == (4, 4)


def test_a_change_made_while_the_epoch_checkpoint_is_written_keeps_the_cache_dirty(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = LeaderEpochCache(tmp_path)
    cache.assign(1, 0)
    cache.assign(4, 2, flush=False)
    write = cache._write
    started, release = threading.Event(), threading.Event()

    def slow_write(entries: list[tuple[int, int]]) -> None:
        started.set()
        release.wait()
        write(entries)

    monkeypatch.setattr(cache, "_write", slow_write)
    worker = threading.Thread(target=cache.flush)
    worker.start()
    assert started.wait(10)
    assert cache.dirty  # under way: not in the file yet
    cache.assign(5, 3, flush=False)  # made during the write: not in what it writes
    release.set()
    worker.join()
    assert cache.dirty and LeaderEpochCache(tmp_path).entries == [(1, 0), (4, 2)]
    cache.flush()
    assert not cache.dirty and LeaderEpochCache(tmp_path).entries == [(1, 0), (4, 2), (5, 3)]
