"""A partition's log: an ordered list of segments, the last of which is active.

Directory layout (one directory per partition, ``<topic>-<partition>/``)::

    00000000000000000000.log / .index / .timeindex     segments, by base offset
    00000000000000368769.log / .index / .timeindex
    00000000000000368769.snapshot   idempotent producers' state below that offset (producer_state.py)
    recovery-point        (older pulllog only: read once, then the data dir's checkpoint)
    log-start-offset      first offset still visible, written when retention / DeleteRecords
                          move it (absent: 0)
    leader-epoch-checkpoint   a replicated partition's leader epochs (leader_epoch.py)
    .clean-shutdown       a log used on its own: present only while it is closed cleanly

Owned by a broker, a log keeps no marker of its own: the broker's data directory holds
one ``.kafka_cleanshutdown`` for every log, and ``log-start-offset-checkpoint`` beside
``recovery-point-offset-checkpoint`` (clean_shutdown.py, checkpoint.py), as Kafka's
LogManager keeps them; the owner hands a log its entries in ``Log.open(clean=...)``.

Offsets: ``log_start_offset`` <= every readable offset < ``log_end_offset`` (the offset the
next appended record will get). With one replica the high watermark is the log end offset.

Guarantees (the paper's section 3.1 and Kafka's "Log" design):

* Append validates every batch of the request (magic, sizes, CRC) before writing any of
  them, then assigns offsets by patching ``baseOffset`` (8 bytes, outside the CRC). Records
  are never re-encoded.
* Flush policy: the active segment is fsynced after ``flush.messages`` records or
  ``flush.ms`` milliseconds, whichever comes first. A machine crash (power loss) can lose at
  most what was appended since the last flush; a process crash loses nothing, because the
  page cache survives it. The recovery point is advanced after each fsync. As in Kafka,
  ``flush.messages`` is checked on ``append``: the records are acknowledged only once they
  are on disk. By default ``append`` fsyncs before it returns; the broker's Produce path
  passes ``defer_flush=True`` instead, reads ``flush_messages_due`` and acknowledges after
  its own handed-off flush (below), so the event loop never waits for the disk.
  ``flush.ms`` is checked by a scheduler (the broker's housekeeping, every
  ``log.flush.scheduler.interval.ms``). Both hand the fsyncs to a worker thread:
  ``begin_flush`` on the owner's thread takes duplicated descriptors (``PendingFlush``),
  ``PendingFlush.sync`` fsyncs them on the worker, ``complete_flush`` on the owner's thread
  advances the recovery point. A roll makes a flush due too (Kafka flushes a rolled
  segment asynchronously): the scheduler hands it off the same way, so with default
  settings the recovery point follows the rolled segments. A synchronous ``flush``
  (``close``, an ``append`` without ``defer_flush``) first waits for a handed-off one, so
  nothing counts as on disk before it is.
* The recovery point is persisted by the log's owner, as Kafka's LogManager does: the
  broker writes every log's ``recovery_point`` to the data directory's
  ``recovery-point-offset-checkpoint`` (checkpoint.py) every
  ``log.flush.offset.checkpoint.interval.ms`` and at clean shutdown, and hands it back to
  ``Log.open``. A checkpointed value is therefore never ahead of what was fsynced.
* Opening after a clean shutdown of the owner reads one listing of the directory and
  nothing else: segments are opened lazily (segment.py: indexes and offsets read on first
  use, as Kafka's LazyIndex), the producer state on first use (``producer_state``), the
  recovery point and log start offset come from the owner's files. An empty partition
  costs its listing. A log on its own still checks at open what a clean open checks
  (indexes, the batches after the last index entry) and reads its producers.
* Closing fsyncs only what was written since the last flush (a log with nothing unflushed
  fsyncs nothing); an owner closing many such logs writes them all and syncs the file
  system once (``prepare_close``, ``mark_synced``).
* Recovery: on open without the clean-shutdown marker, every batch from the recovery point
  on is checked (length bounds, magic, CRC, offsets increasing) and the log is truncated at
  the first bad one; segments after it are deleted and indexes rebuilt. This survives both
  damage kinds of the design doc: a torn tail and corrupted or junk bytes. Batches below
  the recovery point are trusted, as in Kafka: segments wholly below it are opened as after
  a clean shutdown (indexes sanity-checked, the tail after the last index entry checked),
  and in the segment that holds it only the headers before it are read (from the last
  index entry below it), so a flushed log restarts without reading its data. Corruption
  below the recovery point (bit rot on a disk that acknowledged the fsync) is not looked
  for: that is Kafka's trade too. A recovery point past the log end (a file truncated
  behind the broker's back, a lost segment) is clamped: the check starts at the last whole
  batch, so a torn tail is still cut.
* Idempotent producers (producerId >= 0) are checked on append by ``producer_state``: a
  retry of one of a producer's last 5 batches is answered with its original offsets and not
  written again; an out-of-order sequence or an old epoch is refused. Batches without a
  producer id pay one comparison each.
* Replication: a log standing alone (single-broker mode) has its high watermark at the log
  end offset and stamps nothing. A replica of a replicated partition (``start_replication``)
  keeps the high watermark apart (the broker's replica manager moves it); as leader
  (``become_leader(epoch)``) it stamps partitionLeaderEpoch on every appended batch (4 bytes
  outside the CRC'd part) and starts the epoch in the leader-epoch cache
  (``leader-epoch-checkpoint``, leader_epoch.py); as follower it appends the leader's batches
  unchanged (``append_as_follower``) and truncates (``truncate_to``: segments, indexes,
  producer state, transaction index, epochs, high watermark) where its history and the
  leader's part. The high watermark itself is checkpointed by the owner
  (``replication-offset-checkpoint`` in the data directory). After a crash, recovery
  rebuilds the leader-epoch cache's tail from the partitionLeaderEpoch of the batches it
  walks (``Log.open(stamped_epochs=True)``, the default; a single broker's logs pass False).
* Reads see an immutable snapshot (a tuple that is replaced, never mutated), so a read that
  races with retention or compaction keeps working on the segments it started with.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import os
import shutil
import struct
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from ..records.batch import (
    CONTROL_MASK,
    LOG_OVERHEAD,
    BatchHeader,
    InvalidRecordError,
    RecordBatch,
    iter_batches,
    read_header,
    rebuild_batch,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batch,
)
from ..records.compression import Compression
from ..records.control import ControlRecord, build_control_batch, read_control_record
from ..records.extensions import extensions_disabled
from .config import LogConfig
from .leader_epoch import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochCache
from .producer_state import (
    SNAPSHOT_SUFFIX,
    BatchMetadata,
    MarkerReader,
    ProducerSnapshotView,
    ProducerStateManager,
)
from .segment import FileSlice, LogSegment, RecoveryResult, parse_segment_name
from .swap import SWAP_SUFFIX, complete_interrupted_swaps

__all__ = [
    "AppendInfo",
    "FollowerAppendError",
    "Log",
    "OffsetOutOfRangeError",
    "RecordTooLargeError",
    "RecordErrors",
    "RecoveryReport",
]

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".clean-shutdown"
_STRAY_SUFFIXES = (".deleted", ".cleaned", ".tmp", SWAP_SUFFIX)
_SEGMENT_FILE_SUFFIXES = (".log", ".index", ".timeindex")
RECOVERY_POINT_FILE = "recovery-point"
LOG_START_OFFSET_FILE = "log-start-offset"
_MAX_RELATIVE_OFFSET = 2**31 - 1


_GUARD_LOCK = threading.Lock()
_new_tuple = tuple.__new__
_BASE_LENGTH_EPOCH = struct.Struct(">qii")
"""A batch's first 16 bytes: baseOffset, batchLength, partitionLeaderEpoch (outside the CRC)."""
_PATCHED_BYTES = _BASE_LENGTH_EPOCH.size
_WRITEV_FROM = 4096
"""A smaller batch is copied to be patched: the copy costs less than the pieces' Python."""  # a named tuple from its fields in order, without its Python __new__


def _c_validate() -> Callable[[bytes | bytearray | memoryview, int], list[tuple[int, BatchHeader]] | None] | None:
    """``pulllog.log._clog.validate`` (``_clog.c``: the batch checks of ``Log.validate`` in C,
    None where one fails and the Python code then says why) if built and not switched off by
    ``PULLLOG_NO_EXTENSIONS=1``; else None."""
    if extensions_disabled():
        return None
    try:
        from . import _clog  # type: ignore[attr-defined]
    except ImportError:  # not built (no C compiler when installed)
        return None
    from ..records.crc import crc32c

    _clog.bind(BatchHeader, crc32c)
    return _clog.validate  # type: ignore[no-any-return]


_C_VALIDATE = _c_validate()


def _patched(header: BatchHeader, base_offset: int, epoch: int) -> BatchHeader:
    """``header`` as ``read_header`` reads it back once its batch got ``base_offset`` and, if
    ``epoch`` >= 0, that partitionLeaderEpoch: the first three fields replaced, the rest as
    validated (an append's batch is parsed once, not again after patching)."""
    return _new_tuple(BatchHeader, (base_offset, header[1], epoch if epoch >= 0 else header[2], *header[3:]))


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class OffsetOutOfRangeError(Exception):
    """The offset lies outside [log start offset, log end offset] (OFFSET_OUT_OF_RANGE)."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(
            f"offset {offset} is out of range: the log holds [{log_start_offset}, {log_end_offset}]"
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class RecordTooLargeError(InvalidRecordError):
    """A batch is larger than max.message.bytes (RECORD_TOO_LARGE)."""


class FollowerAppendError(InvalidRecordError):
    """A follower's append does not continue its log (offsets before its log end, or going back)."""


class RecordErrors(InvalidRecordError):
    """Some records were rejected (KIP-467): ``errors`` holds (batch index, record index, why)."""

    def __init__(self, message: str, errors: list[tuple[int, int, str]]) -> None:
        super().__init__(message)
        self.errors = errors


class AppendInfo(NamedTuple):
    """What an append did. A named tuple: one is made per Produce request, and a frozen
    dataclass's ``__init__`` sets each field through ``object.__setattr__``."""

    first_offset: int
    last_offset: int
    records: int
    max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    duplicate: bool = False  # a producer's retry of batches already in the log: nothing appended


@dataclass(slots=True)
class RecoveryReport:
    clean: bool
    segments: int = 0
    segments_checked: int = 0
    batches_checked: int = 0
    truncated_bytes: int = 0
    deleted_segments: int = 0
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if self.clean:
            return f"clean shutdown, {self.segments} segment(s) loaded"
        text = (
            f"recovered after unclean shutdown: checked {self.batches_checked} batch(es) in "
            f"{self.segments_checked} segment(s)"
        )
        if self.truncated_bytes or self.deleted_segments:
            text += f", truncated {self.truncated_bytes} byte(s), deleted {self.deleted_segments} segment(s)"
        return text


class CleaningGuard:
    """How the log's owner keeps the cleaner thread away while it changes files under it.

    The cleaner thread holds ``lock`` while it reads this log's segments (planning and
    rewriting) and checks ``aborted`` between batches. The owner, before it closes,
    truncates or deletes segments (which closes their file descriptors, so a number could
    be reused under the cleaner's reads), sets ``aborted`` and takes the lock: it waits at
    most one batch. Retention and DeleteRecords need no guard: they only unlink files,
    and an unlinked file stays readable through its open descriptor."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.aborted = threading.Event()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self.aborted.set()
        with self.lock:
            try:
                yield
            finally:
                self.aborted.clear()


@dataclass(eq=False)
class PendingFlush:
    """A flush handed to another thread: fsyncs of duplicated descriptors (see
    ``LogSegment.take_unflushed``), then ``Log.complete_flush`` on the owner's thread.

    ``sync`` is the only method that may run off the owner's thread; it closes the duplicates
    whatever happens and sets ``done``.
    """

    target: int
    """The log end offset when the flush began: the recovery point once the fsyncs succeed."""
    records: int
    fds: tuple[int, ...]
    segments: tuple[LogSegment, ...]
    leader_epochs: LeaderEpochCache | None = None
    """A leader-epoch cache with an entry not in its file yet (or whose write is under way on
    another thread, or failed): written with the fsyncs, so the recovery point never passes
    the batches of an epoch the checkpoint lacks (recovery walks only from the recovery
    point to rebuild it)."""
    done: threading.Event = field(default_factory=threading.Event)
    error: OSError | None = None
    completed: bool = False

    def sync(self) -> None:
        try:
            for fd in self.fds:
                os.fsync(fd)
            if self.leader_epochs is not None:
                self.leader_epochs.flush()
        except OSError as exc:
            self.error = exc
        finally:
            for fd in self.fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self.done.set()


class Log:
    """Use ``Log.open(directory, config)``; call ``close()`` to shut down cleanly."""

    def __init__(self, directory: Path, config: LogConfig, clock: Callable[[], int]) -> None:
        self.directory = directory
        self.config = config
        self.clock = clock
        self._view: tuple[tuple[LogSegment, ...], tuple[int, ...]] = ((), ())
        self.log_start_offset = 0
        self._persisted_log_start_offset: int | None = None  # what the log-start-offset file holds
        self._recovery_point = 0
        self._unflushed_records = 0
        self._last_flush_ms = clock()
        self._pending_flush: PendingFlush | None = None  # handed to a worker thread, not completed
        self.recovery = RecoveryReport(clean=True)
        self._producers = ProducerStateManager(directory)
        self._producers_loaded = False  # read on first use: see producer_state
        self._close_snapshot_synced = False
        self._own_marker = True  # False when the owner keeps the clean-shutdown marker (open's clean)
        self._cleaning: CleaningGuard | None = None  # made on first use: see cleaning
        # When set (by the log cleaner's thread), retention renames segments to *.deleted
        # and queues the paths here for that thread to unlink: see LogSegment.mark_deleted.
        self.defer_unlinks = False
        self.files_to_unlink: collections.deque[Path] = collections.deque()
        self._closed = False
        # Replication (see "Replication" in the module docstring): None while the log stands
        # alone, so the high watermark is the log end offset and nothing else is paid.
        self._high_watermark: int | None = None
        self.leader_epoch = -1  # >= 0: this replica leads in that epoch, and stamps it on appends
        self._leader_epochs: LeaderEpochCache | None = None  # read on first use

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        config: LogConfig | None = None,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        recovery_point: int | None = None,
        clean: bool | None = None,
        log_start_offset: int | None = None,
        stamped_epochs: bool = True,
    ) -> "Log":
        """Open (and after an unclean stop, recover) the log in ``directory``.

        ``recovery_point`` is this log's entry in the data directory's
        ``recovery-point-offset-checkpoint``; None means there is none (a new log, or one
        the checkpoint does not know): then everything is checked after a crash.

        ``clean``: None for a log used on its own, whose ``.clean-shutdown`` file says how it
        was closed (``close()`` writes it). True or False when the owner keeps one
        clean-shutdown marker for its whole data directory (broker/topics.py) and has read
        it: then this log writes no marker of its own, and after a clean shutdown
        ``recovery_point`` is the log end offset it was closed with.
        ``log_start_offset`` is the owner's ``log-start-offset-checkpoint`` entry (None:
        unknown, so the log's own ``log-start-offset`` file is read).
        ``stamped_epochs``: the batches' partitionLeaderEpoch are leaders' stamps (a
        replica's log), so recovery rebuilds the leader-epoch cache from them. A single
        broker passes False: its batches keep what the producer wrote there (0 or -1)."""
        path = directory if isinstance(directory, Path) else Path(directory)  # (Path(path) parses again)
        self = cls(path, config or LogConfig(), clock)
        self._load(recovery_point, clean, log_start_offset, stamped_epochs)
        return self

    def _load(self, recovery_point: int | None, owner_clean: bool | None, checkpointed_start: int | None,
              stamped_epochs: bool) -> None:
        given_recovery_point = recovery_point
        names = self._list_directory()
        if CLEAN_SHUTDOWN_FILE in names:
            # Gone before anything is written: a crash from here on must not look clean.
            (self.directory / CLEAN_SHUTDOWN_FILE).unlink()
        clean = (CLEAN_SHUTDOWN_FILE in names) if owner_clean is None else owner_clean
        self._own_marker = owner_clean is None
        swapped: set[int] = set()
        if any(name.endswith(_STRAY_SUFFIXES) for name in names):
            swapped = self._cleanup_stray_files(names)
            names = os.listdir(self.directory)
        if recovery_point is None and RECOVERY_POINT_FILE in names:
            recovery_point = _read_offset(self.directory / RECOVERY_POINT_FILE, 0)
        self.recovery_point = max(0, recovery_point or 0)
        self._load_log_start_offset(names, clean and not self._own_marker and checkpointed_start is not None,
                                    checkpointed_start)
        report = RecoveryReport(clean=clean)
        bases = sorted(b for name in names if name.endswith(".log") and (b := parse_segment_name(name)) is not None)
        segments: list[LogSegment] = []
        epoch_starts: list[tuple[int, int]] = []
        now = self.clock()
        damaged = False
        for base in bases:
            if clean and not self._own_marker and base not in swapped:
                # Kafka's trust after a clean shutdown of the owner: read on first use (LogSegment's
                # lazy open). A log on its own keeps checking at open what it would check then.
                segments.append(LogSegment(self.directory, base, self.config, created_ms=now, lazy=True))
                continue
            segment = LogSegment(self.directory, base, self.config, created_ms=now)
            if damaged:
                # Everything after a truncation point is unreachable: offsets must be contiguous.
                segment.close(deleting=True)
                segment.delete()
                report.deleted_segments += 1
                continue
            needs_check = base in swapped or (
                (not clean) and segment_may_hold(segment, self.recovery_point, bases)
            )
            if not needs_check and segment.load():
                segments.append(segment)
                continue
            # Only a crash's check may trust what was flushed; a segment that failed its
            # clean-open checks, or that a swap put in place, is walked whole.
            trusted = self.recovery_point if needs_check and base not in swapped else 0
            result: RecoveryResult = segment.recover(segments[-1].next_offset if segments else 0, trusted)
            report.segments_checked += 1
            report.batches_checked += result.batches
            epoch_starts += result.epoch_starts
            if result.truncated_bytes:
                report.truncated_bytes += result.truncated_bytes
                report.problems.append(f"{segment.log_path.name}: {result.error}")
                damaged = True
            if segment.is_empty and segments:
                segment.close(deleting=True)
                segment.delete()
                report.deleted_segments += 1
                continue
            segments.append(segment)
        if not segments:
            start = max(self.log_start_offset, self.recovery_point if not bases else 0)
            segments.append(LogSegment(self.directory, start, self.config, created_ms=now))
        report.segments = len(segments)
        self._set_segments(segments)
        if self.log_start_offset < segments[0].base_offset:
            self.log_start_offset = segments[0].base_offset
        # After the owner's clean shutdown everything was flushed: the recovery point is the log
        # end offset its entry holds, and the active segment is read on first use
        # (``recovery_point`` never passes its end once it is). Otherwise the end is read now.
        lazy_end = clean and not self._own_marker and given_recovery_point is not None and not segments[-1].loaded
        if not lazy_end:
            self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
            # After a clean shutdown everything was flushed (Kafka: the recovery point becomes
            # the log end offset); otherwise a point past the end (a lost tail) is clamped to it.
            self.recovery_point = self.log_end_offset if clean else min(self.recovery_point, self.log_end_offset)
        if not clean:
            # Everything left was just validated; the flush fsyncs what recovery walked
            # (it may never have left the page cache) before the point moves past it.
            for segment in segments:
                segment.flush()
            if stamped_epochs:
                # Before the owner can checkpoint the recovery point past the walked batches.
                self._recover_leader_epochs(epoch_starts)
            self.recovery_point = self.log_end_offset
            self._checkpoint()
            # Snapshots past the recovered end describe batches lost in the crash: gone now,
            # before any append could make them look valid (the state itself loads on first use).
            end = self.log_end_offset
            if any(name.endswith(SNAPSHOT_SUFFIX) and (o := parse_segment_name(name)) is not None and o > end
                   for name in names):
                self._producers.delete_snapshots_after(end)
        if RECOVERY_POINT_FILE in names:
            (self.directory / RECOVERY_POINT_FILE).unlink(missing_ok=True)  # the owner's checkpoint holds it now
        if self._own_marker:  # a log on its own reads its producers now, and reports what it found
            report.problems += self._load_producer_state()
        self.recovery = report
        if report.problems:
            for problem in report.problems:
                log.warning("%s: recovery: %s", self.directory.name, problem)

    def _list_directory(self) -> list[str]:
        """The one listing of the directory (creating it if missing). A segment file that is
        not a file (a directory in its place) fails here, at open, as opening it would: the
        listing tells without a stat, and a lazily opened segment is not opened until used."""
        try:
            with os.scandir(self.directory) as entries:
                names = []
                for entry in entries:
                    name = entry.name
                    if name.endswith(_SEGMENT_FILE_SUFFIXES) and entry.is_dir():
                        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), entry.path)
                    names.append(name)
                return names
        except FileNotFoundError:
            self.directory.mkdir(parents=True, exist_ok=True)
            return []

    def _load_log_start_offset(self, names: list[str], trust_checkpoint: bool, checkpointed: int | None) -> None:
        """After the owner's clean shutdown, its checkpoint entry: written after every change,
        so the log's own file (not read) holds at most that, and need not be written until
        the offset moves again. Otherwise the larger of the entry and the log's own
        ``log-start-offset`` file, which every change writes at once (no file: 0)."""
        if trust_checkpoint and checkpointed is not None:
            self.log_start_offset = self._persisted_log_start_offset = checkpointed
            return
        persisted = _read_offset(self.directory / LOG_START_OFFSET_FILE, 0) if LOG_START_OFFSET_FILE in names else 0
        self._persisted_log_start_offset = persisted
        self.log_start_offset = max(checkpointed or 0, persisted)

    def _cleanup_stray_files(self, names: list[str]) -> set[int]:
        """Finish or undo interrupted compaction swaps and deletions.

        Returns the base offsets of segments a finished swap put in place (their indexes
        must be rebuilt); see cleaner.py for the swap protocol."""
        for name in names:
            if name.endswith((".deleted", ".cleaned", ".tmp")):
                (self.directory / name).unlink(missing_ok=True)
        if not any(name.endswith(SWAP_SUFFIX) for name in names):
            return set()
        return complete_interrupted_swaps(self.directory)

    @property
    def producer_state(self) -> ProducerStateManager:
        """Idempotent producers' state, read (snapshot plus the batch headers after it) on
        first use: an append with a producer id, a roll, a truncation, retention."""
        if not self._producers_loaded:
            for problem in self._load_producer_state():
                log.warning("%s: recovery: %s", self.directory.name, problem)
        return self._producers

    def _load_producer_state(self) -> list[str]:
        """The one place the producer state is read from disk (``ProducerStateManager.load``);
        returns the problems found (damaged snapshots)."""
        problems = self._producers.load(self._segments, self.log_end_offset)
        self._producers_loaded = True
        return problems

    # ------------------------------------------------------------------ properties

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self._segments

    @property
    def cleaning(self) -> CleaningGuard:
        """The guard between the cleaner's thread and this log's owner (made on first use by
        either: most logs are never compacted, and a clean start makes none)."""
        guard = self._cleaning
        if guard is None:
            with _GUARD_LOCK:
                if self._cleaning is None:
                    self._cleaning = CleaningGuard()
                guard = self._cleaning
        return guard

    @property
    def recovery_point(self) -> int:
        """Every offset below it is fsynced. Never past the log end offset once the active
        segment is read (a lazily opened log keeps the owner's entry until then)."""
        segments = self._view[0]
        if segments and segments[-1].loaded:
            return min(self._recovery_point, segments[-1].next_offset)
        return self._recovery_point

    @recovery_point.setter
    def recovery_point(self, value: int) -> None:
        self._recovery_point = value

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        """What every in-sync replica has: consumers read below it. A log standing alone
        (one replica) commits everything appended, so it is the log end offset."""
        hw = self._high_watermark
        return self._segments[-1].next_offset if hw is None else hw

    @property
    def replicated(self) -> bool:
        return self._high_watermark is not None

    def start_replication(self, high_watermark: int) -> None:
        """From now on the high watermark is kept apart from the log end offset (a replica of a
        replicated partition): it starts at ``high_watermark`` (the checkpointed one), never
        past the log end."""
        self._high_watermark = max(self.log_start_offset, min(high_watermark, self.log_end_offset))

    def update_high_watermark(self, offset: int) -> bool:
        """Move the high watermark to ``offset`` (clamped to [log start, log end]); True if it moved.
        A leader only raises it (the ISR's minimum log end); a follower takes the leader's."""
        offset = max(self.log_start_offset, min(offset, self.log_end_offset))
        if offset == self._high_watermark:
            return False
        self._high_watermark = offset
        return True

    @property
    def leader_epochs(self) -> LeaderEpochCache:
        """The leader-epoch cache (``leader-epoch-checkpoint``), read on first use."""
        cache = self._leader_epochs
        if cache is None:
            cache = self._leader_epochs = LeaderEpochCache(self.directory)
        return cache

    def become_leader(self, epoch: int, *, flush: bool = True) -> None:
        """This replica leads in ``epoch``: the epoch starts at the log end offset, and every
        append from now on is stamped with it (partitionLeaderEpoch, outside the CRC).
        ``flush=False``: the checkpoint is written by ``flush_leader_epochs()`` later, from
        any thread (leader_epoch.py says why that is safe)."""
        self.leader_epoch = epoch
        self.leader_epochs.assign(epoch, self.log_end_offset, flush=flush)

    def _recover_leader_epochs(self, epoch_starts: list[tuple[int, int]]) -> None:
        """After a crash, make the leader-epoch cache agree with the recovered log, as Kafka's
        recovery does: an epoch the walked batches carry above the cache's latest begins at
        the first batch stamped with it (the checkpoint of a new leader's entry is written
        after it counts, so a crash can leave the previous file), and entries starting at or
        past the recovered log end go (a torn tail took their batches). Entries that begin
        below the recovery point are on disk already: ``flush`` writes a pending one before
        the point moves past it, so walking from the recovery point is enough."""
        if not epoch_starts and not (self.directory / LEADER_EPOCH_CHECKPOINT_FILE).exists():
            return  # never replicated (or nothing walked): no cache to make
        cache = self.leader_epochs
        for epoch, start in epoch_starts:
            if epoch > cache.latest_epoch:
                cache.assign(epoch, start, flush=False)
        cache.truncate_from_end(self.log_end_offset)
        cache.flush()

    def flush_leader_epochs(self) -> None:
        """Write the leader-epoch checkpoint if an entry is only in memory, or wait for the
        write under way on another thread (thread-safe; raises OSError when it fails)."""
        cache = self._leader_epochs
        if cache is not None and cache.dirty:
            cache.flush()

    def become_follower(self) -> None:
        self.leader_epoch = -1

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch (leader_epoch.py has the rules)."""
        return self.leader_epochs.end_offset_for(epoch, self.log_end_offset)

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def _set_segments(self, segments: list[LogSegment] | tuple[LogSegment, ...]) -> None:
        # One assignment, so another thread (the cleaner) never sees a mixed pair.
        self._view = (tuple(segments), tuple(s.base_offset for s in segments))

    @property
    def _segments(self) -> tuple[LogSegment, ...]:
        return self._view[0]

    # ------------------------------------------------------------------ appending

    def validate(self, data: bytes | bytearray | memoryview) -> list[tuple[int, BatchHeader]]:
        """Check every batch (magic, bounds, CRC, size limit, keys for compacted topics)
        before anything is written. Raises InvalidRecordError subclasses."""
        config = self.config
        max_bytes = config.max_message_bytes
        if _C_VALIDATE is not None:
            checked = _C_VALIDATE(data, max_bytes)  # the same checks in C, None if one fails
            if checked is not None:
                if config.compact:
                    self._check_keys(data, checked)
                return checked
        batches: list[tuple[int, BatchHeader]] = []
        pos = 0
        end = len(data)
        if end == 0:
            raise InvalidRecordError("the request holds no record batch")
        while pos < end:
            header = validate_batch(data, pos)
            size = LOG_OVERHEAD + header.batch_length
            if size > max_bytes:
                raise RecordTooLargeError(f"batch of {size} bytes exceeds max.message.bytes={max_bytes}")
            if header.records_count != header.last_offset_delta + 1 and header.records_count > 0:
                # Producers always send dense batches; only compaction leaves holes.
                raise InvalidRecordError(
                    f"batch claims {header.records_count} records but lastOffsetDelta {header.last_offset_delta}"
                )
            batches.append((pos, header))
            pos += size
        if config.compact:
            self._check_keys(data, batches)
        return batches

    def _check_keys(self, data: bytes | bytearray | memoryview, batches: list[tuple[int, BatchHeader]]) -> None:
        errors: list[tuple[int, int, str]] = []
        for i, (pos, header) in enumerate(batches):
            if header.is_control:
                continue
            batch = RecordBatch(header, bytes(data[pos : pos + header.size]))
            for j, record in enumerate(batch.records()):
                if record.key is None:
                    errors.append((i, j, "compacted topic cannot accept a record without a key"))
        if errors:
            raise RecordErrors(
                f"{len(errors)} record(s) without a key sent to a compacted topic", errors
            )

    def append(
        self, data: bytes | bytearray | memoryview, *, validated: list[tuple[int, BatchHeader]] | None = None,
        defer_flush: bool = False,
    ) -> AppendInfo:
        """Append the batches in ``data`` (one Produce request's records for this partition).

        When the append makes ``flush.messages`` due, the log is fsynced before this returns,
        unless ``defer_flush``: then the caller reads ``flush_messages_due`` and must not
        acknowledge the records before a flush (``begin_flush`` ... ``complete_flush``)
        has covered them."""
        if self._closed:
            raise RuntimeError(f"log {self.directory.name} is closed")
        batches = validated if validated is not None else self.validate(data)
        idempotent = False
        markers: MarkerReader | None = None
        for _pos, header in batches:
            if header.producer_id >= 0:  # idempotent producers: checked before anything is written
                if header.attributes & CONTROL_MASK or (
                        len(batches) > 1 and any(h.attributes & CONTROL_MASK for _p, h in batches)):
                    markers = _marker_reader(data)
                duplicate = self.producer_state.check_append(batches, markers)
                if duplicate is not None:
                    return self._duplicate_info(duplicate)
                idempotent = True
                break
        config = self.config
        target = config.compression_type
        if target != "producer" and any(
            not h.is_control and h.compression != Compression.parse(target) for _, h in batches
        ):
            data, batches = _recompress(data, batches, Compression.parse(target))
        now = self.clock()
        log_append_time = config.log_append_time
        first_offset = next_offset = self._view[0][-1].next_offset  # the log end offset
        records = 0
        max_timestamp = -1
        epoch = self.leader_epoch
        patched: list[tuple[int, BatchHeader]] = []
        buf: bytearray | tuple[bytes, memoryview]
        if (type(data) is bytes and len(data) >= _WRITEV_FROM and len(batches) == 1 and not log_append_time
                and markers is None):
            # A Produce request's one batch (bytes, as decoded): written as its patched first 16
            # bytes (baseOffset, batchLength, partitionLeaderEpoch) and a view of the rest, not
            # copied whole into a bytearray to patch (10.5 KB for 50 records of 200 bytes).
            header = batches[0][1]
            head = _BASE_LENGTH_EPOCH.pack(next_offset, header.batch_length,
                                           epoch if epoch >= 0 else header.partition_leader_epoch)
            header = _patched(header, next_offset, epoch)
            patched.append((0, header))
            next_offset = header.base_offset + header.last_offset_delta + 1
            records = header.records_count
            max_timestamp = max(header.max_timestamp, -1)
            buf = (head, memoryview(data)[_PATCHED_BYTES:])
            size = len(data)
        else:
            buf = data if isinstance(data, bytearray) else bytearray(data)
            for pos, header in batches:
                set_base_offset(buf, pos, next_offset)
                if epoch >= 0:
                    set_partition_leader_epoch(buf, pos, epoch)
                if log_append_time:  # (attributes, maxTimestamp and the CRC change: read them back)
                    set_log_append_time(buf, pos, now)
                    header = read_header(buf, pos)
                else:
                    header = _patched(header, next_offset, epoch)
                patched.append((pos, header))
                next_offset = header.base_offset + header.last_offset_delta + 1
                records += header.records_count
                if header.max_timestamp > max_timestamp:
                    max_timestamp = header.max_timestamp
            size = len(buf)
        segment = self._maybe_roll(size, now, next_offset - 1, max_timestamp)
        segment.append(buf, patched)
        if idempotent:
            if markers is None:
                self.producer_state.record_append(patched)
            else:  # positions may have moved (recompression): read the markers where they are now
                self.producer_state.record_append(patched, _marker_reader(buf), segment.txn_index.append)
        self._unflushed_records += records
        if not defer_flush and self._unflushed_records >= config.flush_messages:
            self.flush()  # flush.ms is the scheduler's: a time-based fsync never runs in an append
        return _new_tuple(AppendInfo, (first_offset, next_offset - 1, records, max_timestamp,
                                       now if log_append_time else -1, self.log_start_offset, False))

    def write_txn_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, now_ms: int | None = None,
        *, defer_flush: bool = False,
    ) -> int:
        """Append a COMMIT (``commit``) or ABORT marker for the producer's transaction and
        return its offset. It ends the producer's open transaction, moving the LSO; an
        abort is indexed in the active segment's ``.txnindex``. Raises
        ``InvalidProducerEpochError`` for an epoch older than the producer's, and its
        subclass ``TransactionCoordinatorFencedError`` for a coordinator epoch older than
        the last marker's; nothing is written then. ``defer_flush`` as for ``append``."""
        now = self.clock() if now_ms is None else now_ms
        return self.append(build_control_batch(producer_id, producer_epoch, commit, coordinator_epoch, now),
                           defer_flush=defer_flush).first_offset

    def append_as_follower(self, data: bytes | bytearray | memoryview) -> AppendInfo | None:
        """Append batches fetched from the leader as they are: their offsets and
        partitionLeaderEpoch are the leader's. A partial batch at the end (a fetch cut at its
        size limit) is left for the next fetch; None when no whole batch is there.

        Checks that they continue this log (the first at or past the log end offset, each
        after the one before: compaction may leave gaps) and their CRCs; the producer
        state, the transaction index and the leader-epoch cache follow as for a leader's
        append. The caller flushes (``flush_messages_due``) as for a deferred-flush append."""
        if self._closed:
            raise RuntimeError(f"log {self.directory.name} is closed")
        batches: list[tuple[int, BatchHeader]] = []
        end = len(data)
        pos = 0
        expected = self.log_end_offset
        records = 0
        max_timestamp = -1
        idempotent = control = False
        while pos + 61 <= end:
            header = read_header(data, pos)
            if pos + header.size > end:
                break
            header = validate_batch(data, pos)
            if header.base_offset < expected:
                raise FollowerAppendError(
                    f"{self.directory.name}: batch at offset {header.base_offset} does not continue the log "
                    f"(next offset {expected})")
            batches.append((pos, header))
            expected = header.next_offset
            records += header.records_count
            max_timestamp = max(max_timestamp, header.max_timestamp)
            if header.producer_id >= 0:
                idempotent = True
                control = control or header.is_control
            pos += header.size
        if not batches:
            return None
        buf = data if pos == end else data[:pos]
        first_offset = batches[0][1].base_offset
        cache = self.leader_epochs
        for _pos, header in batches:
            if header.partition_leader_epoch > cache.latest_epoch:
                cache.assign(header.partition_leader_epoch, header.base_offset)
        segment = self._maybe_roll(pos, self.clock(), expected - 1, max_timestamp)
        segment.append(buf, batches)
        if idempotent:
            self.producer_state.record_append(batches, _marker_reader(buf) if control else None,
                                              segment.txn_index.append)
        self._unflushed_records += records
        return AppendInfo(first_offset=first_offset, last_offset=expected - 1, records=records,
                          max_timestamp=max_timestamp, log_append_time=-1, log_start_offset=self.log_start_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Replace the whole log by an empty one starting at ``offset`` (a follower whose log
        end is below the leader's log start offset: nothing of its log can be kept)."""
        with self.cleaning.paused():
            for segment in self._segments:
                segment.close(deleting=True)
                segment.delete()
            self._set_segments([LogSegment(self.directory, offset, self.config, created_ms=self.clock())])
        self.log_start_offset = offset
        self.recovery_point = offset
        self._checkpoint()
        self.leader_epochs.clear()
        if self._high_watermark is not None:
            self._high_watermark = offset
        self._producers.delete_snapshots_after(-1)
        self._producers.load(self._segments, offset)
        self._producers_loaded = True

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest open transaction, else the high watermark: what
        read_committed consumers may read up to. Never below the log start offset (Kafka:
        retention or DeleteRecords may remove an open transaction's first batches)."""
        first_unstable = self.producer_state.first_unstable_offset()
        hw = self.high_watermark
        if first_unstable is None or first_unstable >= hw:
            return hw
        return max(first_unstable, self.log_start_offset)

    def aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions whose range meets
        [fetch_offset, upper_bound_offset), oldest marker first: what a read_committed
        fetch of that range must filter (txn_index.py says how they are found)."""
        segments, bases = self._view
        found: list[tuple[int, int]] = []
        i = max(0, bisect_right(bases, fetch_offset) - 1)
        for segment in segments[i:]:
            entries, complete = segment.txn_index.collect(fetch_offset, upper_bound_offset)
            found += [(e.producer_id, e.first_offset) for e in entries]
            if complete:
                break
        return found

    def has_ongoing_transaction(self, producer_id: int, epoch: int) -> bool:
        """Has ``producer_id`` at ``epoch`` a transaction open in this log (its first batch
        appended, no marker yet)? A Produce handler then needs no KIP-890 verification."""
        return self.producer_state.has_ongoing_transaction(producer_id, epoch)

    def producer_states(self) -> list[ProducerSnapshotView]:
        """Every producer the log knows, for DescribeProducers."""
        return self.producer_state.views()

    def _duplicate_info(self, duplicate: BatchMetadata) -> AppendInfo:
        """Kafka's answer to a retry: the offsets the batch got the first time."""
        return AppendInfo(
            first_offset=duplicate.first_offset,
            last_offset=duplicate.last_offset,
            records=0,
            max_timestamp=duplicate.timestamp,
            log_append_time=duplicate.timestamp if self.config.log_append_time else -1,
            log_start_offset=self.log_start_offset,
            duplicate=True,
        )

    def _maybe_roll(self, incoming: int, now: int, last_offset: int, max_timestamp: int) -> LogSegment:
        active = self._view[0][-1]
        overflow = last_offset - active.base_offset > _MAX_RELATIVE_OFFSET
        if active.should_roll(incoming, now, max_timestamp) or (overflow and not active.is_empty):
            return self.roll(now)
        return active

    def roll(self, now: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset."""
        now = self.clock() if now is None else now
        active = self.active_segment
        if active.is_empty:
            return active
        new = LogSegment(self.directory, self.log_end_offset, self.config, created_ms=now)
        self._set_segments(self._segments + (new,))
        self._snapshot_producers(new.base_offset, sync=True)  # a crash then replays one segment, not all
        return new

    def _snapshot_producers(self, offset: int, *, sync: bool = False) -> None:
        try:
            self.producer_state.take_snapshot(offset, sync=sync)
        except OSError as exc:  # only costs a longer scan at the next open
            log.warning("%s: cannot write the producer snapshot at %d: %s", self.directory.name, offset, exc)

    # ------------------------------------------------------------------ flushing

    @property
    def flush_messages_due(self) -> bool:
        """``flush.messages`` records or more are not yet handed to a flush (after an append
        with ``defer_flush``; also after a retry of records whose fsync failed, which come
        back as unflushed)."""
        return self._unflushed_records >= self.config.flush_messages

    def flush_due(self, now: int | None = None) -> bool:
        """``flush.ms`` has passed with data unflushed, or a segment has rolled that is not
        fsynced yet (and no handed-off flush is under way).

        The roll case is Kafka's flush at roll: with the default settings (no flush.ms or
        flush.messages) the recovery point still moves as segments roll, so a crash
        rechecks about one segment per log, not all appended since the last start. It is
        derived state (the active segment starts past the recovery point), so a failed
        fsync makes it due again without a flag to restore."""
        now = self.clock() if now is None else now
        if not self._unflushed_records or self._pending_flush is not None:
            return False
        rolled = self.active_segment.base_offset > self.recovery_point
        return rolled or now - self._last_flush_ms >= self.config.flush_ms

    def maybe_flush(self, now: int | None = None) -> bool:
        """For a periodic task on the owner's thread: flush now when ``flush_due``."""
        if self.flush_due(now):
            self.flush()
            return True
        return False

    def begin_flush(self) -> PendingFlush | None:
        """Hand what is unflushed to another thread (module docstring): that thread calls
        ``sync()``, then the owner ``complete_flush``. None when nothing is unflushed or a
        handed-off flush is still under way. OSError (out of descriptors) hands off nothing."""
        if self._pending_flush is not None or self._closed or not self._unflushed_records:
            return None
        segments = self._unflushed_segments()
        fds: list[int] = []
        try:
            for segment in segments:
                fds += segment.take_unflushed()
        except OSError:
            for fd in fds:
                os.close(fd)
            for segment in segments:
                segment.mark_unflushed()
            raise
        epochs = self._leader_epochs
        pending = PendingFlush(self.log_end_offset, self._unflushed_records, tuple(fds), segments,
                               epochs if epochs is not None and epochs.dirty else None)
        self._unflushed_records = 0
        self._last_flush_ms = self.clock()
        self._pending_flush = pending
        return pending

    def complete_flush(self, pending: PendingFlush) -> OSError | None:
        """On the owner's thread once ``pending.sync()`` returned: advance the recovery point
        and checkpoint it, or, when an fsync failed, mark the files and records unflushed
        again (the next flush retries) and answer the error. Idempotent."""
        if pending.completed:
            return pending.error
        pending.completed = True
        if self._pending_flush is pending:
            self._pending_flush = None
        if pending.error is not None:
            for segment in pending.segments:
                segment.mark_unflushed()
            self._unflushed_records += pending.records
            return pending.error
        if pending.target > self.recovery_point and not self._closed:
            self.recovery_point = pending.target
            self._checkpoint()
        return None

    def flush(self) -> None:
        """fsync every segment holding data past the recovery point, then checkpoint it."""
        pending = self._pending_flush
        if pending is not None:
            # Its files count as flushed already: wait for its fsyncs before they do.
            pending.done.wait()
            self.complete_flush(pending)
        if not self.active_segment.loaded:
            self._checkpoint()
            return  # nothing was appended since a lazy open (an append reads the segment first)
        target = self.log_end_offset
        for segment in self._unflushed_segments():
            segment.flush()
        self.flush_leader_epochs()  # before the recovery point passes the batches of its epoch
        self.recovery_point = max(self.recovery_point, target)
        self._unflushed_records = 0
        self._last_flush_ms = self.clock()
        self._checkpoint()

    def _unflushed_segments(self) -> tuple[LogSegment, ...]:
        """The segments that may hold data past the recovery point (a segment not read since
        a lazy open has nothing unflushed)."""
        active = self.active_segment
        point = self.recovery_point
        return tuple(s for s in self._segments if s.loaded and (s is active or s.next_offset > point))

    def _checkpoint(self) -> None:
        # The recovery point is not written here: the owner checkpoints every log's at once
        # (recovery-point-offset-checkpoint), off the event loop. The log start offset is,
        # when it moved: a crash must not bring back what retention or DeleteRecords removed.
        if self.log_start_offset != self._persisted_log_start_offset:
            _write_offset(self.directory / LOG_START_OFFSET_FILE, self.log_start_offset)
            self._persisted_log_start_offset = self.log_start_offset

    @property
    def needs_sync(self) -> bool:
        """``close()`` would fsync something: appended data, a flush under way, the producer
        snapshot of the close. For an owner closing many logs (``prepare_close``)."""
        return (self._pending_flush is not None or self._unflushed_records > 0
                or (self._producers_loaded and not self._close_snapshot_synced))

    def prepare_close(self) -> None:
        """Write what ``close()`` writes but without fsyncs (the producer snapshot), so that
        one sync of the whole file system covers it, then ``mark_synced``."""
        if self._closed:
            return
        for segment in self._unflushed_segments():
            try:
                segment.write_index_entries()  # entries still in memory (index.py): the sync must cover them
            except OSError:  # they stay pending: close() writes and fsyncs them, or reports the error
                pass
        if self._producers_loaded:
            self._snapshot_producers(self.log_end_offset, sync=False)

    def mark_synced(self) -> None:
        """Everything this log wrote is on disk (the owner synced the whole file system after
        ``prepare_close``): count it as flushed, so ``close()`` fsyncs nothing."""
        pending = self._pending_flush
        if pending is not None:
            pending.done.wait()
            self.complete_flush(pending)
        for segment in self._unflushed_segments():
            segment.mark_flushed()
        if self.active_segment.loaded:
            self.recovery_point = max(self.recovery_point, self.log_end_offset)
        self._unflushed_records = 0
        self._last_flush_ms = self.clock()
        self._close_snapshot_synced = self._producers_loaded

    # ------------------------------------------------------------------ reading

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> FileSlice | None:
        """Bytes from the batch holding ``offset``: a file slice, never decoded records.

        ``max_offset`` (exclusive, e.g. the high watermark) caps what is visible. Returns
        None when there is nothing at or after ``offset`` yet.
        """
        found = self._read(offset, max_bytes, max_offset, min_one_batch)
        return None if found is None else found[0]

    def read_committed(
        self, offset: int, max_bytes: int, *, min_one_batch: bool = True
    ) -> tuple[FileSlice | None, list[tuple[int, int]]]:
        """A read_committed fetch: bytes up to the last stable offset, and the aborted
        transactions (producer id, first offset) the consumer must drop from them. Their
        range is bounded as Kafka bounds it: up to the first offset index entry past the
        slice (else the segment's end), never past the LSO."""
        lso = self.last_stable_offset
        found = self._read(offset, max_bytes, lso, min_one_batch)
        if found is None:
            return None, []
        piece, segment = found
        upper = segment.offset_index.offset_at_or_after_position(piece.position + piece.length)
        upper = min(lso, segment.next_offset if upper is None else upper)
        return piece, self.aborted_transactions(offset, upper)

    def _read(
        self, offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool
    ) -> tuple[FileSlice, LogSegment] | None:
        segments, bases = self._view  # one consistent snapshot
        start, end = self.log_start_offset, segments[-1].next_offset
        if offset < start or offset > end:
            raise OffsetOutOfRangeError(offset, start, end)
        limit = end if max_offset is None else min(max_offset, end)
        if offset >= limit:
            return None
        i = max(0, bisect_right(bases, offset) - 1)
        for segment in segments[i:]:
            if segment.next_offset <= offset:
                continue
            max_position = None
            if limit < segment.next_offset:
                found = segment.find_batch(limit)
                max_position = found[0] if found else None
            piece = segment.read(offset, max_bytes, max_position, min_one_batch)
            if piece is not None:
                return piece, segment
        return None

    def read_batches(self, offset: int, max_bytes: int = 1 << 20) -> list[RecordBatch]:
        """Decoded batches from ``offset`` (for tools and tests, not the fetch path)."""
        piece = self.read(offset, max_bytes)
        if piece is None:
            return []
        data = piece.read()
        out = []
        pos = 0
        while pos < len(data):
            try:
                batch = RecordBatch.from_bytes(data, pos)
            except InvalidRecordError:
                break  # a partial batch at the end of a slice
            out.append(batch)
            pos += batch.header.size
        return out

    def batches_from_start(self, chunk_bytes: int = 4 << 20) -> Iterator[RecordBatch]:
        """Every batch from the log start offset to the log end, read ``chunk_bytes`` at a time,
        across compaction's holes (the coordinators' replays of their internal topics). A read
        that answers nothing, or no whole batch, ends it."""
        offset = self.log_start_offset
        while offset < self.log_end_offset:
            piece = self.read(offset, chunk_bytes)
            if piece is None:
                return
            data = piece.read()
            moved = False
            for pos, header in iter_batches(data):
                offset = header.next_offset
                moved = True
                yield RecordBatch.from_bytes(data, pos)
            if not moved:
                return

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp``."""
        start = self.log_start_offset
        for segment in self._segments:
            if segment.next_offset <= start or segment.max_timestamp < timestamp:
                continue
            found = segment.find_offset_by_timestamp(timestamp, start)
            if found is not None:
                return found
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3)."""
        best: LogSegment | None = None
        for segment in self._segments:
            if segment.next_offset > self.log_start_offset and (best is None or segment.max_timestamp > best.max_timestamp):
                best = segment
        if best is None or best.max_timestamp < 0:
            return None
        found = best.find_offset_by_timestamp(best.max_timestamp, self.log_start_offset)
        return found

    # ------------------------------------------------------------------ retention

    def delete_old_segments(self, now: int | None = None) -> int:
        """Apply retention.ms and retention.bytes; returns how many segments were deleted.

        Only a prefix of the log goes, and never the active segment."""
        if not self.config.delete:
            return 0
        now = self.clock() if now is None else now
        segments = list(self._segments)
        doomed = 0
        if self.config.retention_ms >= 0:
            while doomed < len(segments) - 1 and now - _largest_timestamp(segments[doomed]) > self.config.retention_ms:
                doomed += 1
        if self.config.retention_bytes >= 0:
            size = sum(s.size for s in segments[doomed:])
            while doomed < len(segments) - 1 and size - segments[doomed].size >= self.config.retention_bytes:
                size -= segments[doomed].size
                doomed += 1
                if size <= self.config.retention_bytes:
                    break
        # Segments wholly below the log start offset (DeleteRecords) go too.
        while doomed < len(segments) - 1 and segments[doomed].next_offset <= self.log_start_offset:
            doomed += 1
        if not doomed:
            return 0
        self._drop_prefix(doomed)
        return doomed

    def _drop_prefix(self, count: int) -> None:
        old = self._segments
        self._set_segments(old[count:])
        self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
        self._checkpoint()
        # Producers stay known (KIP-360); only snapshots of deleted segments go.
        self.producer_state.delete_snapshots_before(self._segments[0].base_offset)
        for segment in old[:count]:
            # Open slices keep the data: the FileIO lives while referenced.
            if self.defer_unlinks:
                self.files_to_unlink.extend(segment.mark_deleted())
            else:
                segment.delete()

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: make ``offset`` the new log start offset (never past the HW)."""
        if offset < 0 or offset > self.high_watermark:
            raise OffsetOutOfRangeError(offset, self.log_start_offset, self.high_watermark)
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._checkpoint()
            while len(self._segments) > 1 and self._segments[0].next_offset <= offset:
                self._drop_prefix(1)
        return self.log_start_offset

    def truncate_to(self, offset: int) -> None:
        """Remove everything at and after ``offset`` (replication's truncation, and tests)."""
        if offset >= self.log_end_offset:
            return
        with self.cleaning.paused():
            keep = [s for s in self._segments if s.base_offset < offset] or [self._segments[0]]
            for segment in self._segments[len(keep):]:
                segment.close(deleting=True)
                segment.delete()
            keep[-1].truncate_to(offset)
            self._set_segments(keep)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self._checkpoint()
        if self._leader_epochs is not None or (self.directory / LEADER_EPOCH_CHECKPOINT_FILE).exists():
            self.leader_epochs.truncate_from_end(self.log_end_offset)
        if self._high_watermark is not None:
            self._high_watermark = min(self._high_watermark, self.log_end_offset)
        # The removed batches may be a producer's latest: its state must come from the log again.
        if self._producers_loaded:
            self._producers.truncate_and_reload(self._segments, self.log_end_offset)
        else:  # read on first use, from what is left
            self._producers.delete_snapshots_after(self.log_end_offset)

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for ``producer.id.expiration.ms`` (Kafka's default: a day).
        A state not read yet is left alone: it is expired once it is."""
        if not self._producers_loaded:
            return 0
        return self._producers.remove_expired(now_ms, expiration_ms)

    # ------------------------------------------------------------------ compaction hook

    def replace_segments(self, old: list[LogSegment], new: list[LogSegment]) -> None:
        """Swap cleaned segments in for ``old`` (a contiguous run, never the active one)."""
        current = list(self._segments)
        i = current.index(old[0])
        if current[i : i + len(old)] != old:
            raise ValueError("segments to replace are not a contiguous run of this log")
        self._set_segments(current[:i] + new + current[i + len(old) :])

    # ------------------------------------------------------------------ lifecycle

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for segment in self._segments:
            segment.config = config

    def close(self) -> None:
        """Flush everything and leave the clean-shutdown marker."""
        if self._closed:
            return
        with self.cleaning.paused():
            self.flush()
            self.flush_leader_epochs()
            if self._producers_loaded and not self._close_snapshot_synced:
                # Not read since the open: the snapshots on disk still describe it.
                self._snapshot_producers(self.log_end_offset, sync=True)
            for segment in self._segments:
                segment.close()
            if self._own_marker:
                (self.directory / CLEAN_SHUTDOWN_FILE).touch()
            self._closed = True

    def delete(self) -> None:
        with self.cleaning.paused():
            for segment in self._segments:
                segment.close(deleting=True)
            self._closed = True
        shutil.rmtree(self.directory, ignore_errors=True)

    def __repr__(self) -> str:
        return (
            f"Log({self.directory.name}, start={self.log_start_offset}, end={self.log_end_offset}, "
            f"segments={len(self._segments)})"
        )


def _recompress(
    data: bytes | bytearray | memoryview, batches: list[tuple[int, BatchHeader]], codec: Compression
) -> tuple[bytearray, list[tuple[int, BatchHeader]]]:
    """Re-encode batches whose codec differs from the topic's ``compression.type``, as
    Kafka's broker does; producer fields, timestamps and headers are kept."""
    out = bytearray()
    placed: list[tuple[int, BatchHeader]] = []
    for pos, header in batches:
        raw = bytes(data[pos : pos + header.size])
        if not header.is_control and header.compression != codec:
            batch = RecordBatch(header, raw)
            raw = rebuild_batch(header, batch.records(), compression=codec)
        placed.append((len(out), read_header(raw)))
        out += raw
    return out, placed


def _marker_reader(data: bytes | bytearray | memoryview) -> MarkerReader:
    """Decodes the control batches of an append (positions are the same before and after
    offsets are assigned: only the header's baseOffset changes)."""

    def read(position: int, header: BatchHeader) -> ControlRecord | None:
        return read_control_record(RecordBatch(header, bytes(data[position : position + header.size])))

    return read


def segment_may_hold(segment: LogSegment, recovery_point: int, bases: list[int]) -> bool:
    """True if the segment may hold data at or past the recovery point (must be checked)."""
    i = bases.index(segment.base_offset)
    next_base = bases[i + 1] if i + 1 < len(bases) else None
    return next_base is None or next_base > recovery_point


def _largest_timestamp(segment: LogSegment) -> int:
    if segment.max_timestamp >= 0:
        return segment.max_timestamp
    return int(os.stat(segment.log_path).st_mtime * 1000)


def _read_offset(path: Path, default: int) -> int:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return default


def _write_offset(path: Path, value: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{value}\n")
    os.replace(tmp, path)
