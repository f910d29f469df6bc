"""A bounded cache of open segment files, so open descriptors do not grow with partitions.

Every ``.log``, ``.index`` and ``.timeindex`` file of every segment is a :class:`CachedFile`:
a path plus, while it is in the cache, an open ``io.FileIO``. ``CachedFile.get()`` returns
the open file, opening it (and closing the least recently used one past the cap) when it
is not cached. The cap (``log.max.open.files``, like RocksDB's ``max_open_files``) bounds
what the logs hold open, whatever the number of partitions: 10,000 partitions fit under
``ulimit -n 1024``. Segments keep their sizes, offsets and index entries in memory, so a
file is only opened to read or write its bytes.

Rules kept here:

* The cache never closes a file someone still uses. Eviction only drops the cache's
  reference; the file closes when the last reference goes (``_SegmentFile.__del__``). A
  ``FileSlice`` waiting for ``sendfile`` and a reader in the middle of a scan hold the
  ``io.FileIO`` itself, never a bare descriptor number, so the number cannot be reused
  under them. Files pinned that way can briefly exceed the cap.
* Reopening never creates a file: a segment unlinked by retention or swapped out by the
  cleaner raises FileNotFoundError instead of coming back empty. Only a new segment's
  files are created (``create=True``), and ``forget()`` (close or delete) drops the entry.
* An evicted file may have unflushed bytes: they stay in the page cache, and Linux's
  ``fsync`` through a later descriptor writes them (it flushes the inode, not the descriptor).
* Thread-safe: the log cleaner's thread opens segments too. A hit takes no lock (an
  append asks for its segment's file with every Produce request): under the GIL the
  lookup and the LRU move are each atomic, and a file another thread evicts meanwhile
  stays open for the caller that holds it (the first rule).
"""

from __future__ import annotations

import collections
import io
import itertools
import os
import threading
from pathlib import Path

__all__ = ["DEFAULT_MAX_OPEN_FILES", "HANDLES", "CachedFile", "FileHandles"]

DEFAULT_MAX_OPEN_FILES = 400
"""Until the broker sizes it from RLIMIT_NOFILE (tools and tests that open logs directly)."""


class _SegmentFile(io.FileIO):
    """A FileIO that closes quietly when the last reference goes (the cache dropped it)."""

    def __del__(self) -> None:
        self.close()


def _no_create(path: str, flags: int) -> int:
    return os.open(path, flags & ~os.O_CREAT)


class FileHandles:
    """An LRU of open files with a cap; see the module docstring."""

    def __init__(self, max_open: int = DEFAULT_MAX_OPEN_FILES) -> None:
        self._max_open = max(1, max_open)
        self._open: collections.OrderedDict[int, _SegmentFile] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._keys = itertools.count()
        self.opened = 0  # files opened so far (a cache miss each), for metrics and tests

    @property
    def max_open(self) -> int:
        return self._max_open

    @property
    def open_count(self) -> int:
        return len(self._open)

    def resize(self, max_open: int) -> None:
        with self._lock:
            self._max_open = max(1, max_open)
            self._evict(0)

    def new_key(self) -> int:
        return next(self._keys)

    def get(self, key: int, path: Path, create: bool) -> io.FileIO:
        f = self._open.get(key)
        if f is not None and not f.closed:  # a hit, without the lock (module docstring)
            try:
                self._open.move_to_end(key)
            except KeyError:  # evicted by another thread meanwhile: still open for this caller
                pass
            return f
        # Open outside the lock: a slow open must not stall other threads' hits.
        f = _SegmentFile(path, "a+", opener=None if create else _no_create)
        with self._lock:
            self.opened += 1
            self._evict(1)
            self._open[key] = f
        return f

    def forget(self, key: int, *, close: bool = False) -> None:
        with self._lock:
            f = self._open.pop(key, None)
        if f is not None and close:
            f.close()

    def _evict(self, room: int) -> None:
        while self._open and len(self._open) + room > self._max_open:
            self._open.popitem(last=False)  # closes when its last user lets go


HANDLES = FileHandles()
"""The process's cache: the broker sizes it at start (``log.max.open.files``)."""


class CachedFile:
    """One file of a segment, opened on demand through ``HANDLES``."""

    __slots__ = ("_handles", "_key", "path")

    def __init__(self, path: Path, *, create: bool = False, handles: FileHandles | None = None) -> None:
        self.path = path
        self._handles = handles or HANDLES
        self._key = self._handles.new_key()
        if create:
            self._handles.get(self._key, path, True)

    def get(self) -> io.FileIO:
        """The open file; keep the returned object (not its fileno()) while using it."""
        handles, key = self._handles, self._key
        f = handles._open.get(key)
        if f is not None and not f.closed:  # FileHandles.get's hit, one call less (per request)
            try:
                handles._open.move_to_end(key)
            except KeyError:
                pass
            return f
        return handles.get(key, self.path, False)

    def get_or_create(self) -> io.FileIO:
        return self._handles.get(self._key, self.path, True)

    def forget(self, *, close: bool = False) -> None:
        """Drop it from the cache (``close``: close it now even if a reader holds it)."""
        self._handles.forget(self._key, close=close)

    def rename(self, target: Path) -> None:
        os.rename(self.path, target)
        self.path = target
