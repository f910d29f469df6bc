"""Log compaction (``cleanup.policy=compact``): keep the latest record of every key.

Kafka's design doc "Log Compaction" and KIP-534 (delete horizon), for one partition log.

What is cleaned: a prefix of the log's segments, never the active one, and only while each
segment is (a) older than ``min.compaction.lag.ms`` (judged by its max timestamp, or the
file's mtime when it has none; an empty segment always qualifies) and (b) wholly before the first unstable offset, i.e. the
first batch of a transaction that has no marker yet. Every clean rewrites that whole prefix;
there is no cleaner checkpoint, so a clean costs a read of the log (Kafka skips the clean
part it already did).

The offset map, ``key -> offset of its latest record``, is built over the whole log up to
the first unstable offset, active segment included: a later record wins wherever it is.
Records of aborted transactions are not in the map (an aborted write must never hide a
committed one) and are removed from the cleaned segments. The map is a plain dict; Kafka
uses a fixed-size hashed buffer and cleans in several passes when it fills.

A record in a cleanable segment is kept iff

* it has a key (keyless records are invalid in a compacted topic; Kafka drops them too),
* it is not part of an aborted transaction,
* it is the latest record for its key (``offset_map[key] == offset``), and
* it is not a tombstone (value None) whose batch's delete horizon has passed.

Batches are rewritten, never merged. A retained batch keeps its base offset and its last
offset (``lastOffsetDelta``), so the offsets that remain are exactly the original ones, with
holes. It also keeps its codec (re-compressed), timestamp type, producer id/epoch/base
sequence, transactional flag and partition leader epoch; LogAppendTime batches keep their
max timestamp. A batch that loses nothing and needs no delete horizon is copied byte for
byte. A batch that loses every record is dropped, except when it is the last data batch of
its producer (producer id >= 0): then an empty batch (0 records, same offsets and producer
fields, Kafka's ``writeEmptyHeader``) keeps the producer's sequence state alive.
Simplification: control batches (transaction markers) are always kept; Kafka removes a
marker once its transaction's records are gone and the marker's delete horizon has passed.

Tombstones (KIP-534): the first clean that keeps a tombstone stamps its batch with a
delete horizon, ``now + delete.retention.ms`` (attribute bit 6; baseTimestamp holds the
horizon and record timestamp deltas are taken from it, so timestamps decode unchanged).
A clean at or after the horizon removes the tombstone. A consumer that starts reading from
the beginning within ``delete.retention.ms`` of a tombstone's first clean therefore sees it.

Grouping (Kafka's ``groupSegmentsBySize``): consecutive cleanable segments are cleaned into
one segment, named by the first one's base offset, while their original sizes add up to at
most ``segment.bytes``, their index entries fit ``segment.index.bytes`` and their offsets
stay within 2**31 - 1 of the base. The cleaned result is never larger than its input. So
the first clean of full segments rewrites them one for one (some may become empty files),
and a later clean merges the now small results.

Swap protocol (crash safety): see :mod:`pulllog.log.swap`; the cleaner writes ``*.cleaned``
files and commits them with :func:`swap.commit_swap`.

Readers: the log's segment tuple is replaced atomically, and a ``FileSlice`` keeps its old
segment file open, so a read that started before the swap returns the old bytes.
``clean`` must run on the thread that owns the log (appends to the active segment and
rolls may go on meanwhile; retention must not run at the same time).
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from .index import OffsetIndex, TimeIndex
from ..records.batch import (
    BatchHeader,
    ControlType,
    InvalidRecordError,
    Record,
    RecordBatch,
    TimestampType,
    build_batch,
    compute_crc,
    read_header,
)
from .segment import LogSegment
from .swap import CLEANED_SUFFIX, commit_swap, remove_segment_files

if TYPE_CHECKING:
    from .log import Log

__all__ = [
    "CleanerStats",
    "clean",
    "cleanable_segments",
    "group_segments_by_size",
]

logger = logging.getLogger(__name__)

_MAX_RELATIVE_OFFSET = 2**31 - 1
_WRITE_CHUNK = 1 << 20
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class CleanerStats:
    """What one ``clean`` did. Record counts cover data records only, not markers."""

    segments_cleaned: int = 0  # old segments rewritten
    segments_written: int = 0  # cleaned segments that replaced them
    bytes_before: int = 0
    bytes_after: int = 0
    records_kept: int = 0
    records_removed: int = 0  # superseded, aborted, keyless and expired tombstones
    tombstones_removed: int = 0  # of records_removed, those with a null value
    empty_batches_kept: int = 0  # batches emptied but kept for their producer's state

    def __add__(self, other: "CleanerStats") -> "CleanerStats":
        return CleanerStats(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def summary(self) -> str:
        return (
            f"cleaned {self.segments_cleaned} segment(s) into {self.segments_written}, "
            f"{self.bytes_before} -> {self.bytes_after} bytes, kept {self.records_kept} record(s), "
            f"removed {self.records_removed} ({self.tombstones_removed} tombstone(s))"
        )


@dataclass(frozen=True, slots=True)
class _Producers:
    """What the cleaner needs from the log's producer and transaction history."""

    last_data_offsets: dict[int, int]  # producer id -> last offset of its last data batch
    aborted: frozenset[int]  # base offsets of data batches of aborted transactions
    first_unstable_offset: int  # first batch of a transaction still open, else the log end


# ---------------------------------------------------------------------------- cleaning


def clean(log: Log, now_ms: int | None = None) -> CleanerStats:
    """Compact the cleanable prefix of ``log``; a no-op unless ``cleanup.policy`` has compact."""
    if not log.config.compact:
        return CleanerStats()
    now = log.clock() if now_ms is None else now_ms
    segments = log.segments
    producers = _scan_producers(segments)
    cleanable = cleanable_segments(log, now, producers.first_unstable_offset)
    if not cleanable:
        return CleanerStats()
    offset_map = _build_offset_map(segments, producers)
    stats = CleanerStats()
    config = log.config
    for group in group_segments_by_size(cleanable, config.segment_bytes, config.segment_index_bytes):
        stats += _clean_group(log, group, offset_map, producers, now)
    logger.info("%s: %s", log.directory.name, stats.summary())
    return stats


def cleanable_segments(log: Log, now_ms: int, first_unstable_offset: int | None = None) -> list[LogSegment]:
    """The prefix of non-active segments that is old enough and before any open transaction.

    ``first_unstable_offset`` saves a scan of the log when the caller already knows it."""
    if first_unstable_offset is None:
        first_unstable_offset = _scan_producers(log.segments).first_unstable_offset
    limit = first_unstable_offset
    lag = log.config.min_compaction_lag_ms
    out: list[LogSegment] = []
    for segment in log.segments[:-1]:
        if segment.next_offset > limit:
            break
        # An empty segment (all of it cleaned away before) holds nothing the lag protects.
        if lag > 0 and not segment.is_empty and _largest_timestamp(segment) > now_ms - lag:
            break
        out.append(segment)
    return out


def group_segments_by_size(
    segments: Sequence[LogSegment], max_bytes: int, max_index_bytes: int
) -> list[list[LogSegment]]:
    """Split consecutive segments into runs that can be cleaned into one segment each."""
    groups: list[list[LogSegment]] = []
    rest = list(segments)
    while rest:
        group = [rest.pop(0)]
        size = group[0].size
        index_bytes = _index_bytes(group[0].offset_index)
        time_index_bytes = _index_bytes(group[0].time_index)
        while rest:
            nxt = rest[0]
            if size + nxt.size > max_bytes:
                break
            if index_bytes + _index_bytes(nxt.offset_index) > max_index_bytes:
                break
            if time_index_bytes + _index_bytes(nxt.time_index) > max_index_bytes:
                break
            # An empty segment adds no offsets; skipping the check avoids stranding it.
            if nxt.size and nxt.next_offset - 1 - group[0].base_offset > _MAX_RELATIVE_OFFSET:
                break
            group.append(rest.pop(0))
            size += nxt.size
            index_bytes += _index_bytes(nxt.offset_index)
            time_index_bytes += _index_bytes(nxt.time_index)
        groups.append(group)
    return groups


def _index_bytes(index: OffsetIndex | TimeIndex) -> int:
    return index.entries * index.entry_size


def _largest_timestamp(segment: LogSegment) -> int:
    if segment.max_timestamp >= 0:
        return segment.max_timestamp
    return int(os.stat(segment.log_path).st_mtime * 1000)


def _read_batch(segment: LogSegment, position: int, header: BatchHeader) -> RecordBatch:
    data = segment.read_bytes(position, header.size)
    try:
        return RecordBatch.from_bytes(data)
    except InvalidRecordError as exc:
        raise InvalidRecordError(
            f"{segment.log_path.name}: batch at position {position} (offset {header.base_offset}): {exc}; "
            "compaction stopped, nothing was changed"
        ) from None


def _scan_producers(segments: Sequence[LogSegment]) -> _Producers:
    """Walk every batch header once: producers' last data batches and transaction outcomes."""
    last_data: dict[int, int] = {}
    open_txns: dict[int, list[int]] = {}  # producer id -> base offsets since its last marker
    aborted: set[int] = set()
    end = segments[-1].next_offset
    for segment in segments:
        for position, header in segment.headers():
            pid = header.producer_id
            if header.is_control:
                marker = _read_batch(segment, position, header).control_record()
                batches = open_txns.pop(pid, [])
                if marker is not None and marker.type == ControlType.ABORT:
                    aborted.update(batches)
                continue
            if pid >= 0:
                last_data[pid] = header.last_offset
            if header.is_transactional:
                open_txns.setdefault(pid, []).append(header.base_offset)
    first_unstable = min((batches[0] for batches in open_txns.values() if batches), default=end)
    return _Producers(last_data, frozenset(aborted), first_unstable)


def _build_offset_map(segments: Sequence[LogSegment], producers: _Producers) -> dict[bytes, int]:
    offset_map: dict[bytes, int] = {}
    limit = producers.first_unstable_offset
    for segment in segments:
        if segment.base_offset >= limit:
            break
        for position, header in segment.headers():
            if header.base_offset >= limit:
                break
            if header.is_control or header.base_offset in producers.aborted:
                continue
            for record in _read_batch(segment, position, header).records():
                if record.key is not None:
                    offset_map[record.key] = record.offset
    return offset_map


def _clean_group(
    log: Log,
    group: list[LogSegment],
    offset_map: dict[bytes, int],
    producers: _Producers,
    now: int,
) -> CleanerStats:
    base = group[0].base_offset
    remove_segment_files(log.directory, base, CLEANED_SUFFIX)  # a leftover would be appended to
    cleaned = LogSegment(log.directory, base, log.config, created_ms=now, suffix=CLEANED_SUFFIX)
    horizon = now + log.config.delete_retention_ms
    kept = removed = tombstones = empties = 0
    try:
        pending = bytearray()
        positions: list[tuple[int, BatchHeader]] = []
        for segment in group:
            for position, header in segment.headers():
                batch = _read_batch(segment, position, header)
                result = _filter_batch(batch, offset_map, producers, now, horizon)
                kept += result.kept
                removed += result.removed
                tombstones += result.tombstones_removed
                empties += result.empty
                if result.data is None:
                    continue
                positions.append((len(pending), read_header(result.data)))
                pending += result.data
                if len(pending) >= _WRITE_CHUNK:
                    cleaned.append(pending, positions)
                    pending, positions = bytearray(), []
        if pending:
            cleaned.append(pending, positions)
        # Kafka keeps the last segment's mtime: time-based retention falls back on it.
        mtime_ns = max(os.stat(s.log_path).st_mtime_ns for s in group)
        os.utime(cleaned.log_path, ns=(mtime_ns, mtime_ns))
        cleaned.flush()
        if cleaned.is_empty:
            os.fsync(cleaned.file.fileno())  # flush() skips a file nothing was appended to
    except BaseException:
        with contextlib.suppress(OSError):  # keep the original error
            cleaned.close()
        cleaned.delete()
        raise
    _swap_in(log, group, cleaned)
    return CleanerStats(
        segments_cleaned=len(group),
        segments_written=1,
        bytes_before=sum(s.size for s in group),
        bytes_after=cleaned.size,
        records_kept=kept,
        records_removed=removed,
        tombstones_removed=tombstones,
        empty_batches_kept=empties,
    )


@dataclass(frozen=True, slots=True)
class _Filtered:
    data: bytes | None  # the batch to write, or None to drop it
    kept: int = 0
    removed: int = 0
    tombstones_removed: int = 0
    empty: int = 0


def _filter_batch(
    batch: RecordBatch,
    offset_map: dict[bytes, int],
    producers: _Producers,
    now: int,
    new_horizon: int,
) -> _Filtered:
    header = batch.header
    if header.is_control:
        return _Filtered(batch.raw)
    records = batch.records()
    aborted = header.base_offset in producers.aborted
    expired = header.has_delete_horizon and now >= header.delete_horizon_ms
    retained: list[Record] = []
    tombstones_removed = 0
    for record in records:
        keep = (
            not aborted
            and record.key is not None
            and offset_map.get(record.key, record.offset) <= record.offset
            and not (record.value is None and expired)
        )
        if keep:
            retained.append(record)
        elif record.value is None:
            tombstones_removed += 1
    removed = len(records) - len(retained)
    if not retained:
        # Also drops an empty batch an earlier clean kept once its producer has moved on.
        pid = header.producer_id
        if pid < 0 or producers.last_data_offsets.get(pid) != header.last_offset:
            return _Filtered(None, removed=removed, tombstones_removed=tombstones_removed)
        if not records:
            return _Filtered(batch.raw)
        return _Filtered(_empty_batch(header), removed=removed, tombstones_removed=tombstones_removed, empty=1)
    needs_horizon = not header.has_delete_horizon and any(r.value is None for r in retained)
    if not removed and not needs_horizon:
        return _Filtered(batch.raw, kept=len(retained))
    if needs_horizon:
        horizon: int | None = new_horizon
    else:
        horizon = header.delete_horizon_ms if header.has_delete_horizon else None
    data = build_batch(
        retained,
        base_offset=header.base_offset,
        last_offset_delta=header.last_offset_delta,
        compression=header.compression,
        timestamp_type=header.timestamp_type,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch,
        transactional=header.is_transactional,
        delete_horizon_ms=horizon,
    )
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        # The append time lives only in maxTimestamp; the records carry create-time deltas.
        data = _set_timestamps(data, None, header.max_timestamp)
    return _Filtered(data, kept=len(retained), removed=removed, tombstones_removed=tombstones_removed)


def _empty_batch(header: BatchHeader) -> bytes:
    """Kafka's ``writeEmptyHeader``: no records, uncompressed, both timestamps = max timestamp."""
    data = build_batch(
        [],
        base_offset=header.base_offset,
        last_offset_delta=header.last_offset_delta,
        timestamp_type=header.timestamp_type,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch,
        transactional=header.is_transactional,
    )
    return _set_timestamps(data, header.max_timestamp, header.max_timestamp)


def _set_timestamps(data: bytes, base_timestamp: int | None, max_timestamp: int) -> bytes:
    buf = bytearray(data)
    if base_timestamp is not None:
        _INT64.pack_into(buf, 27, base_timestamp)
    _INT64.pack_into(buf, 35, max_timestamp)
    _UINT32.pack_into(buf, 17, compute_crc(buf))
    return bytes(buf)


# ---------------------------------------------------------------------------- swapping


def _swap_in(log: Log, old: list[LogSegment], cleaned: LogSegment) -> None:
    """Steps 2-5 of the swap protocol (:mod:`pulllog.log.swap`)."""
    commit_swap(log.directory, old, cleaned)
    log.replace_segments(old, [cleaned])
