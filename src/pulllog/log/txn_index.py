"""A segment's aborted-transaction index (``.txnindex``), in Kafka's on-disk format.

``NNNNNNNNNNNNNNNNNNNN.txnindex`` (beside the segment's ``.log``) holds one 34-byte entry per
transaction aborted by an ABORT marker *in this segment* (Kafka's ``AbortedTxn``)::

    version           int16   0
    producerId        int64
    firstOffset       int64   the transaction's first data offset (maybe in an earlier segment)
    lastOffset        int64   the offset of its ABORT marker
    lastStableOffset  int64   the partition's LSO right after the abort: the first offset of
                              the oldest transaction still open then, else lastOffset + 1

Rules kept here (as Kafka's ``TransactionIndex``):

* Entries are appended in marker order, so ``lastOffset`` strictly increases; an append
  that would break that is a bug and raises.
* The file exists only once a segment has had an abort: most segments have none, and a
  log without transactions never pays for this index (nothing is read or stat()ed until a
  read_committed fetch or a truncation asks).
* It is derived state: recovery rebuilds the entries of every marker it replays (see
  ``producer_state.ProducerStateManager.load``), truncation drops entries whose marker is
  gone, and the index is deleted, renamed (retention's ``*.deleted``, compaction's swap)
  and fsynced with its segment.
* A read_committed fetch of [fetch offset, upper bound) needs every aborted transaction
  whose range meets it: entries with ``lastOffset >= fetch offset`` and ``firstOffset <
  upper bound``, taken from the segment holding the fetch offset onwards (a marker is
  never in an earlier segment than the data it aborts). The search stops at the first
  entry whose ``lastStableOffset >= upper bound``: nothing open then reached below it, so
  no later abort can cover the range.

A torn last entry (a crash mid-append) is dropped when the file is read; an entry with an
unknown version makes the file unusable, and the index is rebuilt from the log.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path
from typing import NamedTuple

__all__ = ["AbortedTxn", "TXN_INDEX_ENTRY", "TransactionIndex", "TxnIndexCorruptError"]

log = logging.getLogger(__name__)

TXN_INDEX_ENTRY = struct.Struct(">hqqqq")
_VERSION = 0


class TxnIndexCorruptError(ValueError):
    """A ``.txnindex`` entry has an unknown version or offsets out of order."""


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def encode_entries(entries: list[AbortedTxn]) -> bytes:
    return b"".join(TXN_INDEX_ENTRY.pack(_VERSION, *e) for e in entries)


def decode_entries(data: bytes) -> list[AbortedTxn]:
    """The whole entries of a ``.txnindex`` file; a partial tail is ignored."""
    entries: list[AbortedTxn] = []
    whole = len(data) - len(data) % TXN_INDEX_ENTRY.size
    last = -1
    for pos in range(0, whole, TXN_INDEX_ENTRY.size):
        version, pid, first, last_offset, lso = TXN_INDEX_ENTRY.unpack_from(data, pos)
        if version != _VERSION:
            raise TxnIndexCorruptError(f"entry {pos // TXN_INDEX_ENTRY.size} has the unknown version {version}")
        if last_offset <= last or first > last_offset:
            raise TxnIndexCorruptError(f"entry {pos // TXN_INDEX_ENTRY.size} has offsets out of order")
        last = last_offset
        entries.append(AbortedTxn(pid, first, last_offset, lso))
    return entries


class TransactionIndex:
    """The ``.txnindex`` of one segment; entries cached in memory once read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None  # None: not read yet
        self._dirty = False

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                data = b""
            try:
                self._entries = decode_entries(data)
            except TxnIndexCorruptError as exc:
                # Only a rebuild (recovery) could restore it; answer what is safe: nothing
                # is hidden that was not aborted, so read_committed may show aborted data
                # until then. Log it loudly.
                log.error("%s: %s; aborted transactions in this segment are not filtered "
                          "until the log is recovered", self.path.name, exc)
                self._entries = []
        return self._entries

    def append(self, entry: AbortedTxn) -> None:
        entries = self.entries
        if entries and entry.last_offset <= entries[-1].last_offset:
            raise ValueError(f"{self.path.name}: aborted transaction at offset {entry.last_offset} is not "
                             f"after the last one at {entries[-1].last_offset}")
        self._write_at(len(entries) * TXN_INDEX_ENTRY.size, encode_entries([entry]))
        entries.append(entry)

    def _write_at(self, position: int, data: bytes) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, position)  # also drops a torn tail a crash left
            os.pwrite(fd, data, position)
        finally:
            os.close(fd)
        self._dirty = True

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Entries whose transaction meets [fetch_offset, upper_bound), and whether the search
        is complete (no later segment can add one)."""
        found: list[AbortedTxn] = []
        for entry in self.entries:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or after ``offset`` (the log was cut there)."""
        entries = self.entries
        keep = len(entries)
        while keep and entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep == len(entries):
            return
        del entries[keep:]
        if not entries:
            self.path.unlink(missing_ok=True)
            self._dirty = False
            return
        fd = os.open(self.path, os.O_WRONLY)
        try:
            os.ftruncate(fd, keep * TXN_INDEX_ENTRY.size)
        finally:
            os.close(fd)
        self._dirty = True

    def reset(self) -> None:
        """Forget every entry (before a rebuild)."""
        self._entries = []
        self._dirty = False
        self.path.unlink(missing_ok=True)

    def flush(self) -> None:
        if self._dirty:
            fd = self.take_dirty()
            if fd is not None:
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

    def take_dirty(self) -> int | None:
        """A descriptor to fsync (and close) when entries were written since the last fsync."""
        if not self._dirty:
            return None
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:  # truncated away meanwhile: nothing to make durable
            self._dirty = False
            return None
        self._dirty = False
        return fd

    def mark_dirty(self) -> None:
        self._dirty = True

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self._dirty = False

    def rename(self, path: Path) -> bool:
        """Move the file (if there is one) to ``path``; True if a file was moved."""
        try:
            os.replace(self.path, path)
            moved = True
        except FileNotFoundError:
            moved = False
        self.path = path
        return moved
