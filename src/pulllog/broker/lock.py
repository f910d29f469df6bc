"""The data directory's lock: one broker per data directory, as Kafka's ``<log dir>/.lock``.

Format: ``<data dir>/.lock`` holds the holder's PID as decimal text and a newline. The lock
itself is an exclusive ``fcntl.flock`` on the open file, which the kernel releases when the
holder exits however it exits (SIGKILL included), so a stale file never blocks a start; the
PID in it only names the holder in the refusal.

Invariants:

* The lock is taken before anything under the data directory is read or written (no
  recovery, no metadata file, no ``meta.properties``), and a refused start writes nothing:
  the file is opened without truncation and the PID is written only by the holder.
* ``flock`` locks belong to the open file: a second broker in the same process is refused
  too, and the lock is released by :meth:`DataDirLock.release` (after the last log is
  closed) or when the process exits.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

__all__ = ["LOCK_FILE", "DataDirInUseError", "DataDirLock"]

LOCK_FILE = ".lock"


class DataDirInUseError(Exception):
    """Another broker holds the data directory's lock; the message is one line for the operator."""


class DataDirLock:
    """An exclusive lock on one data directory; :meth:`acquire` it before touching the directory."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock at once or raise :class:`DataDirInUseError` naming the holder's PID."""
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_pid(fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            by = f"pulllog broker pid {holder}" if holder else "another pulllog broker"
            raise DataDirInUseError(
                f"data directory {self.path.parent} is in use by {by} (lock {self.path}); "
                "stop that broker first or pick another --data-dir") from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # a full disk: the lock holds all the same, the refusal just names no PID
        self._fd = fd

    def release(self) -> None:
        """Let another broker start on the directory (the file stays, as Kafka's does)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the last descriptor of the open file drops the flock


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
