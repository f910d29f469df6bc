"""Idempotent producers' state in a partition log: duplicates, sequence and epoch checks,
snapshots, and rebuilding after restarts, crashes, truncation, retention and compaction."""

from __future__ import annotations

from pathlib import Path

import pytest

from pulllog.log import Log, LogConfig
from pulllog.records import build_batch
from pulllog.log.cleaner import clean
from pulllog.log.producer_state import (
    InvalidProducerEpochError,
    InvalidProducerFieldsError,
    OutOfOrderSequenceError,
    decode_snapshot,
    encode_snapshot,
    increment_sequence,
)

from log_contents import all_values

T0 = 1_700_000_000_000
PID = 4242


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def open_log(directory: Path, clock: Clock | None = None, **config: object) -> Log:
    return Log.open(directory, LogConfig(**config), clock=clock or Clock())  # type: ignore[arg-type]


def batch(seq: int, count: int = 1, *, epoch: int = 0, pid: int = PID, ts: int = T0, tag: bytes = b"") -> bytes:
    return build_batch([(None, b"%s-%d" % (tag, seq + i), ts) for i in range(count)],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq)


# ---------------------------------------------------------------------------- append checks


def test_a_retry_gets_the_original_offsets_and_is_not_stored_twice(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    first = log.append(batch(0, 3))
    log.append(batch(3, 2))
    retry = log.append(batch(0, 3))
    assert (retry.first_offset, retry.last_offset, retry.duplicate) == (0, 2, True)
    assert not first.duplicate
    assert log.log_end_offset == 5
    assert all_values(log) == [b"-0", b"-1", b"-2", b"-3", b"-4"]


def test_any_of_the_last_five_batches_is_recognised_but_not_the_sixth_last(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    for seq in range(6):
        log.append(batch(seq))
    for seq in range(1, 6):
        assert log.append(batch(seq)).first_offset == seq
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(0))  # too old to be told from a reordered batch: Kafka answers 45 too
    assert log.log_end_offset == 6


def test_a_gap_in_sequences_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(batch(0, 2))
    with pytest.raises(OutOfOrderSequenceError, match="expected 2"):
        log.append(batch(3))
    assert log.log_end_offset == 2
    log.append(batch(2))  # the producer carries on where the log is
    assert log.log_end_offset == 3


def test_an_older_epoch_is_fenced(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(batch(0, epoch=3))
    with pytest.raises(InvalidProducerEpochError):
        log.append(batch(1, epoch=2))
    assert log.log_end_offset == 1


def test_a_new_epoch_must_start_at_sequence_zero(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(batch(0, 5, epoch=0))
    with pytest.raises(OutOfOrderSequenceError, match="new epoch starts at 0"):
        log.append(batch(5, epoch=1))
    log.append(batch(0, epoch=1))
    with pytest.raises(InvalidProducerEpochError):
        log.append(batch(5, epoch=0))  # the old epoch is fenced now
    assert log.log_end_offset == 6


def test_an_unknown_producer_may_start_at_any_sequence(tmp_path: Path) -> None:
    # KIP-360: its state may have been removed by retention or expiry; it must carry on.
    log = open_log(tmp_path / "t-0")
    log.append(batch(1000, epoch=7))
    log.append(batch(1001, epoch=7))
    assert log.log_end_offset == 2


def test_sequences_wrap_after_int32_max(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(batch(2**31 - 2, 3))  # sequences 2**31-2, 2**31-1, 0
    assert increment_sequence(2**31 - 2, 2) == 0
    log.append(batch(1))
    assert log.append(batch(2**31 - 2, 3)).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(0))


def test_producers_are_independent_and_plain_batches_are_not_checked(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(batch(0, pid=1))
    log.append(batch(0, pid=2))
    plain = build_batch([(None, b"x", T0)])
    log.append(plain)
    log.append(plain)  # no producer id: every copy is appended, as before
    log.append(batch(1, pid=1))
    assert log.log_end_offset == 5


def test_several_batches_in_one_request_are_checked_in_order_all_or_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(batch(0) + batch(1) + batch(2))
    assert log.log_end_offset == 3
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(3) + batch(5))
    assert log.log_end_offset == 3
    retry = log.append(batch(1) + batch(2))
    assert (retry.duplicate, retry.first_offset) == (True, 1)
    with pytest.raises(InvalidProducerFieldsError, match="together with new ones"):
        log.append(batch(2) + batch(3))
    assert log.log_end_offset == 3


@pytest.mark.parametrize(("epoch", "seq"), [(-1, 0), (0, -1), (-32768, 5), (3, -(2**31))])
def test_negative_epochs_and_sequences_with_a_producer_id_are_invalid(tmp_path: Path, epoch: int, seq: int) -> None:
    log = open_log(tmp_path / "t-0")
    with pytest.raises(InvalidProducerFieldsError):
        log.append(batch(seq, epoch=epoch))
    assert log.log_end_offset == 0


def test_huge_values_are_accepted_and_tracked(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(batch(2**31 - 1, epoch=2**15 - 1, pid=2**63 - 1, ts=2**63 - 1))
    assert log.append(batch(2**31 - 1, epoch=2**15 - 1, pid=2**63 - 1, ts=2**63 - 1)).duplicate
    log.append(batch(0, epoch=2**15 - 1, pid=2**63 - 1))
    log.close()
    assert open_log(tmp_path / "t-0").append(batch(0, epoch=2**15 - 1, pid=2**63 - 1)).duplicate


# ---------------------------------------------------------------------------- restarts


def test_a_retry_after_a_clean_restart_is_still_recognised(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(batch(0, 2))
    log.append(batch(2, 2))
    log.close()
    assert (tmp_path / "t-0" / f"{4:020d}.snapshot").exists()
    log = open_log(tmp_path / "t-0")
    assert log.append(batch(2, 2)).first_offset == 2
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(5))
    log.append(batch(4))
    assert log.log_end_offset == 5


def test_a_retry_after_a_crash_is_recognised_from_the_batch_headers(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(batch(0, 2))
    log.append(batch(2, 2))  # no close: no snapshot, no clean-shutdown marker
    assert not list((tmp_path / "t-0").glob("*.snapshot"))
    log = open_log(tmp_path / "t-0")
    assert not log.recovery.clean
    assert log.append(batch(2, 2)).duplicate
    assert log.append(batch(0, 2)).duplicate


def test_snapshot_at_roll_plus_the_active_segment_rebuild_the_state(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=300)
    for seq in range(10):
        log.append(batch(seq, pid=1))
        log.append(batch(seq, pid=2))
    assert len(log.segments) > 2
    snapshots = sorted(p.name for p in (tmp_path / "t-0").glob("*.snapshot"))
    assert len(snapshots) == 3, "the newest three are kept"
    assert snapshots[-1] == f"{log.active_segment.base_offset:020d}.snapshot"
    end = log.log_end_offset
    log = open_log(tmp_path / "t-0")  # crash: newest snapshot + the active segment's headers
    assert log.append(batch(9, pid=1)).duplicate and log.append(batch(9, pid=2)).duplicate
    assert log.append(batch(5, pid=1)).duplicate
    log.append(batch(10, pid=1))
    assert log.log_end_offset == end + 1


def test_the_snapshot_written_at_roll_is_fsynced_with_its_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Not only at clean close: after a crash the newest snapshot must be whole and present.
    import os

    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    directory = tmp_path / "t-0"
    log = open_log(directory, segment_bytes=300, flush_messages=10**9, flush_ms=10**12)
    for seq in range(10):
        log.append(batch(seq, pid=1))
    assert len(log.segments) > 1
    snapshot = f"{log.active_segment.base_offset:020d}.snapshot"
    tmp = str(directory / (snapshot + ".tmp"))
    assert tmp in synced, "the snapshot's bytes"
    assert str(directory) in synced[synced.index(tmp) + 1:], "its name (the rename)"
    log.close()


def test_a_corrupt_snapshot_falls_back_to_an_older_one_or_a_scan(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(batch(0, 2))
    log.close()
    snapshot = tmp_path / "t-0" / f"{2:020d}.snapshot"
    data = bytearray(snapshot.read_bytes())
    data[-1] ^= 0xFF
    snapshot.write_bytes(bytes(data))
    log = open_log(tmp_path / "t-0")
    assert any("CRC mismatch" in p for p in log.recovery.problems)
    assert not snapshot.exists()
    assert log.append(batch(0, 2)).duplicate
    log.append(batch(2))


def test_a_snapshot_past_the_log_end_is_ignored(tmp_path: Path) -> None:
    # The tail a snapshot describes was lost in a crash: the snapshot would be stale.
    log = open_log(tmp_path / "t-0")
    log.append(batch(0))
    log.append(batch(1))
    log.close()
    log = open_log(tmp_path / "t-0")
    log.truncate_to(1)  # as a lost tail would
    log.close()
    (tmp_path / "t-0" / f"{9:020d}.snapshot").write_bytes((tmp_path / "t-0" / f"{1:020d}.snapshot").read_bytes())
    log = open_log(tmp_path / "t-0")
    assert not (tmp_path / "t-0" / f"{9:020d}.snapshot").exists()
    log.append(batch(1))  # seq 1 is new again: it is not in the log any more
    assert log.log_end_offset == 2


def test_snapshot_encoding_round_trips() -> None:
    log_state = {}
    from pulllog.log.producer_state import BatchMetadata, ProducerStateEntry

    entry = ProducerStateEntry(7, 3, T0)
    for i in range(7):
        entry.add_batch(3, BatchMetadata(i, i, 100 + i, 100 + i, T0 + i))
    log_state[7] = entry
    decoded = decode_snapshot(encode_snapshot(log_state.values()))
    assert list(decoded[7].batches) == list(entry.batches) and len(entry.batches) == 5
    assert (decoded[7].epoch, decoded[7].last_timestamp) == (3, T0 + 6)


# ---------------------------------------------------------------------------- log changes


def test_truncation_forgets_the_removed_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(batch(0, 2))
    log.append(batch(2, 2))
    log.truncate_to(2)
    info = log.append(batch(2, 2))  # the producer resends what was cut off: a new append
    assert (info.duplicate, info.first_offset) == (False, 2)
    assert all_values(log) == [b"-0", b"-1", b"-2", b"-3"]


def test_truncation_below_every_snapshot_rebuilds_from_the_log(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=200)
    for seq in range(8):
        log.append(batch(seq))
    log.truncate_to(3)
    assert all(int(p.name[:20]) <= 3 for p in (tmp_path / "t-0").glob("*.snapshot"))
    log.append(batch(3))
    assert log.log_end_offset == 4


def test_retention_keeps_producers_known_and_their_next_batches_accepted(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "t-0", clock, segment_bytes=200, retention_ms=1000)
    for seq in range(6):
        log.append(batch(seq, ts=T0))
    clock.now = T0 + 10_000
    log.append(build_batch([(None, b"fresh", clock.now)]))
    assert log.delete_old_segments() >= 1
    log.append(batch(6, ts=clock.now))
    assert all(int(p.name[:20]) >= log.segments[0].base_offset for p in (tmp_path / "t-0").glob("*.snapshot"))
    log.close()
    log = open_log(tmp_path / "t-0", clock, segment_bytes=200, retention_ms=1000)
    log.append(batch(7, ts=clock.now))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(9, ts=clock.now))


def test_a_producer_whose_batches_were_all_deleted_may_carry_on_after_a_restart(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=200)
    for seq in range(6):
        log.append(batch(seq, pid=1))
    log.append(build_batch([(None, b"x", T0)]))
    log.delete_records_before(log.log_end_offset)
    for p in (tmp_path / "t-0").glob("*.snapshot"):
        p.unlink()  # worst case: only the log is left
    log.append(build_batch([(None, b"y", T0)]))
    for segment in log.segments[:-1]:
        segment.delete()
    log = open_log(tmp_path / "t-0", segment_bytes=200)
    log.append(batch(6, pid=1))  # unknown now: accepted (KIP-360), not refused
    log.append(batch(7, pid=1))
    assert all_values(log)[-2:] == [b"-6", b"-7"]


def test_compaction_keeps_enough_for_the_state_to_be_rebuilt(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "t-0", clock, cleanup_policy="compact", segment_bytes=10_000)
    for seq in range(4):
        log.append(build_batch([(b"k", b"v%d" % seq, T0)], producer_id=PID, producer_epoch=0, base_sequence=seq))
    log.roll()
    log.append(build_batch([(b"k", b"latest", T0)]))
    clean(log)
    for p in (tmp_path / "t-0").glob("*.snapshot"):
        p.unlink()  # rebuild from the compacted log alone
    log = open_log(tmp_path / "t-0", clock, cleanup_policy="compact", segment_bytes=10_000)
    assert log.append(build_batch([(b"k", b"v3", T0)], producer_id=PID, producer_epoch=0, base_sequence=3)).duplicate
    log.append(build_batch([(b"k", b"v4", T0)], producer_id=PID, producer_epoch=0, base_sequence=4))


def test_idle_producers_expire(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(batch(0, pid=1, ts=T0))
    log.append(batch(0, pid=2, ts=T0 + 5000))
    assert log.remove_expired_producers(T0 + 10_000, expiration_ms=8000) == 1
    assert set(log.producer_state.producers) == {2}
    log.append(batch(500, pid=1))  # forgotten: starts over at any sequence
