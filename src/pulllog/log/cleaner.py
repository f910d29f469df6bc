"""Log compaction (``cleanup.policy=compact``): keep the latest record of every key.

Kafka's design doc "Log Compaction", its LogCleaner / LogCleanerManager, and KIP-534
(delete horizon), for one partition log.

What is cleaned: a prefix of the log's segments, never the active one, and only while each
segment is (a) older than ``min.compaction.lag.ms`` (judged by its max timestamp, or the
file's mtime when it has none; an empty segment always qualifies) and (b) wholly before
the first unstable offset, i.e. the first batch of a transaction that has no marker yet.

When (Kafka's LogCleanerManager). The cleaner checkpoint, ``cleaner-offset-checkpoint`` in
the data directory (version line ``0``, a count line, then ``topic partition offset``
lines), holds each log's first dirty offset: below it the log was cleaned. Over the
cleanable prefix, clean bytes are the segments below that offset and dirty bytes the rest;
``dirty ratio = dirty / (clean + dirty)``. A log is cleaned when its ratio reaches
``min.cleanable.dirty.ratio``, or when the first batch of a dirty non-active segment is
older than ``max.compaction.lag.ms`` (which also caps the active segment's ``segment.ms``,
so such records reach a cleanable segment). Of the logs that qualify, the one most
overdue for ``max.compaction.lag.ms`` goes first, else the one with the highest ratio. A
clean still rewrites the whole cleanable prefix, as Kafka's does (a later record can
supersede any clean one), but only when enough is dirty; the checkpoint then moves to the
end of the cleaned prefix. A checkpoint outside [log start, log end] counts as none.

The offset map, ``key -> offset of its latest record``, is built from the first dirty
offset up to the first unstable offset, active segment included: a later record wins
wherever it is, and a key only in the clean part needs no entry (a clean record stays
unless the map holds a later offset for its key). Records of aborted transactions are not
in the map (an aborted write must never hide a committed one) and are removed from the
cleaned segments. The map is a plain dict; Kafka uses a fixed-size hashed buffer and
cleans in several passes when it fills. Records are decoded by the C decoder
(``decoding.decode_records``) when it is built.

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

Swap protocol (crash safety): see :mod:`pulllog.log.swap`. The cleaner writes and
fsyncs ``*.cleaned`` files (step 1), commits them (step 2), has the owner swap them in
(steps 3-5) and fsyncs the directory and unlinks the old files (step 6).

Threads (``LogCleaner``; Kafka's ``log.cleaner.threads=1``). The event loop owns every
Log: appends, rolls, fetches, retention, DeleteRecords, config changes, close. One cleaner
thread does the slow part off the loop: planning, the producer scan, the offset map and
steps 1, 2 and 6 of the swap (writing, committing and fsyncing files no one else
touches, unlinking the ``*.deleted`` ones no segment points to any more). The rule that
keeps this safe:

* The thread only reads non-active segments, which are immutable, plus the active one
  up to the size it saw (appends only add after it), and it reads through the
  segments' open file descriptors. Retention and DeleteRecords may unlink those files
  meanwhile; an unlinked file stays readable through its descriptor.
* What closes descriptors (``Log.close``, ``delete``, ``truncate_to``) first pauses
  cleaning (``Log.cleaning``): it sets the abort flag the thread checks between batches
  and takes the lock the thread holds while reading. So a descriptor number is never
  closed (and reused) under the thread.
* Steps 3-5 of each group's swap (renames only) run on the loop (``on_owner``), between two requests, so
  no append, fetch, retention or DeleteRecords runs in the middle of one. There the
  swap first checks that the group's segments are all still in the log (retention or
  DeleteRecords may have removed some while they were rewritten) and that the log is
  open; if not, the thread deletes the cleaned (committed) files and this clean stops,
  with no change to the log: dropping a committed swap whose old segments are untouched
  is safe, and so is finishing it at the next open after a crash (anything retention or
  DeleteRecords removed lies below the log start offset). The old segments are renamed
  to ``*.deleted`` there (unlinking a 64 MiB file takes ~75 ms here) and the thread
  unlinks them after the swap.
* While the thread waits for a swap, the loop may be waiting for the thread (pausing
  cleaning, or shutting the cleaner down). The thread then cancels the swap, which the
  loop cannot have started, deletes its cleaned files and gives up: neither waits for
  the other.
* Readers: the log's segment tuple is replaced in one assignment, and a ``FileSlice``
  keeps its old segment file open, so a fetch that took a slice before the swap sends
  the old bytes with sendfile (the same records, plus those the clean removed: a consumer
  sees nothing it could not have seen a moment earlier). Index lookups use in-memory
  lists, which closing an index file does not invalidate.

``clean(log)`` does a whole clean on the calling thread, whatever the dirty ratio
(tests and tools). A cleaned log must not be cleaned by two threads at once.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..records.batch import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    ControlType,
    InvalidRecordError,
    Record,
    RecordBatch,
    read_header,
    rebuild_batch,
)
from ..records.compression import Compression, decompress
from ..records.decoding import decode_records
from .checkpoint import CLEANER_CHECKPOINT_FILE, CheckpointError, read_offsets, write_offsets
from .index import OffsetIndex, TimeIndex
from .segment import LogSegment
from .swap import CLEANED_SUFFIX, commit_cleaned, fsync_dir, remove_segment_files, swap_files

if TYPE_CHECKING:
    from .log import Log

__all__ = [
    "CHECKPOINT_FILE",
    "CleanerStats",
    "LogCleaner",
    "LogToClean",
    "clean",
    "cleanable_segments",
    "group_segments_by_size",
    "log_to_clean",
    "read_checkpoint",
    "write_checkpoint",
]

logger = logging.getLogger(__name__)

_MAX_RELATIVE_OFFSET = 2**31 - 1
_WRITE_CHUNK = 1 << 20


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


def clean(log: Log, now_ms: int | None = None, first_dirty_offset: int | None = None) -> CleanerStats:
    """Compact the cleanable prefix of ``log`` now, on this thread, whatever its dirty ratio.

    A no-op unless ``cleanup.policy`` has compact. ``first_dirty_offset`` (the cleaner
    checkpoint) limits the offset map to what came after it; None means the whole log."""
    if not log.config.compact:
        return CleanerStats()
    now = log.clock() if now_ms is None else now_ms
    plan = log_to_clean(log, now, first_dirty_offset)
    return clean_log(log, plan, now).stats


@dataclass(frozen=True, slots=True)
class LogToClean:
    """Kafka's ``LogToClean``: where a log's clean part ends and what may be cleaned now.

    ``segments`` is the cleanable prefix (module docstring); bytes below
    ``first_dirty_offset`` in it are clean, the rest dirty. ``compaction_delay_ms`` > 0
    means the oldest dirty record has waited longer than ``max.compaction.lag.ms``."""

    segments: tuple[LogSegment, ...]
    all_segments: tuple[LogSegment, ...]  # the snapshot the plan was made from
    producers: _Producers
    first_dirty_offset: int
    clean_bytes: int
    dirty_bytes: int
    compaction_delay_ms: int

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    @property
    def end_offset(self) -> int:
        """The offset after the cleanable prefix: the next checkpoint once it is cleaned."""
        return self.segments[-1].next_offset if self.segments else self.first_dirty_offset

    def needs_cleaning(self, min_cleanable_dirty_ratio: float) -> bool:
        if not self.segments or not self.dirty_bytes:
            return False
        return self.compaction_delay_ms > 0 or self.dirty_ratio >= min_cleanable_dirty_ratio


def log_to_clean(log: Log, now_ms: int, first_dirty_offset: int | None = None) -> LogToClean:
    """Plan a clean: the cleanable prefix, its clean and dirty bytes, the compaction delay.

    A checkpoint outside the log (older than the log start, past the log end after a
    truncation, or a recreated topic) counts as none: everything is dirty."""
    segments = log.segments
    producers = _scan_producers(segments)
    cleanable = tuple(cleanable_segments(log, now_ms, producers.first_unstable_offset, segments))
    start = segments[0].base_offset
    first_dirty = start if first_dirty_offset is None else first_dirty_offset
    if not start <= first_dirty <= segments[-1].next_offset:
        first_dirty = start
    clean_bytes = sum(s.size for s in cleanable if s.next_offset <= first_dirty)
    dirty_bytes = sum(s.size for s in cleanable if s.next_offset > first_dirty)
    return LogToClean(
        segments=cleanable,
        all_segments=segments,
        producers=producers,
        first_dirty_offset=first_dirty,
        clean_bytes=clean_bytes,
        dirty_bytes=dirty_bytes,
        compaction_delay_ms=_compaction_delay(segments, first_dirty, now_ms, log.config.max_compaction_lag_ms),
    )


def _compaction_delay(segments: Sequence[LogSegment], first_dirty: int, now_ms: int, max_lag_ms: int) -> int:
    """How long past ``max.compaction.lag.ms`` the oldest dirty record is (0: not yet).

    As Kafka: judged by the first batch's timestamp of each dirty non-active segment."""
    oldest = None
    for segment in segments[:-1]:
        if segment.next_offset <= first_dirty:
            continue
        first = next(segment.headers(), None)
        if first is not None and first[1].max_timestamp > 0:
            ts = first[1].max_timestamp
            oldest = ts if oldest is None else min(oldest, ts)
    if oldest is None:
        return 0
    return max(0, now_ms - max_lag_ms - oldest)


@dataclass(frozen=True, slots=True)
class CleanResult:
    stats: CleanerStats
    cleaned_up_to: int  # the new first dirty offset (checkpoint); the old one if nothing was swapped
    aborted: bool = False


class CleaningAborted(Exception):
    """The log is being closed, truncated or deleted, or the cleaner is stopping."""


# Runs a function on the thread that owns the log and returns its result (the swap).
SwapResult = list[Path] | None
OnOwner = Callable[[Callable[[], SwapResult]], SwapResult]


def clean_log(
    log: Log,
    plan: LogToClean,
    now: int,
    *,
    on_owner: OnOwner | None = None,
    should_abort: Callable[[], bool] = lambda: False,
) -> CleanResult:
    """Rewrite ``plan.segments`` group by group, swapping each in as soon as it is written.

    The rewrite runs on the calling thread; each swap runs through ``on_owner`` (inline
    when None). A group whose segments the owner removed meanwhile (retention,
    DeleteRecords) is discarded, and cleaning stops there."""
    if not plan.segments:
        return CleanResult(CleanerStats(), plan.first_dirty_offset)
    offset_map = _build_offset_map(plan.all_segments, plan.producers, plan.first_dirty_offset, should_abort)
    stats = CleanerStats()
    config = log.config
    cleaned_up_to = plan.first_dirty_offset
    for group in group_segments_by_size(plan.segments, config.segment_bytes, config.segment_index_bytes):
        if should_abort():
            return CleanResult(stats, cleaned_up_to, aborted=True)
        group_end = group[-1].next_offset
        cleaned, group_stats = _rewrite_group(log, group, offset_map, plan.producers, now, should_abort)
        # Step 2, the commit point, here: its directory fsync can take long after a big write.
        commit_cleaned(log.directory, cleaned)

        def swap(group: list[LogSegment] = group, cleaned: LogSegment = cleaned) -> list[Path] | None:
            return _commit(log, group, cleaned)

        try:
            committed = swap() if on_owner is None else on_owner(swap)
        except CleaningAborted:  # the swap never ran; after any other error it may have
            _discard(cleaned)
            raise
        if committed is None:
            # Not applied: the old segments are untouched, so dropping the committed swap is
            # safe, and so is a crash before this (Log.open would finish the swap instead).
            _discard(cleaned)
            return CleanResult(stats, cleaned_up_to, aborted=True)
        fsync_dir(log.directory)  # step 4's renames; a crash before this redoes them at open
        unlink_all(committed)  # freeing a large file's blocks takes a while
        stats += group_stats
        cleaned_up_to = max(cleaned_up_to, group_end)
    if stats.segments_cleaned:
        logger.info("%s: %s", log.directory.name, stats.summary())
    return CleanResult(stats, cleaned_up_to)


def cleanable_segments(
    log: Log,
    now_ms: int,
    first_unstable_offset: int | None = None,
    segments: Sequence[LogSegment] | None = None,
) -> list[LogSegment]:
    """The prefix of non-active segments that is old enough and before any open transaction.

    ``first_unstable_offset`` saves a scan of the log when the caller already knows it."""
    segments = log.segments if segments is None else segments
    if first_unstable_offset is None:
        first_unstable_offset = _scan_producers(segments).first_unstable_offset
    limit = first_unstable_offset
    lag = log.config.min_compaction_lag_ms
    out: list[LogSegment] = []
    for segment in segments[:-1]:
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
    return int(os.fstat(segment.file.fileno()).st_mtime * 1000)  # the path may be renamed meanwhile


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
        _yield_gil()
    first_unstable = min((batches[0] for batches in open_txns.values() if batches), default=end)
    return _Producers(last_data, frozenset(aborted), first_unstable)


@dataclass(slots=True)
class _DecodedRecord:
    """What ``decoding.decode_records`` fills in (its record contract)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: Any


def _decode(batch: RecordBatch) -> list[_DecodedRecord]:
    """The batch's records through the C decoder when built (the cleaner's hot loop).

    Timestamps are create-time: base timestamp + delta, as ``RecordBatch.records``."""
    h = batch.header
    if h.compression is Compression.NONE:
        data, pos = batch.raw, BATCH_HEADER_SIZE
    else:
        data, pos = decompress(h.compression, batch.raw[BATCH_HEADER_SIZE:]), 0
    return decode_records(_DecodedRecord, data, pos, len(data), h.records_count, h.base_offset,
                          h.base_timestamp, 0, -1, "", 0)


def _build_offset_map(
    segments: Sequence[LogSegment],
    producers: _Producers,
    first_dirty_offset: int,
    should_abort: Callable[[], bool] = lambda: False,
) -> dict[bytes, int]:
    """``key -> offset of its latest record`` over [first dirty offset, first unstable offset).

    Keys only in the clean part need no entry: a clean record is kept unless a later one
    with its key is in the map."""
    offset_map: dict[bytes, int] = {}
    limit = producers.first_unstable_offset
    for segment in segments:
        if segment.base_offset >= limit:
            break
        if segment.next_offset <= first_dirty_offset:
            continue
        for position, header in segment.headers():
            if should_abort():  # per batch: the owner may be waiting to close the log
                raise CleaningAborted(segment.log_path.name)
            if header.base_offset >= limit:
                break
            if header.last_offset < first_dirty_offset:
                continue
            if header.is_control or header.base_offset in producers.aborted:
                continue
            for record in _decode(_read_batch(segment, position, header)):
                if record.key is not None:
                    offset_map[record.key] = record.offset
        _yield_gil()
    return offset_map


def _yield_gil() -> None:
    """Let the event loop's thread run: a CPU-bound thread keeps the GIL up to the switch
    interval (5 ms) each time the loop thread makes a syscall, which would add that much to
    every request the loop serves while cleaning goes on."""
    time.sleep(0)


def _rewrite_group(
    log: Log,
    group: list[LogSegment],
    offset_map: dict[bytes, int],
    producers: _Producers,
    now: int,
    should_abort: Callable[[], bool] = lambda: False,
) -> tuple[LogSegment, CleanerStats]:
    """Step 1 of the swap protocol: write and fsync ``B.*.cleaned``. Touches no live file."""
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
                if should_abort():  # per batch: the owner may be waiting to close the log
                    raise CleaningAborted(segment.log_path.name)
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
                    _yield_gil()
        if pending:
            cleaned.append(pending, positions)
        # Kafka keeps the last segment's mtime: time-based retention falls back on it.
        # fstat: retention may rename a file of the group meanwhile (the swap then gives up).
        mtime_ns = max(os.fstat(s.file.fileno()).st_mtime_ns for s in group)
        os.utime(cleaned.log_path, ns=(mtime_ns, mtime_ns))
        cleaned.flush()
        if cleaned.is_empty:
            os.fsync(cleaned.file.fileno())  # flush() skips a file nothing was appended to
    except BaseException:
        _discard(cleaned)
        raise
    return cleaned, CleanerStats(
        segments_cleaned=len(group),
        segments_written=1,
        bytes_before=sum(s.size for s in group),
        bytes_after=cleaned.size,
        records_kept=kept,
        records_removed=removed,
        tombstones_removed=tombstones,
        empty_batches_kept=empties,
    )


def _discard(cleaned: LogSegment) -> None:
    with contextlib.suppress(OSError):  # keep the original error
        cleaned.close()
    cleaned.delete()


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
    records = _decode(batch)
    aborted = header.base_offset in producers.aborted
    expired = header.has_delete_horizon and now >= header.delete_horizon_ms
    retained: list[_DecodedRecord] = []
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
        return _Filtered(rebuild_batch(header, []), removed=removed, tombstones_removed=tombstones_removed, empty=1)
    needs_horizon = not header.has_delete_horizon and any(r.value is None for r in retained)
    if not removed and not needs_horizon:
        return _Filtered(batch.raw, kept=len(retained))
    if needs_horizon:
        horizon: int | None = new_horizon
    else:
        horizon = header.delete_horizon_ms if header.has_delete_horizon else None
    data = rebuild_batch(
        header, [Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in retained],
        delete_horizon_ms=horizon,
    )
    return _Filtered(data, kept=len(retained), removed=removed, tombstones_removed=tombstones_removed)


# ---------------------------------------------------------------------------- swapping


def _commit(log: Log, group: list[LogSegment], cleaned: LogSegment) -> list[Path] | None:
    """On the log's owner: swap ``cleaned`` (committed: ``*.swap``) in for ``group`` if the
    group is still there; returns the old files to unlink (off the owner's thread), or
    None if nothing was swapped (the caller deletes the cleaned files).

    Retention or DeleteRecords may have removed some of the group while it was rewritten
    off the owner's thread, and a closed log takes no swap."""
    current = log.segments
    i = next((k for k, s in enumerate(current) if s is group[0]), -1)
    still_there = i >= 0 and all(a is b for a, b in zip(current[i : i + len(group)], group))
    if log.closed or not still_there or i + len(group) >= len(current):
        return None
    return _swap_in(log, group, cleaned)


def _swap_in(log: Log, old: list[LogSegment], cleaned: LogSegment) -> list[Path]:
    """Steps 3-5 of the swap protocol (module docstring): renames only, no fsync, so the
    owner's thread is held for microseconds. Returns the old segments' ``*.deleted``
    files, which the caller unlinks."""
    cleaned.config = log.config  # a config change may have come meanwhile
    doomed = swap_files(old, cleaned)
    log.replace_segments(old, [cleaned])
    return doomed


def unlink_all(paths: Iterable[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


# ---------------------------------------------------------------------------- checkpoint

CHECKPOINT_FILE = CLEANER_CHECKPOINT_FILE


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Kafka's ``cleaner-offset-checkpoint`` (format in checkpoint.py): each log's first
    dirty offset, below which the log was cleaned. A missing or damaged file counts as
    empty (everything is dirty again)."""
    try:
        return read_offsets(path)
    except CheckpointError as exc:
        logger.warning("%s; every compacted log counts as dirty", exc)
        return {}


def write_checkpoint(path: Path, offsets: dict[tuple[str, int], int]) -> None:
    """Replace the checkpoint atomically (checkpoint.write_offsets)."""
    write_offsets(path, offsets)


# ---------------------------------------------------------------------------- the cleaner thread

_T = TypeVar("_T")
TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CleanedLog:
    """One clean the cleaner thread did (``LogCleaner.history``)."""

    topic_partition: TopicPartition
    dirty_ratio: float
    forced_by_max_lag: bool
    first_dirty_offset: int
    cleaned_up_to: int
    stats: CleanerStats


class LogCleaner:
    """Kafka's log cleaner with ``log.cleaner.threads=1``: one thread compacts, the filthiest
    log first. ``logs`` returns (topic, partition, log) for every log; ``on_owner`` runs
    a function on the thread that owns the logs (the event loop) and returns its result.

    Each pass plans every compacted log (``log_to_clean`` from the checkpoint), keeps
    those whose dirty ratio reaches ``min.cleanable.dirty.ratio`` or whose oldest dirty
    record is past ``max.compaction.lag.ms``, and cleans the one with the longest overdue
    compaction delay, else the highest ratio. After a clean the next pass starts at once;
    after a pass with nothing to do the thread waits ``backoff_ms`` or a ``wake()``.
    ``passes`` counts finished passes; ``request_pass`` returns the number ``passes``
    reaches once a pass that began after the request has finished, for tests and tools
    to wait on."""

    def __init__(
        self,
        data_dir: Path,
        logs: Callable[[], Iterable[tuple[str, int, Log]]],
        on_owner: Callable[[Callable[[], _T]], concurrent.futures.Future[_T]],
        *,
        backoff_ms: int,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.checkpoint_path = data_dir / CHECKPOINT_FILE
        self._logs = logs
        self._submit = on_owner
        self._backoff_s = backoff_ms / 1000
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self.checkpoints: dict[TopicPartition, int] = read_checkpoint(self.checkpoint_path)
        self.passes = 0
        self._passes_started = 0
        self._counter_lock = threading.Lock()
        self.history: list[CleanedLog] = []
        self.errors = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        # A thread that computes keeps the GIL up to the switch interval each time the loop's
        # thread blocks in a syscall (5 ms by default): with 1 ms, a request waits less.
        sys.setswitchinterval(min(sys.getswitchinterval(), 0.001))
        self._thread = threading.Thread(target=self._run, name="pulllog-log-cleaner", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Start the next pass now instead of after the backoff."""
        self._wake.set()

    def request_pass(self) -> int:
        """Wake the thread; ``passes`` reaches the returned number once a pass that began
        after this call is over."""
        with self._counter_lock:
            target = self._passes_started + 1
        self._wake.set()
        return target

    def shutdown(self) -> None:
        """Stop the thread and wait for it. Safe on the owner's thread: a pending swap is
        cancelled (its cleaned files are deleted), a running rewrite stops at its next batch
        check, so this waits for at most one batch or one in-flight swap."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def cleaned(self, topic: str, partition: int) -> int:
        """How many times the thread cleaned this partition."""
        return sum(1 for c in self.history if c.topic_partition == (topic, partition))

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._counter_lock:
                self._passes_started += 1
            try:
                did_work = self.run_pass()
            except Exception:  # a bug must not end compaction for good; the log says why
                logger.exception("log cleaner pass failed")
                self.errors += 1
                did_work = False
            self.passes += 1
            if not did_work:
                self._wake.wait(self._backoff_s)
                self._wake.clear()

    def run_pass(self) -> bool:
        """Clean the filthiest log that needs it; True if one was cleaned."""
        now = self._clock()
        candidates: list[tuple[int, float, TopicPartition, Log, LogToClean]] = []
        for topic, partition, log in list(self._logs()):
            if self._stop.is_set():
                return False
            log.defer_unlinks = True
            self._unlink_retained(log)
            if not log.config.compact or log.closed:
                continue
            tp = (topic, partition)
            with log.cleaning.lock:
                if log.closed:
                    continue
                plan = log_to_clean(log, now, self.checkpoints.get(tp))
            if plan.needs_cleaning(log.config.min_cleanable_dirty_ratio):
                candidates.append((plan.compaction_delay_ms, plan.dirty_ratio, tp, log, plan))
        self._forget_missing()
        if not candidates:
            return False
        delay, ratio, tp, log, _plan = max(candidates, key=lambda c: (c[0], c[1]))
        with log.cleaning.lock:
            if log.closed or log.cleaning.aborted.is_set():
                return False
            plan = log_to_clean(log, now, self.checkpoints.get(tp))  # the log moved on meanwhile
            if not plan.segments:
                return False
            should_abort = lambda: self._stop.is_set() or log.cleaning.aborted.is_set()  # noqa: E731
            try:
                result = clean_log(log, plan, now, on_owner=partial_owner(self._submit, should_abort),
                                   should_abort=should_abort)
            except CleaningAborted:
                return False
            except (OSError, InvalidRecordError) as exc:
                logger.error("compaction of %s-%d failed: %s", tp[0], tp[1], exc)
                self.errors += 1
                return False
        if result.cleaned_up_to != plan.first_dirty_offset:
            self.checkpoints[tp] = result.cleaned_up_to
            self._write_checkpoint()
        self.history.append(CleanedLog(tp, ratio, delay > 0, plan.first_dirty_offset, result.cleaned_up_to,
                                       result.stats))
        del self.history[:-1000]
        return not result.aborted

    @staticmethod
    def _unlink_retained(log: Log) -> None:
        """Unlink the files retention and DeleteRecords renamed to ``*.deleted``."""
        while True:
            try:
                path = log.files_to_unlink.popleft()
            except IndexError:
                return
            path.unlink(missing_ok=True)

    def _forget_missing(self) -> None:
        known = {(topic, partition) for topic, partition, _log in list(self._logs())}
        if any(tp not in known for tp in self.checkpoints):
            self.checkpoints = {tp: o for tp, o in self.checkpoints.items() if tp in known}
            self._write_checkpoint()

    def _write_checkpoint(self) -> None:
        try:
            write_checkpoint(self.checkpoint_path, self.checkpoints)
        except OSError as exc:  # only costs a rewrite of the clean part next time
            logger.warning("cannot write %s: %s", self.checkpoint_path.name, exc)


def partial_owner(
    submit: Callable[[Callable[[], SwapResult]], concurrent.futures.Future[SwapResult]],
    should_abort: Callable[[], bool],
) -> OnOwner:
    """Run a swap on the owner and wait for it, giving up (cancelling it) on abort.

    The owner may itself be waiting for the cleaner (closing or truncating the log, or
    shutting the cleaner down); it cannot have started the swap then, so the cancel wins
    and nobody waits for the other."""

    def run(fn: Callable[[], SwapResult]) -> SwapResult:
        try:
            future = submit(fn)
        except RuntimeError as exc:  # the owner's event loop is closed
            raise CleaningAborted(str(exc)) from None
        while True:
            try:
                return future.result(timeout=0.05)
            except concurrent.futures.TimeoutError:
                if should_abort() and future.cancel():
                    raise CleaningAborted("swap cancelled") from None

    return run


def run_on_loop(loop: Any) -> Callable[[Callable[[], _T]], concurrent.futures.Future[_T]]:
    """``on_owner`` for a log owned by an asyncio event loop."""

    def submit(fn: Callable[[], _T]) -> concurrent.futures.Future[_T]:
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def call() -> None:
            if not future.set_running_or_notify_cancel():
                return  # cancelled: the cleaner gave up on it
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

        loop.call_soon_threadsafe(call)
        return future

    return submit
