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

Transaction markers (KIP-98's cleaner rules, as Kafka's CleanedTransactionMetadata): a
commit or abort marker stays while any data batch of its transaction (its producer's
transactional batches since that producer's previous marker) is in the log, so a
read_committed consumer always finds the marker of what it reads. A clean that finds no
such batch stamps the marker with a delete horizon (``now + delete.retention.ms``, as a
tombstone's), and a clean at or after the horizon removes it; an aborted transaction's
records all go in the first clean that reads them, so its marker goes two cleans and
``delete.retention.ms`` later. A marker that is its producer's last batch, with no data
batch of that producer left, stays: it holds the producer's latest epoch (fencing).
Kafka empties such a marker batch; pulllog keeps it whole. The cleaned segment's
``.txnindex`` keeps the entries of the abort markers that stay.

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

Swap protocol (crash safety): see :mod:`pulllog.log.swap`. The cleaner's worker writes
and fsyncs ``*.cleaned`` files (step 1) and commits them (step 2); the owner swaps them in
(steps 3-5); the cleaner's thread fsyncs the directory and unlinks the old files (step 6).

Threads and the worker process (``LogCleaner``, ``CleanerWorker``; Kafka's
``log.cleaner.threads=1``). The event loop owns every Log: appends, rolls, fetches,
retention, DeleteRecords, config changes, close. The CPU-heavy part of a clean (the
producer scan, planning, the offset map, decoding and filtering batches, steps 1 and 2
of the swap: writing, fsyncing and committing ``*.cleaned`` files no one else touches)
runs in one worker process, so it never holds the broker's GIL. One cleaner thread drives
it: it waits on the worker's pipe (holding no GIL), runs steps 3-5 on the loop and does
step 6 (fsync the directory, unlink the ``*.deleted`` files) itself. The rules that keep
this safe:

* The worker gets a ``LogSnapshot`` taken on the loop: each segment's path, base and next
  offset, and the bytes to read: all of a non-active segment (immutable), the active
  one up to the size it had then (appends only add after it). It opens every file of
  the snapshot by path first thing. Retention and DeleteRecords may have renamed one to
  ``*.deleted`` (``Log.defer_unlinks``; only the cleaner thread unlinks those, never
  while it cleans), so the worker tries that name too, and an open file stays readable
  whatever happens to its name.
* What closes, truncates or deletes segments (``Log.close``, ``delete``,
  ``truncate_to``) first pauses cleaning (``Log.cleaning``): it sets the abort flag and
  takes the lock the thread holds while the worker reads this log. The thread passes the
  abort on to the worker (its abort pipe), which checks it between batches (at most
  every 10 ms), deletes its ``*.cleaned`` files and answers; so the owner waits about
  one batch.
* Steps 3-5 of each group's swap (renames only) run on the loop, between two requests,
  so no append, fetch, retention or DeleteRecords runs in the middle of one. There the
  swap first checks that the group's segments are all still in the log (retention or
  DeleteRecords may have removed some while they were rewritten) and that the log is
  open; if not, the committed files are deleted and this clean stops, with no change to
  the log: dropping a committed swap whose old segments are untouched is safe, and so
  is finishing it at the next open after a crash (anything retention or DeleteRecords
  removed lies below the log start offset). The old segments are renamed to
  ``*.deleted`` there (unlinking a 64 MiB file takes ~75 ms here) and the thread unlinks
  them after the swap. The worker waits for the answer before it writes the next group.
* While the thread waits for the loop, the loop may be waiting for the thread (pausing
  cleaning, or shutting the cleaner down). The thread then cancels the call, which the
  loop cannot have started, deletes the committed files and gives up: neither waits
  for the other.
* The worker dies with the broker: it exits when its pipe closes or its parent changes,
  and on Linux the kernel kills it when the thread that started it ends. It never
  swaps, so a worker that outlived its broker could at most leave ``*.cleaned`` or
  ``*.swap`` files, which the next ``Log.open`` deletes or finishes. The broker stops
  it (and joins it) at shutdown.
* Readers: the log's segment tuple is replaced in one assignment, and a ``FileSlice``
  keeps its old segment file open, so a fetch that took a slice before the swap sends
  the old bytes with sendfile (the same records, plus those the clean removed: a consumer
  sees nothing it could not have seen a moment earlier). Index lookups use in-memory
  lists, which closing an index file does not invalidate.

``clean(log)`` does a whole clean in this process, on the calling thread, whatever the
dirty ratio (tests and tools); it runs the same code as the worker. A log must not be
cleaned by two cleaners at once.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from multiprocessing.connection import Connection, Pipe
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..records.batch import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    InvalidRecordError,
    Record,
    RecordBatch,
    read_header,
    rebuild_batch,
)
from ..records.compression import Compression, decompress
from ..records.control import ControlType, read_control_record
from ..records.decoding import DecodedRecord, decode_records
from .checkpoint import CLEANER_CHECKPOINT_FILE, CheckpointError, read_offsets, write_offsets
from .config import LogConfig
from .index import OffsetIndex, TimeIndex
from .segment import LogSegment
from .txn_index import AbortedTxn, decode_entries
from .swap import (
    CLEANED_SUFFIX,
    SWAP_SUFFIX,
    commit_cleaned,
    fsync_dir,
    remove_segment_files,
    swap_files,
)

if TYPE_CHECKING:
    from .log import Log

__all__ = [
    "CHECKPOINT_FILE",
    "CleanResult",
    "CleanerStats",
    "CleanerWorker",
    "LogCleaner",
    "LogSnapshot",
    "LogToClean",
    "SegmentRef",
    "clean",
    "clean_snapshot",
    "cleanable_segments",
    "group_segments_by_size",
    "log_to_clean",
    "plan_clean",
    "read_checkpoint",
    "segment_ref",
    "snapshot",
    "write_checkpoint",
]

logger = logging.getLogger(__name__)

_MAX_RELATIVE_OFFSET = 2**31 - 1
_WRITE_CHUNK = 1 << 20
_READ_CHUNK = 64 * 1024
_T = TypeVar("_T")


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
    markers_removed: int = 0  # transaction markers past their delete horizon, their transaction gone

    def __add__(self, other: "CleanerStats") -> "CleanerStats":
        return CleanerStats(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def summary(self) -> str:
        return (
            f"cleaned {self.segments_cleaned} segment(s) into {self.segments_written}, "
            f"{self.bytes_before} -> {self.bytes_after} bytes, kept {self.records_kept} record(s), "
            f"removed {self.records_removed} ({self.tombstones_removed} tombstone(s))"
            + (f" and {self.markers_removed} transaction marker(s)" if self.markers_removed else "")
        )


@dataclass(frozen=True, slots=True)
class _Producers:
    """What the cleaner needs from the log's producer and transaction history."""

    last_data_offsets: dict[int, int]  # producer id -> last offset of its last data batch
    aborted: frozenset[int]  # base offsets of data batches of aborted transactions
    first_unstable_offset: int  # first batch of a transaction still open, else the log end
    empty_txn_markers: frozenset[int] = frozenset()
    """Base offsets of markers with no data batch of their transaction in the log."""
    last_offsets: dict[int, int] = field(default_factory=dict)
    """Producer id -> last offset of its last batch, data or marker."""

    def marker_removable(self, header: BatchHeader) -> bool:
        """May the cleaner stamp this marker with a delete horizon, and remove it after?"""
        pid = header.producer_id
        if header.base_offset not in self.empty_txn_markers:
            return False
        # Its producer's last batch with no data batch left: it keeps the latest epoch.
        return pid in self.last_data_offsets or self.last_offsets.get(pid) != header.last_offset


# ---------------------------------------------------------------------------- snapshots


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """One segment as the owner saw it, in a form the worker process can take (picklable).

    ``size`` is how far to read: all of an immutable segment, the committed part of the
    active one (appends only add after it)."""

    path: str
    base_offset: int
    next_offset: int
    size: int
    largest_timestamp: int  # its max timestamp, or the file's mtime when it has none
    offset_index_entries: int
    time_index_entries: int

    @property
    def is_empty(self) -> bool:
        return self.size == 0


@dataclass(frozen=True, slots=True)
class LogSnapshot:
    """What the worker needs to plan and clean one log: paths, byte ranges, config."""

    directory: str
    config: LogConfig
    segments: tuple[SegmentRef, ...]


def segment_ref(segment: LogSegment) -> SegmentRef:
    return SegmentRef(
        path=str(segment.log_path),
        base_offset=segment.base_offset,
        next_offset=segment.next_offset,
        size=segment.size,
        largest_timestamp=_largest_timestamp(segment),
        offset_index_entries=segment.offset_index.entries,
        time_index_entries=segment.time_index.entries,
    )


def snapshot(log: Log) -> tuple[LogSnapshot, tuple[LogSegment, ...]]:
    """Run on the log's owner: the log's segments now, and the snapshot the worker reads."""
    segments = log.segments
    refs = tuple(segment_ref(s) for s in segments)
    return LogSnapshot(str(log.directory), log.config, refs), segments


def _largest_timestamp(segment: LogSegment) -> int:
    if segment.max_timestamp >= 0:
        return segment.max_timestamp
    f = segment.file  # held while its descriptor is used: the handle cache may close its own reference
    return int(os.fstat(f.fileno()).st_mtime * 1000)  # the path may be renamed meanwhile


class _SegmentFile:
    """A read-only descriptor on a segment file, for the worker.

    Opened by path. Retention and DeleteRecords may have renamed the file to
    ``*.deleted`` since the snapshot (only the cleaner's thread unlinks those, and not
    while it cleans); the owner pauses cleaning before anything else changes the files."""

    __slots__ = ("fd", "ref")

    def __init__(self, ref: SegmentRef) -> None:
        self.ref = ref
        try:
            self.fd = os.open(ref.path, os.O_RDONLY)
        except FileNotFoundError:
            self.fd = os.open(ref.path + ".deleted", os.O_RDONLY)

    @property
    def name(self) -> str:
        return os.path.basename(self.ref.path)

    def headers(self) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each whole batch below ``ref.size``."""
        end = self.ref.size
        buf, buf_start, pos = b"", 0, 0
        while pos + BATCH_HEADER_SIZE <= end:
            rel = pos - buf_start
            if rel + BATCH_HEADER_SIZE > len(buf):
                buf = os.pread(self.fd, min(_READ_CHUNK, end - pos), pos)
                buf_start, rel = pos, 0
                if len(buf) < BATCH_HEADER_SIZE:
                    return
            header = read_header(buf, rel)
            if header.size < BATCH_HEADER_SIZE or pos + header.size > end:
                return
            yield pos, header
            pos += header.size

    def read_batch(self, position: int, header: BatchHeader) -> RecordBatch:
        data = os.pread(self.fd, header.size, position)
        try:
            return RecordBatch.from_bytes(data)
        except InvalidRecordError as exc:
            raise InvalidRecordError(
                f"{self.name}: batch at position {position} (offset {header.base_offset}): {exc}; "
                "compaction stopped, nothing was changed"
            ) from None

    def mtime_ns(self) -> int:
        return os.fstat(self.fd).st_mtime_ns

    def aborted_txns(self) -> list[AbortedTxn]:
        """The segment's ``.txnindex`` entries (retention may have renamed it ``*.deleted``)."""
        path = self.ref.path.removesuffix(".log") + ".txnindex"
        for candidate in (path, path + ".deleted"):
            try:
                with open(candidate, "rb") as f:
                    return decode_entries(f.read())
            except FileNotFoundError:
                continue
        return []

    def close(self) -> None:
        os.close(self.fd)


@contextlib.contextmanager
def _opened(snap: LogSnapshot) -> Iterator[list[_SegmentFile]]:
    files: list[_SegmentFile] = []
    try:
        for ref in snap.segments:  # all at once: a later rename cannot hide one from us
            files.append(_SegmentFile(ref))
        yield files
    finally:
        for f in files:
            f.close()


# ---------------------------------------------------------------------------- planning


@dataclass(frozen=True, slots=True)
class LogToClean:
    """Kafka's ``LogToClean``: where a log's clean part ends and what may be cleaned now.

    ``segments`` is the cleanable prefix (module docstring); bytes below
    ``first_dirty_offset`` in it are clean, the rest dirty. ``compaction_delay_ms`` > 0
    means the oldest dirty record has waited longer than ``max.compaction.lag.ms``."""

    segments: tuple[SegmentRef, ...]
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
    """Plan a clean of ``log`` on this thread (see ``plan_clean``)."""
    return plan_clean(snapshot(log)[0], now_ms, first_dirty_offset)


def plan_clean(
    snap: LogSnapshot,
    now_ms: int,
    first_dirty_offset: int | None = None,
    should_abort: Callable[[], bool] = lambda: False,
) -> LogToClean:
    """Plan a clean: the cleanable prefix, its clean and dirty bytes, the compaction delay.

    A checkpoint outside the log (older than the log start, past the log end after a
    truncation, or a recreated topic) counts as none: everything is dirty."""
    with _opened(snap) as files:
        return _plan(snap, files, now_ms, first_dirty_offset, should_abort)


def _plan(
    snap: LogSnapshot,
    files: Sequence[_SegmentFile],
    now_ms: int,
    first_dirty_offset: int | None,
    should_abort: Callable[[], bool],
) -> LogToClean:
    segments = snap.segments
    producers = _scan_producers(files, should_abort)
    cleanable = tuple(cleanable_segments(segments, snap.config, now_ms, producers.first_unstable_offset))
    start = segments[0].base_offset
    first_dirty = start if first_dirty_offset is None else first_dirty_offset
    if not start <= first_dirty <= segments[-1].next_offset:
        first_dirty = start
    clean_bytes = sum(s.size for s in cleanable if s.next_offset <= first_dirty)
    dirty_bytes = sum(s.size for s in cleanable if s.next_offset > first_dirty)
    return LogToClean(
        segments=cleanable,
        producers=producers,
        first_dirty_offset=first_dirty,
        clean_bytes=clean_bytes,
        dirty_bytes=dirty_bytes,
        compaction_delay_ms=_compaction_delay(files, first_dirty, now_ms, snap.config.max_compaction_lag_ms),
    )


def _compaction_delay(files: Sequence[_SegmentFile], first_dirty: int, now_ms: int, max_lag_ms: int) -> int:
    """How long past ``max.compaction.lag.ms`` the oldest dirty record is (0: not yet).

    As Kafka: judged by the first batch's timestamp of each dirty non-active segment."""
    oldest = None
    for f in files[:-1]:
        if f.ref.next_offset <= first_dirty:
            continue
        first = next(f.headers(), None)
        if first is not None and first[1].max_timestamp > 0:
            ts = first[1].max_timestamp
            oldest = ts if oldest is None else min(oldest, ts)
    if oldest is None:
        return 0
    return max(0, now_ms - max_lag_ms - oldest)


def cleanable_segments(
    segments: Sequence[SegmentRef], config: LogConfig, now_ms: int, first_unstable_offset: int
) -> list[SegmentRef]:
    """The prefix of non-active segments that is old enough and before any open transaction."""
    lag = config.min_compaction_lag_ms
    out: list[SegmentRef] = []
    for segment in segments[:-1]:
        if segment.next_offset > first_unstable_offset:
            break
        # An empty segment (all of it cleaned away before) holds nothing the lag protects.
        if lag > 0 and not segment.is_empty and segment.largest_timestamp > now_ms - lag:
            break
        out.append(segment)
    return out


def group_segments_by_size(
    segments: Sequence[SegmentRef], max_bytes: int, max_index_bytes: int
) -> list[list[SegmentRef]]:
    """Split consecutive segments into runs that can be cleaned into one segment each."""
    groups: list[list[SegmentRef]] = []
    rest = list(segments)
    while rest:
        group = [rest.pop(0)]
        size = group[0].size
        index_bytes = group[0].offset_index_entries * OffsetIndex.entry_size
        time_index_bytes = group[0].time_index_entries * TimeIndex.entry_size
        while rest:
            nxt = rest[0]
            if size + nxt.size > max_bytes:
                break
            if index_bytes + nxt.offset_index_entries * OffsetIndex.entry_size > max_index_bytes:
                break
            if time_index_bytes + nxt.time_index_entries * TimeIndex.entry_size > max_index_bytes:
                break
            # An empty segment adds no offsets; skipping the check avoids stranding it.
            if nxt.size and nxt.next_offset - 1 - group[0].base_offset > _MAX_RELATIVE_OFFSET:
                break
            group.append(rest.pop(0))
            size += nxt.size
            index_bytes += nxt.offset_index_entries * OffsetIndex.entry_size
            time_index_bytes += nxt.time_index_entries * TimeIndex.entry_size
        groups.append(group)
    return groups


def _scan_producers(files: Sequence[_SegmentFile], should_abort: Callable[[], bool]) -> _Producers:
    """Walk every batch header once: producers' last data batches and transaction outcomes."""
    last_data: dict[int, int] = {}
    last_any: dict[int, int] = {}
    open_txns: dict[int, list[int]] = {}  # producer id -> base offsets since its last marker
    aborted: set[int] = set()
    empty_markers: set[int] = set()
    end = files[-1].ref.next_offset
    for f in files:
        for position, header in f.headers():
            if should_abort():  # per batch: the owner may be waiting to close the log
                raise CleaningAborted(f.name)
            pid = header.producer_id
            if pid >= 0:
                last_any[pid] = header.last_offset
            if header.is_control:
                marker = read_control_record(f.read_batch(position, header))
                batches = open_txns.pop(pid, [])
                if marker is not None and marker.type == ControlType.ABORT:
                    aborted.update(batches)
                if marker is not None and marker.type in (ControlType.COMMIT, ControlType.ABORT) and not batches:
                    empty_markers.add(header.base_offset)
                continue
            if pid >= 0:
                last_data[pid] = header.last_offset
            if header.is_transactional:
                open_txns.setdefault(pid, []).append(header.base_offset)
    first_unstable = min((batches[0] for batches in open_txns.values() if batches), default=end)
    return _Producers(last_data, frozenset(aborted), first_unstable, frozenset(empty_markers), last_any)


# ---------------------------------------------------------------------------- cleaning (the worker's side)


@dataclass(frozen=True, slots=True)
class CommittedGroup:
    """One group's cleaned segment, committed as ``B.*.swap`` (step 2): the owner swaps it
    in for the segments at ``base_offsets`` or drops it."""

    base_offsets: tuple[int, ...]
    end_offset: int
    stats: CleanerStats


@dataclass(frozen=True, slots=True)
class CleanResult:
    stats: CleanerStats
    first_dirty_offset: int  # the plan's, i.e. the checkpoint the clean started from
    cleaned_up_to: int  # the new first dirty offset (checkpoint); the old one if nothing was swapped
    aborted: bool = False


class CleaningAborted(Exception):
    """The log is being closed, truncated or deleted, or the cleaner is stopping."""


def clean_snapshot(
    snap: LogSnapshot,
    now: int,
    first_dirty_offset: int | None,
    on_committed: Callable[[CommittedGroup], bool],
    should_abort: Callable[[], bool] = lambda: False,
) -> CleanResult:
    """Plan, then rewrite the cleanable prefix group by group (steps 1 and 2 of the swap).

    ``on_committed`` gets each committed group and returns whether the owner swapped it
    in; the first group it refuses ends the clean. Touches no file the owner writes."""
    with _opened(snap) as files:
        plan = _plan(snap, files, now, first_dirty_offset, should_abort)
        if not plan.segments:
            return CleanResult(CleanerStats(), plan.first_dirty_offset, plan.first_dirty_offset)
        offset_map = _build_offset_map(files, plan.producers, plan.first_dirty_offset, should_abort)
        by_base = {f.ref.base_offset: f for f in files}
        config = snap.config
        stats = CleanerStats()
        cleaned_up_to = plan.first_dirty_offset
        for group in group_segments_by_size(plan.segments, config.segment_bytes, config.segment_index_bytes):
            if should_abort():
                raise CleaningAborted(snap.directory)
            group_files = [by_base[s.base_offset] for s in group]
            cleaned, group_stats = _rewrite_group(Path(snap.directory), config, group_files, offset_map,
                                                  plan.producers, now, should_abort)
            # Step 2, the commit point, here: its directory fsync can take long after a big write.
            commit_cleaned(Path(snap.directory), cleaned)
            cleaned.close()  # the owner opens the committed files itself
            committed = CommittedGroup(tuple(s.base_offset for s in group), group[-1].next_offset, group_stats)
            if not on_committed(committed):
                return CleanResult(stats, plan.first_dirty_offset, cleaned_up_to, aborted=True)
            stats += group_stats
            cleaned_up_to = max(cleaned_up_to, committed.end_offset)
    return CleanResult(stats, plan.first_dirty_offset, cleaned_up_to)


def _decode(batch: RecordBatch) -> list[DecodedRecord]:
    """The batch's records through the C decoder when built (the cleaner's hot loop).

    Timestamps are create-time: base timestamp + delta, as ``RecordBatch.records``."""
    h = batch.header
    if h.compression is Compression.NONE:
        data, pos = batch.raw, BATCH_HEADER_SIZE
    else:
        data, pos = decompress(h.compression, batch.raw[BATCH_HEADER_SIZE:]), 0
    return decode_records(DecodedRecord, data, pos, len(data), h.records_count, h.base_offset,
                          h.base_timestamp, 0, -1, "", 0)


def _build_offset_map(
    files: Sequence[_SegmentFile],
    producers: _Producers,
    first_dirty_offset: int,
    should_abort: Callable[[], bool] = lambda: False,
) -> dict[bytes, int]:
    """``key -> offset of its latest record`` over [first dirty offset, first unstable offset).

    Keys only in the clean part need no entry: a clean record is kept unless a later one
    with its key is in the map."""
    offset_map: dict[bytes, int] = {}
    limit = producers.first_unstable_offset
    for f in files:
        if f.ref.base_offset >= limit:
            break
        if f.ref.next_offset <= first_dirty_offset:
            continue
        for position, header in f.headers():
            if should_abort():  # per batch: the owner may be waiting to close the log
                raise CleaningAborted(f.name)
            if header.base_offset >= limit:
                break
            if header.last_offset < first_dirty_offset:
                continue
            if header.is_control or header.base_offset in producers.aborted:
                continue
            for record in _decode(f.read_batch(position, header)):
                if record.key is not None:
                    offset_map[record.key] = record.offset
    return offset_map


def _rewrite_group(
    directory: Path,
    config: LogConfig,
    group: list[_SegmentFile],
    offset_map: dict[bytes, int],
    producers: _Producers,
    now: int,
    should_abort: Callable[[], bool] = lambda: False,
) -> tuple[LogSegment, CleanerStats]:
    """Step 1 of the swap protocol: write and fsync ``B.*.cleaned``. Touches no live file."""
    base = group[0].ref.base_offset
    remove_segment_files(directory, base, CLEANED_SUFFIX)  # a leftover would be appended to
    cleaned = LogSegment(directory, base, config, created_ms=now, suffix=CLEANED_SUFFIX)
    horizon = now + config.delete_retention_ms
    kept = removed = tombstones = empties = markers_removed = 0
    markers_kept: set[int] = set()  # last offsets of the markers written
    try:
        pending = bytearray()
        positions: list[tuple[int, BatchHeader]] = []
        for f in group:
            for position, header in f.headers():
                if should_abort():  # per batch: the owner may be waiting to close the log
                    raise CleaningAborted(f.name)
                batch = f.read_batch(position, header)
                result = _filter_batch(batch, offset_map, producers, now, horizon)
                kept += result.kept
                removed += result.removed
                tombstones += result.tombstones_removed
                empties += result.empty
                markers_removed += result.markers_removed
                if result.data is None:
                    continue
                if header.is_control:
                    markers_kept.add(header.last_offset)
                positions.append((len(pending), read_header(result.data)))
                pending += result.data
                if len(pending) >= _WRITE_CHUNK:
                    cleaned.append(pending, positions)
                    pending, positions = bytearray(), []
        if pending:
            cleaned.append(pending, positions)
        # An aborted transaction's entry lives in the segment of its marker: it stays with it.
        for f in group:
            for entry in f.aborted_txns():
                if entry.last_offset in markers_kept:
                    cleaned.txn_index.append(entry)
        # Kafka keeps the last segment's mtime: time-based retention falls back on it.
        mtime_ns = max(f.mtime_ns() for f in group)
        os.utime(cleaned.log_path, ns=(mtime_ns, mtime_ns))
        cleaned.flush()
        if cleaned.is_empty:
            f = cleaned.file  # held while its descriptor is used (see handles.py)
            os.fsync(f.fileno())  # flush() skips a file nothing was appended to
    except BaseException:
        _discard(cleaned)
        raise
    return cleaned, CleanerStats(
        segments_cleaned=len(group),
        segments_written=1,
        bytes_before=sum(f.ref.size for f in group),
        bytes_after=cleaned.size,
        records_kept=kept,
        records_removed=removed,
        tombstones_removed=tombstones,
        empty_batches_kept=empties,
        markers_removed=markers_removed,
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
    markers_removed: int = 0


def _filter_batch(
    batch: RecordBatch,
    offset_map: dict[bytes, int],
    producers: _Producers,
    now: int,
    new_horizon: int,
) -> _Filtered:
    header = batch.header
    if header.is_control:
        return _filter_marker(batch, producers, now, new_horizon)
    records = _decode(batch)
    aborted = header.base_offset in producers.aborted
    expired = header.has_delete_horizon and now >= header.delete_horizon_ms
    retained: list[DecodedRecord] = []
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


def _filter_marker(batch: RecordBatch, producers: _Producers, now: int, new_horizon: int) -> _Filtered:
    """A control batch: kept while its transaction has data in the log (or it holds its
    producer's epoch); else stamped with a delete horizon, and dropped once that has passed."""
    header = batch.header
    if not producers.marker_removable(header):
        return _Filtered(batch.raw)
    if header.has_delete_horizon:
        return _Filtered(None, markers_removed=1) if now >= header.delete_horizon_ms else _Filtered(batch.raw)
    records = [Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in _decode(batch)]
    return _Filtered(rebuild_batch(header, records, delete_horizon_ms=new_horizon))


# ---------------------------------------------------------------------------- swapping (the owner's side)


def clean(log: Log, now_ms: int | None = None, first_dirty_offset: int | None = None) -> CleanerStats:
    """Compact the cleanable prefix of ``log`` now, in this process and on this thread,
    whatever its dirty ratio (tests and tools; the broker's cleaner uses its worker).

    A no-op unless ``cleanup.policy`` has compact. ``first_dirty_offset`` (the cleaner
    checkpoint) limits the offset map to what came after it; None means the whole log."""
    if not log.config.compact:
        return CleanerStats()
    now = log.clock() if now_ms is None else now_ms
    snap, live = snapshot(log)
    result = clean_snapshot(snap, now, first_dirty_offset, lambda group: swap_in_group(log, live, group, now))
    _log_result(log, result)
    return result.stats


def _log_result(log: Log, result: CleanResult) -> None:
    if result.stats.segments_cleaned:
        logger.info("%s: %s", log.directory.name, result.stats.summary())


# Runs a function on the thread that owns the log and returns its result.
OnOwner = Callable[[Callable[[], _T]], _T]


def swap_in_group(
    log: Log, live: Sequence[LogSegment], group: CommittedGroup, now: int, on_owner: OnOwner[Any] | None = None
) -> bool:
    """Steps 3-6 for one committed group: open the ``*.swap`` files, swap them in on the
    owner (``on_owner``; inline when None) if the group's segments are all still there,
    then fsync the directory and unlink the old files here. Returns False if nothing was
    swapped (the committed files are deleted then)."""
    by_base = {s.base_offset: s for s in live}
    old = [by_base[b] for b in group.base_offsets]
    cleaned = _open_committed(log, group.base_offsets[0], now)

    def swap() -> list[Path] | None:
        return _commit(log, old, cleaned)

    try:
        doomed = swap() if on_owner is None else on_owner(swap)
    except CleaningAborted:  # the swap never ran; after any other error it may have
        _discard(cleaned)
        raise
    if doomed is None:
        # Not applied: the old segments are untouched, so dropping the committed swap is
        # safe, and so is a crash before this (Log.open would finish the swap instead).
        _discard(cleaned)
        return False
    fsync_dir(log.directory)  # step 4's renames; a crash before this redoes them at open
    unlink_all(doomed)  # freeing a large file's blocks takes a while
    return True


def _open_committed(log: Log, base: int, now: int) -> LogSegment:
    cleaned = LogSegment(log.directory, base, log.config, created_ms=now, suffix=SWAP_SUFFIX)
    if not cleaned.load():
        _discard(cleaned)
        raise InvalidRecordError(f"{cleaned.log_path.name}: a cleaned segment does not load back; "
                                 "compaction stopped, nothing was changed")
    return cleaned


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


# ---------------------------------------------------------------------------- the worker process


class WorkerDied(Exception):
    """The cleaner's worker process is gone (killed, or out of memory); a new one starts."""


class _AbortCheck:
    """``should_abort`` in the worker: the owner asked to stop this request, or the broker
    is gone (then no one would ever swap, and a restarted broker owns the directory).
    Looks at most every 10 ms, so the check costs nothing per batch."""

    def __init__(self, aborts: Connection, request_id: int, parent_pid: int) -> None:
        self._aborts = aborts
        self._request_id = request_id
        self._parent_pid = parent_pid
        self._next_look = 0.0
        self._aborted = False

    def __call__(self) -> bool:
        now = time.monotonic()
        if self._aborted or now < self._next_look:
            return self._aborted
        self._next_look = now + 0.01
        if os.getppid() != self._parent_pid:
            raise SystemExit(0)
        while self._aborts.poll():
            if self._aborts.recv() == self._request_id:
                self._aborted = True
        return self._aborted


def _worker_main(requests: Connection, aborts: Connection, parent_pid: int) -> None:
    """The worker process: answers ``(id, "plan" | "clean", snapshot, now, first dirty)``
    requests one at a time until it reads None or its parent is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the broker stops us
    _die_with_parent()
    if os.getppid() != parent_pid:
        return
    try:
        while True:
            if not requests.poll(1.0):
                if os.getppid() != parent_pid:
                    return
                continue
            request = requests.recv()
            if request is None:
                return
            request_id, kind, snap, now, first_dirty = request
            should_abort = _AbortCheck(aborts, request_id, parent_pid)

            def on_committed(group: CommittedGroup) -> bool:
                requests.send(("committed", group))
                return bool(requests.recv())

            try:
                if kind == "plan":
                    answer: tuple[Any, ...] = ("done", plan_clean(snap, now, first_dirty, should_abort))
                else:
                    answer = ("done", clean_snapshot(snap, now, first_dirty, on_committed, should_abort))
            except CleaningAborted as exc:
                answer = ("failed", "aborted", str(exc))
            except InvalidRecordError as exc:
                answer = ("failed", "invalid", str(exc))
            except OSError as exc:
                answer = ("failed", "os", str(exc))
            except Exception:  # noqa: BLE001  (a bug: the broker logs it, the worker goes on)
                answer = ("failed", "bug", traceback.format_exc())
            requests.send(answer)
    except (EOFError, OSError):
        return  # the broker closed its end: it is gone


def _worker_entry(argv: Sequence[str]) -> None:
    """``python -c`` entry of the worker: its two pipe descriptors and the broker's pid."""
    requests = Connection(int(argv[0]))
    aborts = Connection(int(argv[1]), writable=False)
    _worker_main(requests, aborts, int(argv[2]))


_WORKER_CODE = "import sys; from pulllog.log.cleaner import _worker_entry; _worker_entry(sys.argv[1:])"
_SOURCE_ROOT = str(Path(__file__).resolve().parents[2])  # the directory that holds this pulllog


def _die_with_parent() -> None:
    """Linux: have the kernel kill this process when the thread that started it ends."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class CleanerWorker:
    """The process that does the CPU-heavy part of cleaning, off the broker's GIL.

    Started on first use (``python -c``: a fresh interpreter that imports only this
    module, nothing inherited from the broker's threads; one child, no helper processes)
    and reused; its pipes are ``multiprocessing.connection`` ones. Its inputs are plain
    picklable values (a ``LogSnapshot``, now, the checkpoint); it reads the segment files
    by path, writes and commits the ``*.cleaned`` files and answers with a
    ``LogToClean`` or a ``CleanResult``. For each committed group it asks the caller (``on_committed``) and
    waits for the answer: the swap itself stays with the log's owner. One request at a
    time, from one thread."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._requests: Connection | None = None
        self._aborts: Connection | None = None
        self._request_id = 0

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def alive(self) -> bool:
        process = self._process
        return process is not None and process.poll() is None

    def plan(self, snap: LogSnapshot, now: int, first_dirty: int | None,
             should_abort: Callable[[], bool]) -> LogToClean:
        result = self._call("plan", snap, now, first_dirty, lambda _group: False, should_abort)
        assert isinstance(result, LogToClean)
        return result

    def clean(self, snap: LogSnapshot, now: int, first_dirty: int | None,
              on_committed: Callable[[CommittedGroup], bool], should_abort: Callable[[], bool]) -> CleanResult:
        result = self._call("clean", snap, now, first_dirty, on_committed, should_abort)
        assert isinstance(result, CleanResult)
        return result

    def _start(self) -> tuple[Connection, Connection]:
        if self._process is not None and self._requests is not None and self._aborts is not None:
            if self._process.poll() is None:
                return self._requests, self._aborts
            logger.warning("the log cleaner's worker (pid %s) exited (%s); starting another",
                           self._process.pid, self._exitcode())
            self.stop()
        # A fresh interpreter (not fork: the broker has threads) that imports only the
        # cleaner, from the same source tree as this broker.
        mine, theirs = Pipe()
        abort_reader, abort_writer = Pipe(duplex=False)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_SOURCE_ROOT, env.get("PYTHONPATH")) if p)
        fds = (theirs.fileno(), abort_reader.fileno())
        try:
            process = subprocess.Popen(
                [sys.executable, "-c", _WORKER_CODE, *map(str, fds), str(os.getpid())],
                pass_fds=fds, env=env, stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
            abort_reader.close()
        self._process, self._requests, self._aborts = process, mine, abort_writer
        logger.info("log cleaner worker started (pid %d)", process.pid)
        return mine, abort_writer

    def _call(self, kind: str, snap: LogSnapshot, now: int, first_dirty: int | None,
              on_committed: Callable[[CommittedGroup], bool], should_abort: Callable[[], bool]) -> object:
        requests, aborts = self._start()
        self._request_id += 1
        request_id = self._request_id
        error: BaseException | None = None
        try:
            requests.send((request_id, kind, snap, now, first_dirty))
            abort_sent = False
            while True:
                while not requests.poll(0.01):  # the owner may wait (paused cleaning) for an abort
                    if not abort_sent and should_abort():
                        aborts.send(request_id)
                        abort_sent = True
                    if self._process is None or self._process.poll() is not None:
                        raise WorkerDied(f"the log cleaner's worker process exited ({self._exitcode()})")
                answer = requests.recv()
                if answer[0] != "committed":
                    break
                try:
                    swapped = on_committed(answer[1])
                except CleaningAborted:
                    swapped = False
                except BaseException as exc:  # noqa: BLE001  (told to the worker first: it waits for an answer)
                    error, swapped = exc, False
                requests.send(swapped)
        except (EOFError, OSError) as exc:
            self.stop()
            raise WorkerDied(f"lost the log cleaner's worker process: {exc}") from None
        except WorkerDied:
            self.stop()
            raise
        if error is not None:
            raise error
        if answer[0] == "done":
            return answer[1]
        _, failure, text = answer
        if failure == "aborted":
            raise CleaningAborted(text)
        if failure == "invalid":
            raise InvalidRecordError(text)
        if failure == "os":
            raise OSError(text)
        raise RuntimeError(f"the log cleaner's worker failed:\n{text}")

    def _exitcode(self) -> str:
        code = self._process.returncode if self._process is not None else None
        return f"exit code {code}" if code is None or code >= 0 else f"signal {-code}"

    def stop(self) -> None:
        """Stop the process and wait for it (it finishes the request it is on, if any, first)."""
        process, self._process = self._process, None
        requests, aborts = self._requests, self._aborts
        self._requests = self._aborts = None
        if requests is not None:
            with contextlib.suppress(OSError):
                if process is not None and process.poll() is None:
                    requests.send(None)
            requests.close()
        if aborts is not None:
            aborts.close()
        if process is None:
            return
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            logger.warning("the log cleaner's worker (pid %s) did not stop; killing it", process.pid)
            process.kill()
            process.wait()


# ---------------------------------------------------------------------------- the cleaner thread

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CleanedLog:
    """One clean the cleaner did (``LogCleaner.history``)."""

    topic_partition: TopicPartition
    dirty_ratio: float
    forced_by_max_lag: bool
    first_dirty_offset: int
    cleaned_up_to: int
    stats: CleanerStats


class LogCleaner:
    """Kafka's log cleaner with ``log.cleaner.threads=1``: one thread drives one worker
    process (``CleanerWorker``) that compacts, the filthiest log first. ``logs`` returns
    (topic, partition, log) for every log; ``on_owner`` runs a function on the thread
    that owns the logs (the event loop) and returns its result.

    Each pass plans every compacted log (``plan_clean`` from the checkpoint, in the
    worker), keeps those whose dirty ratio reaches ``min.cleanable.dirty.ratio`` or whose
    oldest dirty record is past ``max.compaction.lag.ms``, and cleans the one with the
    longest overdue compaction delay, else the highest ratio. After a clean the next pass
    starts at once; after a pass with nothing to do the thread waits ``backoff_ms`` or a
    ``wake()``. ``passes`` counts finished passes; ``request_pass`` returns the number
    ``passes`` reaches once a pass that began after the request has finished, for tests
    and tools to wait on."""

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
        self.worker = CleanerWorker()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
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
        """Stop the thread and its worker process and wait for both. Safe on the owner's
        thread: a pending swap is cancelled (its cleaned files are deleted), a running
        rewrite stops at its next batch check, so this waits for at most one batch or one
        in-flight swap, plus the worker's exit."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.worker.stop()

    def cleaned(self, topic: str, partition: int) -> int:
        """How many times the cleaner cleaned this partition."""
        return sum(1 for c in self.history if c.topic_partition == (topic, partition))

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        try:
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
        finally:
            self.worker.stop()  # started on this thread: stopped by it too

    def run_pass(self) -> bool:
        """Clean the filthiest log that needs it; True if one was cleaned."""
        now = self._clock()
        candidates: list[tuple[int, float, TopicPartition, Log]] = []
        for topic, partition, log in list(self._logs()):
            if self._stop.is_set():
                return False
            log.defer_unlinks = True
            self._unlink_retained(log)
            if not log.config.compact or log.closed:
                continue
            tp = (topic, partition)
            should_abort = self._abort_check(log)
            with log.cleaning.lock:
                if log.closed:
                    continue
                try:
                    snap, _live = self._on_owner(should_abort)(functools.partial(snapshot, log))
                    plan = self.worker.plan(snap, now, self.checkpoints.get(tp), should_abort)
                except CleaningAborted:
                    continue
                except (OSError, InvalidRecordError, WorkerDied) as exc:
                    logger.error("planning compaction of %s-%d failed: %s", topic, partition, exc)
                    self.errors += 1
                    continue
            if plan.needs_cleaning(log.config.min_cleanable_dirty_ratio):
                candidates.append((plan.compaction_delay_ms, plan.dirty_ratio, tp, log))
        self._forget_missing()
        if not candidates:
            return False
        delay, ratio, tp, log = max(candidates, key=lambda c: (c[0], c[1]))
        should_abort = self._abort_check(log)
        on_owner = self._on_owner(should_abort)
        with log.cleaning.lock:
            if log.closed or log.cleaning.aborted.is_set():
                return False
            try:
                snap, live = on_owner(functools.partial(snapshot, log))  # the log moved on meanwhile
                result = self.worker.clean(
                    snap, now, self.checkpoints.get(tp),
                    lambda group: swap_in_group(log, live, group, now, on_owner), should_abort)
            except CleaningAborted:
                return False
            except (OSError, InvalidRecordError, WorkerDied) as exc:
                logger.error("compaction of %s-%d failed: %s", tp[0], tp[1], exc)
                self.errors += 1
                return False
        if not result.stats.segments_cleaned and not result.aborted:
            return False  # nothing was cleanable any more
        _log_result(log, result)
        if result.cleaned_up_to != result.first_dirty_offset:
            self.checkpoints[tp] = result.cleaned_up_to
            self._write_checkpoint()
        self.history.append(CleanedLog(tp, ratio, delay > 0, result.first_dirty_offset, result.cleaned_up_to,
                                       result.stats))
        del self.history[:-1000]
        return not result.aborted

    def _abort_check(self, log: Log) -> Callable[[], bool]:
        return lambda: self._stop.is_set() or log.cleaning.aborted.is_set()

    def _on_owner(self, should_abort: Callable[[], bool]) -> OnOwner[Any]:
        return partial_owner(self._submit, should_abort)

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
    submit: Callable[[Callable[[], _T]], concurrent.futures.Future[_T]],
    should_abort: Callable[[], bool],
) -> OnOwner[_T]:
    """Run a function on the owner and wait for it, giving up (cancelling it) on abort.

    The owner may itself be waiting for the cleaner (closing or truncating the log, or
    shutting the cleaner down); it cannot have started the function then, so the cancel
    wins and nobody waits for the other."""

    def run(fn: Callable[[], _T]) -> _T:
        try:
            future = submit(fn)
        except RuntimeError as exc:  # the owner's event loop is closed
            raise CleaningAborted(str(exc)) from None
        while True:
            try:
                return future.result(timeout=0.05)
            except concurrent.futures.TimeoutError:
                if should_abort() and future.cancel():
                    raise CleaningAborted("cancelled on the owner") from None

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
