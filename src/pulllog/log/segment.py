"""One segment of a partition's log: a ``.log`` file of batches plus its indexes.

A segment is named by its base offset, zero-padded to 20 digits, and owns these files::

    00000000000000368769.log        RecordBatch v2 bytes, exactly as the producer sent them
                                    (with baseOffset assigned), back to back
    00000000000000368769.index      sparse offset -> position index (see index.py)
    00000000000000368769.timeindex  sparse timestamp -> offset index
    00000000000000368769.txnindex   aborted transactions whose ABORT marker is in this
                                    segment (txn_index.py); only once there is one

Rules kept here:

* Only the active (last) segment of a log is appended to; all others are immutable.
* A batch is written whole or not at all from this process's point of view; a crash can
  still leave a torn tail, which ``recover()`` finds with ``verify.walk_log`` (length
  bounds, magic, CRC, header fields, increasing offsets) and cuts off. Batches below the
  log's recovery point (fsynced before it was checkpointed) are not re-verified: their
  state comes from the indexes and their headers.
* An index entry (batch last offset, batch position) is added once more than
  ``index.interval.bytes`` have been appended since the previous entry.
* Reads never decode records: they locate the batch that holds an offset (index lookup,
  then a scan over batch headers of at most ~``index.interval.bytes``) and hand out a
  ``FileSlice`` for the broker to send with ``sendfile``.
* A ``FileSlice`` holds a reference to the open file, so a read that races with
  retention keeps working: unlinking the file does not end its data while it is open.
* The three files are opened on demand through the bounded cache of ``handles.py``
  (none at load, which only stat()s the ``.log``), so descriptors do not grow with
  partitions; sizes, offsets and index entries live in memory.
* After a clean shutdown a segment is opened *lazily* (Kafka's LazyIndex, for the whole
  segment): nothing but its size is known until the first use of its indexes or offsets
  (a read, an append, retention looking at its timestamps), which runs the clean open
  (``load``) then, or ``recover`` when its checks fail. An unloaded segment has nothing
  unflushed, and closing or deleting it (retention included) reads nothing.
"""

from __future__ import annotations

import contextlib
import io
import logging
import mmap
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .config import LogConfig
from .handles import CachedFile
from .index import IndexCorruptError, OffsetIndex, TimeIndex
from .txn_index import TransactionIndex
from .verify import Damage, walk_log
from ..records.batch import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    RecordBatch,
    read_header,
)

__all__ = ["FileSlice", "LogSegment", "segment_name", "parse_segment_name"]

_SCAN_CHUNK = 64 * 1024

logger = logging.getLogger(__name__)


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def parse_segment_name(name: str) -> int | None:
    stem = name.split(".", 1)[0]
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


@contextlib.contextmanager
def _mapped(fd: int, size: int) -> Iterator[bytes | mmap.mmap]:
    """The first ``size`` bytes of a file, read-only and paged in as they are read."""
    if size == 0:
        yield b""  # mmap refuses an empty mapping
        return
    with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as mapped:
        yield mapped


@dataclass(frozen=True, slots=True)
class FileSlice:
    """``length`` bytes at ``position`` of an open segment file (what sendfile sends)."""

    file: io.FileIO
    position: int
    length: int

    def fileno(self) -> int:
        return self.file.fileno()

    def read(self) -> bytes:
        return os.pread(self.file.fileno(), self.length, self.position)


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    valid_bytes: int
    truncated_bytes: int
    batches: int
    next_offset: int
    error: str | None
    epoch_starts: tuple[tuple[int, int], ...] = ()
    """(partitionLeaderEpoch, base offset) of each walked batch whose epoch is above every
    epoch walked before it: where the leader epochs the walk saw begin (Log's recovery
    rebuilds the leader-epoch cache from them)."""


_LAZY_STATE = ("offset_index", "time_index", "txn_index", "next_offset", "max_timestamp", "offset_of_max_timestamp",
               "rolling_based_ms", "_first_batch_seen", "_bytes_since_index_entry")
"""What a lazy segment leaves unset until first use (see ``LogSegment.__getattr__``)."""
_LAZY_FILE = ("size", "_log_file")
"""What a lazy segment leaves unset until first use of its file (a stat())."""
_LAZY_LOAD_LOCK = threading.RLock()  # the cleaner's thread may touch a segment first


class LogSegment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        *,
        created_ms: int,
        suffix: str = "",
        lazy: bool = False,
    ) -> None:
        """A new segment (no ``.log`` yet) is created with its empty indexes. An existing one
        is only stat()ed; then the caller runs ``load()`` or ``recover()``. With ``lazy`` (an
        existing segment after a clean shutdown) not even that: the first use of its size
        stat()s it, the first use of its indexes or offsets loads it (``_load_lazily``)."""
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self.created_ms = created_ms
        self._unflushed = False
        self.loaded = not lazy
        """False until a lazy segment's indexes and offsets are read (nothing of it is open or dirty)."""
        if lazy:
            self.__class__ = _LazyLogSegment  # LogSegment again once loaded (see there)
            return
        log_path = directory / f"{segment_name(base_offset)}.log{suffix}"
        # An existing segment's files open on first use (through the bounded handle cache).
        try:
            self.size = os.stat(log_path).st_size
            new = False
        except FileNotFoundError:
            self.size, new = 0, True
        self._log_file = CachedFile(log_path, create=new)
        self._init_state(create=new, suffix=suffix)

    def _init_state(self, *, create: bool, suffix: str = "") -> None:
        """The indexes (not read) and the offsets of an empty segment."""
        stem = str(self.directory / segment_name(self.base_offset))
        max_bytes = self.config.segment_index_bytes
        self.offset_index = OffsetIndex(Path(f"{stem}.index{suffix}"), self.base_offset, max_bytes, create=create)
        self.time_index = TimeIndex(Path(f"{stem}.timeindex{suffix}"), self.base_offset, max_bytes, create=create)
        self.txn_index = TransactionIndex(Path(f"{stem}.txnindex{suffix}"))
        self._reset_state()
        self.rolling_based_ms = -1

    @property
    def _stated(self) -> bool:
        return "_log_file" in self.__dict__

    def _stat_lazily(self) -> None:
        with _LAZY_LOAD_LOCK:
            if not self._stated:
                path = self.directory / f"{segment_name(self.base_offset)}.log"
                self.__dict__.update(size=os.stat(path).st_size, _log_file=CachedFile(path))

    def _load_lazily(self) -> None:
        """Load a lazy segment: what a clean open does (``load()``), or ``recover()`` when its
        checks fail. Staged on a copy and published in one step, so another thread sees the
        segment unloaded or loaded, never half loaded."""
        with _LAZY_LOAD_LOCK:
            if self.loaded:
                return
            self._stat_lazily()
            staged = object.__new__(LogSegment)
            staged.__dict__.update(self.__dict__)  # the same open-file entry, size, config
            staged._init_state(create=False)
            staged.loaded = True
            if not staged.load():
                logger.warning("%s: indexes or tail do not match the log after a clean shutdown; rebuilding "
                               "them from the log", self.log_path)
                staged.recover(self.base_offset)
            self.__dict__.update({name: staged.__dict__[name] for name in (*_LAZY_STATE, "size", "_unflushed")})
            self.loaded = True
            self.__class__ = LogSegment  # every attribute is set: no __getattr__ any more

    def ensure_loaded(self) -> None:
        if not self.loaded:
            self._load_lazily()

    def _index_paths(self) -> tuple[Path, ...]:
        if self.loaded:
            return self.offset_index.path, self.time_index.path, self.txn_index.path
        stem = str(self.directory / segment_name(self.base_offset))  # a lazy one is never .cleaned/.swap
        return Path(stem + ".index"), Path(stem + ".timeindex"), Path(stem + ".txnindex")

    def _unstated_log_path(self) -> Path:
        return self.directory / f"{segment_name(self.base_offset)}.log"

    @property
    def log_path(self) -> Path:
        return self._log_file.path

    @property
    def file(self) -> io.FileIO:
        """The open ``.log`` file (opened on demand). Hold the object, not its fileno(), while
        using it: the cache may drop its own reference meanwhile (see handles.py)."""
        return self._log_file.get()

    # ------------------------------------------------------------------ writing

    def append(self, data: bytes | bytearray | memoryview | tuple[bytes | memoryview, ...],
               batches: list[tuple[int, BatchHeader]]) -> None:
        """Write already-validated batches whose offsets are assigned: ``data`` in one piece,
        or a tuple of pieces written back to back (one ``writev``).

        ``batches`` gives each batch's position within ``data`` and its header.
        """
        start = self.size
        f = self._log_file.get()  # (self.file, without the property's call: per request)
        if type(data) is tuple:
            length = sum(map(len, data))
            written = os.writev(f.fileno(), data)
        else:
            length = len(data)
            written = os.write(f.fileno(), data)
        if written != length:  # a short write on a regular file means a full disk
            os.ftruncate(f.fileno(), start)
            raise OSError(f"short write to {self.log_path.name}: {written} of {length} bytes")
        self.size += written
        self._unflushed = True
        for rel_pos, header in batches:
            self._track_batch(start + rel_pos, header)

    def _track_batch(self, position: int, header: BatchHeader) -> None:
        # Fields read once, no properties: this runs for every batch of every Produce request.
        max_timestamp = header.max_timestamp
        last_offset = header.base_offset + header.last_offset_delta
        if not self._first_batch_seen:
            self._first_batch_seen = True
            if max_timestamp >= 0:
                self.rolling_based_ms = max_timestamp
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        self.next_offset = last_offset + 1
        if self._bytes_since_index_entry > self.config.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += LOG_OVERHEAD + header.batch_length

    def should_roll(self, incoming_bytes: int, now_ms: int, incoming_max_timestamp: int) -> bool:
        if self.size == 0:
            return False
        if self.size + incoming_bytes > self.config.segment_bytes:
            return True
        # As Kafka: time is judged by record timestamps once the segment has one (so a
        # replayed old stream does not roll on every append), else by wall-clock age.
        if self._first_batch_seen and self.rolling_based_ms >= 0 and incoming_max_timestamp >= 0:
            waited = incoming_max_timestamp - self.rolling_based_ms
        else:
            waited = now_ms - self.created_ms
        if waited > self.config.roll_ms:
            return True
        offsets, times = self.offset_index, self.time_index
        return offsets.entries >= offsets.max_entries or times.entries >= times.max_entries  # is_full, inlined

    def flush(self) -> None:
        if not self.loaded:
            return  # nothing of it was written since it was opened
        if self._unflushed:
            f = self.file
            os.fsync(f.fileno())
            self._unflushed = False
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def take_unflushed(self) -> list[int]:
        """Duplicates of the descriptors of the files (log, indexes) written since their last
        fsync, for another thread to fsync and close (``Log.begin_flush``). A duplicate stays
        valid when this segment is closed, rolled, swapped or deleted meanwhile, so that thread
        never fsyncs a closed or reused descriptor. The files count as flushed from now on."""
        fds: list[int] = []
        try:
            if self._unflushed:
                f = self.file  # held while duplicating: the handle cache cannot close it under us
                fds.append(os.dup(f.fileno()))
                self._unflushed = False
            for index in (self.offset_index, self.time_index, self.txn_index):
                fd = index.take_dirty()
                if fd is not None:
                    fds.append(fd)
        except OSError:  # out of descriptors: nothing handed off, all still unflushed
            for fd in fds:
                os.close(fd)
            self.mark_unflushed()
            raise
        return fds

    def write_index_entries(self) -> None:
        """Write the index entries still held in memory (index.py), without an fsync."""
        if self.loaded:
            self.offset_index.write_pending()
            self.time_index.write_pending()

    def mark_flushed(self) -> None:
        """Its files were made durable another way (the owner's sync of the file system)."""
        if self.loaded:
            self._unflushed = False
            self.offset_index.mark_clean()
            self.time_index.mark_clean()

    def mark_unflushed(self) -> None:
        """A handed-off fsync failed: the next flush must fsync every file again."""
        self.ensure_loaded()
        self._unflushed = True
        self.offset_index.mark_dirty()
        self.time_index.mark_dirty()
        self.txn_index.mark_dirty()

    # ------------------------------------------------------------------ reading

    def headers(self, start: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from ``start``; stops at a partial batch."""
        end = self.size if end is None else end
        f = self.file  # held for the whole scan
        fd = f.fileno()
        buf = b""
        buf_start = start
        pos = start
        while pos + BATCH_HEADER_SIZE <= end:
            rel = pos - buf_start
            if rel < 0 or rel + BATCH_HEADER_SIZE > len(buf):
                buf = os.pread(fd, min(_SCAN_CHUNK, end - pos), pos)
                buf_start, rel = pos, 0
                if len(buf) < BATCH_HEADER_SIZE:
                    return
            header = read_header(buf, rel)
            if header.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD or pos + header.size > end:
                return
            yield pos, header
            pos += header.size

    def find_batch(self, offset: int, start_position: int = 0) -> tuple[int, BatchHeader] | None:
        """The first batch whose last offset is >= ``offset``."""
        _idx_offset, position = self.offset_index.lookup(offset)
        for pos, header in self.headers(max(position, start_position)):
            if header.last_offset >= offset:
                return pos, header
        return None

    def read(self, offset: int, max_bytes: int, max_position: int | None = None,
             min_one_batch: bool = True) -> FileSlice | None:
        """A slice starting at the batch that holds ``offset``, at most ``max_bytes`` long
        (but the whole first batch when ``min_one_batch``). May end in a partial batch,
        as Kafka's reads do; clients drop it."""
        end = self.size if max_position is None else min(max_position, self.size)
        found = self.find_batch(offset)
        if found is None:
            return None
        position, header = found
        if position >= end:
            return None
        length = min(max_bytes, end - position)
        if min_one_batch and header.size > length:
            length = min(header.size, end - position)
        if length <= 0:
            return None
        return FileSlice(self.file, position, length)

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``start_offset`` with
        timestamp >= ``timestamp``. Decodes only the batch that holds it."""
        if self.max_timestamp < timestamp:
            return None
        scan_from = max(self.time_index.lookup(timestamp), start_offset)
        found = self.find_batch(scan_from)
        if found is None:
            return None
        position, _ = found
        for pos, header in self.headers(position):
            if header.max_timestamp < timestamp or header.last_offset < start_offset:
                continue
            batch = RecordBatch.from_bytes(self.read_bytes(pos, header.size), check_crc=False)
            for record in batch.records():
                if record.offset >= start_offset and record.timestamp >= timestamp:
                    ts = header.max_timestamp if header.timestamp_type == 1 else record.timestamp
                    return record.offset, ts
            # LogAppendTime: records keep create-time deltas; the batch's max timestamp counts
            if header.timestamp_type == 1:
                return max(header.base_offset, start_offset), header.max_timestamp
        return None

    def read_bytes(self, position: int, length: int) -> bytes:
        f = self.file
        return os.pread(f.fileno(), length, position)

    # ------------------------------------------------------------------ recovery

    def load(self) -> bool:
        """Open an existing segment after a clean shutdown: load and sanity-check the
        indexes, then walk the headers after the last index entry to restore the next
        offset. Returns False when anything does not add up; the caller then runs
        ``recover()``, which trusts nothing."""
        if self.size == 0 and self._index_files_empty():
            return True  # an empty segment: nothing to read (the state is an empty one's)
        try:
            self.offset_index.load(self.size)
            self.time_index.load(2**62)
        except IndexCorruptError:
            return False
        self._restore_from_first_batch_and_time_index()
        _offset, position = self.offset_index.lookup(2**62)
        # The batches after the last index entry are what a crash may have torn: walk them
        # with recovery's checks (verify.walk_log); any problem means recover() instead.
        tail = self.read_bytes(position, self.size - position) if self.size > position else b""
        for item in walk_log(tail, segment_base_offset=self.base_offset):
            if isinstance(item, Damage) or item.problem is not None:
                return False
            header = item.header
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
            self.next_offset = header.next_offset
            self._bytes_since_index_entry += header.size
        try:
            self.time_index.load(self.next_offset)
        except IndexCorruptError:
            return False
        return True

    def _index_files_empty(self) -> bool:
        for path in self._index_paths():
            try:
                if os.stat(path).st_size:
                    return False
            except FileNotFoundError:
                pass  # written on the first entry
        return True

    def rebuild_indexes(self) -> None:
        self.offset_index.reset()
        self.time_index.reset()
        self._reset_state()
        for pos, header in self.headers():
            self._track_batch(pos, header)

    def _restore_from_first_batch_and_time_index(self) -> None:
        """The state a trusted prefix gives without walking it: the roll clock from the first
        batch, the largest timestamp from the time index's last entry."""
        first = next(self.headers(0), None)
        if first is not None:
            self._first_batch_seen = True
            if first[1].max_timestamp >= 0:
                self.rolling_based_ms = first[1].max_timestamp
        last_ts = self.time_index.last_entry
        if last_ts is not None:
            self.max_timestamp, self.offset_of_max_timestamp = last_ts

    def _reset_state(self) -> None:
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self._first_batch_seen = False
        self._bytes_since_index_entry = 0

    def recover(self, min_offset: int, recovery_point: int = 0) -> RecoveryResult:
        """Walk every batch from ``recovery_point`` on with ``verify.walk_log`` (length
        bounds, magic, CRC, header fields, offsets increasing from ``min_offset``),
        truncate the file at the first problem, and rebuild the indexes from there.

        Batches below ``recovery_point`` were fsynced before it was checkpointed, so they
        are trusted as Kafka trusts them: their headers are read to restore the segment's
        state (next offset, max timestamp, index entries), but their CRCs are not checked.
        With ``recovery_point`` at or below the base offset, or when the indexes fail their
        sanity checks, the whole segment is walked."""
        start = self._restore_flushed_prefix(recovery_point) if recovery_point > self.base_offset else None
        if start is None:
            self.offset_index.reset()
            self.time_index.reset()
            self._reset_state()
            start = 0
        f = self.file  # held for the whole scan (the handle cache may drop its own reference)
        fd = f.fileno()
        pos = start
        batches = 0
        error: str | None = None
        epoch_starts: list[tuple[int, int]] = []
        latest_epoch = -1
        # A batch larger than this is damage even with a matching CRC (a damaged batchLength
        # that happens to fit the file): no producer can have written it.
        largest = max(self.config.max_message_bytes, 1) * 2 + (64 << 20)
        with _mapped(fd, self.size) as data:
            previous = max(min_offset, self.next_offset) - 1
            view = memoryview(data)[start:] if start else data
            try:
                for item in walk_log(view, segment_base_offset=self.base_offset, previous_last_offset=previous):
                    if isinstance(item, Damage):
                        error = f"position {start + item.position}: {item.problem}"
                        break
                    if item.problem is not None:
                        error = f"position {start + item.position}: {item.problem}"
                        break
                    if item.size > largest:
                        error = f"position {start + item.position}: implausible batch size {item.size}"
                        break
                    header = item.header
                    self._track_batch(start + item.position, header)
                    if header.partition_leader_epoch > latest_epoch:
                        latest_epoch = header.partition_leader_epoch
                        epoch_starts.append((latest_epoch, header.base_offset))
                    batches += 1
                    pos = start + item.position + item.size
            finally:
                if isinstance(view, memoryview):
                    view.release()  # the mmap cannot close while a view of it lives
        truncated = self.size - pos
        if truncated:
            os.ftruncate(fd, pos)
            os.fsync(fd)
            self.size = pos
        if batches:
            # They survived in the page cache but may never have reached the disk: the
            # caller's flush must fsync them before it moves the recovery point past them.
            self._unflushed = True
        return RecoveryResult(pos, truncated, batches, self.next_offset, error, tuple(epoch_starts))

    def _restore_flushed_prefix(self, recovery_point: int) -> int | None:
        """Restore the state after the batches below ``recovery_point`` from the indexes
        and the batch headers since the last index entry below it; return the position of
        the first batch to check. None when the indexes cannot be trusted.

        Index entries at or past the recovery point were not covered by the flush and are
        dropped. The time index keeps exactly the entries written up to the kept offset
        index entry: both are appended together (``_track_batch``), and a later time entry
        always names an offset after it."""
        try:
            self.offset_index.load(self.size)
            self.time_index.load(2**62)
        except IndexCorruptError:
            return None
        entry_offset, position = self.offset_index.lookup(recovery_point - 1)
        kept_entry = position > 0  # no entry is ever made for the batch at position 0
        self.offset_index.truncate_to_position(position + 1 if kept_entry else 0)
        self.time_index.truncate_to_offset(entry_offset + 1 if kept_entry else self.base_offset)
        self._reset_state()
        self._restore_from_first_batch_and_time_index()
        start = position
        for pos, header in self.headers(position):
            if kept_entry and pos == position and header.last_offset != entry_offset:
                return None  # the index does not describe this file
            if header.next_offset > recovery_point:
                break  # this batch was not (wholly) flushed: it is checked
            if kept_entry and pos == position:
                # The batch of the kept index entry: already in the indexes.
                if header.max_timestamp > self.max_timestamp:
                    self.max_timestamp = header.max_timestamp
                    self.offset_of_max_timestamp = header.last_offset
                self.next_offset = header.next_offset
                self._bytes_since_index_entry = header.size
            else:
                self._track_batch(pos, header)
            start = pos + header.size
        return start

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose base offset is >= ``offset``; return bytes removed."""
        self.ensure_loaded()  # before the file changes under the indexes
        cut = self.size
        for pos, header in self.headers():
            if header.base_offset >= offset:
                cut = pos
                break
        removed = self.size - cut
        if removed:
            f = self.file
            os.ftruncate(f.fileno(), cut)
            self.size = cut
            self.offset_index.truncate_to_position(cut)
            self.rebuild_indexes()
        self.txn_index.truncate_to(offset)
        return removed

    # ------------------------------------------------------------------ lifecycle

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    def close(self, *, deleting: bool = False) -> None:
        """Flush and close the files; ``deleting``: the files go next, so the index entries
        still in memory are dropped, not written (a full disk must not stop a deletion)."""
        if self.loaded:
            if deleting:
                self.offset_index.discard_pending()
                self.time_index.discard_pending()
            self.flush()
            self.offset_index.close()
            self.time_index.close()
        if self._stated:
            self._log_file.forget(close=True)

    def delete(self) -> None:
        """Unlink the files. Open slices keep reading: the FileIO lives while referenced."""
        if self.loaded:
            self.offset_index.delete()
            self.time_index.delete()
            self.txn_index.delete()
        else:
            for path in self._index_paths():
                path.unlink(missing_ok=True)
        if not self._stated:
            self._unstated_log_path().unlink(missing_ok=True)
            return
        self._log_file.forget()  # readers holding it keep reading; it closes after them
        self.log_path.unlink(missing_ok=True)

    def mark_deleted(self) -> list[Path]:
        """Rename the files to ``*.deleted`` (Kafka's asynchronous delete) and return the new
        paths for someone to unlink later: unlinking a large file frees its blocks there
        and then (tens of milliseconds per 64 MiB here), too long for the event loop. A
        crash leaves ``*.deleted`` files, which ``Log.open`` removes. Open slices keep
        reading, as with ``delete``."""
        moved: list[Path] = []
        if self.loaded:
            self.offset_index.discard_pending()  # going away: not worth a write (nor a full disk's error)
            self.time_index.discard_pending()
            self.offset_index.close()
            self.time_index.close()
            for index in (self.offset_index, self.time_index):
                target = Path(f"{index.path}.deleted")
                try:
                    index.rename(target)
                except FileNotFoundError:
                    continue
                moved.append(target)
            target = Path(f"{self.txn_index.path}.deleted")
            if self.txn_index.rename(target):
                moved.append(target)
        else:
            for path in self._index_paths():
                target = Path(f"{path}.deleted")
                try:
                    os.rename(path, target)
                except FileNotFoundError:
                    continue
                moved.append(target)
        if not self._stated:
            target = Path(f"{self._unstated_log_path()}.deleted")
            try:
                os.rename(self._unstated_log_path(), target)
            except FileNotFoundError:
                return moved
            return moved + [target]
        target = Path(f"{self.log_path}.deleted")
        self._log_file.forget()
        try:
            self._log_file.rename(target)
        except FileNotFoundError:
            return moved
        return moved + [target]

    def rename_suffix(self, old: str, new: str) -> None:
        """For compaction's swap protocol: e.g. ``.cleaned`` -> ``.swap`` -> ``""``."""
        self.ensure_loaded()
        for attr in ("offset_index", "time_index"):
            index = getattr(self, attr)
            target = Path(str(index.path).removesuffix(old) + new)
            index.rename(target)
        self.txn_index.rename(Path(str(self.txn_index.path).removesuffix(old) + new))
        self._log_file.rename(Path(str(self.log_path).removesuffix(old) + new))

    def __repr__(self) -> str:
        if not self.loaded:
            return f"LogSegment(base_offset={self.base_offset}, not read yet)"
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, next_offset={self.next_offset})"


class _LazyLogSegment(LogSegment):
    """A segment opened lazily (``LogSegment(..., lazy=True)``) until ``_load_lazily`` has read
    it, when it becomes a plain LogSegment again. Only this class has ``__getattr__``: on a
    class that defines one, every attribute read goes through Python's slower hook and none
    is specialized by the interpreter, and an active segment's are read some 30 times per
    Produce request (its append, roll check and bookkeeping)."""

    def __getattr__(self, name: str) -> object:
        # Only called for attributes not set: those of a lazy segment not read yet.
        found = self.__dict__
        if name in _LAZY_FILE and "loaded" in found:
            self._stat_lazily()
        elif name in _LAZY_STATE and not found.get("loaded", True):
            self._load_lazily()
        else:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return found[name]
