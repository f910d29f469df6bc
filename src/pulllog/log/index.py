"""Sparse offset and time indexes of a segment, in Kafka's on-disk formats.

``NNNNNNNNNNNNNNNNNNNN.index`` holds 8-byte entries::

    int32 relativeOffset   batch's last offset - segment base offset
    int32 position         byte position of that batch in the .log file

``NNNNNNNNNNNNNNNNNNNN.timeindex`` holds 12-byte entries::

    int64 timestamp        largest timestamp seen so far in the segment
    int32 relativeOffset   offset of the record that carries it, relative to the base

Rules kept here:

* Sparse: the segment adds an entry after every ``index.interval.bytes`` of appended
  batches, so an index costs about 8 bytes per 4 KiB of log.
* Both indexes are strictly increasing (offsets; timestamps for the time index), which
  is what makes a binary search valid. An append that would break that is ignored.
* Entries are relative to the segment's base offset, so 4 bytes are enough for offsets.
* An index is a cache of the log. It is never trusted blindly: after an unclean stop it
  is rebuilt from the log; on a clean open it is sanity-checked (the checks of
  ``pulllog.log.verify``, which ``pulllog inspect segment`` shows) and rebuilt if wrong.
* The files are not preallocated: their length is always a whole number of entries, and
  ``max_bytes`` (``segment.index.bytes``) only decides when the segment must roll.

The entries live in memory (``array``) as well as on disk, so a lookup is a ``bisect``
with no I/O. New entries are written in bulk, not one ``write`` per entry (a producer of
batches over ``index.interval.bytes`` adds one with every request): they wait in memory
until ``_WRITE_BEHIND`` bytes of them are pending, and every path that makes the file
count (``flush``, ``take_dirty`` for a handed-off fsync, ``write_pending`` before the
owner's sync of the file system, ``close``, a truncation) writes them first. So what is
fsynced below a log's recovery point always has its entries on disk; entries of data past
it may be missing after a crash, and recovery rebuilds those from the log, as it rebuilds
entries a crash tore (Kafka's indexes are memory-mapped, so a process crash keeps them,
but a machine crash can lose them the same way).
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from pathlib import Path

from .handles import CachedFile
from .verify import (
    IndexProblem,
    Problem,
    index_entries,
    offset_index_problems,
    time_index_problems,
)

__all__ = ["OFFSET_ENTRY", "TIME_ENTRY", "IndexCorruptError", "OffsetIndex", "TimeIndex"]

OFFSET_ENTRY = struct.Struct(">ii")
"""An offset index entry: (relative offset, position)."""
TIME_ENTRY = struct.Struct(">qi")
"""A time index entry: (timestamp, relative offset)."""


_WRITE_BEHIND = 1024
"""Pending entry bytes that make the next append write them out (128 offset entries)."""


class IndexCorruptError(ValueError):
    """An index file does not satisfy its invariants; rebuild it from the log."""


class _Index:
    entry_size: int

    def __init__(self, path: Path, base_offset: int, max_bytes: int, *, create: bool = False) -> None:
        self.base_offset = base_offset
        self.max_entries = max(1, max_bytes // self.entry_size)
        # Opened on demand through the bounded handle cache: the entries live in memory, so
        # the file is only needed to load, append, truncate or fsync.
        self._file = CachedFile(path, create=create)
        self._dirty = False
        self._pending = bytearray()  # entries not written yet (module docstring), after those on disk
        self._written: int | None = None  # entries in the file; None: not known yet (see _on_disk)

    @property
    def path(self) -> Path:
        return self._file.path

    @property
    def entries(self) -> int:
        raise NotImplementedError

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def _read_file(self) -> bytes:
        try:
            f = self._file.get()
        except FileNotFoundError:
            return b""  # a segment written before a crash may lack its indexes: rebuilt
        size = os.fstat(f.fileno()).st_size
        return os.pread(f.fileno(), size, 0) if size else b""

    def _check(self, shape: list[IndexProblem], problems: Iterator[tuple[int, Problem]]) -> None:
        """Raise IndexCorruptError on the first problem (the file's shape, then an entry)."""
        if shape:
            raise IndexCorruptError(f"{self.path.name}: {shape[0].problem}")
        for slot, problem in problems:
            raise IndexCorruptError(f"{self.path.name}: entry {slot}: {problem}")

    def _write(self, data: bytes) -> None:
        if self._written is None:
            self._on_disk()
        pending = self._pending
        pending += data
        if len(pending) >= _WRITE_BEHIND:
            self.write_pending()

    def _on_disk(self) -> int:
        """Entries in the file: known once it was loaded, truncated or written through this
        object, else read from its size (an index appended to without a load). Known
        whenever entries are pending."""
        if self._written is None:
            f = self._file.get_or_create()
            self._written = os.fstat(f.fileno()).st_size // self.entry_size
        return self._written

    def write_pending(self) -> None:
        """Write the entries still in memory only; the file then holds every entry."""
        pending = self._pending
        if not pending:
            return
        on_disk = self._on_disk()
        f = self._file.get_or_create()
        written = os.write(f.fileno(), pending)
        self._dirty = True
        if written != len(pending):  # a full disk: the file keeps its whole entries, the rest stays pending
            os.ftruncate(f.fileno(), on_disk * self.entry_size)
            raise OSError(f"short write to {self.path.name}: {written} of {len(pending)} bytes")
        self._written = on_disk + len(pending) // self.entry_size
        pending.clear()

    def _truncate_entries(self, n: int) -> None:
        """Keep only the first ``n`` entries, in memory's pending ones and in the file."""
        if self._written is not None and n >= self._written:  # only pending entries go
            del self._pending[(n - self._written) * self.entry_size:]
            return
        self._pending.clear()
        f = self._file.get_or_create()
        os.ftruncate(f.fileno(), n * self.entry_size)
        self._written = n
        self._dirty = True

    def flush(self) -> None:
        self.write_pending()
        if self._dirty:
            f = self._file.get_or_create()
            os.fsync(f.fileno())
            self._dirty = False

    def take_dirty(self) -> int | None:
        """A duplicate of the descriptor when entries were written since the last fsync, for
        another thread to fsync and close; the index counts as flushed from now on."""
        self.write_pending()
        if not self._dirty:
            return None
        f = self._file.get_or_create()  # held while duplicating: the cache cannot close it under us
        fd = os.dup(f.fileno())
        self._dirty = False
        return fd

    def mark_clean(self) -> None:
        """Its writes were made durable another way (the owner's sync of the file system)."""
        self._dirty = False

    def mark_dirty(self) -> None:
        """A handed-off fsync failed: the next flush must fsync again."""
        self._dirty = True

    def close(self) -> None:
        self.write_pending()
        self._file.forget(close=True)

    def discard_pending(self) -> None:
        """Forget the entries not written yet (the index is about to be deleted)."""
        self._pending.clear()

    def delete(self) -> None:
        self._pending.clear()
        self._file.forget()
        self.path.unlink(missing_ok=True)

    def rename(self, path: Path) -> None:
        self._file.rename(path)


class OffsetIndex(_Index):
    entry_size = OFFSET_ENTRY.size

    def __init__(self, path: Path, base_offset: int, max_bytes: int = 10 * 1024 * 1024, *,
                 create: bool = False) -> None:
        super().__init__(path, base_offset, max_bytes, create=create)
        self._offsets = array("q")  # absolute offsets, for bisect without re-adding the base
        self._positions = array("q")

    @property
    def entries(self) -> int:
        return len(self._offsets)

    def load(self, log_size: int) -> None:
        """Read the file, raising IndexCorruptError if it cannot be trusted (see verify)."""
        entries, shape = index_entries(self._read_file(), OFFSET_ENTRY)
        self._check(shape, offset_index_problems(entries, self.base_offset, log_size=log_size))
        relative, positions = entries
        self._offsets = array("q", map(self.base_offset.__add__, relative))
        self._positions = array("q", positions)
        self._pending.clear()
        self._written = len(self._offsets)

    def append(self, offset: int, position: int) -> None:
        if self._offsets and (offset <= self._offsets[-1] or position <= self._positions[-1]):
            return
        self._offsets.append(offset)
        self._positions.append(position)
        self._write(OFFSET_ENTRY.pack(offset - self.base_offset, position))

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """The last entry with offset <= target: (offset, position); (base, 0) if none."""
        i = bisect_right(self._offsets, target_offset)
        if i == 0:
            return self.base_offset, 0
        return self._offsets[i - 1], self._positions[i - 1]

    def offset_at_or_after_position(self, position: int) -> int | None:
        """The offset of the first entry whose batch starts at or after ``position`` (an
        upper bound for the offsets before it), None when there is none. Kafka's
        ``fetchUpperBoundOffset``."""
        i = bisect_left(self._positions, position)
        return self._offsets[i] if i < len(self._offsets) else None

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or beyond ``position`` (the log was cut there)."""
        i = bisect_right(self._positions, position - 1)
        if i < len(self._positions):
            del self._offsets[i:]
            del self._positions[i:]
            self._truncate_entries(i)

    def reset(self) -> None:
        self._offsets = array("q")
        self._positions = array("q")
        self._truncate_entries(0)

    def items(self) -> list[tuple[int, int]]:
        return list(zip(self._offsets, self._positions))


class TimeIndex(_Index):
    entry_size = TIME_ENTRY.size

    def __init__(self, path: Path, base_offset: int, max_bytes: int = 10 * 1024 * 1024, *,
                 create: bool = False) -> None:
        super().__init__(path, base_offset, max_bytes, create=create)
        self._timestamps = array("q")
        self._offsets = array("q")

    @property
    def entries(self) -> int:
        return len(self._timestamps)

    @property
    def last_entry(self) -> tuple[int, int] | None:
        if not self._timestamps:
            return None
        return self._timestamps[-1], self._offsets[-1]

    def load(self, next_offset: int) -> None:
        """Read the file, raising IndexCorruptError if it cannot be trusted (see verify)."""
        entries, shape = index_entries(self._read_file(), TIME_ENTRY)
        self._check(shape, time_index_problems(entries, self.base_offset, next_offset=next_offset))
        timestamps, relative = entries
        self._timestamps = array("q", timestamps)
        self._offsets = array("q", map(self.base_offset.__add__, relative))
        self._pending.clear()
        self._written = len(self._timestamps)

    def maybe_append(self, timestamp: int, offset: int) -> None:
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return
        self._timestamps.append(timestamp)
        self._offsets.append(offset)
        self._write(TIME_ENTRY.pack(timestamp, offset - self.base_offset))

    def lookup(self, target_timestamp: int) -> int:
        """Offset to start scanning from for the first record with timestamp >= target."""
        i = bisect_right(self._timestamps, target_timestamp - 1)
        if i == 0:
            return self.base_offset
        return self._offsets[i - 1]

    def truncate_to_offset(self, next_offset: int) -> None:
        keep = len(self._offsets)
        while keep and self._offsets[keep - 1] >= next_offset:
            keep -= 1
        if keep < len(self._offsets):
            del self._timestamps[keep:]
            del self._offsets[keep:]
            self._truncate_entries(keep)

    def reset(self) -> None:
        self._timestamps = array("q")
        self._offsets = array("q")
        self._truncate_entries(0)

    def items(self) -> list[tuple[int, int]]:
        return list(zip(self._timestamps, self._offsets))
