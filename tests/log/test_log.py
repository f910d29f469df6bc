"""The partition log: offsets, reads as file slices, rolling, flushing, retention, limits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pulllog.records import InvalidRecordError, build_batch
from pulllog.log import Log, LogConfig, OffsetOutOfRangeError, RecordErrors, RecordTooLargeError
from pulllog.records.batch import CorruptRecordError, TimestampType, iter_batches


class Clock:
    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def cfg(**kafka: object) -> LogConfig:
    return LogConfig.from_kafka({k.replace("_", "."): v for k, v in kafka.items()})


def batch(n: int, start: int = 0, ts: int = 1_700_000_000_000, size: int = 100) -> bytes:
    return build_batch([(b"k%d" % (start + i), b"v" * size, ts + i) for i in range(n)])


def offsets_in(log: Log, start: int = 0) -> list[int]:
    out, offset = [], start
    while offset < log.log_end_offset:
        batches = log.read_batches(offset, 1 << 20)
        assert batches, f"nothing readable at {offset}"
        for b in batches:
            out.extend(r.offset for r in b.records() if r.offset >= offset)
        offset = batches[-1].last_offset + 1
    return out


def test_append_assigns_offsets_contiguously(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    first = log.append(batch(3))
    second = log.append(batch(2) + batch(4))
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset, second.records) == (3, 8, 6)
    assert log.log_end_offset == log.high_watermark == 9
    assert offsets_in(log) == list(range(9))


def test_read_starts_at_the_batch_holding_the_offset(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    for i in range(10):
        log.append(batch(5, i * 5))
    piece = log.read(17, 1 << 20)
    assert piece is not None
    first = next(iter_batches(piece.read()))[1]
    assert (first.base_offset, first.last_offset) == (15, 19)


def test_read_returns_at_least_one_whole_batch(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    big = batch(20, size=1000)
    log.append(big)
    log.append(batch(1))
    piece = log.read(0, 10)
    assert piece is not None and piece.length == len(big)


def test_read_honours_max_bytes_after_the_first_batch(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    for i in range(50):
        log.append(batch(1, i))
    one = len(batch(1))
    piece = log.read(0, one * 3 + 10)
    assert piece is not None and piece.length == one * 3 + 10  # may end in a partial batch
    assert len(list(iter_batches(piece.read()))) == 3


def test_read_at_log_end_is_empty_and_past_it_is_out_of_range(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    log.append(batch(3))
    assert log.read(3, 1000) is None
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 1000)


def test_segments_roll_on_segment_bytes(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", cfg(segment_bytes=2000))
    for i in range(20):
        log.append(batch(2, i * 2))
    assert len(log.segments) == 3  # ~285-byte appends, 7 to a 2000-byte segment
    assert all(s.size <= 2000 for s in log.segments)
    names = sorted(p.name for p in (tmp_path / "t-0").glob("*.log"))
    assert names[0] == "00000000000000000000.log"
    assert offsets_in(log) == list(range(40))


def test_segments_roll_on_segment_ms_by_record_time(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", cfg(segment_ms=1000))
    log.append(batch(1, ts=10_000))
    log.append(batch(1, ts=10_500))
    assert len(log.segments) == 1
    log.append(batch(1, ts=11_001))
    assert len(log.segments) == 2
    assert log.active_segment.base_offset == 2


def test_segments_roll_when_the_index_is_full(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", cfg(segment_index_bytes=8 * 3, index_interval_bytes=1))
    for i in range(12):
        log.append(batch(1, i))
    assert len(log.segments) >= 3
    assert all(s.offset_index.entries <= 3 for s in log.segments)


def test_append_validates_every_batch_before_writing_any(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    bad = bytearray(batch(2))
    bad[-1] ^= 0x55
    with pytest.raises(CorruptRecordError):
        log.append(batch(3) + bytes(bad))
    assert log.log_end_offset == 0 and log.size_bytes == 0


def test_batch_larger_than_max_message_bytes_is_rejected(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", cfg(max_message_bytes=500))
    with pytest.raises(RecordTooLargeError):
        log.append(batch(10))
    assert log.log_end_offset == 0


def test_truncated_request_is_rejected(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    with pytest.raises(InvalidRecordError):
        log.append(batch(3)[:-1])
    with pytest.raises(InvalidRecordError):
        log.append(b"")


def test_compacted_topic_rejects_records_without_a_key(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", cfg(cleanup_policy="compact"))
    data = build_batch([(b"a", b"1"), (None, b"2"), (b"c", b"3")])
    with pytest.raises(RecordErrors) as err:
        log.append(data)
    assert err.value.errors == [(0, 1, "compacted topic cannot accept a record without a key")]
    assert log.log_end_offset == 0


def test_log_append_time_topics_stamp_the_broker_time(tmp_path: Path) -> None:
    clock = Clock(5_000_000)
    log = Log.open(tmp_path / "t-0", cfg(message_timestamp_type="LogAppendTime"), clock=clock)
    info = log.append(batch(2, ts=1))
    assert info.log_append_time == 5_000_000
    header = log.read_batches(0)[0].header
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == 5_000_000


def test_flush_messages_advances_the_recovery_point(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", cfg(flush_messages=5))
    log.append(batch(3))
    assert log.recovery_point == 0
    log.append(batch(3))
    assert log.recovery_point == 6


def test_flush_ms_flushes_on_time(tmp_path: Path) -> None:
    clock = Clock()
    log = Log.open(tmp_path / "t-0", cfg(flush_ms=1000), clock=clock)
    log.append(batch(2))
    assert log.recovery_point == 0
    clock.now += 1001
    assert log.maybe_flush()
    assert log.recovery_point == 2


def test_flush_ms_is_left_to_the_scheduler_not_to_append(tmp_path: Path) -> None:
    clock = Clock()
    log = Log.open(tmp_path / "t-0", cfg(flush_ms=1000), clock=clock)
    clock.now += 1001
    log.append(batch(2))  # as Kafka's append: only flush.messages is checked here
    assert log.recovery_point == 0 and log.flush_due()


def test_a_handed_off_flush_advances_the_recovery_point_once_synced(tmp_path: Path) -> None:
    clock = Clock()
    log = Log.open(tmp_path / "t-0", cfg(flush_ms=1000), clock=clock)
    log.append(batch(3))
    clock.now += 1001
    pending = log.begin_flush()
    assert pending is not None and pending.target == 3
    assert log.begin_flush() is None and not log.flush_due()  # one at a time
    log.append(batch(2))
    assert log.recovery_point == 0
    pending.sync()  # what the worker thread runs
    assert log.complete_flush(pending) is None
    assert log.recovery_point == 3
    log.close()
    assert log.recovery_point == 5


def test_a_roll_makes_a_flush_due_with_the_default_flush_settings(tmp_path: Path) -> None:
    # Kafka flushes a rolled segment at once, whatever flush.ms says; a failed fsync stays due.
    log = Log.open(tmp_path / "t-0", cfg(), clock=Clock())
    log.append(batch(3))
    assert not log.flush_due()  # the active segment alone waits for flush.ms
    log.roll()
    log.append(batch(2))
    assert log.flush_due()
    pending = log.begin_flush()
    assert pending is not None and not log.flush_due()
    pending.error = OSError(5, "EIO")  # as if the worker's fsync failed
    pending.done.set()
    assert log.complete_flush(pending) is not None
    assert log.recovery_point == 0 and log.flush_due()  # retried at the next run
    pending = log.begin_flush()
    assert pending is not None
    pending.sync()
    assert log.complete_flush(pending) is None
    assert log.recovery_point == 5 and not log.flush_due()
    log.close()

def test_a_handed_off_flush_outlives_the_segments_it_was_taken_from(tmp_path: Path) -> None:
    # The worker may fsync after the owner closed or deleted the segment: it holds duplicates.
    log = Log.open(tmp_path / "t-0", cfg(flush_ms=1))
    log.append(batch(3))
    pending = log.begin_flush()
    assert pending is not None and pending.fds
    log.delete()
    pending.sync()
    assert pending.error is None
    assert log.complete_flush(pending) is None  # the log is gone: no checkpoint written
    assert not (tmp_path / "t-0").exists()


def test_offset_for_timestamp_uses_the_time_index(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", cfg(index_interval_bytes=1))
    for i in range(100):
        log.append(build_batch([(b"k", b"v" * 50, 1000 + 10 * i)]))
    assert log.offset_for_timestamp(1000) == (0, 1000)
    assert log.offset_for_timestamp(1455) == (46, 1460)
    assert log.offset_for_timestamp(1990) == (99, 1990)
    assert log.offset_for_timestamp(1991) is None
    assert log.max_timestamp_offset() == (99, 1990)


def test_clean_reopen_keeps_everything(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", cfg(segment_bytes=3000))
    for i in range(30):
        log.append(batch(2, i * 2))
    log.close()
    again = Log.open(tmp_path / "t-0", cfg(segment_bytes=3000))
    assert again.recovery.clean
    assert again.log_end_offset == 60
    assert offsets_in(again) == list(range(60))
    assert again.append(batch(1)).first_offset == 60


def test_damaged_index_is_rebuilt_on_clean_open(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", cfg(index_interval_bytes=1))
    for i in range(20):
        log.append(batch(1, i))
    log.close()
    index = tmp_path / "t-0" / "00000000000000000000.index"
    index.write_bytes(index.read_bytes()[:-3])  # a partial entry
    again = Log.open(tmp_path / "t-0", cfg(index_interval_bytes=1))
    assert again.log_end_offset == 20
    assert offsets_in(again, 7)[0] == 7
    assert again.active_segment.offset_index.entries > 0


# ---------------------------------------------------------------- retention


def test_retention_ms_deletes_old_segments_but_never_the_active_one(tmp_path: Path) -> None:
    clock = Clock(10_000_000)
    log = Log.open(tmp_path / "t-0", cfg(segment_bytes=1000, retention_ms=60_000), clock=clock)
    for i in range(10):
        log.append(batch(2, ts=clock.now - 3_600_000 + i))
    segments = len(log.segments)
    assert segments > 2
    assert log.delete_old_segments() == segments - 1
    assert len(log.segments) == 1
    assert log.log_start_offset == log.active_segment.base_offset
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)


def test_retention_ms_keeps_segments_with_recent_records(tmp_path: Path) -> None:
    clock = Clock(10_000_000)
    log = Log.open(tmp_path / "t-0", cfg(segment_bytes=1000, retention_ms=60_000), clock=clock)
    for i in range(6):
        log.append(batch(2, ts=clock.now - 120_000))
    for i in range(6):
        log.append(batch(2, ts=clock.now - 1_000))
    deleted = log.delete_old_segments()
    assert deleted >= 1
    assert all(clock.now - s.max_timestamp <= 60_000 for s in log.segments[:-1])


def test_retention_bytes_keeps_the_newest_data_within_the_limit(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", cfg(segment_bytes=1000, retention_bytes=2500, retention_ms=-1))
    for i in range(20):
        log.append(batch(2, i * 2))
    log.delete_old_segments()
    assert log.size_bytes - log.segments[0].size < 2500
    assert log.log_end_offset == 40
    assert offsets_in(log, log.log_start_offset)[-1] == 39


def test_a_read_racing_with_retention_keeps_its_snapshot(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", cfg(segment_bytes=1000, retention_bytes=0, retention_ms=-1))
    for i in range(10):
        log.append(batch(2, i * 2))
    piece = log.read(0, 1 << 20)
    assert piece is not None
    expected = piece.read()
    log.delete_old_segments()
    assert not (tmp_path / "t-0" / "00000000000000000000.log").exists()
    assert os.pread(piece.fileno(), piece.length, piece.position) == expected


def test_delete_records_moves_the_log_start_offset(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", cfg(segment_bytes=1000))
    for i in range(10):
        log.append(batch(2, i * 2))
    assert log.delete_records_before(7) == 7
    with pytest.raises(OffsetOutOfRangeError):
        log.read(6, 100)
    assert offsets_in(log, 7)[0] == 7
    assert log.segments[0].next_offset > 7
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(21)
    log.close()
    assert Log.open(tmp_path / "t-0", cfg(segment_bytes=1000)).log_start_offset == 7


def test_topic_compression_type_recompresses_on_append(tmp_path: Path) -> None:
    from pulllog.records import Compression

    log = Log.open(tmp_path / "t-0", cfg(compression_type="zstd"))
    sent = [(b"k%d" % i, b"value" * 20, 1000 + i, [("h", b"x")]) for i in range(10)]
    log.append(build_batch(sent, compression=Compression.GZIP, producer_id=5, producer_epoch=1, base_sequence=0))
    batch = log.read_batches(0)[0]
    assert batch.header.compression == Compression.ZSTD
    assert (batch.header.producer_id, batch.header.producer_epoch, batch.header.base_sequence) == (5, 1, 0)
    assert [(r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in batch.records()] == [
        (i, k, v, ts, h) for i, (k, v, ts, h) in enumerate(sent)]


def test_topic_compression_producer_keeps_the_batch_as_sent(tmp_path: Path) -> None:
    from pulllog.records import Compression

    log = Log.open(tmp_path / "t-0")
    raw = build_batch([(b"k", b"v" * 100)], compression=Compression.LZ4)
    log.append(raw)
    assert log.read_batches(0)[0].raw == raw


@pytest.mark.parametrize("leader_epoch", [-1, 7])
@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
def test_the_headers_an_append_hands_on_are_the_ones_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, leader_epoch: int, timestamp_type: str) -> None:
    """The append patches each batch's offset (and leader epoch, and with LogAppendTime its
    timestamp and CRC) and hands the headers to the segment and the producer state without
    parsing the written bytes again: they must be exactly what reading those bytes gives."""
    from pulllog.log.segment import LogSegment
    from pulllog.records.batch import read_header

    handed: list[tuple[int, object]] = []
    real_append = LogSegment.append

    def recording_append(segment: LogSegment, data: object, batches: list[tuple[int, object]]) -> None:
        start = segment.size
        handed.extend((start + pos, header) for pos, header in batches)
        real_append(segment, data, batches)

    monkeypatch.setattr(LogSegment, "append", recording_append)
    log = Log.open(tmp_path / "t-0", cfg(**{"message.timestamp.type": timestamp_type}))
    if leader_epoch >= 0:
        log.become_leader(leader_epoch)
    small = build_batch([(b"k", b"v" * 100, 1_000)], producer_id=9, producer_epoch=2, base_sequence=0)
    large = build_batch([(b"k", b"v" * 5_000, 2_000)], producer_id=9, producer_epoch=2, base_sequence=1)
    pair = build_batch([(None, b"a", 3_000)] * 3, producer_id=9, producer_epoch=2, base_sequence=2) + \
        build_batch([(None, b"b", 3_001)] * 2, producer_id=9, producer_epoch=2, base_sequence=5)
    copied = bytearray(build_batch([(b"k", b"w" * 100, 4_000)], producer_id=9, producer_epoch=2, base_sequence=7))
    for data in (small, large, pair, copied):  # bytes (small, large: written as pieces; two batches) and a bytearray
        log.append(data)
    written = (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()
    assert len(handed) == 5
    for position, header in handed:
        assert header == read_header(written, position)
    assert [h.base_offset for _, h in handed] == [0, 1, 2, 5, 7]


@pytest.mark.parametrize("leader_epoch", [-1, 7])
def test_a_single_batch_written_without_a_copy_is_the_same_bytes_as_one_patched_in_a_copy(
        tmp_path: Path, leader_epoch: int) -> None:
    """A request's one batch as bytes goes out as its patched first 16 bytes plus a view of
    the rest (writev); a bytearray is patched in place: the two logs must hold the same bytes,
    headers and answers."""
    # Sizes on both sides of the smallest batch written without a copy (4 KiB).
    batches = [build_batch([(b"k%d" % i, b"v" * (i * 379 % 3000), 1_000 + i)] * (1 + i % 4)) for i in range(30)]
    assert min(map(len, batches)) < 4096 < max(map(len, batches))
    logs = []
    for kind in (bytes, bytearray):
        log = Log.open(tmp_path / kind.__name__ / "t-0", cfg(index_interval_bytes=300))
        if leader_epoch >= 0:
            log.become_leader(leader_epoch)
        infos = [log.append(kind(b)) for b in batches]
        log.append(kind(batches[0] + batches[1]))  # two batches: always patched in a copy
        logs.append((log, infos))
    (a, infos_a), (b, infos_b) = logs
    assert infos_a == infos_b
    assert (tmp_path / "bytes" / "t-0" / "00000000000000000000.log").read_bytes() == \
        (tmp_path / "bytearray" / "t-0" / "00000000000000000000.log").read_bytes()
    sa, sb = a.active_segment, b.active_segment
    assert [h for _, h in sa.headers()] == [h for _, h in sb.headers()]
    assert all(h.partition_leader_epoch == (leader_epoch if leader_epoch >= 0 else -1) for _, h in sa.headers())
    assert sa.offset_index.items() == sb.offset_index.items() and sa.offset_index.items()
    assert (sa.next_offset, sa.max_timestamp, sa.offset_of_max_timestamp) == (
        sb.next_offset, sb.max_timestamp, sb.offset_of_max_timestamp)
    a.close()
    again = Log.open(tmp_path / "bytes" / "t-0", cfg(index_interval_bytes=300))
    assert again.log_end_offset == b.log_end_offset
    assert [r.value for batch in again.read_batches(0, 1 << 20) for r in batch.records()][:3] == [b"", b"v" * 379, b"v" * 379]
