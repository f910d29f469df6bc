"""Log compaction: the latest record per key survives, tombstones expire, crashes are safe."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulllog.records import Compression, Record, build_batch
from pulllog.log import ConfigError, Log, LogConfig, LogSegment
from pulllog.log.cleaner import CleanerStats, clean, group_segments_by_size, segment_ref
from pulllog.records.batch import RecordBatch, TimestampType, iter_batches
from pulllog.records.control import ControlType, build_control_batch, read_control_record

T0 = 1_700_000_000_000
DAY = 24 * 3600 * 1000


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def cfg(**kafka: object) -> LogConfig:
    values = {
        "cleanup.policy": "compact",
        "segment.bytes": "600",
        "index.interval.bytes": "100",
        "delete.retention.ms": str(DAY),
    }
    values.update({k.replace("_", "."): str(v) for k, v in kafka.items()})
    return LogConfig.from_kafka(values)


def open_log(path: Path, clock: Clock, **kafka: object) -> Log:
    return Log.open(path, cfg(**kafka), clock=clock)


def put(log: Log, key: bytes, value: bytes | None, **batch_fields: object) -> int:
    """Append a one-record batch stamped with the log's clock; return its offset."""
    data = build_batch([(key, value, log.clock())], **batch_fields)  # type: ignore[arg-type]
    return log.append(data).first_offset


def all_batches(log: Log) -> list[RecordBatch]:
    """Every batch from the log start, across holes, using the normal read path."""
    out: list[RecordBatch] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        batches = log.read_batches(offset, 1 << 20)
        if not batches:
            break
        out.extend(batches)
        offset = batches[-1].last_offset + 1
    return out


def all_records(log: Log) -> list[Record]:
    return [r for b in all_batches(log) if not b.header.is_control for r in b.records()]


def triples(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in all_records(log)]


def assert_kept_records_unchanged(before: list[Record], after: list[Record]) -> None:
    """Offsets strictly increase and every kept record equals the original, field for field."""
    original = {r.offset: r for r in before}
    offsets = [r.offset for r in after]
    assert offsets == sorted(set(offsets)), "offsets must strictly increase"
    for record in after:
        assert record == original[record.offset]


def compacted(before: list[Record], active_base: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """What a clean should leave: below the active segment only each key's latest record."""
    latest = {r.key: r.offset for r in before}
    return [
        (r.offset, r.key, r.value)
        for r in before
        if r.offset >= active_base or latest[r.key] == r.offset
    ]


# ---------------------------------------------------------------------------- basics


def test_latest_value_per_key_survives_across_many_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", Clock())
    for round_ in range(30):
        for k in range(8):
            put(log, b"key-%d" % k, b"value-%d-%d" % (k, round_))
    assert len(log.segments) > 5
    before = all_records(log)
    end = log.log_end_offset
    active_base = log.active_segment.base_offset

    stats = clean(log)

    assert triples(log) == compacted(before, active_base)
    assert_kept_records_unchanged(before, all_records(log))
    assert log.log_end_offset == end
    assert stats.records_kept + stats.records_removed == sum(1 for r in before if r.offset < active_base)
    assert stats.bytes_after < stats.bytes_before
    assert stats.segments_cleaned == stats.segments_written == len(log.segments) - 1  # all were full


def test_reading_from_the_start_returns_exactly_the_expected_records(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", Clock(), segment_bytes=200)
    for key, value in [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1"), (b"b", b"2")]:
        put(log, key, value)
    log.roll()
    put(log, b"a", b"3")

    clean(log)

    # b@1 is superseded by b@4; a@0 and a@2 by a@5 (in the active segment: a later record wins anywhere)
    assert triples(log) == [(3, b"c", b"1"), (4, b"b", b"2"), (5, b"a", b"3")]


def test_keys_only_in_the_active_segment_are_untouched(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", Clock())
    for i in range(20):
        put(log, b"old-%d" % (i % 3), b"x" * 20)
    log.roll()
    active = [put(log, b"hot", b"v%d" % i) for i in range(5)]

    clean(log)

    assert [o for o, k, _ in triples(log) if k == b"hot"] == active


def test_non_compacted_topic_is_left_alone(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", Clock(), cleanup_policy="delete")
    for i in range(50):
        put(log, b"k", b"v%d" % i)
    before = triples(log)
    assert clean(log) == CleanerStats()
    assert triples(log) == before


def test_min_compaction_lag_keeps_young_segments_uncompacted(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "t-0", clock, min_compaction_lag_ms=60_000)
    for i in range(20):
        put(log, b"k", b"old-%d" % i)
    log.roll()
    clock.now = T0 + 50_000
    young = [put(log, b"k", b"young-%d" % i) for i in range(20)]
    log.roll()
    put(log, b"k", b"newest")

    clock.now = T0 + 70_000  # the old segments are 70 s old, the young ones 20 s
    clean(log)

    offsets = [o for o, _, _ in triples(log)]
    assert all(o in offsets for o in young), "records younger than the lag must stay"
    assert not any(o < young[0] for o in offsets), "old, superseded records must go"

    clock.now = T0 + 120_000
    clean(log)
    assert triples(log) == [(log.log_end_offset - 1, b"k", b"newest")]


# ---------------------------------------------------------------------------- tombstones


def test_tombstone_kept_until_delete_retention_passes_then_removed(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "t-0", clock)
    put(log, b"gone", b"value")
    tombstone = put(log, b"gone", None)
    put(log, b"other", b"x")
    log.roll()
    put(log, b"other", b"y")

    clock.now = T0 + 1000
    first = clean(log)
    assert triples(log) == [(tombstone, b"gone", None), (3, b"other", b"y")]
    batch = all_batches(log)[0]
    assert batch.header.has_delete_horizon and batch.header.delete_horizon_ms == T0 + 1000 + DAY
    assert batch.records()[0].timestamp == T0, "record timestamps survive the horizon stamp"
    assert first.tombstones_removed == 0

    clock.now = T0 + 1000 + DAY - 1  # a consumer starting now still sees the delete
    clean(log)
    assert (tombstone, b"gone", None) in triples(log)

    clock.now = T0 + 1000 + DAY
    last = clean(log)
    assert triples(log) == [(3, b"other", b"y")]
    assert last.tombstones_removed == 1
    assert log.log_end_offset == 4


def test_delete_horizon_keeps_record_timestamps() -> None:
    data = build_batch(
        [(b"k", None, T0), (b"j", b"v", T0 + 500, [("h", b"x")])],
        base_offset=10,
        offset_deltas=[1, 4],
        last_offset_delta=6,
        delete_horizon_ms=T0 + DAY,
        compression=Compression.ZSTD,
    )
    batch = RecordBatch.from_bytes(data)
    assert batch.header.delete_horizon_ms == T0 + DAY
    assert batch.header.max_timestamp == T0 + 500
    assert [(r.offset, r.timestamp, r.headers) for r in batch.records()] == [
        (11, T0, ()),
        (14, T0 + 500, (("h", b"x"),)),
    ]
    assert batch.last_offset == 16


# ---------------------------------------------------------------------------- batches


def test_batch_emptied_by_compaction_is_kept_empty_when_it_is_its_producers_last(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", Clock())
    producer = {"producer_id": 7, "producer_epoch": 3}
    put(log, b"a", b"1", base_sequence=0, **producer)
    put(log, b"a", b"2", base_sequence=1, **producer)
    put(log, b"a", b"3")  # an idempotence-free client supersedes both
    log.roll()
    put(log, b"z", b"1")

    stats = clean(log)

    batches = all_batches(log)
    assert [(b.base_offset, b.last_offset, b.header.records_count) for b in batches] == [
        (1, 1, 0),  # the producer's last batch, emptied but kept
        (2, 2, 1),
        (3, 3, 1),
    ]
    empty = batches[0].header
    assert (empty.producer_id, empty.producer_epoch, empty.base_sequence) == (7, 3, 1)
    assert empty.max_timestamp == T0 and empty.compression is Compression.NONE
    assert stats.empty_batches_kept == 1


def test_kept_empty_batch_goes_once_its_producer_writes_again(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", Clock())
    put(log, b"a", b"1", producer_id=7, producer_epoch=3, base_sequence=0)
    put(log, b"a", b"2")
    log.roll()
    clean(log)
    assert [b.header.records_count for b in all_batches(log)] == [0, 1]

    put(log, b"b", b"1", producer_id=7, producer_epoch=3, base_sequence=1)
    log.roll()
    put(log, b"z", b"1")
    clean(log)

    assert [(b.base_offset, b.header.records_count) for b in all_batches(log)] == [(1, 1), (2, 1), (3, 1)]


def test_rewritten_batches_keep_offsets_and_producer_fields(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", Clock(), segment_bytes=10_000)
    data = build_batch(
        [(b"a", b"1", T0), (b"b", b"1", T0 + 1, [("trace", b"t1")]), (b"a", b"2", T0 + 2), (b"c", b"1", T0 + 3)],
        producer_id=42,
        producer_epoch=5,
        base_sequence=100,
        partition_leader_epoch=9,
        transactional=True,
    )
    log.append(data)
    log.append(build_control_batch(42, 5, True, 0, T0))
    put(log, b"c", b"2")
    log.roll()
    put(log, b"zz", b"1")

    clean(log)

    first, marker, _c, _z = all_batches(log)
    h = first.header
    assert (h.base_offset, h.last_offset) == (0, 3)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch) == (42, 5, 100, 9)
    assert h.is_transactional
    assert [(r.offset, r.key, r.value, r.headers) for r in first.records()] == [
        (1, b"b", b"1", (("trace", b"t1"),)),
        (2, b"a", b"2", ()),
    ]
    assert marker.header.is_control, "transaction markers are kept"


def test_log_append_time_batches_keep_their_append_time(tmp_path: Path) -> None:
    clock = Clock(T0 + 5000)
    log = open_log(tmp_path / "t-0", clock, message_timestamp_type="LogAppendTime", segment_bytes=10_000)
    log.append(build_batch([(b"a", b"1", T0), (b"b", b"1", T0)]))
    put(log, b"a", b"2")
    log.roll()
    put(log, b"z", b"1")

    clean(log)

    h = all_batches(log)[0].header
    assert h.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert h.max_timestamp == T0 + 5000


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD, Compression.SNAPPY])
def test_compressed_batches_are_compacted_with_the_same_codec(tmp_path: Path, codec: Compression) -> None:
    log = open_log(tmp_path / "t-0", Clock(), segment_bytes=2000)
    for round_ in range(6):
        log.append(
            build_batch([(b"k%d" % i, b"v%d-%d" % (i, round_) * 10, T0) for i in range(10)], compression=codec)
        )
    log.roll()
    put(log, b"tail", b"x")
    before = all_records(log)
    untouched = {b.base_offset: b.raw for b in all_batches(log)}

    clean(log)

    batches = all_batches(log)
    assert all(b.header.compression is codec for b in batches[:-1])
    assert triples(log) == compacted(before, log.active_segment.base_offset)
    assert_kept_records_unchanged(before, all_records(log))
    assert batches[-2].raw == untouched[batches[-2].base_offset], "a batch that lost nothing is copied as is"


# ---------------------------------------------------------------------------- transactions


def test_aborted_records_are_removed_and_never_hide_committed_ones(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", Clock(), segment_bytes=10_000)
    put(log, b"k", b"committed")
    put(log, b"k", b"aborted", producer_id=5, producer_epoch=0, base_sequence=0, transactional=True)
    log.append(build_control_batch(5, 0, False, 0, T0))
    log.roll()
    put(log, b"other", b"1")

    clean(log)

    assert triples(log) == [(0, b"k", b"committed"), (3, b"other", b"1")]
    batches = all_batches(log)
    assert batches[1].header.records_count == 0, "the producer's last data batch stays, empty"
    assert batches[2].header.is_control


def markers(log: Log) -> list[tuple[int, int, bool, int | None]]:
    """(offset, producer id, commit?, delete horizon or None) of every transaction marker."""
    out = []
    for b in all_batches(log):
        if b.header.is_control:
            marker = read_control_record(b)
            assert marker is not None
            horizon = b.header.delete_horizon_ms if b.header.has_delete_horizon else None
            out.append((b.base_offset, b.header.producer_id, marker.type == ControlType.COMMIT, horizon))
    return out


def test_an_abort_marker_stays_while_its_records_are_there_and_goes_after_delete_retention(tmp_path: Path) -> None:
    # KIP-98's cleaner rules, as Kafka's: the first clean removes the aborted records and keeps
    # the marker; the next finds nothing of the transaction left and stamps the marker with a
    # delete horizon; a clean after delete.retention.ms removes it, and its .txnindex entry.
    clock = Clock()
    log = open_log(tmp_path / "t-0", clock, segment_bytes=10_000)
    put(log, b"k", b"committed")
    put(log, b"k", b"aborted", producer_id=5, producer_epoch=0, base_sequence=0, transactional=True)
    log.append(build_control_batch(5, 0, False, 0, T0))
    put(log, b"j", b"later", producer_id=5, producer_epoch=0, base_sequence=1)  # producer 5's last data
    log.roll()
    put(log, b"other", b"1")
    survivors = [(0, b"k", b"committed"), (3, b"j", b"later"), (4, b"other", b"1")]

    clean(log)
    assert triples(log) == survivors
    assert markers(log) == [(2, 5, False, None)], "the clean that removed its records keeps the marker"
    assert log.aborted_transactions(0, log.log_end_offset) == [(5, 1)]

    clean(log)
    assert markers(log) == [(2, 5, False, T0 + DAY)]

    clock.now = T0 + DAY - 1
    clean(log)
    assert markers(log) == [(2, 5, False, T0 + DAY)], "a consumer within delete.retention.ms still sees it"

    clock.now = T0 + DAY
    stats = clean(log)
    assert stats.markers_removed == 1
    assert markers(log) == []
    assert triples(log) == survivors
    assert log.aborted_transactions(0, log.log_end_offset) == []
    log.close()
    reopened = open_log(tmp_path / "t-0", clock)
    assert (triples(reopened), markers(reopened)) == (survivors, [])
    assert reopened.last_stable_offset == reopened.log_end_offset


def test_a_commit_marker_goes_after_delete_retention_once_compaction_removed_its_records(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "t-0", clock, segment_bytes=10_000)
    put(log, b"k", b"v1", producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    log.append(build_control_batch(7, 0, True, 0, T0))
    put(log, b"k", b"v2")  # supersedes the transaction's only record
    put(log, b"j", b"v1", producer_id=7, producer_epoch=0, base_sequence=1, transactional=True)
    log.append(build_control_batch(7, 0, True, 0, T0))
    log.roll()
    put(log, b"other", b"1")

    clean(log)
    clean(log)
    assert markers(log) == [(1, 7, True, T0 + DAY), (4, 7, True, None)], \
        "the second transaction's record is still there: its marker has no horizon"
    clock.now = T0 + DAY
    clean(log)
    assert markers(log) == [(4, 7, True, None)]
    assert triples(log) == [(2, b"k", b"v2"), (3, b"j", b"v1"), (5, b"other", b"1")]


def test_a_marker_that_is_its_producers_last_batch_stays_for_its_epoch(tmp_path: Path) -> None:
    # A transaction that wrote nothing to this partition still gets its marker (EndTxn marks
    # every partition added): with no data batch of the producer left, it is what holds the
    # producer's epoch, so it stays past delete.retention.ms (Kafka keeps it, emptied).
    clock = Clock()
    log = open_log(tmp_path / "t-0", clock, segment_bytes=10_000)
    put(log, b"k", b"v")
    log.append(build_control_batch(11, 3, True, 0, T0))
    log.roll()
    put(log, b"other", b"1")
    for now in (T0, T0, T0 + 2 * DAY, T0 + 3 * DAY):
        clock.now = now
        clean(log)
    assert markers(log) == [(1, 11, True, None)]
    assert log.producer_state.producers[11].epoch == 3


def test_open_transaction_stops_cleaning(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", Clock(), segment_bytes=200)
    for i in range(5):
        put(log, b"k", b"before-%d" % i)
    log.roll()
    txn = put(log, b"k", b"in-flight", producer_id=5, producer_epoch=0, base_sequence=0, transactional=True)
    for i in range(5):
        put(log, b"k", b"after-%d" % i)
    log.roll()
    put(log, b"z", b"1")

    clean(log)

    offsets = [o for o, _, _ in triples(log)]
    assert offsets[0] == 4, "before the transaction only the latest record stays"
    assert txn in offsets and all(o in offsets for o in range(txn, log.log_end_offset))


# ---------------------------------------------------------------------------- segments


def test_small_segments_are_grouped_keeping_the_first_base_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", Clock(), segment_bytes=400)
    for i in range(60):
        put(log, b"k%d" % (i % 4), b"v%d" % i)
    old = log.segments[:-1]
    groups = group_segments_by_size([segment_ref(s) for s in old], log.config.segment_bytes,
                                    log.config.segment_index_bytes)
    assert all(sum(s.size for s in g) <= 400 for g in groups if len(g) > 1)

    clean(log)
    clean(log)  # now tiny: they merge

    cleaned = log.segments[:-1]
    assert cleaned[0].base_offset == 0
    assert len(cleaned) < len(groups) <= len(old)
    assert all(s.size <= 400 for s in cleaned)
    names = sorted(p.name for p in (tmp_path / "t-0").glob("*.log"))
    assert names == sorted(s.log_path.name for s in log.segments)


def test_indexes_are_rebuilt_for_cleaned_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", Clock(), segment_bytes=5000, index_interval_bytes=50)
    for i in range(80):
        put(log, b"k%d" % (i % 30), b"v" * 30)
    log.roll()
    put(log, b"tail", b"x")
    clean(log)

    cleaned = [s for s in log.segments[:-1] if not s.is_empty]
    assert cleaned
    for segment in cleaned:
        entries = segment.offset_index.items()
        assert entries, "a cleaned segment gets a sparse index again"
        batches = {pos: h for pos, h in segment.headers()}
        for offset, position in entries:
            assert batches[position].last_offset == offset
    for offset, key, _ in triples(log):
        found = log.read_batches(offset, 1)
        assert found and found[0].base_offset == offset


def test_cleaned_log_reopens_the_same(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "t-0", clock)
    for i in range(100):
        put(log, b"k%d" % (i % 7), b"v%d" % i)
    clean(log)
    expected = triples(log)
    log.close()

    reopened = open_log(tmp_path / "t-0", clock)
    assert reopened.recovery.clean
    assert triples(reopened) == expected


def test_a_read_taken_before_compaction_still_returns_the_old_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", Clock())
    for i in range(40):
        put(log, b"k", b"v%d" % i)
    piece = log.read(0, 1 << 20)
    assert piece is not None
    old_bytes = os.pread(piece.fileno(), piece.length, piece.position)

    clean(log)

    assert piece.read() == old_bytes
    assert [h.base_offset for _, h in iter_batches(piece.read())][0] == 0
    assert triples(log)[0][0] > 0


# ---------------------------------------------------------------------------- crash safety


class Crash(Exception):
    """Stands in for the process dying at one step of the swap protocol."""


def _crash_on(monkeypatch: pytest.MonkeyPatch, method: str, *, after: int = 0, when: str | None = None) -> None:
    real = getattr(LogSegment, method)
    calls = [0]

    def wrapper(self: LogSegment, *args: object) -> object:
        if when is None or args[0] == when:
            if calls[0] >= after:
                raise Crash(method)
            calls[0] += 1
        return real(self, *args)

    monkeypatch.setattr(LogSegment, method, wrapper)


def _build_crash_log(path: Path, clock: Clock) -> tuple[Log, list[Record]]:
    """A log whose next clean's first group merges several segments (cleaned ones and new)."""
    log = open_log(path, clock, segment_bytes=300)
    for i in range(60):
        put(log, b"k%d" % (i % 5), b"v%d" % i)
    log.roll()
    clean(log)  # leaves small segments behind, which the next clean groups
    for i in range(60):
        put(log, b"k%d" % (1 + i % 3), b"w%d" % i)  # k0 and k4 keep their old values
    config = log.config
    refs = [segment_ref(s) for s in log.segments[:-1]]
    first_group = group_segments_by_size(refs, config.segment_bytes, config.segment_index_bytes)[0]
    assert len(first_group) > 2
    log.flush()  # everything below the recovery point: only the swap forces a recheck
    return log, all_records(log)


@pytest.mark.parametrize(
    ("method", "after", "when", "committed"),
    [
        ("rename_suffix", 0, ".cleaned", False),  # .cleaned written, never renamed
        ("mark_deleted", 0, None, True),  # .swap files exist, old segments intact
        ("mark_deleted", 1, None, True),  # old segments partly renamed to .deleted
        ("rename_suffix", 0, ".swap", True),  # old segments gone, .swap not yet final
    ],
    ids=["cleaned-only", "swap-before-delete", "swap-half-deleted", "swap-before-rename"],
)
def test_crash_during_swap_reopens_without_lost_or_duplicated_offsets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str, after: int, when: str | None, committed: bool
) -> None:
    clock = Clock()
    log, before = _build_crash_log(tmp_path / "t-0", clock)
    end = log.log_end_offset
    segments = len(log.segments)
    expected = compacted(before, log.active_segment.base_offset)
    _crash_on(monkeypatch, method, after=after, when=when)
    with pytest.raises(Crash):
        clean(log)
    monkeypatch.undo()
    leftovers = {p.suffix for p in (tmp_path / "t-0").iterdir()}
    assert (".swap" in leftovers) == committed

    reopened = open_log(tmp_path / "t-0", clock)  # the crashed Log is abandoned, never closed

    assert not [p for p in (tmp_path / "t-0").iterdir() if p.suffix in (".swap", ".cleaned")]
    assert reopened.log_end_offset == end
    after_records = all_records(reopened)
    assert_kept_records_unchanged(before, after_records)
    if committed:
        # The first group was swapped in, its old segments deleted; later groups are
        # still uncleaned, which is fine.
        latest = {r.key: r.value for r in before}
        assert {r.key: r.value for r in after_records} == latest
        assert len(reopened.segments) < segments
    else:
        assert after_records == before
    assert_indexes_match_the_log(reopened)
    assert clean(reopened).segments_cleaned >= 1
    assert triples(reopened) == expected


def _build_index_crash_log(path: Path, clock: Clock) -> tuple[Log, list[Record]]:
    """A first segment that cleans to different batches at different positions, both indexed."""
    log = open_log(path, clock, segment_bytes=2000, index_interval_bytes=0)
    for i in range(60):
        put(log, b"u%d" % i if i % 2 else b"k%d" % (i % 3), b"v%d" % i)
    log.roll()
    log.flush()
    assert log.segments[0].offset_index.entries > 3
    return log, all_records(log)


def assert_indexes_match_the_log(log: Log) -> None:
    for segment in log.segments:
        batches = dict(segment.headers())
        for offset, position in segment.offset_index.items():
            assert position in batches and batches[position].last_offset == offset


def test_crash_with_index_swapped_but_log_not_yet_renamed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    log, before = _build_index_crash_log(tmp_path / "t-0", clock)
    _crash_on(monkeypatch, "rename_suffix", when=".swap")
    with pytest.raises(Crash):
        clean(log)
    monkeypatch.undo()
    directory = tmp_path / "t-0"
    # Half of step 4: the indexes reached their final names, the .log did not.
    for swap in directory.glob("*.index.swap"):
        os.rename(swap, directory / swap.name.removesuffix(".swap"))

    reopened = open_log(directory, clock)

    after = all_records(reopened)
    assert_kept_records_unchanged(before, after)
    assert len(after) < len(before)
    assert_indexes_match_the_log(reopened)


def test_uncommitted_index_swap_is_discarded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    log, before = _build_index_crash_log(tmp_path / "t-0", clock)
    _crash_on(monkeypatch, "rename_suffix", when=".cleaned")
    with pytest.raises(Crash):
        clean(log)
    monkeypatch.undo()
    directory = tmp_path / "t-0"
    # Half of step 2: the indexes became .swap, the .log is still .cleaned.
    for cleaned in directory.glob("*.index.cleaned"):
        os.rename(cleaned, directory / cleaned.name.replace(".cleaned", ".swap"))

    reopened = open_log(directory, clock)

    assert all_records(reopened) == before
    assert not list(directory.glob("*.swap"))
    assert_indexes_match_the_log(reopened)


# ---------------------------------------------------------------------------- property


_KEYED_VALUE = st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e"]), st.one_of(st.none(), st.binary(max_size=40)))


@settings(max_examples=50, deadline=None)
@given(
    batches=st.lists(
        st.tuples(st.lists(_KEYED_VALUE, min_size=1, max_size=4), st.sampled_from(list(Compression))),
        min_size=1,
        max_size=40,
    ),
    segment_bytes=st.integers(min_value=150, max_value=800),
)
def test_compaction_preserves_the_latest_value_of_every_key(
    batches: list[tuple[list[tuple[bytes, bytes | None]], Compression]], segment_bytes: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        clock = Clock()
        log = open_log(Path(tmp) / "t-0", clock, segment_bytes=segment_bytes)
        model: dict[bytes, bytes] = {}
        for records, codec in batches:
            log.append(build_batch([(k, v, clock.now) for k, v in records], compression=codec))
            for key, value in records:
                if value is None:
                    model.pop(key, None)
                else:
                    model[key] = value
        before = all_records(log)
        end = log.log_end_offset

        clean(log)  # stamps tombstones
        clock.now += DAY
        clean(log)  # removes them: the horizon has passed

        after = all_records(log)
        assert_kept_records_unchanged(before, after)
        assert log.log_end_offset == end
        state: dict[bytes, bytes] = {}
        for record in after:
            assert record.key is not None
            if record.value is None:
                state.pop(record.key, None)
            else:
                state[record.key] = record.value
        assert state == model
        latest = {r.key: r.offset for r in before}
        active_base = log.active_segment.base_offset
        for record in after:
            if record.offset < active_base:
                assert latest[record.key] == record.offset
                assert record.value is not None, "tombstones past the horizon are gone"
        log.close()


def test_max_compaction_lag_rolls_the_active_segment(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "t-0", clock, segment_bytes=1 << 20, max_compaction_lag_ms=1000)
    put(log, b"a", b"1")
    clock.now += 1001

    put(log, b"a", b"2")

    assert len(log.segments) == 2  # segment.ms (7 days) alone would not have rolled


def test_preallocate_true_is_refused_and_unclean_election_accepted() -> None:
    with pytest.raises(ConfigError, match="preallocate=true is not supported"):
        LogConfig.from_kafka({"preallocate": "true"})
    assert LogConfig.from_kafka({"unclean.leader.election.enable": "true"}).unclean_leader_election_enable
