"""Recovery from the recovery point: what was flushed is trusted, what was not is checked.

A "crash" here is a log that is never closed (no clean-shutdown marker); the recovery point
handed to ``Log.open`` is what the broker's recovery-point-offset-checkpoint holds.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from log_contents import all_values

from pulllog.log import Log, LogConfig
from pulllog.records import build_batch

CONFIG = LogConfig.from_kafka({"index.interval.bytes": "200"})


def append(log: Log, first: int, count: int) -> None:
    for i in range(first, first + count):
        log.append(build_batch([(b"k%d" % i, b"value-%d-" % i + b"x" * 80, 1_000 + (i * 7) % 50)]))


def crashed_log(directory: Path, flushed: int, unflushed: int) -> tuple[int, list[tuple[int, int]]]:
    """``flushed`` batches fsynced, then ``unflushed`` more; returns (recovery point,
    [(position, base offset)] of every batch of the active segment)."""
    log = Log.open(directory, CONFIG)
    append(log, 0, flushed)
    log.flush()
    append(log, flushed, unflushed)
    positions = [(pos, h.base_offset) for pos, h in log.active_segment.headers()]
    return log.recovery_point, positions


def flip_value_byte(segment: Path, batch_position: int) -> None:
    """Damage a batch's record bytes (its CRC no longer holds; its header still parses)."""
    data = bytearray(segment.read_bytes())
    data[batch_position + 70] ^= 0xFF
    segment.write_bytes(data)


SEGMENT = "00000000000000000000.log"


def test_corruption_below_the_recovery_point_is_not_rescanned_but_above_it_is_truncated(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    recovery_point, positions = crashed_log(d, flushed=30, unflushed=10)
    assert recovery_point == 30
    flip_value_byte(d / SEGMENT, positions[10][0])  # below the recovery point: trusted, as in Kafka
    flip_value_byte(d / SEGMENT, positions[35][0])  # above it: found and cut off
    again = Log.open(d, CONFIG, recovery_point=recovery_point)
    assert not again.recovery.clean
    assert again.recovery.batches_checked == 5  # 30..34; 35 is the damage
    assert again.log_end_offset == 35
    # Batch 10 is kept, damaged: a flushed batch is not re-verified (a consumer's CRC check
    # or `pulllog inspect segment --verify` finds it).
    assert [h.base_offset for _, h in again.active_segment.headers()] == list(range(35))


def test_a_flushed_log_restarts_without_checking_a_batch_and_in_the_same_state(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    recovery_point, _ = crashed_log(d, flushed=200, unflushed=0)
    shutil.copytree(d, tmp_path / "copy")
    trusted = Log.open(d, CONFIG, recovery_point=recovery_point)
    full = Log.open(tmp_path / "copy", CONFIG, recovery_point=0)  # walks every batch
    assert trusted.recovery.batches_checked == 0 and full.recovery.batches_checked == 200
    a, b = trusted.active_segment, full.active_segment
    assert a.offset_index.items() == b.offset_index.items() and a.offset_index.items()
    assert a.time_index.items() == b.time_index.items() and a.time_index.items()
    assert (a.next_offset, a.size, a.max_timestamp, a.offset_of_max_timestamp, a.rolling_based_ms) == (
        b.next_offset, b.size, b.max_timestamp, b.offset_of_max_timestamp, b.rolling_based_ms)
    append(trusted, 200, 50)  # index entries continue where a full rebuild's would
    append(full, 200, 50)
    assert a.offset_index.items() == b.offset_index.items()
    assert trusted.offset_for_timestamp(1_040) == full.offset_for_timestamp(1_040)


def test_a_recovery_point_past_the_log_end_is_clamped_and_a_torn_tail_still_cut(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    recovery_point, positions = crashed_log(d, flushed=20, unflushed=0)
    with open(d / SEGMENT, "r+b") as f:
        f.truncate(positions[15][0] + 30)  # the file lost its end behind the checkpoint's back
    again = Log.open(d, CONFIG, recovery_point=recovery_point + 1_000_000)
    assert again.recovery.truncated_bytes == 30
    assert again.log_end_offset == 15 and again.recovery_point == 15
    assert len(all_values(again)) == 15
    append(again, 15, 1)
    assert again.log_end_offset == 16


def test_a_recovery_point_in_an_earlier_segment_checks_every_later_one(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    config = LogConfig.from_kafka({"segment.bytes": "2000", "index.interval.bytes": "200"})
    log = Log.open(d, config)
    append(log, 0, 10)
    log.flush()
    recovery_point = log.recovery_point
    append(log, 10, 40)
    segments = len(log.segments)
    assert segments > 3
    del log
    again = Log.open(d, config, recovery_point=recovery_point)
    assert again.recovery.batches_checked == 40  # the 10 flushed ones are trusted
    assert again.log_end_offset == 50 and len(all_values(again)) == 50


# ---------------------------------------------------------------- index entries written in bulk

INDEX = "00000000000000000000.index"
TIMEINDEX = "00000000000000000000.timeindex"


def file_entries(path: Path, entry_size: int) -> int:
    size = path.stat().st_size
    assert size % entry_size == 0
    return size // entry_size


def test_index_entries_wait_in_memory_until_a_flush_writes_them_all(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = Log.open(d, CONFIG)
    append(log, 0, 40)  # every other batch passes index.interval.bytes: ~20 entries, fewer than a bulk write
    index = log.active_segment.offset_index
    assert index.entries >= 15
    assert file_entries(d / INDEX, 8) == 0  # not one write per entry
    log.flush()
    assert file_entries(d / INDEX, 8) == index.entries
    assert file_entries(d / TIMEINDEX, 12) == log.active_segment.time_index.entries
    append(log, 40, 600)  # enough pending entries for a bulk write of their own
    assert 0 < file_entries(d / INDEX, 8) < index.entries


def test_a_handed_off_flush_writes_the_pending_entries_before_it_fsyncs(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = Log.open(d, CONFIG)
    append(log, 0, 40)
    pending = log.begin_flush()
    assert pending is not None
    assert file_entries(d / INDEX, 8) == log.active_segment.offset_index.entries
    pending.sync()
    assert log.complete_flush(pending) is None


def test_a_crash_with_entries_pending_rebuilds_them_from_the_log(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    recovery_point, _ = crashed_log(d, flushed=30, unflushed=40)  # the last ones' entries never written
    shutil.copytree(d, tmp_path / "copy")
    again = Log.open(d, CONFIG, recovery_point=recovery_point)
    full = Log.open(tmp_path / "copy", CONFIG, recovery_point=0)
    assert again.log_end_offset == full.log_end_offset == 70
    a, b = again.active_segment, full.active_segment
    assert a.offset_index.items() == b.offset_index.items() and len(a.offset_index.items()) >= 30
    assert a.time_index.items() == b.time_index.items()


def test_truncation_through_pending_and_written_entries_keeps_file_and_memory_equal(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = Log.open(d, CONFIG)
    append(log, 0, 40)
    log.flush()  # entries of 0..39 on disk
    append(log, 40, 40)  # entries of 40..79 pending
    log.truncate_to(60)  # cuts pending entries only
    log.flush()
    assert file_entries(d / INDEX, 8) == log.active_segment.offset_index.entries
    append(log, 60, 20)
    log.truncate_to(20)  # cuts written entries and drops every pending one
    kept = log.active_segment.offset_index.items()
    append(log, 20, 30)
    expected = log.active_segment.offset_index.items()
    assert expected[: len(kept)] == kept
    log.close()
    again = Log.open(d, CONFIG)
    assert again.active_segment.offset_index.items() == expected
    assert again.log_end_offset == 50
